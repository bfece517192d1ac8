"""Reductions over one or several axes, built on SumReduce and MaxReduce.

Min-type reductions apply an order-reversing bijection (``-x`` for floats, ``~x`` for ints),
take the max and reverse back, so they are exact for every dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import DTypeError, UnsupportedError
from ..graph import GraphTensor
from ..symbolic import as_expr, prod
from .common import axis_positions, cast, fill_expr, full, norm_axes, norm_axis, prim
from .elementwise import div, eq, exp2, log2, logical_not, mul, order_reverse, sqrt, sub, where
from .registry import hl_op

Dim = int | Sequence[int] | None


def _keepdim(out: GraphTensor, in_shape: tuple, axes: list[int]) -> GraphTensor:
    shape = [as_expr(1) if k in axes else d for k, d in enumerate(in_shape)]
    return out.with_view(out.st.reshape(shape))


def _reduce(x: GraphTensor, op: str, axes: list[int], keepdim: bool) -> GraphTensor:
    out = x
    for a in sorted(axes, reverse=True):
        out = prim(op, out, arg=a)
    if keepdim:
        out = _keepdim(out, x.shape, axes)
    return out


@hl_op(torch="torch.sum", category="reduce")
def sum(x: GraphTensor, dim: Dim = None, keepdim: bool = False, dtype: DType | None = None) -> GraphTensor:  # noqa: A001
    """Sum; bool and integer inputs accumulate in int64 (as in PyTorch)."""
    axes = norm_axes(dim, x.ndim, "sum")
    if dtype is not None:
        x = cast(x, dtype)
    elif not x.dtype.is_float:
        x = cast(x, dt.int64)
    return _reduce(x, "SumReduce", axes, keepdim)


@hl_op(torch="torch.amax", category="reduce")
def amax(x: GraphTensor, dim: Dim = None, keepdim: bool = False) -> GraphTensor:
    return _reduce(x, "MaxReduce", norm_axes(dim, x.ndim, "amax"), keepdim)


@hl_op(torch="torch.amin", category="reduce")
def amin(x: GraphTensor, dim: Dim = None, keepdim: bool = False) -> GraphTensor:
    return order_reverse(amax(order_reverse(x), dim, keepdim))


class ValuesIndices(NamedTuple):
    values: GraphTensor
    indices: GraphTensor


@hl_op(torch="torch.max", category="reduce")
def max(x: GraphTensor, dim: int | None = None, keepdim: bool = False):  # noqa: A001
    """``max(x)`` is the overall maximum; ``max(x, dim)`` returns (values, indices) as in PyTorch."""
    if dim is None:
        return amax(x)
    return ValuesIndices(amax(x, dim, keepdim), argmax(x, dim, keepdim))


@hl_op(torch="torch.min", category="reduce")
def min(x: GraphTensor, dim: int | None = None, keepdim: bool = False):  # noqa: A001
    if dim is None:
        return amin(x)
    return ValuesIndices(amin(x, dim, keepdim), argmin(x, dim, keepdim))


def _count(x: GraphTensor, axes: list[int]) -> object:
    return prod([x.shape[a] for a in axes])


@hl_op(torch="torch.mean", category="reduce")
def mean(x: GraphTensor, dim: Dim = None, keepdim: bool = False) -> GraphTensor:
    if not x.dtype.is_float:
        raise DTypeError(f"mean: needs a floating-point input, got {x.dtype.name} (cast it first)")
    axes = norm_axes(dim, x.ndim, "mean")
    s = _reduce(x, "SumReduce", axes, keepdim)
    n = _count(x, axes)
    return div(s, fill_expr(x.graph, n, s.shape, x.dtype))


@hl_op(torch="torch.var", category="reduce")
def var(x: GraphTensor, dim: Dim = None, correction: int = 1, keepdim: bool = False) -> GraphTensor:
    """Variance with Bessel's ``correction`` (1 = unbiased, PyTorch's default)."""
    axes = norm_axes(dim, x.ndim, "var")
    mu = mean(x, axes, keepdim=True)
    d = sub(x, mu)
    s = _reduce(mul(d, d), "SumReduce", axes, keepdim)
    n = as_expr(_count(x, axes)) - correction
    return div(s, fill_expr(x.graph, n, s.shape, x.dtype))


@hl_op(torch="torch.std", category="reduce")
def std(x: GraphTensor, dim: Dim = None, correction: int = 1, keepdim: bool = False) -> GraphTensor:
    return sqrt(var(x, dim, correction=correction, keepdim=keepdim))


@hl_op(torch="torch.prod", category="reduce")
def prod_(x: GraphTensor, dim: int | None = None, keepdim: bool = False) -> GraphTensor:
    """Product over one axis (or all).  A constant-size axis multiplies slices pairwise (exact as
    a tree of Muls); a symbolic axis of floats goes through log2/exp2 with sign and zero rules."""
    if dim is None:
        flat = x.reshape(-1)
        out = prod_(flat, 0)
        return out.reshape(*([1] * x.ndim)) if keepdim else out
    k = norm_axis(dim, x.ndim, "prod")
    if not x.dtype.is_float:
        x = cast(x, dt.int64)
    n = x.shape[k]
    if n.is_const and n.value <= 1024:
        if n.value == 0:
            out = full(x.graph, x.shape[:k] + x.shape[k + 1:], 1, x.dtype)
        else:
            parts = [x.narrow(k, i, 1) for i in range(n.value)]
            while len(parts) > 1:
                nxt = [prim("Mul", parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
                if len(parts) % 2:
                    nxt.append(parts[-1])
                parts = nxt
            out = parts[0].squeeze(k)
    else:
        if not x.dtype.is_float:
            raise UnsupportedError("prod: integer products over a symbolic-size axis are not supported")
        from .elementwise import abs as abs_
        from .elementwise import lt

        mag = exp2(sum(log2(abs_(x)), k))
        negs = sum(cast(lt(x, 0.0), dt.int64), k)
        odd = eq(prim("Mod", negs, full(x.graph, negs.shape, 2, dt.int64)), 1)
        out = where(odd, mul(mag, -1.0), mag)
    if keepdim:
        out = out.unsqueeze(k)
    return out


@hl_op(torch="torch.all", category="reduce")
def all(x: GraphTensor, dim: Dim = None, keepdim: bool = False) -> GraphTensor:  # noqa: A001
    b = x if x.dtype.is_bool else logical_not(eq(x, 0))
    return amin(b, dim, keepdim)


@hl_op(torch="torch.any", category="reduce")
def any(x: GraphTensor, dim: Dim = None, keepdim: bool = False) -> GraphTensor:  # noqa: A001
    b = x if x.dtype.is_bool else logical_not(eq(x, 0))
    return amax(b, dim, keepdim)


def _arg_extreme(x: GraphTensor, dim: int | None, keepdim: bool, op: str) -> GraphTensor:
    if dim is None:
        out = _arg_extreme(x.reshape(-1), 0, False, op)
        return out.reshape(*([1] * x.ndim)) if keepdim else out
    k = norm_axis(dim, x.ndim, op)
    ext = amax(x, k, keepdim=True) if op == "argmax" else amin(x, k, keepdim=True)
    hit = eq(x, ext.expand(*x.shape))
    if x.dtype.is_float:  # NaN counts as the extreme (PyTorch): the first NaN wins
        from .elementwise import isnan, logical_or

        hit = logical_or(hit, isnan(x))
    pos = axis_positions(x, k)
    big = fill_expr(x.graph, x.shape[k], x.shape, dt.int64)
    # hit ? pos : big in int64 arithmetic (exact): element-wise, so it joins the reduction's region
    # (``where`` is a Scatter, a kernel of its own: a decode step's argmax took six launches)
    cand = big + mul(sub(pos, big), cast(hit, dt.int64))
    return amin(cand, k, keepdim)


@hl_op(torch="torch.argmax", category="reduce")
def argmax(x: GraphTensor, dim: int | None = None, keepdim: bool = False) -> GraphTensor:
    """Index of the first maximum (int64), as in PyTorch."""
    return _arg_extreme(x, dim, keepdim, "argmax")


@hl_op(torch="torch.argmin", category="reduce")
def argmin(x: GraphTensor, dim: int | None = None, keepdim: bool = False) -> GraphTensor:
    return _arg_extreme(x, dim, keepdim, "argmin")
