"""HLIR -> egglog program text.

Sorts (declared in ``schema.egg``):

* ``Expr``: symbolic integers: ``(MNum i64)``, ``(MVar String)``, ``(MIter)`` (the index variable
  ``z``), and binary ``MAdd MMul MDiv MMod MMin MMax MLt``; ``EList`` is a cons list of them.
* ``DType``: one nullary constructor per dtype (``(F32)``, ``(BF16)``, ...).
* ``View``: how an op reads an input: ``(Contig shape)`` (row-major, offset 0, unmasked),
  ``(Strided shape strides offset)``, ``(Masked shape strides
  offset lo hi)``, and ``(Stacked outer inner)`` for a stacked tracker.
* ``IR``: one constructor per primitive, named after its row in :mod:`lightspeed.primitives`; its
  fields are the op's argument (axis, dtype, expression) followed by ``input, view`` pairs.
  Backend ops (later) are more ``IR`` constructors added by backend rule files.

Every node becomes one global (``(let $nK ...)``), so the program is linear in the graph size and
shares sub-terms; ``$root`` joins the outputs in an ``IList``.  Constant values stay in Python:
the program refers to them by index.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..dtypes import ALL_DTYPES, BLOCK_DTYPES, DType
from ..errors import UnsupportedError
from ..graph import Graph
from ..primitives import PRIMITIVES, ConstantValue, IotaArg
from ..shape import ShapeTracker, View, contiguous_strides
from ..symbolic import INDEX_VAR, Expr, prod, sym
from .decl import GENERIC_OPS, PRIMITIVE_OPS, constructors_text

__all__ = [
    "EncodedGraph", "encode_graph", "SCHEMA", "GENERIC_RULES", "DTYPE_CTOR", "CTOR_DTYPE", "expr_to_egg", "view_to_egg",
]

RULES_DIR = Path(__file__).parent / "rules"
SCHEMA = (RULES_DIR / "schema.egg").read_text() + constructors_text([*PRIMITIVE_OPS.values(), *GENERIC_OPS])
# backend-independent rulesets, run before a backend's own (file, ruleset) in schedule order
GENERIC_RULES = [(RULES_DIR / "simplify.egg", "simplify"), (RULES_DIR / "cleanup.egg", "cleanup"),
                 (RULES_DIR / "inplace.egg", "inplace"),
                 (RULES_DIR / "layout.egg", "layout"), (RULES_DIR / "linalg.egg", "linalg"),
                 (RULES_DIR / "fusion.egg", "fusion")]

DTYPE_CTOR: dict[DType, str] = {
    d: {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "float8_e4m3": "F8E4M3",
        "float8_e5m2": "F8E5M2", "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
        "bool": "Bool"}.get(d.name, d.name.upper()) for d in (*ALL_DTYPES, *BLOCK_DTYPES)}
CTOR_DTYPE: dict[str, DType] = {v: k for k, v in DTYPE_CTOR.items()}

_BINOP = {"add": "MAdd", "mul": "MMul", "floordiv": "MDiv", "mod": "MMod", "min": "MMin", "max": "MMax",
          "lt": "MLt"}


def egg_string(s: str) -> str:
    """`s` as an egglog string literal that reads back (from the serialised e-graph, via JSON) as `s`.

    egglog 13.2's parser knows the escapes \\" \\\\ \\n \\t (no \\u); its serialiser writes strings with
    Rust's Debug escaping, which JSON reads back except for \\u{...}, used for control characters,
    non-printable and combining characters. Those cannot round-trip, so a name holding one is refused
    here with its position, instead of being silently renamed or breaking the e-graph text."""
    for i, c in enumerate(s):
        if c in "\n\t":
            continue
        if not c.isprintable() or unicodedata.category(c).startswith("M"):
            raise UnsupportedError(f"name {s!r}: character {i} (U+{ord(c):04X}) cannot be written to the e-graph; "
                                   f"use printable characters in input, output and dim names")
    body = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{body}"'


def expr_to_egg(e: Expr, cache: dict[Expr, str] | None = None) -> str:
    """An Expr as an egglog term (n-ary sums/products folded left into binary constructors)."""
    if cache is not None and e in cache:
        return cache[e]
    k = e.kind
    if k == "const":
        s = f"(MNum {e.value})"
    elif k == "var":
        s = "(MIter)" if e.name == INDEX_VAR else f"(MVar {egg_string(e.name)})"
    else:
        args = [expr_to_egg(a, cache) for a in e.args]
        ctor = _BINOP[k]
        s = args[0]
        for a in args[1:]:
            s = f"({ctor} {s} {a})"
    if cache is not None:
        cache[e] = s
    return s


def elist_to_egg(xs, cache=None) -> str:
    s = "(ENil)"
    for x in reversed(list(xs)):
        s = f"(ECons {expr_to_egg(x, cache)} {s})"
    return s


def _one_view(v: View, cache) -> str:
    shape, strides = elist_to_egg(v.shape, cache), elist_to_egg(v.strides, cache)
    off = expr_to_egg(v.offset, cache)
    if v.mask is None:
        return f"(Strided {shape} {strides} {off})"
    lo = elist_to_egg([m[0] for m in v.mask], cache)
    hi = elist_to_egg([m[1] for m in v.mask], cache)
    return f"(Masked {shape} {strides} {off} {lo} {hi})"


def view_to_egg(st: ShapeTracker, cache=None) -> str:
    if st.is_contiguous:
        return f"(Contig {elist_to_egg(st.shape, cache)})"
    s = _one_view(st.views[0], cache)
    for v in st.views[1:]:
        s = f"(Stacked {_one_view(v, cache)} {s})"
    return s


def broadcast_axis_from_end(st: ShapeTracker) -> int | None:
    """k when ``st`` reads its source row-major over its shape with the k-th axis from the end
    taken out, that axis (of extent > 1) having stride 0 (the ``rm_bcast`` fact); else None.
    One unmasked view at offset 0; axes of extent 1 are ignored."""
    if len(st.views) != 1:
        return None
    v = st.views[0]
    if v.mask is not None or v.offset != 0:
        return None
    zero = [a for a, (d, s) in enumerate(zip(v.shape, v.strides)) if d != 1 and s == 0]
    if len(zero) != 1:
        return None
    kept = [a for a, d in enumerate(v.shape) if d != 1 and a != zero[0]]
    want = contiguous_strides(tuple(v.shape[a] for a in kept))
    if any(v.strides[a] != w for a, w in zip(kept, want)):
        return None
    return len(v.shape) - 1 - zero[0]


def row_gather(graph: Graph, i: int) -> tuple[int, Expr, Expr, int] | None:
    """(idx node, inner, rows of the data, data node) when node ``i`` is a Gather built by ``hl.index_select(x, 0,
    index)``: its flat index is ``iota(z % inner) + idx[z / inner] * iota(inner)`` over a
    contiguous result [rows, *rest] of x contiguous [n, *rest] (inner = prod(rest)), the int64
    index node read flat (rows elements, any shape) and broadcast along the rest; else None (the
    ``row_gather`` fact)."""
    n = graph.nodes[i]
    if n.op.name != "Gather" or len(n.inputs) != 2:
        return None
    (flat, fv), (data, dv) = n.inputs
    if not (fv.is_contiguous and dv.is_contiguous and tuple(dv.shape) == tuple(graph.nodes[data].shape)):
        return None
    shape = tuple(n.shape)
    if not shape or tuple(graph.nodes[data].shape[1:]) != shape[1:]:
        return None
    inner = prod(shape[1:])
    add = graph.nodes[flat]
    if add.op.name != "Add" or len(add.inputs) != 2 or not all(v.is_contiguous for _, v in add.inputs):
        return None
    (base, _), (mul, _) = add.inputs
    z, rows, n_data = sym(INDEX_VAR), shape[0], graph.nodes[data].shape[0]
    # index_select's expression for axis 0 (the leading quotient is 0 there, but kept as built)
    if not _is_iota(graph, base, (z // (rows * inner)) * (n_data * inner) + z % inner, shape):
        return None
    m = graph.nodes[mul]
    if m.op.name != "Mul" or len(m.inputs) != 2:
        return None
    (sel, sv), (step, stv) = m.inputs
    if not (stv.is_contiguous and _is_iota(graph, step, inner, shape)):
        return None
    idx = graph.nodes[sel]
    if idx.dtype.name != "int64" or prod(idx.shape) != rows:
        return None
    # the index read flat at each element's row: [rows] -> [rows, 1, ...] -> broadcast over the rest
    want = ShapeTracker.contiguous((rows,)).reshape((rows, *([1] * (len(shape) - 1)))).expand(shape)
    if sv != want:
        return None
    return sel, inner, n_data, data


def _is_iota(graph: Graph, i: int, expr: Expr, shape: tuple) -> bool:
    n = graph.nodes[i]
    return (n.op.name == "Iota" and isinstance(n.arg, IotaArg) and n.arg.dtype.name == "int64"
            and tuple(n.arg.shape) == shape and n.arg.expr == expr)


@dataclass
class EncodedGraph:
    """The program text plus what decoding needs: constants by index, node globals."""

    program: str
    constants: list[ConstantValue] = field(default_factory=list)
    node_globals: dict[int, str] = field(default_factory=dict)
    output_names: list[str] = field(default_factory=list)


def encode_graph(graph: Graph) -> EncodedGraph:
    """Write the reachable part of ``graph`` as egglog ``let`` bindings and a ``$root``."""
    cache: dict[Expr, str] = {}
    lines: list[str] = []
    facts_done: set[ShapeTracker] = set()
    enc = EncodedGraph("")
    for i in graph.reachable():
        n = graph.nodes[i]
        name = n.op.name
        ins = " ".join(f"{enc.node_globals[src]} {view_to_egg(st, cache)}" for src, st in n.inputs)
        cat = n.op.category
        if name == "Input":
            term = f"(Input {egg_string(n.arg.name)} {elist_to_egg(n.arg.shape, cache)} ({DTYPE_CTOR[n.arg.dtype]}))"
        elif name == "Constant":
            assert isinstance(n.arg, ConstantValue)
            enc.constants.append(n.arg)
            term = f"(Constant {len(enc.constants) - 1} {elist_to_egg(n.shape, cache)} ({DTYPE_CTOR[n.dtype]}))"
            if n.arg.is_scalar and n.arg.value.astype(np.float64) in (0.0, 1.0) and not np.signbit(n.arg.value):
                lines.append(f"({'unit' if n.arg.value else 'zero'}_constant {len(enc.constants) - 1})")
            elif n.arg.is_scalar and n.arg.value.astype(np.float64) == -1.0:
                lines.append(f"(neg_unit_constant {len(enc.constants) - 1})")
        elif name == "Output":
            term = f"(Output {egg_string(n.arg)} {ins})"
        elif name == "Iota":
            assert isinstance(n.arg, IotaArg)
            term = (f"(Iota {expr_to_egg(n.arg.expr, cache)} {elist_to_egg(n.arg.shape, cache)} "
                    f"({DTYPE_CTOR[n.arg.dtype]}))")
        elif cat == "reduce":
            term = f"({name} {n.arg} {ins})"
        elif name == "Cast":
            term = f"(Cast ({DTYPE_CTOR[n.arg]}) {ins})"
        elif name in PRIMITIVES:
            term = f"({name} {ins})"
        else:  # pragma: no cover - every row is handled above
            raise AssertionError(name)
        for _, st in n.inputs:
            k = None if st in facts_done else broadcast_axis_from_end(st)  # each view checked once
            facts_done.add(st)
            if k is not None:
                lines.append(f"(rm_bcast {view_to_egg(st, cache)} {k})")
        g = f"$n{i}"
        enc.node_globals[i] = g
        lines.append(f"(let {g} {term})")
        lines.append(f"(set (dtype {g}) ({DTYPE_CTOR[n.dtype]}))")
        lines.append(f"(set (shape {g}) {elist_to_egg(n.shape, cache)})")
        rows = row_gather(graph, i) if name == "Gather" else None
        if rows is not None:
            sel, inner, n_rows, data = rows
            lines.append(f"(row_gather {g} {enc.node_globals[sel]} {expr_to_egg(inner, cache)} "
                         f"{expr_to_egg(n_rows, cache)} {enc.node_globals[data]})")
    outs = "(INil)"
    for name in reversed(list(graph.outputs)):
        outs = f"(ICons {enc.node_globals[graph.outputs[name]]} {outs})"
    for out_name, in_name in graph.output_aliases.items():
        lines.append(f"(output_alias {egg_string(out_name)} {egg_string(in_name)})")
    lines.append(f"(let $root (Root {outs}))")
    enc.output_names = list(graph.outputs)
    enc.program = "\n".join(lines) + "\n"
    return enc
