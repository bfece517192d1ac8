"""The c dialect's row matmul: ``Matmul`` when B's rows are contiguous along n (``x @ W`` with W
row-major, attention weights @ V), an item up to 64 outputs of one row accumulated as a vector;
with a run-time split-k branch for a small output over a long reduction (decode attention's
weights @ V).  c-dialect only: the GPU's matmuls are in :mod:`.matmul`."""

from __future__ import annotations

from ....dtypes import DType
from ....egraph.llir import LOp
from ....symbolic import Expr, prod, sym
from .region import Region
from .spec import KernelSpec
from .types import load, storage_type, store
from .writer import Point, Writer, finish, flat_of, loop_axes, pairwise

__all__ = ["matmul_rows_kernel", "packable", "batch_offset", "LOAD8", "ROW_CHUNK", "SPLIT_K_CHUNKS", "SPLIT_K_OUT",
           "SPLIT_K_MIN_K"]


def batch_offset(offset: Expr, coords: list[Expr], strides) -> Expr:
    out = offset
    for c, st in zip(coords, strides):
        out = out + c * st
    return out


# 8 elements of a row as 8 floats (c dialect): the prelude's vector loads by storage dtype
LOAD8 = {"float32": "ls_ld8", "bfloat16": "ls_ld8_bf16", "float16": "ls_ld8_f16"}


ROW_CHUNK = 64  # outputs of one row a c-dialect row item accumulates at once
TILE_ROWS = 4  # rows of A a float32 row item takes (prelude/c.h: LS_MR)

# Each output's sum over k is written as explicit fused multiply-adds, in k order: left to the
# compiler, ``acc += a * b`` was contracted to an fma in the scalar loop but not in the loop it
# vectorises over k (an in-order reduction of plain products), and which one runs depends on k,
# so appending zero terms (a batch's longer page table) changed a row's result.
FMA = {"float": "__builtin_fmaf", "double": "__builtin_fma"}


def packable(op: LOp, in_dtypes: list[DType]) -> bool:
    """Whether a c-dialect product whose B is not contiguous along n (``dY @ W.T``, ``q @ k.T``) can
    run as a packed row matmul: float32 operands, at least :data:`PACK_MIN_ROWS` rows of A and at
    most :data:`PACK_MAX_K` terms, both fixed when the kernel is compiled (a decode step's
    symbolic rows keep the dot kernel, which streams B once without a copy)."""
    a = op.args
    m, k = a["m"], a["k"]
    return (in_dtypes[0].name == in_dtypes[1].name == "float32" and op.dtype.name != "float64"
            and not m.free_vars() and not k.free_vars() and m.value >= PACK_MIN_ROWS and 0 < k.value <= PACK_MAX_K)


PACK_ROWS = 32  # rows of A a packed item runs over one packed panel of B
PACK_MIN_ROWS = 8
PACK_MAX_K = 512  # the panel (k x 64 floats, 128 KiB at most) lives on the item's stack


def matmul_rows_kernel(op: LOp, in_dtypes: list[DType], packed: bool = False) -> KernelSpec:
    """``Matmul`` in the c dialect when B's rows are contiguous along n (``x @ W`` with W row-major,
    attention weights @ V): an item is up to 64 outputs of up to TILE_ROWS rows, accumulated over
    k in vector registers (float32: ``ls_mm_tile``; else ``acc[q] += a[l] * B[l, j0 + q]``, which
    the compiler vectorises); each output's sum runs over k in order, like the scalar loop.
    ``packed`` (:func:`packable`: B contiguous along k or strided): an item first copies its 64
    columns of B into a k x 64 panel on its stack (zeros past n), then runs the same tiles over
    PACK_ROWS rows of A reading the panel."""
    a = op.args
    w = Writer("c")
    da, db = in_dtypes[0], in_dtypes[1]
    ct = "double" if op.dtype.name == "float64" else "float"
    tiled = packed or (da.name == db.name == "float32" and ct == "float")
    batch = list(a["batch"])
    m, n, k = a["m"], a["n"], a["k"]
    w.index_vars |= {"_ls_item"}
    nn, kk = w.expr(n), w.expr(k)
    w.push()
    axes, bcoords = loop_axes(batch, "_ls_b")
    nchunks = (n + (ROW_CHUNK - 1)) // ROW_CHUNK
    # a loop nest: coordinates without divisions; a tiled item is TILE_ROWS rows of A
    if packed:
        rows_axis = ("_ls_mp", (m + (PACK_ROWS - 1)) // PACK_ROWS)
    else:
        rows_axis = ("_ls_mb", (m + (TILE_ROWS - 1)) // TILE_ROWS) if tiled else ("_ls_mi", m)
    axes += [rows_axis, ("_ls_jc", nchunks)]
    w.index_vars |= {name for name, _ in axes} | {"_ls_nj0", "_ls_nq", "_ls_mi", "_ls_r", "_ls_rows", "_ls_mb"}
    w.line(f"const long long _ls_nj0 = _ls_jc * {ROW_CHUNK};")
    w.line(f"const long long oa = {w.expr(batch_offset(a['a_offset'], bcoords, a['a_batch_strides']))}, "
           f"ob = {w.expr(batch_offset(a['b_offset'], bcoords, a['b_batch_strides']))};")
    sam, sak, sbk = (w.expr(a[f]) for f in ("a_stride_m", "a_stride_k", "b_stride_k"))
    if not n.free_vars() and (n.value % ROW_CHUNK == 0 or n.value < ROW_CHUNK):
        # a compile-time width: the accumulators stay in vector registers
        w.line(f"const long long jn = {min(int(n.value), ROW_CHUNK)};")
    else:
        w.line(f"const long long jn = {nn} - _ls_nj0 < {ROW_CHUNK} ? {nn} - _ls_nj0 : {ROW_CHUNK};")

    def scalar_row(acc: str, first_row: str) -> None:  # one row's outputs, a scalar fma chain each
        w.line(f"for (int _ls_nq = 0; _ls_nq < {ROW_CHUNK}; _ls_nq++) {acc}[_ls_nq] = 0;")
        w.line(f"for (long long l = 0; l < {kk}; l++) {{")
        w.line(f"  const {ct} av = ({ct}){load(da, f'in0[oa + ({first_row}) * {sam} + l * {sak}]')};")
        w.line(f"  const {storage_type(db)}* rb = in1 + ob + l * {sbk} + _ls_nj0;")
        w.line(f"  for (long long _ls_nq = 0; _ls_nq < jn; _ls_nq++) "
               f"{acc}[_ls_nq] = {FMA[ct]}(av, ({ct}){load(db, 'rb[_ls_nq]')}, {acc}[_ls_nq]);")
        w.line("}")

    if tiled:
        # TILE_ROWS rows x 64 columns in vector registers (prelude/c.h, ls_mm_tile); the same fma
        # chain per output as the scalar loop, so a row's result does not depend on its neighbours
        mm = w.expr(m)
        panel, panel_k = "rb0", sbk
        if packed:
            sbn = w.expr(a["b_stride_n"])
            w.line(f"float _ls_pk[{int(k.value)}][{ROW_CHUNK}] __attribute__((aligned(64)));")
            # a transpose in blocks of 16 terms: the lines written stay in L1 while each column's
            # 16 terms (one line of B when it is contiguous along k) are read
            w.line(f"for (long long _ls_l0 = 0; _ls_l0 < {kk}; _ls_l0 += 16) {{")
            w.line(f"  const long long _ls_l1 = _ls_l0 + 16 < {kk} ? _ls_l0 + 16 : {kk};")
            w.line(f"  for (int _ls_q = 0; _ls_q < {ROW_CHUNK}; _ls_q++) {{")
            w.line(f"    const float* bq = in1 + ob + (_ls_nj0 + _ls_q) * {sbn};")
            w.line(f"    if (_ls_q < jn) for (long long l = _ls_l0; l < _ls_l1; l++) _ls_pk[l][_ls_q] = bq[l * {sbk}];")
            w.line("    else for (long long l = _ls_l0; l < _ls_l1; l++) _ls_pk[l][_ls_q] = 0.0f;")
            w.line("  }")
            w.line("}")
            per = PACK_ROWS // TILE_ROWS
            w.line(f"for (long long _ls_mb = _ls_mp * {per}; _ls_mb < _ls_mp * {per} + {per} && "
                   f"_ls_mb * {TILE_ROWS} < {mm}; _ls_mb++) {{")
            w.push()
            panel, panel_k = "&_ls_pk[0][0]", str(ROW_CHUNK)
        w.line(f"const long long _ls_mi0 = _ls_mb * {TILE_ROWS};")
        w.line(f"const long long _ls_rows = {mm} - _ls_mi0 < {TILE_ROWS} ? {mm} - _ls_mi0 : {TILE_ROWS};")
        w.line(f"float acc[{TILE_ROWS}][{ROW_CHUNK}];")
        w.line(f"const float* ra = in0 + oa + _ls_mi0 * {sam};")

        def tile(rows: int, a_rows: str, out: str) -> str:
            return f"ls_mm_tile({rows}, {kk}, {a_rows}, {sam}, {sak}, {panel}, {panel_k}, {out});"

        if packed:  # the panel holds zeros past n: every column chunk is a whole tile
            w.line(f"if (_ls_rows == {TILE_ROWS}) {tile(TILE_ROWS, 'ra', 'acc')}")
            row_tile = tile(1, f"ra + _ls_r * {sam}", "acc + _ls_r")
            w.line(f"else for (int _ls_r = 0; _ls_r < _ls_rows; _ls_r++) {row_tile}")
        else:  # a chunk past n: the scalar loop
            w.line("const float* rb0 = in1 + ob + _ls_nj0;")
            w.line(f"if (jn == {ROW_CHUNK} && _ls_rows == {TILE_ROWS}) {tile(TILE_ROWS, 'ra', 'acc')}")
            w.line("else for (int _ls_r = 0; _ls_r < _ls_rows; _ls_r++) {")
            w.line(f"  if (jn == {ROW_CHUNK}) {{ {tile(1, f'ra + _ls_r * {sam}', 'acc + _ls_r')} continue; }}")
            w.push()
            scalar_row("acc[_ls_r]", "_ls_mi0 + _ls_r")
            w.scope.parent.lines.extend("  " + ln for ln in w.pop())
            w.line("}")
        w.line("for (int _ls_r = 0; _ls_r < _ls_rows; _ls_r++) {")
        w.push()  # the row's own index expressions
        w.line("const long long _ls_mi = _ls_mi0 + _ls_r;")
        value = "acc[_ls_r][_ls_nq]"
    else:
        w.line(f"{ct} acc[{ROW_CHUNK}];")
        scalar_row("acc", "_ls_mi")
        value = "acc[_ls_nq]"
    orow = w.expr(flat_of([*bcoords, sym("_ls_mi")], (*batch, m)) * n)
    w.line("for (long long _ls_nq = 0; _ls_nq < jn; _ls_nq++) {")
    w.index_vars.add("_ls_oz")
    w.line(f"  const long long _ls_oz = {orow} + _ls_nj0 + _ls_nq;")
    bufs = [("out", storage_type(op.dtype), True, "out"), ("in0", storage_type(da), False, 0),
            ("in1", storage_type(db), False, 1)]
    if "r_view" in a:  # MatmulAdd (or the cuda backend's LtMatmulAdd)
        region = Region(w, [a["r_view"]], [in_dtypes[2]], False, names=["in2"])
        w.push()
        r = region.leaf(0, Point("_ls_oz", sym("_ls_oz"), (*batch, m, n),
                                 (*bcoords, sym("_ls_mi"), sym("_ls_nj0") + sym("_ls_nq"))))
        w.scope.parent.lines.extend("  " + ln for ln in w.pop())
        value = f"({ct})({value} + ({ct}){r})"
        bufs.append(("in2", storage_type(in_dtypes[2]), False, 2))
    w.line(f"  out[_ls_oz] = {store(op.dtype, value)};")
    w.line("}")
    if tiled:
        w.scope.parent.lines.extend("  " + ln for ln in w.pop())
        w.line("}")
    if packed:
        w.scope.parent.lines.extend("  " + ln for ln in w.pop())
        w.line("}")
    body = w.pop()
    # no split-k over a symbolic batch dim: such a batch holds independent problems (the
    # sequences of a paged step), and a split chosen by the total output size would make each
    # one's sums depend on how many others share the call
    static_batch = not any(d.free_vars() for d in batch)
    early = split_k_rows(w, op, in_dtypes, ct) if ct == "float" and static_batch and not packed else None
    rows = PACK_ROWS if packed else TILE_ROWS if tiled else 1
    count = prod(batch) * ((m + (rows - 1)) // rows) * nchunks
    return finish(w, "c", "matmul_rows", bufs, count, body, "matmul", axes, k * ROW_CHUNK * rows, early=early)


SPLIT_K_CHUNKS = 8  # a fixed count: the partial sums, and so the result, do not depend on the threads
SPLIT_K_OUT = 1024  # the largest output (elements) a split-k matmul takes (its partials live on the stack)
SPLIT_K_MIN_K = 256


def split_k_rows(w: Writer, op: LOp, in_dtypes: list[DType], ct: str) -> list[str]:
    """The run-time alternative of a row matmul with a small output and a long reduction (decode
    attention's weights @ V: 9 x 64 outputs over every cached position): the reduction is cut into
    :data:`SPLIT_K_CHUNKS` chunks, each accumulating the whole output into its own partial sums
    while it walks its rows of B in memory order (each cached position once, every head of it),
    the chunks split over the cores; the partials are then added in a fixed tree.  (The row items
    read B once per output row and have one item per row to share between the cores.)"""
    a = op.args
    da, db = in_dtypes[0], in_dtypes[1]
    batch, m, n, k = list(a["batch"]), a["m"], a["n"], a["k"]
    total = prod(batch) * m * n
    nchunk = SPLIT_K_CHUNKS
    names = [f"_ls_sb{q}" for q in range(len(batch))]
    w.index_vars |= {*names, "_ls_si", "_ls_sl", "_ls_so"}
    w.push()
    tot, kk, nn = w.expr(total), w.expr(k), w.expr(n)
    w.line(f"if ({tot} <= {SPLIT_K_OUT} && {kk} >= {SPLIT_K_MIN_K}) {{")
    w.line(f"  {ct} _ls_part[{nchunk}][{SPLIT_K_OUT}];")
    w.line(f"  const long long _ls_kc = ({kk} + {nchunk - 1}) / {nchunk};")
    w.line("  #pragma omp parallel for schedule(static)")
    w.line(f"  for (int _ls_c = 0; _ls_c < {nchunk}; _ls_c++) {{")
    w.line(f"    {ct}* LS_RESTRICT acc = _ls_part[_ls_c];")
    w.line(f"    for (long long _ls_nq = 0; _ls_nq < {tot}; _ls_nq++) acc[_ls_nq] = 0;")
    w.line(f"    const long long l0 = _ls_c * _ls_kc, l1 = ls_min({kk}, l0 + _ls_kc);")
    w.line("    for (long long _ls_sl = l0; _ls_sl < l1; _ls_sl++) {")
    w.push()
    coords = [sym(x) for x in names]
    depth = 0
    for name, size in zip(names, batch):
        w.line(f"{'  ' * depth}for (long long {name} = 0; {name} < {w.expr(size)}; {name}++) {{")
        depth += 1
    w.line(f"{'  ' * depth}for (long long _ls_si = 0; _ls_si < {w.expr(m)}; _ls_si++) {{")
    w.push()
    sl, si = sym("_ls_sl"), sym("_ls_si")
    ia = w.expr(batch_offset(a["a_offset"], coords, a["a_batch_strides"]) + si * a["a_stride_m"]
                + sl * a["a_stride_k"])
    ib = w.expr(batch_offset(a["b_offset"], coords, a["b_batch_strides"]) + sl * a["b_stride_k"])
    row = w.expr(flat_of([*coords, si], (*batch, m)) * n)
    w.line(f"const {ct} av = ({ct}){load(da, f'in0[{ia}]')};")
    w.line(f"const {storage_type(db)}* rb = in1 + {ib};")
    w.line(f"{ct}* ar = acc + {row};")
    w.line(f"for (long long _ls_nq = 0; _ls_nq < {nn}; _ls_nq++) "
           f"ar[_ls_nq] = {FMA[ct]}(av, ({ct}){load(db, 'rb[_ls_nq]')}, ar[_ls_nq]);")
    inner = w.pop()
    w.scope.lines.extend("  " * (depth + 1) + ln for ln in inner)
    for d in range(depth, -1, -1):
        w.line(f"{'  ' * d}}}")
    loops = w.pop()
    w.scope.lines.extend("      " + ln for ln in loops)
    w.line("    }")
    w.line("  }")
    w.line(f"  for (long long _ls_so = 0; _ls_so < {tot}; _ls_so++) {{")
    w.push()
    value = pairwise([f"_ls_part[{c}][_ls_so]" for c in range(nchunk)], lambda x, y: f"({x} + {y})")
    if "r_view" in a:
        region = Region(w, [a["r_view"]], [in_dtypes[2]], False, names=["in2"])
        r = region.leaf(0, Point.flat_var("_ls_so"))
        value = f"({ct})({value} + ({ct}){r})"
    w.line(f"out[_ls_so] = {store(op.dtype, value)};")
    fin = w.pop()
    w.scope.lines.extend("    " + ln for ln in fin)
    w.line("  }")
    w.line("  return;")
    w.line("}")
    return w.pop()
