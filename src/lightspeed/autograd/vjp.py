"""The vector-Jacobian product of each primitive: ``VJPS[name](node, operands, out, g)`` gives,
for each operand as the node reads it (a GraphTensor in its view's shape), the gradient of the
loss with respect to that read, or None where there is none; ``out`` is the node's value and ``g``
the gradient with respect to it.  Primitives without one are in :data:`NOT_DIFFERENTIABLE`
(integer or boolean results, index sources).  A test checks that every primitive is in one of
the two."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .. import dtypes as dt
from ..graph import GraphTensor
from ..hl.common import cast, fill_expr, full, prim
from ..hl.elementwise import cos, eq, logical_and, logical_not, reciprocal, trunc, where
from ..symbolic import INDEX_VAR, sym

VJP = Callable[[Any, list[GraphTensor], GraphTensor, GraphTensor], list[GraphTensor | None]]

LN2 = math.log(2.0)


def _keep(g: GraphTensor, axis: int, shape) -> GraphTensor:
    """A reduction's gradient (the axis removed) broadcast back over the reduced axis."""
    kept = tuple(shape[:axis]) + (1,) + tuple(shape[axis + 1:])
    return g.reshape(*kept).expand(*shape)


def _max(node, ops, out, g):
    (x,), axis = ops, node.arg
    m = _keep(out, axis, x.shape)
    # the elements equal to their max, which none exceeds: not below it (a NaN max, from a NaN
    # element, gives every element a share); ties share the gradient evenly (as torch.amax)
    hit = cast(logical_not(x < m), x.dtype)
    count = hit.sum(axis, keepdim=True).expand(*x.shape)
    return [_keep(g, axis, x.shape) * hit * reciprocal(count)]


def _cast(node, ops, out, g):
    return [cast(g, ops[0].dtype) if ops[0].dtype.is_float and out.dtype.is_float else None]


def _gather(node, ops, out, g):
    """d data: each gradient element added at the data index it read (indexes may repeat, as an
    embedding's ids do: a one-hot sum over the reads, [reads, data elements])."""
    idx, data = ops
    reads, size = idx.numel(), data.numel()
    rows = idx.reshape(reads, 1).expand(reads, size)
    cols = data.graph.iota(sym(INDEX_VAR) % size, (reads, size), dt.int64)
    hot = cast(eq(rows, cols), g.dtype)
    return [None, (hot * g.reshape(reads, 1).expand(reads, size)).sum(0).reshape(*data.shape)]


def _scatter(node, ops, out, g):
    """d dest: the gradient where no write landed; d src: the gradient read where each element
    was written (0 for a skipped write)."""
    dest, idx, src = ops
    n = fill_expr(g.graph, dest.numel(), idx.shape, idx.dtype)
    kept = prim("Scatter", g, idx, full(g.graph, src.shape, 0.0, g.dtype))
    inside = logical_and(logical_not(idx < 0), idx < n)
    safe = where(inside, idx, 0)
    read = prim("Gather", safe, g)
    return [kept, None, where(inside, read, 0.0)]


VJPS: dict[str, VJP] = {
    "Add": lambda node, ops, out, g: [g, g],
    "Mul": lambda node, ops, out, g: [g * ops[1], g * ops[0]],
    "Recip": lambda node, ops, out, g: [g * out * out * -1.0],
    "Sqrt": lambda node, ops, out, g: [g * reciprocal(out) * 0.5],
    "Exp2": lambda node, ops, out, g: [g * out * LN2],
    "Log2": lambda node, ops, out, g: [g * reciprocal(ops[0]) * (1.0 / LN2)],
    "Sin": lambda node, ops, out, g: [g * cos(ops[0])],
    "Mod": lambda node, ops, out, g: [g, g * trunc(ops[0] * reciprocal(ops[1])) * -1.0],
    "SumReduce": lambda node, ops, out, g: [_keep(g, node.arg, ops[0].shape)],
    "MaxReduce": _max,
    "Cast": _cast,
    "Gather": _gather,
    "Scatter": _scatter,
}
# primitives whose results carry no gradient: a comparison, index sources, graph plumbing
NOT_DIFFERENTIABLE = frozenset({"LessThan", "Iota", "Input", "Constant", "Output"})
