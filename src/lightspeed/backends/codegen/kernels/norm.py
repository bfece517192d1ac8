"""The norm family: ``RowNorm`` (RMSNorm of each row, ``codegen/norms.egg``; semantics in
``codegen/fused.py``) as one kernel in both dialects: a row's sum of squares, then the row scaled,
in float; ``RowNormAdd`` the same with a residual added as the row is written.

cuda (kind ``row``): one block of 8 warps per row (the sum split over its 256 threads, merged by
warp shuffles and shared memory), then the same threads write the row.  c: one row per item.
"""

from __future__ import annotations

import os

from ....dtypes import DType, uint8
from ....egraph.llir import LOp
from ....errors import LightspeedError
from ....symbolic import Expr, const, prod, sym
from .block_matmul import (
    BLOCK_CODE,
    BLOCK_TYPES,
    KERNEL_QTYPE,
    PARTS,
    block_row_bytes,
    block_split,
    group_dot_cuda,
    parts_loops,
    parts_of,
)
from .matmul import ROW_GROUP, gate_constants, gated_mul, lane_sum8, rows_one_by_one, scatter_store
from .matmul_rows import LOAD8
from .region import Region
from .spec import KernelSpec
from .types import half_of, load, storage_type, store, store_pair
from .writer import WARP, Point, Writer, block_sums, finish, split_products, weight16, weight_prefetch

__all__ = ["row_norm_kernel", "layer_norm_kernel", "norm_product_kernel", "RENDERERS"]

WARPS = 8


def _row_kernel(dialect: str, op: LOp, in_dtypes: list[DType], views: list[str]
                ) -> tuple[Writer, Expr, str, Region, str, str]:
    """What the row kernels (kind ``row``: a block of WARPS warps per row on cuda, a row per item
    in c) open with: the writer with its body opened, n, n's text, the region of the per-row and
    per-element leaves named ``views`` (operands 1, 2, ...; x is ``in0``, its row ``_ls_xr``), and
    the row loop's first index and step."""
    w = Writer(dialect)
    n = op.args["n"]
    w.index_vars |= {"_ls_item", "_ls_j", "_ls_z"}
    nn = w.expr(n)
    w.push()
    region = Region(w, [op.args[v] for v in views], in_dtypes[1:1 + len(views)], False,
                    names=[f"in{i + 1}" for i in range(len(views))])
    w.line(f"const {storage_type(in_dtypes[0])}* _ls_xr = in0 + _ls_item * {nn};")
    first, step = (f"(slice * {WARP} + lane)", str(WARP * WARPS)) if dialect == "cuda" else ("0", "1")
    return w, n, nn, region, first, step


def _block_sum(w: Writer, var: str, declare: bool = True) -> None:
    """cuda: ``var`` summed over the row's block (warp shuffles, then the warps' sums through
    shared memory in warp order: the same order every run); ``declare`` the shared array."""
    w.line(f"for (int o = {WARP // 2}; o > 0; o >>= 1) {var} += __shfl_xor_sync(0xffffffffu, {var}, o);")
    if declare:
        w.line(f"__shared__ float _ls_part[{WARPS}];")
    w.line(f"if (lane == 0) _ls_part[slice] = {var};")
    w.line("__syncthreads();")
    w.line(f"{var} = 0.0f;")
    w.line(f"for (int u = 0; u < {WARPS}; u++) {var} += _ls_part[u];")
    w.line("__syncthreads();")


def _element_point(view, n) -> Point | str:
    """Where a per-element leaf of a row kernel is read: from the coordinates (row, j) when its view
    is [rows, n] (no division), else at the flat index ``_ls_z``."""
    if len(view.shape) == 2 and view.shape[1] == n:
        return Point("_ls_z", sym("_ls_z"), tuple(view.shape), (sym("_ls_item"), sym("_ls_j")))
    return "_ls_z"


def row_norm_kernel(dialect: str, op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """``RowNorm``, or ``RowNormAdd``: the same row with the residual ``in4`` (read at the output's
    flat index) added as it is written."""
    dx, dc, de, dw = in_dtypes[:4]
    add = op.op == "RowNormAdd"
    w, n, nn, region, first, step = _row_kernel(dialect, op, in_dtypes, ["c_view", "eps_view", "w_view"])
    rows = prod(op.shape) // n
    w.line("float _ls_ss = 0.0f;")
    chunks, woff, per = _vector_chunks(dialect, op, in_dtypes)

    def each_chunk(unroll: bool) -> None:  # opens "for each of the thread's chunks in the row {"
        if unroll:
            w.line("  #pragma unroll")
        w.line(f"  for (int _ls_c = 0; _ls_c < {chunks}; _ls_c++) {{")
        w.line(f"    const long long _ls_j8 = ((long long)_ls_c * {WARP * WARPS} + slice * {WARP} + lane) * {per};")
    if chunks:  # 16-byte chunks of the row held in registers: one load of x, no second pass over it
        w.line(f"uint4 _ls_xq[{chunks}];")
        residual = " | (unsigned long long)in4" if add else ""
        w.line(f"const bool _ls_vec = (((unsigned long long)in0 | (unsigned long long)out{residual} | "
               f"(unsigned long long)(in3 + {w.expr(woff)})) & 15) == 0;")
        w.line("if (_ls_vec) {")
        each_chunk(True)
        w.line(f"    if (_ls_j8 < {nn}) {{")
        w.line("      _ls_xq[_ls_c] = *(const uint4*)(_ls_xr + _ls_j8);")
        for e in range(per):
            w.line(f"      {{ const float v = {_chunk_element(dx, '_ls_xq[_ls_c]', e)}; _ls_ss += v * v; }}")
        w.line("    }")
        w.line("  }")
        w.line("} else {  // (unaligned: the same sums in the same order, element by element)")
        each_chunk(False)
        w.line(f"    if (_ls_j8 < {nn}) for (int _ls_e = 0; _ls_e < {per}; _ls_e++) {{ "
               f"const float v = {load(dx, '_ls_xr[_ls_j8 + _ls_e]')}; _ls_ss += v * v; }}")
        w.line("  }")
        w.line("}")
    else:
        if dialect == "cuda":  # a thread's loads in flight together (region.py's reductions: the same)
            w.line("#pragma unroll 4")
        w.line(f"for (long long _ls_j = {first}; _ls_j < {nn}; _ls_j += {step}) {{ "
               f"const float v = {load(dx, '_ls_xr[_ls_j]')}; _ls_ss += v * v; }}")
    if dialect == "cuda":
        _block_sum(w, "_ls_ss")
    c = region.leaf(0, "_ls_item")
    e = region.leaf(1, "_ls_item")
    w.line(f"const float _ls_r = 1.0f / sqrtf(_ls_ss * (float){c} + (float){e});")
    if chunks:
        w.line("if (_ls_vec) {")
        each_chunk(True)
        w.line(f"    if (_ls_j8 < {nn}) {{")
        w.line(f"      const uint4 _ls_wq = *(const uint4*)(in3 + {w.expr(woff)} + _ls_j8);")
        outs = [f"{_chunk_element(dx, '_ls_xq[_ls_c]', e)} * _ls_r * {_chunk_element(in_dtypes[3], '_ls_wq', e)}"
                for e in range(per)]
        if add:
            w.line(f"      const uint4 _ls_rq = *(const uint4*)(in4 + _ls_item * {nn} + _ls_j8);")
            outs = [f"({v}) + {_chunk_element(in_dtypes[4], '_ls_rq', e)}" for e, v in enumerate(outs)]
        if per == 4:  # float32: a word an element
            words = ", ".join(f"__float_as_uint({v})" for v in outs)
        else:
            words = ", ".join(store_pair(op.dtype, outs[2 * i], outs[2 * i + 1]) for i in range(4))
        w.line(f"      *(uint4*)(out + _ls_item * {nn} + _ls_j8) = make_uint4({words});")
        w.line("    }")
        w.line("  }")
        w.line("} else {")
    w.line(f"for (long long _ls_j = {first}; _ls_j < {nn}; _ls_j += {step}) {{")
    w.line(f"  const long long _ls_z = _ls_item * {nn} + _ls_j;")
    w.push()
    wv = region.leaf(2, _element_point(op.args["w_view"], n))
    inner = w.pop()
    w.scope.lines.extend("  " + ln for ln in inner)
    xv = load(dx, "_ls_xr[_ls_j]")
    value = f"{xv} * _ls_r * (float){wv}" + (f" + {load(in_dtypes[4], 'in4[_ls_z]')}" if add else "")
    w.line(f"  out[_ls_z] = {store(op.dtype, value)};")
    w.line("}")
    if chunks:
        w.line("}")
    body = w.pop()
    bufs = [("out", storage_type(op.dtype), True, "out"), ("in0", storage_type(dx), False, 0),
            ("in1", storage_type(dc), False, 1), ("in2", storage_type(de), False, 2),
            ("in3", storage_type(dw), False, 3)]
    if add:
        bufs.append(("in4", storage_type(in_dtypes[4]), False, 4))
    return finish(w, dialect, "row", bufs, rows, body, "row_norm_add" if add else "row_norm",
                  item_cost=(3 if add else 2) * n + const(1))


def layer_norm_kernel(dialect: str, op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """``LayerNormRows`` (semantics in ``codegen/fused.py``): per row, the mean, then the centred
    sum of squares, then the row written as (x - mean) * r * w + b, in float; three passes over
    the row (it stays in the cache). cuda: a block of 8 warps per row, each sum merged by warp
    shuffles and shared memory in a fixed order; c: one row per item."""
    dx = in_dtypes[0]
    w, n, nn, region, first, step = _row_kernel(dialect, op, in_dtypes,
                                                ["cm_view", "c_view", "eps_view", "w_view", "b_view"])
    rows = prod(op.shape) // n

    def row_sum(var: str, term: str, declare: bool) -> None:  # var = sum over the row of term(v), v = x[j]
        w.line(f"float {var} = 0.0f;")
        if dialect == "cuda":
            w.line("#pragma unroll 4")
        w.line(f"for (long long _ls_j = {first}; _ls_j < {nn}; _ls_j += {step}) {{ "
               f"const float v = {load(dx, '_ls_xr[_ls_j]')}; {var} += {term}; }}")
        if dialect == "cuda":
            _block_sum(w, var, declare)

    row_sum("_ls_s", "v", True)
    cm = region.leaf(0, "_ls_item")
    w.line(f"const float _ls_mean = _ls_s * (float){cm};")
    row_sum("_ls_ss", "(v - _ls_mean) * (v - _ls_mean)", False)
    c = region.leaf(1, "_ls_item")
    e = region.leaf(2, "_ls_item")
    w.line(f"const float _ls_r = 1.0f / sqrtf(_ls_ss * (float){c} + (float){e});")
    w.line(f"for (long long _ls_j = {first}; _ls_j < {nn}; _ls_j += {step}) {{")
    w.line(f"  const long long _ls_z = _ls_item * {nn} + _ls_j;")
    w.push()
    wv, bv = region.leaf(3, _element_point(op.args["w_view"], n)), region.leaf(4, _element_point(op.args["b_view"], n))
    inner = w.pop()
    w.scope.lines.extend("  " + ln for ln in inner)
    xv = load(dx, "_ls_xr[_ls_j]")
    w.line(f"  out[_ls_z] = {store(op.dtype, f'({xv} - _ls_mean) * _ls_r * (float){wv} + (float){bv}')};")
    w.line("}")
    body = w.pop()
    bufs = [("out", storage_type(op.dtype), True, "out")] + [
        (f"in{i}", storage_type(d), False, i) for i, d in enumerate(in_dtypes)]
    return finish(w, dialect, "row", bufs, rows, body, "layer_norm", item_cost=3 * n + const(1))


def _layer_norm(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [layer_norm_kernel(dialect, op, in_dtypes)]


VECTOR_CHUNKS = 8  # at most this many 16-byte chunks of a row a thread holds (rows up to 16384 wide)


# LIGHTSPEED_CUDA_NORM_F32_CHUNKS=1: float32 RowNorms hold their row in registers too (16-byte
# chunks of 4 floats: one load of x, no second pass over it), as the 16-bit ones do.  The scalar
# float32 kernel reads x twice (two trips to L2 a row): Gemma 3's block step (float32 activations)
# spent 3.3 us a row norm against bf16's 2.45 (H100, thirty-second session, PDL off).  Its sums go
# by chunk (4 adjacent elements a thread), not by element.  On by default since the thirty-fourth
# session (the block step 0.845 -> 0.817 ms with it alone, H100); 0: the element loop.
NORM_F32_CHUNKS = os.environ.get("LIGHTSPEED_CUDA_NORM_F32_CHUNKS", "1") == "1"


def _vector_chunks(dialect: str, op: LOp, in_dtypes: list[DType]) -> tuple[int, Expr | None, int]:
    """(16-byte chunks of a row each thread holds, the weight row's offset, elements a chunk)
    where a cuda RowNorm reads and writes 16-bit floats (8 a chunk; float32 with
    :data:`NORM_F32_CHUNKS`: 4), its width is a multiple of the chunk's and its weight one
    contiguous row of the same type broadcast over the rows; else (0, None, 0).  One element a
    load, two passes over x: a prompt's norm over 512 x 2048 bf16 took 5.9 us on an H100
    (twenty-fourth session)."""
    n, dx, dw = op.args["n"], in_dtypes[0], in_dtypes[3]
    sixteen = ("bfloat16", "float16")
    if op.op == "RowNormAdd" and in_dtypes[4] != op.dtype:  # its residual read in chunks of out's type
        return 0, None, 0
    if all(d.name in sixteen for d in (op.dtype, dx, dw)):
        per = 8
    elif NORM_F32_CHUNKS and all(d.name == "float32" for d in (op.dtype, dx, dw)):
        per = 4
    else:
        return 0, None, 0
    if dialect != "cuda" or not n.is_const or n.value % per:
        return 0, None, 0
    chunks = -(-n.value // (per * WARP * WARPS))
    woff = _row_weight(op.args["w_view"], n)
    return (chunks, woff, per) if chunks <= VECTOR_CHUNKS and woff is not None else (0, None, 0)


def _chunk_element(d: DType, word4: str, e: int) -> str:
    """Element ``e`` of a 16-byte chunk ``word4`` (a ``uint4``) of ``d`` values, as a float."""
    if d.name == "float32":
        return f"__uint_as_float({word4}.{'xyzw'[e]})"
    return load(d, half_of(word4, e))


def _row_norm(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [row_norm_kernel(dialect, op, in_dtypes)]


# 16-byte chunks of the normed products (cuda): elements per chunk, the prelude's x·w·b and x·x dots
_VECTOR3 = {"bfloat16": (8, "ls_dot8_bf16_3", "ls_dot8_bf16"), "float16": (8, "ls_dot8_f16_3", "ls_dot8_f16"),
            "float32": (4, "ls_dot4_f32_3", "ls_dot4_f32")}


def _row_weight(view, k) -> Expr | None:
    """The norm weight's offset when its view reads one contiguous row for every row of A (a
    weight of k values broadcast over the rows), else None."""
    if len(view.views) != 1:
        return None
    v = view.views[0]
    if v.mask is not None or not v.shape or v.shape[-1] != k or v.strides[-1] != 1:
        return None
    if any(s != 0 and d != 1 for s, d in zip(v.strides[:-1], v.shape[:-1])):
        return None
    return v.offset


def norm_product_kernel(dialect: str, op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """``NormMatmul`` / ``NormMatmulGLU`` / ``NormMatmulGeGLU`` / ``NormMatmulScatter`` (semantics in
    ``codegen/fused.py``): per output (i, j) -- a warp on cuda, an item in c -- the sum of squares
    of x's row i and the dot products of x·w with B's (G's and U's) row j in one pass, then the
    row's 1/sqrt(ss * c + eps) applied to the sums (the normed A is never formed)."""
    a = op.args
    kind = op.op
    glu, scatter = kind in ("NormMatmulGLU", "NormMatmulGeGLU"), kind == "NormMatmulScatter"
    base = 1 if scatter else 0  # operand of x: after the destination for the scatter
    ix, ic, ie, iw = base, base + 1, base + 2, base + 3
    weights = [base + 4, base + 5] if glu else [base + 4]
    dx, dwt = in_dtypes[ix], in_dtypes[iw]
    w = Writer(dialect)
    m, n, k = a["m"], a["n"], a["k"]
    w.index_vars |= {"_ls_item", "_ls_l"}
    nn, kk = w.expr(n), w.expr(k)
    # weights held as GGUF blocks (block_norms.egg, cuda): a warp per output, groups of 32 decoded
    # in registers (block_matmul.group_dot_cuda)
    qtypes = [in_dtypes[q].name for q in weights if in_dtypes[q].block]
    if qtypes:
        _check_block_weights(dialect, op, qtypes, len(weights), fields_of(glu))
    vec = None if qtypes else (
        _VECTOR3.get(dx.name) if all(d == dx for d in [dwt, *(in_dtypes[q] for q in weights)]) else None)
    woff = _row_weight(a["w_view"], k)
    # cuda with 16-byte rows: a warp takes ROW_GROUP rows of one column, its weight rows read once
    grouped = dialect == "cuda" and vec is not None and woff is not None and ROW_GROUP > 1
    c_vector = dialect == "c" and woff is not None and all(
        d.name in LOAD8 for d in [dx, dwt, *(in_dtypes[q] for q in weights)])
    # c, NormMatmul: an item is two columns j, j + 1 of row i (a loop nest over (pair, row), rows
    # innermost), the row's squares and its x·w summed once for both -- each column's sums in the
    # one-column order, so rows stay batch-invariant
    paired = c_vector and kind == "NormMatmul"
    # cuda, few outputs over a long k: a block of warps per output (the decode's q, k, v)
    split = split_products(dialect, n, k, dwt.itemsize) if vec is not None and woff is not None and not grouped else 0
    codes = [BLOCK_CODE[_kernel_qtype(q)] for q in qtypes]
    # each lane parts of groups (block_matmul.BLOCK_PARTS) where the weights' codes allow them
    block_parts = bool(qtypes) and parts_of(codes) > 1 and dx.name == "float32" and dwt.name == "float32" \
        and woff is not None
    if qtypes and dialect == "cuda":  # a block of warps per output (block_matmul.BLOCK_SPLIT)
        split = block_split(n, int(k.value) // 32 * (PARTS if block_parts else 1))
    axes = None
    w.push()
    if grouped:
        w.line(f"const long long _ls_nj = _ls_item % {nn}, _ls_g0 = (_ls_item / {nn}) * {ROW_GROUP};")
    elif paired:
        axes = [("_ls_np", (n + 1) // 2), ("_ls_mi", m)]
        w.index_vars |= {"_ls_np", "_ls_mi"}
        w.line("const long long _ls_nj = 2 * _ls_np;")
        w.line(f"const int _ls_two = _ls_nj + 1 < {nn};")
    elif dialect == "c":
        # a loop nest over (column, row), rows innermost: a column's weight rows (the gated
        # pair's two) are read once for every row of x, which stays in the cache; item by item in
        # row order every prompt row streamed the whole weight matrices again (the gated product of
        # a 256-token SmolLM2-shaped prefill: 615 of 1109 ms, twentieth session)
        axes = [("_ls_nj", n), ("_ls_mi", m)]
        w.index_vars |= {"_ls_nj", "_ls_mi"}
    else:
        w.line(f"const long long _ls_nj = _ls_item % {nn}, _ls_mi = _ls_item / {nn};")
    names = {i: f"in{i}" for i in range(len(in_dtypes))}
    rows = []  # B's (G's, U's) row j
    fields = fields_of(glu)
    for q, (f_s, f_o) in zip(weights, fields):
        if qtypes:  # a row of blocks: bytes (offset 0, rows k apart: _check_block_weights)
            w.line(f"const unsigned char* rb{len(rows)} = (const unsigned char*){names[q]} + _ls_nj * "
                   f"{block_row_bytes(_kernel_qtype(in_dtypes[q].name), int(k.value))}LL;")
        else:
            w.line(f"const {storage_type(in_dtypes[q])}* rb{len(rows)} = {names[q]} + {w.expr(a[f_o])} + "
                   f"_ls_nj * {w.expr(a[f_s])};")
        rows.append(f"rb{len(rows)}")
    if paired:  # column j + 1 (j again when n is odd: computed, not stored)
        w.line(f"const {storage_type(in_dtypes[weights[0]])}* rb1 = _ls_two ? rb0 + {w.expr(a['b_stride_n'])} : rb0;")
        rows.append("rb1")
        weights = [weights[0], weights[0]]
    if grouped:
        w.push()  # one row's code (_ls_mi), run for each row of a group that cannot go together
    w.line(f"const {storage_type(dx)}* rx = {names[ix]} + _ls_mi * {kk};")
    accs = [f"acc{q}" for q in range(len(rows))]
    w.line("float ss = 0.0f" + "".join(f", {acc} = 0.0f" for acc in accs) + ";")
    region = Region(w, [a["c_view"], a["eps_view"], a["w_view"]], [in_dtypes[ic], in_dtypes[ie], dwt], False,
                    names=[names[ic], names[ie], names[iw]])
    first, step = ("lane", WARP) if dialect == "cuda" else ("0", 1)
    if split:  # the block's threads along k
        first, step = f"(slice * {WARP} + lane)", WARP * split

    def scalar(start: str | None, indent: str) -> None:  # any layout: the weight through its view
        init = "" if start is None else f"long long _ls_l = {start}"  # None: on from _ls_l
        w.line(f"{indent}for ({init}; _ls_l < {kk}; _ls_l += {step}) {{")
        w.push()
        wv = region.leaf(2, Point("_ls_z", sym("_ls_mi") * k + sym("_ls_l"), (m, k), (sym("_ls_mi"), sym("_ls_l"))))
        inner = w.pop()
        w.scope.lines.extend(indent + "  " + ln for ln in inner)
        w.line(f"{indent}  const float xv = {load(dx, 'rx[_ls_l]')}, xw = xv * (float){wv};")
        w.line(f"{indent}  ss += xv * xv;")
        for r, acc, q in zip(rows, accs, weights):
            w.line(f"{indent}  {acc} += xw * {load(in_dtypes[q], f'{r}[_ls_l]')};")
        w.line(f"{indent}}}")

    if block_parts:  # x·w of the part's 8 weights, then each row's
        nb = int(k.value) // 32
        w.line(f"const float* rw = {names[iw]} + {w.expr(woff)};")
        parts_loops(w, codes[0], nb, list(zip(rows, accs)), "rx", norm="rw", step=str(step), first=first)
    elif qtypes:  # each lane whole groups of 32: x·w of the group in registers, then each row's blocks
        w.line(f"for (long long g = {first}; g < {int(k.value) // 32}; g += {step}) {{")
        w.line("  float x[32];")
        if dx.name == "float32" and dwt.name == "float32" and woff is not None:
            # float4 loads of x and of the norm weight's row where both are 16-byte aligned
            w.line("  const float4* xv4 = (const float4*)(rx + 32 * g);")
            w.line(f"  const float4* wv4 = (const float4*)({names[iw]} + {w.expr(woff)} + 32 * g);")
            w.line("  if (((((unsigned long long)xv4) | ((unsigned long long)wv4)) & 15) == 0) {")
            w.line("    #pragma unroll")
            w.line("    for (int t = 0; t < 8; t++) {")
            w.line("      const float4 a4 = xv4[t], b4 = wv4[t];")
            w.line("      ss += a4.x * a4.x + a4.y * a4.y + a4.z * a4.z + a4.w * a4.w;")
            w.line("      x[4 * t] = a4.x * b4.x; x[4 * t + 1] = a4.y * b4.y; x[4 * t + 2] = a4.z * b4.z; "
                   "x[4 * t + 3] = a4.w * b4.w;")
            w.line("    }")
            w.line("  } else")
        w.line("  for (int t = 0; t < 32; t++) {")
        w.line("    const long long _ls_l = 32 * g + t;")
        w.push()
        wv = region.leaf(2, Point("_ls_z", sym("_ls_mi") * k + sym("_ls_l"), (m, k), (sym("_ls_mi"), sym("_ls_l"))))
        inner = w.pop()
        w.scope.lines.extend("    " + ln for ln in inner)
        w.line(f"    const float xv = {load(dx, 'rx[_ls_l]')};")
        w.line(f"    ss += xv * xv; x[t] = xv * (float){wv};")
        w.line("  }")
        for r, acc, q in zip(rows, accs, weights):
            group_dot_cuda(w, BLOCK_CODE[_kernel_qtype(in_dtypes[q].name)], int(k.value) // 32, r, acc)
        w.line("}")
    elif dialect == "cuda" and vec is not None and woff is not None:
        width, dot3, dot2 = vec
        w.line(f"const {storage_type(dwt)}* rw = {names[iw]} + {w.expr(woff)};")
        ptrs = " | ".join(f"(unsigned long long){p}" for p in ["rx", "rw", *rows])
        w.line(f"if ({kk} % {width} == 0 && (({ptrs}) & 15) == 0) {{")
        w.line("  #pragma unroll 4")
        w.line(f"  for (long long _ls_l = {first} * {width}; _ls_l < {kk}; _ls_l += {step * width}) {{")
        w.line("    const uint4 xv = *(const uint4*)(rx + _ls_l), wv = *(const uint4*)(rw + _ls_l);")
        w.line(f"    ss += {dot2}(xv, xv);")
        for r, acc in zip(rows, accs):
            w.line(f"    {acc} += {dot3}(xv, wv, {weight16(r + ' + _ls_l')});")
        w.line("  }")
        w.line("} else {")
        scalar(first, "  ")
        w.line("}")
    elif c_vector:
        # 8-lane partial sums, two sets (the chains of fused multiply-adds interleave), the same
        # order for every output of every row count: the scalar loop's float sums cannot be
        # vectorised without reassociating them (~8 GFLOP/s on a prompt's q/k/v products)
        lx, lw = LOAD8[dx.name], LOAD8[dwt.name]
        w.line(f"const {storage_type(dwt)}* rw = {names[iw]} + {w.expr(woff)};")
        parts = ["s", *(f"a{q}" for q in range(len(rows)))]
        w.line("ls_v8 " + ", ".join(f"{p}{h} = {{0}}" for p in parts for h in (0, 1)) + "; long long _ls_l = 0;")
        w.line(f"for (; _ls_l + 16 <= {kk}; _ls_l += 16) {{")
        for h in (0, 1):
            w.line(f"  {{ const ls_v8 xv = {lx}(rx + _ls_l + {8 * h}), xw = xv * {lw}(rw + _ls_l + {8 * h}); "
                   f"s{h} += xv * xv;" + "".join(
                       f" a{q}{h} += xw * {LOAD8[in_dtypes[wq].name]}({r} + _ls_l + {8 * h});"
                       for q, (r, wq) in enumerate(zip(rows, weights))) + " }")
        w.line("}")
        w.line(f"if (_ls_l + 8 <= {kk}) {{ const ls_v8 xv = {lx}(rx + _ls_l), xw = xv * {lw}(rw + _ls_l); "
               "s0 += xv * xv;" + "".join(f" a{q}0 += xw * {LOAD8[in_dtypes[wq].name]}({r} + _ls_l);"
                         for q, (r, wq) in enumerate(zip(rows, weights))) + " _ls_l += 8; }")
        for p in parts:
            w.line(f"{p}0 += {p}1;")
        w.line("ss = " + lane_sum8("s0") + ";" + "".join(f" {acc} = {lane_sum8(f'a{q}0')};"
                                                         for q, acc in enumerate(accs)))
        scalar(None, "")
    else:
        scalar(first, "")
    writer = ("lane == 0 && slice == 0" if split else "lane == 0") if dialect == "cuda" else "1"
    bufs = [("out", storage_type(op.dtype), True, "out")]
    bufs += [(names[i], "unsigned char" if in_dtypes[i].block else storage_type(in_dtypes[i]), False, i)
             for i in dict.fromkeys([ix, ic, ie, iw, *weights])]
    flat = f"(_ls_mi * {nn} + _ls_nj)"  # the output element (i, j)

    def emit_tail() -> list[tuple[str, str, bool, int]]:
        """The warp's reductions of ``ss`` and the sums, the row's scale, the store; the buffers."""
        if dialect == "cuda":
            sums = ["ss", *accs]
            w.line(f"for (int o = {WARP // 2}; o > 0; o >>= 1) {{ "
                   + " ".join(f"{v} += __shfl_xor_sync(0xffffffffu, {v}, o);" for v in sums) + " }")
            if split:
                block_sums(w, sums, split)
        c = region.leaf(0, "_ls_mi")
        e = region.leaf(1, "_ls_mi")
        w.line(f"const float r = 1.0f / sqrtf(ss * (float){c} + (float){e});")
        if glu:
            consts, const_bufs = gate_constants(op, in_dtypes, base + 6, names)
            w.line(f"if ({writer}) {{")
            value = gated_mul(w, op.dtype, f"{accs[0]} * r", f"{accs[1]} * r", consts, "  ")
            w.line(f"  out[{flat}] = {value};")
            w.line("}")
            return const_bufs
        if scatter:  # the element goes where the scatter puts it (the indexes' leaves: operands base + 5 on)
            return scatter_store(w, op, in_dtypes, base + 5, writer, flat, "acc0 * r")
        w.line(f"if ({writer}) out[{flat}] = {store(op.dtype, 'acc0 * r')};")
        if paired:
            w.line(f"if (_ls_two) out[{flat} + 1] = {store(op.dtype, 'acc1 * r')};")
        return []

    extra = emit_tail()
    if grouped:
        per_row = w.pop()
        width, dot3, dot2 = vec
        mm = w.expr(m)
        w.line(f"const long long _ls_rows = {mm} - _ls_g0 < {ROW_GROUP} ? {mm} - _ls_g0 : {ROW_GROUP};")
        w.line(f"const {storage_type(dwt)}* _ls_rw = {names[iw]} + {w.expr(woff)};")
        w.line(f"const {storage_type(dx)}* _ls_rx = {names[ix]} + _ls_g0 * {kk};")
        ptrs = " | ".join(f"(unsigned long long){p}" for p in ["_ls_rx", "_ls_rw", *rows])
        # every row's start is 16-byte aligned when the first is and a row is a multiple of 16 bytes
        w.line(f"if (_ls_rows == {ROW_GROUP} && {kk} % {width} == 0 && (({ptrs} | (unsigned long long)"
               f"({kk} * (long long)sizeof(*_ls_rx))) & 15) == 0) {{")
        w.line(f"  float _ls_ss[{ROW_GROUP}]" + "".join(f", _ls_{acc}[{ROW_GROUP}]" for acc in accs) + ";")
        w.line("  #pragma unroll")
        w.line(f"  for (int _ls_t = 0; _ls_t < {ROW_GROUP}; _ls_t++) {{ _ls_ss[_ls_t] = 0.0f;"
               + "".join(f" _ls_{acc}[_ls_t] = 0.0f;" for acc in accs) + " }")
        w.line(f"  for (long long _ls_l = lane * {width}; _ls_l < {kk}; _ls_l += {WARP * width}) {{")
        w.line("    const uint4 wv = *(const uint4*)(_ls_rw + _ls_l)"
               + "".join(f", bv{q} = {weight16(r + ' + _ls_l')}" for q, r in enumerate(rows)) + ";")
        w.line("    #pragma unroll")
        w.line(f"    for (int _ls_t = 0; _ls_t < {ROW_GROUP}; _ls_t++) {{")
        w.line(f"      const uint4 xv = *(const uint4*)(_ls_rx + _ls_t * {kk} + _ls_l);")
        w.line(f"      _ls_ss[_ls_t] += {dot2}(xv, xv);")
        for q, acc in enumerate(accs):
            w.line(f"      _ls_{acc}[_ls_t] += {dot3}(xv, wv, bv{q});")
        w.line("    }")
        w.line("  }")
        w.line("  #pragma unroll")
        w.line(f"  for (int _ls_t = 0; _ls_t < {ROW_GROUP}; _ls_t++) {{")
        w.line("    const long long _ls_mi = _ls_g0 + _ls_t;")
        w.line("    float ss = _ls_ss[_ls_t]" + "".join(f", {acc} = _ls_{acc}[_ls_t]" for acc in accs) + ";")
        emit_tail()
        w.line("  }")
        rows_one_by_one(w, per_row)
    body = w.pop()
    bufs += extra
    if qtypes:  # rows of blocks: bytes, offset 0 (_check_block_weights); the shortest row's length of each
        row_bytes = [block_row_bytes(_kernel_qtype(q), int(k.value)) for q in qtypes]
        prefetch = weight_prefetch(w, dialect, m, n, const(min(row_bytes)),
                                   [(names[q], uint8, const(0), const(b)) for q, b in zip(weights, row_bytes)], split)
    else:
        prefetch = weight_prefetch(w, dialect, m, n, k, [(names[q], in_dtypes[q], a[o], a[st])
                                                         for q, (st, o) in zip(weights, fields)], split)
    count = n * ((m + (ROW_GROUP - 1)) // ROW_GROUP) if grouped else m * ((n + 1) // 2) if paired else m * n
    return finish(w, dialect, "matmul_split" if split else "matmul_dot", bufs, count, body, kind.lower(), axes,
                  item_cost=(2 + len(rows)) * k,
                  before_wait=prefetch, warps=split, preludes=("ggml_blocks",) if qtypes else ())


def fields_of(glu: bool) -> list[tuple[str, str]]:
    """The (stride, offset) fields of a norm product's weight operands."""
    return [("g_stride_n", "g_offset"), ("u_stride_n", "u_offset")] if glu else [("b_stride_n", "b_offset")]


def _kernel_qtype(name: str) -> str:
    return KERNEL_QTYPE.get(name, name)


def _check_block_weights(dialect: str, op: LOp, qtypes: list[str], n_weights: int,
                         fields: list[tuple[str, str]]) -> None:
    """A norm product reads blocks only on cuda, every weight as blocks of a type the cuda decoders
    know, each weight whole (offset 0, rows k apart: block_norms.egg's products)."""
    a = op.args
    k = a["k"]
    if dialect != "cuda" or len(qtypes) != n_weights or not k.is_const or int(k.value) % 32:
        raise LightspeedError(f"kernel renderer: no {dialect} {op.op} over {'/'.join(qtypes)} blocks for "
                              f"this op (cuda only, every weight as blocks, a static k of whole groups)")
    for name in qtypes:
        if _kernel_qtype(name) not in BLOCK_TYPES:
            raise LightspeedError(f"kernel renderer: no cuda {name} block decoder for {op.op}")
    for stride, offset in fields:
        if a[offset] != 0 or a[stride] != k:
            raise LightspeedError(f"kernel renderer: {op.op} reads block weights whole (offset 0, rows k apart), "
                                  f"got {stride} {a[stride]}, {offset} {a[offset]}")


def _norm_product(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [norm_product_kernel(dialect, op, in_dtypes)]


RENDERERS = {"RowNorm": _row_norm, "RowNormAdd": _row_norm, "LayerNormRows": _layer_norm, "NormMatmul": _norm_product,
             "NormMatmulGLU": _norm_product, "NormMatmulGeGLU": _norm_product, "NormMatmulScatter": _norm_product}
