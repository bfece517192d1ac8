"""Running an LLIR program on the cpu: per-dims execution plans over a liveness-planned arena.

For each binding of the symbolic dims (cached, most recent few) the program is *prepared* once:
every view is resolved to a reader (contiguous prefix, strided numpy view, or an index gather),
every kernel to a step with its numbers (strides, offsets, region function) fixed, and every
intermediate value to a preallocated buffer.  Buffers come from an arena planned by liveness: a
value's buffer returns to the pool after its last reader ran and is handed to a later value of the
same dtype and size, so peak memory follows the live set, not the op count.  A call then only runs
the steps.  Inputs and constants are read in place and never written; outputs are fresh copies,
so callers never hold arena memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...egraph.llir import LOp, LProgram
from ...graph import Graph
from ...primitives import PRIMITIVES, IotaArg
from ...program import Program
from ...shape import ShapeTracker
from ...symbolic import Expr
from ..reference import _plan as view_plan
from ..reference import last_uses, read_view

__all__ = ["CpuProgram", "Reader", "make_reader", "strided_reader", "Arena", "Kernel"]

Reader = Callable[[np.ndarray], np.ndarray]
# a kernel's preparation: (op, dim values, input dtypes) -> Kernel
Prepare = Callable[[LOp, dict[str, int], list[np.dtype]], "Kernel"]


@dataclass
class Kernel:
    """A prepared op: ``run(ins, out, scratch)`` where ``ins`` are the op's input buffers (raw, not
    read through views: the kernel reads them itself) and ``out`` its preallocated result."""

    run: Callable[[list[np.ndarray], np.ndarray, list[np.ndarray]], None]
    scratch: tuple[np.dtype, ...] = ()


def make_reader(st: ShapeTracker, dims: dict[str, int]) -> Reader:
    """A function giving the array that ``st`` shows of a node's contiguous buffer."""
    plan = view_plan(st, dims)
    shape = plan[1]
    if plan[0] == "contig":
        n = plan[2]

        def contig(buf: np.ndarray) -> np.ndarray:
            return buf if buf.shape == shape else buf.reshape(-1)[:n].reshape(shape)
        return contig
    if plan[0] == "strided":
        return strided_reader(plan[2], shape, plan[3])
    if len(st.views) == 1 and st.view.mask is not None:
        return _box_reader(st, dims, shape)
    return lambda buf: read_view(buf, st, dims)  # stacked views: an index gather


def _box_reader(st: ShapeTracker, dims: dict[str, int], shape: tuple[int, ...]) -> Reader:
    """A single masked view (padding, concatenation) shows a box of a strided view and zeros
    elsewhere: keep one zero-filled array per reader and copy only the box into it on each call
    (readers' results are consumed by their op at once, never kept)."""
    v = st.view
    strides = tuple(int(s.evaluate(dims)) for s in v.strides)
    offset = int(v.offset.evaluate(dims))
    box = []
    for n, (lo, hi) in zip(shape, v.mask):
        lo_i, hi_i = max(0, int(lo.evaluate(dims))), min(n, int(hi.evaluate(dims)))
        box.append((lo_i, max(lo_i, hi_i)))
    inner = tuple(hi - lo for lo, hi in box)
    index = tuple(slice(lo, hi) for lo, hi in box)
    read_box = strided_reader(offset + sum(lo * s for (lo, _), s in zip(box, strides)), inner, strides)
    held: dict[np.dtype, np.ndarray] = {}

    def masked(buf: np.ndarray) -> np.ndarray:
        out = held.get(buf.dtype)
        if out is None:
            out = held[buf.dtype] = np.zeros(shape, dtype=buf.dtype)
        if 0 not in inner:
            out[index] = read_box(buf)
        return out
    return masked


def strided_reader(offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> Reader:
    """Reads elements ``offset + sum(i_k * strides[k])`` of a flat buffer as a numpy view (element
    strides; zero and negative allowed), bounds-checked against the buffer."""
    if 0 in shape:
        return lambda buf: np.zeros(shape, dtype=buf.dtype)
    lo = offset + sum(min(0, (d - 1) * s) for d, s in zip(shape, strides))
    hi = offset + sum(max(0, (d - 1) * s) for d, s in zip(shape, strides))

    def strided(buf: np.ndarray) -> np.ndarray:
        if lo < 0 or hi >= buf.size:
            raise IndexError(f"strided read [{lo}, {hi}] outside a buffer of {buf.size} elements")
        item = buf.itemsize
        out = np.ndarray(shape, dtype=buf.dtype, buffer=buf, offset=offset * item,
                         strides=tuple(s * item for s in strides))
        out.flags.writeable = False
        return out
    return strided


class Arena:
    """One plan's buffers, keyed by (dtype, element count): ``take`` reuses a buffer released
    earlier in the plan when it can, else the plan's next buffer of that key from ``store``.  The
    store is shared by all plans of a program (plans never run at the same time), so a new plan
    for other dim values reuses the memory of the sizes that did not change."""

    def __init__(self, store: dict[tuple[np.dtype, int], list[np.ndarray]] | None = None) -> None:
        self.store = store if store is not None else {}
        self.pool: dict[tuple[np.dtype, int], list[np.ndarray]] = {}
        self.used: dict[tuple[np.dtype, int], int] = {}  # distinct buffers this plan holds, per key

    @property
    def allocated(self) -> int:
        """Bytes of the distinct buffers this plan uses."""
        return sum(count * n * dtype.itemsize for (dtype, n), count in self.used.items())

    def take(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64))
        key = (dtype, n)
        free = self.pool.get(key)
        if free:
            return free.pop().reshape(shape)
        have = self.store.setdefault(key, [])
        j = self.used.get(key, 0)
        self.used[key] = j + 1
        if j == len(have):
            have.append(np.empty(n, dtype=dtype))
        return have[j].reshape(shape)

    def give(self, buf: np.ndarray) -> None:
        self.pool.setdefault((buf.dtype, buf.size), []).append(buf)


@dataclass
class _Prepared:
    steps: list[Callable[[list, dict], None]]
    arena_bytes: int
    keys: frozenset  # the store keys the plan's buffers use

class CpuProgram(Program):
    """Runs an LLIR program with the cpu kernels; see the module docstring."""

    backend_name = "cpu"
    max_plans = 8

    def __init__(self, graph: Graph, lprog: LProgram, report: Any = None, kernels: dict[str, Prepare] | None = None):
        super().__init__(graph)
        from . import KERNELS

        self.lprog = lprog
        self.search_report = report
        self.kernels = kernels if kernels is not None else KERNELS
        self.free_after = last_uses([op.inputs for op in lprog.ops])
        self._plans: dict[tuple, _Prepared] = {}
        self._store: dict[tuple[np.dtype, int], list[np.ndarray]] = {}
        # prepared kernels per op, keyed by the values of the dims that op depends on: when only
        # a cache length changes, only the ops that read the cache are prepared again
        self._op_dims = [_op_symbols(op) for op in lprog.ops]
        self._kernels: list[dict[tuple, Kernel]] = [{} for _ in lprog.ops]
        missing = {op.op for op in lprog.ops if op.op not in self.kernels
                   and op.op not in ("Input", "Constant", "Iota", "Output")}
        if missing:
            from ...errors import LightspeedError

            raise LightspeedError(f"cpu backend: no kernel for {sorted(missing)}")

    # ------------------------------------------------------------------ preparation
    def prepare(self, dims: dict[str, int]) -> _Prepared:
        key = tuple(sorted((k, v) for k, v in dims.items() if k in self.symbols))
        hit = self._plans.get(key)
        if hit is not None:
            return hit
        if len(self._plans) >= self.max_plans:
            self._plans.pop(next(iter(self._plans)))
            live = set().union(*(p.keys for p in self._plans.values()))
            for k in [k for k in self._store if k not in live]:  # sizes no live plan uses any more
                del self._store[k]
        hit = self._plans[key] = self._prepare(dims)
        return hit

    def _kernel(self, i: int, op: LOp, dims: dict[str, int]) -> Kernel:
        cache = self._kernels[i]
        key = tuple(dims[s] for s in self._op_dims[i])
        hit = cache.get(key)
        if hit is None:
            if len(cache) >= self.max_plans:
                cache.pop(next(iter(cache)))
            hit = cache[key] = self.kernels[op.op](op, dims, [self.lprog.ops[j].dtype.np for j in op.inputs])
        return hit

    def _prepare(self, dims: dict[str, int]) -> _Prepared:
        arena = Arena(self._store)
        steps: list[Callable[[list, dict], None]] = []
        ops = self.lprog.ops
        bufs: dict[int, np.ndarray] = {}  # value -> its arena buffer (intermediates only)
        for i, op in enumerate(ops):
            if op.op == "Input":
                steps.append(_input_step(i, op.fields[0]))
            elif op.op == "Constant":
                steps.append(_value_step(i, np.ascontiguousarray(self.lprog.constants[op.fields[0]].value)))
            elif op.op == "Iota":
                val = PRIMITIVES["Iota"].reference([], IotaArg(op.fields[0], op.fields[1], op.fields[2]), dims)
                steps.append(_value_step(i, np.ascontiguousarray(val)))
            elif op.op == "Output":
                steps.append(_output_step(i, op.inputs[0], op.fields[0], make_reader(op.fields[2], dims),
                                          op.dtype.np))
            else:
                kernel = self._kernel(i, op, dims)
                shape = tuple(int(d.evaluate(dims)) for d in op.shape)
                out = bufs[i] = arena.take(op.dtype.np, shape)
                scratch = [arena.take(np.dtype(d), shape) for d in kernel.scratch]
                for s in scratch:  # scratch lives only while the op runs
                    arena.give(s)
                steps.append(_kernel_step(i, op.inputs, kernel.run, out, scratch))
            for j in self.free_after.get(i, ()):
                if j in bufs:
                    arena.give(bufs.pop(j))
        return _Prepared(steps, arena.allocated, frozenset(arena.used))

    # ------------------------------------------------------------------ running
    def execute(self, arrays: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
        plan = self.prepare(dims)
        vals: list = [None] * len(self.lprog.ops)
        outputs: dict[str, np.ndarray] = {}
        io = {"inputs": arrays, "outputs": outputs}
        with np.errstate(all="ignore"):
            for step in plan.steps:
                step(vals, io)
        return {name: outputs[name] for name in self.output_names}

    def arena_bytes(self, dims: dict[str, int]) -> int:
        """Bytes of intermediate buffers the plan for ``dims`` preallocates."""
        return self.prepare(dict(dims)).arena_bytes

    def report(self) -> str:
        return self.search_report.format() if self.search_report is not None else "no search was run"


def _op_symbols(op: LOp) -> tuple[str, ...]:
    """The dims an op's kernel depends on: those in its shape, its expression fields and views."""
    names: set[str] = set()
    for d in op.shape:
        names |= d.free_vars()
    for f in op.fields:
        if isinstance(f, ShapeTracker):
            for v in f.views:
                for e in (*v.shape, *v.strides, v.offset):
                    names |= e.free_vars()
                for lo, hi in v.mask or ():
                    names |= lo.free_vars() | hi.free_vars()
        elif isinstance(f, Expr):
            names |= f.free_vars()
    return tuple(sorted(names))


def _input_step(i: int, name: str):
    def step(vals: list, io: dict) -> None:
        # readers address a value's memory as a flat row-major buffer: Fortran-ordered or strided
        # caller arrays are copied once here (row-major arrays, the common case, are not)
        vals[i] = np.ascontiguousarray(io["inputs"][name])
    return step


def _value_step(i: int, value: np.ndarray):
    def step(vals: list, io: dict) -> None:
        vals[i] = value
    return step


def _output_step(i: int, src: int, name: str, reader: Reader, dtype: np.dtype):
    def step(vals: list, io: dict) -> None:
        io["outputs"][name] = np.array(reader(vals[src]), dtype=dtype, copy=True)
    return step


def _kernel_step(i: int, srcs: tuple[int, ...], run, out: np.ndarray, scratch: list[np.ndarray]):
    if len(srcs) == 1:
        (a,) = srcs

        def step1(vals: list, io: dict) -> None:
            run([vals[a]], out, scratch)
            vals[i] = out
        return step1

    def step(vals: list, io: dict) -> None:
        run([vals[j] for j in srcs], out, scratch)
        vals[i] = out
    return step
