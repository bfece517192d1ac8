"""The ATen -> lightspeed translation table: one row per supported ATen overload.

``ATEN_TABLE`` maps an overload's name (``"aten.add.Tensor"``, as ``str(torch.ops.aten.add.Tensor)``
prints it) to a translation function ``fn(cx, *args, **kwargs)``.  Arguments arrive already
translated: tensors are :class:`GraphTensor`, symbolic sizes are :class:`Expr`, everything else (ints,
floats, lists, dtypes) as PyTorch passed it.  A function returns a GraphTensor, a tuple of them
(multi-output ops) or a plain value.  The translator casts each result to the dtype PyTorch's
shape propagation recorded for the node, so a row only has to get the values right.

``DECOMPOSITIONS`` is the table AOTAutograd (and ``torch.export``) lowers with before translation:
PyTorch's core-ATen decompositions plus a few more, minus scaled_dot_product_attention, which stays
one op and is translated to ``ls.scaled_dot_product_attention`` (its primitives; no rule matches
attention as a whole yet: the fused attention kernels of the decode and prefill issues will).

The op-suite tests (``tests/torch_backend/test_aten_ops.py``) iterate over this table and fail for a row
without samples.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from .. import dtypes as dt
from .. import hl as ls
from ..dtypes import DType
from ..errors import DTypeError, UnsupportedError
from ..graph import Graph, GraphTensor
from ..hl.common import broadcast_shapes, cast, fill_expr, full, prim
from ..shape import unflatten_index
from ..symbolic import INDEX_VAR, Expr, as_expr, const, prod, sym
from .convert import ls_dtype, torch_result_type

__all__ = ["ATEN_TABLE", "Ctx", "decompositions"]


class Ctx:
    """What a translation function sees besides its arguments: the graph, and what PyTorch's shape
    propagation recorded for the node (``meta``: a fake tensor, a tuple of them, or a value)."""

    def __init__(self, graph: Graph, meta: Any = None, used_outputs: frozenset[int] | None = None,
                 op: str = ""):
        self.g = graph
        self.meta = meta
        self.used_outputs = used_outputs
        self.op = op

    @property
    def out_dtype(self) -> DType:
        m = self.meta[0] if isinstance(self.meta, (tuple, list)) else self.meta
        if not isinstance(m, torch.Tensor):
            raise UnsupportedError(f"{self.op}: no tensor metadata recorded for the node")
        return ls_dtype(m.dtype)

    def uses(self, i: int) -> bool:
        """Whether output ``i`` of a multi-output op is read by the graph (unknown: assume yes)."""
        return self.used_outputs is None or i in self.used_outputs

    def tensor(self, v: Any, dtype: DType | None = None) -> GraphTensor:
        """A tensor operand from a GraphTensor, a Python scalar or a symbolic size (a 0-d tensor)."""
        if isinstance(v, GraphTensor):
            return v if dtype is None else cast(v, dtype)
        if isinstance(v, Expr):
            d = dtype or dt.int64
            return fill_expr(self.g, v, (), d) if not v.is_const else self.g.constant(v.value, d)
        if isinstance(v, (bool, int, float, np.generic)):
            return self.g.constant(v, dtype or dt.scalar_dtype(v))
        raise UnsupportedError(f"{self.op}: cannot use {type(v).__name__} {v!r} as a tensor operand")

    def operand(self, v: Any, dtype: DType) -> Any:
        """An operand of an element-wise op computed in ``dtype``: tensors are cast, symbolic sizes
        become 0-d tensors, Python scalars stay scalars (the op makes constants of ``dtype``)."""
        if isinstance(v, GraphTensor):
            return cast(v, dtype)
        if isinstance(v, Expr):
            return v.value if v.is_const else fill_expr(self.g, v, (), dtype)
        return v


Fn = Callable[..., Any]


# ====================================================================== helpers
def _dims(dim: Any) -> list[int] | None:
    """ATen's reduction dims: None or [] mean all dims."""
    if dim is None:
        return None
    if isinstance(dim, int):
        return [dim]
    dim = list(dim)
    return dim or None


def _opt_dtype(dtype: Any) -> DType | None:
    return None if dtype is None else ls_dtype(dtype)


def _as_float(x: GraphTensor) -> GraphTensor:
    return x if x.dtype.is_float else cast(x, dt.float32)


def _upcast(x: GraphTensor) -> GraphTensor:
    """float16/bfloat16 math in float32 (PyTorch's kernels accumulate norms in float32)."""
    return cast(x, dt.float32) if x.dtype.is_float and x.dtype.itemsize < 4 else x


def _axis(d: int, ndim: int) -> int:
    return d % max(ndim, 1)


def _size_arg(v: Any) -> Any:
    return v.value if isinstance(v, Expr) and v.is_const else v


def _ints(vals: Any) -> list[Any]:
    return [_size_arg(v) for v in (vals if isinstance(vals, (list, tuple)) else [vals])]


def unary(fn: Fn) -> Fn:
    def tr(cx: Ctx, x: GraphTensor) -> GraphTensor:
        return fn(x)
    tr.__doc__ = f"ls.{getattr(fn, '__name__', fn)}"
    return tr


def float_unary(fn: Fn) -> Fn:
    """A float function; integer inputs compute in float32 as in PyTorch."""
    def tr(cx: Ctx, x: GraphTensor) -> GraphTensor:
        return fn(_as_float(x))
    tr.__doc__ = f"ls.{getattr(fn, '__name__', fn)}"
    return tr


def binary(fn: Fn) -> Fn:
    """An element-wise op of two operands promoted as ``torch.result_type`` does."""
    def tr(cx: Ctx, a: Any, b: Any, **kw: Any) -> GraphTensor:
        rdt = torch_result_type(a, b)
        return fn(cx.operand(a, rdt), cx.operand(b, rdt), **kw)
    tr.__doc__ = f"ls.{getattr(fn, '__name__', fn)}"
    return tr


def identity(cx: Ctx, x: GraphTensor, *args: Any, **kwargs: Any) -> GraphTensor:
    """The value itself: graphs are functional, so copies and aliases are the same value."""
    return x


def noop(cx: Ctx, *args: Any, **kwargs: Any) -> None:
    """Runtime assertions about sizes: dynamo's guards already hold them."""
    return None


def _assert_async(cx: Ctx, *args: Any, **kwargs: Any) -> None:
    """Checks of tensor values (e.g. one_hot's index range) are dropped: a lazy graph cannot raise
    mid-run, and valid inputs pass them anyway (inductor drops them too by default)."""
    return None


# ====================================================================== arithmetic and math
def _add(cx: Ctx, a: Any, b: Any, alpha: Any = 1) -> GraphTensor:
    rdt = torch_result_type(a, b)
    x, y = cx.operand(a, rdt), cx.operand(b, rdt)
    return ls.add(x, _scale(y, alpha))


def _sub(cx: Ctx, a: Any, b: Any, alpha: Any = 1) -> GraphTensor:
    rdt = torch_result_type(a, b)
    x, y = cx.operand(a, rdt), cx.operand(b, rdt)
    return ls.sub(x, _scale(y, alpha))


def _rsub(cx: Ctx, a: Any, b: Any, alpha: Any = 1) -> GraphTensor:
    return _sub(cx, b, a, alpha)


def _scale(x: GraphTensor, s: Any) -> GraphTensor:
    """``x * alpha`` for add/sub's ``alpha``: the default alpha=1 adds no node."""
    return x if isinstance(s, (int, float)) and not isinstance(s, bool) and s == 1 else ls.mul(x, s)


def _mul(cx: Ctx, a: Any, b: Any) -> GraphTensor:
    # a multiplication by one is left to the e-graph's copy-elimination rule, like any other graph's
    rdt = torch_result_type(a, b)
    return ls.mul(cx.operand(a, rdt), cx.operand(b, rdt))


def _div(cx: Ctx, a: Any, b: Any, rounding_mode: str | None = None) -> GraphTensor:
    rdt = torch_result_type(a, b)
    return ls.div(cx.operand(a, rdt), cx.operand(b, rdt), rounding_mode=rounding_mode)


def _pow(cx: Ctx, a: Any, b: Any) -> GraphTensor:
    rdt = torch_result_type(a, b)
    if isinstance(b, (int, float)) and not isinstance(b, bool) and isinstance(a, GraphTensor):
        return ls.pow(cast(a, rdt), b)  # integer exponents stay exact repeated products
    return ls.pow(cx.operand(a, rdt), cx.operand(b, rdt))


def _log10(x: GraphTensor) -> GraphTensor:
    return ls.mul(ls.log(x), 1.0 / math.log(10.0))


def _sinh(x: GraphTensor) -> GraphTensor:
    return ls.mul(ls.sub(ls.exp(x), ls.exp(ls.neg(x))), 0.5)


def _cosh(x: GraphTensor) -> GraphTensor:
    return ls.mul(ls.add(ls.exp(x), ls.exp(ls.neg(x))), 0.5)


def _round(cx: Ctx, x: GraphTensor) -> GraphTensor:
    """Round half to even: floor, then the fraction (exact for floats) decides; ties go to the even
    neighbour (r + r mod 2)."""
    if not x.dtype.is_float:
        return x
    r = ls.floor(x)
    d = ls.sub(x, r)
    tie = ls.add(r, ls.remainder(r, 2.0))
    return ls.where(ls.gt(d, 0.5), ls.add(r, 1.0), ls.where(ls.lt(d, 0.5), r, tie))


def _bitwise(name: str) -> Fn:
    logical = {"and": ls.logical_and, "or": ls.logical_or, "xor": ls.logical_xor}[name]

    def tr(cx: Ctx, a: Any, b: Any) -> GraphTensor:
        rdt = torch_result_type(a, b)
        if not rdt.is_bool:
            raise UnsupportedError(f"bitwise_{name} of {rdt.name} tensors (only bool tensors are supported)")
        return logical(cx.operand(a, rdt), cx.operand(b, rdt))
    tr.__doc__ = f"ls.logical_{name} (bool tensors)"
    return tr


def _bitwise_not(cx: Ctx, x: GraphTensor) -> GraphTensor:
    if x.dtype.is_bool:
        return ls.logical_not(x)
    if not x.dtype.is_int:
        raise DTypeError(f"bitwise_not of a {x.dtype.name} tensor")
    return ls.sub(ls.neg(x), 1)  # two's complement: ~x == -x - 1, exact with wrapping


def _where(cx: Ctx, cond: GraphTensor, a: Any, b: Any) -> GraphTensor:
    rdt = torch_result_type(a, b)
    return ls.where(cond, cx.operand(a, rdt), cx.operand(b, rdt))


def _clamp(cx: Ctx, x: GraphTensor, min: Any = None, max: Any = None) -> GraphTensor:  # noqa: A002
    rdt = torch_result_type(x, *(v for v in (min, max) if v is not None))
    lo = cx.operand(min, rdt) if min is not None else None
    hi = cx.operand(max, rdt) if max is not None else None
    out = cast(x, rdt)
    if lo is not None:
        out = ls.maximum(out, lo)
    if hi is not None:
        out = ls.minimum(out, hi)
    return out


def _clamp_min(cx: Ctx, x: GraphTensor, min: Any) -> GraphTensor:  # noqa: A002
    return _clamp(cx, x, min=min)


def _clamp_max(cx: Ctx, x: GraphTensor, max: Any) -> GraphTensor:  # noqa: A002
    return _clamp(cx, x, max=max)


def _hardtanh(cx: Ctx, x: GraphTensor, min_val: float = -1.0, max_val: float = 1.0) -> GraphTensor:
    return ls.clamp(x, min_val, max_val)


def _leaky_relu(cx: Ctx, x: GraphTensor, negative_slope: float = 0.01) -> GraphTensor:
    return ls.where(ls.gt(x, 0), x, _scale(x, negative_slope))


def _elu(cx: Ctx, x: GraphTensor, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0) -> GraphTensor:
    neg = _scale(ls.expm1(_scale(x, input_scale)), alpha * scale)
    return ls.where(ls.gt(x, 0), _scale(x, scale), neg)


def _gelu(cx: Ctx, x: GraphTensor, approximate: str = "none") -> GraphTensor:
    return ls.gelu(x, approximate=approximate)


def _hypot(cx: Ctx, a: Any, b: Any) -> GraphTensor:
    rdt = torch_result_type(a, b)
    x, y = cx.operand(a, rdt), cx.operand(b, rdt)
    return ls.sqrt(ls.add(ls.mul(x, x), ls.mul(y, y)))


def _masked_fill(cx: Ctx, x: GraphTensor, mask: GraphTensor, value: Any) -> GraphTensor:
    return ls.masked_fill(x, mask, cx.tensor(value, x.dtype) if isinstance(value, (GraphTensor, Expr)) else value)


# ====================================================================== reductions
def _sum(cx: Ctx, x: GraphTensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> GraphTensor:
    return ls.sum(x, _dims(dim), keepdim, dtype=_opt_dtype(dtype))


def _mean(cx: Ctx, x: GraphTensor, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> GraphTensor:
    if dtype is not None:
        x = cast(x, ls_dtype(dtype))
    return ls.mean(x, _dims(dim), keepdim)


def _amax(cx: Ctx, x: GraphTensor, dim: Any = (), keepdim: bool = False) -> GraphTensor:
    return ls.amax(x, _dims(dim), keepdim)


def _amin(cx: Ctx, x: GraphTensor, dim: Any = (), keepdim: bool = False) -> GraphTensor:
    return ls.amin(x, _dims(dim), keepdim)


def _any(cx: Ctx, x: GraphTensor, dim: Any = None, keepdim: bool = False) -> GraphTensor:
    return ls.any(x, _dims(dim), keepdim)


def _all(cx: Ctx, x: GraphTensor, dim: Any = None, keepdim: bool = False) -> GraphTensor:
    return ls.all(x, _dims(dim), keepdim)


def _argmax(cx: Ctx, x: GraphTensor, dim: int | None = None, keepdim: bool = False) -> GraphTensor:
    return ls.argmax(x, dim, keepdim)


def _argmin(cx: Ctx, x: GraphTensor, dim: int | None = None, keepdim: bool = False) -> GraphTensor:
    return ls.argmin(x, dim, keepdim)


def _max_dim(cx: Ctx, x: GraphTensor, dim: int, keepdim: bool = False) -> tuple:
    return tuple(ls.max(x, dim, keepdim))


def _min_dim(cx: Ctx, x: GraphTensor, dim: int, keepdim: bool = False) -> tuple:
    return tuple(ls.min(x, dim, keepdim))


def _max_all(cx: Ctx, x: GraphTensor) -> GraphTensor:
    return ls.amax(x)


def _min_all(cx: Ctx, x: GraphTensor) -> GraphTensor:
    return ls.amin(x)


def _prod(cx: Ctx, x: GraphTensor, dim: int | None = None, keepdim: bool = False, *, dtype: Any = None) -> GraphTensor:
    if dtype is not None:
        x = cast(x, ls_dtype(dtype))
    return ls.prod(x, dim, keepdim)


def _correction(correction: Any, unbiased: Any = None) -> float:
    if correction is not None:
        return correction
    return 1 if unbiased is None or unbiased else 0


def _var(cx: Ctx, x: GraphTensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> GraphTensor:
    return ls.var(_upcast(x), _dims(dim), correction=_correction(correction), keepdim=keepdim)


def _var_dim(cx: Ctx, x: GraphTensor, dim: Any, unbiased: bool = True, keepdim: bool = False) -> GraphTensor:
    return ls.var(_upcast(x), _dims(dim), correction=_correction(None, unbiased), keepdim=keepdim)


def _std(cx: Ctx, x: GraphTensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> GraphTensor:
    return ls.std(_upcast(x), _dims(dim), correction=_correction(correction), keepdim=keepdim)


def _var_mean(cx: Ctx, x: GraphTensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> tuple:
    x = _upcast(x)
    return (ls.var(x, _dims(dim), correction=_correction(correction), keepdim=keepdim),
            ls.mean(x, _dims(dim), keepdim))


def _cumsum(cx: Ctx, x: GraphTensor, dim: int, *, dtype: Any = None) -> GraphTensor:
    return ls.cumsum(x, dim, dtype=_opt_dtype(dtype))


def _cumprod(cx: Ctx, x: GraphTensor, dim: int, *, dtype: Any = None) -> GraphTensor:
    return ls.cumprod(x, dim, dtype=_opt_dtype(dtype))


def _cummax(cx: Ctx, x: GraphTensor, dim: int) -> tuple:
    return tuple(ls.cummax(x, dim))


def _cummin(cx: Ctx, x: GraphTensor, dim: int) -> tuple:
    return tuple(ls.cummin(x, dim))


def _logsumexp(cx: Ctx, x: GraphTensor, dim: Any, keepdim: bool = False) -> GraphTensor:
    x = _as_float(x)
    axes = _dims(dim)
    m = ls.amax(x, axes, keepdim=True)
    m = ls.where(ls.isinf(m), ls.zeros_like(m), m)  # all -inf (or +inf) rows: no shift
    out = ls.add(ls.log(ls.sum(ls.exp(ls.sub(x, m)), axes, keepdim=True)), m)
    return out if keepdim else ls.squeeze(out, axes if axes is not None else list(range(x.ndim)))


def _vector_norm(cx: Ctx, x: GraphTensor, ord: float = 2, dim: Any = None, keepdim: bool = False,  # noqa: A002
                 *, dtype: Any = None) -> GraphTensor:
    if dtype is not None:
        x = cast(x, ls_dtype(dtype))
    a = ls.abs(_as_float(x))
    axes = _dims(dim)
    if ord == 2:
        return ls.sqrt(ls.sum(ls.mul(a, a), axes, keepdim))
    if ord == 1:
        return ls.sum(a, axes, keepdim)
    if ord == float("inf"):
        return ls.amax(a, axes, keepdim)
    if ord == float("-inf"):
        return ls.amin(a, axes, keepdim)
    if ord == 0:
        return ls.sum(cast(ls.ne(a, 0), a.dtype), axes, keepdim)
    return ls.pow(ls.sum(ls.pow(a, ord), axes, keepdim), 1.0 / ord)


def _softmax(cx: Ctx, x: GraphTensor, dim: int, half_to_float: bool = False) -> GraphTensor:
    return ls.softmax(cast(x, dt.float32) if half_to_float else x, dim)


def _log_softmax(cx: Ctx, x: GraphTensor, dim: int, half_to_float: bool = False) -> GraphTensor:
    return ls.log_softmax(cast(x, dt.float32) if half_to_float else x, dim)


def _safe_softmax(cx: Ctx, x: GraphTensor, dim: int, dtype: Any = None) -> GraphTensor:
    """Softmax whose rows of all -inf give zeros (scaled_dot_product_attention's math path)."""
    if dtype is not None:
        x = cast(x, ls_dtype(dtype))
    out = ls.softmax(x, dim)
    dead = ls.all(ls.eq(x, float("-inf")), dim, keepdim=True)
    return ls.where(dead, ls.zeros_like(out), out)


# ====================================================================== linear algebra and nn
def _mm(cx: Ctx, a: GraphTensor, b: GraphTensor) -> GraphTensor:
    return ls.matmul(a, b)


def _addmm(cx: Ctx, bias: GraphTensor, a: GraphTensor, b: GraphTensor, *, beta: Any = 1,
           alpha: Any = 1) -> GraphTensor:
    out = _scale(ls.matmul(a, b), alpha)
    if beta == 0:
        return out
    return ls.add(out, _scale(bias, beta))


def _baddbmm(cx: Ctx, bias: GraphTensor, a: GraphTensor, b: GraphTensor, *, beta: Any = 1,
             alpha: Any = 1) -> GraphTensor:
    return _addmm(cx, bias, a, b, beta=beta, alpha=alpha)


def _convolution(cx: Ctx, x: GraphTensor, weight: GraphTensor, bias: GraphTensor | None, stride: Sequence[int],
                 padding: Sequence[int], dilation: Sequence[int], transposed: bool, output_padding: Sequence[int],
                 groups: int) -> GraphTensor:
    if transposed:
        raise UnsupportedError("transposed convolution (conv_transpose) is not supported")
    fn = {3: ls.conv1d, 4: ls.conv2d, 5: ls.conv3d}.get(weight.ndim)
    if fn is None:
        raise UnsupportedError(f"convolution with a rank-{weight.ndim} weight")
    return fn(x, weight, bias, stride=tuple(stride), padding=tuple(padding), dilation=tuple(dilation), groups=groups)


def _native_layer_norm(cx: Ctx, x: GraphTensor, normalized_shape: Sequence[Any], weight: GraphTensor | None,
                       bias: GraphTensor | None, eps: float) -> tuple:
    xf = _upcast(x)
    axes = list(range(x.ndim - len(normalized_shape), x.ndim))
    mu = ls.mean(xf, axes, keepdim=True)
    rstd = ls.rsqrt(ls.add(ls.var(xf, axes, correction=0, keepdim=True), eps))
    out = ls.mul(ls.sub(xf, mu), rstd)
    if weight is not None:
        out = ls.mul(out, _upcast(weight))
    if bias is not None:
        out = ls.add(out, _upcast(bias))
    return cast(out, x.dtype), mu, rstd


def _native_group_norm(cx: Ctx, x: GraphTensor, weight: GraphTensor | None, bias: GraphTensor | None, n: Any,
                       c: Any, hxw: Any, group: int, eps: float) -> tuple:
    xf = _upcast(x)
    xs = ls.reshape(xf, n, group, -1)
    mu = ls.mean(xs, -1, keepdim=True)
    rstd = ls.rsqrt(ls.add(ls.var(xs, -1, correction=0, keepdim=True), eps))
    out = ls.reshape(ls.mul(ls.sub(xs, mu), rstd), *x.shape)
    bshape = (x.shape[1],) + (1,) * (x.ndim - 2)
    if weight is not None:
        out = ls.mul(out, ls.reshape(_upcast(weight), *bshape))
    if bias is not None:
        out = ls.add(out, ls.reshape(_upcast(bias), *bshape))
    return cast(out, x.dtype), ls.reshape(mu, n, group), ls.reshape(rstd, n, group)


def _empty_stats(cx: Ctx, x: GraphTensor) -> GraphTensor:
    return full(cx.g, (0,), 0, x.dtype)


def _batch_norm_eval(cx: Ctx, x: GraphTensor, weight: GraphTensor | None, bias: GraphTensor | None,
                     running_mean: GraphTensor | None, running_var: GraphTensor | None, momentum: float,
                     eps: float) -> tuple:
    out = ls.batch_norm(x, running_mean, running_var, weight, bias, training=False, eps=eps)
    # the saved statistics serve training: empty on the CPU, per channel on a GPU; unread in inference
    return out, *(_empty_stats(cx, x) if cx.uses(i) else None for i in (1, 2))


def _native_batch_norm(cx: Ctx, x: GraphTensor, weight: GraphTensor | None, bias: GraphTensor | None,
                       running_mean: GraphTensor | None, running_var: GraphTensor | None, training: bool,
                       momentum: float, eps: float) -> tuple:
    if training:
        raise UnsupportedError("batch norm in training mode (batch statistics, running-stat updates); call "
                               "model.eval() first")
    return _batch_norm_eval(cx, x, weight, bias, running_mean, running_var, momentum, eps)


def _max_pool2d_with_indices(cx: Ctx, x: GraphTensor, kernel_size: Sequence[int], stride: Sequence[int] = (),
                             padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False) -> tuple:
    if cx.uses(1):
        raise UnsupportedError("max_pool2d's indices output (return_indices=True) is not supported")
    out = ls.max_pool2d(x, list(kernel_size), list(stride) or None, list(_ints(padding)), list(_ints(dilation)),
                        ceil_mode)
    return out, None


def _avg_pool2d(cx: Ctx, x: GraphTensor, kernel_size: Sequence[int], stride: Sequence[int] = (), padding: Any = 0,
                ceil_mode: bool = False, count_include_pad: bool = True,
                divisor_override: int | None = None) -> GraphTensor:
    return ls.avg_pool2d(x, list(kernel_size), list(stride) or None, list(_ints(padding)), ceil_mode,
                         count_include_pad, divisor_override)


def _adaptive_avg_pool2d(cx: Ctx, x: GraphTensor, output_size: Sequence[Any]) -> GraphTensor:
    """Windows of equal size when each input size is a multiple of the output size (the common
    case: global pooling, halving); other sizes need per-window bounds and are not supported."""
    oh, ow = (_size_arg(v) for v in output_size)
    h, w = (_size_arg(v) for v in x.shape[-2:])
    if (oh, ow) == (1, 1):
        return ls.mean(x, [-2, -1], keepdim=True)
    if not all(isinstance(v, int) for v in (oh, ow, h, w)) or h % oh or w % ow:
        raise UnsupportedError(f"adaptive_avg_pool2d from {tuple(x.shape[-2:])} to {tuple(output_size)}: only "
                               "input sizes that are multiples of the output size are supported")
    k = (h // oh, w // ow)
    return ls.avg_pool2d(x, list(k), list(k))


def _constant_pad_nd(cx: Ctx, x: GraphTensor, pad: Sequence[Any], value: float = 0) -> GraphTensor:
    return ls.pad(x, list(pad), value=value)


def _embedding(cx: Ctx, weight: GraphTensor, indices: GraphTensor, padding_idx: int = -1,
               scale_grad_by_freq: bool = False, sparse: bool = False) -> GraphTensor:
    return ls.embedding(indices, weight)


def _sdpa(cx: Ctx, q: GraphTensor, k: GraphTensor, v: GraphTensor, attn_mask: GraphTensor | None = None,
          dropout_p: float = 0.0, is_causal: bool = False, *, scale: float | None = None,
          enable_gqa: bool = False) -> GraphTensor:
    # PyTorch's shape propagation for attention does not record that the key and value lengths (and
    # the mask's) agree, so a growing cache can carry one symbol per tensor for one length; the kernel
    # needs them equal at run time, so v and the mask are read through k's length
    klen = k.shape[-2]
    if v.shape[-2] != klen:
        v = ls.narrow(v, -2, 0, klen)
    if attn_mask is not None and attn_mask.shape[-1] not in (klen, 1):
        attn_mask = ls.narrow(attn_mask, -1, 0, klen)
    if attn_mask is not None and attn_mask.ndim >= 2 and attn_mask.shape[-2] not in (q.shape[-2], 1):
        attn_mask = ls.narrow(attn_mask, -2, 0, q.shape[-2])
    gqa = enable_gqa or (q.ndim >= 3 and k.ndim >= 3 and q.shape[-3] != k.shape[-3])
    return ls.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale, gqa)


def _sdpa_flash_cpu(cx: Ctx, q: GraphTensor, k: GraphTensor, v: GraphTensor, dropout_p: float = 0.0,
                    is_causal: bool = False, *, attn_mask: GraphTensor | None = None,
                    scale: float | None = None) -> tuple:
    """CPU flash attention: (output, logsumexp [B, H, L] in float32, computed only where a later
    op reads it: the backward of training)."""
    if not cx.uses(1):
        return _sdpa(cx, q, k, v, attn_mask, dropout_p, is_causal, scale=scale), None
    # training: the output from the same scores as the logsumexp the backward reads
    s = _sdpa_scores(q, k, attn_mask, is_causal, scale, dropout_p)
    m = s.amax(-1, keepdim=True)
    lse = ls.log(ls.exp(s - m).sum(-1, keepdim=True)) + m
    out = ls.matmul(ls.exp(s - lse), _heads_like(v, q))
    return out, cast(lse.squeeze(-1), dt.float32)


def _sdpa_scores(q: GraphTensor, k: GraphTensor, attn_mask: GraphTensor | None, is_causal: bool,
                 scale: float | None, dropout_p: float) -> GraphTensor:
    """The scaled scores of attention, the mask applied (-inf where a key is blocked)."""
    if dropout_p:
        raise UnsupportedError("attention with dropout in training")
    k = _heads_like(k, q)
    sc = scale if scale is not None else 1.0 / math.sqrt(int(q.shape[-1]))
    s = ls.matmul(q, ls.transpose(k, -1, -2)) * sc
    ninf = full(s.graph, s.shape, float("-inf"), s.dtype)
    if is_causal:  # key j after query i (top-left aligned, as PyTorch)
        lq, lk = s.shape[-2], s.shape[-1]
        z = sym(INDEX_VAR)
        after = cast(s.graph.iota((z % lk).gt((z // lk) % lq), s.shape, dt.int64), dt.bool_)
        s = ls.where(after, ninf, s)
    if attn_mask is not None:
        s = ls.where(attn_mask, s, ninf) if attn_mask.dtype.is_bool else s + attn_mask
    return s


def _heads_like(k: GraphTensor, q: GraphTensor) -> GraphTensor:
    """Keys (or values) [B, Hkv, L, d] repeated to the queries' heads [B, H, L, d] (grouped-query
    attention: query head h reads KV head h // (H / Hkv))."""
    if k.ndim < 3 or k.shape[-3] == q.shape[-3]:
        return k
    h, hkv = int(q.shape[-3]), int(k.shape[-3])
    lead = tuple(k.shape[:-3])
    wide = k.unsqueeze(-3).expand(*lead, hkv, h // hkv, *k.shape[-2:])
    return wide.reshape(*lead, h, *k.shape[-2:])


def _heads_back(d: GraphTensor, k: GraphTensor) -> GraphTensor:
    """The gradient of :func:`_heads_like`: each KV head's query heads summed."""
    if d.ndim < 3 or d.shape[-3] == k.shape[-3]:
        return d
    h, hkv = int(d.shape[-3]), int(k.shape[-3])
    lead = tuple(d.shape[:-3])
    return d.reshape(*lead, hkv, h // hkv, *d.shape[-2:]).sum(-3)


def _sdpa_flash_cpu_backward(cx: Ctx, grad_out: GraphTensor, q: GraphTensor, k: GraphTensor, v: GraphTensor,
                             out: GraphTensor, logsumexp: GraphTensor, dropout_p: float = 0.0,
                             is_causal: bool = False, *, attn_mask: GraphTensor | None = None,
                             scale: float | None = None) -> tuple:
    """The gradients of CPU flash attention: P = exp(S - logsumexp); dV = P^T dO; dS = P * (dO V^T
    - rowsum(dO * O)); dQ = dS K * scale; dK = dS^T Q * scale."""
    sc = scale if scale is not None else 1.0 / math.sqrt(int(q.shape[-1]))
    s = _sdpa_scores(q, k, attn_mask, is_causal, scale, dropout_p)
    kq, vq = _heads_like(k, q), _heads_like(v, q)
    p = ls.exp(s - cast(logsumexp, s.dtype).unsqueeze(-1))
    dv = ls.matmul(ls.transpose(p, -1, -2), grad_out)
    dp = ls.matmul(grad_out, ls.transpose(vq, -1, -2))
    ds = p * (dp - (grad_out * out).sum(-1, keepdim=True))
    dq = ls.matmul(ds, kq) * sc
    dk = ls.matmul(ls.transpose(ds, -1, -2), q) * sc
    return dq, _heads_back(dk, k), _heads_back(dv, v)


def _sdpa_fused(n_out: int, has_bias: bool):
    """The CUDA attention kernels SDPA dispatches to on a GPU (efficient, flash, cudnn): the output
    is attention as ``_sdpa``; the other outputs (logsumexp, RNG state, debug mask) serve training,
    and reading one raises."""
    def translate(cx: Ctx, q: GraphTensor, k: GraphTensor, v: GraphTensor, *args: Any, scale: float | None = None,
                  **kwargs: Any) -> tuple:
        rest = list(args)
        bias = rest.pop(0) if has_bias else None
        if has_bias:
            rest.pop(0)  # compute_log_sumexp
        dropout_p = rest.pop(0) if rest else kwargs.get("dropout_p", 0.0)
        is_causal = rest.pop(0) if rest else kwargs.get("is_causal", False)
        for i in range(1, n_out):
            if cx.uses(i):
                raise UnsupportedError(f"output {i} of a CUDA attention kernel (logsumexp / RNG state: training)")
        return (_sdpa(cx, q, k, v, bias, dropout_p, is_causal, scale=scale), *([None] * (n_out - 1)))
    return translate


def _grouped_mm(cx: Ctx, x: GraphTensor, w: GraphTensor, offs: GraphTensor | None = None,
                bias: GraphTensor | None = None, out_dtype: Any = None) -> GraphTensor:
    """Grouped matmul (MoE experts): rows ``offs[g-1] <= r < offs[g]`` of the (S, K) input times
    expert g's (K, N) weight; rows past ``offs[-1]`` are zero.  Each row's expert is counted from
    the offsets and its weight gathered, then one batched matmul: static shapes, whatever the routing."""
    if offs is None or x.ndim != 2 or w.ndim != 3:
        raise UnsupportedError("grouped_mm other than a 2-D input, 3-D weights and offsets")
    n_groups = w.shape[0]
    rows = ls.arange(cx.g, 0, x.shape[0]).reshape(-1, 1)
    group = ls.sum(ls.le(cast(offs, dt.int64).reshape(1, -1), rows), -1)  # offsets at or before the row
    live = ls.lt(group, fill_expr(cx.g, n_groups, (), dt.int64))
    group = ls.minimum(group, fill_expr(cx.g, n_groups - 1, (), dt.int64))
    out = ls.matmul(ls.unsqueeze(cast(x, w.dtype), 1), ls.index_select(w, 0, group)).squeeze(1)
    if bias is not None:
        out = ls.add(out, ls.index_select(bias, 0, group))
    out = ls.where(ls.unsqueeze(live, -1), out, ls.zeros_like(out))
    return out if out_dtype is None else cast(out, ls_dtype(out_dtype))


def _histc(cx: Ctx, x: GraphTensor, bins: int = 100, min: Any = 0, max: Any = 0) -> GraphTensor:  # noqa: A002
    """Counts of ``x`` in ``bins`` equal bins over [min, max] (the data's range when both are 0),
    as PyTorch's CPU kernel bins them: truncate((x - min) * bins / (max - min)), max in the last
    bin, values outside the range dropped."""
    xf = ls.reshape(_as_float(x), -1)
    if min == 0 and max == 0:
        lo, hi = ls.amin(xf), ls.amax(xf)
        same = ls.eq(lo, hi)  # PyTorch widens an empty range by one on each side
        lo, hi = ls.where(same, ls.sub(lo, 1.0), lo), ls.where(same, ls.add(hi, 1.0), hi)
    else:
        lo, hi = cx.tensor(float(min), xf.dtype), cx.tensor(float(max), xf.dtype)
    pos = ls.trunc(ls.div(ls.mul(ls.sub(xf, lo), float(bins)), ls.sub(hi, lo)))
    pos = ls.minimum(pos, float(bins - 1))
    inside = ls.logical_and(ls.ge(xf, lo), ls.le(xf, hi))
    classes = cast(ls.arange(cx.g, 0, bins), xf.dtype).reshape(1, -1)
    hits = ls.logical_and(ls.eq(pos.reshape(-1, 1), classes), inside.reshape(-1, 1))
    return ls.sum(cast(hits, xf.dtype), 0)


# ====================================================================== movement
def _view(cx: Ctx, x: GraphTensor, size: Sequence[Any]) -> GraphTensor:
    return ls.reshape(x, *_ints(size))


def _permute(cx: Ctx, x: GraphTensor, dims: Sequence[int]) -> GraphTensor:
    return ls.permute(x, *dims)


def _expand(cx: Ctx, x: GraphTensor, size: Sequence[Any], *, implicit: bool = False) -> GraphTensor:
    return ls.expand(x, *_ints(size))


def _unsqueeze(cx: Ctx, x: GraphTensor, dim: int) -> GraphTensor:
    return ls.unsqueeze(x, dim)


def _squeeze(cx: Ctx, x: GraphTensor, dim: Any = None) -> GraphTensor:
    if x.ndim == 0:
        return x
    return ls.squeeze(x, dim if dim is None or isinstance(dim, int) else list(dim))


def _transpose(cx: Ctx, x: GraphTensor, dim0: int, dim1: int) -> GraphTensor:
    return ls.transpose(x, dim0, dim1) if x.ndim >= 2 else x


def _t(cx: Ctx, x: GraphTensor) -> GraphTensor:
    return ls.t(x)


def _norm_index(v: Any, size: Expr) -> Any:
    """An index that may be negative (counted from the end), as an Expr or int."""
    v = _size_arg(v)
    if isinstance(v, int) and v < 0:
        return size + v
    return v


def _slice(cx: Ctx, x: GraphTensor, dim: int = 0, start: Any = None, end: Any = None, step: int = 1) -> GraphTensor:
    k = _axis(dim, x.ndim)
    start, end = _size_arg(start), _size_arg(end)
    if isinstance(end, int) and end >= 2**62:  # INT64_MAX: "to the end"
        end = None
    idx = [slice(None)] * x.ndim
    idx[k] = slice(start, end, step)
    return x[tuple(idx)]


def _select(cx: Ctx, x: GraphTensor, dim: int, index: Any) -> GraphTensor:
    k = _axis(dim, x.ndim)
    i = _norm_index(index, x.shape[k])
    return ls.squeeze(ls.narrow(x, k, i, 1), k)


def _narrow(cx: Ctx, x: GraphTensor, dim: int, start: Any, length: Any) -> GraphTensor:
    k = _axis(dim, x.ndim)
    return ls.narrow(x, k, _norm_index(start, x.shape[k]), _size_arg(length))


def _cat(cx: Ctx, tensors: Sequence[GraphTensor], dim: int = 0) -> GraphTensor:
    # legacy: 1-D empty tensors are skipped whatever the others' rank
    ts = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or list(tensors)
    if len(ts) == 1:
        return ts[0]
    return ls.concat(ts, _axis(dim, ts[0].ndim))


def _stack(cx: Ctx, tensors: Sequence[GraphTensor], dim: int = 0) -> GraphTensor:
    return ls.stack(list(tensors), dim)


def _split_with_sizes(cx: Ctx, x: GraphTensor, split_sizes: Sequence[Any], dim: int = 0) -> list:
    k = _axis(dim, x.ndim)
    out, start = [], const(0)
    for s in split_sizes:
        out.append(ls.narrow(x, k, start, _size_arg(s)))
        start = start + as_expr(_size_arg(s))
    return out


def _split(cx: Ctx, x: GraphTensor, split_size: Any, dim: int = 0) -> list:
    return list(ls.split(x, _size_arg(split_size), dim))


def _unbind(cx: Ctx, x: GraphTensor, dim: int = 0) -> list:
    return list(ls.unbind(x, dim))


def _to_copy(cx: Ctx, x: GraphTensor, *, dtype: Any = None, **_: Any) -> GraphTensor:
    return x if dtype is None else cast(x, ls_dtype(dtype))


def _convert_element_type(cx: Ctx, x: GraphTensor, dtype: Any) -> GraphTensor:
    return cast(x, ls_dtype(dtype))


def _copy(cx: Ctx, dst: GraphTensor, src: GraphTensor, non_blocking: bool = False) -> GraphTensor:
    """dst's shape and dtype, src's values (broadcast)."""
    return ls.expand(cast(cx.tensor(src), dst.dtype), *dst.shape)


def _flip(cx: Ctx, x: GraphTensor, dims: Sequence[int]) -> GraphTensor:
    return ls.flip(x, list(dims))


def _repeat(cx: Ctx, x: GraphTensor, repeats: Sequence[Any]) -> GraphTensor:
    return ls.repeat(x, *_ints(repeats))


def _roll(cx: Ctx, x: GraphTensor, shifts: Sequence[int], dims: Sequence[int] = ()) -> GraphTensor:
    shifts, dims = list(_ints(shifts)), list(dims)
    if not dims:
        return ls.reshape(_roll(cx, ls.flatten(x), shifts, [0]), *x.shape)
    out = x
    for s, d in zip(shifts, dims):
        k = _axis(d, x.ndim)
        n = _size_arg(x.shape[k])
        if not isinstance(n, int) or not isinstance(s, int):
            raise UnsupportedError("roll over a symbolic size or by a symbolic shift")
        if n == 0 or s % n == 0:
            continue
        s %= n
        out = ls.concat([ls.narrow(out, k, n - s, s), ls.narrow(out, k, 0, n - s)], k)
    return out


def _unfold(cx: Ctx, x: GraphTensor, dimension: int, size: int, step: int) -> GraphTensor:
    return ls.unfold(x, dimension, size, step)


def _tri(fn: Fn) -> Fn:
    def tr(cx: Ctx, x: GraphTensor, diagonal: int = 0) -> GraphTensor:
        return fn(x, diagonal)
    tr.__doc__ = f"ls.{fn.__name__}"
    return tr


# ====================================================================== indexing
def _row_major_strides(shape: Sequence[Expr]) -> list[Expr]:
    return [prod(shape[k + 1:]) for k in range(len(shape))]


def _wrap(idx: GraphTensor, size: Expr) -> GraphTensor:
    """Negative indexes count from the end (PyTorch indexing)."""
    i = cast(idx, dt.int64)
    return ls.where(ls.lt(i, 0), ls.add(i, fill_expr(i.graph, size, (), dt.int64)), i)


def _advanced_positions(x: GraphTensor, indices: Sequence[GraphTensor | None], op: str
                        ) -> tuple[GraphTensor, tuple[Expr, ...]]:
    """Flat row-major positions in ``x`` of ``x[indices]`` (PyTorch advanced indexing: the index
    tensors broadcast together; their dims replace the indexed dims in place when those are adjacent,
    else they go first), and the result's shape.  Out-of-range indexes map to numel(x), a position
    Scatter skips."""
    idx = list(indices) + [None] * (x.ndim - len(indices))
    tdims = [d for d, i in enumerate(idx) if i is not None]
    if not tdims:
        raise UnsupportedError(f"{op}: no index tensors")
    for d in tdims:
        if idx[d].dtype.is_bool:
            raise UnsupportedError(f"{op}: boolean-mask indexing has a data-dependent shape; use where()")
        if not idx[d].dtype.is_int:
            raise DTypeError(f"{op}: index tensors must be integer or bool, got {idx[d].dtype.name}")
    bshape = broadcast_shapes(*(idx[d].shape for d in tdims), op=op)
    nb = len(bshape)
    adjacent = tdims == list(range(tdims[0], tdims[-1] + 1))
    first = tdims[0] if adjacent else 0
    rest = [d for d in range(x.ndim) if idx[d] is None]
    before = [d for d in rest if d < first] if adjacent else []
    after = [d for d in rest if d not in before]
    out_shape = tuple(x.shape[d] for d in before) + tuple(bshape) + tuple(x.shape[d] for d in after)
    strides = _row_major_strides(x.shape)
    coords = unflatten_index(sym(INDEX_VAR), out_shape)
    e: Expr = const(0)
    for a, d in enumerate(before):
        e = e + coords[a] * strides[d]
    for j, d in enumerate(after):
        e = e + coords[len(before) + nb + j] * strides[d]
    g = x.graph
    pos = g.iota(e, out_shape, dt.int64)
    numel = prod(x.shape)
    oob = None
    for d in tdims:
        t = _wrap(idx[d], x.shape[d])
        bad = ls.logical_or(ls.lt(t, 0), ls.logical_not(ls.lt(t, fill_expr(g, x.shape[d], (), dt.int64))))
        oob = bad if oob is None else ls.logical_or(oob, bad)
        t = ls.mul(t, fill_expr(g, strides[d], (), dt.int64)) if strides[d] != 1 else t
        pos = ls.add(pos, _place(t, bshape, len(before), out_shape))
    oob = ls.broadcast_to(_place(oob, bshape, len(before), out_shape), out_shape)
    pos = ls.where(oob, fill_expr(g, numel, (), dt.int64), pos)
    return pos, out_shape


def _place(t: GraphTensor, bshape: Sequence[Expr], at: int, out_shape: Sequence[Expr]) -> GraphTensor:
    """``t`` (broadcastable to bshape) viewed at axes ``at..at+len(bshape)`` of out_shape."""
    t = ls.broadcast_to(t, tuple(bshape)) if tuple(t.shape) != tuple(bshape) else t
    shp = [1] * at + list(bshape) + [1] * (len(out_shape) - at - len(bshape))
    return ls.expand(ls.reshape(t, *shp), *out_shape)


def _index(cx: Ctx, x: GraphTensor, indices: Sequence[GraphTensor | None]) -> GraphTensor:
    pos, _ = _advanced_positions(x, indices, "index")
    return prim("Gather", pos, x)


def _index_put(cx: Ctx, x: GraphTensor, indices: Sequence[GraphTensor | None], values: Any,
               accumulate: bool = False) -> GraphTensor:
    pos, shape = _advanced_positions(x, indices, "index_put")
    vals = ls.broadcast_to(cast(cx.tensor(values), x.dtype), shape)
    if accumulate:
        flat = ls.reshape(x, -1)
        out = ls.scatter_add(flat, 0, ls.reshape(pos, -1), ls.contiguous(ls.reshape(vals, -1)))
        return ls.reshape(out, *x.shape)
    return prim("Scatter", x, pos, vals)


def _index_select(cx: Ctx, x: GraphTensor, dim: int, index: GraphTensor) -> GraphTensor:
    if index.ndim == 0:
        index = ls.reshape(index, 1)
    if x.ndim == 0:
        return x
    return ls.index_select(x, dim, _wrap(index, x.shape[_axis(dim, x.ndim)]))


def _gather(cx: Ctx, x: GraphTensor, dim: int, index: GraphTensor, *, sparse_grad: bool = False) -> GraphTensor:
    return ls.gather(x, dim, index)


def _scatter_src(cx: Ctx, x: GraphTensor, dim: int, index: GraphTensor, src: GraphTensor) -> GraphTensor:
    return ls.scatter(x, dim, index, cast(src, x.dtype))


def _scatter_value(cx: Ctx, x: GraphTensor, dim: int, index: GraphTensor, value: Any) -> GraphTensor:
    return ls.scatter(x, dim, index, value=value)


def _scatter_add(cx: Ctx, x: GraphTensor, dim: int, index: GraphTensor, src: GraphTensor) -> GraphTensor:
    return ls.scatter_add(x, dim, index, cast(src, x.dtype))


def _scatter_reduce(cx: Ctx, x: GraphTensor, dim: int, index: GraphTensor, src: GraphTensor, reduce: str,
                    *, include_self: bool = True) -> GraphTensor:
    if reduce != "sum" or not include_self:
        raise UnsupportedError(f"scatter_reduce with reduce={reduce!r}, include_self={include_self} (only 'sum' "
                               "with include_self=True)")
    return ls.scatter_add(x, dim, index, cast(src, x.dtype))


def _index_copy(cx: Ctx, x: GraphTensor, dim: int, index: GraphTensor, source: GraphTensor) -> GraphTensor:
    return ls.index_copy(x, dim, index if index.ndim else ls.reshape(index, 1), cast(source, x.dtype))


def _index_add(cx: Ctx, x: GraphTensor, dim: int, index: GraphTensor, source: GraphTensor, *,
               alpha: Any = 1) -> GraphTensor:
    k = _axis(dim, x.ndim)
    src = cast(_scale(source, alpha), x.dtype)
    if index.ndim == 0:
        index = ls.reshape(index, 1)
    shp = [1] * x.ndim
    shp[k] = index.shape[0]
    idx = ls.expand(ls.reshape(index, *shp), *src.shape)
    return ls.scatter_add(x, k, idx, src)


def _slice_positions(x: GraphTensor, shape: Sequence[Expr], k: int, start: Any, step: int) -> GraphTensor:
    strides = _row_major_strides(x.shape)
    coords = unflatten_index(sym(INDEX_VAR), tuple(shape))
    e: Expr = const(0)
    for d, (c, s) in enumerate(zip(coords, strides)):
        e = e + ((as_expr(start) + c * step) * s if d == k else c * s)
    return x.graph.iota(e, tuple(shape), dt.int64)


def _slice_scatter(cx: Ctx, x: GraphTensor, src: GraphTensor, dim: int = 0, start: Any = None, end: Any = None,
                   step: int = 1) -> GraphTensor:
    k = _axis(dim, x.ndim)
    n = x.shape[k]
    s = _size_arg(start)
    s = 0 if s is None else s
    if isinstance(s, int) and s < 0:
        s = n + s
    src = cast(src, x.dtype)
    return prim("Scatter", x, _slice_positions(x, src.shape, k, s, step), src)


def _select_scatter(cx: Ctx, x: GraphTensor, src: GraphTensor, dim: int, index: Any) -> GraphTensor:
    k = _axis(dim, x.ndim)
    i = _norm_index(index, x.shape[k])
    src = ls.unsqueeze(cast(cx.tensor(src), x.dtype), k)
    return prim("Scatter", x, _slice_positions(x, src.shape, k, i, 1), src)


# ====================================================================== creation
def _full(cx: Ctx, size: Sequence[Any], fill_value: Any, **_: Any) -> GraphTensor:
    return _fill(cx, tuple(as_expr(_size_arg(s)) for s in size), fill_value, cx.out_dtype)


def _fill(cx: Ctx, shape: tuple, value: Any, dtype: DType) -> GraphTensor:
    if isinstance(value, (GraphTensor, Expr)):
        return ls.broadcast_to(cx.tensor(value, dtype), shape)
    return full(cx.g, shape, value, dtype)


def _full_like(cx: Ctx, x: GraphTensor, fill_value: Any, **_: Any) -> GraphTensor:
    return _fill(cx, x.shape, fill_value, cx.out_dtype)


def _zeros(cx: Ctx, size: Sequence[Any], *args: Any, **_: Any) -> GraphTensor:
    """Also empty/empty_permuted: uninitialised memory may hold anything, zeros included."""
    return _fill(cx, tuple(as_expr(_size_arg(s)) for s in size), 0, cx.out_dtype)


def _ones(cx: Ctx, size: Sequence[Any], **_: Any) -> GraphTensor:
    return _fill(cx, tuple(as_expr(_size_arg(s)) for s in size), 1, cx.out_dtype)


def _zeros_like(cx: Ctx, x: GraphTensor, **_: Any) -> GraphTensor:
    """Also empty_like: uninitialised memory may hold anything, zeros included."""
    return _fill(cx, x.shape, 0, cx.out_dtype)


def _ones_like(cx: Ctx, x: GraphTensor, **_: Any) -> GraphTensor:
    return _fill(cx, x.shape, 1, cx.out_dtype)


def _empty_strided(cx: Ctx, size: Sequence[Any], stride: Sequence[Any], **_: Any) -> GraphTensor:
    return _zeros(cx, size)


def _new_full(cx: Ctx, x: GraphTensor, size: Sequence[Any], fill_value: Any, **_: Any) -> GraphTensor:
    return _fill(cx, tuple(as_expr(_size_arg(s)) for s in size), fill_value, cx.out_dtype)


def _new_zeros(cx: Ctx, x: GraphTensor, size: Sequence[Any], **_: Any) -> GraphTensor:
    return _zeros(cx, size)


def _new_ones(cx: Ctx, x: GraphTensor, size: Sequence[Any], **_: Any) -> GraphTensor:
    return _ones(cx, size)


def _fill_scalar(cx: Ctx, x: GraphTensor, value: Any) -> GraphTensor:
    return _fill(cx, x.shape, value, x.dtype)


def _arange(cx: Ctx, start: Any, end: Any = None, step: Any = 1, **_: Any) -> GraphTensor:
    start, end, step = _size_arg(start), _size_arg(end), _size_arg(step)
    out = cx.out_dtype
    if end is None:
        start, end = 0, start
    return ls.arange(cx.g, start, end, step, dtype=out)


def _scalar_tensor(cx: Ctx, s: Any, **_: Any) -> GraphTensor:
    return cx.tensor(s, cx.out_dtype)


def _lift(cx: Ctx, x: Any) -> Any:
    return x


# ====================================================================== sorting
def _sort(cx: Ctx, x: GraphTensor, dim: int = -1, descending: bool = False) -> tuple:
    if x.ndim == 0:
        return x, full(cx.g, (), 0, dt.int64)
    return tuple(ls.sort(x, dim, descending))


def _sort_stable(cx: Ctx, x: GraphTensor, *, stable: Any = None, dim: int = -1, descending: bool = False) -> tuple:
    return _sort(cx, x, dim, descending)


def _argsort(cx: Ctx, x: GraphTensor, dim: int = -1, descending: bool = False) -> GraphTensor:
    return _sort(cx, x, dim, descending)[1]


def _topk(cx: Ctx, x: GraphTensor, k: Any, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple:  # noqa: A002
    return tuple(ls.topk(x, _size_arg(k), dim, largest, sorted))


# ====================================================================== sizes
def _sym_size(cx: Ctx, x: GraphTensor, dim: int) -> Any:
    return _size_arg(x.shape[_axis(dim, x.ndim)])


def _sym_numel(cx: Ctx, x: GraphTensor) -> Any:
    return _size_arg(prod(x.shape))


# ====================================================================== the table
def _a(name: str) -> str:
    return "aten." + name


ATEN_TABLE: dict[str, Fn] = {
    # ---- arithmetic
    _a("add.Tensor"): _add, _a("add.Scalar"): _add,
    _a("sub.Tensor"): _sub, _a("sub.Scalar"): _sub, _a("rsub.Tensor"): _rsub, _a("rsub.Scalar"): _rsub,
    _a("mul.Tensor"): _mul, _a("mul.Scalar"): _mul,
    _a("div.Tensor"): _div, _a("div.Scalar"): _div, _a("div.Tensor_mode"): _div, _a("div.Scalar_mode"): _div,
    _a("floor_divide.default"): binary(ls.floor_divide),
    _a("remainder.Tensor"): binary(ls.remainder), _a("remainder.Scalar"): binary(ls.remainder),
    _a("fmod.Tensor"): binary(ls.fmod), _a("fmod.Scalar"): binary(ls.fmod),
    _a("pow.Tensor_Scalar"): _pow, _a("pow.Tensor_Tensor"): _pow, _a("pow.Scalar"): _pow,
    _a("neg.default"): unary(ls.neg), _a("abs.default"): unary(ls.abs), _a("sign.default"): unary(ls.sign),
    _a("reciprocal.default"): float_unary(ls.reciprocal),
    _a("maximum.default"): binary(ls.maximum), _a("minimum.default"): binary(ls.minimum),
    _a("clamp.default"): _clamp, _a("clamp.Tensor"): _clamp, _a("clamp_min.default"): _clamp_min,
    _a("clamp_max.default"): _clamp_max, _a("hypot.default"): _hypot,
    # ---- math
    _a("exp.default"): float_unary(ls.exp), _a("exp2.default"): float_unary(ls.exp2),
    _a("expm1.default"): float_unary(ls.expm1), _a("log.default"): float_unary(ls.log),
    _a("log2.default"): float_unary(ls.log2), _a("log10.default"): float_unary(_log10),
    _a("log1p.default"): float_unary(ls.log1p), _a("sqrt.default"): float_unary(ls.sqrt),
    _a("rsqrt.default"): float_unary(ls.rsqrt), _a("sin.default"): float_unary(ls.sin),
    _a("cos.default"): float_unary(ls.cos), _a("tan.default"): float_unary(ls.tan),
    _a("sinh.default"): float_unary(_sinh), _a("cosh.default"): float_unary(_cosh),
    _a("tanh.default"): float_unary(ls.tanh), _a("sigmoid.default"): float_unary(ls.sigmoid),
    _a("erf.default"): float_unary(ls.erf), _a("floor.default"): unary(ls.floor), _a("ceil.default"): unary(ls.ceil),
    _a("trunc.default"): unary(ls.trunc), _a("round.default"): _round,
    # ---- activations
    _a("relu.default"): unary(ls.relu), _a("gelu.default"): _gelu, _a("silu.default"): float_unary(ls.silu),
    _a("hardtanh.default"): _hardtanh, _a("leaky_relu.default"): _leaky_relu, _a("elu.default"): _elu,
    # ---- comparison and logic
    _a("eq.Tensor"): binary(ls.eq), _a("eq.Scalar"): binary(ls.eq), _a("ne.Tensor"): binary(ls.ne),
    _a("ne.Scalar"): binary(ls.ne), _a("lt.Tensor"): binary(ls.lt), _a("lt.Scalar"): binary(ls.lt),
    _a("le.Tensor"): binary(ls.le), _a("le.Scalar"): binary(ls.le), _a("gt.Tensor"): binary(ls.gt),
    _a("gt.Scalar"): binary(ls.gt), _a("ge.Tensor"): binary(ls.ge), _a("ge.Scalar"): binary(ls.ge),
    _a("isnan.default"): unary(ls.isnan), _a("isinf.default"): unary(ls.isinf),
    _a("isfinite.default"): unary(ls.isfinite),
    _a("logical_not.default"): unary(ls.logical_not), _a("logical_and.default"): binary(ls.logical_and),
    _a("logical_or.default"): binary(ls.logical_or), _a("logical_xor.default"): binary(ls.logical_xor),
    _a("bitwise_not.default"): _bitwise_not,
    _a("bitwise_and.Tensor"): _bitwise("and"), _a("bitwise_and.Scalar"): _bitwise("and"),
    _a("bitwise_or.Tensor"): _bitwise("or"), _a("bitwise_or.Scalar"): _bitwise("or"),
    _a("bitwise_xor.Tensor"): _bitwise("xor"), _a("bitwise_xor.Scalar"): _bitwise("xor"),
    _a("where.self"): _where, _a("masked_fill.Scalar"): _masked_fill, _a("masked_fill.Tensor"): _masked_fill,
    # ---- reductions
    _a("sum.dim_IntList"): _sum, _a("sum.default"): _sum, _a("mean.dim"): _mean, _a("mean.default"): _mean,
    _a("amax.default"): _amax, _a("amin.default"): _amin, _a("max.dim"): _max_dim, _a("min.dim"): _min_dim,
    _a("max.default"): _max_all, _a("min.default"): _min_all, _a("argmax.default"): _argmax,
    _a("argmin.default"): _argmin, _a("any.default"): _any, _a("any.dim"): _any, _a("any.dims"): _any,
    _a("all.default"): _all, _a("all.dim"): _all, _a("all.dims"): _all, _a("prod.default"): _prod,
    _a("prod.dim_int"): _prod, _a("var.correction"): _var, _a("var.dim"): _var_dim, _a("std.correction"): _std,
    _a("var_mean.correction"): _var_mean, _a("cumsum.default"): _cumsum, _a("cumprod.default"): _cumprod,
    _a("cummax.default"): _cummax, _a("cummin.default"): _cummin, _a("logsumexp.default"): _logsumexp,
    _a("linalg_vector_norm.default"): _vector_norm,
    _a("_softmax.default"): _softmax, _a("_log_softmax.default"): _log_softmax,
    _a("_safe_softmax.default"): _safe_softmax,
    # ---- linear algebra, nn
    _a("mm.default"): _mm, _a("bmm.default"): _mm, _a("addmm.default"): _addmm, _a("baddbmm.default"): _baddbmm,
    _a("convolution.default"): _convolution, _a("native_layer_norm.default"): _native_layer_norm,
    _a("native_group_norm.default"): _native_group_norm,
    _a("_native_batch_norm_legit_no_training.default"): _batch_norm_eval,
    _a("native_batch_norm.default"): _native_batch_norm,
    _a("max_pool2d_with_indices.default"): _max_pool2d_with_indices, _a("avg_pool2d.default"): _avg_pool2d,
    _a("_adaptive_avg_pool2d.default"): _adaptive_avg_pool2d, _a("constant_pad_nd.default"): _constant_pad_nd,
    _a("embedding.default"): _embedding, _a("scaled_dot_product_attention.default"): _sdpa,
    _a("_grouped_mm.default"): _grouped_mm, _a("histc.default"): _histc,
    # transformers' MoE experts (its default "grouped_mm" implementation) on CPU under torch.compile
    "transformers.grouped_mm_fallback.default": _grouped_mm,
    _a("_scaled_dot_product_flash_attention_for_cpu.default"): _sdpa_flash_cpu,
    _a("_scaled_dot_product_flash_attention_for_cpu_backward.default"): _sdpa_flash_cpu_backward,
    # what SDPA becomes on a GPU
    _a("_scaled_dot_product_efficient_attention.default"): _sdpa_fused(4, True),
    _a("_scaled_dot_product_flash_attention.default"): _sdpa_fused(9, False),
    _a("_scaled_dot_product_cudnn_attention.default"): _sdpa_fused(9, True),
    # ---- movement (views are free in lightspeed)
    _a("view.default"): _view, _a("_unsafe_view.default"): _view, _a("reshape.default"): _view,
    _a("permute.default"): _permute, _a("expand.default"): _expand, _a("unsqueeze.default"): _unsqueeze,
    _a("squeeze.default"): _squeeze, _a("squeeze.dim"): _squeeze, _a("squeeze.dims"): _squeeze,
    _a("transpose.int"): _transpose, _a("t.default"): _t, _a("slice.Tensor"): _slice, _a("select.int"): _select,
    _a("narrow.default"): _narrow, _a("cat.default"): _cat, _a("stack.default"): _stack,
    _a("split_with_sizes.default"): _split_with_sizes, _a("split.Tensor"): _split, _a("unbind.int"): _unbind,
    _a("flip.default"): _flip, _a("repeat.default"): _repeat, _a("roll.default"): _roll, _a("unfold.default"): _unfold,
    _a("tril.default"): _tri(ls.tril), _a("triu.default"): _tri(ls.triu),
    _a("clone.default"): identity, _a("alias.default"): identity, _a("lift_fresh_copy.default"): _lift,
    _a("detach.default"): identity, _a("contiguous.default"): identity,
    _a("_to_copy.default"): _to_copy, _a("copy.default"): _copy,
    "prims.convert_element_type.default": _convert_element_type,
    # ---- indexing
    _a("index.Tensor"): _index, _a("_unsafe_index.Tensor"): _index, _a("index_put.default"): _index_put,
    _a("_unsafe_index_put.default"): _index_put, _a("index_select.default"): _index_select,
    _a("gather.default"): _gather, _a("scatter.src"): _scatter_src, _a("scatter.value"): _scatter_value,
    _a("scatter_add.default"): _scatter_add, _a("scatter_reduce.two"): _scatter_reduce,
    _a("index_copy.default"): _index_copy, _a("index_add.default"): _index_add,
    _a("slice_scatter.default"): _slice_scatter, _a("select_scatter.default"): _select_scatter,
    # ---- creation
    _a("full.default"): _full, _a("full_like.default"): _full_like, _a("zeros.default"): _zeros,
    _a("ones.default"): _ones, _a("zeros_like.default"): _zeros_like, _a("ones_like.default"): _ones_like,
    _a("empty.memory_format"): _zeros, _a("empty_permuted.default"): _zeros, _a("empty_like.default"): _zeros_like,
    _a("empty_strided.default"): _empty_strided, _a("new_full.default"): _new_full,
    _a("new_zeros.default"): _new_zeros, _a("new_ones.default"): _new_ones, _a("new_empty.default"): _new_zeros,
    _a("fill.Scalar"): _fill_scalar, _a("fill.Tensor"): _fill_scalar,
    _a("arange.default"): _arange, _a("arange.start"): _arange, _a("arange.start_step"): _arange,
    _a("scalar_tensor.default"): _scalar_tensor,
    # ---- sorting
    _a("sort.default"): _sort, _a("sort.stable"): _sort_stable, _a("argsort.default"): _argsort,
    _a("topk.default"): _topk,
    # ---- sizes and runtime assertions
    _a("sym_size.int"): _sym_size, _a("sym_numel.default"): _sym_numel,
    _a("_assert_scalar.default"): noop, _a("_assert_tensor_metadata.default"): noop,
    _a("_assert_async.default"): _assert_async, _a("_assert_async.msg"): _assert_async,
    _a("sym_constrain_range_for_size.default"): noop,
}


# ====================================================================== decompositions
# ops PyTorch can decompose that the core-ATen table leaves whole (upsampling, fused statistics)
_EXTRA_DECOMPOSED = ("upsample_bilinear2d", "upsample_nearest2d", "upsample_nearest1d", "upsample_nearest3d",
                     "upsample_linear1d", "upsample_bicubic2d", "adaptive_max_pool2d", "diagonal")
# kept whole so that rules can match attention as one op
_KEEP_WHOLE = ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
               "_scaled_dot_product_attention_math")


def decompositions() -> dict:
    """The decomposition table lightspeed lowers FX graphs with (see the module docstring)."""
    from torch._decomp import core_aten_decompositions, get_decompositions

    table = dict(core_aten_decompositions())
    table.update(get_decompositions([getattr(torch.ops.aten, n) for n in _EXTRA_DECOMPOSED]))
    for op in list(table):
        if op.name().split("::")[-1].split(".")[0] in _KEEP_WHOLE:
            del table[op]
    return table


def check_table() -> list[str]:
    """Names in ATEN_TABLE that are not ATen overloads of this PyTorch (for a test)."""
    bad = []
    for name in ATEN_TABLE:
        ns, pkt, ov = name.split(".")
        if ns == "transformers":  # registered when transformers' MoE integration is imported
            import transformers.integrations.moe  # noqa: F401
        try:
            getattr(getattr(getattr(torch.ops, ns), pkt), ov)
        except (AttributeError, RuntimeError):
            bad.append(name)
    return bad


def unsupported_reason(name: str) -> str | None:
    """Why a well-known op is missing from the table (for error messages)."""
    return _KNOWN_UNSUPPORTED.get(name.split(".")[1] if name.startswith("aten.") else name)


_KNOWN_UNSUPPORTED = {
    "nonzero": "its output shape depends on the data",
    "_local_scalar_dense": "it reads a value out of a tensor (.item()), which a lazy graph cannot do",
    "masked_select": "its output shape depends on the data",
    "unique": "its output shape depends on the data",
    "_native_batch_norm_legit": "batch norm in training mode; call model.eval() first",
    "rand": "random numbers", "randn": "random numbers", "randint": "random numbers", "bernoulli": "random numbers",
    "native_dropout": "dropout in training mode; call model.eval() first",
}

