"""Indexing ops: gather/scatter families, built on the Gather and Scatter primitives.

Index arithmetic: an element's flat position in a row-major shape is built from Iota (the
positions along the untouched axes) plus the user's indexes scaled by the axis stride.
"""

from __future__ import annotations

from .. import dtypes as dt
from ..errors import DTypeError, ShapeError
from ..graph import GraphTensor
from ..symbolic import INDEX_VAR, prod, sym
from ._base import cast, norm_axis, prim
from .registry import hl_op


@hl_op(torch="torch.index_select", category="indexing")
def index_select(x: GraphTensor, dim: int, index: GraphTensor) -> GraphTensor:
    """Rows of ``x`` along ``dim`` picked by a 1-D integer ``index``."""
    if not isinstance(index, GraphTensor) or not index.dtype.is_int:
        raise DTypeError(f"index_select: index must be an integer GraphTensor, got {index!r}")
    if index.ndim != 1:
        raise ShapeError(f"index_select: index must be 1-D, got rank {index.ndim}")
    k = norm_axis(dim, x.ndim, "index_select")
    outer, n, inner = prod(x.shape[:k]), x.shape[k], prod(x.shape[k + 1:])
    m = index.shape[0]
    out_shape = x.shape[:k] + (m,) + x.shape[k + 1:]
    z = sym(INDEX_VAR)
    idt = dt.int64
    base = x.graph.iota((z // (m * inner)) * (n * inner) + z % inner, out_shape, idt)
    sel = cast(index, idt).reshape(*([1] * k), m, *([1] * (x.ndim - k - 1))).expand(*out_shape)
    flat = prim("Add", base, prim("Mul", sel, x.graph.iota(inner, out_shape, idt)))
    del outer
    return prim("Gather", flat, x)
