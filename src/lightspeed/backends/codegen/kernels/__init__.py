"""Kernels by family, each rendering an LLIR op into :class:`~.spec.KernelSpec` s in the ``cuda``
(NVRTC) or ``c`` (host compiler) dialect of one C-like language.

Families (one module each; a family renders both dialects where both exist, and dialect-only
code lives in its own module or prelude file):

* :mod:`.region`: fused element-wise trees and reductions, and the primitives that are one-op
  regions (element-wise ops, Cast, reductions, Iota, Output, Gather);
* :mod:`.scatter`: Scatter and ScatterInPlace;
* :mod:`.matmul`: the generic Matmul/MatmulAdd; :mod:`.matmul_rows` its c-only row kernel;
* :mod:`.attention`: the Attention op (softmax(Q @ K + mask) @ V in one kernel, online softmax);
* :mod:`.norm`: RowNorm (RMSNorm of each row in one kernel);
* :mod:`.block_matmul`: matmuls and gathers reading GGML blocks (c only; called by the block ops'
  lowering in ``codegen/blocks.py``, not keyed by an LLIR op of its own).

The shared layers: :mod:`.spec` (what a kernel is and its launch shape), :mod:`.types` (C types
and conversions), :mod:`.writer` (statements, index expressions, the kernel function and its
work loop), :mod:`.source` (preludes and module text).

:data:`KERNELS` maps each LLIR op a generated kernel computes to its family's renderer; a
backend's op table (``codegen/lowering.py``) starts from it.  Adding a family: a module with a
``RENDERERS`` dict, one line in :data:`KERNELS` (docs/architecture.md, "How to add a kernel").
"""

from __future__ import annotations

from collections.abc import Callable

from ....dtypes import DType
from ....egraph.llir import LOp
from ....errors import LightspeedError
from . import attention, attention_mma, matmul, matmul_mma, norm, region, scatter
from .source import DIALECTS, module_source, prelude
from .spec import KernelSpec, LaunchShape
from .types import compute_type, storage_type

__all__ = ["KERNELS", "Renderer", "render", "KernelSpec", "LaunchShape", "module_source", "prelude", "DIALECTS",
           "storage_type", "compute_type"]

# (op, its operands' dtypes, dialect) -> the kernels that compute it, run in order, each writing
# the op's value (``out``)
Renderer = Callable[[LOp, list[DType], str], list[KernelSpec]]

KERNELS: dict[str, Renderer] = {**region.RENDERERS, **scatter.RENDERERS, **matmul.RENDERERS,
                               **attention.RENDERERS, **norm.RENDERERS, **matmul_mma.RENDERERS,
                               **attention_mma.RENDERERS}


def render(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    """The generated kernels of ``op`` in ``dialect``, by its family."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}")
    renderer = KERNELS.get(op.op)
    if renderer is None:
        raise LightspeedError(f"kernel renderer: no kernel for {op.op}")
    return renderer(op, in_dtypes, dialect)
