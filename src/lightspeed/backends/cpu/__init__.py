"""The ``cpu`` backend: numpy/BLAS kernels for LLIR programs chosen by the e-graph search.

Its part of the backend interface (:mod:`lightspeed.backends.base`): ``OPS`` (its own IR
constructors, with named fields), ``RULE_FILES`` and ``RULESETS`` (the .egg files that add its
ops as alternatives, and the schedule), ``FUSE_DTYPES`` (what its generated region kernels compute
exactly), ``KERNELS`` (per constructor, a function that prepares a step: :mod:`.kernels`, run by
:mod:`.runtime`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ... import dtypes as dt
from ...egraph.decl import OpDecl
from ...egraph.llir import LProgram
from ...graph import Graph
from ...program import Program
from ..base import Backend
from .kernels import KERNELS
from .runtime import CpuProgram

__all__ = ["CpuBackend", "CpuProgram", "OPS", "RULE_FILES", "RULESETS", "KERNELS"]

HERE = Path(__file__).parent
# matmul recognition is generic (egraph/rules/linalg.egg); the cpu runs Matmul itself, with BLAS
RULE_FILES: tuple[Path, ...] = ()
# rulesets to run, in order, each capped by the search options (the generic ones first)
RULESETS = ("simplify", "cleanup", "inplace", "layout", "linalg", "fusion")
# the generated numpy region kernels compute these exactly like the reference (one ufunc per
# primitive, same dtype); low-precision floats round per op in the reference, so they stay unfused
FUSE_DTYPES = (dt.float32, dt.float64)
# np.matmul (BLAS) accumulates unrounded products: like the reference's Mul + SumReduce up to
# summation order for these; bf16/f16 products round per element in the reference
MATMUL_DTYPES = (dt.float32, dt.float64)

# no ops of its own: it runs the generic ones (primitives, Fused, ScatterInPlace, Matmul/MatmulAdd
# by numpy/BLAS on strided views)
OPS: tuple[OpDecl, ...] = ()


class CpuBackend(Backend):
    name = "cpu"
    ops = OPS
    rule_files = RULE_FILES
    rulesets = RULESETS
    fuse_dtypes = FUSE_DTYPES
    matmul_dtypes = MATMUL_DTYPES

    def lower(self, graph: Graph, lprog: LProgram, report: Any = None) -> Program:
        return CpuProgram(graph, lprog, report)
