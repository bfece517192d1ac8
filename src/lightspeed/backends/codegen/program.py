"""Running an LLIR program as generated kernels: one runtime for every executor (the GPU, or the
host C compiler).

*One table.*  Every kernel reads its dims and buffer addresses from the program's table (see
:mod:`.render`): slot k < number of dims holds a dim value, then one slot per LLIR value (its
buffer's address) and one per output (where it is written).  A call fills the table (dims, the
inputs' and outputs' addresses) and runs the launch list; the launch list itself, and a CUDA
graph captured from it, never change when dims or buffers do.

*Planned at bounds.*  Values computed by kernels live in one arena per thread, planned from
their lifetimes at the dims' upper bounds (:meth:`KernelProgram.reserve`, or the first call's
values; a call past a bound plans again at twice the bound, counted in ``preparations``).  Grids
are sized at the bounds too: kernels loop over the work of the call's dims.

*In place.*  ``ScatterInPlace`` writes into its destination input's buffer (checked: an aliased
input that nothing else reads).  The copy of an aliased output into its input runs after every
other kernel (a later op might read the input's old values), and not at all when the value
already is that buffer.

The executor provides memory, compilation and launching; see :class:`Executor`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...dtypes import DType
from ...egraph.llir import LOp, LProgram, liveness
from ...errors import LightspeedError
from ...graph import Graph
from ...program import Program
from ...symbolic import compile_exprs, prod
from .. import trace
from .render import KernelSpec, render_op

__all__ = ["KernelProgram", "Executor", "Launch", "check_in_place"]

ALIGN = 256  # bytes: every arena value starts on a 256-byte boundary (coalesced, vector loads)


@dataclass(frozen=True)
class Launch:
    """One kernel launch: its spec, its slot arguments (dims then buffers) and the LLIR op it
    computes (for traces and errors)."""

    spec: KernelSpec
    args: tuple[int, ...]
    op: int


class Executor:
    """What a device gives the kernel runtime (the GPU executor and the host one implement it)."""

    name = "abstract"
    dialect = "c"

    def compile(self, specs: list[KernelSpec], launches: list[Launch] | None = None) -> dict[str, Any]:
        """Kernel handles by name, compiled (and cached) from their sources (``launches``: the
        program's launch list, for an executor that compiles the sequence itself)."""
        raise NotImplementedError

    # whether the executor's dialect has block kernels for matmuls against GGML-quantised weights
    # (the c dialect: ``render.render_block_matmul``)
    block_matmuls = False

    def library(self, op: LOp, in_dtypes: list[DType]) -> list[KernelSpec] | None:
        """The launches of ``op`` when the executor runs it with a library call rather than
        generated kernels (the GPU: cuBLASLt matmuls), else None.  A library spec has no source;
        only the executor that made it runs it."""
        return None

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """A new array of the executor's kind."""
        raise NotImplementedError

    def upload(self, host: np.ndarray) -> Any:
        raise NotImplementedError

    def address(self, array: Any) -> int:
        raise NotImplementedError

    def owns(self, array: Any) -> bool:
        """Whether ``array`` is of the executor's kind (kernels can write it directly)."""
        raise NotImplementedError

    def new_state(self, nbytes: int, slots: int) -> Any:
        """Per-thread run state: an arena of ``nbytes`` and a table of ``slots`` words."""
        raise NotImplementedError

    def run(self, state: Any, launches: list[Launch], handles: dict[str, Any], bounds: Mapping[str, int]) -> None:
        """Make the table visible to the kernels and run the launches (the GPU: as one graph)."""
        raise NotImplementedError

    def run_traced(self, state: Any, launches: list[Launch], handles: dict[str, Any], bounds: Mapping[str, int]
                   ) -> list[tuple[Launch, float, float]]:
        """The launches one by one: (launch, start on the perf_counter clock, seconds) each."""
        raise NotImplementedError


def check_in_place(lprog: LProgram, i: int, aliases: Mapping[str, str]) -> None:
    """An in-place op overwrites its first operand: sound only if that operand is an input that an
    output aliases and that nothing else reads (a later reader would see the new values)."""
    ops = lprog.ops
    dest = ops[i].inputs[0]
    readers = [j for j, op in enumerate(ops) if dest in op.inputs]
    name = ops[dest].args.get("name") if ops[dest].op == "Input" else None
    if readers != [i] or name not in aliases.values():
        raise LightspeedError(f"{ops[i].op} (op {i}) writes into value {dest} in place, but "
                              + ("other ops read it" if readers != [i] else "it is not an aliased input"))


@dataclass(frozen=True)
class _Plan:
    bounds: dict[str, int]
    offsets: dict[int, int]  # value -> byte offset in the arena
    caps: dict[int, int]  # value -> bytes its place holds
    nbytes: int


def _numel_bytes(shape, dtype: DType, env: Mapping[str, int]) -> int:
    n = 1
    for d in shape:
        n *= max(0, int(d.evaluate(env)))
    return n * dtype.itemsize


class KernelProgram(Program):
    """An LLIR program run as generated kernels by an :class:`Executor`; see the module docstring."""

    def __init__(self, graph: Graph, lprog: LProgram, executor: Executor, report: Any = None,
                 backend_name: str = "cuda"):
        super().__init__(graph)
        self.backend_name = backend_name
        self.lprog = lprog
        self.search_report = report
        self.executor = executor
        ops = lprog.ops
        for i, op in enumerate(ops):
            if op.op == "ScatterInPlace":
                check_in_place(lprog, i, self.output_aliases)
        aliased_outputs = {i for i, op in enumerate(ops)
                           if op.op == "Output" and op.args["name"] in self.output_aliases}
        # copies into aliased inputs run last: every other op reads the inputs' old values first
        self.order = [i for i in range(len(ops)) if i not in aliased_outputs] + sorted(aliased_outputs)
        self.buffer_of = list(range(len(ops)))  # value -> the value whose buffer holds it
        for i, op in enumerate(ops):
            if op.op == "ScatterInPlace":
                self.buffer_of[i] = self.buffer_of[op.inputs[0]]
        self.dim_names = sorted(self.symbols)
        nd = len(self.dim_names)
        self.dim_slot = {s: k for k, s in enumerate(self.dim_names)}
        self.value_slot = {i: nd + i for i in range(len(ops))}
        self.output_slot = {name: nd + len(ops) + k for k, name in enumerate(self.output_names)}
        self.slots = nd + len(ops) + len(self.output_names)
        self.inputs_at = {self.value_slot[i]: op.args["name"] for i, op in enumerate(ops) if op.op == "Input"}
        self.constants = {i: executor.upload(np.ascontiguousarray(lprog.constants[op.args["index"]].value))
                          for i, op in enumerate(ops) if op.op == "Constant"}
        self.outputs_of: dict[str, LOp] = {op.args["name"]: op for op in ops if op.op == "Output"}
        self._output_shape = {name: compile_exprs(op.shape) for name, op in self.outputs_of.items()}
        self.launches = self._launches()
        self.handles = executor.compile([launch.spec for launch in self.launches], self.launches)
        self.computed = [i for i, op in enumerate(ops) if op.op not in ("Input", "Constant", "Output")
                         and self.buffer_of[i] == i]
        symbolic = [i for i in self.computed if any(d.free_vars() for d in ops[i].shape)]
        self._symbolic_values = symbolic
        self._symbolic_bytes = compile_exprs([prod(ops[i].shape) * ops[i].dtype.itemsize for i in symbolic])
        self._reserved: dict[str, int] = {}
        self.block_buffers: dict[int, Any] = {}  # table slot -> the GGML blocks a block matmul reads
        self._lazy: dict[str, Any] = {}  # resident weights held as blocks only (weights.quant.QuantTensor)
        self._input_op = {op.args["name"]: i for i, op in enumerate(ops) if op.op == "Input"}
        self._static_inputs = {op.args["name"]: (tuple(int(d.value) for d in op.shape), op.dtype.np)
                               for op in ops if op.op == "Input" and not any(d.free_vars() for d in op.shape)}
        self._fresh_state()

    def _fresh_state(self) -> None:
        self._plan: _Plan | None = None
        self._preparations = 0
        self._reserved = dict(self._reserved)
        self._lock = threading.Lock()
        self._local = threading.local()

    # ------------------------------------------------------------------ building
    def _launches(self) -> list[Launch]:
        ops = self.lprog.ops
        out: list[Launch] = []
        dialect = self.executor.dialect
        for i in self.order:
            op = ops[i]
            if op.op in ("Input", "Constant"):
                continue
            if op.op == "Output":
                name = op.args["name"]
                src = self.buffer_of[op.inputs[0]]
                alias = self.output_aliases.get(name)
                if alias is not None and ops[src].op == "Input" and ops[src].args["name"] == alias:
                    if op.args["x_view"].is_contiguous:
                        continue  # the value already is the input's buffer: written in place
                    raise LightspeedError(f"output {name!r} aliases input {alias!r} but reads it through a view; "
                                          "it cannot be written into itself")
                target = self.output_slot[name]
            else:
                target = self.value_slot[self.buffer_of[i]]
            in_dtypes = [ops[j].dtype for j in op.inputs]
            specs = self.executor.library(op, in_dtypes)
            for spec in specs if specs is not None else render_op(op, in_dtypes, dialect):
                bufs = tuple(target if b == "out" else self.value_slot[self.buffer_of[op.inputs[b]]]
                             for b in spec.buffers)
                out.append(Launch(spec, tuple(self.dim_slot[d] for d in spec.dims) + bufs, i))
        return out

    def persist(self, inputs: Mapping[str, Any] | None = None, /, **named: Any) -> KernelProgram:
        given = {**(inputs or {}), **named}
        # weights held as blocks only (weights.quant.QuantTensor) stay so when block kernels read
        # every use of them: no float32 copy is made
        lazy = {k: v for k, v in given.items() if self.executor.block_matmuls and _blocks_only(v)
                and k in self._static_inputs and self._static_inputs[k][0] == tuple(v.shape)
                and self._static_inputs[k][1] == v.dtype}
        bound = super().persist({k: v for k, v in given.items() if k not in lazy})
        if lazy:
            bound._lazy = {**self._lazy, **lazy}
            bound._resident = {**bound._resident, **{k: _NO_VALUES for k in lazy}}
        if self.executor.block_matmuls:
            bound._read_blocks()
        if not bound._lazy:
            return bound
        read = {a for launch in bound.launches for a in launch.args[len(launch.spec.dims):]}
        dense = {k: v for k, v in bound._lazy.items() if self.value_slot[self._input_op[k]] in read}
        if dense:  # something other than a block matmul reads these weights: their float32 values
            bound._resident.update({k: self.to_device(np.asarray(v)) for k, v in dense.items()})
        return bound

    def _read_blocks(self) -> None:
        """Matmuls (the weights as either operand) and gathers whose weight is a resident float32
        matrix held as GGML blocks (``weights.quant``: a GGUF file's Q8_0/Q4_0/Q4_1/Q5_0/Q4_K/Q6_K
        matrices) read the blocks instead, with block kernels: the same weights, dequantised in
        registers, a quarter of the bytes."""
        from ...weights.quant import blocks_of
        from .render import block_gather_ok, block_matmul_ok, render_block_gather, render_block_matmul

        activations = block_activations()

        ops = self.lprog.ops
        blocks = {}
        for i, op in enumerate(ops):
            name = op.args["name"] if op.op == "Input" else None
            if name in self._resident and not any(d.free_vars() for d in op.shape):
                b = blocks_of(self._lazy.get(name, self._resident[name]))
                if b is not None and b.matches(tuple(int(d.value) for d in op.shape)):
                    blocks[i] = b.widened()  # Q5_0 read as the Q8_0 blocks of its values
        if not blocks:
            return
        slots, buffers, slot_of = self.slots, dict(self.block_buffers), {}
        launches = []
        for launch in self.launches:
            op = ops[launch.op]
            in_dtypes = [ops[j].dtype for j in op.inputs]
            side, b = 1, None
            if op.op == "Gather":
                b = blocks.get(self.buffer_of[op.inputs[1]])
                b = b if b is not None and block_gather_ok(op, in_dtypes) else None
            elif op.op in ("Matmul", "MatmulAdd"):  # the weights as B (x W^T), or as A (W x^T)
                for side in (1, 0):
                    b = blocks.get(self.buffer_of[op.inputs[side]])
                    if b is not None and block_matmul_ok(op, in_dtypes, side):
                        break
                    b = None
            if b is None:
                launches.append(launch)
                continue
            weight = self.buffer_of[op.inputs[side]]
            if weight not in slot_of:
                slot_of[weight], buffers[slots] = slots, b.packed
                slots += 1
            old = launch.spec
            target = launch.args[len(old.dims) + old.buffers.index("out")]
            spec = (render_block_gather(op, in_dtypes, b.qtype) if op.op == "Gather" else
                    render_block_matmul(op, in_dtypes, b.qtype, activations, side))
            bufs = tuple(target if x == "out" else slot_of[weight] if x == side else
                         self.value_slot[self.buffer_of[op.inputs[x]]] for x in spec.buffers)
            launches.append(Launch(spec, tuple(self.dim_slot[d] for d in spec.dims) + bufs, launch.op))
        if not slot_of:
            return
        self.slots, self.block_buffers, self.launches = slots, buffers, launches
        self.handles = self.executor.compile([launch.spec for launch in launches], launches)

    # ------------------------------------------------------------------ planning
    def reserve(self, **bounds: int) -> KernelProgram:
        """Plan the arena (and size grids) for dims up to ``bounds``, so no later call within
        them plans or captures again."""
        super().reserve(**bounds)
        with self._lock:
            self._reserved.update({k: int(v) for k, v in bounds.items()})
            if self._plan is not None and any(self._plan.bounds.get(k, 0) < v for k, v in self._reserved.items()):
                self._plan = None
        return self

    @property
    def preparations(self) -> int:
        """Plans made (arena + launch grids; on the GPU each one is captured as a graph once per
        thread): one, plus one per bound a call went past."""
        return self._preparations

    def _fits(self, plan: _Plan, dims: Mapping[str, int]) -> bool:
        if any(dims[s] > plan.bounds[s] for s in self.dim_names):
            return False
        # a size that is not monotone in the dims could still outgrow its place
        need = self._symbolic_bytes(dims) if self._symbolic_values else ()
        return all(n <= plan.caps[i] for i, n in zip(self._symbolic_values, need))

    def _plan_for(self, dims: Mapping[str, int]) -> _Plan:
        plan = self._plan
        if plan is not None and self._fits(plan, dims):
            return plan
        with self._lock:
            plan = self._plan
            while plan is None or not self._fits(plan, dims):
                old = plan.bounds if plan is not None else {}
                bounds = {s: max(dims[s], self._reserved.get(s, 0), 2 * old[s] if s in old else 0, 1)
                          for s in self.dim_names}
                plan = self._make_plan(bounds)
            self._plan = plan
        return plan

    def _make_plan(self, bounds: dict[str, int]) -> _Plan:
        """Byte offsets of the computed values: best fit among freed ranges, in run order."""
        self._preparations += 1
        ops = self.lprog.ops
        free_after = liveness([tuple(self.buffer_of[j] for j in ops[i].inputs) for i in self.order])
        offsets: dict[int, int] = {}
        caps: dict[int, int] = {}
        free: list[tuple[int, int]] = []  # (offset, size)
        end = 0
        computed = set(self.computed)
        for pos, i in enumerate(self.order):
            if i in computed:
                caps[i] = _numel_bytes(ops[i].shape, ops[i].dtype, bounds)
                size = -(-max(1, caps[i]) // ALIGN) * ALIGN
                fit = [f for f in free if f[1] >= size]
                if fit:
                    f = min(fit, key=lambda f: f[1])
                    free.remove(f)
                    offsets[i] = f[0]
                    if f[1] > size:
                        free.append((f[0] + size, f[1] - size))
                else:
                    offsets[i] = end
                    end += size
            for j in free_after.get(pos, ()):
                if j in offsets:
                    free.append((offsets[j], -(-max(1, caps[j]) // ALIGN) * ALIGN))
        return _Plan(dict(bounds), offsets, caps, max(end, ALIGN))

    # ------------------------------------------------------------------ running
    def _state(self, plan: _Plan) -> Any:
        local = self._local
        st = getattr(local, "state", None)
        if st is None or local.plan is not plan:
            st = self.executor.new_state(plan.nbytes, self.slots)
            base = st.arena_address
            for i, off in plan.offsets.items():
                st.table[self.value_slot[i]] = base + off
            for i, arr in self.constants.items():
                st.table[self.value_slot[i]] = self.executor.address(arr)
            for slot, arr in self.block_buffers.items():
                st.table[slot] = self.executor.address(arr)
            local.state, local.plan = st, plan
        return st

    def execute(self, arrays: dict[str, Any], dims: dict[str, int],
                out: Mapping[str, Any] | None = None) -> dict[str, Any]:
        plan = self._plan_for(dims)
        st = self._state(plan)
        table = st.table
        for s, k in self.dim_slot.items():
            table[k] = dims[s]
        ex = self.executor
        for slot, name in self.inputs_at.items():
            table[slot] = ex.address(arrays[name])
        outputs: dict[str, Any] = {}
        for name, slot in self.output_slot.items():
            alias = self.output_aliases.get(name)
            if alias is not None:
                arr = arrays[alias]
            elif out is not None and name in out and ex.owns(out[name]):
                arr = out[name]
            else:
                op = self.outputs_of[name]
                arr = ex.empty(self._output_shape[name](dims), op.dtype.np)
            table[slot] = ex.address(arr)
            outputs[name] = arr
        if trace.enabled():  # kernels one by one, each timed on the device's clock
            t0 = time.perf_counter()
            for launch, start, seconds in ex.run_traced(st, self.launches, self.handles, plan.bounds):
                op = self.lprog.ops[launch.op]
                trace.event(op.op, "run.kernel", start, seconds, kernel=launch.spec.name, mode=launch.spec.mode)
            trace.event(f"run ({self.backend_name})", "run", t0, time.perf_counter() - t0, dims=str(dims))
        else:
            ex.run(st, self.launches, self.handles, plan.bounds)
        return outputs

    def arena_bytes(self, dims: Mapping[str, int] | None = None) -> int:
        return self._plan_for({**(self._plan.bounds if self._plan else {}), **(dims or {})}).nbytes

    @property
    def kernels(self) -> list[KernelSpec]:
        return [launch.spec for launch in self.launches]

    def report(self) -> str:
        return self.search_report.format() if self.search_report is not None else "no search was run"


# the table entry of a weight only block kernels read (its float32 values are never made)
_NO_VALUES = np.zeros(1, np.float32)


def _blocks_only(value: Any) -> bool:
    """Whether ``value`` is weights held as GGML blocks whose float32 values are not made yet."""
    from ...weights.quant import QuantTensor

    return isinstance(value, QuantTensor) and not value.is_dense


def block_activations() -> str:
    """How block matmuls treat a decode step's activation row (``LIGHTSPEED_NATIVE_ACTIVATIONS``):
    ``q16`` (the default: 16-bit integers per block of 32, dotted in integers), ``q8`` (8-bit ones,
    as llama.cpp) or ``float`` (exact: the float32 weights' result up to summation order).
    docs/kernels.md states each one's tolerance."""
    from .render import BLOCK_ACTIVATIONS

    value = os.environ.get("LIGHTSPEED_NATIVE_ACTIVATIONS", "q16").strip().lower() or "q16"
    if value not in BLOCK_ACTIVATIONS:
        raise LightspeedError(f"LIGHTSPEED_NATIVE_ACTIVATIONS must be one of {', '.join(BLOCK_ACTIVATIONS)}, "
                              f"got {value!r}")
    return value
