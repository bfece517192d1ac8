"""An ATen-level FX graph -> lightspeed programs, and the callable that runs them on torch tensors.

Translation walks the FX graph once, in order.  Each ``call_function`` node is looked up in
:data:`~lightspeed.torch.aten.ATEN_TABLE` and translated into the current lightspeed
:class:`~lightspeed.Graph` (a *segment*).  Placeholders (user inputs, parameters, buffers, SymInt
sizes) become graph inputs, read from the call's arguments without copies.  Symbolic sizes become
lightspeed symbols of the same names, so one program serves every size dynamo's guards admit.

Unsupported ops raise :class:`UnsupportedError` naming the ATen op and the user's source line.  With
``fallback="eager"`` such a node runs in eager PyTorch instead: the current segment ends before it
(its values that later nodes read become segment outputs) and a new segment starts after it, so the
compiled graph alternates lightspeed programs and eager ops.
"""

from __future__ import annotations

import operator
import re
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.fx as fx

from ..errors import LightspeedError, UnsupportedError
from ..graph import Graph, GraphTensor
from ..hl.common import cast
from ..program import Program, to_numpy
from ..search import SearchOptions
from ..symbolic import Expr
from .aten import ATEN_TABLE, Ctx, unsupported_reason
from .convert import ls_dtype, shape_of, sym_expr, to_torch

__all__ = ["Options", "CompiledGraph", "compile_fx", "stats", "reset_stats", "FallbackWarning"]

_VALID_TARGETS = ("cpu", "native", "cuda", "reference")


class FallbackWarning(UserWarning):
    """Some ops of a compiled graph run in eager PyTorch (``options={"fallback": "eager"}``)."""


@dataclass
class Options:
    """What ``torch.compile(..., backend="lightspeed", options={...})`` accepts.

    ``target``: the lightspeed backend (``cpu``, ``native``, ``cuda``, ``reference``; default: by the inputs'
    device); ``budget`` and ``seed``: the e-graph search's (:class:`lightspeed.SearchOptions`);
    ``fallback``: ``"eager"`` runs unsupported ops in eager PyTorch instead of raising."""

    target: str | None = None
    budget: int = 8
    seed: int = 0
    fallback: str | None = None

    @classmethod
    def parse(cls, options: dict[str, Any] | None) -> Options:
        opts = dict(options or {})
        known = {f.name for f in cls.__dataclass_fields__.values()}
        unknown = sorted(set(opts) - known)
        if unknown:
            raise LightspeedError(f"lightspeed backend: unknown option(s) {unknown}; valid options: {sorted(known)}")
        o = cls(**opts)
        if o.target is not None and o.target not in _VALID_TARGETS:
            raise LightspeedError(f"lightspeed backend: target must be one of {_VALID_TARGETS}, got {o.target!r}")
        if o.fallback not in (None, "error", "eager"):
            raise LightspeedError(f"lightspeed backend: fallback must be 'eager' or 'error', got {o.fallback!r}")
        if isinstance(o.budget, bool) or not isinstance(o.budget, int) or o.budget < 1:
            raise LightspeedError(f"lightspeed backend: budget must be a positive int, got {o.budget!r}")
        return o


# ---------------------------------------------------------------------- statistics
_STATS: dict[str, Any] = {"compilations": 0, "graphs": []}
_WARNED: set[tuple[str, ...]] = set()


def stats() -> dict[str, Any]:
    """Counters since the last :func:`reset_stats`: ``compilations`` (FX graphs compiled by lightspeed)
    and ``graphs`` (one summary per compilation: nodes, segments, eager ops, symbols, target, seconds)."""
    return {"compilations": _STATS["compilations"], "graphs": [dict(g) for g in _STATS["graphs"]]}


def reset_stats() -> None:
    _STATS["compilations"] = 0
    _STATS["graphs"] = []
    _WARNED.clear()


# ---------------------------------------------------------------------- error locations
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def node_location(node: fx.Node) -> str:
    """``file.py:12 in forward: `code``` for the user's line that produced ``node`` (the innermost
    frame dynamo recorded), or the FX node's name."""
    trace = node.meta.get("stack_trace") or ""
    frames = _FRAME.findall(trace)
    if frames:
        path, line, fn, code = frames[-1]
        return f"{path}:{line} in {fn}: `{code.strip()}`"
    return f"FX node {node.name!r}"


def _op_name(target: Any) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)


# ---------------------------------------------------------------------- values during translation
@dataclass(frozen=True)
class Ext:
    """A tensor that exists outside the lightspeed graphs at run time: ``("arg", i)`` a call
    argument, ``("bound", tensor)`` a parameter or buffer read at every call, ``("const", tensor)``
    a constant of the FX graph (small ones are copied into the lightspeed graph), ``("slot", key)``
    an eager result, ``("item", key, i)`` element i of an eager tuple result."""

    source: tuple
    meta: Any


@dataclass
class Segment:
    graph: Graph = field(default_factory=Graph)
    sources: dict[str, tuple] = field(default_factory=dict)  # lightspeed input name -> runtime source
    outputs: dict[str, str] = field(default_factory=dict)  # lightspeed output name -> slot key
    imported: dict[str, GraphTensor] = field(default_factory=dict)
    program: Program | None = None


@dataclass
class EagerStep:
    node: fx.Node
    target: Callable
    args: Any
    kwargs: Any


@dataclass(frozen=True)
class SlotRef:
    source: tuple


@dataclass(frozen=True)
class ExprRef:
    expr: Expr


_SMALL_CONSTANT = 64  # get_attr tensors up to this many elements are copied into the graph


class _Translator:
    def __init__(self, gm: fx.GraphModule, options: Options, bound: dict[int, torch.Tensor] | None,
                 mutated: dict[int, int] | None = None):
        self.gm = gm
        self.options = options
        self.bound = bound or {}
        self.mutated = mutated or {}  # output position -> the placeholder it is the new value of
        self.written: dict[str, int] = {}  # slot key -> argument written in place
        self.vals: dict[fx.Node, Any] = {}
        self.segments: list[Segment] = [Segment()]
        self.steps: list[Segment | EagerStep] = [self.segments[0]]
        self.home: dict[int, Segment] = {id(self.segments[0].graph): self.segments[0]}
        self.eager_ops: list[str] = []
        self.placeholders: list[fx.Node] = []
        self.used_items: dict[fx.Node, set[int]] = {}
        for n in gm.graph.nodes:
            # an output counts as read when a getitem of it has users (a dead getitem reads nothing)
            if n.op == "call_function" and n.target is operator.getitem and isinstance(n.args[0], fx.Node) \
                    and n.users:
                self.used_items.setdefault(n.args[0], set()).add(n.args[1])

    @property
    def seg(self) -> Segment:
        return self.segments[-1]

    # -------------------------------------------------------------- moving values between segments
    def _ensure_output(self, t: GraphTensor, key: str) -> tuple:
        """``t`` as a runtime slot: an output of its home segment."""
        seg = self.home[id(t.graph)]
        if key not in seg.outputs:
            seg.graph.output(key, t)
            seg.outputs[key] = key
        return ("slot", key)

    def _declare(self, seg: Segment, key: str, source: tuple, meta: Any) -> GraphTensor:
        t = seg.imported.get(key)
        if t is None:
            if source[0] == "const" and source[1].numel() <= _SMALL_CONSTANT:
                t = seg.graph.constant(to_numpy(source[1], key).copy(), ls_dtype(source[1].dtype))
            else:
                if not isinstance(meta, torch.Tensor):
                    raise LightspeedError(f"internal: no tensor metadata for {key!r}")
                t = seg.graph.input(key, shape_of(meta), ls_dtype(meta.dtype))
                seg.sources[key] = source
            seg.imported[key] = t
        return t

    def value_in(self, node: fx.Node, seg: Segment) -> Any:
        v = self.vals[node]
        if isinstance(v, GraphTensor):
            if v.graph is seg.graph:
                return v
            return self._declare(seg, node.name, self._ensure_output(v, node.name), node.meta.get("val"))
        if isinstance(v, Ext):
            return self._declare(seg, node.name, v.source, v.meta)
        return v

    def runtime_ref(self, node: fx.Node) -> Any:
        v = self.vals[node]
        if isinstance(v, GraphTensor):
            return SlotRef(self._ensure_output(v, node.name))
        if isinstance(v, Ext):
            return SlotRef(v.source)
        if isinstance(v, Expr):
            return ExprRef(v)
        if isinstance(v, (tuple, list)):
            out = []
            for i, x in enumerate(v):
                if isinstance(x, GraphTensor):
                    out.append(SlotRef(self._ensure_output(x, f"{node.name}_{i}")))
                else:
                    out.append(ExprRef(x) if isinstance(x, Expr) else x)
            return type(v)(out)
        return v

    # -------------------------------------------------------------- nodes
    def run(self) -> None:
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self._placeholder(node)
            elif node.op == "get_attr":
                t = getattr(self.gm, node.target)
                self.vals[node] = Ext(("const", t), t) if isinstance(t, torch.Tensor) else t
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                for k, j in self.mutated.items():
                    self._write_in_place(node.args[0][k], j)
                self.outputs = fx.node.map_arg(node.args[0], self.runtime_ref)
            else:
                raise UnsupportedError(f"FX node kind {node.op!r} ({node.name}) at {node_location(node)}")

    def _write_in_place(self, node: Any, j: int) -> None:
        """Output ``node`` is the new value of argument ``j``: if it was computed in a segment that
        reads that argument (e.g. a cache with rows written into it), declare it as an output
        aliasing that input, so the segment writes into the caller's tensor."""
        v = self.vals.get(node) if isinstance(node, fx.Node) else None
        ph = self.placeholders[j] if j < len(self.placeholders) else None
        if not isinstance(v, GraphTensor) or ph is None:
            return
        seg = self.home[id(v.graph)]
        meta = ph.meta.get("val")
        if (seg.sources.get(ph.name) != ("arg", j) or not isinstance(meta, torch.Tensor)
                or not meta.is_contiguous() or node.name in seg.outputs):
            return
        arg = seg.graph.nodes[seg.graph.inputs[ph.name]].arg
        if tuple(v.shape) != tuple(arg.shape) or v.dtype != arg.dtype:
            return
        seg.graph.output(node.name, v, aliases=ph.name)
        seg.outputs[node.name] = node.name
        self.written[node.name] = j

    def _placeholder(self, node: fx.Node) -> None:
        i = len(self.placeholders)
        self.placeholders.append(node)
        meta = node.meta.get("val")
        if i in self.bound:
            self.vals[node] = Ext(("bound", self.bound[i]), meta if meta is not None else self.bound[i])
        elif isinstance(meta, torch.Tensor):
            self.vals[node] = Ext(("arg", i), meta)
        elif isinstance(meta, (torch.SymInt, int)) and not isinstance(meta, bool):
            self.vals[node] = sym_expr(meta)
        elif meta is None:
            raise UnsupportedError(f"placeholder {node.name!r} has no recorded value (meta['val'])")
        else:
            self.vals[node] = meta

    def _call(self, node: fx.Node) -> None:
        target = node.target
        if target is operator.getitem:
            self._getitem(node)
            return
        meta = node.meta.get("val")
        if not isinstance(target, torch._ops.OpOverload):
            # Python arithmetic on sizes (operator.mul, sym_max, ...): the value PyTorch recorded
            if isinstance(meta, (torch.SymInt, int)) and not isinstance(meta, bool):
                self.vals[node] = sym_expr(meta)
                return
            if isinstance(meta, (torch.SymBool, torch.SymFloat, bool, float)) or meta is None:
                if all(u.op == "call_function" and "assert" in _op_name(u.target) for u in node.users):
                    self.vals[node] = None  # only feeds runtime assertions, which guards already cover
                    return
            self._unsupported(node, f"Python-level {_op_name(target)} on {type(meta).__name__}")
            return
        name = str(target)
        fn = ATEN_TABLE.get(name)
        if fn is None:
            why = unsupported_reason(name)
            self._unsupported(node, why or "no translation for this ATen op")
            return
        seg = self.seg
        try:
            args = fx.node.map_arg(node.args, lambda n: self.value_in(n, seg))
            kwargs = fx.node.map_arg(node.kwargs, lambda n: self.value_in(n, seg))
            used = frozenset(self.used_items.get(node, ()))
            out = fn(Ctx(seg.graph, meta, used, name), *args, **kwargs)
            out = _conform(out, meta, name)
        except Exception as e:  # any failure is reported with the op and the line (or falls back to eager)
            self._unsupported(node, f"{type(e).__name__}: {e}", e)
            return
        self.vals[node] = out

    def _getitem(self, node: fx.Node) -> None:
        src, i = node.args
        v = self.vals[src]
        if isinstance(v, Ext):
            meta = node.meta.get("val")
            self.vals[node] = Ext(("item", v.source[1], i), meta)
            return
        try:
            item = v[i]
        except (TypeError, IndexError, KeyError):
            raise LightspeedError(f"internal: cannot index {type(v).__name__} of {src.name} with {i!r}") from None
        if item is None and node.users:  # a dead getitem of an uncomputed output reads nothing
            raise LightspeedError(f"internal: output {i} of {src.name} was not computed")
        self.vals[node] = item

    def _unsupported(self, node: fx.Node, why: str, cause: Exception | None = None) -> None:
        name = _op_name(node.target)
        if self.options.fallback != "eager":
            raise UnsupportedError(
                f"lightspeed cannot compile {name} ({why}) at {node_location(node)}. Pass "
                "options={'fallback': 'eager'} to torch.compile to run unsupported ops in eager PyTorch") from cause
        self.eager_ops.append(name)
        args = fx.node.map_arg(node.args, self.runtime_ref)
        kwargs = fx.node.map_arg(node.kwargs, self.runtime_ref)
        self.steps.append(EagerStep(node, node.target, args, kwargs))
        meta = node.meta.get("val")
        self.vals[node] = Ext(("slot", node.name), meta)
        seg = Segment()
        self.segments.append(seg)
        self.steps.append(seg)
        self.home[id(seg.graph)] = seg


def _conform(out: Any, meta: Any, name: str) -> Any:
    """Cast results to the dtype PyTorch recorded; a constant size that differs is a translation bug."""
    if isinstance(out, GraphTensor):
        if not isinstance(meta, torch.Tensor):
            return out
        want = ls_dtype(meta.dtype)
        if out.dtype != want:
            out = cast(out, want)
        if out.ndim != meta.dim():
            raise LightspeedError(f"internal: {name} gave rank {out.ndim} {tuple(out.shape)}, PyTorch expects "
                                  f"{tuple(meta.shape)}")
        for a, b in zip(out.shape, meta.shape):
            if a.is_const and isinstance(b, int) and a.value != b:
                raise LightspeedError(f"internal: {name} gave shape {tuple(out.shape)}, PyTorch expects "
                                      f"{tuple(meta.shape)}")
        return out
    if isinstance(out, (tuple, list)) and isinstance(meta, (tuple, list)) and len(out) == len(meta):
        return type(out)(_conform(o, m, name) for o, m in zip(out, meta))
    return out


# ---------------------------------------------------------------------- the compiled callable
class CompiledGraph:
    """Runs a translated FX graph: called with the FX graph's placeholders' values (torch tensors
    and ints), returns the graph's outputs as torch tensors (and ints)."""

    def __init__(self, tr: _Translator, binders: list[tuple[int, int | None, str]]):
        self.steps = [s for s in tr.steps if not isinstance(s, Segment) or s.outputs]
        self.outputs = tr.outputs
        self.binders = binders
        self.segments = [s for s in self.steps if isinstance(s, Segment)]
        self.eager_ops = list(tr.eager_ops)
        self.written = dict(tr.written)  # slot key -> argument the segment wrote in place

    def _dims(self, args: Sequence[Any]) -> dict[str, int]:
        dims: dict[str, int] = {}
        for i, axis, name in self.binders:
            v = args[i] if axis is None else args[i].shape[axis]
            dims[name] = int(v)
        return dims

    def __call__(self, *args: Any) -> Any:
        dims = self._dims(args)
        slots: dict[str, Any] = {}

        def resolve(src: tuple) -> Any:
            kind = src[0]
            if kind == "arg":
                return args[src[1]]
            if kind in ("const", "bound"):
                return src[1]
            if kind == "slot":
                return slots[src[1]]
            return slots[src[1]][src[2]]

        def as_torch(v: Any) -> Any:
            return to_torch(v) if isinstance(v, np.ndarray) else v

        def materialise(x: Any) -> Any:
            if isinstance(x, SlotRef):
                return as_torch(resolve(x.source))
            if isinstance(x, ExprRef):
                return int(x.expr.evaluate(dims))
            if isinstance(x, (list, tuple)):
                return type(x)(materialise(y) for y in x)
            if isinstance(x, dict):
                return {k: materialise(y) for k, y in x.items()}
            return x

        for step in self.steps:
            if isinstance(step, Segment):
                # tensors go to the program as they are: a host backend views CPU tensors as numpy,
                # the cuda backend uses CUDA tensors where they lie; results come back as tensors
                inputs = {name: resolve(src) for name, src in step.sources.items()}
                # the graph's dims that this segment's program has (programs reject dims they lack)
                out = step.program(inputs, dims={k: v for k, v in dims.items() if k in step.program.symbols})
                arrays = list(inputs.values())
                for name, key in step.outputs.items():
                    a = out[name]
                    if key in self.written:  # the argument itself, updated in place
                        slots[key] = args[self.written[key]]
                        continue
                    if any(_shares_memory(a, b) for b in arrays):
                        a = a.clone() if isinstance(a, torch.Tensor) else a.copy()  # fresh, as in eager
                    slots[key] = a
            else:
                slots[step.node.name] = step.target(*materialise(step.args), **materialise(step.kwargs))
        return materialise(self.outputs)


def _shares_memory(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a.device == b.device and a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.may_share_memory(a, b)
    return False


def _binders(tr: _Translator) -> list[tuple[int, int | None, str]]:
    """Where each symbol's value comes from at run time: a SymInt argument or an input's axis."""
    out: list[tuple[int, int | None, str]] = []
    seen: set[str] = set()
    for i, node in enumerate(tr.placeholders):
        v = tr.vals[node]
        if isinstance(v, Expr) and v.kind == "var" and v.name not in seen:
            out.append((i, None, v.name))
            seen.add(v.name)
    for i, node in enumerate(tr.placeholders):
        v = tr.vals[node]
        if isinstance(v, Ext) and v.source[0] == "arg":
            for ax, d in enumerate(shape_of(v.meta)):
                if d.kind == "var" and d.name not in seen:
                    out.append((i, ax, d.name))
                    seen.add(d.name)
    return out


def _hint_dims(example_inputs: Sequence[Any]) -> dict[str, int]:
    """Representative sizes for the search: the hints of the example inputs' symbolic sizes."""
    dims: dict[str, int] = {}

    def note(s: Any) -> None:
        if isinstance(s, torch.SymInt):
            e = s.node.expr
            hint = s.node.hint
            if getattr(e, "is_Symbol", False) and hint is not None:
                dims[str(e)] = int(hint)

    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            for s in x.shape:
                note(s)
        else:
            note(x)
    return dims


def default_target(example_inputs: Sequence[Any]) -> str:
    """``cuda`` when an input lives on a GPU, else ``native`` (generated C kernels) when a C
    compiler is usable, else ``cpu``."""
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.device.type == "cuda":
            return "cuda"
    from ..backends import get_backend

    return "native" if get_backend("native").available() else "cpu"


def compile_fx(gm: fx.GraphModule, example_inputs: Sequence[Any], options: Options | None = None,
               bound: dict[int, torch.Tensor] | None = None, mutated: dict[int, int] | None = None) -> CompiledGraph:
    """Translate and compile an ATen-level FX graph (nodes carry ``meta['val']``).

    ``bound`` maps placeholder positions to tensors the program reads directly (parameters and
    buffers of an exported program); the rest are the call's arguments.  ``mutated`` maps output
    positions to the placeholder whose new value they are (AOTAutograd copies them back after the
    call): such an output is written into that argument in place (an in-place KV cache update
    writes its new rows only) and returned as the argument itself, so the copy back is a no-op."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily():  # AOTAutograd calls compilers under fake mode; constants are real
        return _compile_fx(gm, example_inputs, options or Options(), bound, mutated or {})


def _compile_fx(gm: fx.GraphModule, example_inputs: Sequence[Any], options: Options,
                bound: dict[int, torch.Tensor] | None, mutated: dict[int, int]) -> CompiledGraph:
    t0 = time.perf_counter()
    tr = _Translator(gm, options, bound, mutated)
    tr.run()
    target = options.target or default_target(example_inputs)
    hints = _hint_dims(example_inputs)
    compiled = CompiledGraph(tr, _binders(tr))
    for seg in compiled.segments:
        search = SearchOptions(budget=options.budget, seed=options.seed, dims=hints or None, progress=False)
        seg.program = seg.graph.compile(backend=target, search=search)
    if compiled.eager_ops:
        key = tuple(sorted(set(compiled.eager_ops)))
        if key not in _WARNED:
            _WARNED.add(key)
            warnings.warn(f"lightspeed: {len(compiled.eager_ops)} op(s) run in eager PyTorch (fallback='eager'): "
                          f"{', '.join(key)}", FallbackWarning, stacklevel=2)
    _STATS["compilations"] += 1
    _STATS["graphs"].append({
        "nodes": sum(1 for n in gm.graph.nodes if n.op == "call_function"),
        "segments": len(compiled.segments), "eager_ops": list(compiled.eager_ops),
        "symbols": sorted({name for _, _, name in compiled.binders}), "target": target,
        "seconds": round(time.perf_counter() - t0, 3),
    })
    return compiled
