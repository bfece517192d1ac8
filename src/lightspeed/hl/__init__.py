"""The high-level op library: every op here is a composition of the 15 primitives.

Importing this package registers all ops (as ``GraphTensor`` methods and as functions); the
registry :data:`HL_OPS` lists them for the docs generator and the op-table tests.
"""

from __future__ import annotations

from . import conv, elementwise, indexing, linalg, movement, nn, reduce, scan_sort  # noqa: F401  (registration)
from .registry import HL_OPS, HLOp, hl_op

__all__ = ["HL_OPS", "HLOp", "hl_op"] + sorted(n for n, op in HL_OPS.items() if op.function)

globals().update({n: op.fn for n, op in HL_OPS.items() if op.function})
