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

import ctypes
import hashlib
from typing import Any

import numpy as np

from ... import dtypes as dt
from ...errors import InputError
from ...program import Pending
from ..codegen import blocks, fused
from ..codegen.backend import KernelBackend
from ..codegen.kernels.sample import LOGIT_CODES, SAMPLE_KERNEL, checked_params, sampler_source
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
    groups_gathered_rows = True  # its GatherMatmul kernel groups the picks by expert
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

    def sampler(self) -> HostSampler | None:
        return HostSampler() if executor.available() else None


class HostSampler:
    """The c dialect's token sampler (``codegen/kernels/sample.py``), compiled once per machine
    like the kernels; rows sampled side by side on the OpenMP threads."""

    def __init__(self) -> None:
        lib, _ = executor._build(sampler_source("c"))
        self.fn = getattr(lib, SAMPLE_KERNEL)
        self.fn.restype = None
        self.fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_longlong,
                            ctypes.c_void_p, ctypes.c_void_p]

    def sample(self, logits: Any, params: Any) -> Pending:
        x = np.asarray(logits)
        if x.ndim == 2 and x.shape[1] > 0 and x.strides[1] != x.itemsize:
            x = np.ascontiguousarray(x)  # the kernel reads each row's elements side by side
        if x.ndim != 2 or x.dtype.name not in LOGIT_CODES:
            raise InputError(f"sampler: logits must be [rows, V] of float32/bfloat16/float16, "
                             f"got {x.dtype.name}{list(x.shape)}")
        prm = checked_params(x.shape[0], params)
        ids = np.empty(x.shape[0], np.int64)
        self.fn(x.ctypes.data, LOGIT_CODES[x.dtype.name], x.shape[0], x.strides[0] // x.itemsize, x.shape[1],
                prm.ctypes.data, ids.ctypes.data)
        if (ids < 0).any():
            raise MemoryError("sampler: no memory for a row's scratch")
        return Pending({"ids": ids}, {"ids": ids})
