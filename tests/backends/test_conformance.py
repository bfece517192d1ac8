"""One conformance suite for every registered backend (``lightspeed.backends.registered_backends``).

A backend joins by registering: each test below is parametrised over the registry.  What every
backend must show:

* the op table (each high-level op's first sample, permuted operands) against PyTorch eager;
* for backends that search, at least 20 distinct random candidates per graph agree with the
  reference runtime (every program the e-graph can extract is equivalent: a disagreement is an
  unsound rule);
* model blocks (attention + gated MLP, a conv stack, a tiny Llama decoding three tokens with its
  KV cache written in place) against the reference runtime;
* inputs checked whatever their array type, torch tensors in give torch tensors out, ``persist``,
  ``out=`` and ``reserve``;
* concurrent calls from several threads into several programs give the right results.

Backends that need a device skip cleanly when it is absent (``backend.available()`` is False).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import lightspeed as ls
from lightspeed.backends import registered_backends
from lightspeed.models import from_hf_config
from tests.backends.harness import (
    attention_block,
    mlp_block,
    op_graph,
    op_matches_torch,
    random_candidates_agree,
    random_inputs,
)
from tests.hl.optable import all_cases, feed

BACKENDS = registered_backends()
SEARCHED = [b for b in BACKENDS if b.searched]
FAST = ls.SearchOptions(budget=3, seed=0, progress=False)


def _ids(backends):
    return [b.name for b in backends]


def _first_cases():
    seen, out = set(), []
    for c in all_cases():
        if c.op not in seen and not c.xfail:
            seen.add(c.op)
            out.append(c)
    return out


CASES = _first_cases()


def _require(backend):
    if not backend.available():
        pytest.skip(f"backend {backend.name} has no device here")


# ---------------------------------------------------------------------- the op table
def _op_graph(case):
    """The op's first sample, operands in the permuted layout, the case's first dtype."""
    g, feeders, outs = op_graph(case, case.samples[0], case.dtypes[0], "permuted")
    return g, case.samples[0], feeders, outs


@pytest.mark.parametrize("backend", BACKENDS, ids=_ids(BACKENDS))
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_table_matches_torch(backend, case):
    _require(backend)
    op_matches_torch(backend, case, case.samples[0], case.dtypes[0], "permuted", FAST)


@pytest.mark.parametrize("backend", SEARCHED, ids=_ids(SEARCHED))
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_op_table_random_candidates_match_reference(backend, case):
    _require(backend)
    g, sample, feeders, _ = _op_graph(case)
    dims = dict(sample.dims[-1]) or None
    _, physical = feed(np.random.default_rng(0), sample, case.dtypes[0], feeders, dims or {})
    # the native backend compiles each candidate with the C compiler: fewer of them keep CI short
    random_candidates_agree(backend, g, physical, dims, n=6 if backend.name == "native" else 20)


# ---------------------------------------------------------------------- model blocks
def _transformer_block():
    g = ls.Graph()
    g.output("y", mlp_block(g, attention_block(g)))
    return g


def _conv_block():
    g = ls.Graph()
    x = g.input("x", (2, 3, "h", 8))
    w = g.input("w", (4, 3, 3, 3))
    y = ls.max_pool2d(ls.conv2d(x, w, padding=1).relu(), 2)
    g.output("y", ls.group_norm(y, 2))
    return g


BLOCKS = {"transformer": (_transformer_block, [{"s": 1}, {"s": 5}]), "conv": (_conv_block, [{"h": 6}])}


@pytest.mark.parametrize("backend", BACKENDS, ids=_ids(BACKENDS))
@pytest.mark.parametrize("block", sorted(BLOCKS))
def test_model_blocks_match_reference(backend, block):
    _require(backend)
    make, dims_list = BLOCKS[block]
    g = make()
    prog = g.compile(backend, search=FAST)
    ref = g.compile(backend="reference")
    for dims in dims_list:
        inputs = random_inputs(g, dims, seed=sum(dims.values()))
        np.testing.assert_allclose(np.asarray(prog(inputs)["y"]), ref(inputs)["y"], rtol=1e-5, atol=1e-5)
        if backend.searched:
            _, _, n = random_candidates_agree(backend, g, inputs, dims)
            assert n > 5


def _bf16_block():
    """A small pre-norm attention + MLP block entirely in bfloat16 (weights and activations)."""
    g = ls.Graph()
    bf = ls.bfloat16
    x = g.input("x", ("s", 16), bf)
    wq, wk, wv, wo = (g.input(n, (16, 16), bf) for n in ("wq", "wk", "wv", "wo"))
    h = ls.rms_norm(x, (16,), g.input("g", (16,), bf), eps=1e-6)
    att = ((h @ wq) @ (h @ wk).transpose(0, 1) * 0.25).softmax(-1)
    y = x + (att @ (h @ wv)) @ wo
    w1, w2 = g.input("w1", (16, 32), bf), g.input("w2", (32, 16), bf)
    g.output("y", y + (y @ w1).silu() @ w2)
    return g


@pytest.mark.parametrize("backend", SEARCHED, ids=_ids(SEARCHED))
def test_bfloat16_block_random_candidates_match_reference(backend):
    """bfloat16 end to end: every random candidate (regions computed in float and rounded once when
    they store, matmuls accumulated in float) within bfloat16's tolerance of the reference, which
    rounds after every primitive."""
    _require(backend)
    g = _bf16_block()
    for dims in ({"s": 1}, {"s": 7}):
        inputs = random_inputs(g, dims, seed=3)
        _, _, n = random_candidates_agree(backend, g, inputs, dims, n=6 if backend.name == "native" else 20,
                                          rtol=3e-2, atol=3e-2)
        # a backend that fuses no bfloat16 regions (cpu: numpy) has the primitive program only
        assert n > 3 if ls.bfloat16 in backend.fuse_dtypes else n >= 1


TINY = dict(model_type="llama", vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, rms_norm_eps=1e-6, rope_theta=10000.0,
            tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)


@pytest.mark.parametrize("backend", BACKENDS, ids=_ids(BACKENDS))
def test_decode_writes_its_cache_in_place(backend):
    """A tiny Llama decodes three tokens on the backend and on the reference runtime, each with its
    own preallocated cache: same logits, same cache contents, and the caches are the caller's own
    arrays (written in place, not returned as copies)."""
    _require(backend)
    model = from_hf_config(TINY)
    rng = np.random.default_rng(0)
    weights = {n: rng.standard_normal(s).astype(np.float32) * 0.5 for n, s in model.param_shapes().items()}
    g = model.decode_graph()
    progs = {"ours": g.compile(backend, search=ls.SearchOptions(budget=3, seed=0, progress=False,
                                                                 dims={"s": 1, "p": 4, "M": 8})).persist(weights),
             "ref": g.compile(backend="reference").persist(weights)}
    caches = {k: {f"cache.{i}.{c}": rng.standard_normal((6, 1, 8)).astype(np.float32) * 0 for i in range(2)
                  for c in "kv"} for k in progs}
    for p, tok in enumerate([3, 7, 11]):
        outs = {k: prog({"input_ids": np.array([tok]), "positions": np.array([p]), **caches[k]}, dims={"p": p})
                for k, prog in progs.items()}
        np.testing.assert_allclose(np.asarray(outs["ours"]["logits"]), outs["ref"]["logits"], rtol=1e-5, atol=1e-5)
        for name in caches["ours"]:
            assert outs["ours"][name] is caches["ours"][name]
            np.testing.assert_allclose(caches["ours"][name], caches["ref"][name], rtol=1e-6, atol=1e-6)
    assert np.abs(caches["ours"]["cache.1.v"][:3]).min() > 0 and not caches["ours"]["cache.1.v"][3:].any()


# ---------------------------------------------------------------------- the program contract
@pytest.mark.parametrize("backend", BACKENDS, ids=_ids(BACKENDS))
def test_inputs_of_any_array_type_persist_out_and_reserve(backend):
    _require(backend)
    g = ls.Graph()
    x, w = g.input("x", ("s", 8)), g.input("w", (8, 4))
    g.output("y", (x @ w).softmax(-1))
    prog = g.compile(backend, search=FAST)
    xa, wa = random_inputs(g, {"s": 3}).values()
    want = g.compile(backend="reference")(x=xa, w=wa)["y"]
    got = prog(x=torch.from_numpy(xa), w=torch.from_numpy(wa))["y"]
    assert isinstance(got, torch.Tensor)  # torch in, torch out
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)
    bound = prog.persist(w=wa).reserve(s=16)  # weights resident; dims planned up to 16
    before = bound.preparations
    for s in (3, 16, 1, 7):
        xs = random_inputs(g, {"s": s}, seed=s)["x"]
        np.testing.assert_allclose(bound(x=xs)["y"], g.compile(backend="reference")(x=xs, w=wa)["y"],
                                   rtol=1e-6, atol=1e-6)
    assert bound.preparations <= max(before, 1)  # nothing prepared again within the bound
    dest = np.zeros((3, 4), np.float32)
    res = prog(x=xa, w=wa, out={"y": dest})
    assert res["y"] is dest
    np.testing.assert_allclose(dest, want, rtol=1e-6, atol=1e-6)
    with pytest.raises(ls.InputError, match="expected dtype float32"):
        prog(x=xa.astype(np.float64), w=wa)
    with pytest.raises(ls.InputError, match="missing input"):
        prog(x=xa)


@pytest.mark.parametrize("backend", BACKENDS, ids=_ids(BACKENDS))
def test_outputs_written_into_rows_of_a_zeroed_device_array(backend):
    """``zeros`` and ``rows`` (the generator's KV cache: the prefill writes its keys and values into
    the cache's first rows through ``out=``, fetching only the logits): the other rows stay zero."""
    _require(backend)
    g = ls.Graph()
    x = g.input("x", ("s", 8))
    g.output("y", x * 2.0)
    g.output("z", x.sum(-1))
    prog = g.compile(backend, search=FAST)
    cache = prog.zeros((7, 8), np.float32)
    xs = random_inputs(g, {"s": 3})["x"]
    got = prog(x=xs, out={"y": prog.rows(cache, 2, 3)}, fetch=["z"])
    assert list(got) == ["z"]
    np.testing.assert_allclose(np.asarray(got["z"]), xs.sum(-1), rtol=1e-5, atol=1e-6)
    host = cache.numpy() if hasattr(cache, "numpy") else np.asarray(cache)
    want = np.zeros((7, 8), np.float32)
    want[2:5] = xs * 2
    np.testing.assert_array_equal(host, want)
    with pytest.raises(ls.InputError, match="outside"):
        prog.rows(cache, 5, 3)


@pytest.mark.parametrize("backend", BACKENDS, ids=_ids(BACKENDS))
def test_concurrent_calls_give_right_results(backend):
    """4 threads call two programs (one of them shared by all threads, one with persisted weights)
    with different inputs and shapes: every result equals the reference's."""
    _require(backend)
    g = _transformer_block()
    prog = g.compile(backend, search=FAST)
    ref = g.compile(backend="reference")
    cases = [random_inputs(g, {"s": s}, seed=s) for s in (1, 2, 3, 5, 8, 13)]
    wants = [ref(c)["y"] for c in cases]
    bound = prog.persist({k: v for k, v in cases[0].items() if k != "x"})
    errors: list[str] = []

    def worker(t: int) -> None:
        for it in range(40):
            k = (t * 7 + it) % len(cases)
            if it % 2:
                got = bound(x=cases[k]["x"])["y"] if k == 0 else prog(cases[k])["y"]
            else:
                got = prog(cases[k])["y"]
            if not np.allclose(np.asarray(got), wants[k], rtol=1e-5, atol=1e-5):
                errors.append(f"thread {t} call {it} case {k}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:5]


@pytest.mark.parametrize("backend", BACKENDS, ids=_ids(BACKENDS))
def test_aliased_output_is_written_after_every_reader_of_the_old_values(backend):
    """Regression: the cpu wrote an aliased output into its input at the Output op's place in the
    program, so an op after it read the new values instead of the old ones (an HF static cache
    read twice: 766 of 768 logits wrong).  The input is read by another op here, so the write
    cannot run in place; every candidate must give ``y`` from the old values and leave the input
    holding the output."""
    _require(backend)
    g = ls.Graph()
    c, r = g.input("c", (6, 2)), g.input("r", ("s", 2))
    g.output("c", ls.slice_scatter(c, r, 0, "p"), aliases="c")
    g.output("y", (c * 2.0).sum(0))  # declared after the aliased output: later in the program
    old = np.arange(12, dtype=np.float32).reshape(6, 2)
    rows = -np.ones((2, 2), np.float32)
    want = old.copy()
    want[1:3] = rows
    prog = g.compile(backend, search=ls.SearchOptions(budget=3, seed=0, progress=False, dims={"s": 2, "p": 1}))
    cache = old.copy()
    out = prog(c=cache, r=rows, dims={"p": 1})
    np.testing.assert_array_equal(out["y"], (old * 2).sum(0))
    assert out["c"] is cache
    np.testing.assert_array_equal(cache, want)
    if backend.searched:
        random_candidates_agree(backend, g, {"c": old, "r": rows}, {"p": 1})


@pytest.mark.parametrize("backend", BACKENDS, ids=_ids(BACKENDS))
def test_non_contiguous_inputs_are_accepted(backend):
    """Edge inputs, one semantics on every backend: a transposed, a strided and a negative-stride
    numpy view as inputs give the values of their contiguous copies (native once refused them
    with a misleading message; a kernel indexes its buffers flat, so it gets a row-major copy)."""
    _require(backend)
    g = ls.Graph()
    a, b, c = g.input("a", (4, 3)), g.input("b", (4, 3)), g.input("c", (4, 3))
    g.output("y", (a * 2.0 + b) @ c.transpose(0, 1))
    base = np.arange(48, dtype=np.float32).reshape(4, 12) / 7
    views = {"a": np.arange(12, dtype=np.float32).reshape(3, 4).T, "b": base[:, ::4], "c": base[::-1, :3]}
    assert not any(v.flags.c_contiguous for v in views.values())
    want = (views["a"].astype(np.float64) * 2 + views["b"]) @ views["c"].astype(np.float64).T
    prog = g.compile(backend, search=FAST) if backend.searched else g.compile(backend)
    np.testing.assert_allclose(prog(**views)["y"], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS, ids=_ids(BACKENDS))
def test_integer_division_by_zero_and_casts_of_inf_give_zero(backend):
    """Edge inputs, one semantics (primitives.py): a float -> int Cast of NaN or +-inf is 0 and
    out-of-range finite values saturate, so an integer division by zero is 0 on every backend
    (native saturated inf to INT_MAX once, where cpu and the reference gave 0)."""
    _require(backend)
    g = ls.Graph()
    a, b, f = g.input("a", (4,), ls.int32), g.input("b", (4,), ls.int32), g.input("f", (5,))
    g.output("trunc", ls.div(a, b, rounding_mode="trunc"))
    g.output("floor", ls.floor_divide(a, b))
    g.output("cast", f.to(ls.int32))
    d = g.input("d", (3,), ls.float64)
    g.output("cast64", d.to(ls.int64))
    A, B = np.array([7, -7, 0, 9], np.int32), np.array([0, 0, 0, 2], np.int32)
    F = np.array([np.inf, -np.inf, np.nan, 3e10, -2.7], np.float32)
    prog = g.compile(backend, search=FAST) if backend.searched else g.compile(backend)
    out = prog(a=A, b=B, f=F, d=np.array([9.3e18, -1e300, 2.0 ** 62]))
    np.testing.assert_array_equal(out["trunc"], [0, 0, 0, 4])
    np.testing.assert_array_equal(out["floor"], [0, 0, 0, 4])
    np.testing.assert_array_equal(out["cast"], [0, 0, 0, 2 ** 31 - 1, -2])  # (the reference once wrapped 3e10)
    np.testing.assert_array_equal(out["cast64"], np.array([2 ** 63 - 1, -2 ** 63, 2 ** 62], np.int64))


@pytest.mark.parametrize("backend", BACKENDS, ids=_ids(BACKENDS))
def test_out_of_range_gather_indexes_raise(backend):
    """Edge inputs, one semantics: a gather (embedding, index_select, gather) that meets an index
    outside its data raises IndexOutOfRange (a LightspeedError and an IndexError) on every
    backend; native and cuda raise after the call, from an error word their kernels set (cuda:
    copied back behind the run, read when the host waits for the outputs).  The program stays
    usable."""
    _require(backend)
    from lightspeed.errors import IndexOutOfRange

    g = ls.Graph()
    ids, w = g.input("ids", ("s",), ls.int64), g.input("w", (10, 4))
    x, i = g.input("x", (6, 3)), g.input("i", ("k",), ls.int64)
    g.output("emb", ls.embedding(ids, w) * 2.0)
    g.output("sel", ls.index_select(x, 0, i) + 1.0)
    prog = g.compile(backend, search=FAST) if backend.searched else g.compile(backend)
    W, X = np.arange(40, dtype=np.float32).reshape(10, 4), np.arange(18, dtype=np.float32).reshape(6, 3)
    ok = prog(ids=np.array([0, 9]), w=W, x=X, i=np.array([5, 0]))
    np.testing.assert_array_equal(ok["emb"], W[[0, 9]] * 2)
    np.testing.assert_array_equal(ok["sel"], X[[5, 0]] + 1)
    for bad in ({"ids": np.array([3, 10])}, {"ids": np.array([-1])}, {"i": np.array([6])}):
        inputs = {"ids": np.array([1]), "w": W, "x": X, "i": np.array([2]), **bad}
        with pytest.raises(IndexOutOfRange, match="out of range"):
            prog(**inputs)
    again = prog(ids=np.array([2]), w=W, x=X, i=np.array([3]))
    np.testing.assert_array_equal(again["emb"], W[[2]] * 2)
