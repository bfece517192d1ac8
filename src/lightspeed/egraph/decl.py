"""Op declarations: every ``IR`` constructor (primitive or backend op) is declared once, with
named, typed fields.  The egglog ``constructor`` is generated from the declaration, the encoder
and the decoders read fields by name, and kernels read ``op.args["m"]``, never ``fields[7]``
(the seed's miscompile was a positional field mix-up in a 27-field cuBLASLt op).

Field kinds and their egglog sorts: ``i64``, ``str`` (String), ``expr`` (a symbolic integer),
``elist`` (a list of them), ``dtype``, ``view`` (how an ``ir`` operand is read), ``ir`` (an
operand: another op's value) and ``scalar`` (a fused region's body).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..primitives import PRIMITIVES

__all__ = ["OpDecl", "KIND_SORT", "PRIMITIVE_OPS", "FUSED", "MATMUL", "MATMUL_ADD", "LINALG_OPS", "SCATTER_IN_PLACE",
           "GENERIC_OPS", "constructors_text"]

KIND_SORT = {"i64": "i64", "str": "String", "expr": "Expr", "elist": "EList", "dtype": "DType", "view": "View",
             "ir": "IR", "scalar": "Scalar"}


@dataclass(frozen=True)
class OpDecl:
    """An IR constructor: its name, its fields ``(name, kind)`` in egglog argument order, a doc line.
    ``many_rows``: a kernel that pays off only for products of many rows (tensor-core tiles): the
    search also measures its candidates with such ops swapped for the class's other backend ops
    (search.candidates' ``few-rows`` candidate), so a decode row never inherits a prompt's tiles.
    ``library``: a many-rows op computed by a vendor library (cuBLASLt for a prompt's products):
    the greedy candidate takes it before the class's other many-rows ops, the fused one after
    them, so the search measures the library against the generated tiles."""

    name: str
    fields: tuple[tuple[str, str], ...]
    doc: str = ""
    many_rows: bool = False
    library: bool = False

    def __post_init__(self) -> None:
        names = [n for n, _ in self.fields]
        if len(set(names)) != len(names):
            raise ValueError(f"op {self.name}: duplicate field names {names}")
        bad = [k for _, k in self.fields if k not in KIND_SORT]
        if bad:
            raise ValueError(f"op {self.name}: unknown field kinds {bad} (known: {sorted(KIND_SORT)})")

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(k for _, k in self.fields)

    def constructor(self) -> str:
        """The egglog declaration, with the field names as a comment."""
        sorts = " ".join(KIND_SORT[k] for k in self.kinds)
        names = " ".join(n for n, _ in self.fields)
        return f"(constructor {self.name} ({sorts}) IR)  ; {names}" + (f" -- {self.doc}" if self.doc else "")


PRIMITIVE_OPS: dict[str, OpDecl] = {n: OpDecl(n, p.fields, p.doc) for n, p in PRIMITIVES.items()}
# an element-wise region (rules/fusion.egg): for every element of `shape`, the scalar tree `body`
FUSED = OpDecl("Fused", (("shape", "elist"), ("body", "scalar")), "element-wise region")
# generic linear algebra (rules/linalg.egg recognises it; a backend runs it or lowers it to its own ops):
# C[*batch, i, j] = sum_l A[a_offset + <batch index, a_batch_strides> + i*a_stride_m + l*a_stride_k]
#                       * B[b_offset + <batch index, b_batch_strides> + l*b_stride_k + j*b_stride_n]
# for i < m, j < n, l < k; C is row-major [*batch, m, n]; a batch stride of 0 broadcasts that operand
MATMUL = OpDecl("Matmul", (
    ("batch", "elist"), ("m", "expr"), ("n", "expr"), ("k", "expr"),
    ("a", "ir"), ("a_batch_strides", "elist"), ("a_stride_m", "expr"), ("a_stride_k", "expr"), ("a_offset", "expr"),
    ("b", "ir"), ("b_batch_strides", "elist"), ("b_stride_k", "expr"), ("b_stride_n", "expr"), ("b_offset", "expr")),
    "C[*batch, m, n] = A[*batch, m, k] @ B[*batch, k, n], operands strided")
# ... plus an addend R read through r_view (same dtype as the product): C = A @ B + R
MATMUL_ADD = OpDecl("MatmulAdd", (*MATMUL.fields, ("r", "ir"), ("r_view", "view")), "A @ B + R")
LINALG_OPS = (MATMUL, MATMUL_ADD)


# a Scatter written into its destination's own buffer: `dest` is an input that an output aliases
# (rules/inplace.egg), so only the `src` rows are written and the value is `dest`'s buffer itself
SCATTER_IN_PLACE = OpDecl("ScatterInPlace", (("dest", "ir"), ("indexes", "ir"), ("indexes_view", "view"),
                                             ("src", "ir"), ("src_view", "view")),
                          "Scatter into an aliased input's buffer, in place")
# generic constructors declared with the schema (their rule files are generic too)
GENERIC_OPS = (FUSED, SCATTER_IN_PLACE, *LINALG_OPS)


def constructors_text(decls) -> str:
    return "\n".join(d.constructor() for d in decls) + "\n"


# ---------------------------------------------------------------- the fusion language
# A region body is a `Scalar` term (rules/fusion.egg).  Its constructors are listed once, here: the
# `Scalar` datatype in rules/schema.egg, the one-op `fuse-*` rules in rules/fusion.egg (between the
# GENERATED markers) and the decoder's table (extract.SCALAR_OPS) are all generated from this table,
# so adding an element-wise primitive to the fusion language is one row.  Regenerate the files with
# `python scripts/gen_fusion_rules.py` (a test fails while they are stale).
#
# Index spaces: every node is evaluated at one flat index z of an index space.  The region's root
# is evaluated over the region's shape; the child of a reduction node over that node's
# pre-reduction shape `space` (the reduced axis put back).  A leaf reads its operand through its
# view at z; nodes of one element-wise node share their parent's space.  Every node of one Scalar
# e-class must be evaluable in the same space (up to size-1 dims), so the leaves computed in place
# carry the shape of the read they replace: were (SConst i) shared by the reads of one constant at
# [3, 5] and at [3, 4, 5], the e-class would mix leaves of two spaces.


@dataclass(frozen=True)
class ScalarOp:
    """A `Scalar` constructor: its argument sorts, the primitive it computes ("" = none), a doc line."""

    name: str
    sorts: tuple[str, ...]
    computes: str = ""
    doc: str = ""


# the element-wise primitives, in the primitive table's order: each one has a one-op region rule
ELEMENTWISE: tuple[str, ...] = tuple(n for n, p in PRIMITIVES.items() if p.category in ("unary", "binary"))
# reductions of one axis: (SumReduce / MaxReduce axis x) becomes a region whose root reduces the
# operand's values over the operand's view shape
REDUCTIONS: tuple[str, ...] = tuple(n for n, p in PRIMITIVES.items() if p.category == "reduce")

SCALAR_TABLE: tuple[ScalarOp, ...] = (
    ScalarOp("SLeaf", ("IR", "View"), "", "operand IR read through View at z"),
    ScalarOp("SConst", ("i64", "EList"), "", "index shape: a one-element constant (index into the constant table)"),
    ScalarOp("SIota", ("Expr", "DType", "EList"), "Iota", "expr dtype shape: expr(z) in dtype"),
    *(ScalarOp(f"S{n}", ("Scalar",) * PRIMITIVES[n].arity, n) for n in ELEMENTWISE),
    ScalarOp("SCast", ("DType", "Scalar"), "Cast"),
    *(ScalarOp(f"S{n}", ("i64", "EList", "Scalar"), n, "axis space body: body over space, reduced along axis")
      for n in REDUCTIONS),
    ScalarOp("SInline", ("Scalar",), "", "a producer region's body computed here (identity)"),
    ScalarOp("SGather", ("Scalar", "IR", "View"), "Gather", "index data view: data read through view at index(z)"),
)
# Scalar constructor -> the primitive it computes (decoders read bodies through it)
SCALAR_OPS: dict[str, str] = {o.name: o.computes for o in SCALAR_TABLE}

def _kebab(name: str) -> str:
    return "".join(("-" + c.lower()) if c.isupper() and i else c.lower() for i, c in enumerate(name))


def scalar_datatype_text() -> str:
    """The `Scalar` datatype (rules/schema.egg)."""
    rows = "\n".join(f"  ({o.name}{''.join(' ' + s for s in o.sorts)})" + (f"  ; {o.doc}" if o.doc else "")
                     for o in SCALAR_TABLE)
    return f"(datatype Scalar\n{rows}\n)\n"


def fusion_rules_text() -> str:
    """The one-op region rules (rules/fusion.egg): every element-wise primitive of a `fuse_dtype`
    operand dtype is also a region computing just that op; every reduction of such a dtype read
    through an unmasked view (Contig or Strided: the view's first field is its shape) is a region
    whose root reduces the leaf over the view's shape."""
    out = []
    for n in ELEMENTWISE:
        fields = PRIMITIVE_OPS[n].fields
        pattern = " ".join(f"?{f}" for f, _ in fields)
        leaves = " ".join(f"(SLeaf ?{f} ?{f}_view)" for f, k in fields if k == "ir")
        first = fields[0][0]
        out.append(f"(rule ((= ?e ({n} {pattern})) (= ?dt (dtype ?{first})) (fuse_dtype ?dt) (= ?s (shape ?e)))\n"
                   f"      ((union ?e (Fused ?s (S{n} {leaves})))) :ruleset fusion :name \"fuse-{_kebab(n)}\")")
    for n in REDUCTIONS:
        for view, pat in (("contig", "(Contig ?space)"), ("strided", "(Strided ?space ?strides ?offset)")):
            out.append(f"(rule ((= ?e ({n} ?axis ?x {pat})) (= ?dt (dtype ?x)) (fuse_dtype ?dt) (= ?s (shape ?e)))\n"
                       f"      ((union ?e (Fused ?s (S{n} ?axis ?space (SLeaf ?x {pat})))))"
                       f" :ruleset fusion :name \"fuse-{_kebab(n)}-{view}\")")
    return "\n".join(out) + "\n"
