"""LLIR: a candidate turned into a flat program of backend ops.

Every ``IR`` constructor (primitive or backend op) has a *signature*: the kinds of its fields
(``i64``, ``str``, ``expr``, ``elist``, ``dtype``, ``view``, ``ir``).  The decoder reads any
constructor by its signature, so a backend adds ops by declaring signatures (and the rules that
produce them), never by changing this module.  Each LLIR op also carries its e-class's shape and
dtype, taken from the primitive HLIR node in the same class (backend ops are always unioned with
an existing HLIR class).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..dtypes import DType
from ..primitives import PRIMITIVES, ConstantValue, InputArg, IotaArg
from ..shape import ShapeTracker
from ..symbolic import Expr
from .extract import SCALAR_OPS, Candidate, ExtractionError, _Decoder, _list_items
from .runner import SerializedEGraph

__all__ = ["LOp", "LProgram", "PRIMITIVE_SIGNATURES", "SCALAR_OPS", "FUSED_SIGNATURE", "ScalarTree", "decode_program"]



def _prim_signature(name: str) -> tuple[str, ...]:
    p = PRIMITIVES[name]
    if name == "Input":
        return ("str", "elist", "dtype")
    if name == "Constant":
        return ("i64", "elist", "dtype")
    if name == "Output":
        return ("str", "ir", "view")
    if name == "Iota":
        return ("expr", "elist", "dtype")
    if name == "Cast":
        return ("dtype", "ir", "view")
    if p.category == "reduce":
        return ("i64", "ir", "view")
    return ("ir", "view") * p.arity


PRIMITIVE_SIGNATURES: dict[str, tuple[str, ...]] = {n: _prim_signature(n) for n in PRIMITIVES}
# `Fused` (rules/fusion.egg): an element-wise region, its shape and its body (a ``ScalarTree``).
# Backends that implement regions add this row to their signatures.
FUSED_SIGNATURE: tuple[str, ...] = ("elist", "scalar")


@dataclass
class LOp:
    """One op of an LLIR program.  ``inputs`` index earlier ops; ``fields`` holds every decoded
    field in signature order (for ``ir`` fields, the input's position in ``inputs``)."""

    op: str
    fields: tuple[Any, ...]
    inputs: tuple[int, ...]
    shape: tuple[Expr, ...]
    dtype: DType

    def views(self) -> list[ShapeTracker]:
        """The view through which each input is read, in ``inputs`` order."""
        return [f for f in self.fields if isinstance(f, ShapeTracker)]


# A decoded region body: ("leaf", k) reads input k (through the op's k-th view) at the output
# index; ("Cast", dtype, child); (primitive name, child, ...) for the other element-wise ops.
ScalarTree = tuple


@dataclass
class LProgram:
    ops: list[LOp] = field(default_factory=list)
    outputs: dict[str, int] = field(default_factory=dict)  # output name -> index of its Output op
    constants: list[ConstantValue] = field(default_factory=list)

    def count(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.ops:
            out[o.op] = out.get(o.op, 0) + 1
        return out

    def peak_bytes(self, dims: Mapping[str, int]) -> int:
        """Peak bytes of intermediate values alive at once (inputs and constants excluded), with
        each value freed after its last reader: what a liveness-planned runtime needs at least."""
        last: dict[int, int] = {}
        for i, o in enumerate(self.ops):
            for j in o.inputs:
                last[j] = i
        live = peak = 0
        size: dict[int, int] = {}
        for i, o in enumerate(self.ops):
            if o.op not in ("Input", "Constant", "Output"):
                n = 1
                for d in o.shape:
                    n *= int(d.evaluate(dims))
                size[i] = n * o.dtype.itemsize
                live += size[i]
                peak = max(peak, live)
            for j in set(o.inputs):
                if last[j] == i:
                    live -= size.pop(j, 0)
        return peak

    def to_dot(self, produced_by: Mapping[str, list[str]] | None = None) -> str:
        """Graphviz DOT: one box per op (backend ops filled, labelled with the rules they came from)."""
        out = ["digraph llir {", "  rankdir=TB;", '  node [shape=box, fontname="monospace"];']
        for i, o in enumerate(self.ops):
            shape = ", ".join(map(str, o.shape))
            label = f"%{i} {o.op}\\n{o.dtype.name}[{shape}]"
            style = ""
            if o.op not in PRIMITIVES:
                rules = ", ".join((produced_by or {}).get(o.op, []))
                label += f"\\nrule: {rules}" if rules else ""
                style = ', style=filled, fillcolor="#ffe0b0"'
            elif o.op in ("Input", "Output", "Constant"):
                style = ', style=filled, fillcolor="#dde8ff"'
            out.append(f'  n{i} [label="{label}"{style}];')
            for j in o.inputs:
                out.append(f"  n{j} -> n{i};")
        out.append("}")
        return "\n".join(out)

    def __str__(self) -> str:
        lines = []
        for i, o in enumerate(self.ops):
            parts = []
            for f in o.fields:
                if isinstance(f, ShapeTracker):
                    d = f.describe()
                    parts.append(f"[{d}]" if d else "[contig]")
                elif isinstance(f, _InputRef):
                    parts.append(f"%{o.inputs[f.position]}")
                else:
                    parts.append(str(f))
            shape = ", ".join(map(str, o.shape))
            lines.append(f"%{i} = {o.op}({', '.join(parts)}) : {o.dtype.name}[{shape}]")
        return "\n".join(lines)


@dataclass(frozen=True)
class _InputRef:
    position: int


def _class_shape_dtype(dec: _Decoder, cid: str) -> tuple[tuple[Expr, ...], DType]:
    """Shape and dtype of an IR e-class, from its lowest primitive node."""
    index = dec.index
    nodes = [n for n in index.classes.get(cid, ()) if n.op in PRIMITIVES]
    if not nodes:
        raise ExtractionError(f"e-class {cid} holds no primitive node to take its shape from")
    lv = index._levels
    n = min(nodes, key=lambda m: (1 + max((lv.get(c, 1 << 30) for c in m.children), default=0), m.id))
    prim = PRIMITIVES[n.op]
    sig = PRIMITIVE_SIGNATURES[n.op]
    vals = [None if kind == "ir" else _field(dec, kind, c) for kind, c in zip(sig, n.children)]
    if n.op in ("Input", "Constant", "Iota"):
        return vals[1], vals[2]
    views = [v for v in vals if isinstance(v, ShapeTracker)]
    arg = vals[0] if sig[0] in ("i64", "dtype") else None
    shape = prim.shape_rule(tuple(v.shape for v in views), arg)
    dcid = index.dtype_of.get(cid)
    if dcid is None:
        raise ExtractionError(f"e-class {cid} has no dtype (every IR class gets one from the encoder or its rule)")
    return shape, dec.dtype(dcid)


def _field(dec: _Decoder, kind: str, cid: str) -> Any:
    if kind == "i64":
        return dec.int(cid)
    if kind == "str":
        return dec.string(cid)
    if kind == "expr":
        return dec.expr(cid)
    if kind == "elist":
        return dec.elist(cid)
    if kind == "dtype":
        return dec.dtype(cid)
    if kind == "view":
        return dec.view(cid)
    raise AssertionError(kind)


def decode_program(candidate: Candidate, ser: SerializedEGraph, constants: list[ConstantValue],
                   signatures: Mapping[str, tuple[str, ...]]) -> LProgram:
    """The candidate as an LLIR program (ops in dependency order)."""
    dec = _Decoder(candidate.index, ser)
    prog = LProgram(constants=list(constants))
    done: dict[str, int] = {}
    shape_cache: dict[str, tuple] = {}

    def shape_dtype(cid: str):
        if cid not in shape_cache:
            shape_cache[cid] = _class_shape_dtype(dec, cid)
        return shape_cache[cid]

    def build(cid: str) -> int:
        if cid in done:
            return done[cid]
        n = candidate.choice[cid]
        sig = signatures.get(n.op)
        if sig is None:
            raise ExtractionError(f"no signature for constructor {n.op}: the backend cannot run it")
        fields: list[Any] = []
        inputs: list[int] = []
        leaf_views: list[ShapeTracker] = []
        for kind, c in zip(sig, n.children):
            if kind == "ir":
                inputs.append(build(c))
                fields.append(_InputRef(len(inputs) - 1))
            elif kind == "scalar":
                fields.append(scalar(c, inputs, leaf_views, {}))
            else:
                fields.append(_field(dec, kind, c))
        fields.extend(leaf_views)  # a region's leaf views, in input order (LOp.views())
        shape, dtype = shape_dtype(cid)
        prog.ops.append(LOp(n.op, tuple(fields), tuple(inputs), tuple(shape), dtype))
        done[cid] = len(prog.ops) - 1
        return done[cid]

    def scalar(cid: str, inputs: list[int], views: list[ShapeTracker], leaves: dict[str, int]) -> ScalarTree:
        n = candidate.choice.get(cid)
        if n is None or n.op not in SCALAR_OPS:
            raise ExtractionError(f"scalar e-class {cid} has no chosen scalar node")
        if n.op == "SLeaf":
            if cid not in leaves:  # one input per distinct (producer, view)
                inputs.append(build(n.children[0]))
                views.append(dec.view(n.children[1]))
                leaves[cid] = len(inputs) - 1
            return ("leaf", leaves[cid])
        if n.op == "SInline":  # the producer's body, computed in this region
            return scalar(n.children[0], inputs, views, leaves)
        if n.op == "SCast":
            return ("Cast", dec.dtype(n.children[0]), scalar(n.children[1], inputs, views, leaves))
        return (SCALAR_OPS[n.op], *(scalar(c, inputs, views, leaves) for c in n.children))

    for cid in _list_items(candidate.index, candidate.index.root.children[0]):
        i = build(cid)
        prog.outputs[prog.ops[i].fields[0]] = i
    return prog


def iota_arg(op: LOp) -> IotaArg:
    return IotaArg(op.fields[0], op.fields[1], op.fields[2])


def input_arg(op: LOp) -> InputArg:
    return InputArg(op.fields[0], op.fields[1], op.fields[2])
