"""Movement ops: they change only the view (shape tracker), never copy data.

``concat``/``stack`` pad each operand to the full size and add them (one Add per extra operand);
``contiguous`` materialises with a multiply by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..errors import ShapeError, UnsupportedError
from ..graph import GraphTensor
from ..symbolic import Expr, ExprLike, as_expr, prod, smax, smin
from .common import broadcast_to as _broadcast_to
from .common import cast, fmt_shape, full, graph_of, norm_axis, prim
from .registry import hl_op


def _shape_args(shape: tuple) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return shape


@hl_op(torch="torch.reshape", category="movement", aliases=("view",))
def reshape(x: GraphTensor, *shape: Any) -> GraphTensor:
    """Reshape (one dim may be -1).  Never copies: non-mergeable views stack a new view."""
    shape = _shape_args(shape)
    dims = [None if (isinstance(d, int) and d == -1) else as_expr(d) for d in shape]
    if sum(d is None for d in dims) > 1:
        raise ShapeError(f"reshape: only one dim can be -1, got {shape}")
    n = x.numel()
    if None in dims:
        known = prod([d for d in dims if d is not None])
        inferred = n // known if known != 0 else None
        if inferred is None or inferred * known != n:
            raise ShapeError(f"reshape: cannot infer -1 in {shape} for a tensor of shape {fmt_shape(x.shape)}")
        dims = [inferred if d is None else d for d in dims]
    for d in dims:
        if d.is_const and d.value < 0:
            raise ShapeError(f"reshape: negative dim in {shape}")
    try:
        return x.with_view(x.st.reshape(dims))
    except ValueError as e:
        raise ShapeError(str(e)) from None  # the shape tracker names the op


@hl_op(torch="torch.permute", category="movement")
def permute(x: GraphTensor, *dims: int) -> GraphTensor:
    dims = _shape_args(dims)
    order = [norm_axis(d, x.ndim, "permute") for d in dims]
    if sorted(order) != list(range(x.ndim)):
        raise ShapeError(f"permute: {tuple(dims)} is not a permutation of {x.ndim} dims")
    return x.with_view(x.st.permute(order))


@hl_op(torch="torch.transpose", category="movement", aliases=("swapaxes",))
def transpose(x: GraphTensor, dim0: int, dim1: int) -> GraphTensor:
    a, b = norm_axis(dim0, x.ndim, "transpose"), norm_axis(dim1, x.ndim, "transpose")
    order = list(range(x.ndim))
    order[a], order[b] = order[b], order[a]
    return x.with_view(x.st.permute(order))


@hl_op(torch="torch.t", category="movement")
def t(x: GraphTensor) -> GraphTensor:
    if x.ndim > 2:
        raise ShapeError(f"t: expects a tensor of rank <= 2, got rank {x.ndim}")
    return x if x.ndim < 2 else transpose(x, 0, 1)


GraphTensor.T = property(lambda self: permute(self, *reversed(range(self.ndim))))
GraphTensor.mT = property(lambda self: transpose(self, -2, -1))


@hl_op(torch="torch.Tensor.expand", category="movement")
def expand(x: GraphTensor, *sizes: Any) -> GraphTensor:
    sizes = _shape_args(sizes)
    if len(sizes) < x.ndim:
        raise ShapeError(f"expand: target {tuple(sizes)} has fewer dims than the tensor {fmt_shape(x.shape)}")
    lead = len(sizes) - x.ndim
    target: list[Expr] = []
    for k, s in enumerate(sizes):
        if isinstance(s, int) and s == -1:
            if k < lead:
                raise ShapeError(f"expand: -1 is not allowed for a new leading dim ({tuple(sizes)})")
            target.append(x.shape[k - lead])
        else:
            target.append(as_expr(s))
    return _broadcast_to(x, target, "expand")


@hl_op(torch="torch.broadcast_to", category="movement")
def broadcast_to(x: GraphTensor, shape: Sequence[ExprLike]) -> GraphTensor:
    return expand(x, *shape)


@hl_op(torch="torch.Tensor.expand_as", category="movement")
def expand_as(x: GraphTensor, other: GraphTensor) -> GraphTensor:
    return expand(x, *other.shape)


@hl_op(torch="torch.squeeze", category="movement")
def squeeze(x: GraphTensor, dim: int | Sequence[int] | None = None) -> GraphTensor:
    if dim is None:
        axes = [k for k, d in enumerate(x.shape) if d == 1]
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        axes = [norm_axis(d, x.ndim, "squeeze") for d in dims]
        axes = [k for k in axes if x.shape[k] == 1]  # PyTorch: non-1 dims are left alone
    return x.with_view(x.st.reshape([d for k, d in enumerate(x.shape) if k not in axes]))


@hl_op(torch="torch.unsqueeze", category="movement")
def unsqueeze(x: GraphTensor, dim: int) -> GraphTensor:
    k = norm_axis(dim, x.ndim + 1, "unsqueeze")
    shape = list(x.shape)
    shape.insert(k, as_expr(1))
    return x.with_view(x.st.reshape(shape))


@hl_op(torch="torch.flatten", category="movement")
def flatten(x: GraphTensor, start_dim: int = 0, end_dim: int = -1) -> GraphTensor:
    if x.ndim == 0:
        return reshape(x, 1)
    a, b = norm_axis(start_dim, x.ndim, "flatten"), norm_axis(end_dim, x.ndim, "flatten")
    if a > b:
        raise ShapeError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    shape = list(x.shape[:a]) + [prod(x.shape[a:b + 1])] + list(x.shape[b + 1:])
    return x.with_view(x.st.reshape(shape))


@hl_op(torch="torch.unflatten", category="movement")
def unflatten(x: GraphTensor, dim: int, sizes: Sequence[ExprLike]) -> GraphTensor:
    k = norm_axis(dim, x.ndim, "unflatten")
    shape = list(x.shape[:k]) + list(sizes) + list(x.shape[k + 1:])
    return reshape(x, *shape)


@hl_op(torch="torch.Tensor.contiguous", category="movement")
def contiguous(x: GraphTensor) -> GraphTensor:
    """Materialise the view into a fresh buffer (a multiply by one)."""
    if x.st.is_contiguous:
        return x
    return prim("Mul", x, full(x.graph, x.shape, 1, x.dtype))


# ------------------------------------------------------------------ slicing
def _norm_bound(v: Any, size: Expr, default: Expr) -> Expr:
    """Python slice-bound semantics (negative from the end, clamped to [0, size])."""
    if v is None:
        return default
    if isinstance(v, GraphTensor):
        raise UnsupportedError("slice bounds must be ints or dims, not tensors")
    if isinstance(v, (int, np.integer)):
        v = int(v)
        if v < 0:
            e = size + v
            return smax(0, e) if not (size.is_const) else as_expr(max(0, size.value + v))
        return smin(size, v) if not size.is_const else as_expr(min(size.value, v))
    return smin(size, as_expr(v))


def _slice_axis(x: GraphTensor, axis: int, start: Any, stop: Any, step: int | None) -> GraphTensor:
    step = 1 if step is None else int(step)
    if step <= 0:
        raise ShapeError(f"slice: step must be positive, got {step} (use flip to reverse)")
    size = x.shape[axis]
    a = _norm_bound(start, size, as_expr(0))
    b = _norm_bound(stop, size, size)
    # The length is max(0, ceildiv(b - a, step)). For it, a start s >= 0 may be used unclamped:
    # clamping it to the size only matters where s > size >= b, and there the length is 0 either
    # way. That keeps min(size, s) out of the length, so x[:, 1::2] of a (4, 2*t) input has t
    # columns instead of (-min(2*t, 1) + max(2*t, min(2*t, 1)) + 1) // 2.
    a_len = a
    if isinstance(start, (int, np.integer)) and start >= 0:
        a_len = as_expr(int(start))
    elif isinstance(start, (Expr, str)):
        lo = as_expr(start).bounds()[0]
        if lo is not None and lo >= 0:
            a_len = as_expr(start)
    n = smax(0, (b - a_len).ceildiv(step))
    # the stop handed to the view gives exactly that length: (n*step).ceildiv(step) == n. It may
    # pass the size by less than one step (like a Python stop past the end); the last index read,
    # a + (n-1)*step, is inside.
    bounds = [(0, d, 1) for d in x.shape]
    bounds[axis] = (a, a + n * step, step)
    return x.with_view(x.st.slice(bounds))


@hl_op(torch="torch.narrow", category="movement")
def narrow(x: GraphTensor, dim: int, start: ExprLike, length: ExprLike) -> GraphTensor:
    k = norm_axis(dim, x.ndim, "narrow")
    s = as_expr(start)
    if s.is_const and s.value < 0:
        s = x.shape[k] + s
    bounds = [(0, d, 1) for d in x.shape]
    bounds[k] = (s, s + as_expr(length), 1)
    return x.with_view(x.st.slice(bounds))


@hl_op(torch="torch.Tensor.__getitem__", category="movement", function=False, aliases=("__getitem__",))
def getitem(x: GraphTensor, index: Any) -> GraphTensor:
    """Basic indexing: ints (negative ok), slices with positive steps, None, Ellipsis, and one
    integer tensor index (gathered along its axis)."""
    idx = index if isinstance(index, tuple) else (index,)
    n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if sum(1 for i in idx if i is Ellipsis) > 1:
        raise ShapeError("an index can only have a single ellipsis")
    if n_real > x.ndim:
        raise ShapeError(f"too many indices ({n_real}) for a tensor of rank {x.ndim}")
    expanded: list[Any] = []
    for i in idx:
        if i is Ellipsis:
            expanded.extend([slice(None)] * (x.ndim - n_real))
        else:
            expanded.append(i)
    expanded.extend([slice(None)] * (x.ndim - sum(1 for i in expanded if i is not None)))
    out = x
    axis = 0
    squeeze_axes: list[int] = []
    tensor_axes: list[tuple[int, GraphTensor]] = []
    new_axes: list[int] = []
    pos = 0
    for i in expanded:
        if i is None:
            new_axes.append(pos)
            pos += 1
            continue
        if isinstance(i, slice):
            out = _slice_axis(out, axis, i.start, i.stop, i.step)
        elif isinstance(i, (int, np.integer)) and not isinstance(i, bool):
            size = out.shape[axis]
            v = int(i)
            if size.is_const and not -size.value <= v < size.value:
                raise IndexError(f"index {v} is out of bounds for dim {axis} with size {size.value}")
            start = size + v if v < 0 else as_expr(v)
            bounds = [(0, d, 1) for d in out.shape]
            bounds[axis] = (start, start + 1, 1)
            out = out.with_view(out.st.slice(bounds))
            squeeze_axes.append(pos)
        elif isinstance(i, GraphTensor):
            if i.dtype.is_bool:
                raise UnsupportedError("boolean-mask indexing has a data-dependent shape; use where() instead")
            tensor_axes.append((pos, i))
        else:
            raise TypeError(f"unsupported index {i!r} ({type(i).__name__})")
        axis += 1
        pos += 1
    if len(tensor_axes) > 1:
        raise UnsupportedError("indexing with more than one tensor index is not supported; use gather")
    # insert new axes, then drop integer-indexed axes
    shape = list(out.shape)
    for p in new_axes:
        shape.insert(p, as_expr(1))
    if new_axes:
        out = out.with_view(out.st.reshape(shape))
    if tensor_axes:
        from .indexing import index_select

        p, ti = tensor_axes[0]
        flat = ti.reshape(-1)
        size = out.shape[p]
        if not ti.dtype.is_int:
            raise TypeError(f"tensor index must be an integer tensor, got {ti.dtype.name}")
        wrapped = prim("Add", flat, prim("Mul", cast(prim("LessThan", flat, full(x.graph, flat.shape, 0, flat.dtype)),
                                                     flat.dtype), _fill_size(flat, size)))
        out = index_select(out, p, wrapped)
        shp = list(out.shape[:p]) + list(ti.shape) + list(out.shape[p + 1:])
        out = reshape(out, *shp)
        squeeze_axes = [a if a < p else a + ti.ndim - 1 for a in squeeze_axes]
    if squeeze_axes:
        keep = [d for k, d in enumerate(out.shape) if k not in squeeze_axes]
        out = out.with_view(out.st.reshape(keep))
    return out


def _fill_size(t: GraphTensor, size: Expr) -> GraphTensor:
    from .common import fill_expr

    return fill_expr(t.graph, size, t.shape, t.dtype)


# ------------------------------------------------------------------ pad, concat, stack, split
@hl_op(torch="torch.nn.functional.pad", category="movement")
def pad(x: GraphTensor, pad: Sequence[ExprLike], mode: str = "constant", value: float = 0.0) -> GraphTensor:
    """PyTorch F.pad: ``pad`` lists (left, right) pairs starting from the last dim; negative
    amounts crop.  Only ``mode='constant'``."""
    if mode != "constant":
        raise UnsupportedError(f"pad: only mode='constant' is supported, got {mode!r}")
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ShapeError(f"pad: expected an even number of pad amounts for at most {x.ndim} dims, got {tuple(pad)}")
    pairs = [(as_expr(0), as_expr(0))] * x.ndim
    for j in range(len(pad) // 2):
        pairs[x.ndim - 1 - j] = (as_expr(pad[2 * j]), as_expr(pad[2 * j + 1]))
    # crop negative amounts first
    bounds = []
    for d, (lo, hi) in zip(x.shape, pairs):
        start = -lo if (lo.is_const and lo.value < 0) else as_expr(0)
        stop = d + hi if (hi.is_const and hi.value < 0) else d
        bounds.append((start, stop, 1))
    out = x.with_view(x.st.slice(bounds))
    pos = [(lo if not (lo.is_const and lo.value < 0) else as_expr(0),
            hi if not (hi.is_const and hi.value < 0) else as_expr(0)) for lo, hi in pairs]
    if all(lo == 0 and hi == 0 for lo, hi in pos):
        return out
    padded = out.with_view(out.st.pad(pos))
    if value == 0:
        return padded
    from .elementwise import where

    ones = full(x.graph, out.shape, True, dt.bool_)
    inside = ones.with_view(ones.st.pad(pos))
    return where(inside, padded, value)


@hl_op(torch="torch.cat", category="movement", method=False, aliases=("concatenate",))
def concat(tensors: Sequence[GraphTensor], dim: int = 0) -> GraphTensor:
    """Concatenate along ``dim`` (dtypes promote as in torch.cat)."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("concat: expects a non-empty list of tensors")
    graph_of(tensors)
    ref = tensors[0]
    k = norm_axis(dim, ref.ndim, "concat")
    rdt = dt.result_type(*tensors)
    for i, t_ in enumerate(tensors):
        if t_.ndim != ref.ndim or any(a != b for j, (a, b) in enumerate(zip(t_.shape, ref.shape)) if j != k):
            raise ShapeError(f"concat: tensor {i} has shape {fmt_shape(t_.shape)}, incompatible with "
                             f"{fmt_shape(ref.shape)} outside dim {k}")
    if len(tensors) == 1:
        return cast(ref, rdt)
    total = sum((t_.shape[k] for t_ in tensors[1:]), tensors[0].shape[k])
    out = None
    before = as_expr(0)
    for t_ in tensors:
        c = cast(t_, rdt)
        pads = [(0, 0)] * ref.ndim
        pads[k] = (before, total - before - t_.shape[k])
        p = c.with_view(c.st.pad(pads))
        out = p if out is None else prim("Add", out, p)
        before = before + t_.shape[k]
    return out


GraphTensor.cat = lambda self, others, dim=0: concat([self, *others], dim)


@hl_op(torch="torch.stack", category="movement", method=False)
def stack(tensors: Sequence[GraphTensor], dim: int = 0) -> GraphTensor:
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("stack: expects a non-empty list of tensors")
    k = norm_axis(dim, tensors[0].ndim + 1, "stack")
    for i, t_ in enumerate(tensors):
        if t_.shape != tensors[0].shape:
            raise ShapeError(f"stack: tensor {i} has shape {fmt_shape(t_.shape)}, "
                             f"expected {fmt_shape(tensors[0].shape)}")
    return concat([unsqueeze(t_, k) for t_ in tensors], k)


@hl_op(torch="torch.split", category="movement")
def split(x: GraphTensor, split_size_or_sections: int | Sequence[int], dim: int = 0) -> list[GraphTensor]:
    k = norm_axis(dim, x.ndim, "split")
    size = x.shape[k]
    if isinstance(split_size_or_sections, int):
        if not size.is_const:
            raise UnsupportedError("split: an int split size needs a constant dim; pass explicit sections")
        s = split_size_or_sections
        sections = [min(s, size.value - i) for i in range(0, size.value, s)]
    else:
        sections = list(split_size_or_sections)
        if sum(sections) != size:
            raise ShapeError(f"split: sections {sections} do not add up to dim {k} of size {size}")
    out, start = [], as_expr(0)
    for s in sections:
        out.append(narrow(x, k, start, s))
        start = start + s
    return out


@hl_op(torch="torch.chunk", category="movement")
def chunk(x: GraphTensor, chunks: int, dim: int = 0) -> list[GraphTensor]:
    k = norm_axis(dim, x.ndim, "chunk")
    size = x.shape[k]
    if not size.is_const:
        raise UnsupportedError("chunk: needs a constant dim size")
    step = -(-size.value // chunks)
    return split(x, step, k)


@hl_op(torch="torch.unbind", category="movement")
def unbind(x: GraphTensor, dim: int = 0) -> list[GraphTensor]:
    k = norm_axis(dim, x.ndim, "unbind")
    size = x.shape[k]
    if not size.is_const:
        raise UnsupportedError("unbind: needs a constant dim size")
    idx: list[Any] = [slice(None)] * x.ndim
    out = []
    for i in range(size.value):
        idx[k] = i
        out.append(getitem(x, tuple(idx)))
    return out


@hl_op(torch="torch.Tensor.repeat", category="movement")
def repeat(x: GraphTensor, *sizes: ExprLike) -> GraphTensor:
    sizes = _shape_args(sizes)
    if len(sizes) < x.ndim:
        raise ShapeError(f"repeat: number of repeat dims ({len(sizes)}) is less than the tensor rank {x.ndim}")
    lead = len(sizes) - x.ndim
    shape = (as_expr(1),) * lead + x.shape
    inter, target, final = [], [], []
    for r, d in zip(sizes, shape):
        inter += [1, d]
        target += [as_expr(r), d]
        final.append(as_expr(r) * d)
    st = x.st.reshape(inter).expand(target).reshape(final)
    return x.with_view(st)


@hl_op(torch="torch.flip", category="movement")
def flip(x: GraphTensor, dims: int | Sequence[int]) -> GraphTensor:
    dims = [dims] if isinstance(dims, int) else list(dims)
    axes = sorted({norm_axis(d, x.ndim, "flip") for d in dims})
    return x.with_view(x.st.flip(axes))


@hl_op(torch="torch.Tensor.unfold", category="movement")
def unfold(x: GraphTensor, dimension: int, size: int, step: int) -> GraphTensor:
    k = norm_axis(dimension, x.ndim, "unfold")
    if size < 1 or step < 1:
        raise ShapeError(f"unfold: size and step must be positive, got size={size} step={step}")
    d = x.shape[k]
    if d.is_const and d.value < size:
        raise ShapeError(f"unfold: size {size} exceeds dim {k} of size {d.value}")
    return x.with_view(x.st.unfold(k, size, step))


@hl_op(torch="torch.repeat_interleave", category="movement")
def repeat_interleave(x: GraphTensor, repeats: int, dim: int | None = None) -> GraphTensor:
    """Repeat each element ``repeats`` times along ``dim`` (flattened first when dim is None);
    a view (unsqueeze + expand + merge), e.g. grouped-query attention's KV head sharing."""
    if not isinstance(repeats, int) or repeats < 0:
        raise ShapeError(f"repeat_interleave: repeats must be a non-negative int, got {repeats!r}")
    if dim is None:
        x, dim = flatten(x), 0
    k = norm_axis(dim, x.ndim, "repeat_interleave")
    shape = list(x.shape)
    y = unsqueeze(x, k + 1)
    y = expand(y, *shape[:k + 1], repeats, *shape[k + 1:])
    return flatten(y, k, k + 1)
