"""The matmul family: the generic ``Matmul``/``MatmulAdd`` (any batch rank, operands by strides)
in both dialects.  C[*batch, i, j] = sum_l A[..] * B[..] (+ R), accumulated in the compute type.

cuda: one warp per output when both operands are contiguous along k (kind ``matmul_dot``, 16-byte
vector loads where k and the rows' addresses allow), else a block of 32 outputs of one row with k
split over 8 thread rows (``matmul_tile``).  c: a dot product per item in a loop nest walking B in
memory order (``matmul_dot``), or, when B's rows are contiguous along n, the row kernel of
:mod:`.matmul_rows`.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ....dtypes import DType
from ....egraph.llir import LOp
from ....errors import LightspeedError
from ....symbolic import Expr, prod, sym
from ..fused import gelu_gated
from .matmul_rows import LOAD8, batch_offset, matmul_rows_kernel, packable
from .region import Region, store_with_addend
from .spec import KernelSpec
from .types import load, storage_type, store
from .writer import (
    TILE_K,
    TILE_N,
    WARP,
    Point,
    Writer,
    batch_offsets,
    block_sums,
    finish,
    flat_of,
    loop_axes,
    split_products,
    vector_dot,
    weight16,
    weight_prefetch,
)

__all__ = ["matmul_kernel", "glu_kernel", "gather_matmul_kernel", "paired_dot_kernel", "paired_glu_kernel",
           "gate_constants", "gated_mul", "glu_label", "scatter_store", "stream_order", "RENDERERS", "VECTOR_DOT"]


def matmul_kernel(dialect: str, op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """``Matmul``/``MatmulAdd``: C[*batch, i, j] = sum_l A[..] * B[..] (+ R), accumulated in the
    compute type (float for float32/bfloat16/float16).  ``MatmulScatter``: C's element z stored at
    ``out[indexes(z)]`` (operands: the destination, A, B, then the indexes' leaves)."""
    a = op.args
    w = Writer(dialect)
    scatter = op.op == "MatmulScatter"
    ia, ib = (1, 2) if scatter else (0, 1)  # A's and B's operand positions
    da, db = in_dtypes[ia], in_dtypes[ib]
    ct = "double" if op.dtype.name == "float64" else "float"
    vec = VECTOR_DOT.get(da.name) if da == db and ct == "float" else None
    batch = list(a["batch"])
    m, n, k = a["m"], a["n"], a["k"]
    dot = (a["a_stride_k"] == 1 and a["b_stride_k"] == 1)
    if dialect == "c" and not dot and a["b_stride_n"] == 1 and not scatter:
        return matmul_rows_kernel(op, in_dtypes)  # the c dialect's row items (matmul_rows.py)
    if dialect == "c" and not scatter and packable(op, in_dtypes):
        return matmul_rows_kernel(op, in_dtypes, packed=True)  # B copied into a panel per item
    if (dialect == "c" and dot and not scatter and not batch and ct == "float" and da.name in LOAD8
            and db.name in LOAD8):
        return paired_dot_kernel(op, in_dtypes)
    mode = "matmul_dot" if dot else "matmul_tile"
    if dialect == "c":
        mode = "matmul_dot"
    # cuda, no batch, both operands contiguous along k: a warp takes ROW_GROUP rows of one column
    # and reads the column's weight row once for all of them (a batch of decode rows, a prompt)
    grouped = dialect == "cuda" and mode == "matmul_dot" and vec is not None and not batch and ROW_GROUP > 1
    # cuda, few long weight products (no batch, contiguous along k): a block of warps per output
    split = (split_products(dialect, n, k, db.itemsize)
             if mode == "matmul_dot" and vec is not None and not batch and not grouped else 0)
    if split:
        mode = "matmul_split"
    w.index_vars |= {"_ls_item"}
    nn, mm, kk = w.expr(n), w.expr(m), w.expr(k)
    w.push()
    axes: list[tuple[str, Expr]] | None = None
    if mode == "matmul_tile":  # _ls_item = (batch, row, column tile)
        tiles = w.expr((n + (TILE_N - 1)) // TILE_N)
        w.line(f"const long long _ls_nj = (_ls_item % {tiles}) * {TILE_N} + lane;")
        w.line(f"const long long _ls_mi = (_ls_item / {tiles}) % {mm};")
        w.line(f"const long long bi = _ls_item / ({tiles} * {mm});")
        count = prod(batch) * m * ((n + (TILE_N - 1)) // TILE_N)
    elif dialect == "c":
        # a loop nest over (batch, j, i): coordinates without divisions, and the rows of A (few in
        # decode, cache-resident in prefill) met again for each row of B (the weights, or the
        # cached keys), which is read once from memory
        count = prod(batch) * m * n
        axes, bcoords = loop_axes(batch, "_ls_b")
        axes = stream_order(axes + [("_ls_nj", n)], [*a["b_batch_strides"], a["b_stride_n"]]) + [("_ls_mi", m)]
        w.index_vars |= {name for name, _ in axes}
    elif grouped:  # _ls_item = (group of ROW_GROUP rows, column)
        w.line(f"const long long _ls_nj = _ls_item % {nn};")
        w.line(f"const long long _ls_g0 = (_ls_item / {nn}) * {ROW_GROUP};")
        count = n * ((m + (ROW_GROUP - 1)) // ROW_GROUP)
    else:
        w.line(f"const long long _ls_nj = _ls_item % {nn};")
        w.line(f"const long long _ls_mi = (_ls_item / {nn}) % {mm};")
        w.line(f"const long long bi = _ls_item / ({nn} * {mm});")
        count = prod(batch) * m * n
    off_a, off_b = w.expr(a["a_offset"]), w.expr(a["b_offset"])
    if axes is not None:
        w.line(f"const long long oa = {w.expr(batch_offset(a['a_offset'], bcoords, a['a_batch_strides']))}, "
               f"ob = {w.expr(batch_offset(a['b_offset'], bcoords, a['b_batch_strides']))};")
    elif grouped:
        w.line(f"const long long oa = {off_a}, ob = {off_b}, bi = 0;")
    else:  # batch offsets: unflatten bi over the batch dims
        w.line(f"long long oa = {off_a}, ob = {off_b}, rest = bi;")
        batch_offsets(w, batch, a["a_batch_strides"], a["b_batch_strides"])
    sam, sak, sbk, sbn = (w.expr(a[f]) for f in ("a_stride_m", "a_stride_k", "b_stride_k", "b_stride_n"))
    if grouped:
        w.push()  # one row's code (_ls_mi), run for each row of a group that cannot go together
    w.line(f"{ct} acc = 0;")
    valid_j = "_ls_nj < " + nn if mode == "matmul_tile" else "1"
    if mode == "matmul_tile":
        first, step = "slice", str(TILE_K)
    elif split:  # the block's threads along k
        first, step = f"(slice * {WARP} + lane)", str(WARP * split)
    elif dialect == "cuda":
        first, step = "lane", str(WARP)
    else:
        first, step = "0", "1"
    scalar = (f"for (long long l = {first}; l < {kk}; l += {step})\n"
              f"    acc += ({ct}){load(da, f'in0[oa + _ls_mi * {sam} + l * {sak}]')} * "
              f"({ct}){load(db, f'in1[ob + l * {sbk} + _ls_nj * {sbn}]')};")
    if dialect == "c" and dot and ct == "float":
        # 32 partial sums: the compiler keeps them in 4 SIMD registers, 4 independent chains of
        # fused multiply-adds (a float sum cannot be vectorised otherwise without reassociating
        # it; one chain waits on the multiply-add's latency), then 8 for the rest
        ra, rb = f"in0 + oa + _ls_mi * {sam}", f"in1 + ob + _ls_nj * {sbn}"
        w.line(f"const {storage_type(da)}* ra = {ra}; const {storage_type(db)}* rb = {rb};")
        if da.name in LOAD8 and db.name in LOAD8:
            # the same sums as the array form below, in vector-typed variables: the compiler keeps
            # them in registers (a float array of partial sums was spilled, ~3x slower on short k);
            # 16-bit floats widen 8 at a time, exactly
            la, lb = LOAD8[da.name], LOAD8[db.name]
            w.line("ls_v8 p0 = {0}, p1 = {0}, p2 = {0}, p3 = {0}; long long l = 0;")
            w.line(f"for (; l + 32 <= {kk}; l += 32) {{")
            for q in range(4):
                w.line(f"  p{q} += {la}(ra + l + {8 * q}) * {lb}(rb + l + {8 * q});")
            w.line("}")
            w.line(f"for (; l + 8 <= {kk}; l += 8) p0 += {la}(ra + l) * {lb}(rb + l);")
            w.line(f"for (; l < {kk}; l++) acc += {load(da, 'ra[l]')} * {load(db, 'rb[l]')};")
            w.line("p0 = (p0 + p1) + (p2 + p3);")
            w.line(f"acc += {lane_sum8('p0')};")
        else:
            w.line("float part[32] = {0}; long long l = 0;")
            w.line(f"for (; l + 32 <= {kk}; l += 32)")
            w.line(f"  for (int q = 0; q < 32; q++) part[q] += {load(da, 'ra[l + q]')} * {load(db, 'rb[l + q]')};")
            w.line(f"for (; l + 8 <= {kk}; l += 8)")
            w.line(f"  for (int q = 0; q < 8; q++) part[q] += {load(da, 'ra[l + q]')} * {load(db, 'rb[l + q]')};")
            w.line(f"for (; l < {kk}; l++) acc += {load(da, 'ra[l]')} * {load(db, 'rb[l]')};")
            w.line("for (int q = 0; q < 8; q++) part[q] = (part[q] + part[q + 8]) + (part[q + 16] + part[q + 24]);")
            w.line("acc += ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));")
    elif dialect == "cuda" and mode in ("matmul_dot", "matmul_split") and vec is not None:
        # both rows contiguous along k: 16-byte loads when k and both rows' addresses allow them
        width, dot = vec
        w.line(f"const {storage_type(da)}* ra = in0 + oa + _ls_mi * {sam};")
        w.line(f"const {storage_type(db)}* rb = in1 + ob + _ls_nj * {sbn};")
        w.line(f"if ({kk} % {width} == 0 && (((unsigned long long)ra | (unsigned long long)rb) & 15) == 0) {{")
        vector_dot(w, "  ", first, int(step), width, dot, kk)
        w.line("} else {")
        w.line("  " + scalar.replace("\n", "\n  "))
        w.line("}")
    else:
        w.line(f"if ({valid_j}) " + scalar)
    if dialect == "cuda" and mode in ("matmul_dot", "matmul_split"):
        w.line(f"for (int o = {WARP // 2}; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);")
        writer = "lane == 0"
        if split:
            block_sums(w, ["acc"], split)
            writer = "lane == 0 && slice == 0"
    elif mode == "matmul_tile":
        w.line(f"__shared__ {ct} part[{TILE_K}][{TILE_N}];")
        w.line("part[slice][lane] = acc;")
        w.line("__syncthreads();")
        w.line(f"if (slice == 0) for (int s = 1; s < {TILE_K}; s++) acc += part[s][lane];")
        w.line("__syncthreads();")
        writer = f"slice == 0 && _ls_nj < {nn}"
    else:
        writer = "1"
    if axes is not None:
        out_index = w.expr(flat_of([*bcoords, sym("_ls_mi"), sym("_ls_nj")], (*batch, m, n)))
    else:
        out_index = "(bi * " + mm + " + _ls_mi) * " + nn + " + _ls_nj"
    value = "acc"
    bufs = [("out", storage_type(op.dtype), True, "out"), ("in0", storage_type(da), False, ia),
            ("in1", storage_type(db), False, ib)]

    def emit_store() -> list[tuple[str, str, bool, str | int]]:  # the output element ``acc``; its buffers
        if scatter:  # the product's element goes where the scatter puts it (indexes: operands 3, ...)
            return scatter_store(w, op, in_dtypes, 3, writer, out_index, value)
        if "r_view" in a:  # MatmulAdd (or the cuda backend's LtMatmulAdd)
            at = None if axes is None else Point("_ls_oz", sym("_ls_oz"), (*batch, m, n),
                                                 (*bcoords, sym("_ls_mi"), sym("_ls_nj")))
            return [store_with_addend(w, a["r_view"], in_dtypes[2], f"if ({writer})", out_index,
                                      lambda r: store(op.dtype, f"({ct})(acc + ({ct}){r})"), at)]
        w.line(f"if ({writer}) out[{out_index}] = {store(op.dtype, value)};")
        return []

    extra = emit_store()
    if grouped:
        per_row = w.pop()
        _grouped_rows(w, vec, mm, kk, sam, sbn, da, db)
        emit_store()
        w.line("  }")
        rows_one_by_one(w, per_row)
    body = w.pop()
    bufs += extra
    prefetch = None
    if mode in ("matmul_dot", "matmul_split") and not batch:  # a weight product: its rows early
        prefetch = weight_prefetch(w, dialect, m, n, k, [("in1", db, a["b_offset"], a["b_stride_n"])], split)
    return finish(w, dialect, mode, bufs, count, body, "matmul", axes, k, before_wait=prefetch, warps=split)


# c, Matmul/MatmulAdd of a weight: rows of A an item takes for its two columns (LIGHTSPEED_NATIVE_DOT_ROWS,
# an A/B switch; each 8 of a column pair's B rows loaded once for all of them).  With more than 2 an
# output keeps one 8-lane chain (two, the halves of 16, the compiler reloaded B for every FMA: 4.8-5.2
# ms a launch for o and down at 256 tokens against 4.1-4.5); one chain, 3.40-3.46 against 3.61-3.75
# on the 2-core VM (twentieth session), but a decode row would then run 2 dependent chains: kept at 2
DOT_ROWS = int(os.environ.get("LIGHTSPEED_NATIVE_DOT_ROWS", "2"))
# c, MatmulGLU: rows of A an item takes for one column (LIGHTSPEED_NATIVE_GLU_ROWS, an A/B switch):
# each 8 of G's and U's rows loaded once for all of them, so A streams from the cache once per
# GLU_ROWS rows instead of per pair
GLU_ROWS = int(os.environ.get("LIGHTSPEED_NATIVE_GLU_ROWS", "4"))


def row_group_branches(w: Writer, mm: str, sam: str, a_type: str, sums: Callable[[list[int]], None],
                       group: int) -> None:
    """A row group's branches: rows i0 .. i0 + g - 1 for the g of them that exist (A's rows
    ``ra1`` ...), the full group first -- ``sums`` writes the same per-output code for any g."""
    for g in range(group, 0, -1):
        head = f"if (_ls_i0 + {g - 1} < {mm}) {{" if g == group else (
            f"}} else if (_ls_i0 + {g - 1} < {mm}) {{" if g > 1 else "} else {")
        w.line(head)
        for r in range(1, g):
            w.line(f"  const {a_type}* ra{r} = ra0 + {r} * {sam};")
        sums(list(range(g)))
    w.line("}")


def paired_dot_kernel(op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """The c dialect's weight product ``x @ W.T`` (no batch, both operands contiguous along k, 8-wide
    loads): an item is a tile of :data:`DOT_ROWS` rows i, i + 1, ... by two columns j, j + 1, in a
    loop nest over (column pair, row group), rows innermost -- each 8 of a row of A loaded once
    for both columns and each 8 of a weight row once for all the rows, so A streams from the
    caches once per column pair and B once per row group.  A group with fewer rows (the last of
    a prompt, a single-row batch: a decode step) runs the same code for those rows.  Each
    output's sum: two vector partial sums over k in 16s, the last 8 into the first, the last k % 8
    terms, then the lanes in a fixed tree -- the same arithmetic in every branch, so a row's
    outputs never depend on the rows or columns beside it (batch invariance)."""
    a = op.args
    w = Writer("c")
    da, db = in_dtypes[0], in_dtypes[1]
    m, n, k = a["m"], a["n"], a["k"]
    mm, nn, kk = w.expr(m), w.expr(n), w.expr(k)
    w.index_vars |= {"_ls_item", "_ls_np", "_ls_mp", "_ls_mi", "_ls_nj"}
    sam, sbn = w.expr(a["a_stride_m"]), w.expr(a["b_stride_n"])
    la, lb = LOAD8[da.name], LOAD8[db.name]
    rows_n = DOT_ROWS
    w.push()
    w.line(f"const long long _ls_j0 = 2 * _ls_np, _ls_i0 = {rows_n} * _ls_mp;")
    w.line(f"const {storage_type(da)}* ra0 = in0 + {w.expr(a['a_offset'])} + _ls_i0 * {sam};")
    w.line(f"const {storage_type(db)}* rb0 = in1 + {w.expr(a['b_offset'])} + _ls_j0 * {sbn};")
    w.line(f"const int _ls_two = _ls_j0 + 1 < {nn};")
    w.line(f"const {storage_type(db)}* rb1 = _ls_two ? rb0 + {sbn} : rb0;  /* n odd: the last column twice */")
    w.line("float " + ", ".join(f"acc{r}{c} = 0" for r in range(rows_n) for c in (0, 1)) + ";")

    def sums(rows: list[int]) -> None:  # the tile's sums for these rows of the pair (both columns)
        outs = [(r, c) for r in rows for c in (0, 1)]
        if rows_n > 2:  # one chain per output (4 x 2 of them keep the FMA pipes busy), in 8s
            w.line("  ls_v8 " + ", ".join(f"p{r}{c}0 = {{0}}" for r, c in outs) + "; long long l = 0;")
            w.line(f"  for (; l + 8 <= {kk}; l += 8) {{")
            w.line(f"    const ls_v8 b0 = {lb}(rb0 + l), b1 = {lb}(rb1 + l);")
            for r in rows:
                w.line(f"    {{ const ls_v8 x{r} = {la}(ra{r} + l); p{r}00 += x{r} * b0; p{r}10 += x{r} * b1; }}")
            w.line("  }")
            w.line(f"  for (; l < {kk}; l++) {{ "
                   + " ".join(f"acc{r}{c} += {load(da, f'ra{r}[l]')} * {load(db, f'rb{c}[l]')};" for r, c in outs)
                   + " }")
            for r, c in outs:
                w.line(f"  acc{r}{c} += {lane_sum8(f'p{r}{c}0')};")
            return
        w.line("  ls_v8 " + ", ".join(f"p{r}{c}{h} = {{0}}" for r, c in outs for h in (0, 1)) + "; long long l = 0;")
        w.line(f"  for (; l + 16 <= {kk}; l += 16) {{")
        for h in (0, 1):
            loads = [f"x{r} = {la}(ra{r} + l + {8 * h})" for r in rows]
            loads += [f"b{c} = {lb}(rb{c} + l + {8 * h})" for c in (0, 1)]
            w.line(f"    {{ const ls_v8 {', '.join(loads)}; "
                   + " ".join(f"p{r}{c}{h} += x{r} * b{c};" for r, c in outs) + " }")
        w.line("  }")
        loads = [f"x{r} = {la}(ra{r} + l)" for r in rows] + [f"b{c} = {lb}(rb{c} + l)" for c in (0, 1)]
        w.line(f"  if (l + 8 <= {kk}) {{ const ls_v8 {', '.join(loads)}; "
               + " ".join(f"p{r}{c}0 += x{r} * b{c};" for r, c in outs) + " l += 8; }")
        w.line(f"  for (; l < {kk}; l++) {{ "
               + " ".join(f"acc{r}{c} += {load(da, f'ra{r}[l]')} * {load(db, f'rb{c}[l]')};" for r, c in outs) + " }")
        for r, c in outs:
            w.line(f"  p{r}{c}0 += p{r}{c}1; acc{r}{c} += {lane_sum8(f'p{r}{c}0')};")

    row_group_branches(w, mm, sam, storage_type(da), sums, rows_n)
    bufs = [("out", storage_type(op.dtype), True, "out"), ("in0", storage_type(da), False, 0),
            ("in1", storage_type(db), False, 1)]
    extra = None
    for r, c in ((r, c) for r in range(rows_n) for c in (0, 1)):
        cond = " && ".join(x for x in (("_ls_two" if c else ""), (f"_ls_i0 + {r} < {mm}" if r else "")) if x)
        w.line(f"if ({cond}) {{" if cond else "{")
        w.push()
        w.line(f"const long long _ls_mi = _ls_i0 + {r}, _ls_nj = _ls_j0 + {c};")
        out_index = f"_ls_mi * {nn} + _ls_nj"
        acc = f"acc{r}{c}"
        if "r_view" in a:  # MatmulAdd
            at = Point("_ls_oz", sym("_ls_oz"), (m, n), (sym("_ls_mi"), sym("_ls_nj")))
            extra = store_with_addend(w, a["r_view"], in_dtypes[2], "if (1)", out_index,
                                      lambda v, acc=acc: store(op.dtype, f"(float)({acc} + (float){v})"), at)
        else:
            w.line(f"out[{out_index}] = {store(op.dtype, acc)};")
        inner = w.pop()
        w.scope.lines.extend("  " + ln for ln in inner)
        w.line("}")
    body = w.pop()
    if extra is not None:
        bufs.append(extra)
    groups = (m + (rows_n - 1)) // rows_n
    return finish(w, "c", "matmul_dot", bufs, groups * ((n + 1) // 2), body, "matmul",
                  [("_ls_np", (n + 1) // 2), ("_ls_mp", groups)], 2 * rows_n * k)


# cuda: rows of A one warp takes for a column of B (grouped weight products), 1 = a warp per
# output.  Off by default until measured on a GPU: the grouped path raises a kernel's registers
# for every row count (a 1B decode step's NormMatmulGLU 48 -> 97 at 4, 176 at 8: 5 -> 2 or 1
# blocks per SM), which may cost a decode step more than it saves a batch of rows
ROW_GROUP = max(1, int(os.environ.get("LIGHTSPEED_CUDA_ROW_GROUP", "1")))


def rows_one_by_one(w: Writer, per_row: list[str]) -> None:
    """A grouped kernel's other branch (closing the whole-group one): the group's rows each
    through the one-row code ``per_row`` (which reads ``_ls_mi``)."""
    w.line("} else for (int _ls_t = 0; _ls_t < _ls_rows; _ls_t++) {")
    w.line("  const long long _ls_mi = _ls_g0 + _ls_t;")
    w.scope.lines.extend("  " + ln for ln in per_row)
    w.line("}")


def _grouped_rows(w: Writer, vec: tuple[int, str], mm: str, kk: str, sam: str, sbn: str, da: DType,
                  db: DType) -> None:
    """The opening of a grouped product's item (rows _ls_g0 + t of A, column _ls_nj of B): when
    the group is whole and every row takes the 16-byte path, each 16 bytes of B's row loaded once
    and dotted with the group's rows, each row's sum in its own register; then, per row, the
    warp's reduction into ``acc`` (the caller stores it and closes the row loop and the branch).
    Each output's sums are exactly those of the one-row path (lane l's partial sums in the same
    order, the same shuffles), so a row's result never depends on the rows beside it."""
    width, dot8 = vec
    w.line(f"const long long _ls_rows = {mm} - _ls_g0 < {ROW_GROUP} ? {mm} - _ls_g0 : {ROW_GROUP};")
    w.line(f"const {storage_type(db)}* _ls_rb = in1 + ob + _ls_nj * {sbn};")
    w.line(f"const {storage_type(da)}* _ls_ra = in0 + oa + _ls_g0 * {sam};")
    w.line(f"if (_ls_rows == {ROW_GROUP} && {kk} % {width} == 0 && (((unsigned long long)_ls_ra | "
           f"(unsigned long long)_ls_rb | (unsigned long long)(({sam}) * (long long)sizeof(*_ls_ra))) & 15) == 0) {{")
    w.line(f"  float _ls_acc[{ROW_GROUP}];")
    w.line("  #pragma unroll")
    w.line(f"  for (int _ls_t = 0; _ls_t < {ROW_GROUP}; _ls_t++) _ls_acc[_ls_t] = 0.0f;")
    w.line("  #pragma unroll 2")
    w.line(f"  for (long long l = lane * {width}; l < {kk}; l += {WARP * width}) {{")
    w.line(f"    const uint4 _ls_bv = {weight16('_ls_rb + l')};")
    w.line("    #pragma unroll")
    w.line(f"    for (int _ls_t = 0; _ls_t < {ROW_GROUP}; _ls_t++)")
    w.line(f"      _ls_acc[_ls_t] += {dot8}(*(const uint4*)(_ls_ra + _ls_t * {sam} + l), _ls_bv);")
    w.line("  }")
    w.line("  #pragma unroll")
    w.line(f"  for (int _ls_t = 0; _ls_t < {ROW_GROUP}; _ls_t++) {{")
    w.line("    const long long _ls_mi = _ls_g0 + _ls_t;")
    w.line("    float acc = _ls_acc[_ls_t];")
    w.line(f"    for (int o = {WARP // 2}; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);")


def scatter_store(w: Writer, op: LOp, in_dtypes: list[DType], first_leaf: int, writer: str, flat: str,
                  value: str) -> list[tuple[str, str, bool, int]]:
    """The statements storing a product's element ``value`` (flat index ``flat`` of its row-major
    output) where a scatter puts it, ``out[indexes(flat)]`` (skipped outside the destination), by
    the thread ``writer`` says; the indexes' leaves are operands ``first_leaf``, ... (the op's
    leaf views in order).  Returns their buffers."""
    views = [None] * first_leaf + list(op.leaf_views)
    region = Region(w, views, list(in_dtypes), False, names=[f"ix{k}" for k in range(len(in_dtypes))])
    w.index_vars.add("_ls_oz")
    w.line(f"if ({writer}) {{")
    w.line(f"  const long long _ls_oz = {flat};")
    w.push()
    at_idx = region.value(op.args["indexes"], "_ls_oz")
    inner = w.pop()
    w.scope.lines.extend("  " + ln for ln in inner)
    w.line(f"  const long long _ls_at = (long long){at_idx};")
    w.line(f"  if (_ls_at >= 0 && _ls_at < {w.expr(prod(op.shape))}) out[_ls_at] = {store(op.dtype, value)};")
    w.line("}")
    return [(f"ix{k}", storage_type(d), False, k) for k, d in enumerate(in_dtypes) if k >= first_leaf]


def stream_order(axes: list[tuple[str, Expr]], strides: list) -> list[tuple[str, Expr]]:
    """The loop axes over B's (batch..., j) coordinates ordered by B's strides, largest first, so
    the items walk B (the weights, or the cached keys of every head) in memory order: each thread
    streams one contiguous range instead of revisiting B once per head.  Kept as given when a
    stride is symbolic.  ``strides`` are B's, one per batch dim and then j's."""
    names = [f"_ls_b{k}" for k in range(len(strides) - 1)] + ["_ls_nj"]
    stride_of = dict(zip(names, strides))
    if any(stride_of[name].free_vars() for name, _ in axes):
        return axes
    return sorted(axes, key=lambda ax: -stride_of[ax[0]].value)  # stable: ties keep their order


def lane_sum8(v: str) -> str:
    """The sum of an 8-lane vector's lanes in a fixed tree (the same order wherever it is used)."""
    return f"(({v}[0] + {v}[1]) + ({v}[2] + {v}[3])) + (({v}[4] + {v}[5]) + ({v}[6] + {v}[7]))"


# 16-byte dot products of two rows (cuda dialect): elements per uint4, the prelude's function
VECTOR_DOT = {"bfloat16": (8, "ls_dot8_bf16"), "float16": (8, "ls_dot8_f16"), "float32": (4, "ls_dot4_f32")}


def _matmul(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [matmul_kernel(dialect, op, in_dtypes)]


def gate_constants(op: LOp, in_dtypes: list[DType], first: int,
                   names: dict[int, str] | None = None) -> tuple[list[str], list[tuple[str, str, bool, int]]]:
    """A gated product's scalar constants -- operands ``first``, ``first + 1`` (c1, c2) and, for
    tanh-GELU's gate (``fused.gelu_gated``), ``first + 2`` (c3) -- as loaded floats, and their
    buffers (``names``: each operand's buffer name, ``in<i>`` by default)."""
    index = range(first, first + (3 if gelu_gated(op.op) else 2))
    name = (lambda i: names[i]) if names else (lambda i: f"in{i}")
    return ([load(in_dtypes[i], f"{name(i)}[0]") for i in index],
            [(name(i), storage_type(in_dtypes[i]), False, i) for i in index])


def gated_mul(w: Writer, dtype: DType, g: str, u: str, consts: list[str], indent: str = "") -> str:
    """The gated products' epilogue (``MatmulGLU``, ``MatmulGeGLU`` and their norm and tile forms):
    ``gr`` and ``ur`` declared -- the float sums ``g`` and ``u`` rounded to ``dtype``, as the two
    products they replace would store them -- and the value to store in float, ``gr * ur / (2^t +
    c2)`` with SiLU's exponent t = ``gr * c1`` (``consts`` = [c1, c2]) or tanh-GELU's t = ``(gr *
    gr * c3 + c1) * gr`` ([c1, c2, c3]; the chain's order of operations): the chain's scalar
    constants, as loaded floats (:func:`gate_constants`)."""
    gq, uq = (load(dtype, store(dtype, v)) for v in (g, u))
    w.line(f"{indent}const float gr = {gq}, ur = {uq};")
    c1, c2 = consts[:2]
    t = f"gr * {c1}" if len(consts) == 2 else f"(gr * gr * {consts[2]} + {c1}) * gr"
    return store(dtype, f"gr * ur / (ls_exp2f({t}) + {c2})")


def glu_kernel(dialect: str, op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """``MatmulGLU`` / ``MatmulGeGLU`` (semantics in ``codegen/fused.py``): per output (i, j) the dot
    products of A's row i with G's and U's row j (one warp on cuda, 16-byte loads where k and the
    addresses allow; one item in c), rounded to the dtype, then the SiLU·mul (tanh-GELU·mul) in
    float: A's row is read once for both."""
    a = op.args
    da, dg, du = in_dtypes[:3]
    if dialect == "c" and da.name in LOAD8 and dg.name in LOAD8 and du.name in LOAD8:
        return paired_glu_kernel(op, in_dtypes)
    w = Writer(dialect)
    m, n, k = a["m"], a["n"], a["k"]
    w.index_vars |= {"_ls_item"}
    nn, kk = w.expr(n), w.expr(k)
    w.push()
    axes = None
    if dialect == "c":
        # a loop nest over (j, i), i innermost: each weight row pair is read from memory once and
        # met by every row of A (cache-resident), as the plain products' nest does; the flat
        # order (j fastest) streamed both weights again for every row of a prompt
        axes = [("_ls_nj", n), ("_ls_mi", m)]
        w.index_vars |= {"_ls_nj", "_ls_mi"}
    else:
        w.line(f"const long long _ls_nj = _ls_item % {nn}, _ls_mi = _ls_item / {nn};")
    sam, aoff, sgn, goff, sun, uoff = (w.expr(a[f]) for f in ("a_stride_m", "a_offset", "g_stride_n", "g_offset",
                                                               "u_stride_n", "u_offset"))
    w.line(f"const {storage_type(da)}* ra = in0 + {aoff} + _ls_mi * {sam};")
    w.line(f"const {storage_type(dg)}* rg = in1 + {goff} + _ls_nj * {sgn};")
    w.line(f"const {storage_type(du)}* ru = in2 + {uoff} + _ls_nj * {sun};")
    w.line("float g = 0.0f, u = 0.0f;")

    def scalar(first: str | None, step: int, indent: str = "") -> None:  # first None: go on from l
        start = "" if first is None else f"long long l = {first}"
        w.line(f"{indent}for ({start}; l < {kk}; l += {step}) {{")
        w.line(f"{indent}  const float x = {load(da, 'ra[l]')};")
        w.line(f"{indent}  g += x * {load(dg, 'rg[l]')}; u += x * {load(du, 'ru[l]')};")
        w.line(f"{indent}}}")

    vec = VECTOR_DOT.get(da.name) if da == dg == du else None
    if dialect == "cuda":
        if vec is not None:
            width, dot = vec
            w.line(f"if ({kk} % {width} == 0 && (((unsigned long long)ra | (unsigned long long)rg | "
                   f"(unsigned long long)ru) & 15) == 0) {{")
            w.line("  #pragma unroll 8")
            w.line(f"  for (long long l = lane * {width}; l < {kk}; l += {WARP * width}) {{")
            w.line("    const uint4 x = *(const uint4*)(ra + l);")
            w.line(f"    g += {dot}(x, {weight16('rg + l')}); u += {dot}(x, {weight16('ru + l')});")
            w.line("  }")
            w.line("} else {")
            scalar("lane", WARP, "  ")
            w.line("}")
        else:
            scalar("lane", WARP)
        w.line(f"for (int o = {WARP // 2}; o > 0; o >>= 1) {{ g += __shfl_xor_sync(0xffffffffu, g, o); "
               f"u += __shfl_xor_sync(0xffffffffu, u, o); }}")
        writer = "lane == 0"
    else:
        scalar("0", 1)
        writer = "1"
    w.line(f"if ({writer}) {{")
    consts, _ = gate_constants(op, in_dtypes, 3)
    value = gated_mul(w, op.dtype, "g", "u", consts, "  ")
    w.line(f"  out[{'_ls_item' if axes is None else f'_ls_mi * {nn} + _ls_nj'}] = {value};")
    w.line("}")
    body = w.pop()
    bufs = _glu_buffers(op, in_dtypes)
    prefetch = weight_prefetch(w, dialect, m, n, k, [("in1", dg, a["g_offset"], a["g_stride_n"]),
                                                      ("in2", du, a["u_offset"], a["u_stride_n"])])
    return finish(w, dialect, "matmul_dot", bufs, m * n, body, glu_label(op), axes, item_cost=2 * k,
                  before_wait=prefetch)


def glu_label(op: LOp) -> str:
    """The gated product kernel's label: ``matmul_glu`` (SiLU) or ``matmul_geglu`` (tanh-GELU)."""
    return "matmul_geglu" if gelu_gated(op.op) else "matmul_glu"


def _glu_buffers(op: LOp, in_dtypes: list[DType]) -> list[tuple[str, str, bool, str | int]]:
    """``MatmulGLU``'s buffers: out, then A, G, U and the scalar constants (two; MatmulGeGLU's three)."""
    return [("out", storage_type(op.dtype), True, "out"),
            *((f"in{i}", storage_type(d), False, i) for i, d in enumerate(in_dtypes))]


def paired_glu_kernel(op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """``MatmulGLU`` in the c dialect with 8-wide loads: an item is :data:`GLU_ROWS` rows i, i + 1,
    ... of column j (a loop nest over (column, row group), rows innermost), each 8 of G's and U's
    rows loaded once for all the rows and each 8 of A's rows once for both products; a group with
    fewer rows (the last of a prompt, a decode step) runs the same per-output code for those.
    Per output: two 8-lane partial sums per product over k in 16s, the last 8 into the first,
    the last terms, the lanes in a fixed tree; each product rounded to the dtype, then the
    SiLU·mul in float -- independent of the other rows."""
    a = op.args
    da, dg, du = in_dtypes[:3]
    w = Writer("c")
    m, n, k = a["m"], a["n"], a["k"]
    mm, nn, kk = w.expr(m), w.expr(n), w.expr(k)
    w.index_vars |= {"_ls_item", "_ls_nj", "_ls_mp"}
    sam, aoff, sgn, goff, sun, uoff = (w.expr(a[f]) for f in ("a_stride_m", "a_offset", "g_stride_n", "g_offset",
                                                               "u_stride_n", "u_offset"))
    la, lg, lu = LOAD8[da.name], LOAD8[dg.name], LOAD8[du.name]
    rg_n = GLU_ROWS
    w.push()
    w.line(f"const long long _ls_i0 = {rg_n} * _ls_mp;")
    w.line(f"const {storage_type(da)}* ra0 = in0 + {aoff} + _ls_i0 * {sam};")
    w.line(f"const {storage_type(dg)}* rg = in1 + {goff} + _ls_nj * {sgn};")
    w.line(f"const {storage_type(du)}* ru = in2 + {uoff} + _ls_nj * {sun};")
    w.line("float " + ", ".join(f"g{r} = 0.0f, u{r} = 0.0f" for r in range(rg_n)) + ";")

    def sums(rows: list[int]) -> None:
        acc = [f"p{q}{r}{h}" for r in rows for q in "gu" for h in (0, 1)]
        w.line("  ls_v8 " + ", ".join(f"{v} = {{0}}" for v in acc) + "; long long l = 0;")
        w.line(f"  for (; l + 16 <= {kk}; l += 16) {{")
        for h in (0, 1):
            loads = [f"x{r} = {la}(ra{r} + l + {8 * h})" for r in rows]
            loads += [f"wg = {lg}(rg + l + {8 * h})", f"wu = {lu}(ru + l + {8 * h})"]
            w.line(f"    {{ const ls_v8 {', '.join(loads)}; "
                   + " ".join(f"pg{r}{h} += x{r} * wg; pu{r}{h} += x{r} * wu;" for r in rows) + " }")
        w.line("  }")
        loads = [f"x{r} = {la}(ra{r} + l)" for r in rows] + [f"wg = {lg}(rg + l)", f"wu = {lu}(ru + l)"]
        w.line(f"  if (l + 8 <= {kk}) {{ const ls_v8 {', '.join(loads)}; "
               + " ".join(f"pg{r}0 += x{r} * wg; pu{r}0 += x{r} * wu;" for r in rows) + " l += 8; }")
        w.line(f"  for (; l < {kk}; l++) {{ "
               + " ".join(f"{{ const float x = {load(da, f'ra{r}[l]')}; g{r} += x * {load(dg, 'rg[l]')}; "
                          f"u{r} += x * {load(du, 'ru[l]')}; }}" for r in rows) + " }")
        for r in rows:
            w.line(f"  pg{r}0 += pg{r}1; pu{r}0 += pu{r}1; g{r} += {lane_sum8(f'pg{r}0')}; "
                   f"u{r} += {lane_sum8(f'pu{r}0')};")

    row_group_branches(w, mm, sam, storage_type(da), sums, rg_n)
    consts, _ = gate_constants(op, in_dtypes, 3)
    for r in range(rg_n):
        w.line(f"if (_ls_i0 + {r} < {mm}) {{" if r else "{")
        value = gated_mul(w, op.dtype, f"g{r}", f"u{r}", consts, "  ")
        w.line(f"  out[(_ls_i0 + {r}) * {nn} + _ls_nj] = {value};")
        w.line("}")
    body = w.pop()
    bufs = _glu_buffers(op, in_dtypes)
    groups = (m + (rg_n - 1)) // rg_n
    return finish(w, "c", "matmul_dot", bufs, n * groups, body, glu_label(op),
                  [("_ls_nj", n), ("_ls_mp", groups)], 2 * rg_n * k)


def gather_matmul_kernel(dialect: str, op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """``GatherMatmul`` (semantics in ``codegen/fused.py``): per output (a warp on cuda, an item in
    c) B's column is found through the index: when all of its k elements lie in one picked row of
    W (a mixture-of-experts product: always), the column is a run of that row -- read like a
    weight row, with 16-byte loads on cuda where the strides and addresses allow -- else element
    by element through the row map.  An index outside [0, w_rows) reads 0 and sets the error word."""
    a = op.args
    w = Writer(dialect)
    da, di, db = in_dtypes
    ct = "double" if op.dtype.name == "float64" else "float"
    vec = VECTOR_DOT.get(da.name) if da == db and ct == "float" and dialect == "cuda" else None
    batch = list(a["batch"])
    m, n, k = a["m"], a["n"], a["k"]
    w.index_vars |= {"_ls_item"}
    nn, mm, kk = w.expr(n), w.expr(m), w.expr(k)
    inner, rows = w.expr(a["inner"]), w.expr(a["w_rows"])
    w.push()
    w.line(f"const long long _ls_nj = _ls_item % {nn};")
    w.line(f"const long long _ls_mi = (_ls_item / {nn}) % {mm};")
    w.line(f"const long long bi = _ls_item / ({nn} * {mm});")
    w.line(f"long long oa = {w.expr(a['a_offset'])}, ob = {w.expr(a['b_offset'])}, rest = bi;")
    batch_offsets(w, batch, a["a_batch_strides"], a["b_batch_strides"])
    sam, sak, sbk, sbn = (w.expr(a[f]) for f in ("a_stride_m", "a_stride_k", "b_stride_k", "b_stride_n"))
    first, step = ("lane", WARP) if dialect == "cuda" else ("0", 1)
    la, lb = (lambda ref: load(da, ref)), (lambda ref: load(db, ref))
    # B's column j of this batch index: elements f0 + l * sbk of the gathered tensor
    w.line(f"const long long _ls_f0 = ob + _ls_nj * {sbn};")
    w.line(f"const long long _ls_r0 = _ls_f0 / {inner}, _ls_r1 = (_ls_f0 + ({kk} - 1) * {sbk}) / {inner};")
    w.line("const long long _ls_e0 = in1[_ls_r0];")
    w.line(f"const {storage_type(da)}* ra = in0 + oa + _ls_mi * {sam};")
    w.line(f"{ct} acc = 0;")
    w.line(f"if (_ls_r0 == _ls_r1 && _ls_e0 >= 0 && _ls_e0 < {rows}) {{  // the column is a run of one picked row")
    w.line(f"  const {storage_type(db)}* rb = in2 + _ls_e0 * {inner} + (_ls_f0 - _ls_r0 * {inner});")
    if vec is not None:
        width, dot = vec
        w.line(f"  if ({sak} == 1 && {sbk} == 1 && {kk} % {width} == 0 && "
               f"(((unsigned long long)ra | (unsigned long long)rb) & 15) == 0) {{")
        vector_dot(w, "    ", "lane", WARP, width, dot, kk)
        w.line(f"  }} else for (long long l = {first}; l < {kk}; l += {step}) "
               f"acc += ({ct}){la(f'ra[l * {sak}]')} * ({ct}){lb(f'rb[l * {sbk}]')};")
    elif dialect == "c":
        _row_dot(w, "  ", da, db, ct, sak, sbk, kk)
    else:
        w.line(f"  for (long long l = {first}; l < {kk}; l += {step}) "
               f"acc += ({ct}){la(f'ra[l * {sak}]')} * ({ct}){lb(f'rb[l * {sbk}]')};")
    w.line("} else {  // element by element through the row map")
    w.line(f"  for (long long l = {first}; l < {kk}; l += {step}) {{")
    w.line(f"    const long long f = _ls_f0 + l * {sbk}, r = f / {inner}, e = in1[r];")
    w.line(f"    if (e >= 0 && e < {rows}) acc += ({ct}){la(f'ra[l * {sak}]')} * "
           f"({ct}){lb(f'in2[e * {inner} + (f - r * {inner})]')};")
    w.line("    else ls_oob(T);")
    w.line("  }")
    w.line("}")
    writer = "1"
    if dialect == "cuda":
        w.line(f"for (int o = {WARP // 2}; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);")
        writer = "lane == 0"
    w.line(f"if ({writer}) out[(bi * {mm} + _ls_mi) * {nn} + _ls_nj] = {store(op.dtype, 'acc')};")
    body = w.pop()
    bufs = [("out", storage_type(op.dtype), True, "out"), ("in0", storage_type(da), False, 0),
            ("in1", storage_type(di), False, 1), ("in2", storage_type(db), False, 2)]
    return finish(w, dialect, "matmul_dot", bufs, prod(batch) * m * n, body, "gather_matmul", item_cost=k)


def _row_dot(w: Writer, ind: str, da: DType, db: DType, ct: str, sak: str, sbk: str, kk: str) -> None:
    """The c dialect's ``acc += ra . rb`` over k (a picked row of B against a row of A): two
    8-lane partial sums over k in 16s where both are contiguous (the compiler keeps them in
    vector registers; a float sum in one chain is never vectorised), the last 8, the rest, the
    lanes in a tree; else element by element.  GatherMatmul and its grouped form share it, so
    their results are bit for bit the same."""
    la, lb = (lambda ref: load(da, ref)), (lambda ref: load(db, ref))
    scalar = (f"for (long long l = 0; l < {kk}; l += 1) "
              f"acc += ({ct}){la(f'ra[l * {sak}]')} * ({ct}){lb(f'rb[l * {sbk}]')};")
    if ct == "float" and da.name in LOAD8 and db.name in LOAD8:
        x8, w8 = LOAD8[da.name], LOAD8[db.name]
        w.line(f"{ind}if ({sak} == 1 && {sbk} == 1) {{")
        w.line(f"{ind}  ls_v8 p0 = {{0}}, p1 = {{0}}; long long l = 0;")
        w.line(f"{ind}  for (; l + 16 <= {kk}; l += 16) {{ p0 += {x8}(ra + l) * {w8}(rb + l); "
               f"p1 += {x8}(ra + l + 8) * {w8}(rb + l + 8); }}")
        w.line(f"{ind}  if (l + 8 <= {kk}) {{ p0 += {x8}(ra + l) * {w8}(rb + l); l += 8; }}")
        w.line(f"{ind}  for (; l < {kk}; l++) acc += {la('ra[l]')} * {lb('rb[l]')};")
        w.line(f"{ind}  p0 += p1; acc += {lane_sum8('p0')};")
        w.line(f"{ind}}} else {scalar}")
    else:
        w.line(f"{ind}{scalar}")


# GatherMatmul in the c dialect with its work grouped by the picked row (grouped_gather_matmul_kernel)
# where B is whole picked rows: each expert's rows read once for every token that chose it, not once
# a token.  One MoE layer's experts (E = 64 of 384, top 8, hidden 1024; 2-core VM, 2026-12-07,
# benchmarks/cpu_moe_prefill.py): 0.80 ms vs 0.76 at 1 token, 7.9 vs 15.5 at 16, 46.5 vs 133 at
# 128 (the dense form: 263).
# LIGHTSPEED_NATIVE_GROUPED=0: one output an item, as on cuda
GROUPED = os.environ.get("LIGHTSPEED_NATIVE_GROUPED", "1") != "0"
# rows of W an item of the grouped product runs against its picks, and picks gathered per pass
GROUP_ROWS, GROUP_PICKS = 32, 64


def grouped_layout(op: LOp) -> tuple[int, int] | None:
    """``(R, P)`` when GatherMatmul ``op``'s B is whole picked rows: one batch axis, B element
    (b, l, j) at b * n * k + j * k + l (its columns contiguous runs of k), each pick ``R = inner / k``
    of them and each batch index's n columns ``P = n / R`` picks (pick b * P + j // R); else None."""
    a = op.args
    k, n, inner = a["k"], a["n"], a["inner"]
    if len(a["batch"]) != 1 or any(e.free_vars() for e in (k, n, inner)):
        return None
    k, n, inner = int(k.value), int(n.value), int(inner.value)
    fits = (str(a["b_stride_k"]) == "1" and str(a["b_stride_n"]) == str(k) and str(a["b_offset"]) == "0"
            and not a["b_batch_strides"][0].free_vars() and int(a["b_batch_strides"][0].value) == n * k)
    if not fits or k == 0 or inner % k or n % (inner // k):
        return None
    return inner // k, n // (inner // k)


def grouped_gather_matmul_kernel(op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """``GatherMatmul`` in the c dialect where B is :func:`grouped_layout`'s whole picked rows:
    an item per (picked row e of W, or e = w_rows for the indexes outside W; a chunk of
    GROUP_ROWS of its R rows) walks the index, collecting the picks of e GROUP_PICKS at a time, and
    runs each of the chunk's rows (read once) against every collected pick's rows of A -- a
    prompt's expert read once for all the tokens that chose it.  Each output is one dot product of
    :func:`_row_dot`, as one output an item does, so the two agree bit for bit.  An index outside
    W: zeros and the call's error word."""
    layout = grouped_layout(op)
    if layout is None:
        raise LightspeedError("GatherMatmul: B is not whole picked rows: no grouped kernel")
    r_rows, per_b = layout
    a = op.args
    dialect = "c"
    w = Writer(dialect)
    da, di, db = in_dtypes
    ct = "double" if op.dtype.name == "float64" else "float"
    m, n, k = a["m"], a["n"], a["k"]
    (bsize,) = a["batch"]
    w.index_vars |= {"_ls_item"}
    mm, nn, kk, rows = w.expr(m), w.expr(n), w.expr(k), w.expr(a["w_rows"])
    chunks = -(-r_rows // GROUP_ROWS)
    picks = w.expr(bsize * per_b)
    sam, sak = w.expr(a["a_stride_m"]), w.expr(a["a_stride_k"])
    ao, abs0 = w.expr(a["a_offset"]), w.expr(a["a_batch_strides"][0])
    w.push()
    w.line(f"const long long _ls_e = _ls_item / {chunks}, _ls_j0 = (_ls_item % {chunks}) * {GROUP_ROWS};")
    w.line(f"const long long _ls_j1 = _ls_j0 + {GROUP_ROWS} < {r_rows} ? _ls_j0 + {GROUP_ROWS} : {r_rows};")
    w.line(f"long long _ls_pk[{GROUP_PICKS}]; int _ls_np = 0;")
    w.line(f"for (long long r = 0; r <= {picks}; r++) {{")
    w.line(f"  if (r < {picks}) {{")
    w.line("    const long long e = (long long)in1[r];")
    w.line(f"    if (_ls_e == {rows} ? (e < 0 || e >= {rows}) : e == _ls_e) _ls_pk[_ls_np++] = r;")
    w.line("  }")
    w.line(f"  if (_ls_np == {GROUP_PICKS} || (r == {picks} && _ls_np > 0)) {{")
    inner = w.expr(a["inner"])
    w.line("    long long _ls_jt = _ls_j0;  // the chunk's rows from here on: one output at a time")
    if mm == "1" and sak == "1" and ct == "float" and da.name in LOAD8 and db.name in LOAD8:
        _grouped_tiles(w, da, db, op.dtype, rows, inner, kk, nn, ao, abs0, per_b, r_rows)
    w.line("    for (long long jr = _ls_jt; jr < _ls_j1; jr++) {")
    w.line(f"      const {storage_type(db)}* rb = _ls_e < {rows} ? in2 + _ls_e * {inner} + jr * {kk} : in2;")
    w.line("      for (int p = 0; p < _ls_np; p++) {")
    w.line(f"        const long long bi = _ls_pk[p] / {per_b}, j = (_ls_pk[p] % {per_b}) * {r_rows} + jr;")
    w.line(f"        for (long long i = 0; i < {mm}; i++) {{")
    w.line(f"          {ct} acc = 0;")
    w.line(f"          if (_ls_e < {rows}) {{")
    w.line(f"            const {storage_type(da)}* ra = in0 + {ao} + bi * {abs0} + i * {sam};")
    _row_dot(w, "            ", da, db, ct, sak, "1", kk)
    w.line("          } else ls_oob(T);")
    w.line(f"          out[(bi * {mm} + i) * {nn} + j] = {store(op.dtype, 'acc')};")
    w.line("        }")
    w.line("      }")
    w.line("    }")
    w.line("    _ls_np = 0;")
    w.line("  }")
    w.line("}")
    body = w.pop()
    bufs = [("out", storage_type(op.dtype), True, "out"), ("in0", storage_type(da), False, 0),
            ("in1", storage_type(di), False, 1), ("in2", storage_type(db), False, 2)]
    count = (a["w_rows"] + 1) * chunks
    return finish(w, dialect, "matmul_dot", bufs, count, body, "gather_matmul_grouped",
                  item_cost=k * GROUP_ROWS * (bsize * per_b) // (a["w_rows"] + 1) + bsize * per_b)


def _grouped_tiles(w: Writer, da: DType, db: DType, dt: DType, rows: str, inner: str, kk: str, nn: str, ao: str,
                   abs0: str, per_b: int, r_rows: int) -> None:
    """The grouped product's rows two at a time against its picks four at a time (A one row a
    batch index, both contiguous along k): the 8 outputs' vector sums in registers, each weight
    and activation vector loaded once for 4 or 2 of them; each output's own sums in
    :func:`_row_dot`'s order (its two 8-lane partials over k in 16s, the last 8, the rest in
    order from 0, then the lanes' tree), so the values are that dot product's bit for bit.  Picks
    left over (fewer than 4) take :func:`_row_dot` itself; rows left over, the caller's loop
    (from ``_ls_jt``)."""
    x8, w8 = LOAD8[da.name], LOAD8[db.name]
    la, lb = (lambda ref: load(da, ref)), (lambda ref: load(db, ref))
    sa, sb = storage_type(da), storage_type(db)
    acc = [f"s{r}{q}{h}" for r in range(2) for q in range(4) for h in "ab"]
    w.line(f"    if (_ls_e < {rows}) for (; _ls_jt + 2 <= _ls_j1; _ls_jt += 2) {{")
    w.line(f"      const {sb}* rb0 = in2 + _ls_e * {inner} + _ls_jt * {kk}; const {sb}* rb1 = rb0 + {kk};")
    w.line("      int p = 0;")
    w.line("      for (; p + 4 <= _ls_np; p += 4) {")
    w.line(f"        const {sa}* ra[4]; long long o[4];")
    w.line("        for (int q = 0; q < 4; q++) {")
    w.line(f"          const long long bi = _ls_pk[p + q] / {per_b};")
    w.line(f"          ra[q] = in0 + {ao} + bi * {abs0};")
    w.line(f"          o[q] = bi * {nn} + (_ls_pk[p + q] % {per_b}) * {r_rows} + _ls_jt;")
    w.line("        }")
    w.line(f"        ls_v8 {', '.join(f'{v} = {{0}}' for v in acc)};")
    w.line("        long long l = 0;")
    w.line(f"        for (; l + 16 <= {kk}; l += 16) {{")
    w.line(f"          const ls_v8 w0a = {w8}(rb0 + l), w0b = {w8}(rb0 + l + 8), w1a = {w8}(rb1 + l), "
           f"w1b = {w8}(rb1 + l + 8);")
    for q in range(4):
        w.line(f"          {{ const ls_v8 xa = {x8}(ra[{q}] + l), xb = {x8}(ra[{q}] + l + 8); s0{q}a += xa * w0a; "
               f"s0{q}b += xb * w0b; s1{q}a += xa * w1a; s1{q}b += xb * w1b; }}")
    w.line("        }")
    w.line(f"        if (l + 8 <= {kk}) {{")
    w.line(f"          const ls_v8 w0a = {w8}(rb0 + l), w1a = {w8}(rb1 + l);")
    for q in range(4):
        w.line(f"          {{ const ls_v8 xa = {x8}(ra[{q}] + l); s0{q}a += xa * w0a; s1{q}a += xa * w1a; }}")
    w.line("          l += 8;")
    w.line("        }")
    for r in range(2):
        for q in range(4):
            w.line(f"        {{ float acc = 0; for (long long t = l; t < {kk}; t++) acc += {la(f'ra[{q}][t]')} * "
                   f"{lb(f'rb{r}[t]')}; s{r}{q}a += s{r}{q}b; acc += {lane_sum8(f's{r}{q}a')}; "
                   f"out[o[{q}] + {r}] = {store(dt, 'acc')}; }}")
    w.line("      }")
    w.line("      for (; p < _ls_np; p++) for (int r2 = 0; r2 < 2; r2++) {")
    w.line(f"        const long long bi = _ls_pk[p] / {per_b}, j = (_ls_pk[p] % {per_b}) * {r_rows} + _ls_jt + r2;")
    w.line(f"        const {sb}* rb = r2 ? rb1 : rb0;")
    w.line(f"        const {sa}* ra = in0 + {ao} + bi * {abs0};")
    w.line("        float acc = 0;")
    _row_dot(w, "        ", da, db, "float", "1", "1", kk)
    w.line(f"        out[bi * {nn} + j] = {store(dt, 'acc')};")
    w.line("      }")
    w.line("    }")


def _gather_matmul(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    if dialect == "c" and GROUPED and grouped_layout(op) is not None:
        return [grouped_gather_matmul_kernel(op, in_dtypes)]
    return [gather_matmul_kernel(dialect, op, in_dtypes)]


def _glu(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [glu_kernel(dialect, op, in_dtypes)]


RENDERERS = {"Matmul": _matmul, "MatmulAdd": _matmul, "MatmulGLU": _glu, "MatmulGeGLU": _glu, "MatmulScatter": _matmul,
             "GatherMatmul": _gather_matmul}
