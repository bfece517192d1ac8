"""A compiled program: what the compile pipeline returns.  :class:`Program` checks inputs against
the graph's (names, ranks, dims, dtypes, any array type) and binds dims; keeps persisted inputs
resident; handles ``out=`` and aliased outputs; returns the caller's kind.  A backend implements
:meth:`Program.execute` and, for a device, the array hooks; also :class:`SearchReport`."""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from . import dtypes as dt
from .errors import InputError, LightspeedError
from .graph import Graph
from .primitives import PRIMITIVES, InputArg
from .symbolic import Expr, compile_exprs, prod

if TYPE_CHECKING:
    from .egraph.llir import LProgram

# the largest dim value and output a call takes: past them a size is a mistake, not a workload (and
# would otherwise surface as the allocator's MemoryError or an overflow deep in a kernel)
MAX_DIM = 1 << 40
MAX_BYTES = 1 << 40

__all__ = ["Program", "to_numpy", "same_memory", "share_array_hooks", "SearchReport", "CandidateResult",
           "BucketedProgram"]


def to_numpy(value: Any, what: str) -> np.ndarray:
    """numpy view of an input value (numpy arrays/scalars, or torch CPU tensors)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic) or (hasattr(value, "__array__") and hasattr(value, "blocks")):
        return np.asarray(value)  # a scalar, or weights held as blocks (weights.quant.QuantTensor)
    if type(value).__module__.startswith("torch"):
        import torch

        if isinstance(value, torch.Tensor):
            t = value.detach().cpu()
            d = dt.as_dtype(t.dtype)
            if t.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
                bits = torch.int16 if d.itemsize == 2 else torch.uint8
                return t.contiguous().view(bits).numpy().view(d.np)
            return t.numpy()
    raise InputError(f"{what}: expected a numpy array (or torch tensor), got {type(value).__name__}")


def _to_torch(a: np.ndarray) -> Any:
    """A numpy result as a torch tensor sharing its memory (bfloat16/float8 through their bits)."""
    import torch

    low = {"bfloat16": torch.bfloat16, "float8_e4m3": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
    d = dt.as_dtype(a.dtype).name
    if d not in low:
        return torch.from_numpy(a)
    return torch.from_numpy(np.ascontiguousarray(a).view(np.int16 if a.itemsize == 2 else np.uint8)).view(low[d])


def same_memory(a: Any, b: Any) -> bool:
    """Whether two arrays (host, or device ones with a ``ptr``) are the same elements."""
    if a is b:
        return True
    pa, pb = getattr(a, "ptr", None), getattr(b, "ptr", None)
    if pa is not None or pb is not None:
        return pa == pb and tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype
    ia, ib = getattr(a, "__array_interface__", None), getattr(b, "__array_interface__", None)
    return ia is not None and ib is not None and ia["data"] == ib["data"] and a.shape == b.shape and \
        a.dtype == b.dtype and ia.get("strides") == ib.get("strides")


def share_array_hooks(wrapper: Program, inner: Program) -> None:
    """A program that runs others (buckets, rolled parts) takes and gives their array kinds."""
    for hook in ("to_device", "as_array", "zeros", "clear", "rows", "store_back", "deliver"):
        setattr(wrapper, hook, getattr(inner, hook))


class Program:
    """Callable compiled graph: ``prog(x=array, ...)`` or ``prog({"x": array}, dims={"s": 4})``."""

    backend_name = "abstract"

    def __init__(self, graph: Graph):
        self.graph = graph
        self.input_args: dict[str, InputArg] = {name: graph.nodes[nid].arg for name, nid in graph.inputs.items()}
        self.output_names = tuple(graph.outputs)
        self.symbols = frozenset(graph.symbols())
        self._resident: dict[str, Any] = {}  # persisted inputs, on the backend's device
        self._resident_dims: dict[str, int] = {}
        self.compiled: Program = self  # the compiled program this one shares (itself, unless persisted)
        self.output_aliases: dict[str, str] = dict(graph.output_aliases)  # output -> input written in place
        self._aliased_inputs = frozenset(self.output_aliases.values())
        # input name -> (weak reference to the array last checked, its shape, dtype, symbolic axes)
        self._checked: dict[str, tuple] = {}

    # the hooks a device backend overrides (host backends: numpy all the way)
    def to_device(self, array: Any) -> Any:
        """A checked input (as :meth:`as_array` gave it) as the backend's array type (weights held
        as blocks: their float32 values)."""
        return np.asarray(array)

    def as_array(self, value: Any, what: str) -> Any:
        """A caller's value as an array with a checkable ``shape``/``dtype`` (device arrays stay)."""
        return to_numpy(value, what)

    def zeros(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """A zero-filled array of this program's device (a KV cache): on a GPU made there, not
        uploaded from the host."""
        return self.to_device(np.zeros(shape, dtype))

    def clear(self, array: Any) -> None:
        """Zero an array of this program's device in place (a reused KV cache; on a GPU queued)."""
        array[...] = 0

    def rows(self, array: Any, start: int, count: int) -> Any:
        """Rows ``start .. start + count`` of an array of this program's device as an array sharing
        its memory (a cache's first rows, given as a call's ``out=``: the prefill writes its keys
        and values there, with no copy through the host)."""
        if not 0 <= start <= start + count <= array.shape[0]:
            raise InputError(f"rows {start}..{start + count} outside an array of {array.shape[0]} rows")
        return array[start:start + count]

    def store_back(self, user: Any, array: Any) -> None:
        """Write ``array`` into the caller's ``user`` value (aliased inputs, ``out=``) unless same memory."""
        dest = to_numpy(user, "aliased input")
        if not same_memory(dest, array):
            np.copyto(dest, array)

    def deliver(self, res: dict[str, Any], inputs: Mapping[str, Any]) -> dict[str, Any]:
        """Results as the caller's kind: torch tensors when any input was one."""
        if any(type(v).__module__.startswith("torch") for v in inputs.values()):
            res = {k: v if type(v).__module__.startswith("torch") else _to_torch(v) for k, v in res.items()}
        return res

    def persist(self, inputs: Mapping[str, Any] | None = None, /, **named: Any) -> Program:
        """A program with these inputs resident (checked and moved to the device once): its calls
        leave them out (and may still pass a value to override one).  The compiled executable is
        shared; this program is unchanged, so one compiled model serves several weight sets."""
        given = {**(inputs or {}), **named}
        if set(given) - set(self.input_args):
            raise InputError(f"persist: unexpected input(s) {sorted(set(given) - set(self.input_args))}; "
                             f"the program takes {sorted(self.input_args)}")
        arrays, env = self._check(given, dict(self._resident_dims), partial=True)
        bound = copy.copy(self)
        bound._resident = {**self._resident, **{k: self.to_device(v) for k, v in arrays.items()}}
        bound._resident_dims = env
        bound._fresh_state()
        return bound

    def weight_stacks(self) -> list[tuple[str, ...]]:
        """Inputs the program reads stacked along their rows, each stack in its order (a kernel
        program's stacked weights: laid out so, the stack is read in place)."""
        return []

    @property
    def resident(self) -> Mapping[str, Any]:
        """The persisted inputs as the backend holds them (to persist another program with)."""
        return MappingProxyType(self._resident)

    def _fresh_state(self) -> None:  # reset per-instance run state in a persisted copy (buffers, locks)
        pass

    def reserve(self, **bounds: int) -> Program:
        """Prepare for dims up to ``bounds`` (``reserve(p=4096)``): calls within them prepare nothing."""
        unknown = set(bounds) - self.symbols
        if unknown:
            raise InputError(f"reserve: the program has no dims {sorted(unknown)} (it has {sorted(self.symbols)})")
        return self

    @property
    def preparations(self) -> int:  # executable plans made (buffers, captured graphs)
        return 0

    def bind(self, inputs: Mapping[str, Any], dims: Mapping[str, int] | None = None
             ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        """Check inputs and bind dims. Returns (arrays by input name, dim values)."""
        env: dict[str, int] = dict(self._resident_dims)
        bad_names = [k for k in (*inputs, *(dims or {})) if not isinstance(k, str)]
        if bad_names:
            raise InputError(f"input and dim names must be strings, got {bad_names[0]!r}")
        unknown = set(dims or {}) - self.symbols
        if unknown:
            raise InputError(f"unknown dim(s) {sorted(unknown)}: the program's dims are {sorted(self.symbols)}")
        for k, v in (dims or {}).items():
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise InputError(f"dim {k!r}: expected a non-negative int, got {v!r}")
            if v > MAX_DIM:
                raise InputError(f"dim {k!r} = {v} is beyond the largest size a program takes ({MAX_DIM})")
            if k in self._resident_dims and self._resident_dims[k] != v:
                raise InputError(f"dim {k!r} = {v}, but the persisted inputs bind it to {self._resident_dims[k]}")
            env[k] = int(v)
        extra = inputs.keys() - self.input_args.keys()  # (sets of the inputs' size: not of ~150 weights)
        if extra:
            raise InputError(f"unexpected input(s) {sorted(extra)}; the program takes {sorted(self.input_args)}")
        if len(inputs.keys() | self._resident.keys()) < len(self.input_args):
            missing = [n for n in self.input_args if n not in inputs and n not in self._resident]
            raise InputError(f"missing input(s) {missing}; the program takes {sorted(self.input_args)}")
        given, env = self._check(inputs, env, partial=bool(self._resident))
        unbound = self.symbols - env.keys()
        if unbound:
            raise InputError(f"dims {sorted(unbound)} are not determined by the input shapes; "
                             "pass them explicitly with dims={...}")
        self._check_output_sizes(env)  # before anything is moved or allocated
        arrays = {**self._resident, **{k: self.to_device(v) for k, v in given.items()}}
        return arrays, env

    def _check_output_sizes(self, env: Mapping[str, int]) -> None:
        """Outputs whose shape depends on the dims may not exceed :data:`MAX_BYTES` (their sizes
        compiled once; a program without symbolic outputs checks nothing)."""
        sizes = self.__dict__.get("_output_sizes")
        if sizes is None:
            nodes = {name: self.graph.nodes[nid] for name, nid in self.graph.outputs.items()}
            symbolic = [n for n, node in nodes.items() if any(d.free_vars() for d in node.shape)]
            sizes = self._output_sizes = (symbolic, compile_exprs(
                [prod(nodes[n].shape) * nodes[n].dtype.itemsize for n in symbolic]))
        names, evaluate = sizes
        if not names:
            return
        for name, nbytes in zip(names, evaluate(env)):
            if nbytes > MAX_BYTES:
                raise InputError(f"dims {dict(env)} make output {name!r} {nbytes:.3g} bytes, beyond the "
                                 f"{MAX_BYTES >> 40} TiB any device holds")

    def _check(self, inputs: Mapping[str, Any], env: dict[str, int], partial: bool
               ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        """Check ``inputs`` (all, or the given ones when ``partial``); bind their dims into ``env``."""
        arrays: dict[str, np.ndarray] = {}
        deferred: list[tuple[str, int, Expr, int]] = []
        # a partial check (calls with resident inputs) looks at the given inputs only
        memo = self._checked
        for name in (inputs if partial else self.input_args):
            arg = self.input_args[name]
            want, a = arg.dtype, inputs[name]
            axes = recall(memo, name, a)
            if axes is not None and (name not in self._aliased_inputs or writable(a)):
                # the array this input had last call: its dtype, layout and constant axes were
                # checked then; only its dims are bound again
                bind_axes(name, axes, env, deferred)
                arrays[name] = a
                continue
            given = a
            if want.block and getattr(a, "qtype", None) != want.name:  # weights held as GGML blocks
                raise InputError(f"input {name!r}: expected {want.name} blocks (a weights.quant.QuantTensor), "
                                 f"got {getattr(a, 'qtype', None) or type(a).__name__}")
            if not want.block and (a := self.as_array(a, f"input {name!r}")).dtype != want.np:
                mod = "ml_dtypes" if want.np.kind == "V" else "np"  # bfloat16/float8 are ml_dtypes types
                raise InputError(f"input {name!r}: expected dtype {want.name}, got {a.dtype} "
                                 f"(cast it, e.g. x.astype({mod}.{want.np.name}))")
            if name in self._aliased_inputs and not writable(a):
                out = next(o for o, i in self.output_aliases.items() if i == name)
                raise InputError(f"input {name!r} is written in place (output {out!r} aliases it): pass a writable, "
                                 "C-contiguous array")
            if a.ndim != len(arg.shape):
                raise InputError(f"input {name!r}: expected rank {len(arg.shape)} with shape "
                                 f"({', '.join(map(str, arg.shape))}), got shape {a.shape}")
            for ax, (d, n) in enumerate(zip(arg.shape, a.shape)):
                if d.is_const and d.value != n:
                    raise InputError(f"input {name!r}: axis {ax} must have size {d.value}, got {n} "
                                     f"(shape {a.shape}, expected ({', '.join(map(str, arg.shape))}))")
            axes = tuple((ax, d, int(n)) for ax, (d, n) in enumerate(zip(arg.shape, a.shape)) if not d.is_const)
            bind_axes(name, axes, env, deferred)
            arrays[name] = a
            if a is given:  # remembered (weakly) while it lives: its next call checks only the dims
                remember(memo, name, a, axes)
        for name, ax, d, n in deferred:
            unbound = d.free_vars() - env.keys()
            if unbound:
                raise InputError(f"input {name!r}: axis {ax} has size {d}, which needs dims {sorted(unbound)}; "
                                 "pass them with dims={...}")
            if d.evaluate(env) != n:
                raise InputError(f"input {name!r}: axis {ax} must have size {d} = {d.evaluate(env)}, got {n}")
        return arrays, env

    def __call__(self, inputs: Mapping[str, Any] | None = None, /, *, dims: Mapping[str, int] | None = None,
                 out: Mapping[str, Any] | None = None, fetch: Sequence[str] | None = None,
                 **named: Any) -> dict[str, Any]:
        """Run the program; ``out``: arrays to write outputs into (returned as given); ``fetch``:
        the outputs to return (default all; a device backend copies only these to the host)."""
        for what, value in (("inputs", inputs), ("dims", dims), ("out", out)):
            if value is not None and not isinstance(value, Mapping):
                raise InputError(f"{what} must be a mapping of names (e.g. prog(x=a) or prog({{'x': a}})), "
                                 f"got {type(value).__name__}")
        all_inputs = dict(inputs or {})
        dup = all_inputs.keys() & named.keys()
        if dup:
            raise InputError(f"input(s) {sorted(dup)} given twice")
        all_inputs.update(named)
        arrays, env = self.bind(all_inputs, dims)
        dest = None
        if out:
            unknown = set(out) - set(self.output_names)
            if unknown:
                raise InputError(f"out: unexpected output(s) {sorted(unknown)}; outputs are {list(self.output_names)}")
            dest = {k: self.as_array(v, f"out[{k!r}]") for k, v in out.items()}
            for k, v in dest.items():
                if not getattr(getattr(v, "flags", None), "writeable", True):
                    raise InputError(f"out[{k!r}] is read-only")
        res = self.execute(arrays, env, dest)
        for o, i in self.output_aliases.items():  # the input holds the output after the call
            target = arrays[i]
            if not same_memory(res[o], target):
                self.store_back(target, res[o])
            if i in all_inputs:
                self.store_back(all_inputs[i], target)
            res[o] = all_inputs[i] if i in all_inputs else target
        if out:
            for k, v in dest.items():
                if not same_memory(res[k], v):
                    self.store_back(out[k], res[k])
            res = {k: out.get(k, v) for k, v in res.items()}
        if fetch is not None:
            res = {k: res[k] for k in self.check_fetch(fetch)}
        return self.deliver(res, all_inputs)

    def execute(self, arrays: dict[str, Any], dims: dict[str, int],
                out: Mapping[str, np.ndarray] | None = None) -> dict[str, Any]:
        """Run with checked inputs and bound dims; write into ``out`` arrays where given."""
        raise NotImplementedError

    def launch(self, inputs: Mapping[str, Any], *, dims: Mapping[str, int] | None = None,
               fetch: Sequence[str] = ()) -> Pending:
        """Start a call and return at once where the backend can (a device: the work queued on
        this thread's stream, the ``fetch`` outputs copied back asynchronously): a
        :class:`Pending` whose ``result()`` waits for them, and whose ``value(name)`` is an output
        as the backend holds it, to pass to a next call without a round trip (the decode step's
        token).  Host backends run the call before returning."""
        res = self(inputs, dims=dims)
        return Pending(res, {k: np.asarray(res[k]) for k in self.check_fetch(fetch)})

    def check_fetch(self, fetch: Sequence[str]) -> Sequence[str]:
        """``fetch`` (output names to return), checked."""
        if isinstance(fetch, str) or not all(isinstance(k, str) for k in fetch):
            raise InputError(f"fetch must be a sequence of output names, got {fetch!r}")
        unknown = [k for k in fetch if k not in self.output_names]
        if unknown:
            raise InputError(f"fetch: unknown output(s) {unknown}; outputs are {list(self.output_names)}")
        return fetch

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {a.dtype.name}[{', '.join(map(str, a.shape))}]" for n, a in self.input_args.items())
        return f"<{type(self).__name__} backend={self.backend_name} ({ins}) -> {list(self.output_names)}>"


class Pending:
    """A program call in flight (:meth:`Program.launch`)."""

    def __init__(self, outputs: Mapping[str, Any], host: dict[str, np.ndarray],
                 wait: Callable[[], None] | None = None):
        self._outputs, self._host, self._wait = outputs, host, wait

    def value(self, name: str) -> Any:
        """Output ``name`` as the backend holds it (on the device: not copied, maybe not computed
        yet: usable as an input of a later call on the same thread)."""
        return self._outputs[name]

    def result(self) -> dict[str, np.ndarray]:
        """The fetched outputs on the host, once the call has run."""
        if self._wait is not None:
            wait, self._wait = self._wait, None
            wait()
            self._host = {k: np.array(v) for k, v in self._host.items()}  # out of the copy buffers
        return self._host


def bind_axes(name: str, axes: Sequence[tuple[int, Expr, int]], env: dict[str, int],
              deferred: list[tuple[str, int, Expr, int]]) -> None:
    """Bind input ``name``'s symbolic axes (axis, dim, size): a dim named alone into ``env`` (it
    must agree with an earlier binding), an expression of dims to check once all are bound."""
    for ax, d, n in axes:
        if d.kind != "var":
            deferred.append((name, ax, d, n))
        elif (prev := env.setdefault(d.name, n)) != n:
            raise InputError(f"input {name!r}: axis {ax} is dim {d.name!r} = {n}, but {d.name!r} "
                             f"is already bound to {prev}")


def recall(memo: dict, key: Any, a: Any) -> Any:
    """What :func:`remember` holds under ``key`` for this very array (same shape and dtype), or None."""
    hit = memo.get(key)
    if hit is not None and hit[0]() is a and hit[1:3] == (getattr(a, "shape", None), getattr(a, "dtype", None)):
        return hit[3]
    return None


def remember(memo: dict, key: Any, a: Any, value: Any = True) -> None:
    """Hold ``value`` for array ``a`` (weakly, with its shape and dtype: numpy moves an array's
    memory only when its size changes, and never while it is weakly referenced) under ``key``."""
    try:
        memo[key] = (weakref.ref(a), getattr(a, "shape", None), getattr(a, "dtype", None), value)
    except TypeError:  # not weakly referable: nothing remembered
        memo.pop(key, None)


def writable(a: Any) -> bool:
    """Whether an array may be written in place: row-major and writeable (device arrays have no
    flags: always row-major)."""
    flags = getattr(a, "flags", None)
    return flags is None or (flags.c_contiguous and flags.writeable)


@dataclass
class CandidateResult:
    index: int
    origin: str
    ops: dict[str, int]
    seconds: float | None
    error: str | None = None


@dataclass
class SearchReport:
    phases: dict[str, float] = field(default_factory=dict)
    rule_matches: dict[str, int] = field(default_factory=dict)
    egraph_nodes: int = 0
    candidates: list[CandidateResult] = field(default_factory=list)
    winner: int = 0
    profile_dims: dict[str, int] = field(default_factory=dict)
    program_text: str = ""
    egraph_cached: bool = False
    decision_cached: bool = False
    produced_by: dict[str, list[str]] = field(default_factory=dict)  # backend op -> rule names
    rulesets: dict[str, tuple[float, int, str]] = field(default_factory=dict)  # seconds, iterations, stop
    program: LProgram | None = None
    lower: float = 0.0  # seconds preparing the kernels (Backend.lower), after the search's phases
    # the share of the CPUs other processes kept busy while a host backend's candidates ran (over
    # search.CONTENDED: the decision was not cached)
    contention: float = 0.0

    def format(self) -> str:
        phases = {**self.phases, "lower": self.lower}
        lines = ["search report", "  phases: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in phases.items()),
                 f"  e-graph: {self.egraph_nodes} e-nodes; rule matches: "
                 + (", ".join(f"{k}={v}" for k, v in sorted(self.rule_matches.items())) or "none"),
                 *(f"  ruleset {rs}: {sec * 1e3:.1f} ms, {its} iteration(s), {why}"
                   for rs, (sec, its, why) in self.rulesets.items()),
                 f"  profiled with dims {self.profile_dims}"
                 + ("; saturated e-graph from the cache" if self.egraph_cached else "")
                 + ("; decision from the cache (same graph, rules, seed and options)" if self.decision_cached else "")
                 + (f"; measured while other processes kept {self.contention:.0%} of the CPUs busy"
                    if self.contention > 0.05 else "")]
        for c in self.candidates:
            mark = "*" if c.index == self.winner else " "
            t = f"{c.seconds * 1e3:8.3f} ms" if c.seconds is not None else f"rejected: {c.error}"
            backend_ops = {k: v for k, v in c.ops.items() if k not in PRIMITIVES}
            lines.append(f" {mark} #{c.index:<3d} {c.origin:9s} {t}  backend ops: {backend_ops or '-'}")
        win = next((c for c in self.candidates if c.index == self.winner), None)
        if win is not None:
            lines.append("  winner's backend ops and the rules they came from:")
            for op, n in sorted(win.ops.items()):
                if op not in PRIMITIVES:
                    lines.append(f"    {op} x{n} <- {', '.join(self.produced_by.get(op, ['?']))}")
        return "\n".join(lines)

    def to_dot(self) -> str:
        """Graphviz DOT of the chosen program (``dot -Tsvg`` draws it)."""
        if self.program is None:
            raise LightspeedError("the report holds no program")
        return self.program.to_dot(self.produced_by)


class BucketedProgram(Program):
    """One searched program per dim bucket; calls dispatch on the bound dim values."""

    backend_name = "bucketed"

    def __init__(self, graph: Graph, buckets: list[tuple[dict[str, tuple[int, int]], Program]]):
        super().__init__(graph)
        self.buckets = buckets
        self.backend_name = buckets[0][1].backend_name
        share_array_hooks(self, buckets[0][1])

    def _bucket(self, dims: Mapping[str, int]) -> Program:
        for ranges, prog in self.buckets:
            if all(lo <= dims[s] <= hi for s, (lo, hi) in ranges.items()):
                return prog
        have = ", ".join(str(r) for r, _ in self.buckets)
        raise InputError(f"dims {dims} fall outside every dim bucket ({have})")

    def bind(self, inputs: Mapping[str, Any], dims: Mapping[str, int] | None = None
             ) -> tuple[dict[str, Any], dict[str, int]]:
        arrays, env = super().bind(inputs, dims)
        local = getattr(self._bucket(env), "_local", None)
        if local is not None:  # a kernel bucket's execute visits these inputs only, not ~150 weights
            local.given = (set(inputs), arrays)
        return arrays, env

    def execute(self, arrays: dict[str, Any], dims: dict[str, int], out=None) -> dict[str, Any]:
        return self._bucket(dims).execute(arrays, dims, out)

    def persist(self, inputs: Mapping[str, Any] | None = None, /, **named: Any) -> BucketedProgram:
        """Also each bucket's program with the same resident arrays (moved once), so that
        :meth:`launch` hands a call to its bucket's own (asynchronous) launch."""
        bound = super().persist(inputs, **named)
        bound.buckets = []
        for ranges, prog in self.buckets:
            inner = copy.copy(prog)
            inner._resident, inner._resident_dims = bound._resident, bound._resident_dims
            inner._fresh_state()
            bound.buckets.append((ranges, inner))
        return bound

    def launch(self, inputs: Mapping[str, Any], *, dims: Mapping[str, int] | None = None,
               fetch: Sequence[str] = ()) -> Pending:
        if any(n not in inputs and n not in self._resident for n in self.input_args):
            return super().launch(inputs, dims=dims, fetch=fetch)  # the call's error names them
        env, picks = dict(self._resident_dims, **(dims or {})), {s for r, _ in self.buckets for s in r}
        # the dims that pick the bucket, from the inputs that carry them (the bucket checks all)
        self._check({n: a for n, a in inputs.items() if n in self.input_args and any(
            d.free_vars() & picks for d in self.input_args[n].shape)}, env, partial=True)
        return self._bucket(env).launch(inputs, dims=dims, fetch=fetch)

    def weight_stacks(self) -> list[tuple[str, ...]]:
        return [stack for _, p in self.buckets for stack in p.weight_stacks()]

    def report(self) -> str:
        return "\n\n".join(f"bucket {r}:\n{p.report()}" for r, p in self.buckets)

    @property
    def preparations(self) -> int:
        return sum(p.preparations for _, p in self.buckets)

    def reserve(self, **bounds: int) -> BucketedProgram:
        super().reserve(**bounds)
        for ranges, prog in self.buckets:
            prog.reserve(**{k: min(v, ranges[k][1]) if k in ranges else v for k, v in bounds.items()})
        return self
