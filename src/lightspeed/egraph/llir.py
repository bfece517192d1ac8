"""LLIR: a candidate turned into a flat program of backend ops.

Every ``IR`` constructor (primitive or backend op) is declared once as an
:class:`~lightspeed.egraph.decl.OpDecl` with named, typed fields.  The decoder reads any
constructor through its declaration, so a backend adds ops by declaring them (and the rules that
produce them), never by changing this module; kernels read ``op.args[name]``.  Each LLIR op also
carries its e-class's shape and dtype, taken from the primitive HLIR node in the same class
(backend ops are always unioned with an existing HLIR class).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..dtypes import DType
from ..primitives import PRIMITIVES, ConstantValue, IotaArg
from ..shape import ShapeTracker
from ..symbolic import Expr
from .decl import FUSED, PRIMITIVE_OPS, OpDecl
from .extract import SCALAR_OPS, Candidate, Decoder, ExtractionError, list_items
from .runner import SerializedEGraph

__all__ = ["LOp", "LProgram", "PRIMITIVE_OPS", "FUSED", "OpDecl", "SCALAR_OPS", "ScalarTree", "decode_program",
           "liveness"]


@dataclass
class LOp:
    """One op of an LLIR program.  ``args`` holds every field of its declaration by name; an
    ``ir`` field holds the operand's position in ``inputs`` (which index earlier ops).  A fused
    region's leaves are extra inputs, read through ``leaf_views``."""

    op: str
    args: dict[str, Any]
    inputs: tuple[int, ...]
    shape: tuple[Expr, ...]
    dtype: DType
    leaf_views: tuple[ShapeTracker, ...] = ()

    def views(self) -> list[ShapeTracker]:
        """Every view field (declaration order), then the region leaves' views."""
        return [v for v in self.args.values() if isinstance(v, ShapeTracker)] + list(self.leaf_views)

    def operand_views(self) -> list[ShapeTracker]:
        """The view through which each input is read, in ``inputs`` order (primitives and regions:
        every operand has one)."""
        views = self.views()
        if len(views) != len(self.inputs):
            raise ExtractionError(f"{self.op}: {len(self.inputs)} operands but {len(views)} views")
        return views


def liveness(inputs_per_op: list[tuple[int, ...]]) -> dict[int, list[int]]:
    """Op index -> the values whose last reader it is (free them after it runs)."""
    last: dict[int, int] = {}
    for i, ins in enumerate(inputs_per_op):
        for j in ins:
            last[j] = i
    out: dict[int, list[int]] = {}
    for j, i in last.items():
        out.setdefault(i, []).append(j)
    return out


def _nbytes(o: LOp, dims: Mapping[str, int]) -> int:
    n = 1
    for d in o.shape:
        n *= int(d.evaluate(dims))
    return n * o.dtype.itemsize


REMAT_GAP = 8  # ops between two readers of a value before recomputing it for the later one pays
# element-wise primitives (no reductions, views, gathers or writes): what a recomputation repeats
_ELEMENTWISE = frozenset(n for n, p in PRIMITIVES.items() if p.category in ("unary", "binary")) | {"Cast"}
REMAT_AXIS = 4  # a reduction over this many elements or fewer is cheap to compute again
REMAT_DEPTH = 3  # values computed again together for one late reader, at most


def _cheap(o: LOp) -> bool:
    if o.op in _ELEMENTWISE:
        return True
    if o.op in ("SumReduce", "MaxReduce"):
        n = o.args["x_view"].shape[o.args["axis"]]
        return n.is_const and n.value <= REMAT_AXIS
    return o.op == FUSED.name and _elementwise_tree(o.args.get("body"))


def _elementwise_tree(node: Any) -> bool:
    if not isinstance(node, tuple) or not node:
        return False
    if node[0] in ("leaf", "const", "iota"):
        return True
    if node[0] in ("SumReduce", "MaxReduce"):
        n = node[2].shape[node[1]]
        return n.is_const and n.value <= REMAT_AXIS and _elementwise_tree(node[3])
    if node[0] == "gather":
        return False
    if node[0] == "Cast":
        return _elementwise_tree(node[2])
    return all(_elementwise_tree(c) for c in node[1:])


# A decoded region body (the fusion language of egraph/decl.py), evaluated at one flat index z of
# an index space (the region's shape at the root):
#   ("leaf", k)                      input k read through the op's k-th view at z
#   ("const", value, dtype)          a one-element constant (value: a Python scalar of dtype)
#   ("iota", expr, dtype)            expr(z) computed as int64, cast to dtype (the Iota primitive)
#   ("Cast", dtype, child)
#   ("SumReduce" | "MaxReduce", axis, RegionSpace, child)
#                                    child evaluated over the space's shape, reduced along axis;
#                                    the result has the enclosing space's element count
#   ("gather", index, k)             input k read through the op's k-th view at index(z)
#   (primitive name, child, ...)     the other element-wise ops
ScalarTree = tuple


@dataclass(frozen=True)
class RegionSpace:
    """The pre-reduction index space of a reduction node (not a tuple, so tree walkers that
    descend into tuple children skip it)."""

    shape: tuple[Expr, ...]


@dataclass
class LProgram:
    ops: list[LOp] = field(default_factory=list)
    outputs: dict[str, int] = field(default_factory=dict)  # output name -> index of its Output op
    constants: list[ConstantValue] = field(default_factory=list)
    decls: dict[str, OpDecl] = field(default_factory=dict)  # the declarations the ops were decoded by

    def count(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.ops:
            out[o.op] = out.get(o.op, 0) + 1
        return out

    def peak_bytes(self, dims: Mapping[str, int], static: frozenset[str] = frozenset()) -> int:
        """Peak bytes of intermediate values alive at once (inputs and constants excluded), with
        each value freed after its last reader: what a liveness-planned runtime needs at least.
        ``static``: the inputs held resident (a model's weights); values of static shape computed
        from them and constants alone are made once beside them (a persisted program hoists them:
        stacked weights), not counted."""
        free = liveness([o.inputs for o in self.ops])
        live = peak = 0
        size: dict[int, int] = {}
        once: set[int] = set()
        for i, o in enumerate(self.ops):
            if o.op == "Constant" or (o.op == "Input" and o.args["name"] in static) or (
                    o.op not in ("Input", "Output") and o.inputs and all(j in once for j in o.inputs)
                    and not any(d.free_vars() for d in o.shape)):
                once.add(i)
            elif o.op not in ("Input", "Constant", "Output"):
                size[i] = _nbytes(o, dims)
                live += size[i]
                peak = max(peak, live)
            for j in free.get(i, ()):
                live -= size.pop(j, 0)
        return peak

    def dequantised_bytes(self, dims: Mapping[str, int]) -> int:
        """Bytes of the float copies this program makes of block-dtype inputs (a Cast of GGML
        blocks read as float values: the loader keeps the dequantised copy), which a program
        reading the blocks themselves does not need."""
        return sum(_nbytes(o, dims) for o in self.ops if o.op == "Cast" and self.ops[o.inputs[0]].op == "Input"
                   and self.ops[o.inputs[0]].dtype.block is not None)

    def rematerialized(self, min_gap: int = REMAT_GAP) -> LProgram:
        """The same program with cheap values computed again for their late readers instead of
        kept alive in between (activation recomputation: a training step's activations, read by the
        forward pass and again by the backward pass).  A value qualifies when its op is cheap
        (element-wise, or a reduction over at most :data:`REMAT_AXIS` elements such as a
        maximum's stack), it is no output's, at least ``min_gap`` ops lie between two of its
        readers, and it can be computed again just before the later one from values alive there
        anyway (graph inputs, constants, values read there or later, or cheap values computed
        again with it, up to :data:`REMAT_DEPTH` deep).  The copies run just before that reader,
        which (and every reader after it) reads them: the same values, kept for less time."""
        last: dict[int, int] = {}
        readers: dict[int, list[int]] = {}
        for i, o in enumerate(self.ops):
            for j in o.inputs:
                last[j] = i
                readers.setdefault(j, []).append(i)
        out_of = {o.inputs[0] for o in self.ops if o.op == "Output"}

        def chain(v: int, at: int, depth: int, into: list[int]) -> bool:
            """Append to ``into`` (inputs first) what computes ``v`` again at ``at``."""
            if v in into:
                return True
            for j in self.ops[v].inputs:
                o = self.ops[j]
                if o.op in ("Input", "Constant") or last[j] >= at:
                    continue
                if depth >= REMAT_DEPTH or j in out_of or not _cheap(o) or not chain(j, at, depth + 1, into):
                    return False
            into.append(v)
            return True

        before: dict[int, list[tuple[int, list[int]]]] = {}  # reader -> (value, its chain) copied before it
        for i, o in enumerate(self.ops):
            if i in out_of or not _cheap(o) or i not in readers:
                continue
            rs = sorted(set(readers[i]))
            gaps = [(b - a, b) for a, b in zip(rs, rs[1:]) if b - a >= min_gap]
            if not gaps:
                continue
            at = max(gaps)[1]
            steps: list[int] = []
            if chain(i, at, 0, steps):
                before.setdefault(at, []).append((i, steps))
        if not before:
            return self
        ops: list[LOp] = []
        new_of: dict[int, int] = {}  # old index -> new index of the value as read from here on
        for i, o in enumerate(self.ops):
            for root, steps in before.get(i, ()):
                local: dict[int, int] = {}  # the chain's copies, read by the chain only
                for v in steps:
                    src = self.ops[v]
                    ops.append(LOp(src.op, src.args, tuple(local.get(j, new_of[j]) for j in src.inputs), src.shape,
                                   src.dtype, src.leaf_views))
                    local[v] = len(ops) - 1
                new_of[root] = local[root]  # readers from here on read the copy
            ops.append(LOp(o.op, o.args, tuple(new_of[j] for j in o.inputs), o.shape, o.dtype, o.leaf_views))
            new_of[i] = len(ops) - 1
        outputs = {name: new_of[k] for name, k in self.outputs.items()}
        return LProgram(ops, outputs, self.constants, self.decls)

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
            decl = self.decls.get(o.op) or PRIMITIVE_OPS.get(o.op)
            decl_kinds = dict(decl.fields) if decl else {}
            for name, f in o.args.items():
                if isinstance(f, ShapeTracker):
                    d = f.describe()
                    parts.append(f"[{d}]" if d else "[contig]")
                elif decl_kinds.get(name) == "ir":
                    parts.append(f"%{o.inputs[f]}")
                else:
                    parts.append(str(f))
            shape = ", ".join(map(str, o.shape))
            lines.append(f"%{i} = {o.op}({', '.join(parts)}) : {o.dtype.name}[{shape}]")
        return "\n".join(lines)


def _class_shape_dtype(dec: Decoder, cid: str) -> tuple[tuple[Expr, ...], DType]:
    """Shape and dtype of an IR e-class, from its lowest primitive node."""
    index = dec.index
    nodes = [n for n in index.classes.get(cid, ()) if n.op in PRIMITIVES]
    if not nodes:
        raise ExtractionError(f"e-class {cid} holds no primitive node to take its shape from")
    lv = index._levels
    n = min(nodes, key=lambda m: (1 + max((lv.get(c, 1 << 30) for c in m.children), default=0), m.id))
    prim = PRIMITIVES[n.op]
    sig = PRIMITIVE_OPS[n.op].kinds
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


_FIELD_READER = {"i64": "int", "str": "string", "expr": "expr", "elist": "elist", "dtype": "dtype", "view": "view"}


def _field(dec: Decoder, kind: str, cid: str) -> Any:
    return getattr(dec, _FIELD_READER[kind])(cid)  # a Decoder method per field kind


def decode_program(candidate: Candidate, ser: SerializedEGraph, constants: list[ConstantValue],
                   ops: Mapping[str, OpDecl]) -> LProgram:
    """The candidate as an LLIR program (ops in dependency order)."""
    dec = Decoder(candidate.index, ser)
    prog = LProgram(constants=list(constants), decls=dict(ops))
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
        decl = ops.get(n.op)
        if decl is None:
            raise ExtractionError(f"no declaration for constructor {n.op}: the backend cannot run it")
        args: dict[str, Any] = {}
        inputs: list[int] = []
        leaf_views: list[ShapeTracker] = []
        for (name, kind), c in zip(decl.fields, n.children):
            if kind == "ir":
                inputs.append(build(c))
                args[name] = len(inputs) - 1
            elif kind == "scalar":
                args[name] = scalar(c, inputs, leaf_views, {})
            else:
                args[name] = _field(dec, kind, c)
        shape, dtype = shape_dtype(cid)
        prog.ops.append(LOp(n.op, args, tuple(inputs), tuple(shape), dtype, tuple(leaf_views)))
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
        if n.op == "SGather":  # data read through its view at the index the body computes
            index = scalar(n.children[0], inputs, views, leaves)
            key = f"gather:{n.children[1]}:{n.children[2]}"
            if key not in leaves:
                inputs.append(build(n.children[1]))
                views.append(dec.view(n.children[2]))
                leaves[key] = len(inputs) - 1
            return ("gather", index, leaves[key])
        if n.op == "SCast":
            return ("Cast", dec.dtype(n.children[0]), scalar(n.children[1], inputs, views, leaves))
        if n.op == "SConst":  # the value is embedded: constants live on the Python side
            c = prog.constants[_field(dec, "i64", n.children[0])]
            return ("const", c.value.reshape(-1)[0].item(), c.dtype)
        if n.op == "SIota":
            return ("iota", dec.expr(n.children[0]), dec.dtype(n.children[1]))
        if n.op in ("SSumReduce", "SMaxReduce"):
            axis, space, body = n.children
            return (SCALAR_OPS[n.op], _field(dec, "i64", axis), RegionSpace(dec.elist(space)),
                    scalar(body, inputs, views, leaves))
        return (SCALAR_OPS[n.op], *(scalar(c, inputs, views, leaves) for c in n.children))

    for cid in list_items(candidate.index, candidate.index.root.children[0]):
        i = build(cid)
        prog.outputs[prog.ops[i].args["name"]] = i
    return prog


def iota_arg(op: LOp) -> IotaArg:
    return IotaArg(op.args["expr"], op.args["shape"], op.args["dtype"])

