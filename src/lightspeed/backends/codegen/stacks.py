"""Stacked weights in a kernel program's LLIR (codegen/stacked.egg: a layer's q, k and v, or gate
and up, as one product over their weights stacked along the rows).

:func:`stack_members` recognises the op that stacks them (a persisted program reads it in place
where the weights lie one after another: ``KernelProgram._stack_span``); :func:`read_slices_in_place`
removes the regions that only copy a column slice of such a product, where their readers can
read the product through the composed view instead (region leaves, ``Output`` and an
attention's query leaves take any view): the fusion rules inline a region only into a reader at
its own shape, so RoPE's halves of k, the cache row's ``Output`` of v and the attention's q read
copies (~1, 1 and 2 MB a layer at a 1B's 512 rows).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from ...egraph.llir import LOp, LProgram
from ...shape import ShapeTracker

__all__ = ["stack_members", "read_slices_in_place"]


def stack_members(lprog: LProgram, i: int) -> list[tuple[str, int]] | None:
    """[(input name, first row)] in row order when op ``i`` stacks whole 2-D inputs along their
    rows (codegen/stacked.egg's weights: a region adding each input read through a view masked
    to its rows [lo, hi) of the stack), else None."""
    op = lprog.ops[i]
    if op.op != "Fused" or len(op.shape) != 2 or not all(d.is_const for d in op.shape):
        return None
    n, k = (int(d.value) for d in op.shape)

    def leaves(body: tuple) -> list[int] | None:
        if body[0] == "leaf":
            return [body[1]]
        if body[0] != "Add":
            return None
        a, b = leaves(body[1]), leaves(body[2])
        return None if a is None or b is None else a + b
    order = leaves(op.args["body"])
    if order is None or sorted(order) != list(range(len(op.inputs))) or len(order) < 2:
        return None
    members = []
    for leaf, j in enumerate(op.inputs):
        src, views = lprog.ops[j], op.leaf_views[leaf].views
        if src.op != "Input" or src.dtype != op.dtype or len(views) != 1 or len(src.shape) != 2:
            return None
        v = views[0]
        if v.mask is None or v.strides != (k, 1) or tuple(v.mask[1]) != (0, k):
            return None
        lo, hi = (int(x.value) if hasattr(x, "value") else int(x) for x in v.mask[0])
        if tuple(src.shape) != (hi - lo, k) or v.offset != -lo * k:
            return None
        members.append((src.args["name"], lo, hi))
    members.sort(key=lambda m: m[1])
    if members[0][1] != 0 or members[-1][2] != n or any(a[2] != b[1] for a, b in zip(members, members[1:])):
        return None
    return [(name, lo) for name, lo, _ in members]


def _slice_of_stacked_product(lprog: LProgram, i: int) -> ShapeTracker | None:
    """The view through which op ``i`` copies its product, when it is a region whose body is one
    leaf of a product over stacked weights (a column slice), else None."""
    op = lprog.ops[i]
    if op.op != "Fused" or op.args["body"] != ("leaf", 0) or len(op.inputs) != 1:
        return None
    src = lprog.ops[op.inputs[0]]
    if "Matmul" not in src.op or len(src.inputs) < 2 or stack_members(lprog, src.inputs[1]) is None:
        return None
    return op.leaf_views[0]


def _leaves(body: tuple) -> set[int]:
    """The leaf indexes a scalar body reads."""
    if body[0] == "leaf":
        return {body[1]}
    return set().union(*(_leaves(x) for x in body[1:] if isinstance(x, tuple)))


def read_slices_in_place(lprog: LProgram) -> LProgram:
    """``lprog`` with each column slice of a stacked product read in place by the readers that
    take a view (regions' leaves, ``Output``, an attention's query leaves): their view composed
    over the slice's; a slice no reader needs any more is dropped.  Others keep reading the copy."""
    ops = lprog.ops
    slices = {i: v for i in range(len(ops)) if (v := _slice_of_stacked_product(lprog, i)) is not None}
    if not slices:
        return lprog
    def in_place(op: LOp, leaves: Iterable[int], first: int) -> LOp:
        """``op`` with each of ``leaves`` (input k, leaf view k - first) that reads a slice
        reading its product instead, through the slice's view then its own."""
        inputs, views = list(op.inputs), list(op.leaf_views)
        for k in leaves:
            j = inputs[k]
            if j in slices:
                inputs[k] = ops[j].inputs[0]
                views[k - first] = ShapeTracker(slices[j].views + views[k - first].views)
        return dataclasses.replace(op, inputs=tuple(inputs), leaf_views=tuple(views))
    new: list[LOp] = []
    for op in ops:
        if op.op == "Fused":
            op = in_place(op, range(len(op.inputs)), 0)
        elif op.op in ("Attention", "AttentionMma"):
            # the queries' leaves (region leaf k: input k, leaf view k - 1; 0 is the mask), which
            # the kernels evaluate through their body; keys' and values' leaves keep their fast paths
            a = op.args
            op = in_place(op, _leaves(a["q_body"]) - _leaves(a["k_body"]) - _leaves(a["v_body"]), 1)
        elif op.op == "Output" and op.inputs[0] in slices:
            j = op.inputs[0]
            view = ShapeTracker(slices[j].views + op.args["x_view"].views)
            op = dataclasses.replace(op, inputs=(ops[j].inputs[0],), args={**op.args, "x_view": view})
        new.append(op)
    read = {j for op in new for j in op.inputs}
    keep = [i for i in range(len(new)) if i not in slices or i in read]
    index = {old: k for k, old in enumerate(keep)}
    out = [dataclasses.replace(new[i], inputs=tuple(index[j] for j in new[i].inputs)) for i in keep]
    return dataclasses.replace(lprog, ops=out, outputs={name: index[i] for name, i in lprog.outputs.items()})
