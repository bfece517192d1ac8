"""Sorting, scans, ranges and triangular masks, built from primitives.

Pairwise form: for an axis ``k`` of size ``n`` the "pair" shape inserts a second copy of the axis,
``x.shape[:k] + (n, n) + x.shape[k+1:]``; axis ``k`` indexes the other element ``j`` and axis
``k+1`` the element ``i`` itself.  Masks over ``(j, i)`` come from one small Iota.

* ``sort``/``argsort``/``topk`` rank every element by counting the elements that go before it
  (LessThan on every pair, ties broken by position, so the sort is stable; NaN sorts as the
  largest value, as in PyTorch) and Scatter values and positions to their ranks.  The ranks are
  a permutation, so no two writes collide.  O(n^2) memory per row.
* ``cumsum``/``cumprod``/``cummax``/``cummin`` mask the pairs with ``j <= i`` (Scatter-based
  ``where``, so inf/NaN never leak into masked slots) and reduce over ``j``: SumReduce (exact for
  integers), the product tree of ``prod`` (exact for integers), MaxReduce.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import DTypeError, ShapeError, UnsupportedError
from ..graph import Graph, GraphTensor
from ..symbolic import INDEX_VAR, Expr, ExprLike, as_expr, is_expr_like, prod, smax, sym
from .common import axis_positions, cast, fill_expr, fmt_shape, full, norm_axis, prim
from .elementwise import eq, isnan, logical_not, order_reverse, where
from .reduce import ValuesIndices, prod_
from .registry import hl_op

Shape = tuple[Expr, ...]


# ------------------------------------------------------------------ pairwise helpers
def _pair_shape(x: GraphTensor, k: int) -> Shape:
    n = x.shape[k]
    return x.shape[:k] + (n, n) + x.shape[k + 1:]


def _as_j(t: GraphTensor, k: int) -> GraphTensor:
    """t[..., j, ...] seen at pair position (..., j, i, ...)."""
    return t.unsqueeze(k + 1).expand(*_pair_shape(t, k))


def _as_i(t: GraphTensor, k: int) -> GraphTensor:
    """t[..., i, ...] seen at pair position (..., j, i, ...)."""
    return t.unsqueeze(k).expand(*_pair_shape(t, k))


def _ji_mask(x: GraphTensor, k: int, rel: Callable[[Expr, Expr], Expr]) -> GraphTensor:
    """Bool mask over the pair shape: ``rel(j, i)`` (a 0/1 Expr), built as an (n, n) Iota."""
    n = x.shape[k]
    z = sym(INDEX_VAR)
    m = cast(x.graph.iota(rel(z // n, z % n), (n, n), dt.int32), dt.bool_)
    lead, rest = (1,) * k, (1,) * (x.ndim - k - 1)
    return m.reshape(*lead, n, n, *rest).expand(*_pair_shape(x, k))


def _j_positions(x: GraphTensor, k: int) -> GraphTensor:
    n = x.shape[k]
    z = sym(INDEX_VAR)
    jp = x.graph.iota(z // n, (n, n), dt.int64)
    return jp.reshape(*(1,) * k, n, n, *(1,) * (x.ndim - k - 1)).expand(*_pair_shape(x, k))


def _vector_op(fn: Callable[[GraphTensor, int], Any], x: GraphTensor, dim: int, op: str) -> Any:
    """Run ``fn(x, axis)``; a 0-d x is treated as a 1-element vector (as PyTorch does)."""
    if x.ndim == 0:
        norm_axis(dim, 0, op)
        out = fn(x.reshape(1), 0)
        if isinstance(out, tuple):
            return type(out)(*(o.reshape() for o in out))
        return out.reshape()
    return fn(x, norm_axis(dim, x.ndim, op))


def _check_tensor(op: str, x: Any) -> GraphTensor:
    if not isinstance(x, GraphTensor):
        raise DTypeError(f"{op}: input must be a GraphTensor, got {type(x).__name__}")
    if x.dtype.storage_only:
        raise DTypeError(f"{op}: {x.dtype.name} is a storage-only dtype; cast it first")
    return x


# ------------------------------------------------------------------ sorting
def _before(x: GraphTensor, k: int, descending: bool) -> GraphTensor:
    """Bool over the pair shape: element j goes before element i in the (stable) sorted order."""
    xj, xi = _as_j(x, k), _as_i(x, k)
    lt_ji = prim("LessThan", xj, xi)  # x_j < x_i
    lt_ij = prim("LessThan", xi, xj)
    if x.dtype.is_float:  # NaN is the largest value: a non-NaN is below a NaN
        nan = isnan(x)
        nj, ni = _as_j(nan, k), _as_i(nan, k)
        lt_ji = prim("Add", lt_ji, prim("Mul", ni, logical_not(nj)))
        lt_ij = prim("Add", lt_ij, prim("Mul", nj, logical_not(ni)))
    if descending:
        lt_ji, lt_ij = lt_ij, lt_ji
    earlier = _ji_mask(x, k, lambda j, i: j.lt(i))
    return prim("Add", lt_ji, prim("Mul", logical_not(lt_ij), earlier))


def _ranked(x: GraphTensor, k: int, descending: bool, keep: ExprLike | None) -> ValuesIndices:
    """Values and indices of the first ``keep`` (all when None) elements of the sorted order."""
    n = x.shape[k]
    kk = n if keep is None else as_expr(keep)
    inner = prod(x.shape[k + 1:])
    rank = prim("SumReduce", cast(_before(x, k, descending), dt.int64), arg=k)
    out_shape = x.shape[:k] + (kk,) + x.shape[k + 1:]
    z = sym(INDEX_VAR)
    base = x.graph.iota((z // (n * inner)) * (kk * inner) + z % inner, x.shape, dt.int64)
    scaled = rank if inner == 1 else prim("Mul", rank, fill_expr(x.graph, inner, x.shape, dt.int64))
    flat = prim("Add", base, scaled)
    if keep is not None and kk != n:  # ranks >= k are dropped: an out-of-range position is skipped
        drop = logical_not(prim("LessThan", rank, fill_expr(x.graph, kk, x.shape, dt.int64)))
        flat = where(drop, fill_expr(x.graph, prod(out_shape), x.shape, dt.int64), flat)
    values = prim("Scatter", full(x.graph, out_shape, 0, x.dtype), flat, x)
    indices = prim("Scatter", full(x.graph, out_shape, 0, dt.int64), flat, axis_positions(x, k))
    return ValuesIndices(values, indices)


@hl_op(torch="torch.sort", category="sort")
def sort(x: GraphTensor, dim: int = -1, descending: bool = False, *, stable: bool = False) -> ValuesIndices:
    """(values, indices) sorted along ``dim``.  Always stable (equal elements keep their order),
    which is one valid result for ``stable=False`` and exactly PyTorch's for ``stable=True``;
    NaN sorts as the largest value."""
    return _sort(x, dim, descending, "sort")


def _sort(x: GraphTensor, dim: int, descending: bool, op: str) -> ValuesIndices:
    _check_tensor(op, x)
    return _vector_op(lambda t, k: _ranked(t, k, descending, None), x, dim, op)


@hl_op(torch="torch.argsort", category="sort")
def argsort(x: GraphTensor, dim: int = -1, descending: bool = False, *, stable: bool = False) -> GraphTensor:
    """Indices that sort ``x`` along ``dim`` (stable; see :func:`sort`)."""
    return _sort(x, dim, descending, "argsort").indices


@hl_op(torch="torch.topk", category="sort")
def topk(x: GraphTensor, k: ExprLike, dim: int = -1, largest: bool = True, sorted: bool = True) -> ValuesIndices:  # noqa: A002
    """The ``k`` largest (or smallest) elements along ``dim`` and their indices, in sorted order
    (also for ``sorted=False``, where PyTorch leaves the order unspecified).  Ties go to the
    earlier element; NaN counts as the largest value."""
    _check_tensor("topk", x)
    if isinstance(k, bool) or not is_expr_like(k):
        raise TypeError(f"topk: k must be an int or a dim expression, got {k!r}")
    kk = as_expr(k)

    def run(t: GraphTensor, axis: int) -> ValuesIndices:
        n = t.shape[axis]
        if kk.is_const and kk.value < 0:
            raise ShapeError(f"topk: k must be non-negative, got {kk.value}")
        hi = (kk - n).bounds()[1]
        if kk != n and (hi is None or hi > 0):
            raise ShapeError(f"topk: k ({kk}) may exceed the size {n} of dim {dim} of input {fmt_shape(x.shape)}")
        return _ranked(t, axis, largest, kk)

    return _vector_op(run, x, dim, "topk")


# ------------------------------------------------------------------ scans
def _masked_pairs(x: GraphTensor, k: int, fill: Any) -> GraphTensor:
    """x_j at pair (j, i) where j <= i, ``fill`` elsewhere."""
    incl = _ji_mask(x, k, lambda j, i: j.le(i))
    shape = _pair_shape(x, k)
    return where(incl, _as_j(x, k), full(x.graph, shape, fill, x.dtype))


@hl_op(torch="torch.cumsum", category="scan")
def cumsum(x: GraphTensor, dim: int, dtype: DType | None = None) -> GraphTensor:
    """Running sum along ``dim``; bool and integer inputs accumulate in int64 (as in PyTorch).
    Each output is one SumReduce over a masked row: exact for integers; float results can differ
    from PyTorch's sequential sum in the last bits."""
    _check_tensor("cumsum", x)
    if dtype is not None:
        x = cast(x, dtype)
    elif not x.dtype.is_float:
        x = cast(x, dt.int64)
    return _vector_op(lambda t, k: prim("SumReduce", _masked_pairs(t, k, 0), arg=k), x, dim, "cumsum")


@hl_op(torch="torch.cumprod", category="scan")
def cumprod(x: GraphTensor, dim: int, dtype: DType | None = None) -> GraphTensor:
    """Running product along ``dim`` (bool and integer inputs in int64).  A constant-size axis
    multiplies as a tree of Muls (exact for integers); a symbolic-size axis needs floats and goes
    through log2/exp2 (see ``prod``)."""
    _check_tensor("cumprod", x)
    if dtype is not None:
        x = cast(x, dtype)
    elif not x.dtype.is_float:
        x = cast(x, dt.int64)

    def run(t: GraphTensor, k: int) -> GraphTensor:
        if not t.shape[k].is_const and not t.dtype.is_float:
            raise UnsupportedError(f"cumprod: integer products along a symbolic-size dim ({t.shape[k]}) are "
                                   "not supported; cast to a float dtype")
        return prod_(_masked_pairs(t, k, 1), k)

    return _vector_op(run, x, dim, "cumprod")


def _cummax(x: GraphTensor, k: int) -> ValuesIndices:
    values = prim("MaxReduce", _masked_pairs(x, k, x.dtype.min_value()), arg=k)
    # index: the last j <= i holding the running max (PyTorch's >= update); once a NaN was seen,
    # the last NaN so far
    hit = eq(_as_j(x, k), _as_i(values, k))
    if x.dtype.is_float:
        hit = prim("Add", hit, _as_j(isnan(x), k))
    hit = prim("Mul", hit, _ji_mask(x, k, lambda j, i: j.le(i)))
    jpos = _j_positions(x, k)
    cand = where(hit, jpos, full(x.graph, jpos.shape, -1, dt.int64))
    return ValuesIndices(values, prim("MaxReduce", cand, arg=k))


@hl_op(torch="torch.cummax", category="scan")
def cummax(x: GraphTensor, dim: int) -> ValuesIndices:
    """(values, indices) of the running maximum along ``dim``; the index is the last position
    holding the maximum, and NaN propagates (with the last NaN's index), as in PyTorch."""
    _check_tensor("cummax", x)
    return _vector_op(_cummax, x, dim, "cummax")


@hl_op(torch="torch.cummin", category="scan")
def cummin(x: GraphTensor, dim: int) -> ValuesIndices:
    """(values, indices) of the running minimum along ``dim`` (see :func:`cummax`)."""
    _check_tensor("cummin", x)

    def run(t: GraphTensor, k: int) -> ValuesIndices:
        v, i = _cummax(order_reverse(t), k)
        return ValuesIndices(order_reverse(v), i)

    return _vector_op(run, x, dim, "cummin")


# ------------------------------------------------------------------ ranges and triangles
def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


@hl_op(torch="torch.arange", category="creation", method=False)
def arange(graph: Graph, start: Any, end: Any = None, step: Any = 1, dtype: DType | str | None = None) -> GraphTensor:
    """torch.arange on ``graph``: ``start, start + step, ...`` up to (excluding) ``end``.

    Ints (and dim expressions such as ``"s"`` or ``x.shape[0]``) give int64 and may make the
    length symbolic; a float argument gives float32 and needs constant bounds.  Values are
    computed as ``start + i * step`` in float64 and rounded once (PyTorch's CPU kernel rounds
    once per SIMD chunk, so its last bit can differ).  For an integer ``dtype`` float arguments
    are truncated first, as in PyTorch."""
    if not isinstance(graph, Graph):
        raise TypeError(f"arange: the first argument must be the Graph, got {type(graph).__name__}")
    if end is None:
        start, end = 0, start
    args = (start, end, step)
    for a in args:
        if not (_is_num(a) or (is_expr_like(a) and not isinstance(a, bool))):
            raise TypeError(f"arange: start, end and step must be numbers or dim expressions, got {a!r}")
    is_float = any(isinstance(a, (float, np.floating)) for a in args)
    out_dt = dt.as_dtype(dtype) if dtype is not None else (dt.float32 if is_float else dt.int64)
    if is_float and out_dt.is_int:  # PyTorch truncates the bounds and step to the integer dtype first
        start, end, step = (int(a) if _is_num(a) else a for a in args)
        is_float = False
    if isinstance(step, Expr) and step.is_const:
        step = step.value
    if not _is_num(step):
        raise UnsupportedError(f"arange: step must be a number, got {step!r}")
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    z = sym(INDEX_VAR)
    if not is_float:
        s, e, st = as_expr(start), as_expr(end), int(step)
        span = e - s if st > 0 else s - e
        n = span.ceildiv(abs(st)) if abs(st) != 1 else span
        if n.is_const:
            if n.value < 0:
                raise ShapeError(f"arange: end {end} is not reachable from start {start} with step {step}")
        else:
            n = smax(0, n)
        ints = graph.iota(s + z * st, (n,), dt.int64)
        return cast(ints, out_dt)
    fs, fe, fst = (float(a) if _is_num(a) else None for a in args)
    if fs is None or fe is None or fst is None:
        raise UnsupportedError("arange: a float range needs constant start, end and step (its length "
                               "would not be an integer expression)")
    length = math.ceil((fe - fs) / fst)
    if length < 0:
        raise ShapeError(f"arange: end {end} is not reachable from start {start} with step {step}")
    i = cast(graph.iota(z, (length,), dt.int64), dt.float64)
    vals = prim("Add", prim("Mul", i, full(graph, (length,), fst, dt.float64)), full(graph, (length,), fs, dt.float64))
    return cast(vals, out_dt)


def _triangle(x: GraphTensor, diagonal: int, op: str, lower: bool) -> GraphTensor:
    _check_tensor(op, x)
    if x.ndim < 2:
        raise ShapeError(f"{op}: input must have at least 2 dims, got {fmt_shape(x.shape)}")
    if not isinstance(diagonal, int) or isinstance(diagonal, bool):
        raise TypeError(f"{op}: diagonal must be an int, got {diagonal!r}")
    h, w = x.shape[-2], x.shape[-1]
    z = sym(INDEX_VAR)
    row, col = z // w, z % w
    keep = col.le(row + diagonal) if lower else col.ge(row + diagonal)
    m = cast(x.graph.iota(keep, (h, w), dt.int32), dt.bool_)
    m = m.reshape(*(1,) * (x.ndim - 2), h, w).expand(*x.shape)
    return where(m, x, full(x.graph, x.shape, 0, x.dtype))


@hl_op(torch="torch.tril", category="creation")
def tril(x: GraphTensor, diagonal: int = 0) -> GraphTensor:
    """Lower triangle of the last two dims (``col - row <= diagonal``); the rest is zero."""
    return _triangle(x, diagonal, "tril", True)


@hl_op(torch="torch.triu", category="creation")
def triu(x: GraphTensor, diagonal: int = 0) -> GraphTensor:
    """Upper triangle of the last two dims (``col - row >= diagonal``); the rest is zero."""
    return _triangle(x, diagonal, "triu", False)

