"""A block of warps per output for few long weight products (kind ``matmul_split``: the decode's
q, k, v, o and down products of a 1B-sized layer) and a thread-block cluster per long reduction
(kind ``row_cluster``: the argmax over a vocabulary): rendered and compiled by NVRTC for sm_90
here; on a GPU, a decode-sized layer's logits against the reference backend and, row for row, at
1 and 3 rows bit for bit (the split is chosen by the product's shape, never by its row count)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends import get_backend
from lightspeed.backends.codegen.kernels import module_source, region, writer
from lightspeed.backends.codegen.program import KernelProgram
from lightspeed.backends.cuda.backend import CudaBackend
from lightspeed.egraph.llir import decode_program
from lightspeed.models import from_hf_config
from lightspeed.search import candidates
from tests.backends.harness import nvrtc_or_skip, saturate
from tests.backends.test_conformance import TINY

CUDA = get_backend("cuda")
GENERATED = CudaBackend(cublaslt="off", mma=False)
RENDER = CudaBackend(cublaslt="off")  # the generic kernels only (see test_cuda_rows.py)
# every product of this layer is under 8192 outputs over rows of >= 4 KiB (k >= 2048 bf16): all split
WIDE = {**TINY, "hidden_size": 2048, "intermediate_size": 4096, "num_attention_heads": 16,
        "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 1}


def _rendered(g: ls.Graph) -> list:
    from tests.backends.test_cuda_codegen import _Recorder

    _, enc, index, ser = saturate(RENDER, g)
    rec = _Recorder()
    for _, cand in candidates(index, ls.SearchOptions(budget=3, seed=0)):
        KernelProgram(g, decode_program(cand, ser, enc.constants, RENDER.declarations()), rec, table=RENDER.op_table)
    return list(rec.specs.values())


def test_few_long_products_render_a_block_per_output_and_compile_for_sm90(monkeypatch):
    nvrtc = nvrtc_or_skip()
    g = from_hf_config(WIDE, dtype="bfloat16").decode_graph()
    specs = _rendered(g)
    split = [s for s in specs if s.launch.kind == "matmul_split"]
    assert {s.name.split("_")[1] for s in split} >= {"matmul", "normmatmul", "normmatmulglu"}
    warps = set()
    for s in split:
        # 4 warps for rows of 4 KiB (k = 2048 bf16), 2 for the down product's 8 KiB (k = 4096)
        warps.add(s.launch.block[1])
        assert s.launch.block[0] == 32 and s.launch.block[2] == 1
        assert re.search(rf"__shared__ float _ls_bsum\[\d+\]\[{s.launch.block[1]}\];", s.source)  # a partial a warp
        assert "lane == 0 && slice == 0" in s.source
        assert "(slice * 32 + lane) * 8" in s.source  # the block's threads along k, 16-byte loads
    images = nvrtc.compile_many([module_source([s], "cuda") for s in split], "sm_90")
    assert all(len(img) > 1000 for img in images)
    assert warps == {4}  # this layer's split products read rows of 4 KiB
    # the warps by the row's length: 4 under 8 KiB, 2 from 8 KiB, none under 4 KiB or from 8192 outputs
    c = ls.symbolic.const
    assert [writer.split_products("cuda", c(2048), c(k), 2) for k in (1024, 2048, 4096, 14336)] == [0, 4, 2, 2]
    assert writer.split_products("cuda", c(8192), c(2048), 2) == 0
    assert writer.split_products("c", c(2048), c(2048), 2) == 0
    # the switch off: a warp per output again
    monkeypatch.setattr(writer, "SPLIT_BELOW", 0)
    assert not [s for s in _rendered(g) if s.launch.kind == "matmul_split"]
    # rows of 2 KiB (k = 1024 bf16) keep a warp per output: half of a block's lanes would idle
    monkeypatch.setattr(writer, "SPLIT_BELOW", 8192)
    narrow = from_hf_config({**WIDE, "hidden_size": 1024, "intermediate_size": 1024}, dtype="bfloat16")
    assert not [s for s in _rendered(narrow.decode_graph()) if s.launch.kind == "matmul_split"]


def test_long_reductions_of_few_rows_render_a_cluster_per_row_and_compile(monkeypatch):
    nvrtc = nvrtc_or_skip()
    g = ls.Graph()
    x = g.input("x", (2, 40_000), dtype=ls.bfloat16)
    g.output("i", x.argmax(-1))
    g.output("s", x.to(ls.float32).sum(-1))
    specs = _rendered(g)
    rows = [s for s in specs if s.launch.kind == "row_cluster"]
    assert rows and all(s.launch.cluster == (8, 1, 1) and "ls_cluster_ld" in s.source for s in rows)
    # the float max, the int64 index minimum and the float sum each merged across the cluster
    assert {"float", "long long"} <= {t for s in rows for t in ("float", "long long")
                                      if f"__shared__ {t} _ls_cpart" in s.source}
    images = nvrtc.compile_many([module_source([s], "cuda") for s in rows], "sm_90")
    assert all(len(img) > 1000 for img in images)
    monkeypatch.setattr(region, "CLUSTER_ROWS", False)
    assert not [s for s in _rendered(g) if s.launch.kind == "row_cluster"]
    g2 = ls.Graph()
    g2.output("i", g2.input("x", (2, 8_000), dtype=ls.float32).argmax(-1))  # short rows: a block per row
    monkeypatch.setattr(region, "CLUSTER_ROWS", True)
    assert not [s for s in _rendered(g2) if s.launch.kind == "row_cluster"]


def test_long_reductions_of_a_run_time_row_count_take_a_cluster_per_row():
    # a paged batch's argmax over its logit rows ("r" rows, known at run time): a warp per row
    # walked 128k logits alone (1 ms of a 1B step); a cluster per row now, whatever the count
    g = ls.Graph()
    g.output("i", g.input("x", ("r", 40_000), dtype=ls.bfloat16).argmax(-1))
    rows = [s for s in _rendered(g) if s.launch.kind == "row_cluster"]
    assert rows and all(s.launch.cluster == (8, 1, 1) and "r" in str(s.launch.grid[0]) for s in rows)
    short = ls.Graph()  # rows of a few thousand over a run-time count: a warp each, as before
    short.output("i", short.input("x", ("r", 8_000), dtype=ls.float32).argmax(-1))
    kinds = {p.launch.kind for s in _rendered(short) for p in s.parts or (s,)}
    assert "warp" in kinds and not kinds & {"row", "row_cluster"}


@pytest.mark.skipif(not CUDA.available(), reason="no CUDA GPU here")
def test_a_run_time_row_count_of_long_argmaxes_matches_numpy_and_stays_batch_invariant():
    g = ls.Graph()
    x = g.input("x", ("r", 40_000), dtype=ls.float32)
    g.output("i", x.argmax(-1))
    g.output("s", x.sum(-1))
    prog = g.compile(backend="cuda", search=ls.SearchOptions(budget=2, seed=0, dims={"r": 4}))
    rng = np.random.default_rng(1)
    data = rng.standard_normal((20, 40_000)).astype(np.float32)
    data[3, 12_345] = 50.0  # a clear maximum late in a row
    first = None
    for rows in (1, 3, 20):
        out = prog({"x": data[:rows]})
        np.testing.assert_array_equal(np.asarray(out["i"]), data[:rows].argmax(-1))
        np.testing.assert_allclose(np.asarray(out["s"]), data[:rows].astype(np.float64).sum(-1), rtol=1e-4, atol=1e-2)
        first = np.asarray(out["s"])[0] if first is None else first
        assert np.asarray(out["s"])[0] == first  # row 0's sum in the same order at every count


@pytest.mark.skipif(not CUDA.available(), reason="no CUDA GPU here")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_split_products_match_the_reference_and_stay_batch_invariant(dtype, monkeypatch):
    model = from_hf_config(WIDE, dtype=dtype)
    g = model.build_graph("prefill", all_logits=True)
    rng = np.random.default_rng(0)
    weights = {n: (rng.standard_normal(s) * 0.05 + (1.0 if "norm" in n else 0.0)).astype(np.float32)
               for n, s in model.param_shapes().items()}
    checked = model.check_weights(weights)
    ref = g.compile(backend="reference")
    ids = rng.integers(3, TINY["vocab_size"], 3)
    results = {}
    for below in (writer.SPLIT_BELOW, 0):  # split, then a warp per output
        monkeypatch.setattr(writer, "SPLIT_BELOW", below)
        # few rows: the decode's generated kernels, not the tensor-core tiles nor cuBLASLt (which
        # the search may pick for every product, leaving no split kernel to check)
        prog = g.compile(backend=GENERATED, search=ls.SearchOptions(budget=3, seed=0, dims={"s": 4}, roll=False))
        launches = getattr(prog, "launches", None)  # None: a program of parts (dim buckets)
        kinds = None if launches is None else {s.launch.kind for launch in launches
                                                for s in launch.spec.parts or (launch.spec,)}
        for rows in (1, 3):
            inputs = {**checked, "input_ids": np.asarray(ids[:rows], np.int64)}
            if "positions" in prog.input_args:
                inputs["positions"] = np.arange(rows, dtype=np.int64)
            out = np.asarray(prog(inputs)["logits"], np.float32)
            want = np.asarray(ref(inputs)["logits"], np.float32)
            tol = 1e-4 if dtype == "float32" else 2e-2
            np.testing.assert_allclose(out, want, rtol=tol, atol=tol * np.abs(want).max())
            results[(below, rows)] = out
        if kinds is not None and below and dtype == "float32":
            assert "matmul_split" in kinds
    # the first row's logits do not depend on how many rows ran beside it
    for below in (writer.SPLIT_BELOW, 0):
        assert np.array_equal(results[(below, 3)][:1], results[(below, 1)][:1])
