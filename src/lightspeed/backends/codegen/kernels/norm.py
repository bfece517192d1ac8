"""The norm family: ``RowNorm`` (RMSNorm of each row, ``codegen/norms.egg``; semantics in
``codegen/fused.py``) as one kernel in both dialects: a row's sum of squares, then the row scaled,
in float.

cuda (kind ``row``): one block of 8 warps per row (the sum split over its 256 threads, merged by
warp shuffles and shared memory), then the same threads write the row.  c: one row per item.
"""

from __future__ import annotations

from ....dtypes import DType
from ....egraph.llir import LOp
from ....symbolic import const, prod, sym
from .region import Region
from .spec import KernelSpec
from .types import load, storage_type, store
from .writer import WARP, Point, Writer, finish

__all__ = ["row_norm_kernel", "RENDERERS"]

WARPS = 8


def row_norm_kernel(dialect: str, op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    a = op.args
    dx, dc, de, dw = in_dtypes
    w = Writer(dialect)
    n = a["n"]
    rows = prod(op.shape) // n
    w.index_vars |= {"_ls_item", "_ls_j", "_ls_z"}
    nn = w.expr(n)
    w.push()
    region = Region(w, [a["c_view"], a["eps_view"], a["w_view"]], [dc, de, dw], False, names=["in1", "in2", "in3"])
    w.line(f"const {storage_type(dx)}* _ls_xr = in0 + _ls_item * {nn};")
    if dialect == "cuda":
        first, step = f"(slice * {WARP} + lane)", str(WARP * WARPS)
    else:
        first, step = "0", "1"
    w.line("float _ls_ss = 0.0f;")
    w.line(f"for (long long _ls_j = {first}; _ls_j < {nn}; _ls_j += {step}) {{ "
           f"const float v = {load(dx, '_ls_xr[_ls_j]')}; _ls_ss += v * v; }}")
    if dialect == "cuda":
        w.line(f"for (int o = {WARP // 2}; o > 0; o >>= 1) _ls_ss += __shfl_xor_sync(0xffffffffu, _ls_ss, o);")
        w.line(f"__shared__ float _ls_part[{WARPS}];")
        w.line("if (lane == 0) _ls_part[slice] = _ls_ss;")
        w.line("__syncthreads();")
        w.line("_ls_ss = 0.0f;")
        w.line(f"for (int u = 0; u < {WARPS}; u++) _ls_ss += _ls_part[u];")
        w.line("__syncthreads();")
    c = region.leaf(0, "_ls_item")
    e = region.leaf(1, "_ls_item")
    w.line(f"const float _ls_r = 1.0f / sqrtf(_ls_ss * (float){c} + (float){e});")
    w.line(f"for (long long _ls_j = {first}; _ls_j < {nn}; _ls_j += {step}) {{")
    w.line(f"  const long long _ls_z = _ls_item * {nn} + _ls_j;")
    w.push()
    # the weight at (row, j): from the coordinates when its view is [rows, n] (no division)
    wview = a["w_view"]
    at: Point | str = "_ls_z"
    if len(wview.shape) == 2 and wview.shape[1] == n:
        at = Point("_ls_z", sym("_ls_z"), tuple(wview.shape), (sym("_ls_item"), sym("_ls_j")))
    wv = region.leaf(2, at)
    inner = w.pop()
    w.scope.lines.extend("  " + ln for ln in inner)
    xv = load(dx, "_ls_xr[_ls_j]")
    w.line(f"  out[_ls_z] = {store(op.dtype, f'{xv} * _ls_r * (float){wv}')};")
    w.line("}")
    body = w.pop()
    bufs = [("out", storage_type(op.dtype), True, "out"), ("in0", storage_type(dx), False, 0),
            ("in1", storage_type(dc), False, 1), ("in2", storage_type(de), False, 2),
            ("in3", storage_type(dw), False, 3)]
    return finish(w, dialect, "row", bufs, rows, body, "row_norm", item_cost=2 * n + const(1))


def _row_norm(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [row_norm_kernel(dialect, op, in_dtypes)]


RENDERERS = {"RowNorm": _row_norm}
