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

__all__ = ["OpDecl", "KIND_SORT", "PRIMITIVE_OPS", "FUSED", "constructors_text"]

KIND_SORT = {"i64": "i64", "str": "String", "expr": "Expr", "elist": "EList", "dtype": "DType", "view": "View",
             "ir": "IR", "scalar": "Scalar"}


@dataclass(frozen=True)
class OpDecl:
    """An IR constructor: its name, its fields ``(name, kind)`` in egglog argument order, a doc line."""

    name: str
    fields: tuple[tuple[str, str], ...]
    doc: str = ""

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


def constructors_text(decls) -> str:
    return "\n".join(d.constructor() for d in decls) + "\n"
