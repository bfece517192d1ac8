"""Grouped weight products on cuda (``LIGHTSPEED_CUDA_ROW_GROUP``: a warp takes several rows of
A for one column of B, its weight row read once for all of them): rendered and compiled by NVRTC
for sm_90 here; on a GPU, a decode graph's outputs at several row counts equal the one-row
kernels' bit for bit (each output's sums are the same, so batch invariance holds) and the
reference's within bfloat16's tolerance."""

from __future__ import annotations

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends import get_backend
from lightspeed.backends.codegen.kernels import matmul, module_source, norm
from lightspeed.backends.codegen.program import KernelProgram
from lightspeed.backends.cuda.backend import CudaBackend
from lightspeed.egraph.llir import decode_program
from lightspeed.models import from_hf_config
from lightspeed.search import candidates
from tests.backends.harness import nvrtc_or_skip, saturate
from tests.backends.test_conformance import TINY

CUDA = get_backend("cuda")
# rendered without a GPU's libraries: the generic kernels only (on a GPU host cuBLASLt's ops would
# need its plans, which a recording executor does not make)
RENDER = CudaBackend(cublaslt="off")


@pytest.fixture
def row_group(monkeypatch):
    """Render with ``n`` rows per warp (the kernel families read the setting when they render)."""
    def set_to(n: int) -> None:
        monkeypatch.setattr(matmul, "ROW_GROUP", n)
        monkeypatch.setattr(norm, "ROW_GROUP", n)
    return set_to


@pytest.mark.parametrize("group", [4, 8])
def test_grouped_products_render_and_compile_for_sm90(row_group, group):
    nvrtc = nvrtc_or_skip()
    from tests.backends.test_cuda_codegen import _Recorder

    row_group(group)
    g = from_hf_config(TINY, dtype="bfloat16").decode_graph()
    _, enc, index, ser = saturate(RENDER, g)
    rec = _Recorder()
    for _, cand in candidates(index, ls.SearchOptions(budget=3, seed=0)):
        KernelProgram(g, decode_program(cand, ser, enc.constants, RENDER.declarations()), rec, table=RENDER.op_table)
    products = [s for s in rec.specs.values() if s.name.startswith(("ls_normmatmul", "ls_matmul"))]
    grouped = [s for s in products if "_ls_g0" in s.source]
    # the norm products and the weight products without batch dims take the groups
    assert {s.name.split("_")[1] for s in grouped} >= {"normmatmul", "normmatmulglu", "normmatmulscatter", "matmul"}
    assert all(f"_ls_t < {group}" in s.source for s in grouped)
    # a block of 8 warps per 8 columns of each group of rows (static m: the head's last row)
    assert all(f"(s + {group - 1}) // {group}" in str(s.launch.grid[0]) or "s" not in str(s.launch.grid[0])
               for s in grouped)
    images = nvrtc.compile_many([module_source([s], "cuda") for s in grouped], "sm_90")
    assert all(len(img) > 1000 for img in images)


@pytest.mark.skipif(not CUDA.available(), reason="no CUDA GPU here")
def test_grouped_rows_give_the_one_row_results_bit_for_bit(row_group):
    model = from_hf_config({**TINY, "hidden_size": 64, "intermediate_size": 128}, dtype="bfloat16")
    g = model.build_graph("prefill", all_logits=True)
    rng = np.random.default_rng(0)
    weights = {n: (rng.standard_normal(s) * 0.1 + (1.0 if "norm" in n else 0.0)).astype(np.float32)
               for n, s in model.param_shapes().items()}
    checked = model.check_weights(weights)
    results = {}
    for group in (1, 4, 8):
        row_group(group)
        prog = g.compile(backend="cuda", search=ls.SearchOptions(budget=3, seed=0, dims={"s": 16}, roll=False))
        ref = g.compile(backend="reference") if group == 1 else None
        for rows in (1, 3, 8, 13):
            ids = rng.integers(3, TINY["vocab_size"], rows) if group == 1 else results[(1, rows)][0]
            inputs = {**checked, "input_ids": np.asarray(ids, np.int64)}
            if "positions" in prog.input_args:
                inputs["positions"] = np.arange(rows, dtype=np.int64)
            out = np.asarray(prog(inputs)["logits"], np.float32)
            results[(group, rows)] = (ids, out)
            if ref is not None:
                want = np.asarray(ref(inputs)["logits"], np.float32)
                np.testing.assert_allclose(out, want, rtol=2e-2, atol=2e-2 * np.abs(want).max())
    for group in (4, 8):
        for rows in (1, 3, 8, 13):
            assert np.array_equal(results[(group, rows)][1], results[(1, rows)][1]), (group, rows)
