"""The ``native`` backend: LLIR programs run as kernels generated in the ``c`` dialect of the
shared renderer (:mod:`lightspeed.backends.codegen`), compiled by the host C compiler.

It is the cuda backend's twin on the host: the same kernels (one dialect apart), the same table,
arena plan and launch list, the same rules and numerics contract.  Today it exists so that the
generated-kernel path is tested on every machine (CI has no GPU); the native CPU kernels issue
makes it fast (threads, vector code, quantised weights).
"""

from __future__ import annotations

from ... import dtypes as dt
from .. import register_backend
from ..codegen import blocks, host
from ..codegen.backend import KernelBackend

__all__ = ["NativeBackend"]


class NativeBackend(KernelBackend):
    name = "native"
    # matmuls and gathers read weights stored as GGML blocks (codegen/blocks.py, blocks.egg)
    ops = blocks.BLOCK_OPS
    rule_files = (blocks.RULE_FILE,)
    rulesets = ("simplify", "cleanup", "inplace", "layout", "linalg", "blocks", "fusion")
    block_dtypes = dt.BLOCK_DTYPES

    def __init__(self) -> None:
        self.executor = host.HostExecutor()

    def available(self) -> bool:
        return host.available()


register_backend(NativeBackend())
