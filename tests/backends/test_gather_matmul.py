"""``GatherMatmul`` (backends/codegen/fused.py, rule ``gather-matmul`` in codegen/gathers.egg): a
product whose B is ``index_select(W, 0, idx)`` reads the picked rows of W in place -- a
mixture-of-experts step's chosen experts, never copied.  The encoder's ``row_gather`` fact, the
rule's offer, and the kernels (c on native, cuda compiled by NVRTC here and run on a GPU) against
the reference: experts read as whole rows, B columns that cross picked rows (the element path),
and an index outside W raising IndexOutOfRange."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends import get_backend
from lightspeed.backends.cuda.backend import CudaBackend
from lightspeed.egraph import Candidate
from lightspeed.egraph.encode import encode_graph, row_gather
from lightspeed.egraph.llir import decode_program
from lightspeed.errors import IndexOutOfRange
from lightspeed.nn import Builder
from lightspeed.nn.moe import Experts
from tests.backends.harness import nvrtc_or_skip, saturate

NATIVE = get_backend("native")
CUDA = get_backend("cuda")
# the warp-per-output kernel's renderings: the grouped tensor-core tiles (on by default,
# LIGHTSPEED_CUDA_GROUPED_MMA) not offered
RENDER = CudaBackend(cublaslt="off", grouped_mma=False)
GROUPED = CudaBackend(cublaslt="off", grouped_mma=True)
E, INTER, H, K = 6, 8, 32, 3


def _experts_graph(dtype=ls.float32) -> ls.Graph:
    """The decode form of a mixture-of-experts block (``Experts``' gather mode)."""
    b = Builder(dtype=dtype)
    g = b.graph
    ex = Experts("ex", H, INTER, E, "silu")
    y = ex.forward(b, g.input("x", ("s", H), dtype), g.input("w", ("s", K), dtype), g.input("idx", ("s", K), ls.int64),
                   "gather")
    g.output("y", y)
    return g


def _crossing_graph() -> ls.Graph:
    """A product whose B column runs across several picked rows: x [1, 6*4] @ G.reshape(24, 1),
    G = index_select(W [5, 4], 0, idx [6])."""
    g = ls.Graph()
    w, idx, x = g.input("W", (5, 4)), g.input("idx", (6,), ls.int64), g.input("x", (2, 24))
    g.output("y", x @ ls.index_select(w, 0, idx).reshape(24, 1))
    return g


def _with_gather_matmul(backend, g: ls.Graph):
    """An LLIR program of ``g`` whose gathered products (both of the experts' graph) are all
    GatherMatmul (random candidates)."""
    _, enc, index, ser = saturate(backend, g)
    want = sum(1 for i in g.reachable() if row_gather(g, i) is not None)
    for seed in range(300):
        lp = decode_program(Candidate.random(index, random.Random(seed)), ser, enc.constants, backend.declarations())
        products = [o.op for o in lp.ops if "Matmul" in o.op]
        if len(products) == want and all(p == "GatherMatmul" for p in products):
            return lp
    raise AssertionError("the gather-matmul rule offered no candidate with only GatherMatmul products")


def _moe_inputs(n: int, dtype=np.float32) -> dict:
    rng = np.random.default_rng(5)
    idx = np.array([[4, 0, 2], [1, 5, 3], [2, 4, 0], [5, 1, 2], [0, 3, 4]], np.int64)[:n]
    return {"x": rng.standard_normal((n, H)).astype(dtype), "w": rng.uniform(0.1, 1, (n, K)).astype(dtype),
            "idx": idx, "ex.gate_up_proj": (rng.standard_normal((E, 2 * INTER, H)) * 0.3).astype(dtype),
            "ex.down_proj": (rng.standard_normal((E, H, INTER)) * 0.3).astype(dtype)}


def test_the_encoder_states_row_gather_for_index_select_only():
    g = _experts_graph()
    gathers = [i for i in g.reachable() if g.nodes[i].op.name == "Gather"]
    facts = [row_gather(g, i) for i in gathers]
    assert len(gathers) == 2 and all(f is not None for f in facts)
    assert sorted(int(f[1].value) for f in facts) == [H * INTER, 2 * INTER * H]  # rows of down, of gate_up
    assert encode_graph(g).program.count("(row_gather ") == 2
    # torch.gather's form (an index per element) is no row gather
    g2 = ls.Graph()
    g2.output("y", ls.gather(g2.input("x", (4, 5)), 1, g2.input("i", (4, 2), ls.int64)))
    assert all(row_gather(g2, i) is None for i in g2.reachable())


def test_the_rule_offers_gather_matmul_on_kernel_backends_only():
    for backend in (NATIVE, RENDER):
        assert _with_gather_matmul(backend, _experts_graph())
    _, enc, index, ser = saturate(get_backend("cpu"), _experts_graph())
    for seed in range(20):
        lp = decode_program(Candidate.random(index, random.Random(seed)), ser, enc.constants,
                            get_backend("cpu").declarations())
        assert "GatherMatmul" not in {o.op for o in lp.ops}


@pytest.mark.parametrize("backend", [NATIVE, CUDA], ids=["native", "cuda"])
def test_gather_matmul_matches_the_reference(backend):
    if not backend.available():
        pytest.skip(f"{backend.name} is not available here")
    g = _experts_graph()
    prog = backend.lower(g, _with_gather_matmul(backend, g))
    ref = g.compile(backend="reference")
    for n in (1, 5):
        ins = _moe_inputs(n)
        np.testing.assert_allclose(np.asarray(prog(ins)["y"]), ref(ins)["y"], rtol=1e-5, atol=1e-5)
    # B's column across picked rows: the element path
    g = _crossing_graph()
    prog = backend.lower(g, _with_gather_matmul(backend, g))
    rng = np.random.default_rng(2)
    ins = {"W": rng.standard_normal((5, 4)).astype(np.float32), "idx": np.array([4, 0, 0, 3, 1, 2]),
           "x": rng.standard_normal((2, 24)).astype(np.float32)}
    np.testing.assert_allclose(np.asarray(prog(ins)["y"]), g.compile(backend="reference")(ins)["y"], rtol=1e-5,
                               atol=1e-5)
    # an expert index outside the weights raises, on either path, and the program stays usable
    with pytest.raises(IndexOutOfRange, match="out of range"):
        prog({**ins, "idx": np.array([4, 0, 5, 3, 1, 2])})
    g = _experts_graph()
    moe = backend.lower(g, _with_gather_matmul(backend, g))
    bad = _moe_inputs(2)
    bad["idx"] = np.array([[4, 0, 6], [1, 5, 3]])
    with pytest.raises(IndexOutOfRange, match="out of range"):
        moe(bad)
    np.testing.assert_allclose(np.asarray(moe(_moe_inputs(2))["y"]), ref(_moe_inputs(2))["y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [ls.float32, ls.bfloat16])
def test_cuda_gather_matmul_compiles_for_sm90(dtype):
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import module_source, render

    lp = _with_gather_matmul(RENDER, _experts_graph(dtype))
    ops = [o for o in lp.ops if o.op == "GatherMatmul"]
    specs = [s for o in ops for s in render(o, [lp.ops[i].dtype for i in o.inputs], "cuda")]
    assert len(specs) == 2 and all("ls_oob(T)" in s.source for s in specs)
    assert all(("ls_dot8_bf16(" in s.source) == (dtype == ls.bfloat16) for s in specs)
    assert nvrtc.compile_cubin(module_source(specs, "cuda"), "sm_90")



def _prompt_inputs(n: int) -> dict:
    """``n`` tokens, each picking expert 0 and two others: expert 0 has n picks (more than a
    pass of GROUP_PICKS collects at n = 70)."""
    rng = np.random.default_rng(n)
    idx = np.array([[0, *rng.choice(np.arange(1, E), K - 1, replace=False)] for _ in range(n)], np.int64)
    return {**_moe_inputs(1), "x": rng.standard_normal((n, H)).astype(np.float32),
            "w": rng.uniform(0.1, 1, (n, K)).astype(np.float32), "idx": idx}


def test_native_groups_the_picks_by_expert_bit_for_bit(monkeypatch):
    """On native a GatherMatmul over whole picked rows runs grouped by the row it reads
    (kernels/matmul.py: an item per expert and chunk of its rows, each expert's rows read once
    for every token that picked it); every output is the same dot product as the one-output-an-
    item kernel's (LIGHTSPEED_NATIVE_GROUPED=0), so the two agree bit for bit and both match the
    reference within float32's tolerance; an expert index outside the weights raises and leaves
    the program usable."""
    from lightspeed.backends.codegen.kernels import matmul as matmul_module
    from lightspeed.backends.codegen.kernels import render
    from lightspeed.backends.codegen.kernels.matmul import GROUP_PICKS, grouped_layout

    if not NATIVE.available():
        pytest.skip("native is not available here")
    g = _experts_graph()
    lp = _with_gather_matmul(NATIVE, g)
    # the experts' products: gate/up picks rows of 2I per expert, K a token; down rows of H, 1 a pick
    products = [o for o in lp.ops if o.op == "GatherMatmul"]
    assert sorted(grouped_layout(o) for o in products) == [(2 * INTER, K), (H, 1)]
    specs = [s for o in products for s in render(o, [lp.ops[i].dtype for i in o.inputs], "c")]
    assert len(specs) == 2 and all("gather_matmul_grouped" in s.name for s in specs)
    grouped = NATIVE.lower(g, lp)
    monkeypatch.setattr(matmul_module, "GROUPED", False)
    plain = NATIVE.lower(g, lp)
    assert not any("grouped" in x.spec.name for x in plain.launches)
    assert sum("grouped" in x.spec.name for x in grouped.launches) == 2
    ref = g.compile(backend="reference")
    for n in (1, 5, GROUP_PICKS + 6):
        ins = _moe_inputs(n) if n <= 5 else _prompt_inputs(n)
        got = np.asarray(grouped(ins)["y"])
        np.testing.assert_allclose(got, ref(ins)["y"], rtol=1e-5, atol=1e-5, err_msg=f"{n} tokens")
        assert np.array_equal(got, np.asarray(plain(ins)["y"])), f"{n} tokens"
    bad = _moe_inputs(2)
    bad["idx"] = np.array([[4, 0, 6], [1, -1, 3]])
    with pytest.raises(IndexOutOfRange, match="out of range"):
        grouped(bad)
    np.testing.assert_allclose(np.asarray(grouped(_moe_inputs(2))["y"]), ref(_moe_inputs(2))["y"], rtol=1e-5,
                               atol=1e-5)


def test_grouped_tiles_with_rows_of_odd_lengths_equal_one_output_an_item(monkeypatch):
    """Rows of 20 and 12 (16 + 4 and 8 + 4: each sum's last elements one at a time) and 9 tokens
    of 4 picks among 5 experts (4-pick tiles and leftovers): the tiled grouped kernel's outputs
    are the one-output-an-item kernel's bit for bit."""
    from lightspeed.backends.codegen.kernels import matmul as matmul_module

    if not NATIVE.available():
        pytest.skip("native is not available here")
    hidden, inter, n_exp, top, n = 20, 12, 5, 4, 9
    b = Builder(dtype=ls.float32)
    g = b.graph
    ex = Experts("ex", hidden, inter, n_exp, "silu")
    g.output("y", ex.forward(b, g.input("x", ("s", hidden)), g.input("w", ("s", top)),
                             g.input("idx", ("s", top), ls.int64), "gather"))
    lp = _with_gather_matmul(NATIVE, g)
    grouped = NATIVE.lower(g, lp)
    monkeypatch.setattr(matmul_module, "GROUPED", False)
    plain = NATIVE.lower(g, lp)
    rng = np.random.default_rng(9)
    ins = {"x": rng.standard_normal((n, hidden)).astype(np.float32),
           "w": rng.uniform(0.1, 1, (n, top)).astype(np.float32),
           "idx": np.stack([rng.choice(n_exp, top, replace=False) for _ in range(n)]).astype(np.int64),
           "ex.gate_up_proj": rng.standard_normal((n_exp, 2 * inter, hidden)).astype(np.float32),
           "ex.down_proj": rng.standard_normal((n_exp, hidden, inter)).astype(np.float32)}
    got = np.asarray(grouped(ins)["y"])
    assert np.array_equal(got, np.asarray(plain(ins)["y"]))
    np.testing.assert_allclose(got, g.compile(backend="reference")(ins)["y"], rtol=1e-5, atol=1e-4)


def test_products_across_picked_rows_have_no_grouped_layout():
    from lightspeed.backends.codegen.kernels.matmul import grouped_layout

    lp = _with_gather_matmul(NATIVE, _crossing_graph())
    assert [grouped_layout(o) for o in lp.ops if o.op == "GatherMatmul"] == [None]


# ------------------------------------------------------------------ grouped on the tensor cores (cuda)
def _gather_tiles(g: ls.Graph, backend=GROUPED, want: str = "GatherMatmulMma"):
    """A program of ``g`` whose gathered products are all ``want`` (random candidates)."""
    _, enc, index, ser = saturate(backend, g)
    n = sum(1 for i in g.reachable() if row_gather(g, i) is not None)
    for seed in range(600):
        lp = decode_program(Candidate.random(index, random.Random(seed)), ser, enc.constants, backend.declarations())
        products = [o.op for o in lp.ops if "Matmul" in o.op]
        if len(products) == n and all(p == want for p in products):
            return lp
    raise AssertionError(f"no candidate with only {want} products")


def _bf16_moe_inputs(n: int, hidden: int, inter: int, n_exp: int, top: int, seed: int) -> dict:
    """``n`` tokens; every token picks expert 0 (so it has n picks: several tiles of 64 and passes
    of 128 at n >= 200), the rest at random."""
    rng = np.random.default_rng(seed)
    idx = np.array([[0, *rng.choice(np.arange(1, n_exp), top - 1, replace=False)] for _ in range(n)], np.int64)
    bf = ls.bfloat16.np
    return {"x": rng.standard_normal((n, hidden)).astype(bf), "w": rng.uniform(0.1, 1, (n, top)).astype(bf),
            "idx": idx, "ex.gate_up_proj": (rng.standard_normal((n_exp, 2 * inter, hidden)) * 0.2).astype(bf),
            "ex.down_proj": (rng.standard_normal((n_exp, hidden, inter)) * 0.2).astype(bf)}


def _bf16_experts(hidden: int, inter: int, n_exp: int, top: int) -> ls.Graph:
    b = Builder(dtype=ls.bfloat16)
    g = b.graph
    ex = Experts("ex", hidden, inter, n_exp, "silu")
    g.output("y", ex.forward(b, g.input("x", ("s", hidden), ls.bfloat16), g.input("w", ("s", top), ls.bfloat16),
                             g.input("idx", ("s", top), ls.int64), "gather"))
    return g


def test_grouped_tensor_core_tiles_are_offered_for_16_bit_experts_and_compile_for_sm90():
    """bfloat16 experts: with the switch the rule offers GatherMatmulMma for both products (gate/up:
    R = 2I rows a pick, 3 picks a token; down: R = H, 1 a pick), whose kernel collects each
    expert's picks and runs them as tiles; float32 experts get no such offer, nor anything
    without the switch."""
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import module_source, render

    lp = _gather_tiles(_bf16_experts(H, INTER, E, K))
    ops = [o for o in lp.ops if o.op == "GatherMatmulMma"]
    specs = [s for o in ops for s in render(o, [lp.ops[i].dtype for i in o.inputs], "cuda")]
    assert len(specs) == 2
    for s in specs:
        assert "gather_matmul_mma" in s.name and s.launch.kind == "matmul_mma"
        assert "__ballot_sync" in s.source and "_ls_arow[" in s.source and "ls_oob(T)" in s.source
        assert "ls_cp_async16" in s.source  # rows of 32 and 8: whole 8s, the pipelined loop
    assert nvrtc.compile_cubin(module_source(specs, "cuda"), "sm_90")
    _, enc, index, ser = saturate(GROUPED, _experts_graph())
    for seed in range(40):
        f32 = decode_program(Candidate.random(index, random.Random(seed)), ser, enc.constants, GROUPED.declarations())
        assert "GatherMatmulMma" not in {o.op for o in f32.ops}
    # on by default (unless LIGHTSPEED_CUDA_GROUPED_MMA=0); switched off, not offered
    assert CudaBackend(cublaslt="off").grouped_mma == (os.environ.get("LIGHTSPEED_CUDA_GROUPED_MMA", "1") != "0")
    assert not RENDER.grouped_mma and "mma_grouped" not in RENDER.rulesets
    # and a prompt is built gathered exactly where the grouped form is offered (models/generate.py)
    assert GROUPED.groups_gathered_rows and not RENDER.groups_gathered_rows and NATIVE.groups_gathered_rows
    assert not get_backend("cpu").groups_gathered_rows
    _, enc, index, ser = saturate(RENDER, _bf16_experts(H, INTER, E, K))
    for seed in range(40):
        lp = decode_program(Candidate.random(index, random.Random(seed)), ser, enc.constants, RENDER.declarations())
        assert "GatherMatmulMma" not in {o.op for o in lp.ops}


@pytest.mark.skipif(not CUDA.available(), reason="no GPU")
@pytest.mark.parametrize("hidden,inter,n_exp,top", [(H, INTER, E, K), (72, 40, 9, 4)])
def test_grouped_tensor_core_tiles_match_the_reference(hidden, inter, n_exp, top):
    """bfloat16 experts on the grouped tiles against the reference at 1, 17, 70 and 255 tokens
    (expert 0 picked by every token: 255 picks, four tiles over two passes), rows of 72 and 40
    (partial 64-column tiles, the element loads where a row is not whole 8s); an expert index
    outside the weights raises and leaves the program usable."""
    g = _bf16_experts(hidden, inter, n_exp, top)
    backend = CudaBackend(grouped_mma=True)
    prog = backend.lower(g, _gather_tiles(g, backend))
    ref = g.compile(backend="reference")
    for n in (1, 17, 70, 255):
        ins = _bf16_moe_inputs(n, hidden, inter, n_exp, top, n)
        want = np.asarray(ref(ins)["y"], np.float32)
        got = np.asarray(prog(ins)["y"], np.float32)
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * np.abs(want).max(), err_msg=f"{n} tokens")
    bad = _bf16_moe_inputs(3, hidden, inter, n_exp, top, 1)
    bad["idx"][1, 2] = n_exp
    with pytest.raises(IndexOutOfRange, match="out of range"):
        prog(bad)
    ins = _bf16_moe_inputs(5, hidden, inter, n_exp, top, 3)
    np.testing.assert_allclose(np.asarray(prog(ins)["y"], np.float32), np.asarray(ref(ins)["y"], np.float32),
                               rtol=2e-2, atol=2e-2 * np.abs(np.asarray(ref(ins)["y"], np.float32)).max())
