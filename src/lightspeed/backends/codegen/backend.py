"""What the generated-kernel backends (``cuda``, ``native``) share: the rules they run, the dtypes
their regions and matmuls compute (bfloat16/float16 in float, rounded once on store: within the
dtype's tolerance of the reference), one stitched program for a rolled model, and lowering to a
:class:`~.program.KernelProgram` on their executor."""

from __future__ import annotations

from typing import Any

from ... import dtypes as dt
from ...egraph.llir import LProgram
from ...graph import Graph
from ...program import Program
from ..base import Backend
from .program import Executor, KernelProgram

__all__ = ["KernelBackend"]


class KernelBackend(Backend):
    rulesets = ("simplify", "cleanup", "inplace", "layout", "linalg", "fusion")
    fuse_dtypes = (dt.float32, dt.float64, dt.bfloat16, dt.float16)
    matmul_dtypes = (dt.float32, dt.float64, dt.bfloat16, dt.float16)
    program_class: type[KernelProgram] = KernelProgram
    executor: Executor

    def compose_rolled(self, graph: Graph, plan: Any, parts: Any, roll_seconds: float) -> Program:
        """One stitched kernel program for the whole rolled model (one CUDA graph on the GPU)."""
        from .rolled import compose_rolled_kernels

        return compose_rolled_kernels(self, graph, plan, parts, roll_seconds)

    def lower(self, graph: Graph, lprog: LProgram, report: Any = None) -> Program:
        return self.program_class(graph, lprog, self.executor, report, backend_name=self.name)
