"""What the ``cuda`` backend must show on a GPU, beyond the conformance suite (which runs every
registered backend): the whole op table in every dtype it lists, symbolic dims through one
captured graph, torch CUDA tensors in and out without copies, device arrays staying on the
device.  Skipped where no GPU is present (CI); ``scripts/gpu_check.sh`` runs it on the H200."""

from __future__ import annotations

import os

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends import get_backend
from tests.backends.harness import op_matches_torch, random_inputs, unaligned_torch_views
from tests.hl.optable import all_cases, expand

CUDA = get_backend("cuda")
pytestmark = pytest.mark.skipif(not CUDA.available(), reason="no CUDA GPU here")

# every case x dtype x layout the op table lists, with its first sample (all samples with
# LIGHTSPEED_GPU_ALL_SAMPLES=1)
ROWS = [r for r in expand(all_cases()) if os.environ.get("LIGHTSPEED_GPU_ALL_SAMPLES") == "1"
        or r[2] is r[1].samples[0]]


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_op_table_every_dtype_and_layout_matches_torch(row):
    _, case, sample, dtype, layout = row
    if case.xfail:
        pytest.skip(case.xfail)
    op_matches_torch(CUDA, case, sample, dtype, layout, ls.SearchOptions(budget=3, seed=0, progress=False))


def test_dims_change_replays_the_captured_graph():
    """One program, persisted weights, dims reserved up to 64: every length from 1 to 64 runs
    through the one captured graph (no plan, no capture after the first call)."""
    g = ls.Graph()
    x, w = g.input("x", ("s", 32)), g.input("w", (32, 16))
    g.output("y", ls.rms_norm((x @ w).softmax(-1), (16,), None, eps=1e-6))
    prog = g.compile(CUDA, search=ls.SearchOptions(budget=2, seed=0, progress=False)).persist(
        w=random_inputs(g, {"s": 1})["w"]).reserve(s=64)
    ref = g.compile(backend="reference")
    w = random_inputs(g, {"s": 1})["w"]
    first = None
    for s in (5, 1, 64, 17, 33, 2, 64, 9):
        xs = random_inputs(g, {"s": s}, seed=s)["x"]
        np.testing.assert_allclose(prog(x=xs)["y"], ref(x=xs, w=w)["y"], rtol=1e-5, atol=1e-5)
        if first is None:
            first = CUDA.executor.captures
    assert CUDA.executor.captures == first, "a change of dims captured the graph again"
    assert prog.preparations == 1


def test_torch_cuda_tensors_in_place_and_out():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    g = ls.Graph()
    c, r = g.input("c", (6, 4)), g.input("r", (2, 4))
    g.output("c", ls.slice_scatter(c, r, 0, "p"), aliases="c")
    g.output("y", (r * 2.0).sum(0))
    prog = g.compile(CUDA, search=ls.SearchOptions(budget=2, seed=0, progress=False, dims={"p": 1}))
    cache = torch.arange(24, dtype=torch.float32, device="cuda").reshape(6, 4)
    rows = -torch.ones(2, 4, device="cuda")
    ptr = cache.data_ptr()
    out = prog(c=cache, r=rows, dims={"p": 3})
    assert out["c"] is cache and cache.data_ptr() == ptr  # written where it lies
    assert out["y"].is_cuda and torch.equal(out["y"].cpu(), torch.full((4,), -4.0))
    want = torch.arange(24, dtype=torch.float32).reshape(6, 4)
    want[3:5] = -1
    assert torch.equal(cache.cpu(), want)


def test_a_scalar_input_keeps_rank_zero_on_the_device():
    """Regression: DeviceArray.from_host made a 0-d array shape (1,) (np.ascontiguousarray), so a
    scalar input failed its rank check in every search candidate (Gemma 3 through torch.compile)."""
    from lightspeed.backends.cuda import DeviceArray

    assert DeviceArray.from_host(np.float32(2.5)).shape == ()
    g = ls.Graph()
    x, c = g.input("x", (4,)), g.input("c", ())
    g.output("y", x * c)
    prog = g.compile(CUDA, search=ls.SearchOptions(budget=2, seed=0, progress=False))
    got = prog(x=np.arange(4, dtype=np.float32), c=np.array(2.5, np.float32))["y"]
    np.testing.assert_allclose(got, np.arange(4) * 2.5)


def test_zeros_and_rows_views_are_written_in_place_on_the_device():
    """``Program.zeros`` clears a device array on the stream; ``Program.rows`` is a view of some of
    its rows that a call's ``out=`` writes (the generator's prefill into a KV cache): the other
    rows stay zero, nothing goes through the host."""
    from lightspeed.backends.cuda import DeviceArray

    g = ls.Graph()
    x = g.input("x", ("s", 8))
    g.output("y", x * 2.0)
    g.output("z", x.sum(-1))
    prog = g.compile(CUDA, search=ls.SearchOptions(budget=2, seed=0, progress=False))
    cache = prog.zeros((7, 8), np.float32)
    assert isinstance(cache, DeviceArray) and cache.shape == (7, 8)
    xs = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    view = prog.rows(cache, 2, 3)
    assert isinstance(view, DeviceArray) and view.shape == (3, 8) and view.ptr == cache.ptr + 2 * 8 * 4
    got = prog(x=xs, out={"y": view}, fetch=["z"])
    np.testing.assert_allclose(got["z"], xs.sum(-1), rtol=1e-5)
    want = np.zeros((7, 8), np.float32)
    want[2:5] = xs * 2
    np.testing.assert_array_equal(cache.numpy(), want)
    with pytest.raises(ls.InputError, match="outside"):
        prog.rows(cache, 5, 3)


def test_device_arrays_stay_on_the_device():
    from lightspeed.backends.cuda import DeviceArray

    g = ls.Graph()
    x = g.input("x", ("s", 8))
    g.output("y", (x * 3.0).exp())
    prog = g.compile(CUDA, search=ls.SearchOptions(budget=2, seed=0, progress=False))
    xs = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    got = prog(x=DeviceArray.from_host(xs))["y"]
    assert isinstance(got, DeviceArray)
    np.testing.assert_allclose(got.numpy(), np.exp(xs * 3), rtol=1e-6)


def test_trace_times_every_kernel_with_cuda_events(tmp_path):
    import json

    from lightspeed.backends import trace

    trace._enable_for_tests(str(tmp_path / "t.json"))
    try:
        g = ls.Graph()
        x, w = g.input("x", ("s", 64)), g.input("w", (64, 32))
        g.output("y", (x @ w).softmax(-1))
        prog = g.compile(CUDA, search=ls.SearchOptions(budget=2, seed=0, progress=False))
        xs = random_inputs(g, {"s": 9})
        prog(xs)
        evs = json.loads(open(trace.flush()).read())["traceEvents"]
    finally:
        trace._enable_for_tests(None)
    run = [e for e in evs if e["cat"] == "run"][-1]  # the call (the search's timing runs come before)
    kernels = [e for e in evs if e["cat"] == "run.kernel" and run["ts"] <= e["ts"] <= run["ts"] + run["dur"]]
    assert len(kernels) == len(prog.launches) and all(e["dur"] > 0 for e in kernels)
    assert any(e["cat"] == "compile.candidate" for e in evs)


@pytest.mark.parametrize("cluster", [True, False])
@pytest.mark.parametrize("dtype", [ls.float32, ls.bfloat16])
def test_long_row_reductions_match_numpy(dtype, cluster, monkeypatch):
    """argmax, max and sum over rows longer than a block's threads many times (a cluster of
    blocks per row, kind ``row_cluster``, or a block per row, kind ``row``), ties broken to the
    first index as in PyTorch."""
    from lightspeed.backends.codegen.kernels import region

    monkeypatch.setattr(region, "CLUSTER_ROWS", cluster)
    g = ls.Graph()
    x = g.input("x", (3, 150_001), dtype=dtype)
    g.output("i", x.argmax(-1))
    g.output("m", x.amax(-1))
    g.output("s", x.to(ls.float32).sum(-1))
    prog = g.compile(CUDA, search=ls.SearchOptions(budget=2, seed=0, progress=False))
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 150_001)).astype(dtype.np)
    a[1, 7] = a[1, 140_000] = a[1].max() + 1  # a tie: the first wins
    out = prog(x=a)
    f = a.astype(np.float64)
    np.testing.assert_array_equal(out["i"], f.argmax(-1))
    np.testing.assert_array_equal(np.asarray(out["m"]).astype(np.float64), f.max(-1))
    np.testing.assert_allclose(out["s"], f.sum(-1), rtol=1e-5, atol=1e-3)


def test_launch_queues_calls_and_feeds_one_into_the_next():
    """``launch`` returns before the call has run; an output passed on as the next call's input
    (never copied to the host) and the fetched outputs match a chain of plain calls."""
    g = ls.Graph()
    x, w = g.input("x", (1,), ls.int64), g.input("w", (64, 8))
    g.output("next", (ls.index_select(w, 0, x).sum(-1) * 1000.0).to(ls.int64).abs() % 64)
    prog = g.compile(CUDA, search=ls.SearchOptions(budget=2, seed=0, progress=False))
    wv = np.random.default_rng(5).standard_normal((64, 8)).astype(np.float32)
    want, t = [], np.array([3])
    for _ in range(6):
        t = prog(x=t, w=wv)["next"]
        want.append(int(t[0]))
    held = prog.persist(w=wv)
    calls = [held.launch({"x": np.array([3])}, fetch=["next"])]
    for _ in range(5):
        calls.append(held.launch({"x": calls[-1].value("next")}, fetch=["next"]))
    assert [int(c.result()["next"][0]) for c in calls] == want


def test_an_index_outside_the_data_raises_where_the_host_waits():
    """A gather past its data sets the run's error word: a plain call raises IndexOutOfRange when
    it copies its outputs back, a launched one when its result is read; the next call is clean."""
    from lightspeed.errors import IndexOutOfRange

    g = ls.Graph()
    ids, w = g.input("ids", ("s",), ls.int64), g.input("w", (10, 4))
    g.output("emb", ls.embedding(ids, w) * 2.0)
    prog = g.compile(CUDA, search=ls.SearchOptions(budget=2, seed=0, progress=False))
    W = np.arange(40, dtype=np.float32).reshape(10, 4)
    with pytest.raises(IndexOutOfRange):
        prog(ids=np.array([1, 12]), w=W)
    np.testing.assert_array_equal(prog(ids=np.array([9]), w=W)["emb"], W[[9]] * 2)
    bad = prog.launch({"ids": np.array([-3]), "w": W}, fetch=["emb"])
    with pytest.raises(IndexOutOfRange):
        bad.result()
    good = prog.launch({"ids": np.array([2]), "w": W}, fetch=["emb"])
    np.testing.assert_array_equal(good.result()["emb"], W[[2]] * 2)


@pytest.mark.parametrize("s", [1, 17, 255])
def test_element_wise_kernels_of_vector_items_match_the_reference(s, monkeypatch):
    """A prompt's SiLU·mul (and a broadcast weight beside it) as items of 8 bfloat16 elements
    (16-byte loads and stores, kernels/region.py) at odd row counts, equal to the reference's;
    and inputs 2 bytes off 16-byte alignment (a torch view) take the element-by-element branch."""
    from lightspeed import hl
    from lightspeed.backends.codegen.kernels import region

    monkeypatch.setattr(region, "VECTORS", True)  # (on unless LIGHTSPEED_CUDA_VECTOR=0)
    g = ls.Graph()
    gate, up = g.input("gate", ("s", 264), ls.bfloat16), g.input("up", ("s", 264), ls.bfloat16)
    w = g.input("w", (264,), ls.bfloat16)
    g.output("y", hl.silu(gate) * up + w)
    prog = g.compile(CUDA, search=ls.SearchOptions(budget=2, seed=0, progress=False))
    ins = random_inputs(g, {"s": s}, seed=s)
    want = np.asarray(g.compile(backend="reference")(ins)["y"], np.float32)
    np.testing.assert_allclose(np.asarray(prog(ins)["y"], np.float32), want, rtol=2e-2, atol=2e-2)
    odd = unaligned_torch_views(ins)
    if odd is None:
        return
    assert odd["gate"].data_ptr() % 16 == 2
    got = prog(odd)["y"].float().cpu().numpy()
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)


def _row_norm_program(n: int, dtype=ls.bfloat16):
    """The greedy candidate (RowNorm) of an RMSNorm over [s, n] ``dtype`` with a weight of it."""
    from lightspeed.egraph.llir import decode_program
    from lightspeed.search import SearchOptions, candidates
    from tests.backends.harness import saturate

    g = ls.Graph()
    x, w = g.input("x", ("s", n), dtype), g.input("w", (n,), dtype)
    g.output("y", ls.rms_norm(x, (n,), w, eps=1e-5))
    _, enc, index, ser = saturate(CUDA, g)
    lp = decode_program(dict(candidates(index, SearchOptions(budget=2, seed=0)))["greedy"], ser, enc.constants,
                        CUDA.declarations())
    assert [o.op for o in lp.ops].count("RowNorm") == 1
    return g, lp


@pytest.mark.parametrize("n", [2048, 4104])
@pytest.mark.parametrize("s", [1, 17, 255])
def test_row_norms_of_16_byte_chunks_match_the_reference_and_their_unaligned_branch(s, n):
    """RowNorm over bfloat16 rows held as 16-byte chunks in registers (one load of x, one 16-byte
    store; kernels/norm.py), at odd row counts and a width whose last chunk is partial, equal to
    the reference's; inputs 2 bytes off 16-byte alignment (torch views) take the element-by-element
    branch, which sums in the same order: the same bits."""
    g, lp = _row_norm_program(n)
    prog = CUDA.lower(g, lp)
    ins = random_inputs(g, {"s": s}, seed=s)
    want = np.asarray(g.compile(backend="reference")(ins)["y"], np.float32)
    got = np.asarray(prog(ins)["y"], np.float32)
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
    odd = unaligned_torch_views(ins)
    if odd is None:
        return
    assert odd["x"].data_ptr() % 16 == 2
    np.testing.assert_array_equal(prog(odd)["y"].float().cpu().numpy(), got)


@pytest.mark.parametrize("n", [640, 2052])
@pytest.mark.parametrize("s", [1, 17, 255])
def test_float32_row_norms_in_16_byte_chunks_match_the_reference_and_their_unaligned_branch(monkeypatch, s, n):
    """``LIGHTSPEED_CUDA_NORM_F32_CHUNKS``: RowNorm over float32 rows held as 16-byte chunks of 4
    (Gemma 3's 640; 2052 ends in a partial pass) within float32 rounding of the reference; inputs
    4 bytes off 16-byte alignment take the element-by-element branch: the same bits."""
    from lightspeed.backends.codegen.kernels import norm

    monkeypatch.setattr(norm, "NORM_F32_CHUNKS", True)
    g, lp = _row_norm_program(n, ls.float32)
    op = next(o for o in lp.ops if o.op == "RowNorm")
    assert "_ls_xq" in norm.row_norm_kernel("cuda", op, [lp.ops[i].dtype for i in op.inputs]).source
    prog = CUDA.lower(g, lp)
    ins = random_inputs(g, {"s": s}, seed=s)
    want = np.asarray(g.compile(backend="reference")(ins)["y"], np.float64)
    got = np.asarray(prog(ins)["y"], np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    odd = unaligned_torch_views(ins, "float32")
    if odd is None:
        return
    assert odd["x"].data_ptr() % 16 == 4
    np.testing.assert_array_equal(np.asarray(prog(odd)["y"].cpu().numpy(), np.float64), got)
