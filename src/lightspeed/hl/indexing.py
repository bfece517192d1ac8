"""Indexing ops: gather/scatter families, built on the Gather and Scatter primitives.

Index arithmetic: an element's flat position in a row-major shape is built from Iota (the
positions along the untouched axes) plus the user's indexes scaled by the axis stride.

Duplicate targets: ``scatter``/``scatter_elements``/``index_copy`` with repeated indexes write
one of the candidates, which one is unspecified (as in PyTorch).  ``scatter_add`` does not use
the Scatter primitive at all: it compares every index with every target position (a one-hot
mask), sums the matching sources with SumReduce and adds them, so duplicates accumulate exactly
(ints) or up to summation order (floats).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .. import dtypes as dt
from ..errors import DTypeError, ShapeError, UnsupportedError, describe_operands
from ..graph import GraphTensor
from ..shape import unflatten_index
from ..symbolic import INDEX_VAR, Expr, ExprLike, as_expr, const, prod, sym
from .common import cast, fill_expr, fmt_shape, full, is_scalar, norm_axis, prim
from .registry import hl_op

Shape = tuple[Expr, ...]


# ------------------------------------------------------------------ helpers
def _row_major_strides(shape: Sequence[Expr]) -> Shape:
    """Strides of a row-major layout (a size-1 axis keeps its true stride, unlike views)."""
    return tuple(prod(shape[k + 1:]) for k in range(len(shape)))


def _pos_expr(shape: Shape, strides: Shape, axis: int | None, shift: ExprLike = 0) -> tuple[Expr, Expr]:
    """(position, index along ``axis``) of flat index z of ``shape``: the sum over axes d of
    (index along d) * strides[d], the index along ``axis`` moved by ``shift``."""
    e: Expr = const(0)
    along = const(0)
    for d, (i, s) in enumerate(zip(unflatten_index(sym(INDEX_VAR), shape), strides)):
        if d == axis:
            along = i + shift
            e = e + along * s
        else:
            e = e + i * s
    return e, along


def _pos_iota(g, shape: Shape, strides: Shape, skip: int | None) -> GraphTensor:
    """int64 tensor of ``shape``: sum over axes d != skip of (index along d) * strides[d]."""
    e = _pos_expr(shape, tuple(const(0) if d == skip else st for d, st in enumerate(strides)), skip)[0]
    return g.iota(e, shape, dt.int64)


def _scaled(index: GraphTensor, stride: ExprLike) -> GraphTensor:
    """index (as int64) times a (possibly symbolic) stride."""
    i64 = cast(index, dt.int64)
    s = as_expr(stride)
    if s == 1:
        return i64
    return prim("Mul", i64, fill_expr(index.graph, s, i64.shape, dt.int64))


def _check_tensor(op: str, what: str, t: Any) -> GraphTensor:
    if not isinstance(t, GraphTensor):
        raise DTypeError(f"{op}: {what} must be a GraphTensor, got {type(t).__name__}")
    return t


def _check_index(op: str, index: Any, *others: GraphTensor) -> GraphTensor:
    _check_tensor(op, "index", index)
    if not index.dtype.is_int:
        raise DTypeError(f"{op}: index must have an integer dtype, got {index.dtype.name} "
                         f"(operands: {describe_operands([*others, index])})")
    return index


def _provably_le(a: Expr, b: Expr) -> bool:
    if a == b:
        return True
    hi = (a - b).bounds()[1]
    return hi is not None and hi <= 0


def _check_fits(op: str, small: GraphTensor, big: GraphTensor, skip: int | None, small_name: str,
                big_name: str) -> None:
    """``small.shape[d] <= big.shape[d]`` for every d != skip (provably, for symbolic dims)."""
    if small.ndim != big.ndim:
        raise ShapeError(f"{op}: {small_name} must have the same number of dims as {big_name}, got "
                         f"{small_name} {fmt_shape(small.shape)} and {big_name} {fmt_shape(big.shape)}")
    for d, (a, b) in enumerate(zip(small.shape, big.shape)):
        if d != skip and not _provably_le(a, b):
            raise ShapeError(f"{op}: {small_name} {fmt_shape(small.shape)} is larger than {big_name} "
                             f"{fmt_shape(big.shape)} in dim {d} ({a} vs {b})")


def _crop(t: GraphTensor, shape: Shape) -> GraphTensor:
    """The leading ``shape`` corner of ``t`` (a view)."""
    if t.shape == shape:
        return t
    return t.with_view(t.st.slice([(0, d, 1) for d in shape]))


def _wrap_negative(index: GraphTensor, size: Expr) -> GraphTensor:
    """ONNX-style indexes: a negative index counts from the end of the axis."""
    from .elementwise import lt, where

    i64 = cast(index, dt.int64)
    return where(lt(i64, 0), prim("Add", i64, fill_expr(index.graph, size, i64.shape, dt.int64)), i64)


def _scatter_positions(x: GraphTensor, k: int, index: GraphTensor) -> GraphTensor:
    """Flat positions in ``x`` (row-major) of ``x[..., index[p], ...]`` for every p of index's shape.

    An index outside ``[0, size)`` of axis k maps to ``numel(x)``, a position the Scatter primitive
    skips: such a write is dropped instead of landing on another row (PyTorch raises there; a lazy
    graph cannot, so it must at least never write a wrong element)."""
    from .elementwise import logical_not, logical_or, lt, where

    strides = _row_major_strides(x.shape)
    base = _pos_iota(x.graph, index.shape, strides, k)
    pos = prim("Add", base, _scaled(index, strides[k]))
    size = fill_expr(x.graph, x.shape[k], index.shape, index.dtype)
    outside = logical_or(lt(index, 0), logical_not(lt(index, size)))
    return where(outside, fill_expr(x.graph, prod(x.shape), pos.shape, pos.dtype), pos)


def _src_operand(op: str, x: GraphTensor, index: GraphTensor, src: Any) -> GraphTensor:
    """The values to write, as a tensor of index's shape and x's dtype."""
    if is_scalar(src):
        return full(x.graph, index.shape, src, x.dtype)
    _check_tensor(op, "src", src)
    if src.dtype != x.dtype:
        raise DTypeError(f"{op}: src must have the input's dtype, got input {x.dtype.name} and src "
                         f"{src.dtype.name} (operands: {describe_operands([x, index, src])})")
    _check_fits(op, index, src, None, "index", "src")
    return _crop(src, index.shape)


# ------------------------------------------------------------------ gather family
@hl_op(torch="torch.index_select", category="indexing")
def index_select(x: GraphTensor, dim: int, index: GraphTensor) -> GraphTensor:
    """Rows of ``x`` along ``dim`` picked by a 1-D integer ``index``."""
    if not isinstance(index, GraphTensor) or not index.dtype.is_int:
        raise DTypeError(f"index_select: index must be an integer GraphTensor, got {index!r}")
    if index.ndim != 1:
        raise ShapeError(f"index_select: index must be 1-D, got rank {index.ndim}")
    k = norm_axis(dim, x.ndim, "index_select")
    n, inner = x.shape[k], prod(x.shape[k + 1:])
    m = index.shape[0]
    out_shape = x.shape[:k] + (m,) + x.shape[k + 1:]
    z = sym(INDEX_VAR)
    idt = dt.int64
    base = x.graph.iota((z // (m * inner)) * (n * inner) + z % inner, out_shape, idt)
    sel = cast(index, idt).reshape(*([1] * k), m, *([1] * (x.ndim - k - 1))).expand(*out_shape)
    flat = prim("Add", base, prim("Mul", sel, x.graph.iota(inner, out_shape, idt)))
    return prim("Gather", flat, x)


@hl_op(torch="torch.gather", category="indexing")
def gather(x: GraphTensor, dim: int, index: GraphTensor) -> GraphTensor:
    """``out[i][j][k] = x[i][index[i][j][k]][k]`` (for dim=1): the result has index's shape.

    ``index`` has x's rank and is no larger than x in the other dims; indexes must lie in
    ``[0, x.shape[dim])`` (an out-of-range index is an error in the reference runtime)."""
    _check_tensor("gather", "input", x)
    _check_index("gather", index, x)
    k = norm_axis(dim, x.ndim, "gather")
    if x.ndim == 0:
        if index.ndim != 0:
            raise ShapeError(f"gather: index must be 0-d for a 0-d input, got index {fmt_shape(index.shape)}")
        return prim("Gather", cast(index, dt.int64), x)
    _check_fits("gather", index, x, k, "index", "input")
    return prim("Gather", _scatter_positions(x, k, index), x)


@hl_op(torch="torch.gather", category="indexing", method=False)
def gather_elements(data: GraphTensor, indices: GraphTensor, axis: int = 0) -> GraphTensor:
    """ONNX GatherElements: ``gather(data, axis, indices)``; negative indexes count from the end."""
    _check_tensor("gather_elements", "data", data)
    _check_index("gather_elements", indices, data)
    k = norm_axis(axis, data.ndim, "gather_elements")
    if data.ndim == 0:
        return gather(data, k, indices)
    _check_fits("gather_elements", indices, data, k, "indices", "data")
    return gather(data, k, _wrap_negative(indices, data.shape[k]))


@hl_op(torch="torch.take_along_dim", category="indexing")
def take_along_dim(x: GraphTensor, indices: GraphTensor, dim: int | None = None) -> GraphTensor:
    """torch.take_along_dim: gather along ``dim`` after broadcasting the other dims of x and
    indices; with ``dim=None`` both are flattened."""
    _check_tensor("take_along_dim", "input", x)
    _check_index("take_along_dim", indices, x)
    if dim is None:
        return gather(x.reshape(-1), 0, indices.reshape(-1))
    k = norm_axis(dim, x.ndim, "take_along_dim")
    if indices.ndim != x.ndim:
        raise ShapeError(f"take_along_dim: input and indices must have the same number of dims, got input "
                         f"{fmt_shape(x.shape)} and indices {fmt_shape(indices.shape)}")
    from .common import broadcast_shapes

    xs, ishp = list(x.shape), list(indices.shape)
    for d in range(x.ndim):
        if d == k:
            continue
        (b,) = broadcast_shapes((xs[d],), (ishp[d],), op="take_along_dim")
        xs[d] = ishp[d] = b
    return gather(x.expand(*xs), k, indices.expand(*ishp))


@hl_op(torch="torch.nn.functional.embedding", category="indexing", method=False)
def embedding(input: GraphTensor, weight: GraphTensor, padding_idx: int | None = None,  # noqa: A002
              max_norm: float | None = None, norm_type: float = 2.0, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> GraphTensor:
    """Rows of ``weight`` (num_embeddings, dim) for integer ids of any shape: shape ``(*input.shape, dim)``.

    ``padding_idx``, ``scale_grad_by_freq`` and ``sparse`` only matter for training and are ignored."""
    _check_tensor("embedding", "weight", weight)
    _check_index("embedding", input, weight)
    if weight.ndim != 2:
        raise ShapeError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got "
                         f"{fmt_shape(weight.shape)}")
    if max_norm is not None:
        raise UnsupportedError("embedding: max_norm (in-place renormalisation of weight) is not supported")
    rows = index_select(weight, 0, input.reshape(-1))
    return rows.reshape(*input.shape, weight.shape[1])


# ------------------------------------------------------------------ scatter family
@hl_op(torch="torch.Tensor.scatter", category="indexing")
def scatter(x: GraphTensor, dim: int, index: GraphTensor, src: Any = None, *, value: Any = None,
            reduce: str | None = None) -> GraphTensor:
    """Copy of ``x`` with ``out[...][index[i][j]][...] = src[i][j]`` along ``dim`` (torch.Tensor.scatter).

    ``src`` is a tensor (only its leading index-shaped corner is used) or a scalar; ``value=`` is
    the scalar form.  Repeated indexes write one of the candidates (unspecified which, as in
    PyTorch).  ``reduce='add'`` accumulates like :func:`scatter_add`."""
    _check_tensor("scatter", "input", x)
    _check_index("scatter", index, x)
    if (src is None) == (value is None):
        raise ValueError("scatter: pass exactly one of src and value")
    src = value if src is None else src
    k = norm_axis(dim, x.ndim, "scatter")
    if x.ndim == 0:
        raise ShapeError("scatter: 0-d inputs are not supported (use where)")
    _check_fits("scatter", index, x, k, "index", "input")
    s = _src_operand("scatter", x, index, src)
    if reduce is not None:
        if reduce == "add":
            return scatter_add(x, k, index, s)
        raise UnsupportedError(f"scatter: reduce={reduce!r} is not supported (only 'add')")
    return prim("Scatter", x, _scatter_positions(x, k, index), s)


@hl_op(torch="torch.Tensor.scatter", category="indexing", method=False)
def scatter_elements(data: GraphTensor, indices: GraphTensor, updates: GraphTensor, axis: int = 0,
                     reduction: str = "none") -> GraphTensor:
    """ONNX ScatterElements: ``scatter(data, axis, indices, updates)`` with negative indexes
    counting from the end; ``reduction`` 'none' or 'add'."""
    _check_tensor("scatter_elements", "data", data)
    _check_index("scatter_elements", indices, data)
    _check_tensor("scatter_elements", "updates", updates)
    k = norm_axis(axis, data.ndim, "scatter_elements")
    if updates.shape != indices.shape:
        raise ShapeError(f"scatter_elements: updates must have the shape of indices, got updates "
                         f"{fmt_shape(updates.shape)} and indices {fmt_shape(indices.shape)}")
    if reduction not in ("none", "add"):
        raise UnsupportedError(f"scatter_elements: reduction={reduction!r} is not supported ('none', 'add')")
    if data.ndim == 0:
        raise ShapeError("scatter_elements: 0-d data is not supported")
    _check_fits("scatter_elements", indices, data, k, "indices", "data")
    if updates.dtype != data.dtype:
        raise DTypeError(f"scatter_elements: updates must have the dtype of data, got data {data.dtype.name} "
                         f"and updates {updates.dtype.name}")
    idx = _wrap_negative(indices, data.shape[k])
    if reduction == "add":
        return scatter_add(data, k, idx, updates)
    return scatter(data, k, idx, updates)


@hl_op(torch="torch.scatter_add", category="indexing")
def scatter_add(x: GraphTensor, dim: int, index: GraphTensor, src: GraphTensor) -> GraphTensor:
    """``out = x`` then ``out[...][index[i][j]][...] += src[i][j]`` along ``dim``; repeated
    indexes accumulate.  Built as a one-hot mask (every index against every target position),
    a SumReduce over the index axis and an Add: exact for integers, float sums in tree order."""
    from .elementwise import eq, where

    _check_tensor("scatter_add", "input", x)
    _check_index("scatter_add", index, x)
    _check_tensor("scatter_add", "src", src)
    k = norm_axis(dim, x.ndim, "scatter_add")
    if x.dtype.is_bool:
        raise DTypeError(f"scatter_add: not defined for bool input (operands: {describe_operands([x, index, src])})")
    if x.ndim == 0:
        raise ShapeError("scatter_add: 0-d inputs are not supported")
    _check_fits("scatter_add", index, x, k, "index", "input")
    s = _src_operand("scatter_add", x, index, src)
    n, m = x.shape[k], index.shape[k]
    ishape = index.shape
    inner = prod(ishape[k + 1:])
    # axis k: target position j (size n); axis k+1: source position p along dim (size m)
    eshape = ishape[:k] + (n, m) + ishape[k + 1:]
    idx_e = cast(index, dt.int64).unsqueeze(k).expand(*eshape)
    src_e = s.unsqueeze(k).expand(*eshape)
    jpos = x.graph.iota((sym(INDEX_VAR) // (m * inner)) % n, eshape, dt.int64)
    contrib = where(eq(idx_e, jpos), src_e, full(x.graph, eshape, 0, x.dtype))
    summed = prim("SumReduce", contrib, arg=k + 1)  # shape: index's, with dim k of size n
    pads = [(as_expr(0), x.shape[d] - summed.shape[d]) for d in range(x.ndim)]
    if any(hi != 0 for _, hi in pads):
        summed = summed.with_view(summed.st.pad(pads))
    return prim("Add", x, summed)


@hl_op(torch="torch.index_copy", category="indexing")
def index_copy(x: GraphTensor, dim: int, index: GraphTensor, source: GraphTensor) -> GraphTensor:
    """Copy of ``x`` with the slices ``index[i]`` along ``dim`` replaced by ``source``'s slice i.
    Repeated indexes write one of the candidates (unspecified which, as in PyTorch)."""
    _check_tensor("index_copy", "input", x)
    _check_index("index_copy", index, x)
    _check_tensor("index_copy", "source", source)
    k = norm_axis(dim, x.ndim, "index_copy")
    if index.ndim != 1:
        raise ShapeError(f"index_copy: index must be 1-D, got {fmt_shape(index.shape)}")
    if source.dtype != x.dtype:
        raise DTypeError(f"index_copy: source must have the input's dtype, got input {x.dtype.name} and "
                         f"source {source.dtype.name}")
    want = x.shape[:k] + (index.shape[0],) + x.shape[k + 1:]
    if source.shape != want:
        raise ShapeError(f"index_copy: source must have shape {fmt_shape(want)} for input {fmt_shape(x.shape)} "
                         f"and index {fmt_shape(index.shape)}, got {fmt_shape(source.shape)}")
    sel = index.reshape(*([1] * k), index.shape[0], *([1] * (x.ndim - k - 1))).expand(*want)
    return prim("Scatter", x, _scatter_positions(x, k, sel), source)


@hl_op(torch="torch.slice_scatter", category="indexing")
def slice_scatter(x: GraphTensor, src: GraphTensor, dim: int = 0, start: ExprLike = 0) -> GraphTensor:
    """Copy of ``x`` with ``x[..., start:start + len, ...]`` along ``dim`` replaced by ``src`` (step 1).

    ``start`` may be symbolic (a dim expression such as the cache position ``p``): the write
    positions are an iota of it, so one compiled program writes at any position.  Rows that would
    land past the end of the axis are dropped.  Written into an input that an output aliases, this
    is an in-place update (a KV cache's new rows)."""
    _check_tensor("slice_scatter", "input", x)
    _check_tensor("slice_scatter", "src", src)
    k = norm_axis(dim, x.ndim, "slice_scatter")
    if x.ndim == 0:
        raise ShapeError("slice_scatter: 0-d inputs are not supported")
    if src.dtype != x.dtype:
        raise DTypeError(f"slice_scatter: src must have the input's dtype, got input {x.dtype.name} and "
                         f"src {src.dtype.name}")
    if src.ndim != x.ndim or any(a != b for d, (a, b) in enumerate(zip(src.shape, x.shape)) if d != k):
        raise ShapeError(f"slice_scatter: src must match the input's shape except along dim {k}, got input "
                         f"{fmt_shape(x.shape)} and src {fmt_shape(src.shape)}")
    s0 = as_expr(start)
    strides = _row_major_strides(x.shape)
    numel = prod(x.shape)
    if k == 0:  # rows past the end land at numel or beyond, which Scatter skips: no mask needed
        idx = x.graph.iota(sym(INDEX_VAR) + s0 * strides[0], src.shape, dt.int64)
        return prim("Scatter", x, idx, src)
    pos, along = _pos_expr(src.shape, strides, k, s0)
    inside = along.lt(x.shape[k])  # 1 where the row exists (start is a non-negative dim)
    idx = x.graph.iota(pos * inside + numel * (1 - inside), src.shape, dt.int64)  # outside -> skipped
    return prim("Scatter", x, idx, src)


@hl_op(torch="torch.nn.functional.one_hot", category="indexing", method=False)
def one_hot(tensor: GraphTensor, num_classes: ExprLike = -1) -> GraphTensor:
    """int64 tensor of shape ``(*tensor.shape, num_classes)`` with a 1 at each id's position.
    ``num_classes`` must be given (-1, inferring it from the data, has a data-dependent shape)."""
    _check_index("one_hot", tensor)
    if isinstance(num_classes, int) and num_classes == -1:
        raise UnsupportedError("one_hot: num_classes=-1 (inferred from the data) gives a data-dependent "
                               "shape; pass num_classes")
    c = as_expr(num_classes)
    if c.is_const and c.value < 1:
        raise ShapeError(f"one_hot: num_classes must be positive, got {c.value}")
    from .elementwise import eq

    shape = tensor.shape + (c,)
    cls = tensor.graph.iota(sym(INDEX_VAR) % c, shape, dt.int64)
    ids = cast(tensor, dt.int64).unsqueeze(-1).expand(*shape)
    return cast(eq(ids, cls), dt.int64)
