"""Tensor-core tiles (cuda dialect, sm_80+): ``MatmulMma`` / ``MatmulAddMma``, a bfloat16 or float16
``Matmul`` / ``MatmulAdd`` (operands and result of one dtype) accumulated in float32 by the warp
matrix instruction ``mma.sync.aligned.m16n8k16`` -- the prompt's products, where the warp-per-output
kernels leave the tensor cores idle.

A block of 4 warps (``matmul_mma``: 128 threads) computes a 64 x 64 tile of C, one item of a
grid-stride loop over (batch, row tile, column tile).  Per 32-wide step of k, the threads copy the
step's 64 x 32 part of A and 32 x 64 part of B into shared memory (element by element through the
operands' strides, the contiguous axis fastest; zeros past m, n and k, so every size works), as
``As[m][k]`` and ``Bs[n][k]``; each warp then multiplies its 32 x 32 quarter as 2 x 4 instructions
per 16 of k, its fragments read from shared memory in the instruction's layout (PTX ISA,
"Matrix Fragments for mma.m16n8k16": thread t of the warp holds rows t / 4 and t / 4 + 8, columns
2 (t % 4) and the next of A's 16 x 16 and B's 16 x 8; C the same rows, columns 2 (t % 4) + 0, 1).
Operands whose rows both run along k in whole 8s (a prompt's ``x @ W.T``) take, when 16-byte
aligned, a loop with 3 shared buffers filled by ``cp.async`` instead, the next steps' copies
in flight during this step's products.  The float32 sums are rounded once into the result's
dtype (plus the addend, in float, for ``MatmulAddMma``).  The search measures the tiles against
the generic kernels; ``LIGHTSPEED_CUDA_MMA=0`` withholds them (on by default since measured on a
GPU: see docs/kernels.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ....dtypes import DType
from ....egraph.llir import LOp
from ....errors import LightspeedError
from ....symbolic import Expr, const, prod
from .matmul import gate_constants, gated_mul, glu_label
from .region import Region
from .spec import KernelSpec
from .types import storage_type, store
from .writer import Writer, batch_offsets, finish

__all__ = ["mma_kernel", "glu_mma_kernel", "gather_mma_kernel", "MMA_DTYPES", "TileShape", "SMALL", "LARGE",
           "LARGE_GLU", "STEP_K"]

MMA_DTYPES = {"bfloat16": "bf16", "float16": "f16"}
STEP_K = 32  # k per shared-memory step
PAD = 8  # elements after each shared row (bank spread; keeps 4-byte pairs aligned)
VEC = 8  # 16-bit elements per 16-byte load
# every loop over a warp's accumulators and fragments unrolled (_Pragma: inline, before each for):
# an array indexed in a rolled loop lives in local memory, and one such loop (the stores) put the
# accumulators there for the whole kernel -- a 128 to 256-byte stack frame in ptxas's report
UNROLL = '_Pragma("unroll")'


@dataclass(frozen=True)
class TileShape:
    """A block's tile of C: ``rows`` x ``cols`` (per B operand), its warps as ``warps_m`` x
    ``warps_n`` (each warp ``rows / warps_m`` x ``cols / warps_n``: ``mi`` 16-row and ``nj``
    8-column instructions per 16 of k), ``stages`` k steps in shared memory on the cp.async path,
    and the launch kind (writer.py: its block of ``threads``)."""

    rows: int
    cols: int
    warps_m: int
    warps_n: int
    stages: int
    kind: str

    @property
    def threads(self) -> int:
        return 32 * self.warps_m * self.warps_n

    @property
    def warp_rows(self) -> int:
        return self.rows // self.warps_m

    @property
    def warp_cols(self) -> int:
        return self.cols // self.warps_n

    @property
    def mi(self) -> int:
        return self.warp_rows // 16

    @property
    def nj(self) -> int:
        return self.warp_cols // 8

    def __post_init__(self) -> None:
        if self.warps_n & (self.warps_n - 1) or self.warp_rows % 16 or self.warp_cols % 16:
            raise LightspeedError(f"tile shape {self}: warps_n a power of two, warp tiles in 16s")

    def shared_bytes(self, n_b: int) -> int:
        """Static shared memory of the pipelined loop with ``n_b`` B operands (16-bit elements)."""
        return self.stages * (self.rows + n_b * self.cols) * (STEP_K + PAD) * 2


# 4 warps, 64 x 64, three stages (3 x 2 x 5 KiB): the tiles measured so far
SMALL = TileShape(64, 64, 2, 2, 3, "matmul_mma")
# 8 warps, 128 x 128, each warp 64 x 32 (half the shared-memory and global reads per product of
# the small tile), two stages within the 48 KiB of static shared memory (2 x 20 KiB); the gated
# form 128 x 64 per B (its two Bs: the same 2 x 20 KiB), each warp 32 x 32 of each
LARGE = TileShape(128, 128, 2, 4, 2, "matmul_mma_large")
LARGE_GLU = TileShape(128, 64, 4, 2, 2, "matmul_mma_large")
# LIGHTSPEED_CUDA_MMA_TILE=128: the products take the large tiles (not yet run on a GPU)
LARGE_TILES = os.environ.get("LIGHTSPEED_CUDA_MMA_TILE", "64") == "128"
# the tiles load their fragments with ldmatrix (4x fewer shared-memory instructions per product;
# checked on an H100, 512-token 1B prefill 23.9 -> 23.2 ms); LIGHTSPEED_CUDA_LDMATRIX=0: 32-bit loads
LDMATRIX = os.environ.get("LIGHTSPEED_CUDA_LDMATRIX", "1") == "1"


@dataclass(frozen=True)
class _Operand:
    """One operand of a tile's products as its k steps read it: ``src[base + r * stride_o +
    l * stride_k]`` for row r (of m for A, of n for a B) from ``start`` below ``bound``, l of k."""

    src: str
    start: str
    bound: str
    base: str
    stride_o: str
    stride_k: str
    row_vec: bool  # rows contiguous along k, every row start a whole 8 elements apart: 16-byte loads
    k_fast: bool  # copy with k fastest across the threads (else the rows: a column-major operand)
    row_map: str | None = None  # a shared array: tile row r is the operand's row row_map[r] (gathered rows)

    def row(self, r: str, gr: str) -> str:
        """The offset from ``base`` of tile row ``r`` (the operand's row ``gr`` unless gathered)."""
        return f"{self.row_map}[{r}] * {self.stride_o}" if self.row_map else f"{gr} * {self.stride_o}"


def _operand(w: Writer, src: str, start: str, bound: str, base: str, stride_o: Expr, stride_k: Expr,
             row_map: str | None = None) -> _Operand:
    row_vec = stride_k == 1 and stride_o.is_const and stride_o.value % VEC == 0
    return _Operand(src, start, bound, base, w.expr(stride_o), w.expr(stride_k), row_vec,
                    stride_k == 1 or stride_o != 1, row_map)


def _tiles(w: Writer, kind: str, st: str, k: Expr, a_op: _Operand, b_ops: list[_Operand], ts: TileShape) -> None:
    """The block's tile of C (``ts``) for each B in ``b_ops`` (accumulators ``_ls_c0``, ``_ls_c1``,
    ... in float32), A's fragments shared by every B: the shared buffers, the cp.async loop where
    every operand's rows run along k in whole 8s, else (and at run time when a pointer is not
    16-byte aligned) the synchronous loop."""
    kk = w.expr(k)
    nb = len(b_ops)
    w.line("const int _ls_t = threadIdx.x, _ls_warp = _ls_t >> 5, _ls_lane = _ls_t & 31;")
    shift = ts.warps_n.bit_length() - 1  # warps_n is a power of two
    w.line(f"const int _ls_wm = (_ls_warp >> {shift}) * {ts.warp_rows}, "
           f"_ls_wn = (_ls_warp & {ts.warps_n - 1}) * {ts.warp_cols};")
    w.line("const int _ls_g = _ls_lane >> 2, _ls_tg = (_ls_lane & 3) * 2;")
    for j in range(nb):
        w.line(f"float _ls_c{j}[{ts.mi}][{ts.nj}][4];")
        w.line(f"{UNROLL} for (int i = 0; i < {ts.mi}; i++) {UNROLL} for (int j = 0; j < {ts.nj}; j++) "
               f"{UNROLL} for (int e = 0; e < 4; e++) _ls_c{j}[i][j][e] = 0.0f;")
    operands = [(a_op, "_ls_as", ts.rows), *((b, f"_ls_bs{j}", ts.cols) for j, b in enumerate(b_ops))]
    # every operand's rows contiguous along k in whole 8s: ts.stages steps of k in flight through
    # cp.async (the next steps' copies overlap this step's products), when every pointer is 16-byte
    # aligned at run time; else the synchronous loop below, on stage 0 of the same buffers
    pipelined = all(o.row_vec for o, _, _ in operands) and k.is_const and k.value % VEC == 0
    if pipelined:
        for _, buf, rows in operands:
            w.line(f"__shared__ __align__(16) {st} {buf}_p[{ts.stages}][{rows}][{STEP_K + PAD}];")
            w.line(f"{st} (*{buf})[{STEP_K + PAD}] = {buf}_p[0];")
        _pipelined(w, kind, kk, operands, ts)
        w.line("else {")
    else:
        for _, buf, rows in operands:
            w.line(f"__shared__ __align__(16) {st} {buf}[{rows}][{STEP_K + PAD}];")
    w.line(f"for (long long _ls_k0 = 0; _ls_k0 < {kk}; _ls_k0 += {STEP_K}) {{")
    # the operands' parts of this step, the contiguous axis fastest across the threads (coalesced)
    for o, buf, rows in operands:
        per = rows * STEP_K // ts.threads
        if o.row_vec:
            # rows contiguous along k, every row start a multiple of 8 elements from the base (checked
            # at run time with the offset and the pointer): 16-byte loads of 8 elements, a row's
            # last partial 8 (k past the step or the operand) element by element
            w.line(f"  if ((((unsigned long long)({o.src} + {o.base})) & 15) == 0) {{")
            w.line(f"    for (int _ls_e = 0; _ls_e < {per // VEC}; _ls_e++) {{")
            w.line(f"      const int _ls_x = _ls_t + {ts.threads} * _ls_e;")
            w.line(f"      const int _ls_r = _ls_x / {STEP_K // VEC}, _ls_q = (_ls_x % {STEP_K // VEC}) * {VEC};")
            w.line(f"      const long long _ls_gr = {o.start} + _ls_r, _ls_gk = _ls_k0 + _ls_q;")
            w.line(f"      const {st}* _ls_p = {o.src} + {o.base} + {o.row('_ls_r', '_ls_gr')} + _ls_gk;")
            w.line(f"      if (_ls_gr < {o.bound} && _ls_gk + {VEC} <= {kk}) {{")
            w.line(f"        *(uint4*)&{buf}[_ls_r][_ls_q] = *(const uint4*)_ls_p;")
            w.line("      } else {")
            w.line(f"        for (int _ls_v = 0; _ls_v < {VEC}; _ls_v++)")
            w.line(f"          {buf}[_ls_r][_ls_q + _ls_v] = _ls_gr < {o.bound} && _ls_gk + _ls_v < {kk} ? "
                   f"_ls_p[_ls_v] : ({st})0;")
            w.line("      }")
            w.line("    }")
            w.line("  } else")
        w.line(f"  for (int _ls_e = 0; _ls_e < {per}; _ls_e++) {{")
        w.line(f"    const int _ls_x = _ls_t + {ts.threads} * _ls_e;")
        if o.k_fast:
            w.line(f"    const int _ls_r = _ls_x / {STEP_K}, _ls_q = _ls_x % {STEP_K};")
        else:
            w.line(f"    const int _ls_q = _ls_x / {rows}, _ls_r = _ls_x % {rows};")
        w.line(f"    const long long _ls_gr = {o.start} + _ls_r, _ls_gk = _ls_k0 + _ls_q;")
        w.line(f"    {buf}[_ls_r][_ls_q] = _ls_gr < {o.bound} && _ls_gk < {kk} ? "
               f"{o.src}[{o.base} + {o.row('_ls_r', '_ls_gr')} + _ls_gk * {o.stride_k}] : ({st})0;")
        w.line("  }")
    w.line("  __syncthreads();")
    _step_products(w, kind, "_ls_as", [f"_ls_bs{j}" for j in range(nb)], "  ", ts)
    w.line("  __syncthreads();")
    w.line("}")
    if pipelined:
        w.line("}")


def _each_result(w: Writer, mm: str, nn: str, value: Callable[[str], str], ts: TileShape, row0: str = "_ls_m0",
                 at: Callable[[str, str], str] | None = None) -> None:
    """Store ``value(flat index)`` for each element of C this thread holds: thread (g, tg) holds
    rows g and g + 8, columns tg and tg + 1 of each 16 x 8 (the accumulators' ``[i][j][e]``), the
    tile's rows from ``row0`` below ``mm``; ``at(row, col)``: where the element goes (default
    row-major [*batch, mm, nn] at batch index ``bi``)."""
    w.index_vars |= {"_ls_oz"}
    w.line(f"{UNROLL} for (int i = 0; i < {ts.mi}; i++) {UNROLL} for (int j = 0; j < {ts.nj}; j++) "
           f"{UNROLL} for (int e = 0; e < 4; e++) {{")
    w.line(f"  const long long _ls_row = {row0} + _ls_wm + 16 * i + _ls_g + (e >> 1) * 8;")
    w.line("  const long long _ls_col = _ls_n0 + _ls_wn + 8 * j + _ls_tg + (e & 1);")
    w.line(f"  if (_ls_row < {mm} && _ls_col < {nn}) {{")
    oz = at("_ls_row", "_ls_col") if at else f"(bi * {mm} + _ls_row) * {nn} + _ls_col"
    w.line(f"    const long long _ls_oz = {oz};")
    w.push()
    stored = value("_ls_oz")
    lines = w.pop()
    w.scope.lines.extend("    " + ln for ln in lines)
    w.line(f"    out[_ls_oz] = {stored};")
    w.line("  }")
    w.line("}")


def _check_dtypes(op: LOp, in_dtypes: list[DType], dialect: str, n_products: int) -> str:
    if dialect != "cuda":
        raise LightspeedError(f"{op.op}: tensor-core tiles exist only in the cuda dialect")
    ds = in_dtypes[:1 + n_products]
    if not (all(d == op.dtype for d in ds) and op.dtype.name in MMA_DTYPES):
        raise LightspeedError(f"{op.op}: operands and result must share bfloat16 or float16, got "
                              f"{', '.join(d.name for d in ds)} -> {op.dtype.name}")
    return MMA_DTYPES[op.dtype.name]


def _tile_item(w: Writer, m: Expr, n: Expr, ts: TileShape) -> tuple[str, str]:
    """The item's row and column tile (``_ls_tm``, ``_ls_tn``; their first row and column
    ``_ls_m0``, ``_ls_n0``) and ``_ls_rest``, the item's batch index."""
    tiles_n = w.expr((n + (ts.cols - 1)) // ts.cols)
    tiles_m = w.expr((m + (ts.rows - 1)) // ts.rows)
    w.line(f"const long long _ls_tn = _ls_item % {tiles_n};")
    w.line(f"const long long _ls_tm = (_ls_item / {tiles_n}) % {tiles_m};")
    w.line(f"long long _ls_rest = _ls_item / ({tiles_n} * {tiles_m});")
    w.line(f"const long long _ls_m0 = _ls_tm * {ts.rows}, _ls_n0 = _ls_tn * {ts.cols};")
    return w.expr(m), w.expr(n)


def mma_kernel(op: LOp, in_dtypes: list[DType], dialect: str = "cuda") -> KernelSpec:
    """``MatmulMma`` / ``MatmulAddMma``: the module docstring's tile, plus the addend."""
    kind = _check_dtypes(op, in_dtypes, dialect, 2)
    a = op.args
    st = storage_type(in_dtypes[0])
    w = Writer("cuda")
    w.index_vars |= {"_ls_item"}
    batch = list(a["batch"])
    m, n, k = a["m"], a["n"], a["k"]
    ts = LARGE if LARGE_TILES else SMALL
    w.push()
    mm, nn = _tile_item(w, m, n, ts)
    w.line("const long long bi = _ls_rest;")
    w.line(f"long long oa = {w.expr(a['a_offset'])}, ob = {w.expr(a['b_offset'])};")
    batch_offsets(w, batch, a["a_batch_strides"], a["b_batch_strides"], "_ls_rest")
    _tiles(w, kind, st, k, _operand(w, "in0", "_ls_m0", mm, "oa", a["a_stride_m"], a["a_stride_k"]),
           [_operand(w, "in1", "_ls_n0", nn, "ob", a["b_stride_n"], a["b_stride_k"])], ts)
    bufs = [("out", storage_type(op.dtype), True, "out"), ("in0", st, False, 0), ("in1", st, False, 1)]
    region = None
    if "r_view" in a:
        region = Region(w, [a["r_view"]], [in_dtypes[2]], False, names=["in2"])
        bufs.append(("in2", storage_type(in_dtypes[2]), False, 2))

    def value(flat: str) -> str:
        if region is None:
            return store(op.dtype, "_ls_c0[i][j][e]")
        return store(op.dtype, f"(_ls_c0[i][j][e] + (float){region.leaf(0, flat)})")

    _each_result(w, mm, nn, value, ts)
    body = w.pop()
    count = prod(batch) * ((m + (ts.rows - 1)) // ts.rows) * ((n + (ts.cols - 1)) // ts.cols)
    return finish(w, "cuda", ts.kind, bufs, count, body, "matmul_mma", preludes=("mma",))


def glu_mma_kernel(op: LOp, in_dtypes: list[DType], dialect: str = "cuda") -> KernelSpec:
    """``MatmulGLUMma`` / ``MatmulGeGLUMma``: ``MatmulGLU`` / ``MatmulGeGLU`` (semantics in
    codegen/fused.py) on the tensor cores -- the
    gate's and the up's tiles of one block of C from the same tiles of A, each rounded to the dtype
    as the products it replaces are, then SiLU·mul (tanh-GELU·mul) in float (a prompt's MLP: one kernel and one
    read of A for both products)."""
    kind = _check_dtypes(op, in_dtypes, dialect, 3)
    a = op.args
    st = storage_type(in_dtypes[0])
    w = Writer("cuda")
    w.index_vars |= {"_ls_item"}
    m, n, k = a["m"], a["n"], a["k"]
    ts = LARGE_GLU if LARGE_TILES else SMALL
    w.push()
    mm, nn = _tile_item(w, m, n, ts)
    w.line("const long long bi = 0;")
    one = const(1)
    _tiles(w, kind, st, k, _operand(w, "in0", "_ls_m0", mm, f"({w.expr(a['a_offset'])})", a["a_stride_m"], one),
           [_operand(w, f"in{i}", "_ls_n0", nn, f"({w.expr(a[p + '_offset'])})", a[f"{p}_stride_n"], one)
            for i, p in ((1, "g"), (2, "u"))], ts)
    consts, const_bufs = gate_constants(op, in_dtypes, 3)

    def value(flat: str) -> str:
        return gated_mul(w, op.dtype, "_ls_c0[i][j][e]", "_ls_c1[i][j][e]", consts)

    _each_result(w, mm, nn, value, ts)
    body = w.pop()
    bufs = [("out", storage_type(op.dtype), True, "out"), ("in0", st, False, 0), ("in1", st, False, 1),
            ("in2", st, False, 2), *const_bufs]
    count = ((m + (ts.rows - 1)) // ts.rows) * ((n + (ts.cols - 1)) // ts.cols)
    return finish(w, "cuda", ts.kind, bufs, count, body, f"{glu_label(op)}_mma", preludes=("mma",))


def gather_mma_kernel(op: LOp, in_dtypes: list[DType], dialect: str = "cuda") -> KernelSpec:
    """``GatherMatmulMma``: ``GatherMatmul`` (semantics in codegen/fused.py) grouped by expert on
    the tensor cores, where B is whole picked rows (:func:`~.matmul.grouped_layout`: a mixture-of-
    experts prompt's products) and A one contiguous row per batch index.  An item per (picked row
    e of W, 64 of its R rows; e = w_rows for indexes outside W): the block's threads test the index
    128 picks a pass, collecting e's picks in index order (a warp ballot, then the warps' counts)
    into shared memory; every 64 collected (and the rest at the end) are one 64 x 64 tile of the
    SMALL shape whose A rows are those picks' rows (a row map into A), B e's rows -- each expert's
    weights read once per 64 of the tokens that chose it, on the tensor cores, where the dense form
    runs every expert for every token.  Float32 sums rounded once, as MatmulMma's.  Picks of an
    index outside W: zeros and the call's error word.  Any other layout or dtype: the warp-per-
    output kernel (:func:`~.matmul.gather_matmul_kernel`)."""
    from .matmul import gather_matmul_kernel, grouped_layout

    a = op.args
    da, di, db = in_dtypes
    layout = grouped_layout(op)
    fits = (layout is not None and dialect == "cuda" and da == db == op.dtype and op.dtype.name in MMA_DTYPES
            and str(a["m"]) == "1" and str(a["a_stride_k"]) == "1")
    if not fits:
        return gather_matmul_kernel(dialect, op, in_dtypes)
    r_rows, per_b = layout
    kind = MMA_DTYPES[op.dtype.name]
    st = storage_type(da)
    ts = SMALL
    w = Writer("cuda")
    w.index_vars |= {"_ls_item"}
    (bsize,) = a["batch"]
    k = a["k"]
    rows, inner = w.expr(a["w_rows"]), w.expr(a["inner"])
    picks = w.expr(bsize * per_b)
    ao, abs0 = w.expr(a["a_offset"]), a["a_batch_strides"][0]
    tiles_n = -(-r_rows // ts.cols)
    # a pass tests one pick a thread; a tile takes the picks of its rows: at most tp - 1 left over
    # from the passes before, plus one pass's, wait in shared memory
    scan, tp = ts.threads, ts.rows
    cap = tp + scan
    w.push()
    w.line(f"const long long _ls_ex = _ls_item / {tiles_n}, _ls_n0 = (_ls_item % {tiles_n}) * {ts.cols};")
    w.line("const int _ls_gt = threadIdx.x, _ls_gw = _ls_gt >> 5, _ls_gl = _ls_gt & 31;")
    w.line(f"__shared__ long long _ls_pk[{cap}], _ls_arow[{tp}];  // e's picks in index order; their rows of A")
    w.line(f"__shared__ int _ls_wc[{scan // 32}];")
    w.line("int _ls_np = 0;  // picks collected (the same in every thread)")
    w.line(f"for (long long _ls_s0 = 0; _ls_s0 < {picks}; _ls_s0 += {scan}) {{")
    w.line("  const long long _ls_pr = _ls_s0 + _ls_gt;")
    w.line("  bool _ls_hit = false;")
    w.line(f"  if (_ls_pr < {picks}) {{")
    w.line("    const long long e = (long long)in1[_ls_pr];")
    w.line(f"    _ls_hit = _ls_ex == {rows} ? (e < 0 || e >= {rows}) : e == _ls_ex;")
    w.line("  }")
    w.line("  const unsigned int _ls_bal = __ballot_sync(0xffffffffu, _ls_hit);")
    w.line("  if (_ls_gl == 0) _ls_wc[_ls_gw] = __popc(_ls_bal);")
    w.line("  __syncthreads();")
    w.line("  int _ls_at = _ls_np, _ls_all = _ls_np;")
    w.line(f"  for (int u = 0; u < {scan // 32}; u++) {{ _ls_at += u < _ls_gw ? _ls_wc[u] : 0; "
           "_ls_all += _ls_wc[u]; }")
    w.line("  if (_ls_hit) _ls_pk[_ls_at + __popc(_ls_bal & ((1u << _ls_gl) - 1u))] = _ls_pr;")
    w.line("  _ls_np = _ls_all;")
    w.line("  __syncthreads();")
    w.line(f"  const bool _ls_last = _ls_s0 + {scan} >= {picks};")
    w.line(f"  while (_ls_np >= {tp} || (_ls_last && _ls_np > 0)) {{")
    w.line(f"    const int _ls_cnt = _ls_np < {tp} ? _ls_np : {tp};")
    w.line(f"    if (_ls_ex < {rows}) {{")
    w.line(f"      if (_ls_gt < {tp}) _ls_arow[_ls_gt] = _ls_gt < _ls_cnt ? _ls_pk[_ls_gt] / {per_b} : 0;")
    w.line("      __syncthreads();")
    w.line("      {")
    _tiles(w, kind, st, k, _operand(w, "in0", "0", "_ls_cnt", f"({ao})", abs0, const(1), row_map="_ls_arow"),
           [_operand(w, "in2", "_ls_n0", str(r_rows), f"_ls_ex * {inner}", k, const(1))], ts)
    # tile row r is pick pk[r], whose outputs are row pk[r] of out [picks, R]
    _each_result(w, "_ls_cnt", str(r_rows), lambda flat: store(op.dtype, "_ls_c0[i][j][e]"), ts, row0="0",
                 at=lambda row, col: f"_ls_pk[{row}] * {r_rows} + {col}")
    w.line("      }")
    w.line("    } else {  // picks of an index outside W: zeros, and the call's error word")
    w.line(f"      for (int x = _ls_gt; x < _ls_cnt * {ts.cols}; x += {ts.threads}) {{")
    w.line(f"        const long long _ls_col = _ls_n0 + x % {ts.cols};")
    w.line(f"        if (_ls_col < {r_rows}) "
           f"out[_ls_pk[x / {ts.cols}] * {r_rows} + _ls_col] = ({storage_type(op.dtype)})0;")
    w.line("      }")
    w.line("      if (_ls_gt == 0) ls_oob(T);")
    w.line("    }")
    w.line("    __syncthreads();  // the stores read the picks: then the rest move down")
    w.line(f"    const long long _ls_mv = _ls_gt + {tp} < _ls_np ? _ls_pk[_ls_gt + {tp}] : 0;")
    w.line("    __syncthreads();")
    w.line(f"    if (_ls_gt + {tp} < _ls_np) _ls_pk[_ls_gt] = _ls_mv;")
    w.line("    __syncthreads();")
    w.line("    _ls_np -= _ls_cnt;")
    w.line("  }")
    w.line("}")
    body = w.pop()
    bufs = [("out", storage_type(op.dtype), True, "out"), ("in0", st, False, 0),
            ("in1", storage_type(di), False, 1), ("in2", st, False, 2)]
    count = (a["w_rows"] + 1) * tiles_n
    return finish(w, "cuda", ts.kind, bufs, count, body, "gather_matmul_mma", preludes=("mma",))


def _step_products(w: Writer, kind: str, As: str, Bs: list[str], ind: str, ts: TileShape) -> None:
    """One STEP_K of k: each warp's mi x nj instructions per 16 of k and per B from the shared tiles
    ``As`` ([m][k]) and each of ``Bs`` ([n][k]) into its accumulators, fragments in the PTX layout
    (A's read once for every B): by ``ldmatrix`` (LDMATRIX: one instruction per 16 x 16 of A and
    per two 8-column blocks of B) or by 32-bit shared loads."""
    w.line(f"{ind}for (int _ls_kk = 0; _ls_kk < {STEP_K}; _ls_kk += 16) {{")
    w.line(f"{ind}  unsigned int _ls_fa[{ts.mi}][4], _ls_fb[{ts.nj}][2];")
    if LDMATRIX:
        # thread t: row t % 8 of matrix t / 8; A's matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15) in
        # the order a0 a1 a2 a3, B's (8 columns j, j + 1) x (k 0-7 | 8-15) as b[j][0] b[j][1] b[j+1][0] b[j+1][1]
        w.line(f"{ind}  const int _ls_lq = _ls_lane >> 3, _ls_lr = _ls_lane & 7;")
        w.line(f"{ind}  {UNROLL} for (int i = 0; i < {ts.mi}; i++)")
        w.line(f"{ind}    ls_ldmatrix_x4(_ls_fa[i], &{As}[_ls_wm + 16 * i + _ls_lr + (_ls_lq & 1) * 8]"
               "[_ls_kk + (_ls_lq >> 1) * 8]);")
    else:
        w.line(f"{ind}  {UNROLL} for (int i = 0; i < {ts.mi}; i++) {{")
        w.line(f"{ind}    const int r = _ls_wm + 16 * i + _ls_g, c = _ls_kk + _ls_tg;")
        w.line(f"{ind}    _ls_fa[i][0] = *(const unsigned int*)&{As}[r][c];")
        w.line(f"{ind}    _ls_fa[i][1] = *(const unsigned int*)&{As}[r + 8][c];")
        w.line(f"{ind}    _ls_fa[i][2] = *(const unsigned int*)&{As}[r][c + 8];")
        w.line(f"{ind}    _ls_fa[i][3] = *(const unsigned int*)&{As}[r + 8][c + 8];")
        w.line(f"{ind}  }}")
    for idx, B in enumerate(Bs):
        if LDMATRIX:
            w.line(f"{ind}  {UNROLL} for (int j = 0; j < {ts.nj}; j += 2)")
            w.line(f"{ind}    ls_ldmatrix_x4(&_ls_fb[j][0], &{B}[_ls_wn + 8 * (j + (_ls_lq >> 1)) + _ls_lr]"
                   "[_ls_kk + (_ls_lq & 1) * 8]);")
        else:
            w.line(f"{ind}  {UNROLL} for (int j = 0; j < {ts.nj}; j++) {{")
            w.line(f"{ind}    const int r = _ls_wn + 8 * j + _ls_g, c = _ls_kk + _ls_tg;")
            w.line(f"{ind}    _ls_fb[j][0] = *(const unsigned int*)&{B}[r][c];")
            w.line(f"{ind}    _ls_fb[j][1] = *(const unsigned int*)&{B}[r][c + 8];")
            w.line(f"{ind}  }}")
        w.line(f"{ind}  {UNROLL} for (int i = 0; i < {ts.mi}; i++) {UNROLL} for (int j = 0; j < {ts.nj}; j++) "
               f"ls_mma_{kind}(_ls_c{idx}[i][j], _ls_fa[i], _ls_fb[j]);")
    w.line(f"{ind}}}")


def _pipelined(w: Writer, kind: str, kk: str, operands: list[tuple[_Operand, str, int]], ts: TileShape) -> None:
    """The tile's loop over k with ``ts.stages`` shared buffers per operand (``<buf>_p``) filled by
    cp.async: steps s + 1 ... s + stages - 1 are in flight while step s's products run.  A chunk
    of 8 elements past m, n or k is zero-filled (its source clamped to the operand's start).
    Opens the run-time branch (``if (aligned) { ... }``); the caller appends the synchronous
    ``else``."""
    aligned = " | ".join(f"((unsigned long long)({o.src} + {o.base}))" for o, _, _ in operands)
    w.line(f"if ((({aligned}) & 15) == 0) {{")
    w.line(f"  const long long _ls_steps = ({kk} + {STEP_K - 1}) / {STEP_K};")
    w.push()
    for o, buf, rows in operands:
        chunks = rows * STEP_K // VEC // ts.threads  # 16-byte chunks per thread per operand and step
        w.line(f"for (int _ls_e = 0; _ls_e < {chunks}; _ls_e++) {{")
        w.line(f"  const int _ls_x = _ls_t + {ts.threads} * _ls_e;")
        w.line(f"  const int _ls_r = _ls_x / {STEP_K // VEC}, _ls_q = (_ls_x % {STEP_K // VEC}) * {VEC};")
        w.line(f"  const long long _ls_gr = {o.start} + _ls_r, _ls_gk = _ls_ks + _ls_q;")
        w.line(f"  const bool _ls_in = _ls_gr < {o.bound} && _ls_gk < {kk};")
        w.line(f"  ls_cp_async16(&{buf}_p[_ls_sb][_ls_r][_ls_q], {o.src} + {o.base} + "
               f"(_ls_in ? {o.row('_ls_r', '_ls_gr')} + _ls_gk : 0), _ls_in ? 16 : 0);")
        w.line("}")
    issue = w.pop()

    def copy_step(step: str, ind: str) -> None:  # the copies of step ``step`` (if any), one group
        w.line(f"{ind}if ({step} < _ls_steps) {{")
        w.line(f"{ind}  const int _ls_sb = (int)(({step}) % {ts.stages}); "
               f"const long long _ls_ks = ({step}) * {STEP_K};")
        w.scope.lines.extend(f"{ind}  " + ln for ln in issue)
        w.line(f"{ind}}}")
        w.line(f"{ind}ls_cp_commit();")  # (an empty group past the last step keeps the count)

    for s0 in range(ts.stages - 1):
        copy_step(str(s0), "  ")
    w.line("  for (long long _ls_s = 0; _ls_s < _ls_steps; _ls_s++) {")
    copy_step(f"_ls_s + {ts.stages - 1}", "    ")
    w.line(f"    LS_CP_WAIT({ts.stages - 1});")  # all but the newest stages - 1 groups: step s is here
    w.line("    __syncthreads();")
    w.line(f"    const int _ls_cb = (int)(_ls_s % {ts.stages});")
    _step_products(w, kind, f"{operands[0][1]}_p[_ls_cb]", [f"{buf}_p[_ls_cb]" for _, buf, _ in operands[1:]], "    ",
                   ts)
    w.line("    __syncthreads();")  # before a later step's copies overwrite this buffer
    w.line("  }")
    w.line("}")


def _mma(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [mma_kernel(op, in_dtypes, dialect)]


def _glu_mma(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [glu_mma_kernel(op, in_dtypes, dialect)]


def _gather_mma(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [gather_mma_kernel(op, in_dtypes, dialect)]


RENDERERS = {"MatmulMma": _mma, "MatmulAddMma": _mma, "MatmulGLUMma": _glu_mma, "MatmulGeGLUMma": _glu_mma,
             "GatherMatmulMma": _gather_mma}
