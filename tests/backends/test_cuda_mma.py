"""Tensor-core tiles (``MatmulMma`` / ``MatmulAddMma``, kernels/matmul_mma.py) of the cuda backend:
offered by the ``mma`` ruleset for bfloat16/float16 products, compiled for sm_90 by NVRTC (CI, no
GPU needed), and on a GPU equal to the float64 product of the same rounded inputs at row counts
that fill no tile, one tile and several, with tails in n and k."""

from __future__ import annotations

import random

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends.cuda.backend import CudaBackend
from lightspeed.egraph import Candidate
from lightspeed.egraph.llir import decode_program
from tests.backends.harness import nvrtc_or_skip, saturate

MMA = CudaBackend("off", mma=True)  # the tiles alone (cuBLASLt's many-rows ops: test_cublaslt_plan.py)


@pytest.fixture(params=[False, True], ids=["lds", "ldmatrix"])
def fragments(request, monkeypatch):
    """The tiles' fragment loads: 32-bit shared loads, or ldmatrix (LIGHTSPEED_CUDA_LDMATRIX)."""
    from lightspeed.backends.codegen.kernels import matmul_mma

    monkeypatch.setattr(matmul_mma, "LDMATRIX", request.param)
    return request.param


@pytest.fixture(params=[False, True], ids=["staged", "pipelined"])
def pipeline(request, monkeypatch):
    """The attention tiles' key loads: each tile before its products, or the next tile's issued
    into registers during them (LIGHTSPEED_CUDA_ATTENTION_PIPELINE)."""
    from lightspeed.backends.codegen.kernels import attention_mma

    monkeypatch.setattr(attention_mma, "PIPELINE", request.param)
    return request.param


@pytest.fixture(params=[False, True], ids=["64", "128"])
def large(request, monkeypatch):
    """The tile shape: 64 x 64 of 4 warps, or 128 rows of 8 warps (LIGHTSPEED_CUDA_MMA_TILE=128)."""
    from lightspeed.backends.codegen.kernels import matmul_mma

    monkeypatch.setattr(matmul_mma, "LARGE_TILES", request.param)
    return request.param


def _graph(dtype, transposed: bool, add: bool, batch: tuple = (), k: int = 96, n: int = 80) -> ls.Graph:
    g = ls.Graph()
    x = g.input("x", (*batch, "s", k), dtype)
    w = g.input("w", (n, k) if transposed else (k, n), dtype)
    y = x @ (w.transpose(0, 1) if transposed else w)
    if add:
        y = y + g.input("r", (*batch, "s", n), dtype)
    g.output("y", y)
    return g


def _with_tiles(g: ls.Graph):
    """An LLIR program of ``g`` whose products are all tensor-core tiles (random candidates of the
    saturated e-graph until one is)."""
    _, enc, index, ser = saturate(MMA, g)
    for seed in range(200):
        lp = decode_program(Candidate.random(index, random.Random(seed)), ser, enc.constants, MMA.declarations())
        products = [o.op for o in lp.ops if "Matmul" in o.op]
        if products and all(p.endswith("Mma") for p in products):
            return lp
    raise AssertionError("the mma rules offered no candidate with tensor-core tiles")


# k = 96: whole 16-byte loads; 104: rows of whole 8s but a partial last step; 100: element loads
CASES = [(ls.bfloat16, True, False, (), 96), (ls.bfloat16, False, True, (), 100), (ls.float16, True, True, (), 104),
         (ls.bfloat16, True, False, (3,), 96)]


@pytest.mark.parametrize("dtype,transposed,add,batch,k", CASES)
def test_tiles_are_offered_and_compile_for_sm90(dtype, transposed, add, batch, k, fragments, large):
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import module_source, render

    lp = _with_tiles(_graph(dtype, transposed, add, batch, k))
    for op in lp.ops:
        if op.op.endswith("Mma"):
            specs = render(op, [lp.ops[i].dtype for i in op.inputs], "cuda")
            assert specs[0].launch.kind == ("matmul_mma_large" if large else "matmul_mma")
            assert "ls_mma_" in specs[0].source and specs[0].launch.threads == (256 if large else 128)
            assert ("ls_ldmatrix_x4(" in specs[0].source) == fragments
            # rows contiguous along k in whole 8s: 16-byte loads (A's always here, B's when transposed)
            assert specs[0].source.count("*(const uint4*)") == (0 if k % 8 else 1 + transposed)
            assert nvrtc.compile_cubin(module_source(specs, "cuda"), "sm_90")


def test_no_tiles_without_the_switch_or_for_float32():
    assert "mma" not in CudaBackend(mma=False).rulesets and "mma" in MMA.rulesets
    _, enc, index, ser = saturate(MMA, _graph(ls.float32, True, True))
    seen = set()
    for seed in range(40):
        lp = decode_program(Candidate.random(index, random.Random(seed)), ser, enc.constants, MMA.declarations())
        seen |= {o.op for o in lp.ops}
    assert {"Matmul", "MatmulAdd"} & seen and not {"MatmulMma", "MatmulAddMma"} & seen


def test_few_rows_candidate_runs_the_products_without_tiles():
    """The greedy and fused candidates take the tiles wherever offered; a decode row runs them far
    slower than the warp kernels (a 1B decode step 1.5 -> 11 ms on the H100, 2026-12-05), so the
    search also measures the fused candidate without them -- and only where tiles are offered."""
    from lightspeed.search import SearchOptions, candidates

    many = frozenset(n for n, d in MMA.declarations().items() if d.many_rows)
    assert many == {"MatmulMma", "MatmulAddMma", "MatmulGLUMma", "MatmulGeGLUMma", "AttentionMma", "GatherMatmulMma"}

    def products(cand) -> list[str]:
        lp = decode_program(cand, ser, enc.constants, MMA.declarations())
        return [o.op for o in lp.ops if "Matmul" in o.op]

    _, enc, index, ser = saturate(MMA, _graph(ls.bfloat16, True, True))
    # within a budget of 3 (the model programs' default): default, greedy, few-rows
    listed = dict(candidates(index, SearchOptions(budget=3, seed=0), many))
    assert list(listed) == ["default", "greedy", "few-rows"]
    tiled = products(listed["greedy"])
    assert tiled and all(p.endswith("Mma") for p in tiled)
    few = products(listed["few-rows"])
    assert few and not any(p.endswith("Mma") for p in few)
    # float32: no tiles offered, no extra candidate (the list of every other graph is unchanged)
    _, enc, index, ser = saturate(MMA, _graph(ls.float32, True, True))
    assert "few-rows" not in dict(candidates(index, SearchOptions(budget=8, seed=0), many))


@pytest.mark.skipif(not MMA.available(), reason="no GPU")
@pytest.mark.parametrize("dtype,transposed,add,batch,k", CASES)
def test_tiles_equal_the_float64_product(dtype, transposed, add, batch, k, fragments, large):
    # issue 28's odd sizes (1, 17, 255, 1000 rows) and one and two whole 64-row tiles
    _check_tiles(dtype, transposed, add, batch, k, 80, (1, 17, 64, 130, 255, 1000))


@pytest.mark.skipif(not MMA.available(), reason="no GPU")
def test_whole_and_partial_large_tiles_equal_the_float64_product(fragments, large):
    """Several whole tiles in both directions, and a partial last one (n = 320, 300 rows)."""
    _check_tiles(ls.bfloat16, True, True, (), 256, 320, (128, 300))


def _check_tiles(dtype, transposed, add, batch, k, n, rows) -> None:
    g = _graph(dtype, transposed, add, batch, k, n)
    prog = MMA.lower(g, _with_tiles(g))
    rng = np.random.default_rng(0)
    for s in rows:
        ins = {"x": rng.standard_normal((*batch, s, k)).astype(dtype.np),
               "w": rng.standard_normal((n, k) if transposed else (k, n)).astype(dtype.np)}
        if add:
            ins["r"] = rng.standard_normal((*batch, s, n)).astype(dtype.np)
        w64 = ins["w"].astype(np.float64)
        want = ins["x"].astype(np.float64) @ (w64.T if transposed else w64)
        if add:
            want = want + ins["r"].astype(np.float64)
        got = np.asarray(prog(ins)["y"]).astype(np.float64)
        tol = 1e-2 if dtype == ls.bfloat16 else 2e-3
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max(), err_msg=f"s={s}")


# ------------------------------------------------------------------ gate and up with SiLU·mul
def _glu_graph(dtype, k: int, gate: str = "silu_mul") -> ls.Graph:
    """A prompt's MLP gate: silu(x @ G^T) * (x @ U^T), the chain products.egg makes one MatmulGLU of
    (``gate`` "gelu_tanh_mul": Gemma's, one MatmulGeGLU)."""
    from lightspeed.nn import mlp

    g = ls.Graph()
    x = g.input("x", ("s", k), dtype)
    wg, wu = g.input("wg", (80, k), dtype), g.input("wu", (80, k), dtype)
    g.output("y", getattr(mlp, gate)(x @ wg.transpose(0, 1), x @ wu.transpose(0, 1)))
    return g


# the gated products' chains and the op each becomes
GATES = {"silu_mul": "MatmulGLU", "gelu_tanh_mul": "MatmulGeGLU"}


def _glu_tiles(g: ls.Graph):
    """The greedy candidate's program (MatmulGLUMma) and the few-rows one's (MatmulGLU)."""
    return _flash(g)


# k = 96: the cp.async loop; 100: element loads
@pytest.mark.parametrize("gate", sorted(GATES))
@pytest.mark.parametrize("dtype,k", [(ls.bfloat16, 96), (ls.float16, 100)])
def test_glu_tiles_are_offered_and_compile_for_sm90(dtype, k, gate, fragments, large):
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import module_source, render

    kind = GATES[gate]
    tiles, plain = _glu_tiles(_glu_graph(dtype, k, gate))
    assert [o.op for o in tiles.ops if "Matmul" in o.op] == [kind + "Mma"]
    assert [o.op for o in plain.ops if "Matmul" in o.op] == [kind]
    op = next(o for o in tiles.ops if o.op == kind + "Mma")
    specs = render(op, [tiles.ops[i].dtype for i in op.inputs], "cuda")
    src = specs[0].source
    assert specs[0].launch.kind == ("matmul_mma_large" if large else "matmul_mma")
    assert "_ls_c1[i][j]" in src and "ls_exp2f" in src
    assert ("ls_cp_async16" in src) == (k % 8 == 0)
    assert nvrtc.compile_cubin(module_source(specs, "cuda"), "sm_90")


@pytest.mark.skipif(not MMA.available(), reason="no GPU")
@pytest.mark.parametrize("gate", sorted(GATES))
@pytest.mark.parametrize("dtype,k", [(ls.bfloat16, 96), (ls.float16, 100)])
def test_glu_tiles_match_the_reference(dtype, k, gate, fragments, large):
    g = _glu_graph(dtype, k, gate)
    tiles = MMA.lower(g, _glu_tiles(g)[0])
    ref = g.compile(backend="reference")
    rng = np.random.default_rng(k)
    for s in (1, 17, 64, 130, 255, 1000):
        ins = {"x": (rng.standard_normal((s, k)) * 0.3).astype(dtype.np),
               "wg": (rng.standard_normal((80, k)) * 0.3).astype(dtype.np),
               "wu": (rng.standard_normal((80, k)) * 0.3).astype(dtype.np)}
        want = np.asarray(ref(ins)["y"], np.float32)
        got = np.asarray(tiles(ins)["y"], np.float32)
        tol = 2e-2 if dtype == ls.bfloat16 else 4e-3
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max(), err_msg=f"s={s}")


# ------------------------------------------------------------------ attention on the tensor cores
def _attention_graph(d: int, dtype=ls.bfloat16, grouped: bool = False, rows: bool = False,
                     q_body: bool = False) -> ls.Graph:
    """softmax_2(q k^T + mask) v over 2 batch indexes, m query rows and L keys (symbolic): the
    chain the attention rules make one ``Attention`` op of (nn.softmax_attention's form).
    ``grouped``: a decode step's layout instead -- queries [m, 2, 4, d] (positions, KV heads, the
    group's heads), keys and values per KV head broadcast over the positions, the mask per
    position: the Attention is batched over (m, 2) with 4 rows, and the tiles fold m into them.
    ``rows``: keys and values stored [L, 2, d] (a model's K/V: positions major), whose static
    strides let the tiles stage them with 16-byte loads.  ``q_body``: the queries scaled first (a
    body the tiles evaluate element by element as they stage it, as a model's RoPE)."""
    from lightspeed import hl

    g = ls.Graph()
    if rows:
        k = g.input("k", ("L", 2, d), dtype).permute(1, 0, 2)
        v = g.input("v", ("L", 2, d), dtype).permute(1, 0, 2)
    else:
        k = g.input("k", (2, "L", d), dtype)
        v = g.input("v", (2, "L", d), dtype)
    mask = g.input("mask", ("m", "L"), dtype)
    if grouped:
        q = g.input("q", ("m", 2, 4, d), dtype)
        q = q * 1.5 if q_body else q
        scores = q @ k.permute(0, 2, 1) + mask.reshape("m", 1, 1, "L")
    else:
        q = g.input("q", (2, "m", d), dtype)
        q = q * 1.5 if q_body else q
        scores = q @ k.permute(0, 2, 1) + mask.reshape(1, "m", "L")
    e = hl.exp2(scores + scores.amax(-1, keepdim=True) * -1.0)
    g.output("o", (e @ v) * hl.reciprocal(e.sum(-1, keepdim=True)))
    return g


def _flash(g: ls.Graph):
    """The greedy candidate's program (AttentionMma) and the few-rows one's (Attention)."""
    from lightspeed.search import SearchOptions, candidates

    _, enc, index, ser = saturate(MMA, g)
    many = frozenset(n for n, d in MMA.declarations().items() if d.many_rows)
    listed = dict(candidates(index, SearchOptions(budget=3, seed=0), many))
    return tuple(decode_program(listed[o], ser, enc.constants, MMA.declarations()) if o in listed else None
                 for o in ("greedy", "few-rows"))


@pytest.mark.parametrize("d,grouped,rows", [(16, False, False), (64, False, False), (128, False, False),
                                            (64, True, False), (64, True, True), (128, False, True)])
def test_attention_tiles_are_offered_and_compile_for_sm90(d, grouped, rows, fragments, pipeline):
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import module_source, render

    tiles, plain = _flash(_attention_graph(d, grouped=grouped, rows=rows))
    assert [o.op for o in tiles.ops if o.op.startswith("Attention")] == ["AttentionMma"]
    assert [o.op for o in plain.ops if o.op.startswith("Attention")] == ["Attention"]
    op = next(o for o in tiles.ops if o.op == "AttentionMma")
    specs = render(op, [tiles.ops[i].dtype for i in op.inputs], "cuda")
    assert specs[0].launch.kind == "matmul_mma" and "ls_mma_bf16" in specs[0].source
    # 16-byte staging: every layout here has strides of whole vectors (a batch stride of n x d
    # too, for any n), and with the pipeline the next tile's loads issued early
    assert "_ls_vec_k" in specs[0].source
    assert ("_ls_pipe" in specs[0].source) == pipeline
    assert "__syncthreads_and" in specs[0].source  # blocked tiles skipped
    assert ("ls_ldmatrix_x4_trans(" in specs[0].source) == fragments  # the values read transposed
    # grouped: the positions folded into the rows (a block per 64 of m x 4 rows of a KV head)
    assert str(specs[0].launch.grid[0]) == ("2*((4*m + 63) // 64)" if grouped else "2*((m + 63) // 64)")
    assert nvrtc.compile_cubin(module_source(specs, "cuda"), "sm_90")
    # float32 (no tensor-core dtype): no tiles, and so no few-rows candidate
    tiles, plain = _flash(_attention_graph(d, ls.float32))
    assert plain is None and not any(o.op == "AttentionMma" for o in tiles.ops)


def _paged_attention_graph(d: int = 64) -> ls.Graph:
    """A paged step's attention alone (bfloat16): 3 rows of queries [s, 2, 4, d] against the
    keys and values of their pages (pools [N, 32, 2, d], page tables [s, NP]) under a mask."""
    from lightspeed.nn.attention import paged_attention

    g = ls.Graph()
    q = g.input("q", ("s", 2, 4, d), ls.bfloat16)
    kp, vp = (g.input(n, ("N", 32, 2, d), ls.bfloat16) for n in ("kp", "vp"))
    pages = g.input("pages", ("s", "NP"), ls.int64)
    mask = g.input("mask", ("s", pages.shape[1] * 32), ls.bfloat16)
    g.output("o", paged_attention(q, kp, vp, pages, mask))
    return g


def _tile_programs(g: ls.Graph, want: int = 2) -> list:
    """LLIR programs of ``g`` with the attention tiles: the listed candidates' and random ones'."""
    from lightspeed.search import SearchOptions, candidates

    _, enc, index, ser = saturate(MMA, g)
    decls = MMA.declarations()
    many = frozenset(n for n, d in decls.items() if d.many_rows)
    cands = [c for _, c in candidates(index, SearchOptions(budget=3, seed=0), many)]
    cands += [Candidate.random(index, random.Random(seed)) for seed in range(200)]
    out = []
    for cand in cands:
        lp = decode_program(cand, ser, enc.constants, decls)
        if any(o.op == "AttentionMma" for o in lp.ops):
            out.append(lp)
            if len(out) == want:
                break
    return out


def test_a_paged_steps_attention_tiles_load_keys_and_values_16_bytes_at_a_time(fragments):
    """A paged step's keys and values reach the tiles either copied out first (a buffer whose
    batch stride is a multiple of the page-table width: whole 16-byte vectors for any width,
    which the check once wanted constant) or gathered through the page tables inside the tile
    (8 elements from one computed index where they are one aligned run); both stage with
    16-byte loads (they were staged element by element, two 64-bit divisions by a run-time
    value per element), and the kernels compile for sm_90."""
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import module_source, render
    from lightspeed.models import from_hf_config
    from tests.backends.test_conformance import TINY

    cfg = {**TINY, "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
           "num_hidden_layers": 1}
    specs, ways = [], set()
    for g in (from_hf_config(cfg, dtype="bfloat16").paged_graph(next_token=True), _paged_attention_graph()):
        for lp in _tile_programs(g, 6):
            op = next(o for o in lp.ops if o.op == "AttentionMma")
            (spec,) = render(op, [lp.ops[i].dtype for i in op.inputs], "cuda")
            src = spec.source
            ways.add(("vector" if "_ls_vec_k" in src else "runs" if "_ls_kb" in src else "elements",
                      "vector" if "_ls_vec_v" in src else "runs" if "_ls_vb" in src else "elements"))
            specs.append(spec)
    keys, values = {k for k, _ in ways}, {v for _, v in ways}
    assert {"runs", "vector"} <= keys, ways
    # the values row-major for ldmatrix: staged like the keys (else transposed, element by element)
    assert ("runs" in values) == fragments, ways
    assert nvrtc.compile_cubin(module_source(specs, "cuda"), "sm_90")


@pytest.mark.skipif(not MMA.available(), reason="no GPU")
def test_a_paged_steps_attention_tiles_match_the_reference(fragments):
    """The tiles reading keys and values through page tables (runs inside a page, pages out of
    order, a shorter row's table padded with page 0 behind its mask) equal the reference."""
    import ml_dtypes

    g = _paged_attention_graph()
    ref = g.compile(backend="reference")
    bf = ml_dtypes.bfloat16
    lowest = float(ml_dtypes.finfo(bf).min)
    rng = np.random.default_rng(3)
    for lp in _tile_programs(g):
        tiles = MMA.lower(g, lp)
        for s, n_pages, width in ((1, 3, 2), (3, 8, 3), (17, 40, 2)):
            lengths = rng.integers(1, width * 32 + 1, s)
            pages = np.stack([rng.permutation(n_pages)[:width] for _ in range(s)]).astype(np.int64)
            mask = np.where(np.arange(width * 32)[None, :] < lengths[:, None], 0.0, lowest).astype(bf)
            ins = {"q": (rng.standard_normal((s, 2, 4, 64)) * 0.3).astype(bf),
                   "kp": rng.standard_normal((n_pages, 32, 2, 64)).astype(bf),
                   "vp": rng.standard_normal((n_pages, 32, 2, 64)).astype(bf), "pages": pages, "mask": mask}
            want = np.asarray(ref(ins)["o"], np.float32)
            got = np.asarray(tiles(ins)["o"], np.float32)
            np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max(), err_msg=f"s={s}")


@pytest.mark.skipif(not MMA.available(), reason="no GPU")
@pytest.mark.parametrize("d,grouped,rows", [(64, False, False), (128, False, False), (64, True, False),
                                            (128, True, False), (64, True, True), (128, False, True)])
def test_attention_tiles_match_the_reference(d, grouped, rows, fragments, pipeline):
    _check_tiles_against_the_reference(d, grouped, rows)


@pytest.mark.skipif(not MMA.available(), reason="no GPU")
@pytest.mark.parametrize("d,grouped,rows", [(64, True, True), (128, False, False)])
def test_tiles_with_a_packed_mask_and_three_blocks_an_sm_match_the_reference(d, grouped, rows, monkeypatch):
    """LIGHTSPEED_CUDA_ATTENTION_PACKED_MASK=1 with MIN_BLOCKS=3 (registers spilled where they must)."""
    from lightspeed.backends.codegen.kernels import attention_mma

    monkeypatch.setattr(attention_mma, "PACKED_MASK", True)
    monkeypatch.setattr(attention_mma, "MIN_BLOCKS", 3)
    _check_tiles_against_the_reference(d, grouped, rows)


def test_a_packed_mask_compiles_in_both_16_bit_dtypes(monkeypatch):
    """The next key tile's mask as pairs of the 16-bit dtype: one register (and, a whole tile in
    range, one load) per two scores."""
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import attention_mma, module_source, render

    monkeypatch.setattr(attention_mma, "PACKED_MASK", True)
    for dtype, pack in ((ls.bfloat16, "ls_pack2_bf16(_ls_mlo"), (ls.float16, "ls_pack2_f16(_ls_mlo")):
        tiles, _ = _flash(_attention_graph(64, dtype, grouped=True, rows=True))
        op = next(o for o in tiles.ops if o.op == "AttentionMma")
        specs = render(op, [tiles.ops[i].dtype for i in op.inputs], "cuda")
        assert "unsigned int _ls_mk[8][2];" in specs[0].source and pack in specs[0].source
        # the mask [m, L] (broadcast over the heads): a row's two keys in one 32-bit load
        assert "*(const unsigned int*)_ls_mp" in specs[0].source
        assert nvrtc.compile_cubin(module_source(specs, "cuda"), "sm_90")


def test_an_unrolled_query_staging_compiles_with_its_rows_clamped(monkeypatch):
    """LIGHTSPEED_CUDA_ATTENTION_Q_UNROLL=8: a query body's elements staged 8 a thread into
    registers, then stored (no shared store between their loads); the outermost folded row
    coordinate clamped, not divided by the run-time row count; without the switch, neither."""
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import attention_mma, module_source, render

    def source(d: int, grouped: bool) -> str:
        tiles, _ = _flash(_attention_graph(d, grouped=grouped, rows=True, q_body=True))
        op = next(o for o in tiles.ops if o.op == "AttentionMma")
        specs = render(op, [tiles.ops[i].dtype for i in op.inputs], "cuda")
        assert nvrtc.compile_cubin(module_source(specs, "cuda"), "sm_90")
        return specs[0].source

    monkeypatch.setattr(attention_mma, "Q_UNROLL", 0)  # (whatever the environment sets)
    assert "_ls_vu[" not in source(64, True)
    monkeypatch.setattr(attention_mma, "Q_UNROLL", 8)
    for d, grouped in ((64, True), (128, False), (16, True)):
        text = source(d, grouped)
        assert "float _ls_vu[8];" in text and "_ls_vu[_ls_k] = _ls_m0 + _ls_r <" in text
        # grouped: the positions folded into the rows, the outermost coordinate clamped
        assert (" ? _ls_f_r : " in text) == grouped


@pytest.mark.skipif(not MMA.available(), reason="no GPU")
@pytest.mark.parametrize("q_unroll,packed", [(8, True), (0, False)])
@pytest.mark.parametrize("d,grouped,rows", [(64, True, True), (64, False, False), (128, False, True)])
def test_query_staging_matches_the_reference(d, grouped, rows, q_unroll, packed, monkeypatch):
    """A query body staged 8 at a time with the packed mask (the defaults; rows past the end read
    through a clamped row) and one element at a time with 32-bit mask registers (both switches
    off), against the reference at the tiles' odd sizes."""
    from lightspeed.backends.codegen.kernels import attention_mma

    monkeypatch.setattr(attention_mma, "Q_UNROLL", q_unroll)
    monkeypatch.setattr(attention_mma, "PACKED_MASK", packed)
    _check_tiles_against_the_reference(d, grouped, rows, q_body=True)


def test_a_split_tile_runs_on_a_pair_of_blocks_and_compiles(monkeypatch):
    """LIGHTSPEED_CUDA_ATTENTION_SPLIT=1: a row tile's keys over a cluster of 2 blocks (every other
    key tile each), merged through distributed shared memory in a buffer over the tiles (no more
    shared memory than the tiles'), the row tiles longest first; every head dim."""
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import attention_mma, module_source, render

    monkeypatch.setattr(attention_mma, "SPLIT", True)
    for d, grouped, rows in ((64, True, True), (64, False, False), (32, False, False), (128, False, True)):
        tiles, _ = _flash(_attention_graph(d, grouped=grouped, rows=rows))
        op = next(o for o in tiles.ops if o.op == "AttentionMma")
        spec = render(op, [tiles.ops[i].dtype for i in op.inputs], "cuda")[0]
        assert spec.launch.kind == "matmul_mma_pair" and spec.launch.cluster == (2, 1, 1)
        tiles_of = "((4*m + 63) // 64)" if grouped else "((m + 63) // 64)"
        assert str(spec.launch.grid[0]) == f"4*{tiles_of}"  # 2 batch indexes x the tiles x 2 blocks
        bn = 64 if d <= 64 else 32
        assert f"_ls_l0 += {2 * bn}" in spec.source and "ls_cluster_ld(&_ls_xo" in spec.source
        assert "- 1 - _ls_item /" in spec.source and "_ls_smem[" in spec.source
        assert nvrtc.compile_cubin(module_source([spec], "cuda"), "sm_90"), d


@pytest.mark.skipif(not MMA.available(), reason="no GPU")
@pytest.mark.parametrize("d,grouped,rows", [(64, True, True), (64, False, False), (32, False, False),
                                            (128, False, True)])
def test_split_tiles_match_the_reference(d, grouped, rows, pipeline, monkeypatch):
    """The pair's merged result against the reference at odd sizes (1 row of 5 keys: the second
    block walks nothing; 100 and 130 keys: it walks a partial tile)."""
    from lightspeed.backends.codegen.kernels import attention_mma

    monkeypatch.setattr(attention_mma, "SPLIT", True)
    _check_tiles_against_the_reference(d, grouped, rows)


def _check_tiles_against_the_reference(d: int, grouped: bool, rows: bool, q_body: bool = False) -> None:
    import ml_dtypes

    g = _attention_graph(d, grouped=grouped, rows=rows, q_body=q_body)
    tiles = MMA.lower(g, _flash(g)[0])
    ref = g.compile(backend="reference")
    rng = np.random.default_rng(d)
    bf = ml_dtypes.bfloat16
    lowest = float(ml_dtypes.finfo(bf).min)
    for m, n in ((1, 5), (17, 64), (64, 100), (130, 130), (255, 300), (1000, 1000)):
        # a causal mask over the last m of n keys: row i sees keys <= n - m + i (the most negative
        # value blocks a key, as the models' masks do)
        mask = np.where(np.arange(n)[None, :] > (n - m + np.arange(m))[:, None], lowest, 0.0).astype(bf)
        qshape = (m, 2, 4, d) if grouped else (2, m, d)
        kshape = (n, 2, d) if rows else (2, n, d)
        ins = {"q": (rng.standard_normal(qshape) * 0.3).astype(bf), "k": rng.standard_normal(kshape).astype(bf),
               "v": rng.standard_normal(kshape).astype(bf), "mask": mask}
        want = np.asarray(ref(ins)["o"], np.float32)
        got = np.asarray(tiles(ins)["o"], np.float32)
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max(), err_msg=f"m={m} n={n}")
