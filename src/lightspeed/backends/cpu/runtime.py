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
    return lambda buf: read_view(buf, st, dims)  # masked or stacked views: an index gather


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
    """Buffers keyed by (dtype, element count); ``take`` reuses a released one when it can."""

    def __init__(self) -> None:
        self.pool: dict[tuple[np.dtype, int], list[np.ndarray]] = {}
        self.allocated = 0  # bytes

    def take(self, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64))
        free = self.pool.get((dtype, n))
        if free:
            return free.pop().reshape(shape)
        self.allocated += n * dtype.itemsize
        return np.empty(shape, dtype=dtype)

    def give(self, buf: np.ndarray) -> None:
        self.pool.setdefault((buf.dtype, buf.size), []).append(buf)


@dataclass
class _Prepared:
    steps: list[Callable[[list, dict], None]]
    arena_bytes: int


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
        hit = self._plans[key] = self._prepare(dims)
        return hit

    def _prepare(self, dims: dict[str, int]) -> _Prepared:
        arena = Arena()
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
                kernel = self.kernels[op.op](op, dims, [ops[j].dtype.np for j in op.inputs])
                shape = tuple(int(d.evaluate(dims)) for d in op.shape)
                out = bufs[i] = arena.take(op.dtype.np, shape)
                scratch = [arena.take(np.dtype(d), shape) for d in kernel.scratch]
                for s in scratch:  # scratch lives only while the op runs
                    arena.give(s)
                steps.append(_kernel_step(i, op.inputs, kernel.run, out, scratch))
            for j in self.free_after.get(i, ()):
                if j in bufs:
                    arena.give(bufs.pop(j))
        return _Prepared(steps, arena.allocated)

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
