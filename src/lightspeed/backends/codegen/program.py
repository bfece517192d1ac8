"""Running an LLIR program as generated kernels: one runtime for every executor (the GPU, or the
host C compiler).

*One table.*  Every kernel reads its dims and buffer addresses from the program's table (see
:mod:`.kernels.writer`): slot k < number of dims holds a dim value, then one slot per LLIR value (its
buffer's address) and one per output (where it is written).  A call fills the table (dims, the
inputs' and outputs' addresses) and runs the launch list; the launch list itself, and a CUDA
graph captured from it, never change when dims or buffers do.

*Planned at bounds.*  Values computed by kernels live in one arena per thread, planned from
their lifetimes at the dims' upper bounds (:meth:`KernelProgram.reserve`, or the first call's
values; a call past a bound plans again at twice the bound, counted in ``preparations``); the parts
of a merged launch run at once, so what any part reads lives until the whole launch ends.  Grids
are sized at the bounds too: kernels loop over the work of the call's dims.

*In place.*  ``ScatterInPlace`` and the fused writes (:data:`.fused.IN_PLACE_OPS`) write into their
destination input's buffer (checked: an aliased input that nothing else reads).  The copy of an
aliased output into its input runs after every other kernel (a later op might read the input's
old values), and not at all when the value already is that buffer.

*Hoisted.*  A persisted program (``persist``: some inputs resident) computes at its first call,
once, the values that depend on resident inputs alone (:meth:`KernelProgram._hoist`); its calls
run the other launches, and a call passing another array for one of those inputs runs them all.

*Lowering.*  Each op's launches come from the backend's op table (:mod:`.lowering`): generated
kernels by family, or library calls; an operand may read another form of an input (a block
weight's packed blocks), which gets a table slot of its own.

The executor provides memory, compilation and launching; see :class:`Executor`.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
import os
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...dtypes import DType
from ...egraph.llir import LOp, LProgram, liveness
from ...errors import LightspeedError
from ...graph import Graph
from ...program import Program, recall, remember
from ...symbolic import Expr, compile_exprs, prod
from .. import trace
from .fused import IN_PLACE_OPS
from .kernels import KernelSpec
from .kernels.merge import merge_kernels, merge_key
from .lowering import VALUES, FormedValue, OpTable
from .stacks import read_slices_in_place, stack_members

__all__ = ["KernelProgram", "Executor", "Launch", "check_in_place", "grouped_order"]

ALIGN = 256  # bytes: every arena value starts on a 256-byte boundary (coalesced, vector loads)
# LIGHTSPEED_CUDA_MERGE=0: every op's kernels launched on their own (an A/B switch; see _launches)
MERGE = os.environ.get("LIGHTSPEED_CUDA_MERGE", "1") != "0"


@dataclass(frozen=True)
class Launch:
    """One kernel launch: its spec, its slot arguments (dims then buffers) and the LLIR op it
    computes (for traces and errors; a merged launch's first part's, ``merged`` naming all)."""

    spec: KernelSpec
    args: tuple[int, ...]
    op: int
    merged: tuple[int, ...] = ()  # a merged launch (kernels/merge.py): the ops of its parts


def _retarget(launch: Launch, moved: Mapping[int, int]) -> Launch:
    """``launch`` with its buffer slots in ``moved`` replaced by theirs (its dim slots as they are)."""
    nd = len(launch.spec.dims)
    bufs = launch.args[nd:]
    if not any(a in moved for a in bufs):
        return launch
    return dataclasses.replace(launch, args=(*launch.args[:nd], *(moved.get(a, a) for a in bufs)))


class Executor:
    """What a device gives the kernel runtime (the GPU executor and the host one implement it)."""

    name = "abstract"
    dialect = "c"

    def compile(self, specs: list[KernelSpec], launches: list[Launch] | None = None) -> dict[str, Any]:
        """Kernel handles by name, compiled (and cached) from their sources (``launches``: the
        program's launch list, for an executor that compiles the sequence itself)."""
        raise NotImplementedError

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> Any:
        """A new array of the executor's kind."""
        raise NotImplementedError

    def upload(self, host: np.ndarray, wait: bool = True) -> Any:
        """``host`` on the executor's device; ``wait=False``: queued on this thread's stream, not
        waited for (a call's inputs, which only this thread's launches read next)."""
        raise NotImplementedError

    def address(self, array: Any) -> int:
        raise NotImplementedError

    def owns(self, array: Any) -> bool:
        """Whether ``array`` is of the executor's kind (kernels can write it directly)."""
        raise NotImplementedError

    def span(self, first: Any, shape: tuple[int, ...], dtype: np.dtype) -> Any | None:
        """An array of ``shape`` over the memory that starts where ``first`` starts and goes on
        past it (the allocation it is a view of), or None where that memory is not known to be
        there: a stack of weights laid out one after another, read in place (:meth:`_hoist`)."""
        return None

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

    def finish(self) -> None:
        """Wait until the runs this thread queued have finished (a host executor's have)."""


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
    """An LLIR program run as generated kernels by an :class:`Executor`, each op lowered by the
    backend's op table (default: the generated kernels); see the module docstring."""

    def __init__(self, graph: Graph, lprog: LProgram, executor: Executor, report: Any = None,
                 backend_name: str = "cuda", table: OpTable | None = None):
        super().__init__(graph)
        self.backend_name = backend_name
        self.table = table if table is not None else OpTable()
        self.lprog = lprog = read_slices_in_place(lprog)  # (a stacked product's slices: no copies)
        self.search_report = report
        self.executor = executor
        ops = lprog.ops
        for i, op in enumerate(ops):
            if op.op in IN_PLACE_OPS:
                check_in_place(lprog, i, self.output_aliases)
        aliased_outputs = {i for i, op in enumerate(ops)
                           if op.op == "Output" and op.args["name"] in self.output_aliases}
        # copies into aliased inputs run last: every other op reads the inputs' old values first
        self.order = [i for i in range(len(ops)) if i not in aliased_outputs] + sorted(aliased_outputs)
        self.buffer_of = list(range(len(ops)))  # value -> the value whose buffer holds it
        for i, op in enumerate(ops):
            if op.op in IN_PLACE_OPS:
                self.buffer_of[i] = self.buffer_of[op.inputs[0]]
        self.dim_names = sorted(self.symbols)
        nd = len(self.dim_names)
        self.dim_slot = {s: k for k, s in enumerate(self.dim_names)}
        self.value_slot = {i: nd + i for i in range(len(ops))}
        self.output_slot = {name: nd + len(ops) + k for k, name in enumerate(self.output_names)}
        self.slots = nd + len(ops) + len(self.output_names)
        self.forms_at: dict[int, tuple[str, str]] = {}  # table slot -> (input, the form of it launches read)
        self.inputs_at = {self.value_slot[i]: op.args["name"] for i, op in enumerate(ops) if op.op == "Input"}
        self.constants = {i: executor.upload(np.ascontiguousarray(lprog.constants[op.args["index"]].value))
                          for i, op in enumerate(ops) if op.op == "Constant"}
        self.outputs_of: dict[str, LOp] = {op.args["name"]: op for op in ops if op.op == "Output"}
        self._output_shape = {name: compile_exprs(op.shape) for name, op in self.outputs_of.items()}
        self._run_end: dict[int, int] = {}  # position in order -> its merged run's last position
        self.launches = self._launches()
        read = {a for launch in self.launches for a in launch.args[len(launch.spec.dims):]}
        # a formed input's values are made only where a launch reads them (a block weight's Cast)
        self.unread = {slot for slot, name in self.inputs_at.items() if slot not in read}
        self.handles = executor.compile([launch.spec for launch in self.launches], self.launches)
        self._slots_of: dict[str, list[int]] = {name: [] for name in self.input_args}
        for slot, name in self.inputs_at.items():
            self._slots_of[name].append(slot)
        self._forms_of: dict[str, list[tuple[int, str]]] = {}
        for slot, (name, form) in self.forms_at.items():
            self._forms_of.setdefault(name, []).append((slot, form))
        direct_values = set(self.direct.values())  # their buffers are the output arrays
        self.computed = [i for i, op in enumerate(ops) if op.op not in ("Input", "Constant", "Output")
                         and self.buffer_of[i] == i and i not in direct_values]
        # values whose size could outgrow their place at dims within the plan's bounds: sizes
        # that are not monotone in the dims (a monotone one is largest at the bounds it was planned at)
        sizes = {i: prod(ops[i].shape) * ops[i].dtype.itemsize for i in self.computed}
        symbolic = [i for i, n in sizes.items() if n.free_vars() and not monotone(n)]
        self._symbolic_values = symbolic
        self._symbolic_bytes = compile_exprs([sizes[i] for i in symbolic])
        self._reserved: dict[str, int] = {}
        self._input_op = {op.args["name"]: i for i, op in enumerate(ops) if op.op == "Input"}
        self._static_inputs = {op.args["name"]: (tuple(int(d.value) for d in op.shape), op.dtype.np)
                               for op in ops if op.op == "Input" and not any(d.free_vars() for d in op.shape)}
        self._fresh_state()

    def persist(self, inputs: Mapping[str, Any] | None = None, /, **named: Any) -> KernelProgram:
        """:meth:`Program.persist`, then what the resident inputs alone decide computed at once
        (:meth:`_hoist`): its kernels are compiled and run beside the weights' upload, not in the
        first call (a Qwen3-MoE first token waited ~95 ms for the C compiler: 98 ms, 4 cached)."""
        bound = super().persist(inputs, **named)
        with bound._lock:
            if bound._hoisted is None and bound._resident:
                bound._hoist()
        return bound

    def _fresh_state(self) -> None:
        self._hoisted: dict[int, Any] | None = None  # decided when persisted (else at the first call)
        self._plan: _Plan | None = None
        self._preparations = 0
        self._reserved = dict(self._reserved)
        self._lock = threading.Lock()
        self._local = threading.local()

    # ------------------------------------------------------------------ building
    def _launches(self) -> list[Launch]:
        """Each op's launches in run order; on cuda (unless ``LIGHTSPEED_CUDA_MERGE=0``) the ops
        reordered so that independent kernels of one merge key are adjacent, and each such run
        merged into one launch (:mod:`.kernels.merge`).  ``self.order`` becomes the new order
        (the arena is planned along it)."""
        ops = self.lprog.ops
        per_op = {i: self._op_launches(i) for i in self.order}
        self.direct = self._direct_outputs(per_op)
        # a direct output's value lives in the output's slot: its producer's launches and its
        # readers' take that slot for the value's, and its Output launches nothing
        moved = {self.value_slot[src]: self.output_slot[ops[o].args["name"]] for o, src in self.direct.items()}
        if moved:
            for o, src in self.direct.items():
                per_op[o] = []
                self.value_slot[src] = moved[self.value_slot[src]]
            per_op = {i: [_retarget(x, moved) for x in launches] for i, launches in per_op.items()}
        if self.executor.dialect != "cuda" or not MERGE:
            return [x for i in self.order for x in per_op[i]]
        aliased = [i for i in self.order if ops[i].op == "Output" and ops[i].args["name"] in self.output_aliases]
        leaves = [i for i in self.order if ops[i].op in ("Input", "Constant")]  # no launch: first
        apart = set(aliased) | set(leaves)
        body = [i for i in self.order if i not in apart]
        key = {i: merge_key(per_op[i][0].spec) if len(per_op[i]) == 1 else None for i in body}
        # a value of the weights alone (a Cast of GGUF blocks, Gemma's scaled table) merges only
        # with such values: merged with a step's op it could no longer be computed once
        # (_hoist takes whole launches), and a Gemma step dequantised its 262k-row table each time
        weights_only = self._weights_only(leaves + body)
        key = {i: (k, True) if k is not None and i in weights_only else k for i, k in key.items()}
        runs = grouped_order(body, {i: set(ops[i].inputs) for i in body}, key)
        self.order = leaves + [i for r in runs for i in r] + aliased
        # a merged run's parts run at once: a value read in it lives to the run's end (_make_plan)
        at = len(leaves)
        for r in runs:
            self._run_end.update((p, at + len(r) - 1) for p in range(at, at + len(r)))
            at += len(r)
        out: list[Launch] = []
        for r in runs:
            if len(r) == 1:
                out.extend(per_op[r[0]])
                continue
            parts = [per_op[i][0] for i in r]  # a run of one key: one launch each
            spec = merge_kernels([x.spec for x in parts])
            args = tuple(a for x in parts for a in x.args[:len(x.spec.dims)])
            args += tuple(a for x in parts for a in x.args[len(x.spec.dims):])
            out.append(Launch(spec, args, parts[0].op, tuple(r)))
        out.extend(x for i in aliased for x in per_op[i])
        return out

    def _weights_only(self, order: list[int]) -> set[int]:
        """The ops (in run order) whose values a persisted program may compute once: inputs and
        constants of static shape, and the ops of static shape, no output nor in-place write,
        that read only such values (:meth:`_hoist`'s rule, with every static input resident)."""
        ops = self.lprog.ops
        found: set[int] = set()
        for i in order:
            op = ops[i]
            if (op.op in ("Input", "Constant") and not any(d.free_vars() for d in op.shape)) or _once(op, found):
                found.add(i)
        return found

    def _direct_outputs(self, per_op: dict[int, list[Launch]]) -> dict[int, int]:
        """{Output op: the value it copies} for the outputs the value's producer writes itself:
        a generated kernel's own buffer (no library call: a captured cuBLASLt call keeps its
        pointers, and an output may be a new array each call), laid out as the output (same
        dtype and size, read whole in order), no other op writing into it, one output per value.
        A prompt's new key rows (RoPE'd) go straight to the cache rows passed as ``out=``: 16 of
        the 32 copies of a 1B's 512-token prefill (352 us on an H100, nineteenth session)."""
        ops = self.lprog.ops
        writers = Counter(self.buffer_of)
        direct: dict[int, int] = {}
        for o in self.order:
            op = ops[o]
            if op.op != "Output" or op.args["name"] in self.output_aliases:
                continue
            src = op.inputs[0]
            view = op.args["x_view"]
            if (self.buffer_of[src] != src or writers[src] != 1 or src in direct.values()
                    or ops[src].op in ("Input", "Constant") or ops[src].dtype != op.dtype
                    or not per_op.get(src) or any(x.spec.library is not None for x in per_op[src])
                    or not view.is_contiguous or prod(view.shape) != prod(ops[src].shape)):
                continue
            direct[o] = src
        return direct

    def _op_launches(self, i: int) -> list[Launch]:
        """Op ``i``'s launches (none for inputs, constants and outputs written in place)."""
        ops = self.lprog.ops
        out: list[Launch] = []
        dialect = self.executor.dialect
        op = ops[i]
        if op.op in ("Input", "Constant"):
            return out
        if op.op == "Output":
            name = op.args["name"]
            src = self.buffer_of[op.inputs[0]]
            alias = self.output_aliases.get(name)
            if alias is not None and ops[src].op == "Input" and ops[src].args["name"] == alias:
                if op.args["x_view"].is_contiguous:
                    return out  # the value already is the input's buffer: written in place
                raise LightspeedError(f"output {name!r} aliases input {alias!r} but reads it through a view; "
                                      "it cannot be written into itself")
            target = self.output_slot[name]
        else:
            target = self.value_slot[self.buffer_of[i]]
        in_dtypes = [ops[j].dtype for j in op.inputs]
        slot_of = {k: self.value_slot[self.buffer_of[j]] for k, j in enumerate(op.inputs)}
        lowered = self.table.lower(op, in_dtypes, dialect)
        for k, form in lowered.forms.items():  # an input read in another form (its blocks)
            slot_of[k] = self._form_slot(ops[op.inputs[k]].args["name"], form)
        for spec in lowered.specs:
            bufs = tuple(target if b == "out" else slot_of[b] for b in spec.buffers)
            out.append(Launch(spec, tuple(self.dim_slot[d] for d in spec.dims) + bufs, i))
        return out

    def _form_slot(self, name: str, form: str) -> int:
        """The table slot of input ``name``'s form ``form`` (added on first use)."""
        slot = next((k for k, v in self.forms_at.items() if v == (name, form)), None)
        if slot is None:
            slot, self.slots = self.slots, self.slots + 1
            self.forms_at[slot] = (name, form)
        return slot

    def to_device(self, array: Any) -> Any:
        """A value the op table places in several forms (weights held as blocks, for kernels that
        read the blocks: float32 values on demand) becomes a :class:`~.lowering.FormedValue`;
        other arrays are uploaded."""
        placed = self.table.place(array, self.executor)
        if placed is not None:
            return placed
        # row-major (kernels index buffers flat): a strided view is copied, anything else kept
        # not waited for: a call's inputs, read next by this thread's launches; a persisted copy
        # waits once for its own (CudaProgram._fresh_state)
        return self.executor.upload(np.asarray(array), wait=False)

    def bind(self, inputs: Mapping[str, Any], dims: Mapping[str, int] | None = None
             ) -> tuple[dict[str, Any], dict[str, int]]:
        arrays, env = super().bind(inputs, dims)
        self._local.given = (set(inputs), arrays)  # execute of these arrays visits these inputs only
        return arrays, env

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
        free_after: dict[int, list[int]] = {}
        for pos, values in liveness([tuple(self.buffer_of[j] for j in ops[i].inputs) for i in self.order]).items():
            free_after.setdefault(self._run_end.get(pos, pos), []).extend(values)
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
            local.state, local.plan = st, plan
            local.seen = {}  # input name -> the array whose addresses the table holds (execute)
            local.full = True  # the next call visits every input
            local.overridden = set()  # resident inputs whose slots hold another array
        return st

    def execute(self, arrays: dict[str, Any], dims: dict[str, int],
                out: Mapping[str, Any] | None = None) -> dict[str, Any]:
        if self._hoisted is None and self._resident:
            with self._lock:
                if self._hoisted is None:
                    self._hoist()
        local = self._local
        bound = local.__dict__.pop("given", None)  # the names this call's bind was passed
        given = bound[0] if bound is not None and bound[1] is arrays else None
        if self._hoisted and any(n in self._hoisted_from and arrays[n] is not self._resident[n]
                                 for n in (arrays if given is None else given)):
            return self._unhoisted.execute(arrays, dims, out)  # another array for a hoisted value's input
        plan = self._plan_for(dims)
        st = self._state(plan)
        table = st.table
        for s, k in self.dim_slot.items():
            table[k] = dims[s]
        ex = self.executor
        # an input's table entries are written when it is not the array they were written for
        # (the weights and a generation's KV caches come back call after call: their addresses
        # stay in the table; a repeated decode step writes only its token's and positions')
        seen = local.seen
        resident = self._resident
        if local.full:
            names = arrays
            local.full = False
        elif given is not None:  # the others are the resident arrays, whose entries were written before
            names = given | local.overridden if local.overridden else given
        else:  # a call not bound here (a bucket's): the arrays other than the resident ones
            names = [n for n, a in arrays.items() if resident.get(n) is not a or n in local.overridden]
        for name in names:
            a = arrays[name]
            if name in resident:  # a resident input passed as another array: visit it next call too
                (local.overridden.discard if a is resident[name] else local.overridden.add)(name)
            if recall(seen, name, a):
                continue
            self._write_input(table, name, a, self.unread)
            remember(seen, name, a)
        outputs: dict[str, Any] = {}
        for name, slot in self.output_slot.items():
            alias = self.output_aliases.get(name)
            if alias is not None:
                arr = outputs[name] = arrays[alias]
                if recall(seen, (OUTPUT, name), arr):
                    continue  # the input it aliases is the one whose address the slot holds
                remember(seen, (OUTPUT, name), arr)
            elif out is not None and name in out and ex.owns(out[name]):
                arr = outputs[name] = out[name]
                if recall(seen, (OUTPUT, name), arr):
                    continue  # the array given last call (a reused KV cache's rows): its address is there
                remember(seen, (OUTPUT, name), arr)
            else:
                op = self.outputs_of[name]
                arr = ex.empty(self._output_shape[name](dims), op.dtype.np)
                seen.pop((OUTPUT, name), None)
            table[slot] = ex.address(arr)
            outputs[name] = arr
        if trace.enabled():  # kernels one by one, each timed on the device's clock
            t0 = time.perf_counter()
            for launch, start, seconds in ex.run_traced(st, self.launches, self.handles, plan.bounds):
                name = "+".join(self.lprog.ops[j].op for j in launch.merged or (launch.op,))
                trace.event(name, "run.kernel", start, seconds, kernel=launch.spec.name, kind=launch.spec.launch.kind)
            trace.event(f"run ({self.backend_name})", "run", t0, time.perf_counter() - t0, dims=str(dims))
        else:
            ex.run(st, self.launches, self.handles, plan.bounds)
        return outputs

    def _write_input(self, table: np.ndarray, name: str, a: Any, unread: set[int]) -> None:
        """Input ``name``'s table entries for array ``a``: its own slots (a block weight's float
        values only where a launch reads them, made then: ``unread`` holds the slots no launch
        reads, given a null address on any executor), then the other forms launches read."""
        ex = self.executor
        for slot in self._slots_of[name]:
            if isinstance(a, FormedValue) and slot in unread:
                table[slot] = 0
                continue
            table[slot] = ex.address(a.form(VALUES) if isinstance(a, FormedValue) else a)
        for slot, form in self._forms_of.get(name, ()):
            table[slot] = ex.address(a.form(form))

    def _hoist(self) -> None:
        """Compute once what depends on the resident inputs alone (when persisted, else at the
        first call): the launches whose every op reads only resident inputs, constants and such ops'
        values (static shapes, no in-place writes, no direct outputs) run now, once, and the
        values later launches read become constants (``_hoisted``: {op: its array}); the call
        runs the rest.  A call that passes another array for one of those inputs runs the whole
        program (``_unhoisted``).  Gemma's norms read (1 + w): a launch a norm a step, before."""
        ops = self.lprog.ops
        static = {i for i, op in enumerate(ops) if op.op == "Constant"
                  or (op.op == "Input" and op.args["name"] in self._resident)}
        excluded = set(self.direct.values())
        prelude = []
        for x in self.launches:
            parts = x.merged or (x.op,)
            if all(p not in excluded and _once(ops[p], static) for p in parts):
                if not prelude or prelude[-1] is not x:
                    prelude.append(x)
                static.update(parts)
        # (an op's launches all qualify or none does: the same op, inputs only more static later;
        # a merged launch qualifies as a whole)
        made = {p for x in prelude for p in (x.merged or (x.op,))}
        needed = {j for i, op in enumerate(ops) if i not in made for j in op.inputs}
        keep = sorted(made & needed)
        self._hoisted = {}
        if not keep:
            return
        self._unhoisted = copy.copy(self)
        self._unhoisted._fresh_state()
        self._unhoisted._hoisted = {}
        # a stack of resident weights laid out one after another (Generator's one_process places
        # them so) is a view of them: no launch, no second copy of the weights
        spans = {i: v for i in keep if (v := self._stack_span(i)) is not None}
        arrays = {i: spans[i] if i in spans else self.executor.empty(
            tuple(int(d.value) for d in ops[i].shape), ops[i].dtype.np) for i in keep}
        # the prelude: a copy whose launches are the static ones and whose kept values are the arrays
        ex = self.executor
        pre = copy.copy(self)
        pre._fresh_state()
        pre._hoisted = {}
        pre.launches = [x for x in prelude if not set(x.merged or (x.op,)) <= spans.keys()]
        pre.handles = ex.compile([x.spec for x in pre.launches])  # each kernel (not a whole-program runner)
        pre.constants = {**self.constants, **arrays}
        pre.computed = [i for i in self.computed if i not in arrays]
        if pre.launches:
            dims = {s: max(1, self._reserved.get(s, 1)) for s in self.dim_names}
            plan = pre._plan_for(dims)
            st = pre._state(plan)
            for s_, k in self.dim_slot.items():
                st.table[k] = dims[s_]
            read = {a for x in pre.launches for a in x.args[len(x.spec.dims):]}
            for name, a in self._resident.items():
                pre._write_input(st.table, name, a, set(self.inputs_at) - read)
            ex.run(st, pre.launches, pre.handles, plan.bounds)
            ex.finish()
        # the resident inputs the kept values depend on: another array for one runs the whole program
        deps, todo = set(), list(keep)
        while todo:
            i = todo.pop()
            if i in deps:
                continue
            deps.add(i)
            todo.extend(j for j in ops[i].inputs if j in made or ops[j].op == "Input")
        self._hoisted_from = frozenset(ops[i].args["name"] for i in deps if ops[i].op == "Input")
        chosen = {id(x) for x in prelude}
        self.launches = [x for x in self.launches if id(x) not in chosen]
        self.handles = self.executor.compile([x.spec for x in self.launches], self.launches)
        self.constants = {**self.constants, **arrays}
        self.computed = [i for i in self.computed if i not in made]
        self._hoisted = arrays

    def _stack_span(self, i: int) -> Any | None:
        """Op ``i``'s value as a view of the resident weights it stacks, where they lie one after
        another in its order (each at the previous one's end); else None."""
        members = stack_members(self.lprog, i)
        if members is None or not all(name in self._resident for name, _ in members):
            return None
        ex, op = self.executor, self.lprog.ops[i]
        arrays = [self._resident[name] for name, _ in members]
        if not all(ex.owns(a) or isinstance(a, np.ndarray) for a in arrays):
            return None  # (blocks, torch tensors: not laid out by us)
        row = int(op.shape[1].value) * op.dtype.itemsize
        first = ex.address(arrays[0])
        if any(ex.address(a) != first + start * row for a, (_, start) in zip(arrays, members)):
            return None
        return ex.span(arrays[0], tuple(int(d.value) for d in op.shape), op.dtype.np)

    def weight_stacks(self) -> list[tuple[str, ...]]:
        return [tuple(name for name, _ in m) for i in range(len(self.lprog.ops))
                if (m := stack_members(self.lprog, i)) is not None]

    def arena_bytes(self, dims: Mapping[str, int] | None = None) -> int:
        return self._plan_for({**(self._plan.bounds if self._plan else {}), **(dims or {})}).nbytes

    def value_bytes(self, dims: Mapping[str, int] | None = None) -> int:
        """The bytes of every value the kernels compute, as if none shared a place: beside
        :meth:`arena_bytes`, what the liveness plan saves (a training step's activations are
        freed as the backward pass reads them for the last time)."""
        plan = self._plan_for({**(self._plan.bounds if self._plan else {}), **(dims or {})})
        return sum(-(-max(1, plan.caps[i]) // ALIGN) * ALIGN for i in self.computed if i in plan.caps)

    @property
    def kernels(self) -> list[KernelSpec]:
        return [launch.spec for launch in self.launches]

    def report(self) -> str:
        return self.search_report.format() if self.search_report is not None else "no search was run"


def _once(op: Any, known: set[int]) -> bool:
    """Whether a persisted program may compute ``op`` once: static shape, no output nor in-place
    write, every operand in ``known`` (values of the resident inputs alone)."""
    return (op.op not in ("Output", *IN_PLACE_OPS) and not any(d.free_vars() for d in op.shape)
            and set(op.inputs) <= known)


def grouped_order(order: list[int], deps: Mapping[int, set[int]], key: Mapping[int, Any]) -> list[list[int]]:
    """A topological order of ``order`` (itself one; ``deps[i]``: the ops op i reads) that keeps
    its order except that ops of one non-None ``key`` that are ready together and independent of
    each other come one after another, as runs: after an op of key K, the earliest ready op of key
    K that reads none of its run joins the run.  Returns the runs in order (an op of key None is a
    run of its own); their concatenation is the order."""
    pos = {i: n for n, i in enumerate(order)}
    inside = set(order)
    waiting = {i: len(deps[i] & inside) for i in order}
    readers: dict[int, list[int]] = {i: [] for i in order}
    for i in order:
        for j in deps[i] & inside:
            readers[j].append(i)
    ready: list[tuple[int, int]] = []  # heaps of (position, op): every ready op, and by key
    by_key: dict[Any, list[tuple[int, int]]] = {}
    placed: set[int] = set()

    def make_ready(i: int) -> None:
        heapq.heappush(ready, (pos[i], i))
        if key.get(i) is not None:
            heapq.heappush(by_key.setdefault(key[i], []), (pos[i], i))

    for i in order:
        if not waiting[i]:
            make_ready(i)
    runs: list[list[int]] = []
    run: set[int] = set()
    run_key = None
    while ready:
        pick = None
        if run_key is not None:  # the earliest ready op of the run's key that reads none of the run
            heap, skipped = by_key.get(run_key, []), []
            while heap:
                p, i = heapq.heappop(heap)
                if i in placed:
                    continue
                if deps[i] & run:
                    skipped.append((p, i))
                    continue
                pick = i
                break
            for item in skipped:
                heapq.heappush(heap, item)
        if pick is None:
            while ready[0][1] in placed:
                heapq.heappop(ready)
            pick = heapq.heappop(ready)[1]
            run, run_key = set(), key.get(pick)
            runs.append([])
        placed.add(pick)
        runs[-1].append(pick)
        run.add(pick)
        for r in readers[pick]:
            waiting[r] -= 1
            if not waiting[r]:
                make_ready(r)
        while ready and ready[0][1] in placed:
            heapq.heappop(ready)
    if len(placed) != len(order):
        raise LightspeedError("grouped_order: the ops' dependencies form a cycle")
    return runs


def monotone(e: Expr) -> bool:
    """Whether ``e`` never decreases when a dim grows (dims are >= 0): sums, products, min/max of
    such terms with non-negative constants, and their floor division by a positive constant;
    False where that cannot be shown (a negative coefficient, a mod)."""
    kind = e.kind
    if kind in ("const", "var"):
        return kind == "var" or e.value >= 0
    if kind in ("add", "mul", "min", "max"):
        return all(monotone(a) for a in e.args)
    return kind == "floordiv" and monotone(e.args[0]) and e.args[1].is_const and e.args[1].value > 0


# the memo key of an aliased output's table entry (execute): (OUTPUT, output name)
OUTPUT = object()
