"""What the generated-kernel backends (``cuda``, ``native``) share: the rules they run, the dtypes
their regions and matmuls compute (bfloat16/float16 in float, rounded once on store: within the
dtype's tolerance of the reference), their op table (how each LLIR op runs: :mod:`.lowering`),
one stitched program for a rolled model, and lowering to a :class:`~.program.KernelProgram` on
their executor."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from ... import dtypes as dt
from ...egraph.llir import LProgram
from ...graph import Graph
from ...program import Program
from ..base import Backend
from . import fused
from .lowering import OpTable
from .program import Executor, KernelProgram
from .rolled import compose_rolled_kernels

__all__ = ["KernelBackend"]

_CODEGEN = Path(__file__).parent


class KernelBackend(Backend):
    rulesets = ("simplify", "cleanup", "inplace", "layout", "linalg", *fused.RULESETS, "fusion", "writes")
    ops = fused.FUSED_KERNEL_OPS
    rule_files = fused.RULE_FILES
    fuse_dtypes = (dt.float32, dt.float64, dt.bfloat16, dt.float16, dt.int32, dt.int64, dt.bool_)
    matmul_dtypes = (dt.float32, dt.float64, dt.bfloat16, dt.float16)
    fused_kernel_dtypes = (dt.float32, dt.bfloat16, dt.float16)
    program_class: type[KernelProgram] = KernelProgram
    executor: Executor
    op_table: OpTable = OpTable()

    def code_hash(self) -> str:
        """The backend package's hash and the shared kernel layer's (its kernels are rendered
        here: a changed kernel family never reuses a decision measured with the old one)."""
        h = getattr(self, "_kernel_code_hash", None)
        if h is None:
            digest = hashlib.sha256(super().code_hash().encode())
            for f in sorted(p for p in _CODEGEN.rglob("*") if p.suffix in (".py", ".egg", ".h", ".cuh")):
                digest.update(str(f.relative_to(_CODEGEN)).encode())
                digest.update(f.read_bytes())
            h = self._kernel_code_hash = digest.hexdigest()[:16]
        return h

    def compose_rolled(self, graph: Graph, plan: Any, parts: Any, roll_seconds: float) -> Program:
        """One stitched kernel program for the whole rolled model (one CUDA graph on the GPU)."""
        return compose_rolled_kernels(self, graph, plan, parts, roll_seconds)

    def lower(self, graph: Graph, lprog: LProgram, report: Any = None) -> Program:
        return self.program_class(graph, lprog, self.executor, report, backend_name=self.name, table=self.op_table)
