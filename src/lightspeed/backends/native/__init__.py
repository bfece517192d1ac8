"""The ``native`` backend: LLIR programs run as kernels generated in the ``c`` dialect of the
shared renderer (:mod:`lightspeed.backends.codegen`), compiled by the host C compiler.

It is the cuda backend's twin on the host: the same kernels (one dialect apart), the same table,
arena plan and launch list, the same rules and numerics contract, so the generated-kernel path is
tested on every machine (CI has no GPU).  It is also the fast CPU path (`lightspeed run`'s default
without a GPU): OpenMP threads, vector code, matmuls reading GGUF's quantised blocks as they are
(``codegen/blocks.py``).  :mod:`.executor` compiles kernels with the host C compiler and caches
them per machine.
"""

from __future__ import annotations

import hashlib

from ... import dtypes as dt
from ..codegen import blocks, fused
from ..codegen.backend import KernelBackend
from ..codegen.lowering import OpTable
from . import executor

__all__ = ["NativeBackend"]


class NativeBackend(KernelBackend):
    name = "native"
    # matmuls and gathers read weights stored as GGML blocks (codegen/blocks.py, blocks.egg)
    ops = (*blocks.BLOCK_OPS, *fused.FUSED_KERNEL_OPS)
    rule_files = (blocks.RULE_FILE, *fused.RULE_FILES)
    rulesets = ("simplify", "cleanup", "inplace", "layout", "linalg", "blocks", *fused.RULESETS, "fusion", "writes")
    block_dtypes = dt.BLOCK_DTYPES
    # the generated kernels, and the block ops' kernels reading weights' packed blocks
    op_table = OpTable(blocks.BLOCK_LOWERINGS, placers=(blocks.place_blocks,))

    def __init__(self) -> None:
        self.executor = executor.HostExecutor()

    def available(self) -> bool:
        return executor.available()

    def code_hash(self) -> str:
        """The kernel code's hash and the block kernels' activation mode
        (``LIGHTSPEED_NATIVE_ACTIVATIONS``): a decision measured with the q16 kernels is never
        reused for the float ones."""
        mode = blocks.block_activations()
        return hashlib.sha256(f"{super().code_hash()}\nactivations={mode}".encode()).hexdigest()[:16]

