"""The scatter family: ``Scatter`` (the destination copied into the output, then the indexed
writes) and ``ScatterInPlace`` (the writes into the destination's own buffer).  Indexes outside
the destination are skipped."""

from __future__ import annotations

from ....dtypes import DType
from ....egraph.llir import LOp
from ....symbolic import prod
from .region import Region, region_kernel
from .spec import KernelSpec
from .types import storage_type, store
from .writer import Writer, finish

__all__ = ["scatter_kernel", "RENDERERS"]


def scatter_kernel(dialect: str, op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """``out_flat[idx[i]] = src[i]`` over the src elements; indexes outside ``out`` are skipped.
    (Out of place, the dest is copied into ``out`` first by a region kernel.)"""
    w = Writer(dialect)
    w.index_vars.add("_ls_item")
    w.push()
    iv, sv = op.args["indexes_view"], op.args["src_view"]
    # the scatter's own inputs: indexes and src (dest is ``out``)
    views = [iv, sv]
    dts = [in_dtypes[1], in_dtypes[2]]
    region = Region(w, views, dts, False)
    idx = region.leaf(0, "_ls_item")
    src = region.leaf(1, "_ls_item")
    n_out = w.expr(prod(op.shape))
    w.line(f"const long long at = (long long){idx};")
    w.line(f"if (at >= 0 && at < {n_out}) out[at] = {store(op.dtype, src)};")
    body = w.pop()
    bufs = [("out", storage_type(op.dtype), True, "out"), ("in0", storage_type(dts[0]), False, 1),
            ("in1", storage_type(dts[1]), False, 2)]
    return finish(w, dialect, "scatter", bufs, prod(iv.shape), body, "scatter")


def _scatter(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    copy = region_kernel(dialect, ("leaf", 0), [op.args["dest_view"]], [in_dtypes[0]], op.dtype, op.shape,
                         "copy", operands=[0])
    return [copy, scatter_kernel(dialect, op, in_dtypes)]


def _scatter_in_place(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [scatter_kernel(dialect, op, in_dtypes)]


def scatter_region_kernel(dialect: str, op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """``ScatterRegion``: ``out_flat[indexes(i)] = body(i)`` for each element i of ``shape`` (both
    region bodies evaluated at i, the values never stored on their own); indexes outside ``out``
    are skipped.  Operands: the destination (``out`` itself), then the bodies' leaves."""
    w = Writer(dialect)
    w.index_vars.add("_ls_item")
    w.push()
    # leaf k of a body is the op's operand k (1, 2, ...): views and names by operand position
    views = [None, *op.leaf_views]
    region = Region(w, views, list(in_dtypes), False, names=[f"in{k}" for k in range(len(in_dtypes))])
    idx = region.value(op.args["indexes"], "_ls_item")
    src = region.value(op.args["body"], "_ls_item")
    n_out = w.expr(prod(op.shape))
    w.line(f"const long long at = (long long){idx};")
    w.line(f"if (at >= 0 && at < {n_out}) out[at] = {store(op.dtype, src)};")
    body = w.pop()
    bufs = [("out", storage_type(op.dtype), True, "out")] + [
        (f"in{k}", storage_type(d), False, k) for k, d in enumerate(in_dtypes) if k >= 1]
    return finish(w, dialect, "scatter", bufs, prod(op.args["shape"]), body, "scatter_region")


def _scatter_region(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [scatter_region_kernel(dialect, op, in_dtypes)]


RENDERERS = {"Scatter": _scatter, "ScatterInPlace": _scatter_in_place, "ScatterRegion": _scatter_region}
