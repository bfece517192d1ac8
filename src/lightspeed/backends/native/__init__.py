"""The ``native`` backend: LLIR programs run as kernels generated in the ``c`` dialect of the
shared renderer (:mod:`lightspeed.backends.codegen`), compiled by the host C compiler.

It is the cuda backend's twin on the host: the same kernels (one dialect apart), the same table,
arena plan and launch list, the same rules and numerics contract.  Today it exists so that the
generated-kernel path is tested on every machine (CI has no GPU); the native CPU kernels issue
makes it fast (threads, vector code, quantised weights).
"""

from __future__ import annotations

from typing import Any

from ... import dtypes as dt
from ...egraph.llir import LProgram
from ...graph import Graph
from ...program import Program
from .. import register_backend
from ..base import Backend
from ..codegen import host
from ..codegen.program import KernelProgram

__all__ = ["NativeBackend"]

# the same schedule as the cpu backend (generic rules; matmul, regions and in-place writes)
RULESETS = ("simplify", "cleanup", "inplace", "layout", "linalg", "fusion")


class NativeBackend(Backend):
    name = "native"
    rulesets = RULESETS
    # regions compute float32/float64 like the reference; bfloat16/float16 regions compute in
    # float and round once on store (within the dtype's tolerance of the reference)
    fuse_dtypes = (dt.float32, dt.float64, dt.bfloat16, dt.float16)
    matmul_dtypes = (dt.float32, dt.float64, dt.bfloat16, dt.float16)

    def __init__(self) -> None:
        self.executor = host.HostExecutor()

    def available(self) -> bool:
        return host.available()

    def compose_rolled(self, graph: Graph, plan: Any, parts: Any, roll_seconds: float) -> Program:
        """One stitched kernel program for the whole rolled model (one CUDA graph on the GPU)."""
        from ..codegen.rolled import compose_rolled_kernels

        return compose_rolled_kernels(self, graph, plan, parts, roll_seconds)

    def lower(self, graph: Graph, lprog: LProgram, report: Any = None) -> Program:
        return KernelProgram(graph, lprog, self.executor, report, backend_name=self.name)


register_backend(NativeBackend())
