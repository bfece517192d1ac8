"""The scatter family: ``Scatter`` (the destination copied into the output, then the indexed
writes) and ``ScatterInPlace`` (the writes into the destination's own buffer).  Indexes outside
the destination are skipped."""

from __future__ import annotations

from ....dtypes import DType
from ....egraph.llir import LOp
from ....symbolic import Expr, prod
from .region import Region, region_kernel
from .spec import KernelSpec
from .types import storage_type, store
from .writer import Writer, finish

__all__ = ["scatter_kernel", "RENDERERS"]


def scatter_writes(dialect: str, op: LOp, in_dtypes: list[DType], views: list, idx: tuple, src: tuple,
                   count: Expr, label: str) -> KernelSpec:
    """``out_flat[idx(i)] = src(i)`` for each i < ``count``: ``idx`` and ``src`` region trees over
    the op's operands (operand k is ``in{k}``, read through ``views[k]``; operand 0, the
    destination, is ``out`` itself); indexes outside ``out`` are skipped."""
    w = Writer(dialect)
    w.index_vars.add("_ls_item")
    w.push()
    region = Region(w, views, list(in_dtypes), False, names=[f"in{k}" for k in range(len(in_dtypes))])
    at = region.value(idx, "_ls_item")
    value = region.value(src, "_ls_item")
    n_out = w.expr(prod(op.shape))
    w.line(f"const long long at = (long long){at};")
    w.line(f"if (at >= 0 && at < {n_out}) out[at] = {store(op.dtype, value)};")
    body = w.pop()
    bufs = [("out", storage_type(op.dtype), True, "out")] + [
        (f"in{k}", storage_type(d), False, k) for k, d in enumerate(in_dtypes) if k >= 1]
    return finish(w, dialect, "scatter", bufs, count, body, label)


def scatter_kernel(dialect: str, op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """``out_flat[idx[i]] = src[i]`` over the src elements.  (Out of place, the dest is copied
    into ``out`` first by a region kernel.)"""
    iv, sv = op.args["indexes_view"], op.args["src_view"]
    return scatter_writes(dialect, op, in_dtypes, [None, iv, sv], ("leaf", 1), ("leaf", 2), prod(iv.shape), "scatter")


def _scatter(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    copy = region_kernel(dialect, ("leaf", 0), [op.args["dest_view"]], [in_dtypes[0]], op.dtype, op.shape,
                         "copy", operands=[0])
    return [copy, scatter_kernel(dialect, op, in_dtypes)]


def _scatter_in_place(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [scatter_kernel(dialect, op, in_dtypes)]


def scatter_region_kernel(dialect: str, op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """``ScatterRegion``: ``out_flat[indexes(i)] = body(i)`` for each element i of ``shape`` (both
    region bodies evaluated at i, the values never stored on their own).  Operands: the
    destination, then the bodies' leaves (leaf k reads operand k)."""
    return scatter_writes(dialect, op, in_dtypes, [None, *op.leaf_views], op.args["indexes"], op.args["body"],
                          prod(op.args["shape"]), "scatter_region")


def _scatter_region(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [scatter_region_kernel(dialect, op, in_dtypes)]


RENDERERS = {"Scatter": _scatter, "ScatterInPlace": _scatter_in_place, "ScatterRegion": _scatter_region}
