"""Reverse-mode gradients as a graph transformation: ``ls.grad(loss, [w1, w2])`` appends to the
loss's graph the nodes that compute d loss / d w, built from the 15 primitives like the forward
pass, so the backward pass is compiled, searched and run by the same pipeline.

Each primitive's vector-Jacobian product is one row of :data:`.vjp.VJPS` (a test checks that every
primitive has one, or is declared not differentiable).  A VJP gives the gradient of each operand
as the consumer reads it (in its view's shape); :func:`untranspose` carries it back through the
view to the operand node's own shape: broadcast axes (stride 0) are summed, the rest of a view
(permute, reshape, slice, pad, flip: each element read at most once) is a Scatter of the gradient
to the indexes the view reads -- padding (masked reads) writes nowhere.  Gradients of a node read
several times add up.  Symbolic dims stay symbolic.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence

from .. import dtypes as dt
from ..errors import InputError, UnsupportedError
from ..graph import GraphTensor
from ..hl.common import cast, full, prim
from ..hl.elementwise import logical_not, reciprocal
from ..shape import ShapeTracker, View, unflatten_index
from ..symbolic import INDEX_VAR, const, prod, sym
from .vjp import NOT_DIFFERENTIABLE, VJPS

__all__ = ["grad", "untranspose", "VJPS", "NOT_DIFFERENTIABLE"]


def grad(loss: GraphTensor, wrt: Sequence[GraphTensor]) -> list[GraphTensor]:
    """d ``loss`` / d each tensor of ``wrt`` (one element, a float), as graph tensors of the wrt
    tensors' shapes and dtypes; a tensor the loss does not depend on gets zeros."""
    if not isinstance(loss, GraphTensor):
        raise InputError(f"grad: loss must be a GraphTensor, got {type(loss).__name__}")
    if isinstance(wrt, GraphTensor) or not all(isinstance(t, GraphTensor) for t in wrt):
        raise InputError("grad: wrt must be a sequence of GraphTensors")
    if not loss.dtype.is_float:
        raise InputError(f"grad: the loss must be a float, got {loss.dtype.name}")
    if not (loss.numel().is_const and loss.numel().value == 1):
        raise InputError(f"grad: the loss must have one element, got shape {tuple(map(str, loss.shape))}")
    g = loss.graph
    for t in wrt:
        if t.graph is not g:
            raise InputError(f"grad: {t!r} belongs to another graph than the loss")
        if not t.dtype.is_float:
            raise InputError(f"grad: cannot differentiate with respect to {t.dtype.name} tensor {t!r}")
    order = sorted(g.reachable([loss.node]), reverse=True)  # inputs precede their consumers
    grads: dict[int, GraphTensor] = {
        loss.node: untranspose(full(g, loss.shape, 1.0, loss.dtype), loss.st, g.nodes[loss.node].shape)}
    for nid in order:
        gout = grads.get(nid)
        node = g.nodes[nid]
        if gout is None or node.op.name in ("Input", "Constant", "Iota"):
            continue
        if node.op.name == "MaxReduce" and _stacked_max(g, node, nid, gout, grads):
            continue
        rule = VJPS.get(node.op.name)
        if rule is None:
            if node.op.name in NOT_DIFFERENTIABLE:
                continue
            raise UnsupportedError(f"grad: no vector-Jacobian product for {node.op.name}")
        operands = [GraphTensor(g, i, st, g.nodes[i].dtype) for i, st in node.inputs]
        out = GraphTensor(g, nid, ShapeTracker.contiguous(node.shape), node.dtype)
        for (i, st), d in zip(node.inputs, rule(node, operands, out, gout)):
            if d is None or not g.nodes[i].dtype.is_float:
                continue
            back = untranspose(d, st, g.nodes[i].shape)
            grads[i] = back if i not in grads else grads[i] + back
    return [_read_as(t, grads.get(t.node)) for t in wrt]


def _stacked_max(g, node, nid: int, gout: GraphTensor, grads: dict[int, GraphTensor]) -> bool:
    """The gradient of an element-wise maximum (``hl.maximum``: operands stacked along a new axis
    by padded views added together, then MaxReduce over it), given straight to the stacked
    operands: d x_k = g * hit_k / (hit_0 + hit_1 + ...) with hit_k = not (x_k < max), element-wise
    in the operands' shape.  The generic rule would make the stack, its mask and its count as
    tensors with the extra axis (a relu's backward was four such passes over twice its size).
    False (nothing done) where the MaxReduce reads anything else."""
    axis = node.arg
    (src, st), = node.inputs
    add = g.nodes[src]
    if add.op.name != "Add" or not (st.is_contiguous and tuple(st.shape) == tuple(add.shape)):
        return False
    size = add.shape[axis]
    if not size.is_const or size.value != len(add.inputs):
        return False
    slots: list[tuple[int, ShapeTracker, int]] = []  # (operand node, its view, its position on the axis)
    for i, vst in add.inputs:
        last = vst.views[-1]
        if last.mask is None:
            return False
        lo, hi = last.mask[axis]
        if not (lo.is_const and hi.is_const and hi.value == lo.value + 1) or any(
                not (a == 0 and b == n) for k, ((a, b), n) in enumerate(zip(last.mask, last.shape)) if k != axis):
            return False
        slots.append((i, vst, lo.value))
    if sorted(p for _, _, p in slots) != list(range(size.value)):
        return False
    out = GraphTensor(g, nid, ShapeTracker.contiguous(node.shape), node.dtype)
    keep = tuple(add.shape[:axis]) + (1,) + tuple(add.shape[axis + 1:])
    m = out.reshape(*keep)
    gk = gout.reshape(*keep)
    reads = [GraphTensor(g, i, vst, g.nodes[i].dtype)[(slice(None),) * axis + (slice(p, p + 1),)]
             for i, vst, p in slots]
    hits = [cast(logical_not(r < m), out.dtype) for r in reads]
    share = gk * reciprocal(functools.reduce(operator.add, hits))
    for (i, vst, p), h in zip(slots, hits):
        if not g.nodes[i].dtype.is_float:
            continue
        mine = share * h
        d = mine.with_view(mine.st.pad([(0, 0)] * axis + [(p, size.value - 1 - p)] + [(0, 0)] * (len(keep) - axis - 1)))
        back = untranspose(d, vst, g.nodes[i].shape)
        grads[i] = back if i not in grads else grads[i] + back
    return True


def _read_as(t: GraphTensor, gnode: GraphTensor | None) -> GraphTensor:
    """The gradient of node ``t.node`` read through ``t``'s view (zeros when there is none)."""
    if gnode is None:
        return full(t.graph, t.shape, 0.0, t.dtype)
    if t.st.is_contiguous and tuple(t.shape) == tuple(gnode.shape):
        return gnode
    if not gnode.st.is_contiguous:  # give it its own buffer, laid out like the node
        gnode = gnode + full(t.graph, gnode.shape, 0.0, gnode.dtype)
    return gnode.with_view(t.st)


def untranspose(d: GraphTensor, st: ShapeTracker, shape) -> GraphTensor:
    """The gradient of a node of ``shape`` read through view ``st``, from ``d``, the gradient of
    what the view read (``st``'s shape): each view of the stack undone, last first."""
    if st.is_contiguous and tuple(st.shape) == tuple(shape):
        return d
    for k in range(len(st.views) - 1, -1, -1):
        space = st.views[k - 1].shape if k > 0 else tuple(shape)
        d = _untranspose_view(d, st.views[k], tuple(space))
    return d


def _untranspose_view(d: GraphTensor, v: View, space: tuple) -> GraphTensor:
    shape, mask = list(v.shape), None if v.mask is None else list(v.mask)
    broadcast = [k for k, (n, s) in enumerate(zip(v.shape, v.strides)) if s == 0 and n != 1]
    if broadcast:  # every read of one element adds to its gradient (the reads inside the mask)
        for k in broadcast:
            if mask is not None and not (mask[k][0] == 0 and mask[k][1] == v.shape[k]):
                lo, hi = mask[k]
                inner = prod(v.shape[k + 1:])
                at = (sym(INDEX_VAR) // inner) % v.shape[k]  # the read's position along axis k
                d = d * cast(d.graph.iota(at.ge(lo) * at.lt(hi), tuple(v.shape), dt.int64), d.dtype)
            shape[k] = const(1)
            if mask is not None:
                mask[k] = (const(0), const(1))
        d = _sum_axes(d, broadcast)
    view = View(tuple(shape), v.strides, v.offset, None if mask is None else tuple(mask))
    n = prod(space)
    if mask is not None and all(lo.is_const and hi.is_const for lo, hi in mask):
        # padding (a box of reads, nothing outside it): the gradient inside the box, a slice of
        # d, when the box reads every element once (a pad's or a stack's transpose is a slice)
        box = View(tuple(hi - lo for lo, hi in mask), v.strides,
                   v.offset + sum((lo * st for (lo, _), st in zip(mask, v.strides)), const(0)))
        if (box.is_contiguous and prod(box.shape) == n) or _permutation_of(box, space) is not None:
            inside = d[tuple(slice(lo.value, hi.value) for lo, hi in mask)]
            return _untranspose_view(inside, box, space)
    if view.is_contiguous and prod(shape) == n:
        return d.reshape(*space)
    order = _permutation_of(view, space)
    if order is not None:  # every element read once, in some order: the inverse is a view too
        return d.reshape(*view.shape).permute(*order).reshape(*space)
    box = _box_in_permutation(view, space)
    if box is not None:  # a box of a permuted layout (a slice, a split's part): padded back into it
        order, pads = box
        src = d.reshape(*[n for n in view.shape if not (n.is_const and n.value == 1)])  # the axes box pads
        padded = src.with_view(src.st.pad(pads))
        return padded.permute(*order).reshape(*space)
    split = _overlapping_axis(view)
    if split is not None:  # windows that overlap (unfold): one injective view per window offset, summed
        out = None
        for i in range(view.shape[split].value):
            if view.mask is not None and not (view.mask[split][0].value <= i < view.mask[split][1].value):
                continue
            part = View(_drop(view.shape, split), _drop(view.strides, split), view.offset + i * view.strides[split],
                        None if view.mask is None else _drop(view.mask, split))
            di = d[(slice(None),) * split + (i,)]  # d has the view's shape (size-1 axes where it broadcast)
            term = _untranspose_view(di, part, space)
            out = term if out is None else out + term
        return out if out is not None else full(d.graph, space, 0.0, d.dtype)
    index, valid = view.index_and_valid(unflatten_index(sym(INDEX_VAR), view.shape))
    if valid != 1:  # padding reads nothing: its gradient goes to an index Scatter skips
        index = index * valid + n * (1 - valid)
    g = d.graph
    # over d's own shape: the view's, maybe written differently (max(s - 1, 0) for s - 1)
    src = d if d.ndim == len(view.shape) else d.reshape(*view.shape)
    where = g.iota(index, src.shape, dt.int64)
    dest = full(g, (n,), 0.0, d.dtype)
    return prim("Scatter", dest, where, src).reshape(*space)


def _sum_axes(d: GraphTensor, axes: list[int]) -> GraphTensor:
    """``d`` summed over ``axes``, keeping them as size 1.  A product just made by a VJP (a Mul
    read whole) is made again with the summed axes last, so the sum is a reduction over the last
    axis of a product: the form linalg.egg takes as a Matmul (the backward of a matmul is two
    matmuls, not a broadcast product reduced in the middle)."""
    g = d.graph
    node = g.nodes[d.node]
    if node.op.name == "Mul" and d.st.is_contiguous and tuple(d.shape) == tuple(node.shape):
        keep = [k for k in range(d.ndim) if k not in axes]
        order = keep + list(axes)
        # the summed axes merged into one (a weight's gradient sums over batch and positions: one
        # product over their count, not a product then another reduction)
        flat = [*(d.shape[k] for k in keep), prod([d.shape[k] for k in axes])]
        a, b = (GraphTensor(g, i, st, g.nodes[i].dtype).permute(*order).reshape(*flat) for i, st in node.inputs)
        kept = [d.shape[k] if k in keep else 1 for k in range(d.ndim)]
        return prim("Mul", a, b).sum(-1).reshape(*kept)
    return d.sum(axes, keepdim=True)


def _permutation_of(v: View, space: tuple) -> list[int] | None:
    """The axis order that lays view ``v`` out row-major, when ``v`` reads every element of
    ``space`` exactly once (a permute of a reshape: no offset, no mask, its strides sorted the
    contiguous strides of its own shape), else None."""
    if v.mask is not None or v.offset != 0 or not all(s.is_const for s in v.strides) \
            or not all(n.is_const for n in v.shape):
        return None
    order = sorted(range(len(v.shape)), key=lambda k: -v.strides[k].value)
    expect = 1
    for k in reversed(order):
        n = v.shape[k].value
        if n != 1 and v.strides[k].value != expect:
            return None
        expect *= n
    total = prod(space)
    return order if total.is_const and total.value == expect else None


def _box_in_permutation(v: View, space: tuple) -> tuple[list[int], list[tuple[int, int]]] | None:
    """When view ``v`` reads a box of ``space`` laid out as some permutation of a reshape (each
    element at most once: ``qkv[0]`` of a permuted [3, heads, ...] split, ``x[:, 64:128]``),
    the axis order and the padding that put the box back: (order of v's axes of size > 1 from
    the largest stride down, (before, after) per such axis), else None.  Each axis of size > 1
    spans ``full`` elements of its stride (the next larger stride over its own; the last one
    ``space`` over its stride), the box starting at the offset's coordinate on it."""
    if v.mask is not None or not v.offset.is_const or not all(s.is_const for s in v.strides):
        return None
    n = prod(space)
    if not n.is_const or not all(d.is_const for d in v.shape):
        return None
    axes = sorted((v.strides[k].value, v.shape[k].value, k) for k in range(len(v.shape)) if v.shape[k].value != 1)
    if not axes or axes[0][0] != 1:
        return None
    fulls = []
    for j, (stride, size, _) in enumerate(axes):
        span = axes[j + 1][0] if j + 1 < len(axes) else n.value
        if span % stride or span // stride < size:
            return None
        fulls.append(span // stride)
    rem, starts = v.offset.value, [0] * len(axes)
    for j in range(len(axes) - 1, -1, -1):
        starts[j], rem = divmod(rem, axes[j][0])
        if starts[j] + axes[j][1] > fulls[j]:
            return None
    if rem or all(f == size for f, (_, size, _) in zip(fulls, axes)):
        return None  # (every element read once: a permutation, handled before)
    kept = [k for k in range(len(v.shape)) if v.shape[k].value != 1]
    pos = {k: kept.index(k) for k in kept}
    pads = [(0, 0)] * len(kept)
    for (_, size, k), f, st in zip(axes, fulls, starts):
        pads[pos[k]] = (st, f - size - st)
    order = [pos[k] for _, _, k in reversed(axes)]
    return order, pads


def _drop(items, k: int) -> tuple:
    return tuple(items[:k]) + tuple(items[k + 1:])


def _overlapping_axis(v: View) -> int | None:
    """An axis whose reads overlap another's (unfold's window axis: its stride is within the span
    of the axes with smaller strides), the one of static size to split the view along, else None
    (each element read at most once; views with symbolic strides are made by permute / reshape /
    slice / pad / flip, which never overlap)."""
    axes = sorted((abs(s.value), k) for k, (s, n) in enumerate(zip(v.strides, v.shape))
                  if s.is_const and not (n.is_const and n.value <= 1))
    if len(axes) != sum(1 for n in v.shape if not (n.is_const and n.value <= 1)):
        return None
    span = 0
    for stride, k in axes:
        if stride <= span:  # k overlaps the axes below it: split the smaller of k and the widest below
            below = [j for s, j in axes if s < stride or (s == stride and j != k)]
            choices = [j for j in (k, *below) if v.shape[j].is_const]
            if not choices:
                raise UnsupportedError("grad: overlapping windows of symbolic size have no gradient yet")
            return min(choices, key=lambda j: v.shape[j].value)
        span += stride * (v.shape[k].value - 1) if v.shape[k].is_const else 1 << 62
    return None
