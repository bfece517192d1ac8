"""The c dialect's row matmul: ``Matmul`` when B's rows are contiguous along n (``x @ W`` with W
row-major, attention weights @ V), an item up to 64 outputs of one row accumulated as a vector;
with a run-time split-k branch for a small output over a long reduction (decode attention's
weights @ V).  c-dialect only: the GPU's matmuls are in :mod:`.matmul`."""

from __future__ import annotations

from ....dtypes import DType
from ....egraph.llir import LOp
from ....symbolic import Expr, prod, sym
from .region import Region, pairwise
from .spec import KernelSpec
from .types import load, storage_type, store
from .writer import Point, Writer, finish, flat_of, loop_axes

__all__ = ["matmul_rows_kernel", "batch_offset", "LOAD8", "ROW_CHUNK", "SPLIT_K_CHUNKS", "SPLIT_K_OUT",
           "SPLIT_K_MIN_K"]


def batch_offset(offset: Expr, coords: list[Expr], strides) -> Expr:
    out = offset
    for c, st in zip(coords, strides):
        out = out + c * st
    return out


# 8 elements of a row as 8 floats (c dialect): the prelude's vector loads by storage dtype
LOAD8 = {"float32": "ls_ld8", "bfloat16": "ls_ld8_bf16", "float16": "ls_ld8_f16"}


ROW_CHUNK = 64  # outputs of one row a c-dialect row item accumulates at once

# Each output's sum over k is written as explicit fused multiply-adds, in k order: left to the
# compiler, ``acc += a * b`` was contracted to an fma in the scalar loop but not in the loop it
# vectorises over k (an in-order reduction of plain products), and which one runs depends on k,
# so appending zero terms (a batch's longer page table) changed a row's result.
FMA = {"float": "__builtin_fmaf", "double": "__builtin_fma"}


def matmul_rows_kernel(op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """``Matmul`` in the c dialect when B's rows are contiguous along n (``x @ W`` with W row-major,
    attention weights @ V): an item is up to 64 outputs of one row, accumulated over k as a vector
    (``acc[q] += a[l] * B[l, j0 + q]``, which the compiler vectorises); each output's sum runs over
    k in order, like the scalar loop."""
    a = op.args
    w = Writer("c")
    da, db = in_dtypes[0], in_dtypes[1]
    ct = "double" if op.dtype.name == "float64" else "float"
    batch = list(a["batch"])
    m, n, k = a["m"], a["n"], a["k"]
    w.index_vars |= {"_ls_item"}
    nn, kk = w.expr(n), w.expr(k)
    w.push()
    axes, bcoords = loop_axes(batch, "_ls_b")
    nchunks = (n + (ROW_CHUNK - 1)) // ROW_CHUNK
    axes += [("_ls_mi", m), ("_ls_jc", nchunks)]  # a loop nest: coordinates without divisions
    w.index_vars |= {name for name, _ in axes} | {"_ls_nj0", "_ls_nq"}
    w.line(f"const long long _ls_nj0 = _ls_jc * {ROW_CHUNK};")
    w.line(f"const long long oa = {w.expr(batch_offset(a['a_offset'], bcoords, a['a_batch_strides']))}, "
           f"ob = {w.expr(batch_offset(a['b_offset'], bcoords, a['b_batch_strides']))};")
    orow = w.expr(flat_of([*bcoords, sym("_ls_mi")], (*batch, m)) * n)
    sam, sak, sbk = (w.expr(a[f]) for f in ("a_stride_m", "a_stride_k", "b_stride_k"))
    if not n.free_vars() and (n.value % ROW_CHUNK == 0 or n.value < ROW_CHUNK):
        # a compile-time width: the accumulators stay in vector registers
        w.line(f"const long long jn = {min(int(n.value), ROW_CHUNK)};")
    else:
        w.line(f"const long long jn = {nn} - _ls_nj0 < {ROW_CHUNK} ? {nn} - _ls_nj0 : {ROW_CHUNK};")
    w.line(f"{ct} acc[{ROW_CHUNK}];")
    w.line(f"for (int _ls_nq = 0; _ls_nq < {ROW_CHUNK}; _ls_nq++) acc[_ls_nq] = 0;")
    w.line(f"for (long long l = 0; l < {kk}; l++) {{")
    w.line(f"  const {ct} av = ({ct}){load(da, f'in0[oa + _ls_mi * {sam} + l * {sak}]')};")
    w.line(f"  const {storage_type(db)}* rb = in1 + ob + l * {sbk} + _ls_nj0;")
    w.line(f"  for (long long _ls_nq = 0; _ls_nq < jn; _ls_nq++) "
           f"acc[_ls_nq] = {FMA[ct]}(av, ({ct}){load(db, 'rb[_ls_nq]')}, acc[_ls_nq]);")
    w.line("}")
    w.line("for (long long _ls_nq = 0; _ls_nq < jn; _ls_nq++) {")
    w.index_vars.add("_ls_oz")
    w.line(f"  const long long _ls_oz = {orow} + _ls_nj0 + _ls_nq;")
    bufs = [("out", storage_type(op.dtype), True, "out"), ("in0", storage_type(da), False, 0),
            ("in1", storage_type(db), False, 1)]
    value = "acc[_ls_nq]"
    if "r_view" in a:  # MatmulAdd (or the cuda backend's LtMatmulAdd)
        region = Region(w, [a["r_view"]], [in_dtypes[2]], False, names=["in2"])
        w.push()
        r = region.leaf(0, Point("_ls_oz", sym("_ls_oz"), (*batch, m, n),
                                 (*bcoords, sym("_ls_mi"), sym("_ls_nj0") + sym("_ls_nq"))))
        w.scope.parent.lines.extend("  " + ln for ln in w.pop())
        value = f"({ct})(acc[_ls_nq] + ({ct}){r})"
        bufs.append(("in2", storage_type(in_dtypes[2]), False, 2))
    w.line(f"  out[_ls_oz] = {store(op.dtype, value)};")
    w.line("}")
    body = w.pop()
    # no split-k over a symbolic batch dim: such a batch holds independent problems (the
    # sequences of a paged step), and a split chosen by the total output size would make each
    # one's sums depend on how many others share the call
    static_batch = not any(d.free_vars() for d in batch)
    early = split_k_rows(w, op, in_dtypes, ct) if ct == "float" and static_batch else None
    return finish(w, "c", "matmul_rows", bufs, prod(batch) * m * nchunks, body, "matmul", axes, k * ROW_CHUNK,
                   early=early)


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
