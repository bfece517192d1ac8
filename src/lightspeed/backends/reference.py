"""The reference runtime: an exact numpy interpreter of HLIR, the oracle for every other backend.

Each node's result is a contiguous numpy array of the node's shape.  An op reads an input through
its view by evaluating the view's index and validity expressions over the flat logical index (a
vectorised numpy evaluation, cached per view and dim binding); masked positions read zero.
Values are freed after their last use.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..graph import Graph
from ..program import Program
from ..shape import ShapeTracker
from ..symbolic import INDEX_VAR
from . import register_backend

__all__ = ["ReferenceProgram", "read_view", "strided_array", "last_uses"]


_VARS: dict[ShapeTracker, tuple[str, ...]] = {}


def _view_vars(st: ShapeTracker) -> tuple[str, ...]:
    names = _VARS.get(st)
    if names is None:
        acc: set[str] = set()
        for v in st.views:
            for e in (*v.shape, *v.strides, v.offset):
                acc |= e.free_vars()
            if v.mask is not None:
                for lo, hi in v.mask:
                    acc |= lo.free_vars() | hi.free_vars()
        names = _VARS[st] = tuple(sorted(acc))
    return names


def _dims_key(st: ShapeTracker, env: dict[str, int]) -> tuple:
    return tuple((n, env[n]) for n in _view_vars(st))


_INDEX_CACHE: dict[tuple, tuple[np.ndarray, np.ndarray | None]] = {}
_INDEX_CACHE_MAX = 4096


def _view_indexes(st: ShapeTracker, env: dict[str, int], shape: tuple[int, ...]):
    key = (st, _dims_key(st, env))
    hit = _INDEX_CACHE.get(key)
    if hit is not None:
        return hit
    n = int(np.prod(shape, dtype=np.int64))
    z = np.arange(n, dtype=np.int64)
    genv = {**env, INDEX_VAR: z}
    idx = np.broadcast_to(np.asarray(st.index_expr().evaluate(genv), dtype=np.int64), (n,))
    valid_e = st.valid_expr()
    valid = None
    if not (valid_e.is_const and valid_e.value == 1):
        valid = np.broadcast_to(np.asarray(valid_e.evaluate(genv)).astype(bool), (n,))
        if valid.all():
            valid = None
    if len(_INDEX_CACHE) >= _INDEX_CACHE_MAX:
        _INDEX_CACHE.clear()
    _INDEX_CACHE[key] = (idx, valid)
    return idx, valid


# per (view, dim values): ("contig", shape, n) | ("strided", shape, offset, strides) | ("index", shape)
_PLANS: dict[tuple, tuple] = {}


def _plan(st: ShapeTracker, env: dict[str, int]) -> tuple:
    key = (st, _dims_key(st, env))
    p = _PLANS.get(key)
    if p is None:
        shape = tuple(int(d.evaluate(env)) for d in st.shape)
        if st.is_contiguous:  # row-major strides from offset 0: a prefix (all of it unless sliced)
            p = ("contig", shape, int(np.prod(shape, dtype=np.int64)))
        elif len(st.views) == 1 and st.view.mask is None:
            v = st.view
            p = ("strided", shape, int(v.offset.evaluate(env)), tuple(int(x.evaluate(env)) for x in v.strides))
        else:
            p = ("index", shape)
        if len(_PLANS) > 65536:
            _PLANS.clear()
        _PLANS[key] = p
    return p


def read_view(buf: np.ndarray, st: ShapeTracker, env: dict[str, int]) -> np.ndarray:
    """The array a view of ``buf`` (a node's contiguous result) shows, as a new/contiguous array."""
    plan = _plan(st, env)
    flat = buf.reshape(-1)
    shape = plan[1]
    if plan[0] == "contig":
        return flat[:plan[2]].reshape(shape)
    if plan[0] == "strided":
        return strided_array(flat, plan[2], shape, plan[3])
    idx, valid = _view_indexes(st, env, shape)
    if valid is None:
        if idx.size and (idx.min() < 0 or idx.max() >= flat.size):
            raise AssertionError(f"view reads out of bounds: {st} over {flat.size} elements")
        return flat[idx].reshape(shape)
    out = np.zeros(idx.shape, dtype=buf.dtype)
    if flat.size:
        sel = idx[valid]
        if sel.size and (sel.min() < 0 or sel.max() >= flat.size):
            raise AssertionError(f"view reads out of bounds: {st} over {flat.size} elements")
        out[valid] = flat[sel]
    return out.reshape(shape)


def strided_array(buf: np.ndarray, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """A read-only numpy view of ``buf``'s flat elements ``offset + sum(i_k * strides[k])``,
    bounds-checked (element strides, may be negative or zero)."""
    flat = buf.reshape(-1)
    if 0 in shape:
        return np.zeros(shape, dtype=flat.dtype)
    lo = offset + sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    hi = offset + sum(max(0, (n - 1) * s) for n, s in zip(shape, strides))
    if lo < 0 or hi >= flat.size:
        raise IndexError(f"strided read [{lo}, {hi}] outside a buffer of {flat.size} elements")
    # the ndarray constructor is ~10x cheaper than np.lib.stride_tricks.as_strided per call
    out = np.ndarray(shape, dtype=flat.dtype, buffer=flat, offset=offset * flat.itemsize,
                     strides=tuple(s * flat.itemsize for s in strides))
    out.flags.writeable = False
    return out


def last_uses(inputs_per_op: list[tuple[int, ...]]) -> dict[int, list[int]]:
    """Liveness: op index -> the values whose last reader it is (free them after it runs)."""
    last: dict[int, int] = {}
    for i, ins in enumerate(inputs_per_op):
        for j in ins:
            last[j] = i
    out: dict[int, list[int]] = {}
    for j, i in last.items():
        out.setdefault(i, []).append(j)
    return out


class ReferenceProgram(Program):
    backend_name = "reference"

    def __init__(self, graph: Graph):
        super().__init__(graph)
        self.order = graph.reachable()
        pos = {nid: k for k, nid in enumerate(self.order)}
        plan = last_uses([tuple(pos[src] for src, _ in graph.nodes[i].inputs) for i in self.order])
        self.free_after: dict[int, list[int]] = {self.order[k]: [self.order[j] for j in js] for k, js in plan.items()}

    def execute(self, arrays: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
        nodes = self.graph.nodes
        values: dict[int, np.ndarray] = {}
        outputs: dict[str, np.ndarray] = {}
        for i in self.order:
            n = nodes[i]
            if n.op.name == "Input":
                val = np.ascontiguousarray(arrays[n.arg.name])
            else:
                args = [read_view(values[src], st, dims) for src, st in n.inputs]
                val = n.op.reference(args, n.arg, dims)
                shape = tuple(int(d.evaluate(dims)) for d in n.shape)
                val = np.ascontiguousarray(np.asarray(val, dtype=n.dtype.np)).reshape(shape)
            if n.op.name == "Output":
                outputs[n.arg] = val.copy()
            values[i] = val
            for src in self.free_after.get(i, ()):
                values.pop(src, None)
        return {name: outputs[name] for name in self.output_names}


class ReferenceBackend:
    name = "reference"

    def compile(self, graph: Graph, **options: Any) -> ReferenceProgram:
        if options:
            raise TypeError(f"reference backend takes no options, got {sorted(options)}")
        return ReferenceProgram(graph)


register_backend(ReferenceBackend())
