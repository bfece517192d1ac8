"""The block-matmul family (c dialect): matmuls and gathers whose weight operand is a matrix kept
as GGML blocks in the packed layout (``weights.quant.Blocks.packed``), dequantised in registers by
the decoders of ``prelude/ggml_blocks.h``.  The backends' op tables call these for the block ops
of ``codegen/blocks.egg`` (``codegen/blocks.py``)."""

from __future__ import annotations

import os

from ....dtypes import DType, uint8
from ....egraph.llir import LOp
from ....errors import LightspeedError
from ....symbolic import const, sym
from .region import Region, region_kernel, store_with_addend
from .spec import KernelSpec
from .writer import SPLIT_BELOW, Point, Writer, block_sums, finish, weight_prefetch

__all__ = ["block_matmul_ok", "render_block_matmul", "render_block_matmul_cuda", "block_gather_ok",
           "render_block_gather", "group_dot_cuda", "block_row_bytes", "BLOCK_ACTIVATIONS", "BLOCK_CODE",
           "BLOCK_TYPES", "KERNEL_QTYPE"]


# the block type whose kernel reads a block dtype's weights (Q5_0 as the Q8_0 blocks of its values)
KERNEL_QTYPE = {"q5_0": "q8_0"}


def block_matmul_ok(op: LOp, in_dtypes: list[DType], side: int = 1) -> bool:
    """Whether the c dialect's block kernel (:func:`render_block_matmul`) computes ``op`` when its
    operand ``side`` (1: B, 0: A) is a float32 matrix [rows, k] kept as GGML blocks: read with its
    rows contiguous along k from its start (B as that matrix transposed), the other operand
    contiguous along k, static k a multiple of 32, no batch, float32 throughout."""
    a = op.args
    k = a["k"]
    if side == 1:
        weights = a["b_stride_k"] == 1 and a["b_stride_n"] == k and a["b_offset"] == 0 and a["a_stride_k"] == 1
    else:
        weights = a["a_stride_k"] == 1 and a["a_stride_m"] == k and a["a_offset"] == 0 and a["b_stride_k"] == 1
    return (op.op in ("Matmul", "MatmulAdd") and not a["batch"] and op.dtype.name == "float32"
            and all(d.name == "float32" for d in in_dtypes[:3]) and not k.free_vars() and k.value % 32 == 0
            and weights)


# the block types the prelude decodes, by the code its functions take
BLOCK_CODE = {"q4_0": 0, "q4_1": 1, "q8_0": 2, "q5_0": 3, "q4_k": 4, "q6_k": 5}
# c: rows of x an item of a prompt's float block product takes (its x rows stay in cache while the
# thread walks the weight rows against them)
PROMPT_CHUNK = 64
BLOCK_TYPES = tuple(BLOCK_CODE)


BLOCK_ACTIVATIONS = ("q16", "q8", "float")


def render_block_matmul(op: LOp, in_dtypes: list[DType], qtype: str, activations: str = "float",
                        side: int = 1) -> KernelSpec:
    """The c dialect's ``Matmul``/``MatmulAdd`` whose B operand (buffer ``in1``) is a weight matrix
    kept as GGML ``qtype`` blocks in the packed layout (``weights.quant.Blocks.packed``: a row's
    scales, then its integers), dequantised in registers: an item is one weight row j; each of its
    blocks is read once from memory (a quarter of its float32 bytes), decoded once into 32 floats
    and dotted with every row of A.  ``side`` 0: the weights are A instead (C = W x^T, the product
    the other way round), an item one row of C.  Requires :func:`block_matmul_ok`.

    ``activations`` (decode, a single row of A; more rows keep floats): ``"float"`` is exact (the
    float32 weights' result up to summation order); ``"q8"`` quantises the row to 8-bit integers
    per block of 32, as llama.cpp does, ``"q16"`` to 16-bit ones (each thread once per call:
    ``ls_quant_x``), and each weight block is dotted with them in integers (``maddubs`` /
    ``madd``).  x moves by at most amax / 254 (q8) or amax / 65534 (q16), amax its block's largest
    magnitude; docs/kernels.md states the contract."""
    from ....weights.quant import BLOCK_BYTES, BLOCK_WEIGHTS, QK  # the format's facts (weights/ owns GGUF)

    if not block_matmul_ok(op, in_dtypes, side) or qtype not in BLOCK_TYPES:
        raise LightspeedError(f"kernel renderer: no {qtype} block kernel for this {op.op}")
    if activations not in BLOCK_ACTIVATIONS:
        raise LightspeedError(f"kernel renderer: block activations must be one of {BLOCK_ACTIVATIONS}, "
                              f"got {activations!r}")
    a = op.args
    m, n, k = a["m"], a["n"], a["k"]
    nbytes = BLOCK_BYTES[qtype]
    w = Writer("c")
    w.index_vars |= {"_ls_wrow", "_ls_r", "_ls_rt", "_ls_rn", "_ls_tt", "_ls_item"}
    nn = w.expr(n)
    # _ls_wrow: the item, a weight row; _ls_r: a row of the activations x (rows: xn of them).  Every
    # name of the kernel's own starts with _ls_, so a graph dim (whisper's "t", a row count "r")
    # never reads as one of its loop variables
    if side == 1:
        xn, wn = m, n
        xrow = f"in0 + {w.expr(a['a_offset'])} + _ls_r * {w.expr(a['a_stride_m'])}"
        at, coords = f"_ls_r * {nn} + _ls_wrow", (sym("_ls_r"), sym("_ls_wrow"))
    else:
        xn, wn = n, m
        xrow = f"in1 + {w.expr(a['b_offset'])} + _ls_r * {w.expr(a['b_stride_n'])}"
        at, coords = f"_ls_wrow * {nn} + _ls_r", (sym("_ls_wrow"), sym("_ls_r"))
    xx = w.expr(xn)
    nb = int(k.value) // QK  # groups of 32 weights
    code = BLOCK_CODE[qtype]
    row_bytes = int(k.value) // BLOCK_WEIGHTS.get(qtype, QK) * nbytes

    def decode(g: str) -> str:  # a group of 32 weights decoded into 4 vectors of 8 floats
        return f"ls_blk_{qtype}(rb, {nb}, {g}, wv)" if code < 3 else f"ls_blk_k(rb, {code}, {g}, wv)"

    w.push()
    w.line(f"const unsigned char* rb = (const unsigned char*)in{side} + _ls_wrow * {row_bytes}LL;")
    # an item: a weight row and a chunk of PROMPT_CHUNK rows of x (chunks outermost: a thread's
    # items walk every weight row against one chunk, which stays in its cache, where one weight
    # row against every row of a long prompt streamed the whole prompt from memory again)
    w.index_vars |= {"_ls_xc", "_ls_x0", "_ls_x1"}
    w.line(f"const long long _ls_x0 = _ls_xc * {PROMPT_CHUNK}, _ls_x1 = {xx} - _ls_x0 < {PROMPT_CHUNK} ? {xx} : "
           f"_ls_x0 + {PROMPT_CHUNK};")
    setup = []
    w.line(f"if ({xx} == 1) {{")
    w.line("  const long long _ls_r = 0;")
    if activations != "float":
        # the one row of x quantised once per thread, before its items
        bits = 16 if activations == "q16" else 8
        setup = [f"  {'short' if bits == 16 else 'signed char'} _ls_xq[{nb * QK}]; float _ls_xd[{nb}], _ls_xs[{nb}];"]
        quant = f"ls_quant_x({xrow}, {nb}, {bits}, _ls_xq, _ls_xd, _ls_xs);"
        dot = "ls_qdot" if code < 3 else "ls_kdot"
        solo = f"  out[{at}] = {dot}(rb, {nb}, {code}, {bits}, _ls_xq, _ls_xd, _ls_xs);"
        if code < 3:  # q4 / q8_0 rows: the lane-per-block dots where the CPU has them (ls_tdot_rows)
            tb, tf = _lane_sizes(nb, bits, code)
            setup += [f"  if ({xx} == 1) {{ const long long _ls_r = 0; {quant} }}",
                      "#ifdef LS_TDOT",
                      f"  unsigned char _ls_xt[{tb}], _ls_xtmp[{64 * nb if bits == 16 else 1}]; "
                      f"float _ls_xdt[{tf}], _ls_xst[{tf}];",
                      f"  if ({xx} == 1) ls_tlayout_x(_ls_xq, {bits}, {code}, _ls_xd, _ls_xs, {nb}, _ls_xtmp, _ls_xt, "
                      "_ls_xdt, _ls_xst);",
                      "#endif"]
            w.line("#ifdef LS_TDOT")
            w.line(f"  {_lane_dot(nb, code, bits, '_ls_xt', '0', '_ls_xdt', '_ls_xst', '0', f'out + ({at})', 1)};")
            w.line("#else")
            w.line(solo)
            w.line("#endif")
        else:
            setup.append(f"  if ({xx} == 1) {{ const long long _ls_r = 0; {quant} }}")
            w.line(solo)
    else:  # one row of x keeps 4 accumulators across the blocks
        w.line(f"  const float* xa = {xrow};")
        w.line("  ls_f8 a0 = ls_zero8(), a1 = a0, a2 = a0, a3 = a0, wv[4];")
        w.line(f"  for (long long blk = 0; blk < {nb}; blk++) {{")
        w.line(f"    {decode('blk')};")
        w.line(f"    const float* xb = xa + blk * {QK};")
        for q in range(4):
            w.line(f"    a{q} = ls_fma8(ls_ldf8(xb + {8 * q}), wv[{q}], a{q});")
        w.line("  }")
        w.line(f"  out[{at}] = ls_hsum8(ls_add8(ls_add8(a0, a1), ls_add8(a2, a3)));")
    # more rows of x (prefill): the weight row decoded into floats once (its k floats stay in L1:
    # a K-quant group's decode is scalar work that, done once per tile of rows, took ~70% of
    # Gemma 3's prompt products), then tiles of 8 rows, each with its vector accumulator (in
    # registers: a full tile's loop is unrolled), each block's floats dotted with the tile's rows;
    # one horizontal sum per output.  The same floats and sums as decoding per tile
    w.line("} else {")
    w.line(f"  float _ls_wf[{nb * QK}];")
    w.line(f"  for (long long blk = 0; blk < {nb}; blk++) {{")
    w.line("    ls_f8 wv[4];")
    w.line(f"    {decode('blk')};")
    w.line(f"    for (int q = 0; q < 4; q++) memcpy(_ls_wf + blk * {QK} + 8 * q, &wv[q], sizeof(ls_f8));")
    w.line("  }")
    w.line("  for (long long _ls_rt = _ls_x0; _ls_rt < _ls_x1; _ls_rt += 8) {")
    w.line("    const long long _ls_rn = _ls_x1 - _ls_rt < 8 ? _ls_x1 - _ls_rt : 8;")
    w.line("    ls_f8 acc[8];")
    w.line("    for (int _ls_tt = 0; _ls_tt < 8; _ls_tt++) acc[_ls_tt] = ls_zero8();")
    w.line(f"    for (long long blk = 0; blk < {nb}; blk++) {{")
    w.line(f"      const ls_f8 wv[4] = {{ls_ldf8(_ls_wf + blk * {QK}), ls_ldf8(_ls_wf + blk * {QK} + 8), "
           f"ls_ldf8(_ls_wf + blk * {QK} + 16), ls_ldf8(_ls_wf + blk * {QK} + 24)}};")
    for full in (True, False):
        w.line("      if (_ls_rn == 8) {" if full else "      } else {")
        if full:
            w.line("        _Pragma(\"GCC unroll 8\")")
        w.line(f"        for (int _ls_tt = 0; _ls_tt < {'8' if full else '_ls_rn'}; _ls_tt++) {{")
        w.line("          const long long _ls_r = _ls_rt + _ls_tt;")
        w.line(f"          const float* xb = {xrow} + blk * {QK};")
        w.line("          acc[_ls_tt] = ls_fma8(ls_ldf8(xb + 24), wv[3], ls_fma8(ls_ldf8(xb + 16), wv[2], "
               "ls_fma8(ls_ldf8(xb + 8), wv[1], ls_fma8(ls_ldf8(xb), wv[0], acc[_ls_tt]))));")
        w.line("        }")
    w.line("      }")
    w.line("    }")
    w.line("    for (int _ls_tt = 0; _ls_tt < _ls_rn; _ls_tt++) {")
    w.line("      const long long _ls_r = _ls_rt + _ls_tt;")
    w.line(f"      out[{at}] = ls_hsum8(acc[_ls_tt]);")
    w.line("    }")
    w.line("  }")
    w.line("}")
    bufs = [("out", "float", True, "out"), ("in0", "float", False, 0), ("in1", "float", False, 1)]
    if op.op == "MatmulAdd":
        rows = "for (long long _ls_r = _ls_x0; _ls_r < _ls_x1; _ls_r++)"
        bufs.append(store_with_addend(w, a["r_view"], in_dtypes[2], rows, at, lambda r: f"out[_ls_oz] + {r}",
                                      Point("_ls_oz", sym("_ls_oz"), (m, n), coords)))
    body = w.pop()
    early = None
    if activations != "float":
        early = _quantised_rows(w, op, in_dtypes, code, nb, row_bytes, activations, side, xrow, at, coords)
    label = f"{qtype}matmul" + ("" if activations == "float" else f"_{activations}")
    chunks = (xn + (PROMPT_CHUNK - 1)) // PROMPT_CHUNK
    return finish(w, "c", "matmul_dot", bufs, chunks * wn, body, label, [("_ls_xc", chunks), ("_ls_wrow", wn)],
                  xn * k // chunks, setup, early=early, preludes=("ggml_blocks",))


def group_dot_cuda(w: Writer, code: int, nb: int, row: str, acc: str) -> None:
    """The cuda lines adding to ``acc`` the dot of ``x[32]`` (floats in registers) with group ``g``
    (32 weights) of the block row at byte pointer ``row`` (``BLOCK_CODE``: the packed layout for
    codes 0-2, GGUF's for the K-quants), the weights decoded in registers; in a loop over ``g``
    (indented once).  Shared by the block products and the norm products over blocks (norm.py)."""
    if code < 3:  # the packed layout: the row's nb scales, (q4_1) nb mins, then the integers
        w.line("  {")
        w.line(f"  const float d = ls_hx({row}, g);")
        if code == 2:
            w.line(f"  const signed char* q = (const signed char*)({row} + {2 * nb}LL + 32 * g);")
            w.line("  float s = 0.0f;")
            w.line("  if ((((unsigned long long)q) & 3) == 0) {  // eight 32-bit words")
            w.line("    #pragma unroll")
            w.line("    for (int t = 0; t < 8; t++) {")
            w.line("      const int v = ((const int*)q)[t];")
            w.line("      s += (float)(signed char)v * x[4 * t] + (float)(signed char)(v >> 8) * x[4 * t + 1] + "
                   "(float)(signed char)(v >> 16) * x[4 * t + 2] + (float)(signed char)(v >> 24) * x[4 * t + 3];")
            w.line("    }")
            w.line("  } else {")
            w.line("    for (int t = 0; t < 32; t++) s += (float)q[t] * x[t];")
            w.line("  }")
            w.line(f"  {acc} += d * s;")
        else:
            # the group's 16 bytes as four 32-bit words where 4-byte aligned (Q4_1 rows always
            # are; a row of Q4_0 blocks, 18 bytes each, starts at any even address: bytes)
            w.line(f"  const unsigned char* q = {row} + {(4 if code == 1 else 2) * nb}LL + 16 * g;")
            w.line("  float s = 0.0f, sx = 0.0f;")
            w.line("  unsigned int qw[4];")
            w.line("  if ((((unsigned long long)q) & 3) == 0) {")
            w.line("    for (int t = 0; t < 4; t++) qw[t] = ((const unsigned int*)q)[t];")
            w.line("  } else {")
            w.line("    for (int t = 0; t < 4; t++) qw[t] = q[4 * t] | (unsigned int)q[4 * t + 1] << 8 | "
                   "(unsigned int)q[4 * t + 2] << 16 | (unsigned int)q[4 * t + 3] << 24;")
            w.line("  }")
            w.line("  #pragma unroll")
            w.line("  for (int t = 0; t < 16; t++) {")
            w.line("    const unsigned int byte = (qw[t >> 2] >> (8 * (t & 3))) & 255u;")
            w.line("    s += (float)(byte & 15u) * x[t] + (float)(byte >> 4) * x[t + 16];")
            w.line("    sx += x[t] + x[t + 16];")
            w.line("  }")
            _add_4bit(w, code, nb, row, acc)
        w.line("  }")
    else:  # K-quants: a group's unsigned weights and its halves' affine maps (ls_kgroup)
        w.line("  {")
        w.line("  unsigned char u[32]; float sc[2], of[2];")
        w.line(f"  ls_kgroup({row}, {code}, g, u, sc, of);")
        w.line("  for (int h = 0; h < 2; h++) {")
        w.line("    float s = 0.0f, sx = 0.0f;")
        w.line("    for (int t = 16 * h; t < 16 * h + 16; t++) { s += (float)u[t] * x[t]; sx += x[t]; }")
        if code == 5:  # Q6_K: value = s (u - 32)
            w.line(f"    {acc} += sc[h] * (s - 32.0f * sx);")
        else:
            w.line(f"    {acc} += sc[h] * s + of[h] * sx;")
        w.line("  }")
        w.line("  }")


# LIGHTSPEED_CUDA_BLOCK_PARTS=4: in the cuda block products, a lane takes a quarter of a group of
# 32 weights (8 weights: one 32-bit word of a 4-bit group, two of an 8-bit one) for Q4_0, Q4_1 and
# Q8_0, instead of a whole group -- on short rows (SmolLM2's k = 576 is 18 groups: 14 of a warp's
# 32 lanes idle) every lane works, and an item's dependent chain is 8 products, not 32.  On by
# default: SmolLM2's block step 0.913 ms with it, 1.020 without (H100, 2026-12-07, random
# blocks); 1 gives whole groups.
BLOCK_PARTS = int(os.environ.get("LIGHTSPEED_CUDA_BLOCK_PARTS", "4"))


def _count_switch(name: str, default: str, allowed: tuple[str, ...]) -> int:
    """The count environment variable ``name`` sets (``default`` unset), one of ``allowed``; any
    other value stops the import naming the variable."""
    value = os.environ.get(name, default)
    if value.strip() not in allowed:
        raise LightspeedError(f"{name} must be {', '.join(allowed[:-1])} or {allowed[-1]}, got {value!r}")
    return int(value)


PARTS = 4  # parts of a group when BLOCK_PARTS is on (a part: 8 weights)
# LIGHTSPEED_CUDA_KQUANT_PARTS=1: Q4_K and Q6_K groups in parts too (``ls_kpart``: a part's bytes
# in 8-byte words, a warp's 32 lanes on one super-block) instead of a lane decoding a whole group
# byte by byte (66 one-byte loads a Q6_K group, each instruction's 32 addresses spread over four
# super-blocks): Gemma 3's down product (Q6_K, 640 x 2048) took 5.95 us against bf16's 3.0 and
# its o product (Q4_K) 3.6 against 2.5 (H100, thirty-second session, PDL off).  On by default since
# the thirty-fourth session (with the split below: the block step 0.843 -> 0.796 ms, H100); 0: whole groups.
KQUANT_PARTS = os.environ.get("LIGHTSPEED_CUDA_KQUANT_PARTS", "1") == "1"
PART_CODES = (0, 1, 2, 4, 5) if KQUANT_PARTS else (0, 1, 2)
# LIGHTSPEED_CUDA_BLOCK_UNROLL=U: the parts loop unrolled U times, its loads' alignment tested once
# before it (parts_loops), so a lane's weight loads of U items are in flight together (a warp of
# the head's Q8_0 product has one 8-byte load a lane in flight a step: Gemma 3's head read its 178
# MB at ~1.5 TB/s, cuBLAS's bf16 head ~3 TB/s); 1 leaves one loop to the compiler.  Unrolled with
# the branches inside: no gain (thirty-second session); this form, 4 (the default since the
# thirty-fourth session): the block step 0.845 -> 0.784 ms alone (H100).
BLOCK_UNROLL = _count_switch("LIGHTSPEED_CUDA_BLOCK_UNROLL", "4", ("1", "2", "3", "4", "8"))


# LIGHTSPEED_CUDA_BLOCK_SPLIT=S: a block product of few outputs (under the float products'
# SPLIT_BELOW) over a long row runs a block of up to S warps per output, each warp a slice of the
# row's items, summed through shared memory in a fixed order (as the float products split: the
# choice by n and k alone, so every row count gets the same sums).  Gemma 3's 640-output products
# are 640 warps, ~5 a multiprocessor: its down product (Q6_K, k = 2048) took 5.95 us against the
# split bf16 product's 3.0 (H100, thirty-second session, PDL off).  4 by default since the
# thirty-fourth session (with the three switches above the block step 0.845 -> 0.729 ms, below
# bf16's 0.756, H100); 0: a warp an output.
BLOCK_SPLIT = _count_switch("LIGHTSPEED_CUDA_BLOCK_SPLIT", "4", ("0", "2", "4", "8"))


def block_split(n, units: int) -> int:
    """The warps of a block per output of a block product of ``n`` outputs whose row is ``units``
    lane items (parts or whole groups): the largest power of two up to :data:`BLOCK_SPLIT` that
    gives each warp a whole pass of 32 items at least (the block's sums add as a balanced tree);
    0 for a warp per output."""
    if not BLOCK_SPLIT or not n.is_const or int(n.value) >= SPLIT_BELOW:
        return 0
    warps = BLOCK_SPLIT
    while warps > units // 32:
        warps //= 2
    return warps if warps >= 2 else 0


def parts_loop(w: Writer, nb: int, step: str = "32", first: str = "lane", unroll: int = 1) -> None:
    """The loop head of a lane's items (``it``: part ``p`` of group ``g``) over a row of ``nb``
    groups from item ``first`` by ``step``, unrolled ``unroll`` times; the caller closes it."""
    if unroll > 1:
        w.line(f"#pragma unroll {unroll}")
    w.line(f"for (long long it = {first}; it < {nb * PARTS}; it += {step}) {{")
    w.line(f"  const long long g = it / {PARTS}; const int p = (int)(it % {PARTS});")


def weight_alignment(code: int, nb: int, row: str) -> str | None:
    """The run-time test that the integers of block row ``row`` (byte pointer) are aligned for
    :func:`part_dot_cuda`'s unbranched loads (Q8_0: a part's 8 bytes at once; Q4_0 / Q4_1: 4), or
    None where its part has no such loads (the K-quants: ``ls_kpart`` tests its own)."""
    if code == 2:
        return f"(((unsigned long long)({row} + {2 * nb}LL)) & 7) == 0"
    if code in (0, 1):
        return f"(((unsigned long long)({row} + {(4 if code == 1 else 2) * nb}LL)) & 3) == 0"
    return None


def parts_loops(w: Writer, code: int, nb: int, rows: tuple[tuple[str, str], ...] | list[tuple[str, str]],
                x: str, norm: str | None = None, step: str = "32", first: str = "lane") -> None:
    """A lane's loop over parts of groups (:func:`parts_loop`): x's floats of the part
    (:func:`part_x_cuda`, with the norm's weights where ``norm``), dotted with each of the block rows
    ``rows`` ((byte pointer, accumulator) pairs).  With :data:`BLOCK_UNROLL` > 1 the loads'
    alignment is tested once, before the loop: where x (the norm) and every row's integers are
    aligned, an unrolled loop of unbranched loads (a lane's loads of several items can then be in
    flight together), else the branching loop; both sum in the same order."""
    def loop(aligned: bool, unroll: int) -> None:
        parts_loop(w, nb, step, first, unroll)
        part_x_cuda(w, code, x, norm, aligned)
        for row, acc in rows:
            part_dot_cuda(w, code, nb, row, acc, aligned)
        w.line("}")
    if BLOCK_UNROLL == 1:
        loop(False, 1)
        return
    tests = [f"(((unsigned long long){p}) & 15) == 0" for p in (x, norm) if p]
    tests += [t for row, _ in rows if (t := weight_alignment(code, nb, row))]
    w.line(f"if ({' && '.join(tests)}) {{")
    loop(True, BLOCK_UNROLL)
    w.line("} else {")
    loop(False, 1)
    w.line("}")


def parts_of(codes: list[int]) -> int:
    """The parts a lane's item is of a group for weights of these block codes (one code for all:
    their parts hold the same weights): PARTS where BLOCK_PARTS asks and every code is one of
    PART_CODES (0-2; the K-quants' 4 and 5 too with KQUANT_PARTS), else 1."""
    return PARTS if BLOCK_PARTS == PARTS and len(set(codes)) == 1 and codes[0] in PART_CODES else 1


def part_x_cuda(w: Writer, code: int, x: str, norm: str | None = None, aligned: bool = False) -> None:
    """The cuda lines (in a loop over items ``g``, ``p``: part p of group g) loading ``xe[8]``, the
    floats of row pointer ``x`` that part p's weights multiply: 4-bit groups hold weights t and
    t + 16 in byte t, so part p is weights 4p..4p+3 and 4p+16..4p+19; 8-bit parts are 8p..8p+7.
    ``norm``: a pointer to the norm weights, multiplied in, with ``ss`` summing the squares of x.
    ``aligned``: ``x`` (and ``norm``) are known 16-byte aligned (:func:`parts_loops`' test): the
    16-byte loads alone, no branch."""
    second = "16" if code < 2 else "4"  # the second float4's offset from the first
    first = f"32 * g + {'4' if code < 2 else '8'} * p"
    w.line("  float xe[8];")
    ptrs = f"((unsigned long long)({x} + {first}))" + (f" | ((unsigned long long)({norm} + {first}))" if norm else "")
    w.line("  {" if aligned else f"  if ((({ptrs}) & 15) == 0) {{")
    w.line(f"    const float4 a0 = *(const float4*)({x} + {first}), a1 = *(const float4*)({x} + {first} + {second});")
    w.line("    xe[0] = a0.x; xe[1] = a0.y; xe[2] = a0.z; xe[3] = a0.w; xe[4] = a1.x; xe[5] = a1.y; xe[6] = a1.z; "
           "xe[7] = a1.w;")
    if norm:
        w.line(f"    const float4 b0 = *(const float4*)({norm} + {first}), "
               f"b1 = *(const float4*)({norm} + {first} + {second});")
        w.line("    const float nw[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};")
        w.line("    #pragma unroll")
        w.line("    for (int t = 0; t < 8; t++) { ss += xe[t] * xe[t]; xe[t] *= nw[t]; }")
    if aligned:
        w.line("  }")
        return
    w.line("  } else {")
    w.line("    #pragma unroll")
    w.line("    for (int t = 0; t < 8; t++) {")
    w.line(f"      const long long e = {first} + (t & 3) + (t >> 2) * {second};")
    w.line(f"      xe[t] = {x}[e];")
    if norm:
        w.line(f"      ss += xe[t] * xe[t]; xe[t] *= {norm}[e];")
    w.line("    }")
    w.line("  }")


def part_dot_cuda(w: Writer, code: int, nb: int, row: str, acc: str, aligned: bool = False) -> None:
    """The cuda lines adding to ``acc`` the dot of ``xe[8]`` (:func:`part_x_cuda`) with part ``p``
    of group ``g`` of the block row at byte pointer ``row`` (packed layout, codes 0-2; GGUF's for
    the K-quants, codes 4 and 5, through ``ls_kpart``).  ``aligned``: the row's integers are known
    aligned for :func:`weight_alignment`'s loads (codes 0-2): those loads alone, no branch."""
    w.line("  {")
    if code in (4, 5):  # K-quants: the part's 8 unsigned weights as bytes of two words, its map
        w.line("  unsigned int u0, u1; float ks, ko;")
        w.line(f"  ls_kpart({row}, {code}, g, p, &u0, &u1, &ks, &ko);")
        w.line("  const float s = (float)(u0 & 255u) * xe[0] + (float)((u0 >> 8) & 255u) * xe[1] + "
               "(float)((u0 >> 16) & 255u) * xe[2] + (float)(u0 >> 24) * xe[3] + (float)(u1 & 255u) * xe[4] + "
               "(float)((u1 >> 8) & 255u) * xe[5] + (float)((u1 >> 16) & 255u) * xe[6] + (float)(u1 >> 24) * xe[7];")
        w.line("  const float sx = ((xe[0] + xe[1]) + (xe[2] + xe[3])) + ((xe[4] + xe[5]) + (xe[6] + xe[7]));")
        # as group_dot_cuda sums a group's half: Q6_K's value s (u - 32), Q4_K's s u + o
        w.line(f"  {acc} += " + ("ks * (s - 32.0f * sx);" if code == 5 else "ks * s + ko * sx;"))
        w.line("  }")
        return
    w.line(f"  const float d = ls_hx({row}, g);")
    if code == 2:  # 32 signed bytes a group: part p is bytes 8p..8p+7
        w.line(f"  const signed char* q = (const signed char*)({row} + {2 * nb}LL + 32 * g + 8 * p);")
        w.line("  float s = 0.0f;")
        # (aligned: the part's 8 bytes as one 8-byte load)
        w.line("  {" if aligned else "  if ((((unsigned long long)q) & 3) == 0) {")
        w.line("    const uint2 v = *(const uint2*)q; const int v0 = (int)v.x, v1 = (int)v.y;" if aligned else
               "    const int v0 = ((const int*)q)[0], v1 = ((const int*)q)[1];")
        w.line("    s = (float)(signed char)v0 * xe[0] + (float)(signed char)(v0 >> 8) * xe[1] + "
               "(float)(signed char)(v0 >> 16) * xe[2] + (float)(signed char)(v0 >> 24) * xe[3] + "
               "(float)(signed char)v1 * xe[4] + (float)(signed char)(v1 >> 8) * xe[5] + "
               "(float)(signed char)(v1 >> 16) * xe[6] + (float)(signed char)(v1 >> 24) * xe[7];")
        if aligned:
            w.line("  }")
            w.line(f"  {acc} += d * s;")
            w.line("  }")
            return
        w.line("  } else {")
        w.line("    for (int t = 0; t < 8; t++) s += (float)q[t] * xe[t];")
        w.line("  }")
        w.line(f"  {acc} += d * s;")
    else:  # 16 bytes a group: part p is bytes 4p..4p+3, low nibbles weights 4p.., high 4p+16..
        w.line(f"  const unsigned char* q = {row} + {(4 if code == 1 else 2) * nb}LL + 16 * g + 4 * p;")
        w.line("  const unsigned int v = *(const unsigned int*)q;" if aligned else
               "  const unsigned int v = (((unsigned long long)q) & 3) == 0 ? *(const unsigned int*)q : "
               "(q[0] | (unsigned int)q[1] << 8 | (unsigned int)q[2] << 16 | (unsigned int)q[3] << 24);")
        w.line("  const float s = (float)(v & 15u) * xe[0] + (float)((v >> 8) & 15u) * xe[1] + "
               "(float)((v >> 16) & 15u) * xe[2] + (float)((v >> 24) & 15u) * xe[3] + "
               "(float)((v >> 4) & 15u) * xe[4] + (float)((v >> 12) & 15u) * xe[5] + "
               "(float)((v >> 20) & 15u) * xe[6] + (float)(v >> 28) * xe[7];")
        w.line("  const float sx = ((xe[0] + xe[1]) + (xe[2] + xe[3])) + ((xe[4] + xe[5]) + (xe[6] + xe[7]));")
        _add_4bit(w, code, nb, row, acc)
    w.line("  }")


def _add_4bit(w: Writer, code: int, nb: int, row: str, acc: str) -> None:
    """``acc`` += a 4-bit group's (part's) dot from ``s`` (the integers' dot with x) and ``sx`` (x's
    sum): Q4_1's value is d q + m, Q4_0's d (q - 8)."""
    if code == 1:
        w.line(f"  {acc} += d * s + ls_hx({row}, {nb}LL + g) * sx;")
    else:
        w.line(f"  {acc} += d * (s - 8.0f * sx);")


def block_row_bytes(qtype: str, k: int) -> int:
    """Bytes of one weight row of ``k`` columns held as ``qtype`` blocks (the kernels' layout)."""
    from ....weights.quant import BLOCK_BYTES, BLOCK_WEIGHTS, QK

    return k // BLOCK_WEIGHTS.get(qtype, QK) * BLOCK_BYTES[qtype]


def whole_groups(w: Writer, code: int, nb: int, rows: tuple[tuple[str, str], ...] = (("rb", "acc"),),
                 first: str = "lane", step: str = "32") -> None:
    """The loop of each lane over whole groups (lane, lane + 32, ...; from ``first`` by ``step``) of
    the block rows ``rows`` ((byte pointer, accumulator) pairs: each row's dot into its own), x's 32
    floats of a group from ``xr`` in registers, loaded once for all of them."""
    w.line(f"for (long long g = {first}; g < {nb}; g += {step}) {{")
    w.line("  const float4* xv = (const float4*)(xr + 32 * g);")
    w.line("  float x[32];")
    w.line("  if ((((unsigned long long)xv) & 15) == 0) {")
    w.line("    for (int t = 0; t < 8; t++) { const float4 v = xv[t]; x[4 * t] = v.x; x[4 * t + 1] = v.y; "
           "x[4 * t + 2] = v.z; x[4 * t + 3] = v.w; }")
    w.line("  } else {")
    w.line("    for (int t = 0; t < 32; t++) x[t] = xr[32 * g + t];")
    w.line("  }")
    for row, acc in rows:
        group_dot_cuda(w, code, nb, row, acc)
    w.line("}")


# LIGHTSPEED_CUDA_BLOCK_ROWS=R: the cuda block product's warp computes R adjacent outputs of one
# row of x (weight rows j..j+R-1) instead of one, loading each group of x once for all R: a warp
# per output reads the whole x row for the few hundred bytes of one weight row (Gemma 3's k = 640:
# 2.5 KB of x for a 680-byte Q8_0 row, x's traffic 4x the weights'), so R divides it.  Each
# output's sum is the one-row kernel's (same lanes, same order, same reduction): bit for bit
# equal.  Taken where R divides n; 1 (the default) is a warp per output: at 4, Gemma 3's random-block
# step took 1.131 ms against 0.955 (H100, thirty-first session; the 640-row products keep 160 warps).
BLOCK_ROWS = _count_switch("LIGHTSPEED_CUDA_BLOCK_ROWS", "1", ("1", "2", "4", "8"))
# LIGHTSPEED_CUDA_BLOCK_ROWS_MIN_N=N: R outputs a warp only for products of at least N outputs a
# row (a vocabulary's head: 262,144 for Gemma 3), the short layers' products keeping a warp each
_MIN_N_SET = os.environ.get("LIGHTSPEED_CUDA_BLOCK_ROWS_MIN_N", "0")
if not _MIN_N_SET.strip().isdigit():
    raise LightspeedError(f"LIGHTSPEED_CUDA_BLOCK_ROWS_MIN_N must be a count, got {_MIN_N_SET!r}")
BLOCK_ROWS_MIN_N = int(_MIN_N_SET)


def render_block_matmul_cuda(op: LOp, in_dtypes: list[DType], qtype: str) -> KernelSpec:
    """The cuda dialect's ``Matmul``/``MatmulAdd`` whose B (buffer ``in1``) is a weight matrix
    [n, k] kept as GGML ``qtype`` blocks (the packed layout, or GGUF's for the K-quants): a warp
    per output (i, j), each lane taking whole groups of 32 weights of row j (lane, lane + 32, ...:
    a warp reads 32 consecutive groups at once; or parts of groups, :data:`BLOCK_PARTS`),
    decoding them in registers and dotting them with
    x's float32 row in float -- a decode step reads the blocks (4.5 bits a weight for Q4_1)
    instead of float copies.  Activations stay float32: the float32 weights' result up to the
    summation order.  Requires :func:`block_matmul_ok` with ``side`` 1."""
    from ....weights.quant import QK

    if not block_matmul_ok(op, in_dtypes, 1) or qtype not in BLOCK_TYPES:
        raise LightspeedError(f"kernel renderer: no cuda {qtype} block kernel for this {op.op}")
    a = op.args
    m, n, k = a["m"], a["n"], a["k"]
    code = BLOCK_CODE[qtype]
    nb = int(k.value) // QK
    row_bytes = block_row_bytes(qtype, int(k.value))
    # R outputs a warp (BLOCK_ROWS) where R divides the static n of at least BLOCK_ROWS_MIN_N, else one
    rr = BLOCK_ROWS if n.is_const and int(n.value) % BLOCK_ROWS == 0 and int(n.value) >= BLOCK_ROWS_MIN_N else 1
    w = Writer("cuda")
    w.index_vars |= {"_ls_item", "_ls_mi", "_ls_nj"} | ({"_ls_nj0"} if rr > 1 else set())
    nn = w.expr(n)
    items = n // rr if rr > 1 else n  # items a row of x: groups of R weight rows
    rows = tuple((f"rb{r}", f"acc{r}") for r in range(rr)) if rr > 1 else (("rb", "acc"),)
    xr = f"const float* xr = in0 + {w.expr(a['a_offset'])} + _ls_mi * {w.expr(a['a_stride_m'])};"
    w.push()
    if rr == 1:  # (the one-output kernel's text as it always was)
        w.line(f"const long long _ls_nj = _ls_item % {nn}, _ls_mi = _ls_item / {nn};")
        w.line(f"const unsigned char* rb = (const unsigned char*)in1 + _ls_nj * {row_bytes}LL;")
        w.line(xr)
        w.line("float acc = 0.0f;")
    else:
        ni = w.expr(items)
        w.line(f"const long long _ls_nj0 = (_ls_item % {ni}) * {rr}, _ls_mi = _ls_item / {ni};")
        for r, (row, acc) in enumerate(rows):
            w.line(f"const unsigned char* {row} = (const unsigned char*)in1 + (_ls_nj0 + {r}) * {row_bytes}LL;")
            w.line(f"float {acc} = 0.0f;")
        w.line(xr)
    parts = parts_of([code])
    # a block of warps per output (BLOCK_SPLIT): warp `slice` takes every split-th pass of 32 items
    split = block_split(n, nb * parts) if rr == 1 else 0
    first, step = ("slice * 32 + lane", str(32 * split)) if split else ("lane", "32")
    if parts > 1:  # each lane parts of groups (PARTS items a group)
        parts_loops(w, code, nb, rows, "xr", step=step, first=first)
    else:
        whole_groups(w, code, nb, rows, first, step)
    for _, acc in rows:
        w.line(f"for (int o = 16; o > 0; o >>= 1) {acc} += __shfl_xor_sync(0xffffffffu, {acc}, o);")
    if split:
        block_sums(w, [acc for _, acc in rows], split)
    writer = "lane == 0 && slice == 0" if split else "lane == 0"
    bufs = [("out", "float", True, "out"), ("in0", "float", False, 0), ("in1", "unsigned char", False, 1)]
    for r, (_, acc) in enumerate(rows):
        if rr > 1:  # output j0 + r in a scope of its own
            w.line("{")
            w.line(f"const long long _ls_nj = _ls_nj0 + {r};")
        if op.op == "MatmulAdd":
            addend = store_with_addend(w, a["r_view"], in_dtypes[2], f"if ({writer})", f"_ls_mi * {nn} + _ls_nj",
                                       lambda v, acc=acc: f"{acc} + {v}",
                                       Point("_ls_oz", sym("_ls_oz"), (m, n), (sym("_ls_mi"), sym("_ls_nj"))))
            if r == 0:
                bufs.append(addend)
        else:
            w.line(f"if ({writer}) out[_ls_mi * {nn} + _ls_nj] = {acc};")
        if rr > 1:
            w.line("}")
    body = w.pop()
    # the warp's block rows (R adjacent rows: one span) stream into L2 before the wait on the
    # previous kernel, as the float products' rows do (a decode step of a small model is a chain
    # of short kernels)
    span = const(rr * row_bytes)
    prefetch = weight_prefetch(w, "cuda", m, items, span, [("in1", uint8, const(0), span)], split)
    label = f"{qtype}matmul_cuda" + (f"_r{rr}" if rr > 1 else "") + (f"_s{split}" if split else "")
    return finish(w, "cuda", "matmul_split" if split else "matmul_dot", bufs, m * items, body, label,
                  preludes=("ggml_blocks",), before_wait=prefetch, warps=split)


# rows of x (a batch of decode rows, a short prompt) quantised like a decode row where the CPU has
# no lane dots (with them, every row count is)
QUANT_ROWS_MAX = 64


def _quantised_rows(w: Writer, op: LOp, in_dtypes: list[DType], code: int, nb: int, row_bytes: int,
                    activations: str, side: int, xrow: str, at: str, coords: tuple) -> list[str]:
    """The run-time branch for more than one row of x with quantised activations: every row
    quantised once (into a scratch buffer, by ``ls_quant_x``), then each weight row (an item, read
    once from memory per chunk of rows) dotted with every row of x by the decode row's own
    arithmetic: with the lane dots (AVX-512 VNNI; q4_0, q4_1, q8_0) ``ls_tdot_rows`` /
    ``ls_tdot8_rows`` 8, 4 or 1 rows at a time, each row's operations the same in all three, for
    any number of rows (a long prompt too); without them, the decode row's function row by row,
    for up to :data:`QUANT_ROWS_MAX` rows (more keep float activations: the tiles above).  So each
    row's result is bit for bit the one it gets as a single decode row, whatever other rows share
    the call: a batch of sequences decoded together gives each one its solo result (batch
    invariance, ``lightspeed serve``)."""
    from ....weights.quant import QK

    a = op.args
    k = nb * QK
    bits = 16 if activations == "q16" else 8
    xn, wn = (a["m"], a["n"]) if side == 1 else (a["n"], a["m"])
    xx, ww = w.expr(xn), w.expr(wn)
    dot = "ls_qdot" if code < 3 else "ls_kdot"
    w.push()
    w.push()  # the store of row r's value _ls_v
    if op.op == "MatmulAdd":
        w.line(f"const long long _ls_oz = {at};")
        region = Region(w, [a["r_view"]], [in_dtypes[2]], False, names=["in2"])
        rv = region.leaf(0, Point("_ls_oz", sym("_ls_oz"), (a["m"], a["n"]), coords))
        w.line(f"out[_ls_oz] = _ls_v + {rv};")
    else:
        w.line(f"out[{at}] = _ls_v;")
    store = w.pop()
    w.index_vars |= {"_ls_r0", "_ls_t", "_ls_rc", "_ls_rs"}
    w.line(f"if ({xx} > 1) {{")
    w.line(f"  const long long _ls_qn = {nb * QK * bits // 8}, _ls_rows = {xx};")
    if code < 3:  # the lane dots take any number of rows (a long prompt too)
        w.line("#ifdef LS_TDOT")
        _lane_rows(w, nb, code, bits, ww, k, row_bytes, side, xrow, store)
        w.line("#endif")
    w.line(f"  if (_ls_rows <= {QUANT_ROWS_MAX}) {{")
    _ordered_rows(w, nb, code, bits, ww, k, row_bytes, side, xrow, store, dot)
    w.line("  }")
    w.line("}")
    return w.pop()


def _lane_sizes(nb: int, bits: int, code: int) -> tuple[str, str]:
    """Bytes and floats of one row of x in ``ls_tlayout_x``'s layout for weights of type ``code``:
    the prelude's ``LS_TBLOCKS`` / ``LS_TFLOATS`` (C constant expressions, under ``LS_TDOT``)."""
    q8 = int(code == 2)
    return f"LS_TBLOCKS({nb}, {q8}) * {4 * bits}", f"LS_TFLOATS({nb}, {q8})"


def _lane_dot(nb: int, code: int, bits: int, y: str, ystride: str, d: str, s: str, xstride: str, out: str,
              rows: int) -> str:
    """The call dotting a packed weight row ``rb`` with ``rows`` rows of x in the lane layout."""
    if code == 2:
        return f"ls_tdot8_rows(rb, {nb}, {bits}, {y}, {ystride}, {d}, {xstride}, {out}, {rows})"
    return f"ls_tdot_rows(rb, {nb}, {code}, {bits}, {y}, {ystride}, {d}, {s}, {xstride}, {out}, {rows})"


def _row_groups(w: Writer, groups: tuple[int, ...], call, store: list[str], count: str, first: str,
                start: str = "0") -> None:
    """Rows of x ``group`` at a time for each group size in turn, slots ``start`` to ``count``:
    ``call(group)`` fills ``_ls_vg`` for the group starting at slot ``_ls_r0``; the row stored is
    ``first`` + slot."""
    w.line(f"      long long _ls_r0 = {start};")
    for group in groups:
        w.line(f"      for (; _ls_r0 + {group} <= {count}; _ls_r0 += {group}) {{")
        w.line(f"        float _ls_vg[{group}];")
        w.line(f"        {call(group)};")
        w.line(f"        for (int _ls_t = 0; _ls_t < {group}; _ls_t++) {{")
        w.line(f"          const long long _ls_r = {first} + _ls_r0 + _ls_t; const float _ls_v = _ls_vg[_ls_t];")
        w.scope.lines.extend("          " + ln for ln in store)
        w.line("        }")
        w.line("      }")


# rows of x laid out at a time by the lane path: their layout (~7 KB a row for k = 1536) stays in
# the L2 cache while every weight row is dotted with them
LANE_CHUNK = 64


def _lane_rows(w: Writer, nb: int, code: int, bits: int, ww: str, k: int, row_bytes: int, side: int,
               xrow: str, store: list[str]) -> None:
    """The rows of x, :data:`LANE_CHUNK` at a time, laid out for ``ls_tdot_rows`` by the threads
    that then share the weight rows (lane-per-block dots: 8, 4, then 1 row at a time, each row's
    float operations the same in all three, so a row's result does not depend on the others)."""
    tb, tf = _lane_sizes(nb, bits, code)
    w.line(f"  const long long _ls_tb = {tb}, _ls_tf = {tf}, _ls_cn = _ls_rows < {LANE_CHUNK} ? _ls_rows : "
           f"{LANE_CHUNK};")
    # per row of a chunk: its laid-out integers and floats, and the scratch ls_quant_x /
    # ls_tlayout_x use on the way
    w.line(f"  const long long _ls_scr = _ls_qn + {8 * nb + 64 * nb};")
    w.line("  unsigned char* _ls_q = (unsigned char*)malloc(_ls_cn * (_ls_tb + 8 * _ls_tf + _ls_scr));")
    w.line("  if (_ls_q) {")
    w.line("    float* _ls_dt = (float*)(_ls_q + _ls_cn * _ls_tb); float* _ls_st = _ls_dt + _ls_cn * _ls_tf;")
    w.line("    unsigned char* _ls_scratch = (unsigned char*)(_ls_st + _ls_cn * _ls_tf);")
    w.line(f"    #pragma omp parallel if ({ww} * _ls_rows * {k} >= 32768)")
    w.line("    for (long long _ls_rc = 0; _ls_rc < _ls_rows; _ls_rc += _ls_cn) {")
    w.line("      const long long _ls_rn = _ls_rows - _ls_rc < _ls_cn ? _ls_rows - _ls_rc : _ls_cn;")
    w.line("      #pragma omp for schedule(static)")
    w.line("      for (long long _ls_rs = 0; _ls_rs < _ls_rn; _ls_rs++) {")
    w.line("        const long long _ls_r = _ls_rc + _ls_rs;")
    w.line("        unsigned char* _ls_y = _ls_scratch + _ls_rs * _ls_scr;")
    w.line(f"        float* _ls_d = (float*)(_ls_y + _ls_qn); float* _ls_s = _ls_d + {nb};")
    w.line(f"        ls_quant_x({xrow}, {nb}, {bits}, _ls_y, _ls_d, _ls_s);")
    w.line(f"        ls_tlayout_x(_ls_y, {bits}, {code}, _ls_d, _ls_s, {nb}, (unsigned char*)(_ls_s + {nb}), "
           "_ls_q + _ls_rs * _ls_tb, _ls_dt + _ls_rs * _ls_tf, _ls_st + _ls_rs * _ls_tf);")
    w.line("      }")
    def singles(start: str, indent: str) -> None:  # one weight row (_ls_wrow, rb), the chunk's rows from start
        w.push()
        _row_groups(w, (8, 4, 1), lambda g: _lane_dot(nb, code, bits, "_ls_q + _ls_r0 * _ls_tb", "_ls_tb",
                                                      "_ls_dt + _ls_r0 * _ls_tf", "_ls_st + _ls_r0 * _ls_tf",
                                                      "_ls_tf", "_ls_vg", g), store, "_ls_rn", "_ls_rc", start)
        lines = w.pop()
        w.scope.lines.extend(indent + ln for ln in lines)

    w.line("      #pragma omp for schedule(static)")
    if bits != 16:
        w.line(f"      for (long long _ls_wrow = 0; _ls_wrow < {ww}; _ls_wrow++) {{")
        w.line(f"        const unsigned char* rb = (const unsigned char*)in{side} + _ls_wrow * {row_bytes}LL;")
        singles("0", "  ")
        w.line("      }")
        w.line("    }")
    else:
        # weight rows in pairs, 4 rows of x at a time (ls_tdot2_rows / ls_tdot82_rows: each load of
        # x feeds both rows' products), the rows left (fewer than 4) and an odd last weight row one
        # weight row at a time; every output is bit for bit the same in either form
        pair = ("ls_tdot82_rows(_ls_rb0, _ls_rb0 + {rbytes}LL, {nb}, _ls_q + _ls_r0 * _ls_tb, _ls_tb, "
                "_ls_dt + _ls_r0 * _ls_tf, _ls_tf, _ls_vg, _ls_vh, 4, _ls_rb0 + 2 * {rbytes}LL, _ls_r0 ? 0 : _ls_pfl)"
                if code == 2 else
                "ls_tdot2_rows(_ls_rb0, _ls_rb0 + {rbytes}LL, {nb}, {code}, _ls_q + _ls_r0 * _ls_tb, _ls_tb, "
                "_ls_dt + _ls_r0 * _ls_tf, _ls_st + _ls_r0 * _ls_tf, _ls_tf, _ls_vg, _ls_vh, 4, "
                "_ls_rb0 + 2 * {rbytes}LL, _ls_r0 ? 0 : _ls_pfl)")
        w.index_vars |= {"_ls_wp", "_ls_w0", "_ls_rb0", "_ls_rp", "_ls_pfl"}
        w.line(f"      for (long long _ls_wp = 0; _ls_wp < ({ww} + 1) / 2; _ls_wp++) {{")
        w.line("        const long long _ls_w0 = 2 * _ls_wp;")
        w.line(f"        const unsigned char* _ls_rb0 = (const unsigned char*)in{side} + _ls_w0 * {row_bytes}LL;")
        # the thread's next pair of weight rows asked into the cache, a line at a time, while the
        # first 4 rows of x are dotted with this pair (ls_prefetch_line)
        w.line(f"        const long long _ls_pfl = _ls_w0 + 2 < {ww} ? "
               f"((_ls_w0 + 3 < {ww} ? 2 : 1) * {row_bytes}LL + 63) / 64 : 0;")
        w.line("        long long _ls_rp = 0;  // the chunk's slots the pairs took")
        w.line(f"        if (_ls_w0 + 1 < {ww}) for (long long _ls_r0 = 0; _ls_r0 + 4 <= _ls_rn; _ls_r0 += 4) {{")
        w.line("          float _ls_vg[4], _ls_vh[4];")
        w.line(f"          {pair.format(rbytes=row_bytes, nb=nb, code=code)};")
        w.line("          for (int _ls_t = 0; _ls_t < 8; _ls_t++) {")
        w.line("            const long long _ls_wrow = _ls_w0 + _ls_t / 4, _ls_r = _ls_rc + _ls_r0 + _ls_t % 4;")
        w.line("            const float _ls_v = _ls_t < 4 ? _ls_vg[_ls_t] : _ls_vh[_ls_t - 4];")
        w.scope.lines.extend("            " + ln for ln in store)
        w.line("          }")
        w.line("          _ls_rp = _ls_r0 + 4;")
        w.line("        }")
        w.line(f"        for (long long _ls_wrow = _ls_w0; _ls_wrow < _ls_w0 + 2 && _ls_wrow < {ww}; _ls_wrow++) {{")
        w.line(f"          const unsigned char* rb = (const unsigned char*)in{side} + _ls_wrow * {row_bytes}LL;")
        w.line(f"          const long long _ls_from = _ls_w0 + 1 < {ww} ? _ls_rp : 0;")
        singles("_ls_from", "    ")
        w.line("        }")
        w.line("      }")
        w.line("    }")
    w.line("    free(_ls_q);")
    w.line("    return;")
    w.line("  }")


def _ordered_rows(w: Writer, nb: int, code: int, bits: int, ww: str, k: int, row_bytes: int, side: int,
                  xrow: str, store: list[str], dot: str) -> None:
    """The rows of x quantised in order, each dotted by the decode row's own function (``dot``:
    ``ls_qdot``/``ls_kdot``) -- the K-quants, and every type where the CPU lacks the lane dots."""
    w.line("  unsigned char* _ls_q = (unsigned char*)malloc(_ls_rows * (_ls_qn + 2 * sizeof(float) * "
           f"{nb}));")
    w.line("  if (_ls_q) {")
    w.line(f"    float* _ls_d = (float*)(_ls_q + _ls_rows * _ls_qn); float* _ls_s = _ls_d + _ls_rows * {nb};")
    w.line("    for (long long _ls_r = 0; _ls_r < _ls_rows; _ls_r++)")
    w.line(f"      ls_quant_x({xrow}, {nb}, {bits}, _ls_q + _ls_r * _ls_qn, _ls_d + _ls_r * {nb}, "
           f"_ls_s + _ls_r * {nb});")
    w.line(f"    #pragma omp parallel for schedule(static) if ({ww} * _ls_rows * {k} >= 32768)")
    w.line(f"    for (long long _ls_wrow = 0; _ls_wrow < {ww}; _ls_wrow++) {{")
    w.line(f"      const unsigned char* rb = (const unsigned char*)in{side} + _ls_wrow * {row_bytes}LL;")
    w.line("      for (long long _ls_r = 0; _ls_r < _ls_rows; _ls_r++) {")
    w.line(f"        const float _ls_v = {dot}(rb, {nb}, {code}, {bits}, _ls_q + _ls_r * _ls_qn, "
           f"_ls_d + _ls_r * {nb}, _ls_s + _ls_r * {nb});")
    w.scope.lines.extend("        " + ln for ln in store)
    w.line("      }")
    w.line("    }")
    w.line("    free(_ls_q);")
    w.line("    return;")
    w.line("  }")


def block_gather_ok(op: LOp, in_dtypes: list[DType]) -> bool:
    """Whether :func:`render_block_gather` computes ``op``: a ``Gather`` of float32 values from a
    static [rows, cols] matrix read through its plain row-major view, cols a multiple of 32."""
    st = op.args["data_view"] if op.op == "Gather" else None
    return (st is not None and op.dtype.name == "float32" and in_dtypes[1].name == "float32" and st.is_contiguous
            and len(st.shape) == 2 and not any(d.free_vars() for d in st.shape) and st.shape[1].value % 32 == 0)


def render_block_gather(op: LOp, in_dtypes: list[DType], qtype: str, dialect: str = "c") -> KernelSpec:
    """``Gather`` whose data (buffer ``in1``) is a matrix kept as packed GGML ``qtype`` blocks
    (an embedding table): each gathered element decoded from its block, the float32 weight
    exactly (both dialects: ``ls_blk_at`` is plain C).  Requires :func:`block_gather_ok`."""
    if not block_gather_ok(op, in_dtypes) or qtype not in BLOCK_TYPES:
        raise LightspeedError(f"kernel renderer: no {qtype} block gather for this {op.op}")
    cols = int(op.args["data_view"].shape[1].value)
    code = BLOCK_CODE[qtype]
    return region_kernel(dialect, ("gather", ("leaf", 0), 1), [op.args["indexes_view"], op.args["data_view"]],
                          in_dtypes, op.dtype, op.shape, f"{qtype}gather", block_data={1: (code, cols)})
