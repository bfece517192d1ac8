"""Running an LLIR program on the cpu: kernels prepared once, dims as run-time arguments, and an
arena planned at the dims' upper bounds.

*Prepared once.*  Every op's kernel is prepared when the program is made: its numbers (strides,
offsets, m/n/k, view boxes) are compiled into one function of the dims (or fixed, when they have
no symbols) and read when it runs.  A call with new dim values prepares nothing.

*Planned at bounds.*  Every intermediate value gets a slot of a liveness-planned arena: a slot
returns to the pool after its value's last reader and is handed to a later value of the same
dtype that fits.  Slots are sized for the dims' upper bounds (:meth:`CpuProgram.reserve`, or the
first call's values), so no buffer moves when a dim changes below its bound; a call past a bound
plans again at twice the bound (counted in :attr:`CpuProgram.preparations`).

*Thread-safe.*  The plan is immutable; each thread that calls the program gets its own buffers
(allocated on its first call), so concurrent calls never share intermediate memory.

Inputs and constants are read in place and never written; outputs are fresh arrays (or the
caller's ``out=`` arrays), so callers never hold arena memory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...egraph.llir import LOp, LProgram, iota_arg, liveness
from ...errors import LightspeedError
from ...graph import Graph
from ...primitives import PRIMITIVES
from ...program import Program, same_memory
from ...symbolic import INDEX_VAR, compile_exprs
from .. import trace
from ..codegen.program import check_in_place
from ..numpy_views import make_reader
from .kernels import KERNELS, Kernel, Prepare

__all__ = ["CpuProgram", "Kernel", "Prepare"]

Dims = Mapping[str, int]


class _Grow(Exception):
    """A value needs more elements than its slot holds (a dim passed its planned bound)."""


@dataclass(frozen=True)
class _Plan:
    """Slots of the arena at some bounds: per op its value's slot and its scratch slots."""

    bounds: dict[str, int]
    value_slot: tuple[int | None, ...]
    scratch_slots: tuple[tuple[int, ...], ...]
    slot_cap: tuple[int, ...]  # elements per slot
    slot_dtype: tuple[np.dtype, ...]

    @property
    def nbytes(self) -> int:
        return sum(c * d.itemsize for c, d in zip(self.slot_cap, self.slot_dtype))


def _numel_at(shape, env: Dims) -> int:
    n = 1
    for d in shape:
        n *= max(0, int(d.evaluate(env)))
    return n


class CpuProgram(Program):
    """Runs an LLIR program with the cpu kernels; see the module docstring."""

    backend_name = "cpu"

    def __init__(self, graph: Graph, lprog: LProgram, report: Any = None, kernels: dict[str, Prepare] | None = None):
        super().__init__(graph)
        self.lprog = lprog
        self.search_report = report
        table = kernels if kernels is not None else KERNELS
        ops = lprog.ops
        missing = {op.op for op in ops if op.op not in table and op.op not in _NO_KERNEL}
        if missing:
            raise LightspeedError(f"cpu backend: no kernel for {sorted(missing)}")
        self.free_after = liveness([op.inputs for op in ops])
        # every kernel prepared once; dims arrive at run time
        self.kernels: list[Kernel | None] = [
            None if op.op in _NO_KERNEL else table[op.op](op, [ops[j].dtype.np for j in op.inputs]) for op in ops]
        for i, k in enumerate(self.kernels):
            if k is not None and k.in_place:
                check_in_place(lprog, i, self.output_aliases)
        self._shape_of = [compile_exprs(op.shape) for op in ops]
        self._static_shape = [None if any(d.free_vars() for d in op.shape) else self._shape_of[i]({})
                              for i, op in enumerate(ops)]
        self._symbols = sorted(self.symbols)
        self._reserved: dict[str, int] = {}
        self._fresh_state()

    def _fresh_state(self) -> None:
        self._preparations = 0  # arena plans made: one, plus one per bound a call went past
        self._plan: _Plan | None = None
        self._reserved = dict(self._reserved)
        self._lock = threading.Lock()
        self._local = threading.local()

    # ------------------------------------------------------------------ planning
    def reserve(self, **bounds: int) -> CpuProgram:
        """Plan the arena for dims up to ``bounds`` (e.g. ``reserve(p=4096)`` before decoding), so
        no later call within them plans again."""
        super().reserve(**bounds)
        with self._lock:
            self._reserved.update({k: int(v) for k, v in bounds.items()})
            if self._plan is not None and any(self._plan.bounds.get(k, 0) < v for k, v in self._reserved.items()):
                self._plan = None
        return self

    def _plan_for(self, dims: Dims) -> _Plan:
        plan = self._plan
        if plan is not None and all(dims[s] <= plan.bounds[s] for s in self._symbols):
            return plan
        with self._lock:
            plan = self._plan
            if plan is None or not all(dims[s] <= plan.bounds[s] for s in self._symbols):
                old = plan.bounds if plan is not None else {}
                bounds = {s: max(dims[s], self._reserved.get(s, 0),
                                 2 * old[s] if s in old and dims[s] > old[s] else old.get(s, 0))
                          for s in self._symbols}
                plan = self._plan = self._make_plan(bounds)
        return plan

    @property
    def preparations(self) -> int:
        return self._preparations

    def _make_plan(self, bounds: dict[str, int]) -> _Plan:
        self._preparations += 1
        caps: list[int] = []
        dtypes: list[np.dtype] = []
        pool: dict[np.dtype, list[int]] = {}
        value_slot: list[int | None] = []
        scratch_slots: list[tuple[int, ...]] = []
        held: dict[int, int] = {}

        def take(dtype: np.dtype, n: int) -> int:
            free = pool.get(dtype, [])
            fit = [s for s in free if caps[s] >= n]
            if fit:  # the smallest free slot that holds it
                s = min(fit, key=lambda s: caps[s])
                free.remove(s)
                return s
            if free:  # grow the largest free slot rather than adding one
                s = max(free, key=lambda s: caps[s])
                free.remove(s)
                caps[s] = n
                return s
            caps.append(n)
            dtypes.append(dtype)
            return len(caps) - 1

        for i, op in enumerate(self.lprog.ops):
            if op.op in _NO_KERNEL or self.kernels[i].in_place:
                value_slot.append(None)
                scratch_slots.append(())
            else:
                n = _numel_at(op.shape, bounds)
                value_slot.append(take(op.dtype.np, n))
                held[i] = value_slot[-1]
                ss = tuple(take(np.dtype(d), n) for d in self.kernels[i].scratch)
                for s in ss:  # scratch lives only while the op runs
                    pool.setdefault(dtypes[s], []).append(s)
                scratch_slots.append(ss)
            for j in self.free_after.get(i, ()):
                if j in held:
                    s = held.pop(j)
                    pool.setdefault(dtypes[s], []).append(s)
        return _Plan(dict(bounds), tuple(value_slot), tuple(scratch_slots), tuple(caps), tuple(dtypes))

    # ------------------------------------------------------------------ per-thread steps
    def _steps(self, plan: _Plan) -> list[Callable]:
        local = self._local
        if getattr(local, "plan", None) is plan:
            return local.steps
        bufs = [np.empty(c, dtype=d) for c, d in zip(plan.slot_cap, plan.slot_dtype)]
        steps = []
        for i, op in enumerate(self.lprog.ops):
            if op.op == "Input":
                steps.append(_input_step(i, op.args["name"]))
            elif op.op == "Constant":
                steps.append(_value_step(i, np.ascontiguousarray(self.lprog.constants[op.args["index"]].value)))
            elif op.op == "Iota":
                steps.append(_iota_step(i, op))
            elif op.op == "Output":
                steps.append(_output_step(i, op.inputs[0], op.args["name"], make_reader(op.args["x_view"]),
                                          op.dtype.np, self.output_aliases.get(op.args["name"])))
            elif self.kernels[i].in_place:
                steps.append(_in_place_step(i, op.inputs, self.kernels[i].run))
            else:
                out = _shaped(bufs[plan.value_slot[i]], self._static_shape[i], self._shape_of[i])
                scratch = [_shaped(bufs[s], self._static_shape[i], self._shape_of[i]) for s in plan.scratch_slots[i]]
                steps.append(_kernel_step(i, op.inputs, self.kernels[i].run, out, scratch))
        local.plan, local.steps, local.nbytes = plan, steps, plan.nbytes
        return steps

    # ------------------------------------------------------------------ running
    def execute(self, arrays: dict[str, np.ndarray], dims: dict[str, int],
                out: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        while True:
            plan = self._plan_for(dims)
            steps = self._steps(plan)
            vals: list = [None] * len(steps)
            outputs: dict[str, np.ndarray] = dict(out or {})
            try:
                with np.errstate(all="ignore"):
                    if trace.enabled():
                        self._traced(steps, vals, arrays, dims, outputs)
                    else:
                        for step in steps:
                            step(vals, arrays, dims, outputs)
            except _Grow:
                # a value outgrew its slot below the dims' bounds (a size that is not monotone in
                # the dims): plan again at twice the bounds
                with self._lock:
                    if self._plan is plan:
                        self._plan = self._make_plan({s: 2 * max(1, b) for s, b in plan.bounds.items()})
                continue
            return {name: outputs[name] for name in self.output_names}

    def _traced(self, steps: list, vals: list, arrays: dict, dims: dict, outputs: dict) -> None:
        """The steps with one trace event each (LIGHTSPEED_TRACE)."""
        t0 = time.perf_counter()
        for op, step in zip(self.lprog.ops, steps):
            t = time.perf_counter()
            step(vals, arrays, dims, outputs)
            if op.op not in _NO_KERNEL or op.op == "Output":
                trace.event(op.op, "run.op", t, time.perf_counter() - t, shape=str(op.shape))
        trace.event("run (cpu)", "run", t0, time.perf_counter() - t0, dims=str(dims))

    def arena_bytes(self, dims: Mapping[str, int] | None = None) -> int:
        """Bytes of the arena's slots (planned at the dims' bounds, which ``dims`` may raise)."""
        return self._plan_for({**self.bounds, **(dims or {})}).nbytes

    @property
    def bounds(self) -> dict[str, int]:
        """The dim bounds the arena is planned for (empty before the first call)."""
        return dict(self._plan.bounds) if self._plan is not None else {}

    def report(self) -> str:
        return self.search_report.format() if self.search_report is not None else "no search was run"


_NO_KERNEL = ("Input", "Constant", "Output", "Iota")  # bound or computed by the runtime itself


def _shaped(flat: np.ndarray, static: tuple[int, ...] | None, shape_of: Callable) -> Any:
    """The value's array in its slot: fixed when its shape has no symbols, else a function of the dims."""
    if static is not None:
        n = 1
        for d in static:
            n *= d
        return flat[:n].reshape(static)

    views: dict[tuple[int, ...], np.ndarray] = {}  # this thread's views of the slot, by shape

    def at(dims: Dims) -> np.ndarray:
        shape = shape_of(dims)
        v = views.get(shape)
        if v is None:
            n = 1
            for d in shape:
                n *= d
            if n > flat.size:
                raise _Grow
            if len(views) > 8:
                views.clear()
            v = views[shape] = flat[:n].reshape(shape)
        return v
    return at


def _input_step(i: int, name: str):
    def step(vals: list, arrays: dict, dims: Dims, outputs: dict) -> None:
        # kernels address a value as a flat row-major buffer: Fortran-ordered or strided caller
        # arrays are copied once here (row-major arrays, the common case, are not)
        vals[i] = np.ascontiguousarray(arrays[name])
    return step


def _value_step(i: int, value: np.ndarray):
    def step(vals: list, arrays: dict, dims: Dims, outputs: dict) -> None:
        vals[i] = value
    return step


def _iota_step(i: int, op: LOp):
    """An iota: fixed when it has no symbols, else its expression evaluated over the flat index at
    run time (np.arange per size kept; the reference's generic path costs several times more)."""
    arg = iota_arg(op)
    if not (arg.expr.free_vars() - {INDEX_VAR}) and not any(d.free_vars() for d in arg.shape):
        return _value_step(i, np.ascontiguousarray(PRIMITIVES["Iota"].reference([], arg, {})))
    shape_of = compile_exprs(arg.shape)
    dtype = arg.dtype.np
    # one arange, grown to the largest size seen and sliced (one per size had kept an array for
    # every size a run-time dim took: +16 MB over a server's first busy spell)
    base = [np.arange(0, dtype=np.int64)]

    def step(vals: list, arrays: dict, dims: Dims, outputs: dict) -> None:
        shape = shape_of(dims)
        n = 1
        for d in shape:
            n *= d
        if n > base[0].size:
            base[0] = np.arange(max(n, 2 * base[0].size), dtype=np.int64)
        z = base[0][:n]
        v = arg.expr.evaluate({**dims, INDEX_VAR: z})
        if not isinstance(v, np.ndarray) or v.shape != (n,):
            v = np.full(n, v, dtype=np.int64)
        vals[i] = v.astype(dtype, copy=False).reshape(shape)
    return step


def _output_step(i: int, src: int, name: str, reader, dtype: np.dtype, alias: str | None):
    def step(vals: list, arrays: dict, dims: Dims, outputs: dict) -> None:
        got = reader(vals[src], dims)
        dest = outputs.get(name)
        if alias is not None and dest is None:
            # written into its input: in place already, or by Program after the whole call (a
            # later op may still read the input's old values, so never copy into it here)
            target = arrays[alias]
            outputs[name] = target if same_memory(got, target) else np.array(got, dtype=dtype, copy=True)
        elif dest is None:
            outputs[name] = np.array(got, dtype=dtype, copy=True)
        else:
            if dest.shape != got.shape:
                raise LightspeedError(f"out[{name!r}] has shape {dest.shape}, the output has shape {got.shape}")
            np.copyto(dest, got, casting="unsafe")
    return step


def _in_place_step(i: int, srcs: tuple[int, ...], run):
    def step(vals: list, arrays: dict, dims: Dims, outputs: dict) -> None:
        ins = [vals[j] for j in srcs]
        run(ins, ins[0], [], dims)
        vals[i] = ins[0]
    return step


def _kernel_step(i: int, srcs: tuple[int, ...], run, out, scratch: list):
    dynamic = callable(out) or any(callable(s) for s in scratch)
    if not dynamic:
        if len(srcs) == 1:
            (a,) = srcs

            def step1(vals: list, arrays: dict, dims: Dims, outputs: dict) -> None:
                run([vals[a]], out, scratch, dims)
                vals[i] = out
            return step1

        def step(vals: list, arrays: dict, dims: Dims, outputs: dict) -> None:
            run([vals[j] for j in srcs], out, scratch, dims)
            vals[i] = out
        return step

    def dyn(vals: list, arrays: dict, dims: Dims, outputs: dict) -> None:
        o = out(dims)
        run([vals[j] for j in srcs], o, [s(dims) for s in scratch], dims)
        vals[i] = o
    return dyn
