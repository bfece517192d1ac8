"""Attention on the tensor cores (cuda dialect, sm_80+): ``AttentionMma``, the ``Attention`` op
(semantics in ``codegen/fused.py``) of a bfloat16 or float16 result with equal static key and
value head dims (a multiple of 16, at most 128), as a flash-attention tile -- a prompt's attention,
where the one-block-per-row kernel (:mod:`.attention`) runs every score on the CUDA cores.

A block of 4 warps (kind ``matmul_mma``: 128 threads) takes 64 query rows of one batch index
(16 per warp), one item of a grid-stride loop over (batch index, row tile).  The queries are
evaluated through their body once, rounded to the dtype, into shared memory and then into each
warp's ``mma.sync.m16n8k16`` A fragments; per tile of BN keys the keys ([key][c]) and the values
([key][j], read by a transposing ``ldmatrix``; transposed [j][key] for 32-bit loads with
``LIGHTSPEED_CUDA_LDMATRIX=0``) go through their bodies into shared memory (16-byte copies where
a body is a buffer with aligned rows), the scores S = Q K^T come
out of the tensor cores in float32, the mask is added per score, and an online softmax in base 2
(running maximum per row, shared by the row's 4 threads through shuffles) rescales the running
output; the probabilities, rounded to the dtype, are the A fragments of O += P V (the S
accumulators' layout is the A layout of the next product, so P never leaves the registers).  At
the end each row is divided by its sum.  Keys past n score minus infinity (an exact 0).

Batch axes along which the keys and the values do not move (batch stride 0 for both: a decode
or extend step's query positions, batched with the KV heads and m = the heads of a group) are
folded into the rows: a tile's 64 rows run over (those axes, m), so a chunk of 2048 positions of
a GQA model fills its tiles (2048 x 4 rows per KV head on a 1B) instead of 4 rows of 64.

Numerics differ from the CUDA-core kernel by the dtype rounding of the bodies' queries, keys and
values (already of the dtype when they are leaves) and of the probabilities: bf16's tolerance.
A row's result depends only on its own scores (batch invariance), but its key order is the tile
order, not the other kernel's: the search compares them against the reference, not bit for bit.
"""

from __future__ import annotations

import os

from ....dtypes import DType
from ....egraph.llir import LOp
from ....errors import LightspeedError
from ....symbolic import gcd_const, prod, sym
from . import matmul_mma
from .attention import NINF, Operand, blocked_value, nested
from .region import Region
from .spec import KernelSpec
from .types import storage_type, store
from .writer import Point, Writer, finish, index_at

__all__ = ["attention_mma_kernel", "RENDERERS", "ROWS"]

ROWS = 64  # query rows per block (16 per warp)
MMA_DTYPES = {"bfloat16": "bf16", "float16": "f16"}
PAD = 8  # elements after each shared row (bank spread; 4-byte pairs stay aligned)
# LIGHTSPEED_CUDA_ATTENTION_PIPELINE=0: each key tile loaded, then its products (an A/B switch;
# default: the next tile's 16-byte loads issued before this tile's products)
PIPELINE = os.environ.get("LIGHTSPEED_CUDA_ATTENTION_PIPELINE", "1") != "0"
# LIGHTSPEED_CUDA_ATTENTION_MIN_BLOCKS=3: the tile is compiled for 3 blocks a multiprocessor (at most
# 170 registers a thread; ptxas gives the 1B's tile 254, so 2 blocks of 4 warps: 12% occupancy, warps
# waiting on memory with little else to run, ncu, twenty-third session); an A/B switch, default 0
# (ptxas's choice)
MIN_BLOCKS = int(os.environ.get("LIGHTSPEED_CUDA_ATTENTION_MIN_BLOCKS", "0"))
# LIGHTSPEED_CUDA_ATTENTION_PACKED_MASK=1: the next key tile's mask values, held in registers across
# a tile's softmax and products, are kept as pairs of the result's 16-bit dtype (a thread's two
# keys of a row share a register: 16 registers instead of 32) where the mask is of that dtype (its
# values are then exact); default on: with the unrolled query staging below, the 1B's 512-token tile
# 28.11 -> 27.09 us a launch (H100, thirtieth session); ``0``: 32-bit mask registers
PACKED_MASK = os.environ.get("LIGHTSPEED_CUDA_ATTENTION_PACKED_MASK", "1") != "0"
# LIGHTSPEED_CUDA_ATTENTION_SPLIT=1: a row tile's keys split over a cluster of 2 blocks (kind
# ``matmul_mma_pair``), each taking every other key tile, the second block's running output,
# maximum and sum merged into the first's through distributed shared memory (a buffer over the
# tiles, free once the keys are walked); the row tiles in descending order.  A causal 512-token
# prompt's last row tiles walk 8 key tiles while the first walk 1, and the grid is one wave: the
# longest tile sets the time (38 us a layer on the 1B, cuDNN's ~21).  An A/B switch, off: correct
# (its GPU tests passed) but slower -- the 1B's 512-token prefill 4.115 ms against the defaults'
# 3.443 on an H200 (2026-12-07), ~42 us a layer more
SPLIT = os.environ.get("LIGHTSPEED_CUDA_ATTENTION_SPLIT", "0") == "1"
# LIGHTSPEED_CUDA_ATTENTION_Q_UNROLL=8: a query body (RoPE inlined, say) staged 8 elements a thread at
# a time into registers, their loads in flight together (a divisor of the d / 2 elements a thread
# stages); ``0``: one element at a time behind its test, whose load waits were 56% of the 1B's
# 512-token tile (ncu, H100, twenty-ninth session).  Default 8: that tile 38.29 -> 28.11 us a launch
# (kernel by kernel, H100, thirtieth session; the SASS issues 8 elements' loads together)
Q_UNROLL = int(os.environ.get("LIGHTSPEED_CUDA_ATTENTION_Q_UNROLL", "8"))


def _is(e, value: int) -> bool:
    return not e.free_vars() and int(e.value) == value


def attention_mma_kernel(op: LOp, in_dtypes: list[DType], dialect: str = "cuda") -> KernelSpec:
    if dialect != "cuda":
        raise LightspeedError(f"{op.op}: tensor-core attention exists only in the cuda dialect")
    a = op.args
    if op.dtype.name not in MMA_DTYPES:
        raise LightspeedError(f"{op.op}: the result must be bfloat16 or float16, got {op.dtype.name}")
    if a["k"].free_vars() or a["dv"].free_vars():
        raise LightspeedError(f"{op.op}: the head dims must be static, got {a['k']} and {a['dv']}")
    d, dv = int(a["k"].value), int(a["dv"].value)
    if d != dv or d % 16 or not 16 <= d <= 128:
        raise LightspeedError(f"{op.op}: key and value head dims must be equal multiples of 16 up to 128, "
                              f"got {d} and {dv}")
    kind = MMA_DTYPES[op.dtype.name]
    split = SPLIT
    # the unrolled query staging (its rows clamped, not divided: every element's body in range)
    q_unroll = Q_UNROLL if Q_UNROLL > 0 and (ROWS * d // 128) % Q_UNROLL == 0 else 0
    ldm = matmul_mma.LDMATRIX  # fragments by ldmatrix (the tiles' switch, LIGHTSPEED_CUDA_LDMATRIX)
    bn = 64 if d <= 64 else 32  # keys per tile: the three shared tiles stay within 48 KiB
    st = storage_type(op.dtype)
    w = Writer("cuda")
    batch = list(a["batch"])
    m, n = a["m"], a["n"]
    mm, nn = w.expr(m), w.expr(n)

    folded = [x for x in range(len(batch)) if _is(a["k_batch_strides"][x], 0) and _is(a["v_batch_strides"][x], 0)]
    kept = [x for x in range(len(batch)) if x not in folded]
    rows = prod([batch[x] for x in folded]) * m if folded else m  # a tile's row space: (folded axes, m)
    rr = w.expr(rows)
    tiles = w.expr((rows + (ROWS - 1)) // ROWS)
    names = [f"_ls_b{x}" for x in range(len(batch))]
    w.index_vars |= {"_ls_item", "_ls_mi", "_ls_l", "_ls_z", *names}
    w.push()
    if split:  # the row tiles in descending order, the kept axes inner: a causal prompt's longest first
        kept_n = w.expr(prod([batch[x] for x in kept]) if kept else 1)
        w.line(f"const long long _ls_tile = {tiles} - 1 - _ls_item / {kept_n};")
        w.line(f"long long _ls_rest = _ls_item % {kept_n};")
    else:
        w.line(f"const long long _ls_tile = _ls_item % {tiles};")
        w.line(f"long long _ls_rest = _ls_item / {tiles};")
    # the kept axes' coordinates (the keys' and values' offsets: one set per item)
    oq, ok_, ov = (w.expr(a[f]) for f in ("q_offset", "k_offset", "v_offset"))
    w.line(f"long long _ls_oq = {oq}, _ls_ok = {ok_}, _ls_ov = {ov};")
    for x in reversed(kept):
        size = w.expr(batch[x])
        w.line(f"const long long {names[x]} = _ls_rest % {size}; _ls_rest /= {size};")
        w.line(f"_ls_oq += {names[x]} * {w.expr(a['q_batch_strides'][x])}; "
               f"_ls_ok += {names[x]} * {w.expr(a['k_batch_strides'][x])}; "
               f"_ls_ov += {names[x]} * {w.expr(a['v_batch_strides'][x])};")
    qsm, qsk, ksk, ksn, vsn, vsj = (w.expr(a[f]) for f in ("q_stride_m", "q_stride_k", "k_stride_k", "k_stride_n",
                                                            "v_stride_n", "v_stride_j"))

    def row_coords(r: str, suffix: str, out_row: bool = True) -> None:
        """Row ``r`` of the tile's row space: ``_ls_i<suffix>`` (its row of m), the folded axes'
        coordinates ``_ls_b<x><suffix>``, its queries' offset ``_ls_q<suffix>`` and, with
        ``out_row``, its output row ``_ls_o<suffix>`` (the flat index of (batch, i) in [*batch, m])."""
        w.line(f"long long _ls_f{suffix} = {r};")
        w.line(f"const long long _ls_i{suffix} = _ls_f{suffix} % {mm}; _ls_f{suffix} /= {mm};")
        for x in reversed(folded):
            size = w.expr(batch[x])
            if x == folded[0] and q_unroll:
                # the outermost axis: the quotient left is already below its extent in every row of
                # the row space (rows past it are read and written only behind their tests), so a
                # clamp, not a 64-bit division by a run-time extent (a branch and ~30 instructions
                # an element in a prompt's query staging, which kept loads from overlapping)
                w.line(f"const long long {names[x]}{suffix} = _ls_f{suffix} < {size} ? _ls_f{suffix} : {size} - 1;")
            else:
                w.line(f"const long long {names[x]}{suffix} = _ls_f{suffix} % {size}; _ls_f{suffix} /= {size};")
        q = " + ".join([f"_ls_oq + _ls_i{suffix} * {qsm}"]
                       + [f"{names[x]}{suffix} * {w.expr(a['q_batch_strides'][x])}" for x in folded])
        w.line(f"const long long _ls_q{suffix} = {q};")
        if not out_row:
            return
        flat = "0"
        for x in range(len(batch)):
            coord = names[x] + (suffix if x in folded else "")
            flat = f"({flat}) * {w.expr(batch[x])} + {coord}"
        w.line(f"const long long _ls_o{suffix} = ({flat}) * {mm} + _ls_i{suffix};")

    views = [a["mask_view"], *op.leaf_views]
    region = Region(w, views, list(in_dtypes), False, names=[f"in{k}" for k in range(len(in_dtypes))])
    w.line("const int _ls_t = threadIdx.x, _ls_warp = _ls_t >> 5, _ls_lane = _ls_t & 31;")
    w.line("const int _ls_g = _ls_lane >> 2, _ls_tg = (_ls_lane & 3) * 2;")
    if ldm:  # ldmatrix: lane t gives the address of row t % 8 of matrix t / 8
        w.line("const int _ls_lq = _ls_lane >> 3, _ls_lr = _ls_lane & 7;")
    w.line(f"const long long _ls_m0 = _ls_tile * {ROWS};")
    # the values row-major ([key][j]) read transposed by ldmatrix, else transposed ([j][key]: B's
    # layout for O += P V, read by 32-bit loads)
    tiles = [("_ls_qs", ROWS, d + PAD), ("_ls_ks", bn, d + PAD),
             ("_ls_vs", bn, d + PAD) if ldm else ("_ls_vt", d, bn + PAD)]
    if split:  # one buffer: after the key walk it holds the second block's partial for the merge
        size = max(sum(r * c for _, r, c in tiles) * op.dtype.itemsize, 128 * (d // 2 + 4) * 4)
        w.line(f"__shared__ __align__(16) unsigned char _ls_smem[{size}];")
        at = 0
        for name, r, c in tiles:
            w.line(f"{st} (*{name})[{c}] = ({st} (*)[{c}])(_ls_smem + {at});")
            at += r * c * op.dtype.itemsize
    else:
        for name, r, c in tiles:
            w.line(f"__shared__ __align__(16) {st} {name}[{r}][{c}];")
    w.line("__syncthreads();  // an earlier item's readers are done with the tiles")
    # this thread's two rows of the scores (g and g + 8 of its warp's 16)
    for h in (0, 1):
        row_coords(f"_ls_m0 + _ls_warp * 16 + _ls_g + {8 * h}", f"_{h}")
        w.line(f"const bool _ls_in_{h} = _ls_m0 + _ls_warp * 16 + _ls_g + {8 * h} < {rr};")

    def stage(what: str, count: str, row: str, valid: str, flat: str, dest: str, unroll: int = 0) -> None:
        """Fill a shared tile: element _ls_e -> (row, col), its value the body's at ``flat``.
        ``unroll`` (a divisor of count / 128): ``flat`` is in range for every element (its row
        clamped, :func:`row_coords`), so ``unroll`` elements' bodies are evaluated without a
        branch into registers (each kept where ``valid``), then stored: no shared-memory store
        (which a generic load may alias) between their loads, which are then issued together."""
        if unroll:
            w.line(f"for (int _ls_u = 0; _ls_u < {count} / 128; _ls_u += {unroll}) {{")
            w.line(f"  float _ls_vu[{unroll}];")
            w.line("  #pragma unroll")
            w.line(f"  for (int _ls_k = 0; _ls_k < {unroll}; _ls_k++) {{")
            w.line("    const int _ls_e = _ls_t + 128 * (_ls_u + _ls_k);")
            w.line(f"    const int _ls_r = _ls_e / {d}, _ls_c = _ls_e % {d};")
            w.line(f"    {row}")
            w.line(f"    const long long _ls_{what}z = {flat};")
            value = nested(w, "    ", lambda: region.value(a[f"{what}_body"], f"_ls_{what}z"))
            w.line(f"    _ls_vu[_ls_k] = {valid} ? (float){value} : 0.0f;")
            w.line("  }")
            w.line("  #pragma unroll")
            w.line(f"  for (int _ls_k = 0; _ls_k < {unroll}; _ls_k++) {{")
            w.line("    const int _ls_e = _ls_t + 128 * (_ls_u + _ls_k);")
            w.line(f"    const int _ls_r = _ls_e / {d}, _ls_c = _ls_e % {d};")
            w.line(f"    {dest} = {store(op.dtype, '_ls_vu[_ls_k]')};")
            w.line("  }")
            w.line("}")
            return
        w.line(f"for (int _ls_e = _ls_t; _ls_e < {count}; _ls_e += 128) {{")
        w.line(f"  const int _ls_r = _ls_e / {d}, _ls_c = _ls_e % {d};")
        w.line(f"  {row}")
        w.line("  float _ls_v = 0.0f;")
        w.line(f"  if ({valid}) {{")
        w.line(f"    const long long _ls_{what}z = {flat};")
        value = nested(w, "    ", lambda: region.value(a[f"{what}_body"], f"_ls_{what}z"))
        w.line(f"    _ls_v = (float){value};")
        w.line("  }")
        w.line(f"  {dest} = {store(op.dtype, '_ls_v')};")
        w.line("}")

    def vector_leaf(what: str, stride: str, row_stride: str, axes: list[int] = kept) -> int | None:
        """The leaf a query, key or value body reads when it is one contiguous buffer of the
        result's dtype with unit stride along the head dim and rows, offsets and strides along the
        batch ``axes`` of whole 16-byte vectors: staged 8 elements per load (the buffer's own
        alignment checked at run time, :func:`stage_vector`); else None (element by element
        through the body).  Keys and values move along the kept axes only, queries along all."""
        body = a[f"{what}_body"]
        if body[0] != "leaf" or not region.views[body[1]].is_contiguous or in_dtypes[body[1]] != op.dtype:
            return None
        fields = [a[row_stride], a[f"{what}_offset"], *(a[f"{what}_batch_strides"][x] for x in axes)]
        # (a paged step's batch strides are multiples of the page-table width: gcd_const proves
        # them whole vectors for any width)
        if not (_is(a[stride], 1) and all(gcd_const(e) % 8 == 0 for e in fields)):
            return None
        return body[1]

    per_thread = -(-bn * d // (8 * 128))  # 16-byte vectors of a K or V tile per thread (at most)

    def gathered_runs(what: str, stride: str) -> tuple | None:
        """(the operand, ("tree", index tree, divisors) or ("buffer", index leaf), the data leaf)
        when the key or value body gathers rows of a buffer of the result's dtype through an
        index that rises by one along the head dim (a paged step's keys through its page table,
        :meth:`.attention.Operand.inline_run` / ``run_leaves``): :func:`stage_runs` stages 8
        elements from one computed index with a 16-byte load; else None."""
        if not _is(a[stride], 1):
            return None
        opnd = Operand(w, region, a[f"{what}_body"], in_dtypes, f"_ls_{what}z", prod(a[f"{what}_shape"]))
        inline = opnd.inline_run()
        if inline is not None:
            tree, data, divisors = inline
            how = ("tree", tree, divisors)
        elif (buffer := opnd.run_leaves()) is not None:
            how, data = ("buffer", buffer[0]), buffer[1]
        else:
            return None
        return (opnd, how, data) if in_dtypes[data] == op.dtype else None

    def stage_runs(what: str, off: str, row_stride: str, tile: str) -> None:
        """Fill the K or V tile 8 elements at a time from a gathered body (:func:`gathered_runs`):
        where the 8 elements' indexes are one aligned run inside the data (each divisor's quotient
        kept, the first index computed once; or an index buffer's 8 entries consecutive), one
        16-byte load; else the 8 elements through the body.  Keys past n: zeros."""
        opnd, how, data = runs[what]
        src, var, b = region.names[data], f"_ls_{what}z", f"_ls_{what}b"
        size = w.expr(prod(region.views[data].shape))
        w.line(f"for (int _ls_e = _ls_t * 8; _ls_e < {bn * d}; _ls_e += 1024) {{")
        w.line(f"  const int _ls_r = _ls_e / {d}, _ls_c = _ls_e % {d};")
        w.line("  const long long _ls_l = _ls_l0 + _ls_r;")
        w.line("  uint4 _ls_x8 = make_uint4(0u, 0u, 0u, 0u);")
        w.line(f"  if (_ls_l < {nn}) {{")
        w.line(f"    const long long {b} = {off} + _ls_c + _ls_l * {row_stride};")
        w.index_vars.add(b)
        if how[0] == "tree":
            divs = list(dict.fromkeys(w.expr(x) for x in how[2]))
            w.line(f"    int _ls_one = {' && '.join(f'{b} % {x} + 8 <= {x}' for x in divs) or '1'};")
            w.line("    long long _ls_r0 = 0;")
            w.line("    if (_ls_one) {")
            value = nested(w, "      ", lambda: region.value(how[1], b))
            w.line(f"      _ls_r0 = (long long){value};")
        else:
            ix = region.names[how[1]]
            w.line(f"    long long _ls_r0 = (long long){ix}[{b}];")
            w.line("    int _ls_one = 1;")
            w.line("    {")
            w.line(f"      for (int e = 1; e < 8; e++) _ls_one &= (long long){ix}[{b} + e] == _ls_r0 + e;")
        w.line(f"      _ls_one = _ls_one && _ls_r0 >= 0 && _ls_r0 <= {size} - 8 && "
               f"(((unsigned long long)({src} + _ls_r0)) & 15) == 0;")
        w.line("    }")
        w.line(f"    if (_ls_one) _ls_x8 = *(const uint4*)({src} + _ls_r0);")
        w.line("    else {")
        w.line(f"      __align__(16) {st} _ls_h8[8];")
        w.line("      for (int e = 0; e < 8; e++) {")
        w.line(f"        const long long {var} = {b} + e;")
        value = nested(w, "        ", lambda: region.value(opnd.body, var))
        w.line(f"        _ls_h8[e] = {store(op.dtype, value)};")
        w.line("      }")
        w.line("      _ls_x8 = *(const uint4*)_ls_h8;")
        w.line("    }")
        w.line("  }")
        w.line(f"  *(uint4*)&{tile}[_ls_r][_ls_c] = _ls_x8;")
        w.line("}")

    def load_regs(what: str, leaf: int, off: str, row_stride: str, l0: str, indent: str) -> None:
        """This thread's 16-byte vectors of the K or V tile starting at key ``l0`` into registers
        (``_ls_r<what>``; keys past n: zeros), the loads left in flight."""
        src = region.names[leaf]
        w.line(f"{indent}for (int u = 0; u < {per_thread}; u++) {{")
        w.line(f"{indent}  const int _ls_e = _ls_t * 8 + u * 1024, _ls_r = _ls_e / {d}, _ls_c = _ls_e % {d};")
        w.line(f"{indent}  const long long _ls_l = ({l0}) + _ls_r;")
        w.line(f"{indent}  _ls_r{what}[u] = _ls_e < {bn * d} && _ls_l < {nn} ? *(const uint4*)({src} + {off} "
               f"+ _ls_l * {row_stride} + _ls_c) : make_uint4(0u, 0u, 0u, 0u);")
        w.line(f"{indent}}}")

    def store_regs(what: str, indent: str) -> None:
        """The registers ``load_regs`` filled into the shared tile (the values without ldmatrix:
        transposed element by element)."""
        w.line(f"{indent}for (int u = 0; u < {per_thread}; u++) {{")
        w.line(f"{indent}  const int _ls_e = _ls_t * 8 + u * 1024, _ls_r = _ls_e / {d}, _ls_c = _ls_e % {d};")
        w.line(f"{indent}  if (_ls_e >= {bn * d}) break;")
        if what == "k" or ldm:
            w.line(f"{indent}  *(uint4*)&_ls_{what}s[_ls_r][_ls_c] = _ls_r{what}[u];")
        else:
            w.line(f"{indent}  const {st}* _ls_h = (const {st}*)&_ls_r{what}[u];")
            w.line(f"{indent}  for (int e = 0; e < 8; e++) _ls_vt[_ls_c + e][_ls_r] = _ls_h[e];")
        w.line(f"{indent}}}")

    def stage_vector(what: str, leaf: int, off: str, row_stride: str) -> None:
        """Fill a shared tile with 16-byte loads of 8 elements (keys past n: zeros): this tile's
        vectors into registers, then into shared memory (:func:`load_regs`, :func:`store_regs`)."""
        w.line("  {")
        w.line(f"    uint4 _ls_r{what}[{per_thread}];")
        load_regs(what, leaf, off, row_stride, "_ls_l0", "    ")
        store_regs(what, "    ")
        w.line("  }")

    w.index_vars |= {"_ls_qz", "_ls_kz", "_ls_vz"}
    w.push()
    row_coords("_ls_m0 + _ls_r", "_r", out_row=False)
    q_row = w.pop()
    q_leaf = vector_leaf("q", "q_stride_k", "q_stride_m", list(range(len(batch))))
    if q_leaf is not None:
        # a plain query buffer: 16-byte loads, a row's coordinates once per 8 elements, every
        # load issued before the first store (element by element, the staging was a chain of
        # ROWS * d / 128 loads, each behind two 64-bit divisions: ~14 us of the 28 a 32-token
        # prompt's attention took on an H100, ncu, twentieth session)
        src = region.names[q_leaf]
        per_q = ROWS * d // (8 * 128)
        w.line(f"if ((((unsigned long long){src}) & 15) == 0) {{")
        w.line(f"  uint4 _ls_rq[{per_q}];")
        w.line("  #pragma unroll")
        w.line(f"  for (int u = 0; u < {per_q}; u++) {{")
        w.line(f"    const int _ls_e = _ls_t * 8 + u * 1024, _ls_r = _ls_e / {d}, _ls_c = _ls_e % {d};")
        w.scope.lines.extend("    " + ln for ln in q_row)
        w.line(f"    _ls_rq[u] = _ls_m0 + _ls_r < {rr} ? *(const uint4*)({src} + _ls_q_r + _ls_c) "
               ": make_uint4(0u, 0u, 0u, 0u);")
        w.line("  }")
        w.line("  #pragma unroll")
        w.line(f"  for (int u = 0; u < {per_q}; u++) {{")
        w.line(f"    const int _ls_e = _ls_t * 8 + u * 1024, _ls_r = _ls_e / {d}, _ls_c = _ls_e % {d};")
        w.line("    *(uint4*)&_ls_qs[_ls_r][_ls_c] = _ls_rq[u];")
        w.line("  }")
        w.line("} else {")
        w.push()
    # a query body (RoPE inlined, say) element by element: unrolled, so that 8 elements' loads are
    # in flight at once -- one at a time, the loads' waits were 56% of the 1B's 512-token prompt's
    # attention tile (ncu's stall samples, H100, twenty-ninth session)
    stage("q", f"{ROWS * d}", "\n  ".join(q_row), f"_ls_m0 + _ls_r < {rr}", f"_ls_q_r + _ls_c * {qsk}",
          "_ls_qs[_ls_r][_ls_c]", unroll=q_unroll)
    if q_leaf is not None:
        inner = w.pop()
        w.scope.lines.extend("  " + ln for ln in inner)
        w.line("}")
    w.line("__syncthreads();")
    # the warp's 16 query rows as A fragments, once
    w.line(f"unsigned int _ls_qf[{d // 16}][4];")
    w.line(f"for (int _ls_kk = 0; _ls_kk < {d // 16}; _ls_kk++) {{")
    w.line("  const int r = _ls_warp * 16 + _ls_g, c = _ls_kk * 16 + _ls_tg;")
    w.line("  _ls_qf[_ls_kk][0] = *(const unsigned int*)&_ls_qs[r][c];")
    w.line("  _ls_qf[_ls_kk][1] = *(const unsigned int*)&_ls_qs[r + 8][c];")
    w.line("  _ls_qf[_ls_kk][2] = *(const unsigned int*)&_ls_qs[r][c + 8];")
    w.line("  _ls_qf[_ls_kk][3] = *(const unsigned int*)&_ls_qs[r + 8][c + 8];")
    w.line("}")
    w.line(f"float _ls_o[{d // 8}][4];")
    w.line(f"for (int _ls_j = 0; _ls_j < {d // 8}; _ls_j++) for (int e = 0; e < 4; e++) _ls_o[_ls_j][e] = 0.0f;")
    w.line(f"float _ls_mx[2] = {{{NINF}, {NINF}}}, _ls_sum[2] = {{0.0f, 0.0f}};")
    vec = {what: vector_leaf(what, stride, row_stride)
           for what, stride, row_stride in (("k", "k_stride_k", "k_stride_n"), ("v", "v_stride_j", "v_stride_n"))}
    runs = {what: gathered_runs(what, stride) for what, stride in (("k", "k_stride_k"), ("v", "v_stride_j"))
            if vec[what] is None and (what == "k" or ldm)}
    for what, leaf in vec.items():
        if leaf is not None:  # a buffer at an odd address (a view made by a caller) reads element by element
            w.line(f"const bool _ls_vec_{what} = ((unsigned long long){region.names[leaf]} & 15) == 0;")
    # keys and values both read by 16-byte loads: the next tile's loads are issued before this
    # tile's products (registers, then shared memory at the next tile), so they are in flight while
    # the tensor cores work (bn * d / 1024 vectors of each per thread); else each tile is loaded
    # and stored before its products
    pipe = PIPELINE and vec["k"] is not None and vec["v"] is not None
    offs = {"k": ("_ls_ok", w.expr(a["k_stride_n"])), "v": ("_ls_ov", w.expr(a["v_stride_n"]))}
    # the key tiles this block walks: all, or (split) every other one from its rank's
    first, step = ("(long long)_ls_crank * " + str(bn), 2 * bn) if split else ("0LL", bn)
    if pipe:
        w.line("const bool _ls_pipe = _ls_vec_k && _ls_vec_v;")
        w.line(f"uint4 _ls_rk[{per_thread}], _ls_rv[{per_thread}];")
        w.line("if (_ls_pipe) {")
        for what in ("k", "v"):
            load_regs(what, vec[what], *offs[what], first, "  ")
        w.line("}")
    # this thread's rows have seen a key their mask leaves open (ORed over the row's 4 threads)
    w.line("bool _ls_open[2] = {false, false};")
    # the mask of this thread's scores, a tile ahead: a tile's values are loaded while the tile
    # before it is in its softmax and P V products (loaded at the top of each tile, they were a
    # global-memory wait a tile: ncu's long-scoreboard stalls, 3.8 of ~6 cycles an instruction on
    # an H100, twenty-third session)
    shape = (*batch, m, n)
    coords = [sym(x) for x in names] + [sym("_ls_mi"), sym("_ls_l")]
    mask_view = a["mask_view"]
    at = Point("_ls_z", sym("_ls_z"), tuple(shape), tuple(coords)) if tuple(mask_view.shape) == shape else "_ls_z"

    packed = PACKED_MASK and in_dtypes[0] == op.dtype

    def mk(nt: str, e: str) -> str:
        """Score (nt, e)'s mask value as a float (unpacked from its pair where ``packed``)."""
        if not packed:
            return f"_ls_mk[{nt}][{e}]"
        word = f"_ls_mk[{nt}][({e}) >> 1]"
        if kind == "bf16":  # the upper 16 bits of a float32
            return f"__uint_as_float((({e}) & 1) ? ({word} & 0xffff0000u) : ({word} << 16))"
        return f"ls_h2f((unsigned short)((({e}) & 1) ? ({word} >> 16) : ({word} & 0xffffu)))"

    # packed, a 16-bit mask whose key l + 1 follows key l in memory (a plain [s, n] mask, or a
    # broadcast of one): a thread's two keys of a row (tg, tg + 1) in one 32-bit load
    pair = None
    if packed and isinstance(at, Point):
        i0, v0 = index_at(region.views[0], tuple(coords))
        i1, _ = index_at(region.views[0], (*coords[:-1], sym("_ls_l") + 1))
        if v0 == 1 and i1 - i0 == 1:
            pair = i0

    def load_mask(l0: str, indent: str) -> None:
        """``_ls_mk``: this thread's scores' mask values for the key tile from ``l0`` (minus
        infinity past n and for rows past the end); a whole tile of both rows in range without a
        test per score (a pair of keys per load where ``pair``)."""
        def pairs(ind: str) -> None:
            w.line(f"{ind}for (int nt = 0; nt < {bn // 8}; nt++) for (int _ls_h = 0; _ls_h < 2; _ls_h++) {{")
            w.line(f"{ind}  const long long _ls_mi = _ls_h ? _ls_i_1 : _ls_i_0;")
            for x in folded:
                w.line(f"{ind}  const long long {names[x]} = _ls_h ? {names[x]}_1 : {names[x]}_0;")
            w.line(f"{ind}  const long long _ls_l = {l0} + nt * 8 + _ls_tg;")
            index = nested(w, ind + "  ", lambda: w.expr(pair))
            w.line(f"{ind}  const {storage_type(in_dtypes[0])}* _ls_mp = {region.names[0]} + {index};")
            w.line(f"{ind}  _ls_mk[nt][_ls_h] = (((unsigned long long)_ls_mp) & 3) == 0 ? *(const unsigned int*)_ls_mp"
                   " : ((unsigned int)_ls_mp[0] | (unsigned int)_ls_mp[1] << 16);")
            w.line(f"{ind}}}")

        def scores(checked: bool, ind: str) -> None:
            if not checked and pair is not None:
                pairs(ind)
                return
            if packed:  # a score of even e waits in _ls_mlo for its odd neighbour (the pair's high half)
                w.line(f"{ind}float _ls_mlo = 0.0f;")
            w.line(f"{ind}for (int nt = 0; nt < {bn // 8}; nt++) for (int e = 0; e < 4; e++) {{")
            w.line(f"{ind}  const int _ls_h = e >> 1;")
            w.line(f"{ind}  const long long _ls_mi = _ls_h ? _ls_i_1 : _ls_i_0;")
            for x in folded:
                w.line(f"{ind}  const long long {names[x]} = _ls_h ? {names[x]}_1 : {names[x]}_0;")
            w.line(f"{ind}  const long long _ls_l = {l0} + nt * 8 + _ls_tg + (e & 1);")
            w.line(f"{ind}  float _ls_x = {NINF};")
            w.line(f"{ind}  if ({f'_ls_l < {nn} && (_ls_h ? _ls_in_1 : _ls_in_0)' if checked else '1'}) {{")
            w.line(f"{ind}    const long long _ls_z = (_ls_h ? _ls_o_1 : _ls_o_0) * {nn} + _ls_l;")
            mask = nested(w, ind + "    ", lambda: region.leaf(0, at))
            w.line(f"{ind}    _ls_x = (float){mask};")
            w.line(f"{ind}  }}")
            if packed:
                w.line(f"{ind}  if (e & 1) _ls_mk[nt][e >> 1] = ls_pack2_{kind}(_ls_mlo, _ls_x); else _ls_mlo = _ls_x;")
            else:
                w.line(f"{ind}  _ls_mk[nt][e] = _ls_x;")
            w.line(f"{ind}}}")

        w.line(f"{indent}if ({l0} + {bn} <= {nn} && _ls_in_0 && _ls_in_1) {{")
        scores(False, indent + "  ")
        w.line(f"{indent}}} else {{")
        scores(True, indent + "  ")
        w.line(f"{indent}}}")

    w.line(f"unsigned int _ls_mk[{bn // 8}][2];" if packed else f"float _ls_mk[{bn // 8}][4];")
    load_mask(first, "")
    w.line(f"for (long long _ls_l0 = {first}; _ls_l0 < {nn}; _ls_l0 += {step}) {{")
    w.line("  __syncthreads();  // the last tile's products are done with the shared tiles")
    # a tile that every row of the block blocks, once each row saw an open key, changes nothing
    # (a blocked key's weight is exactly 0 then, the running maximum stays): it is skipped
    # without loading its keys (a prompt's future keys)
    w.line("  bool _ls_seen[2] = {false, false};")
    w.line(f"  for (int nt = 0; nt < {bn // 8}; nt++) for (int e = 0; e < 4; e++)")
    w.line(f"    _ls_seen[e >> 1] |= {mk('nt', 'e')} > {blocked_value(in_dtypes[0])};")
    w.line("  for (int _ls_h = 0; _ls_h < 2; _ls_h++) {")
    w.line("    int t = _ls_seen[_ls_h];")
    w.line("    t |= __shfl_xor_sync(0xffffffffu, t, 1); t |= __shfl_xor_sync(0xffffffffu, t, 2);")
    w.line("    _ls_seen[_ls_h] = t;")
    w.line("  }")
    w.line("  const bool _ls_idle = !_ls_seen[0] && !_ls_seen[1] && (_ls_open[0] || !_ls_in_0) && "
           "(_ls_open[1] || !_ls_in_1);")
    w.line("  const bool _ls_skip = __syncthreads_and(_ls_idle);")
    w.line(f"  float _ls_s[{bn // 8}][4];")
    w.line(f"  float _ls_tmx[2] = {{{NINF}, {NINF}}};")
    if pipe:  # a skipped tile's registers give way to the next tile's
        w.line("  if (_ls_skip) {")
        w.line("    if (_ls_pipe) {")
        for what in ("k", "v"):
            load_regs(what, vec[what], *offs[what], f"_ls_l0 + {step}", "      ")
        w.line("    }")
        w.line("  } else {")
    else:
        w.line("  if (!_ls_skip) {")
    w.line("  _ls_open[0] |= _ls_seen[0]; _ls_open[1] |= _ls_seen[1];")
    if pipe:
        w.line("  if (_ls_pipe) {")
        for what in ("k", "v"):
            store_regs(what, "    ")
        for what in ("k", "v"):
            load_regs(what, vec[what], *offs[what], f"_ls_l0 + {step}", "    ")
        w.line("  } else {")
    w.push()
    for what, stride, row_stride, off, dest in (("k", "k_stride_k", "k_stride_n", "_ls_ok", "_ls_ks[_ls_r][_ls_c]"),
                                                ("v", "v_stride_j", "v_stride_n", "_ls_ov",
                                                 "_ls_vs[_ls_r][_ls_c]" if ldm else "_ls_vt[_ls_c][_ls_r]")):
        # the keys as rows ([key][c]); the values row-major for ldmatrix, else transposed ([j][key]:
        # B's layout for O += P V)
        leaf = vec[what]
        if runs.get(what) is not None:  # gathered rows: 8 elements from one index
            stage_runs(what, off, w.expr(a[row_stride]), f"_ls_{what}s")
            continue
        if leaf is not None:
            w.line(f"if (_ls_vec_{what}) {{")
            stage_vector(what, leaf, off, w.expr(a[row_stride]))
            w.line("} else {")
        stage(what, f"{bn * d}", "const long long _ls_l = _ls_l0 + _ls_r;", f"_ls_l < {nn}",
              f"{off} + _ls_c * {w.expr(a[stride])} + _ls_l * {w.expr(a[row_stride])}", dest)
        if leaf is not None:
            w.line("}")
    tile_fill = w.pop()
    w.scope.lines.extend(("    " if pipe else "  ") + ln for ln in tile_fill)
    if pipe:
        w.line("  }")
    w.line("  __syncthreads();")
    # S = Q K^T: BN / 8 tiles of 16 x 8 per warp
    w.line(f"  for (int nt = 0; nt < {bn // 8}; nt++) for (int e = 0; e < 4; e++) _ls_s[nt][e] = 0.0f;")
    if ldm:  # two 8-key blocks' fragments per ldmatrix ([key][c] is B's [n][k] layout)
        w.line(f"  for (int nt = 0; nt < {bn // 8}; nt += 2) {{")
        w.line(f"    for (int _ls_kk = 0; _ls_kk < {d // 16}; _ls_kk++) {{")
        w.line("      unsigned int _ls_kf[4];")
        w.line("      ls_ldmatrix_x4(_ls_kf, &_ls_ks[8 * (nt + (_ls_lq >> 1)) + _ls_lr]"
               "[_ls_kk * 16 + (_ls_lq & 1) * 8]);")
        w.line(f"      ls_mma_{kind}(_ls_s[nt], _ls_qf[_ls_kk], _ls_kf);")
        w.line(f"      ls_mma_{kind}(_ls_s[nt + 1], _ls_qf[_ls_kk], _ls_kf + 2);")
        w.line("    }")
        w.line("  }")
    else:
        w.line(f"  for (int nt = 0; nt < {bn // 8}; nt++) {{")
        w.line(f"    for (int _ls_kk = 0; _ls_kk < {d // 16}; _ls_kk++) {{")
        w.line("      const int r = nt * 8 + _ls_g, c = _ls_kk * 16 + _ls_tg;")
        w.line("      const unsigned int _ls_kf[2] = {*(const unsigned int*)&_ls_ks[r][c], "
               "*(const unsigned int*)&_ls_ks[r][c + 8]};")
        w.line(f"      ls_mma_{kind}(_ls_s[nt], _ls_qf[_ls_kk], _ls_kf);")
        w.line("    }")
        w.line("  }")
    # the mask (keys past n and rows past the end: minus infinity), the tile's row maxima (rows
    # g and g + 8 of the warp's 16)
    w.line(f"  for (int nt = 0; nt < {bn // 8}; nt++) for (int e = 0; e < 4; e++) {{")
    w.line("    const int _ls_h = e >> 1;")
    w.line(f"    const float _ls_m = {mk('nt', 'e')};")
    w.line(f"    const float _ls_x = _ls_m == {NINF} ? {NINF} : _ls_s[nt][e] + _ls_m;")
    w.line("    _ls_s[nt][e] = _ls_x;")
    w.line("    _ls_tmx[_ls_h] = fmaxf(_ls_x, _ls_tmx[_ls_h]);")
    w.line("  }")
    w.line("  }")
    # the next tile's mask, in flight while this tile's probabilities are made and multiplied
    load_mask(f"(_ls_l0 + {step})", "  ")
    w.line("  if (_ls_skip) continue;")
    # the new running maxima (a row's 4 threads agree through shuffles), the rescaled output
    w.line("  for (int _ls_h = 0; _ls_h < 2; _ls_h++) {")
    w.line("    float t = _ls_tmx[_ls_h];")
    w.line("    for (int o = 1; o < 4; o <<= 1) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, o));")
    w.line("    const float mnew = fmaxf(t, _ls_mx[_ls_h]);")
    w.line(f"    const float sc = mnew == {NINF} ? 1.0f : ls_exp2_fast(_ls_mx[_ls_h] - mnew);")
    w.line("    _ls_mx[_ls_h] = mnew; _ls_sum[_ls_h] *= sc;")
    w.line(f"    for (int _ls_j = 0; _ls_j < {d // 8}; _ls_j++) {{ _ls_o[_ls_j][2 * _ls_h] *= sc; "
           "_ls_o[_ls_j][2 * _ls_h + 1] *= sc; }")
    w.line("  }")
    w.line(f"  for (int nt = 0; nt < {bn // 8}; nt++) for (int e = 0; e < 4; e++) {{")
    w.line("    const int _ls_h = e >> 1;")
    w.line(f"    const float p = _ls_s[nt][e] == {NINF} ? 0.0f : ls_exp2_fast(_ls_s[nt][e] - _ls_mx[_ls_h]);")
    w.line("    _ls_s[nt][e] = p; _ls_sum[_ls_h] += p;")
    w.line("  }")

    def pack(lo: str, hi: str) -> str:  # two probabilities as one A register (lo in the low half): one cvt
        return f"ls_pack2_{kind}({lo}, {hi})"

    # O += P V: the S tiles 2t, 2t + 1 are the A fragment of keys 16t ... 16t + 15
    w.line(f"  for (int t = 0; t < {bn // 16}; t++) {{")
    w.line(f"    const unsigned int _ls_pf[4] = {{{pack('_ls_s[2 * t][0]', '_ls_s[2 * t][1]')}, "
           f"{pack('_ls_s[2 * t][2]', '_ls_s[2 * t][3]')}, {pack('_ls_s[2 * t + 1][0]', '_ls_s[2 * t + 1][1]')}, "
           f"{pack('_ls_s[2 * t + 1][2]', '_ls_s[2 * t + 1][3]')}}};")
    if ldm:  # two 8-column blocks' fragments per transposing ldmatrix of the row-major values
        w.line(f"    for (int _ls_j = 0; _ls_j < {d // 8}; _ls_j += 2) {{")
        w.line("      unsigned int _ls_vf[4];")
        w.line("      ls_ldmatrix_x4_trans(_ls_vf, &_ls_vs[t * 16 + (_ls_lq & 1) * 8 + _ls_lr]"
               "[8 * (_ls_j + (_ls_lq >> 1))]);")
        w.line(f"      ls_mma_{kind}(_ls_o[_ls_j], _ls_pf, _ls_vf);")
        w.line(f"      ls_mma_{kind}(_ls_o[_ls_j + 1], _ls_pf, _ls_vf + 2);")
        w.line("    }")
    else:
        w.line(f"    for (int _ls_j = 0; _ls_j < {d // 8}; _ls_j++) {{")
        w.line("      const int r = _ls_j * 8 + _ls_g, c = t * 16 + _ls_tg;")
        w.line("      const unsigned int _ls_vf[2] = {*(const unsigned int*)&_ls_vt[r][c], "
               "*(const unsigned int*)&_ls_vt[r][c + 8]};")
        w.line(f"      ls_mma_{kind}(_ls_o[_ls_j], _ls_pf, _ls_vf);")
        w.line("    }")
    w.line("  }")
    w.line("}")
    # each row's sum over its 4 threads, the rows written
    w.line("for (int _ls_h = 0; _ls_h < 2; _ls_h++) for (int o = 1; o < 4; o <<= 1)")
    w.line("  _ls_sum[_ls_h] += __shfl_xor_sync(0xffffffffu, _ls_sum[_ls_h], o);")
    if split:
        merge_pair(w, d)
    w.line(f"for (int _ls_j = 0; _ls_j < {d // 8}; _ls_j++) for (int e = 0; e < 4; e++) {{")
    w.line("  const int _ls_h = e >> 1;")
    writes = "_ls_crank == 0 && " if split else ""  # (split: the pair's first block)
    w.line(f"  if ({writes}(_ls_h ? _ls_in_1 : _ls_in_0)) out[(_ls_h ? _ls_o_1 : _ls_o_0) * {dv} + _ls_j * 8 + _ls_tg "
           f"+ (e & 1)] = {store(op.dtype, '_ls_o[_ls_j][e] / _ls_sum[_ls_h]')};")
    w.line("}")
    body = w.pop()
    bufs = [("out", st, True, "out")] + [(f"in{k}", storage_type(t), False, k) for k, t in enumerate(in_dtypes)]
    count = (prod([batch[x] for x in kept]) if kept else 1) * ((rows + (ROWS - 1)) // ROWS)
    return finish(w, "cuda", "matmul_mma_pair" if split else "matmul_mma", bufs, count, body, "attention_mma",
                  preludes=("mma",), min_blocks=MIN_BLOCKS)


def merge_pair(w: Writer, d: int) -> None:
    """The split tile's merge (:data:`SPLIT`): the second block of the pair leaves its thread's
    running output fragments, row maxima and row sums in its shared memory; the first reads the
    same thread's through distributed shared memory and merges them into its own (each part
    rescaled to the larger maximum: the online softmax's step, once); the pair then syncs again
    so the second block's values are read before it goes on."""
    per = d // 2  # a thread's output fragments: d / 8 tiles of 4
    w.line(f"float (*_ls_xo)[{per + 4}] = (float (*)[{per + 4}])_ls_smem;  // over the tiles")
    w.line("__syncthreads();  // every warp is done with the tiles")
    w.line("if (_ls_crank == 1) {")
    w.line(f"  for (int _ls_j = 0; _ls_j < {d // 8}; _ls_j++) for (int e = 0; e < 4; e++) "
           "_ls_xo[_ls_t][_ls_j * 4 + e] = _ls_o[_ls_j][e];")
    w.line(f"  for (int _ls_h = 0; _ls_h < 2; _ls_h++) {{ _ls_xo[_ls_t][{per} + _ls_h] = _ls_mx[_ls_h]; "
           f"_ls_xo[_ls_t][{per + 2} + _ls_h] = _ls_sum[_ls_h]; }}")
    w.line("}")
    w.line("ls_cluster_sync();")
    w.line("if (_ls_crank == 0) {")
    # every remote load issued before any is used: one round trip, not one a value
    w.line(f"  float _ls_ro[{per + 4}];")
    w.line(f"  for (int q = 0; q < {per + 4}; q++) _ls_ro[q] = ls_cluster_ld(&_ls_xo[_ls_t][q], 1u);")
    w.line("  float _ls_a0[2], _ls_a1[2];")
    w.line("  for (int _ls_h = 0; _ls_h < 2; _ls_h++) {")
    w.line(f"    const float pm = _ls_ro[{per} + _ls_h], ps = _ls_ro[{per + 2} + _ls_h];")
    w.line("    const float mnew = fmaxf(_ls_mx[_ls_h], pm);")
    w.line(f"    _ls_a0[_ls_h] = _ls_mx[_ls_h] == {NINF} ? 0.0f : ls_exp2f(_ls_mx[_ls_h] - mnew);")
    w.line(f"    _ls_a1[_ls_h] = pm == {NINF} ? 0.0f : ls_exp2f(pm - mnew);")
    w.line("    _ls_sum[_ls_h] = _ls_sum[_ls_h] * _ls_a0[_ls_h] + ps * _ls_a1[_ls_h];")
    w.line("  }")
    w.line(f"  for (int _ls_j = 0; _ls_j < {d // 8}; _ls_j++) for (int e = 0; e < 4; e++)")
    w.line("    _ls_o[_ls_j][e] = _ls_o[_ls_j][e] * _ls_a0[e >> 1] + _ls_ro[_ls_j * 4 + e] * _ls_a1[e >> 1];")
    w.line("}")
    w.line("ls_cluster_sync();  // the second block's partial is read: it may go on")


def _attention_mma(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [attention_mma_kernel(op, in_dtypes, dialect)]


RENDERERS = {"AttentionMma": _attention_mma}
