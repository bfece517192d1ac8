"""``CudaBackend``: the cuda backend's declaration (rules, ops, op table) and its device-side
helpers (device identity, uploads, event timing)."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ... import dtypes as dt
from ...dtypes import DType
from ...egraph.decl import MATMUL, MATMUL_ADD, OpDecl
from ...egraph.llir import LOp
from ...errors import InputError, LightspeedError
from ...program import Program
from ..codegen import blocks, fused
from ..codegen.backend import KernelBackend
from ..codegen.lowering import Lowered, OpTable, generated
from . import cublaslt as lt
from . import driver
from .driver import DeviceArray
from .executor import GpuExecutor, thread_stream
from .program import CudaProgram

__all__ = ["CudaBackend", "CUBLASLT_MODES"]


CUBLASLT_MODES = ("search", "always", "off")
# tensor-core tiles for bfloat16/float16 products (kernels/matmul_mma.py), offered to the search with
# the search by default (LIGHTSPEED_CUDA_MMA=0 or CudaBackend(mma=False): not offered); on since the
# fourteenth session's H100 run (the tests passed; a 512-token 1B prefill 170 -> 23 ms, decode equal)
MATMUL_MMA = OpDecl("MatmulMma", MATMUL.fields, "Matmul on the tensor cores (cuda backend, bfloat16/float16)",
                    many_rows=True)
MATMUL_ADD_MMA = OpDecl("MatmulAddMma", MATMUL_ADD.fields, "MatmulAdd on the tensor cores (cuda backend)",
                        many_rows=True)
# a prompt's gate and up products with SiLU·mul on the tensor cores (kernels/matmul_mma.py)
MATMUL_GLU_MMA = OpDecl("MatmulGLUMma", fused.MATMUL_GLU.fields, "MatmulGLU on the tensor cores (cuda backend, "
                        "bfloat16/float16)", many_rows=True)
MATMUL_GEGLU_MMA = OpDecl("MatmulGeGLUMma", fused.MATMUL_GEGLU.fields, "MatmulGeGLU on the tensor cores (cuda "
                          "backend, bfloat16/float16)", many_rows=True)
# a prompt's attention as flash-attention tiles on the tensor cores (kernels/attention_mma.py)
ATTENTION_MMA = OpDecl("AttentionMma", fused.ATTENTION.fields, "Attention on the tensor cores (cuda backend, "
                       "bfloat16/float16, equal head dims of 16 ... 128)", many_rows=True)
# a mixture-of-experts prompt's products grouped by expert on the tensor cores (kernels/matmul_mma.py)
GATHER_MATMUL_MMA = OpDecl("GatherMatmulMma", fused.GATHER_MATMUL.fields, "GatherMatmul grouped by expert on the "
                           "tensor cores (cuda backend, bfloat16/float16)", many_rows=True)
MMA_RULE_FILE = Path(__file__).with_name("mma.egg")
# products sharing their left operand as one product over stacked weights (codegen/stacked.egg)
STACKED_RULE_FILE = Path(fused.__file__).with_name("stacked.egg")
_LIBRARY_ONLY = ("LtMatmulEpi", "LtMatmulBias", "LtMatmulFp8")  # no generated kernel computes these


class CudaBackend(KernelBackend):
    """``cublaslt``: ``search`` (cuBLASLt matmuls offered to the search as ``LtMatmul``),
    ``always`` (also every generic matmul it can compute lowered to it) or ``off``; default
    ``$LIGHTSPEED_CUBLASLT``, else ``search`` where nvmath-python is installed.  ``mma``: offer
    tensor-core tiles for bfloat16/float16 products (``MatmulMma``; default
    ``$LIGHTSPEED_CUDA_MMA``, on unless it is ``0``).  ``stacked``: offer products that share
    their left operand (q, k, v; gate, up) as one product over stacked weights (default
    ``$LIGHTSPEED_CUDA_STACKED``, off unless it is ``1``: not yet measured on a GPU).
    ``block_norms``: a decode step's norm products over GGUF blocks (codegen/block_norms.egg;
    default ``$LIGHTSPEED_CUDA_BLOCK_NORMS``, on unless it is ``0``).  ``grouped_mma``: offer a
    mixture-of-experts product grouped by expert on the tensor cores (``GatherMatmulMma``; default
    ``$LIGHTSPEED_CUDA_GROUPED_MMA``, on unless it is ``0``)."""

    name = "cuda"
    program_class = CudaProgram
    device_memory = True
    block_dtypes = dt.BLOCK_DTYPES

    def __init__(self, cublaslt: str | None = None, mma: bool | None = None, stacked: bool | None = None,
                 block_norms: bool | None = None, grouped_mma: bool | None = None) -> None:
        mode = cublaslt or os.environ.get("LIGHTSPEED_CUBLASLT", "search")
        mode = {"1": "always", "0": "off"}.get(mode, mode)
        if mode not in CUBLASLT_MODES:
            raise ValueError(f"cublaslt must be one of {CUBLASLT_MODES}, got {mode!r}")
        if cublaslt is None and mode == "search" and importlib.util.find_spec("nvmath") is None:
            mode = "off"  # by default offered only where nvmath-python is installed
        self.cublaslt = mode
        # GGUF weights kept as blocks (a lazily loaded file): matmuls and gathers that decode
        # them in registers, offered beside the Cast + float kernels (codegen/blocks.py)
        self.ops = (*blocks.BLOCK_OPS, *fused.FUSED_KERNEL_OPS)
        self.rule_files = (blocks.RULE_FILE, *fused.RULE_FILES)
        rs = KernelBackend.rulesets
        self.rulesets = (*rs[:rs.index("linalg") + 1], "blocks", *rs[rs.index("linalg") + 1:])
        table = OpTable({**blocks.BLOCK_LOWERINGS, **blocks.NORM_LOWERINGS}, placers=(blocks.place_blocks,))
        # ... and a decode step's norm products over blocks (codegen/block_norms.egg), after the
        # float ones' rules (norms, products) and before fusion: on unless
        # $LIGHTSPEED_CUDA_BLOCK_NORMS is 0 (with lanes on parts of groups, SmolLM2's block step
        # 0.759 ms with them, 0.913 without; H100, 2026-12-07)
        self.block_norms = (os.environ.get("LIGHTSPEED_CUDA_BLOCK_NORMS", "1") != "0" if block_norms is None
                            else block_norms)
        if self.block_norms:
            self.rule_files = (*self.rule_files, blocks.NORM_RULE_FILE)
            rs = self.rulesets
            self.rulesets = (*rs[:rs.index("fusion")], "block_norms", *rs[rs.index("fusion"):])
        if mode != "off":
            self.ops = (*lt.LT_OPS, *self.ops)
            self.rule_files = (lt.RULE_FILE, *self.rule_files)
            rs = self.rulesets
            self.rulesets = (*rs[:rs.index("linalg") + 1], "cublaslt", *rs[rs.index("linalg") + 1:])
        self.mma = os.environ.get("LIGHTSPEED_CUDA_MMA", "1") != "0" if mma is None else mma
        if self.mma:
            self.ops = (*self.ops, MATMUL_MMA, MATMUL_ADD_MMA, MATMUL_GLU_MMA, MATMUL_GEGLU_MMA, ATTENTION_MMA,
                        GATHER_MATMUL_MMA)
            self.rule_files = (*self.rule_files, MMA_RULE_FILE)
            rs = self.rulesets
            self.rulesets = (*rs[:rs.index("linalg") + 1], "mma", *rs[rs.index("linalg") + 1:], "mma_fused")
        # a mixture-of-experts prompt's products grouped by expert on the tiles (GatherMatmulMma; a cuda
        # prompt takes the gathered form where it is offered, models/generate.py): a 512-token prompt of
        # the Qwen3-30B-A3B shape 6.90 ms against the dense form's 27.07 (H100, twenty-ninth session);
        # $LIGHTSPEED_CUDA_GROUPED_MMA=0 turns it off (prompts dense again)
        self.grouped_mma = self.mma and (os.environ.get("LIGHTSPEED_CUDA_GROUPED_MMA", "1") != "0"
                                         if grouped_mma is None else grouped_mma)
        self.groups_gathered_rows = self.grouped_mma
        if self.grouped_mma:
            self.rulesets = (*self.rulesets, "mma_grouped")
        self.stacked = os.environ.get("LIGHTSPEED_CUDA_STACKED", "0") == "1" if stacked is None else stacked
        if self.stacked:  # right after linalg: the library and tile rules see the stacked product
            self.rule_files = (*self.rule_files, STACKED_RULE_FILE)
            rs = self.rulesets
            self.rulesets = (*rs[:rs.index("linalg") + 1], "stacked", *rs[rs.index("linalg") + 1:])
        self.executor = GpuExecutor()
        if mode != "off":  # cuBLASLt's ops (and, always, the generic matmuls) as library calls
            library_ops = [d.name for d in lt.LT_OPS] + (["Matmul", "MatmulAdd"] if mode == "always" else [])
            table = table.extended({name: self._cublaslt for name in library_ops})
        self.op_table = table

    def _cublaslt(self, op: LOp, in_dtypes: list[DType], dialect: str) -> Lowered:
        """A matmul cuBLASLt can compute as one library launch inside the graph; else the generated
        matmul kernel (the cuBLASLt ops have Matmul's fields), except for the ops only cuBLASLt
        computes (epilogues, fp8), which the rules offer only where a plan exists."""
        plan = lt.plan_matmul(op, in_dtypes) or lt.plan_dims(op, in_dtypes)
        if plan is None:
            if op.op in _LIBRARY_ONLY:
                raise LightspeedError(f"{op.op} ({op.args.get('epilogue')}): no cuBLASLt plan for this matmul "
                                      "(the rules offer it only where one exists)")
            return generated(dataclasses.replace(op, op="MatmulAdd" if "r_view" in op.args else "Matmul"),
                             in_dtypes, dialect)
        spec = lt.library_spec(plan, "r_view" in op.args)
        self.executor.add_library_call(spec, plan)
        return Lowered([spec])

    def available(self) -> bool:
        return driver.available()

    def device(self) -> str:
        try:
            dev = driver.device()
            return f"cuda:{dev.name}:{dev.arch}"
        except driver.CudaError:
            return "cuda:none"

    def sampler(self) -> Any:
        from .sampler import DeviceSampler

        return DeviceSampler()

    def to_device(self, array: np.ndarray) -> Any:
        """An array uploaded; weights held as GGUF blocks (a ``QuantTensor``) stay as they are: a
        program places them itself, in the form its kernels read (uploading the object as bytes
        lost what it is: every block candidate failed its timing run, so the search could not pick
        one for a real GGUF file)."""
        if getattr(array, "qtype", None) is not None:
            return array
        return DeviceArray.from_host(array, thread_stream())

    def write_rows(self, dest: Any, start: int, rows: np.ndarray) -> None:
        if not isinstance(dest, DeviceArray):
            return super().write_rows(dest, start, rows)
        rows = np.ascontiguousarray(np.asarray(rows), dtype=dest.dtype)
        row_bytes = dest.nbytes // max(1, dest.shape[0])
        if start < 0 or start + len(rows) > dest.shape[0] or rows.nbytes != len(rows) * row_bytes:
            raise InputError(f"write_rows: {rows.shape} rows at {start} do not fit {dest.shape}")
        dev = driver.device()
        dev.upload(dest.ptr + start * row_bytes, rows, thread_stream())
        dev.sync(thread_stream())

    def time(self, prog: Program, inputs: Mapping[str, Any], dims: Mapping[str, int], repeats: int) -> float:
        """The median of ``repeats`` calls timed with CUDA events on the thread's stream (after
        one warm-up call, which also captures the graph)."""
        dev = driver.device()
        stream = thread_stream()
        prog(inputs, dims=dims)
        dev.sync(stream)
        start, end = dev.event(), dev.event()
        times = []
        for _ in range(max(1, repeats)):
            dev.record(start, stream)
            prog(inputs, dims=dims)
            dev.record(end, stream)
            times.append(dev.elapsed(start, end))
        return float(np.median(times))
