"""Samplers against hand computations; generation loop behaviour; bad inputs."""

from __future__ import annotations

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.errors import InputError, UnsupportedError
from lightspeed.models import MODELS, Llama, family_of, from_hf_config, get
from lightspeed.models.generate import (
    Generator,
    apply_repetition_penalty,
    generate,
    process_logits,
    sample_token,
    top_k_mask,
    top_p_mask,
)

NEG = -np.inf

TINY = dict(model_type="llama", vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=1, rms_norm_eps=1e-6, rope_theta=10000.0,
            tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)


def tiny_weights(model, seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) * 0.5 for n, s in model.param_shapes().items()}


# ---------------------------------------------------------------------- samplers
def test_repetition_penalty_by_hand():
    out = apply_repetition_penalty(np.array([2.0, -2.0, 1.0, 0.5]), [0, 1, 1], 2.0)
    np.testing.assert_array_equal(out, [1.0, -4.0, 1.0, 0.5])  # each seen token once, sign-aware
    np.testing.assert_array_equal(apply_repetition_penalty(np.array([1.0, 2.0]), [0], 1.0), [1.0, 2.0])


def test_top_k_by_hand():
    x = np.array([1.0, 3.0, 2.0, 3.0, -1.0])
    np.testing.assert_array_equal(top_k_mask(x, 1), [NEG, 3.0, NEG, 3.0, NEG])  # ties with the k-th stay
    np.testing.assert_array_equal(top_k_mask(x, 3), [NEG, 3.0, 2.0, 3.0, NEG])
    np.testing.assert_array_equal(top_k_mask(x, 0), x)
    np.testing.assert_array_equal(top_k_mask(x, 9), x)


def test_top_p_by_hand():
    x = np.log(np.array([0.05, 0.5, 0.15, 0.3]))
    # ascending: 0.05, 0.15, 0.3, 0.5; cumulative 0.05, 0.2, 0.5, 1.0
    np.testing.assert_array_equal(np.isfinite(top_p_mask(x, 0.7)), [False, True, False, True])  # drop cum <= 0.3
    np.testing.assert_array_equal(np.isfinite(top_p_mask(x, 0.9)), [False, True, True, True])   # drop cum <= 0.1
    np.testing.assert_array_equal(np.isfinite(top_p_mask(x, 0.01)), [False, True, False, False])  # top one stays
    np.testing.assert_array_equal(top_p_mask(x, 1.0), x)


def test_process_logits_order_matches_hf():
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    rng = np.random.default_rng(1)
    logits = rng.standard_normal(50) * 3
    hist = [3, 7, 7, 20]
    procs = tf.LogitsProcessorList([tf.RepetitionPenaltyLogitsProcessor(1.3), tf.TemperatureLogitsWarper(0.7),
                                    tf.TopKLogitsWarper(10), tf.TopPLogitsWarper(0.8)])
    want = procs(torch.tensor([hist]), torch.from_numpy(logits)[None].clone())[0].numpy()
    got = process_logits(logits, hist, temperature=0.7, top_k=10, top_p=0.8, repetition_penalty=1.3)
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want))
    np.testing.assert_allclose(got[np.isfinite(got)], want[np.isfinite(want)], rtol=1e-12)


def test_sampling_frequencies_and_greedy():
    logits = np.log(np.array([0.5, 0.3, 0.2, 1e-9]))
    rng = np.random.default_rng(0)
    draws = [sample_token(logits, rng, temperature=1.0) for _ in range(20000)]
    freq = np.bincount(draws, minlength=4) / len(draws)
    np.testing.assert_allclose(freq, [0.5, 0.3, 0.2, 0.0], atol=0.015)
    assert sample_token(logits, rng, temperature=0.0) == 0
    assert all(sample_token(logits, rng, temperature=5.0, top_k=1) == 0 for _ in range(50))
    # the penalty can change the greedy choice: 0.5 / 2 < 0.3
    assert sample_token(np.array([0.5, 0.3]), rng, [0], temperature=0.0, repetition_penalty=2.0) == 1
    # same seed, same tokens
    a = [sample_token(logits, np.random.default_rng(7), temperature=1.0, top_p=0.9) for _ in range(5)]
    b = [sample_token(logits, np.random.default_rng(7), temperature=1.0, top_p=0.9) for _ in range(5)]
    assert a == b


# ---------------------------------------------------------------------- generation loop
def test_generation_stops_streams_and_times():
    model = from_hf_config(TINY)
    w = tiny_weights(model)
    gen = Generator(model, w, backend="reference")
    free = gen.generate([1, 5, 9], 12, stop_ids=())
    assert len(free.new_ids) == 12 and free.stop_reason == "max_tokens"
    stop = free.new_ids[4]
    seen = []
    res = gen.generate([1, 5, 9], 12, stop_ids=[stop], on_token=seen.append)
    first = free.new_ids.index(stop)
    assert res.new_ids == free.new_ids[:first + 1] and res.stop_reason == "stop_token"  # stop token kept
    assert seen == res.new_ids and res.ids == [1, 5, 9] + res.new_ids
    assert res.ttft_s > 0 and len(res.step_s) == len(res.new_ids) - 1
    assert res.tpot_s == pytest.approx(np.mean(res.step_s)) and res.tokens_per_s == pytest.approx(1 / res.tpot_s)
    sampled = [gen.generate([1, 5, 9], 8, temperature=1.0, top_k=5, seed=s, stop_ids=()).new_ids for s in (0, 0, 1)]
    assert sampled[0] == sampled[1] and sampled[0] != sampled[2]


@pytest.mark.parametrize("backend", ["reference", "cpu", pytest.param("native", marks=pytest.mark.skipif(
    not ls.backends.get_backend("native").available(), reason="no C compiler"))])
def test_greedy_decode_steps_choose_on_the_device(backend, monkeypatch):
    """Greedy steps fetch only the decode program's own argmax (``next_token``) where outputs live
    in device memory (cuda; here a host backend told so); the tokens are the host sampler's (the
    same steps with their logits kept, chosen on the host), and a step that needs its logits
    (``want_logits``: a server's logprobs) still gets them."""
    monkeypatch.setattr(type(ls.backends.get_backend(backend)), "device_memory", True)
    model = from_hf_config(TINY)
    gen = Generator(model, tiny_weights(model, seed=3), backend=backend)
    assert "next_token" in gen.decode.output_names and "next_token" in gen.prefill.output_names
    on_device = gen.generate([1, 5, 9], 16, stop_ids=())
    on_host = gen.generate([1, 5, 9], 16, stop_ids=(), keep_logits=True)
    assert on_device.new_ids == on_host.new_ids
    assert on_host.new_ids == [int(np.argmax(x)) for x in on_host.logits]
    # a prompt prefilled in chunks: the last chunk's (the extend program's) argmax
    chunked = Generator(model, tiny_weights(model, seed=3), backend=backend, prefill_chunk=2)
    assert chunked.generate([1, 5, 9], 16, stop_ids=()).new_ids == on_host.new_ids
    state = gen.start([1, 5, 9], 4, stop_ids=())
    state.advance()
    assert state.last_logits is None  # the prompt's token is the prefill program's own argmax
    state.advance()
    assert state.last_logits is None  # chosen on the device: no logits came back
    first = gen.start([1, 5, 9], 2, stop_ids=())
    first.want_logits = True  # (a server's logprobs of the first token)
    assert first.advance() == on_host.new_ids[0] and first.last_logits is not None
    state.want_logits = True
    state.advance()
    assert state.last_logits is not None and int(np.argmax(state.last_logits)) == state.ids[-1]
    # each step is queued before the last one's token is read: a stop token ends the generation
    # at the same token as on the host, the step queued past it dropped
    stop = on_host.new_ids[5]
    ended = gen.generate([1, 5, 9], 16, stop_ids=(stop,))
    assert ended.new_ids == on_host.new_ids[:on_host.new_ids.index(stop) + 1] and ended.stop_reason == "stop_token"
    calls = []
    launch = type(gen.decode).launch
    monkeypatch.setattr(type(gen.decode), "launch", lambda self, *a, **k: calls.append(1) or launch(self, *a, **k))
    assert gen.generate([1, 5, 9], 6, stop_ids=()).new_ids == on_host.new_ids[:6]
    assert len(calls) == 5  # one per step after the prefill's token, none past the budget


@pytest.mark.skipif(not ls.backends.get_backend("native").available(), reason="no C compiler")
def test_sampled_tokens_from_the_backends_sampler_equal_the_token_samplers(monkeypatch):
    """On native a sampled token is drawn by the C sampler (Backend.sampler) from the same uniform
    draws as numpy's: the same tokens for the same seed, with and without top-k / top-p; greedy
    steps and a repetition penalty stay on the host."""
    from lightspeed.models import generate as gen_mod

    model = from_hf_config(TINY)
    gen = Generator(model, tiny_weights(model, seed=5), backend="native")
    real = gen_mod.token_sampler("native")
    calls = []

    class Counting:
        def sample(self, logits, params):
            calls.append(len(params))
            return real.sample(logits, params)

    options = [dict(temperature=0.8), dict(temperature=1.3, top_k=5), dict(temperature=0.6, top_p=0.7),
               dict(temperature=1.0, top_k=9, top_p=0.5), dict(temperature=0.9, repetition_penalty=1.3),
               dict(temperature=0.0)]
    for opts in options:
        for seed in (0, 1):
            monkeypatch.setattr(gen_mod, "token_sampler", lambda backend: Counting())
            before = len(calls)
            kernel = gen.generate([1, 5, 9], 12, stop_ids=(), seed=seed, **opts).new_ids
            used = len(calls) - before
            monkeypatch.setattr(gen_mod, "token_sampler", lambda backend: None)
            host = gen.generate([1, 5, 9], 12, stop_ids=(), seed=seed, **opts).new_ids
            assert kernel == host, (opts, seed)
            host_only = opts["temperature"] == 0 or "repetition_penalty" in opts
            assert used == (0 if host_only else 12), opts


def test_a_sampler_that_cannot_be_built_leaves_sampling_on_the_host(monkeypatch):
    """A backend whose sampler fails to build (no NVRTC, a compiler error) samples on the host
    with a warning, instead of failing every sampled request."""
    from lightspeed.errors import LightspeedError
    from lightspeed.models import generate as gen_mod

    backend = type(ls.backends.get_backend("cpu"))

    def broken(self):
        raise LightspeedError("no compiler for the sampler")

    monkeypatch.setattr(backend, "sampler", broken)
    gen_mod.token_sampler.cache_clear()
    try:
        with pytest.warns(RuntimeWarning, match="sampling on the host"):
            assert gen_mod.token_sampler("cpu") is None
        model = from_hf_config(TINY)
        gen = Generator(model, tiny_weights(model, seed=2), backend="cpu")
        a = gen.generate([1, 5, 9], 6, stop_ids=(), temperature=0.9, seed=4).new_ids
        assert a == gen.generate([1, 5, 9], 6, stop_ids=(), temperature=0.9, seed=4).new_ids
    finally:
        gen_mod.token_sampler.cache_clear()


@pytest.mark.skipif(not ls.backends.get_backend("native").available(), reason="no C compiler")
def test_sampled_decode_steps_draw_on_the_device(monkeypatch):
    """Where outputs live in device memory (cuda; here native told so) a sampled step's token is
    drawn by the backend's sampler from the step's logits where they lie, and the next step is
    queued on that token before it is read: the same tokens as the host sampler, each step's
    draw in order; no logits come back; a stop token ends it at the host's token."""
    from lightspeed.models import generate as gen_mod

    backend = ls.backends.get_backend("native")
    model = from_hf_config(TINY)
    gen = Generator(model, tiny_weights(model, seed=4), backend="native")
    opts = dict(temperature=1.1, top_k=12, top_p=0.85, seed=7)
    monkeypatch.setattr(gen_mod, "token_sampler", lambda b: None)
    on_host = gen.generate([1, 5, 9], 16, stop_ids=(), **opts).new_ids
    monkeypatch.undo()
    monkeypatch.setattr(type(backend), "device_memory", True)
    launches = []
    launch = type(gen.decode).launch
    monkeypatch.setattr(type(gen.decode), "launch", lambda self, *a, **k: launches.append(k) or launch(self, *a, **k))
    state = gen.start([1, 5, 9], 16, stop_ids=(), **opts)
    while not state.done:
        state.advance()
        assert state.last_logits is None or len(state.new_ids) == 1  # only the prefill's token saw them
    assert state.new_ids == on_host
    assert len(launches) == 15 and all("fetch" not in k for k in launches)  # logits left where they lie
    stop = on_host[6]
    ended = gen.generate([1, 5, 9], 16, stop_ids=(stop,), **opts)
    assert ended.new_ids == on_host[:on_host.index(stop) + 1] and ended.stop_reason == "stop_token"
    # logits wanted from the fifth token on (a server's logprobs): the step queued ahead is dropped
    # and its draw given back, so the tokens stay the host's
    state = gen.start([1, 5, 9], 16, stop_ids=(), **opts)
    while not state.done:
        state.want_logits = len(state.new_ids) >= 4
        state.advance()
    assert state.new_ids == on_host


@pytest.mark.parametrize("backend", ["cpu", pytest.param("native", marks=pytest.mark.skipif(
    not ls.backends.get_backend("native").available(), reason="no C compiler"))])
def test_prompts_long_and_short_run_their_own_prefill(backend, monkeypatch):
    """Where a backend declares many-rows kernels (cuda's tensor-core tiles), the prefill is two
    programs searched at 16 and 128 rows, a prompt of 64 tokens or more running the second; the
    logits equal one program's (here a host backend told it has such kernels)."""
    from lightspeed.backends.cuda.backend import MATMUL_MMA
    from lightspeed.models import generate as gen_mod

    model = from_hf_config({**TINY, "max_position_embeddings": 256})
    weights = tiny_weights(model, seed=5)
    prompts = [[1, *range(3, 12)], [1] + [int(t) for t in np.random.default_rng(0).integers(3, 32, 79)]]
    plain = Generator(model, weights, backend=backend)
    assert not gen_mod.row_buckets(backend, "prefill", None)
    want = [plain.generate(p, 3, stop_ids=(), keep_logits=True) for p in prompts]
    be = type(ls.backends.get_backend(backend))
    monkeypatch.setattr(be, "ops", (*be.ops, MATMUL_MMA))  # declared, never offered: no rule makes it
    buckets = gen_mod.row_buckets(backend, "prefill", None)
    assert buckets == [({"s": (1, 63)}, {"s": 16}), ({"s": (64, 1 << 31)}, {"s": 128})]
    assert [r for r, _ in gen_mod.row_buckets(backend, "paged", None)] == [{"s": (1, 7)}, {"s": (8, 1 << 31)}]
    assert not gen_mod.row_buckets(backend, "decode", None)
    # the caller's own dims or buckets: searched where asked, one program
    assert not gen_mod.row_buckets(backend, "prefill", ls.SearchOptions(dims={"s": 32}))
    assert not gen_mod.row_buckets(backend, "prefill", ls.SearchOptions(dim_buckets={"s": [(1, 8)]}))
    split = Generator(model, weights, backend=backend, search=ls.SearchOptions(budget=3, seed=1))
    assert isinstance(split.prefill, ls.search.BucketedProgram)
    calls = []
    for _, prog in split.prefill.buckets:
        monkeypatch.setattr(prog, "execute", lambda *a, _e=prog.execute, _p=prog, **k: calls.append(_p) or _e(*a, **k))
    for p, w in zip(prompts, want):
        got = split.generate(p, 3, stop_ids=(), keep_logits=True)
        assert got.new_ids == w.new_ids
        np.testing.assert_allclose(np.array(got.logits), np.array(w.logits), rtol=1e-5, atol=1e-5)
    assert calls == [split.prefill.buckets[0][1], split.prefill.buckets[1][1]]


@pytest.mark.parametrize("backend", ["reference", "cpu", pytest.param("native", marks=pytest.mark.skipif(
    not ls.backends.get_backend("native").available(), reason="no C compiler"))])
def test_a_long_prompt_is_prefilled_in_chunks_with_the_same_tokens(backend):
    """A prompt longer than ``prefill_chunk`` runs its first chunk through the prefill program
    and the rest through the extend program after the cached rows: no program call sees more
    rows than a chunk, and the logits and greedy tokens are a whole prompt's."""
    model = from_hf_config({**TINY, "max_position_embeddings": 256})
    weights = tiny_weights(model, seed=7)
    whole = Generator(model, weights, backend=backend)
    chunked = Generator(model, weights, backend=backend, prefill_chunk=16)
    rows = []
    for prog in (chunked.prefill, chunked.extend):
        call = type(prog).__call__
        prog.__class__ = type("Spy", (type(prog),), {
            "__call__": lambda self, inputs=None, *a, _c=call, **k: rows.append(len(inputs["input_ids"])) or _c(
                self, inputs, *a, **k)})
    rng = np.random.default_rng(1)
    for n in (16, 17, 40, 48):
        prompt = [1] + [int(t) for t in rng.integers(3, 32, n - 1)]
        rows.clear()
        want = whole.generate(prompt, 6, stop_ids=(), keep_logits=True)
        got = chunked.generate(prompt, 6, stop_ids=(), keep_logits=True)
        assert got.new_ids == want.new_ids, n
        np.testing.assert_allclose(np.array(got.logits), np.array(want.logits), rtol=1e-4, atol=1e-4)
        assert rows == [16] if n == 16 else rows[0] == 16 and max(rows) <= 16 and sum(rows) == n, (n, rows)
    with pytest.raises(InputError, match="prefill_chunk"):
        Generator(model, weights, backend=backend, prefill_chunk=0)


def test_fetch_returns_only_the_outputs_asked_for():
    g = ls.Graph()
    x = g.input("x", (3,))
    g.output("a", x + 1.0)
    g.output("b", x * 2.0)
    prog = g.compile(backend="cpu")
    out = prog({"x": np.arange(3, dtype=np.float32)}, fetch=["b"])
    assert list(out) == ["b"] and np.allclose(out["b"], [0, 2, 4])
    with pytest.raises(InputError, match="unknown output"):
        prog({"x": np.zeros(3, np.float32)}, fetch=["c"])
    with pytest.raises(InputError, match="sequence of output names"):
        prog({"x": np.zeros(3, np.float32)}, fetch="b")


def test_generate_function_uses_tokenizer_eos():
    class Tok:
        eos_ids = (7,)

    model = from_hf_config(TINY)
    w = tiny_weights(model)
    free = generate(model, None, [1, 5], weights=w, backend="reference", max_new_tokens=10, stop_ids=())
    stop = free.new_ids[3]
    Tok.eos_ids = (stop,)
    res = generate(model, Tok(), [1, 5], weights=w, backend="reference", max_new_tokens=10)
    assert res.new_ids[-1] == stop and res.stop_reason == "stop_token"


# ---------------------------------------------------------------------- bad input
def test_missing_weight_is_named():
    model = from_hf_config(TINY)
    w = tiny_weights(model)
    del w["model.layers.0.mlp.up_proj.weight"]
    with pytest.raises(InputError, match=r"model\.layers\.0\.mlp\.up_proj\.weight.*\(32, 16\)"):
        Generator(model, w, backend="reference")


def test_wrong_weight_shape_is_named():
    model = from_hf_config(TINY)
    w = tiny_weights(model)
    w["model.layers.0.self_attn.k_proj.weight"] = np.zeros((16, 16), np.float32)
    with pytest.raises(InputError, match=r"model\.layers\.0\.self_attn\.k_proj\.weight.*\(16, 16\).*\(8, 16\)"):
        model.check_weights(w)


def test_wrong_cache_shape_is_named():
    model = from_hf_config(TINY)
    prog = model.decode_graph().compile(backend="reference")
    w = model.check_weights(tiny_weights(model))
    caches = {"cache.0.k": np.zeros((3, 1, 8), np.float32), "cache.0.v": np.zeros((4, 1, 8), np.float32)}
    with pytest.raises(InputError, match="cache.0.v"):
        prog({"input_ids": np.array([1]), "positions": np.array([3]), **w, **caches}, dims={"p": 2})


def test_bad_prompts():
    model = from_hf_config(TINY)
    gen = Generator(model, tiny_weights(model), backend="reference")
    with pytest.raises(InputError, match="40"):
        gen.generate([1, 40])
    with pytest.raises(InputError, match="empty"):
        gen.generate([])


def test_extra_weights_are_ignored_and_cast():
    model = from_hf_config(TINY)
    w = {k: v.astype(np.float64) for k, v in tiny_weights(model).items()}
    w["lm_head.weight"] = w["model.embed_tokens.weight"]  # tied: HF state_dicts list it too
    out = model.check_weights(w)
    assert "lm_head.weight" not in out and all(v.dtype == np.float32 for v in out.values())


def test_registry():
    assert {"llama", "qwen3", "gemma3"} <= set(MODELS)
    assert get("llama") is Llama and family_of({"model_type": "gemma3_text"}) == "gemma3"
    with pytest.raises(UnsupportedError, match="mamba"):
        family_of({"model_type": "mamba"})
    with pytest.raises(UnsupportedError, match="gpt9"):
        get("gpt9")
    assert isinstance(from_hf_config(TINY), Llama)


def test_program_is_weight_independent():
    """One compiled program serves any weights (nothing about their values is baked in)."""
    model = from_hf_config(TINY)
    gen = Generator(model, tiny_weights(model, 0), backend="cpu", search=ls.SearchOptions(budget=2, seed=0))
    gen2 = Generator(model, tiny_weights(model, 1), backend="cpu", search=ls.SearchOptions(budget=2, seed=0))
    assert gen.decode.compiled is gen2.decode.compiled  # one compilation, two resident weight sets
    a = gen.generate([1, 5, 9], 6, stop_ids=()).new_ids
    b = gen2.generate([1, 5, 9], 6, stop_ids=()).new_ids
    assert a != b


def test_a_generations_caches_are_row_views_of_one_cleared_allocation_per_row_shape():
    """``cache_buffers``: every layer's K and V cache is a zeroed, writable, C-contiguous view
    starting 256-byte aligned, disjoint from the others, and there is one allocation (one
    clearing) per distinct row shape, not one per buffer (64 launches on a GPU's first-token path)."""
    from lightspeed.models.generate import ALIGN, cache_buffers

    g = ls.Graph()
    g.output("y", g.input("x", (2,)) * 2.0)
    prog = g.compile(backend="cpu")
    made = []
    zeros = prog.zeros
    prog.zeros = lambda shape, dtype: made.append(shape) or zeros(shape, dtype)
    shapes = [(37, 2, 3), (37, 2, 3), (37, 4, 8), (37, 2, 3)] * 2  # rows of 12 bytes (bf16): not whole vectors
    bufs = cache_buffers(prog, shapes, ls.bfloat16.np)
    assert len(made) == 2 and sorted(made) == sorted([(64 * 6, 2, 3), (40 * 2, 4, 8)])  # rows rounded to 64 and 4
    spans = []
    for buf, shape in zip(bufs, shapes):
        assert buf.shape == shape and buf.flags.c_contiguous and buf.flags.writeable
        assert not np.asarray(buf, np.float32).any()
        assert buf.ctypes.data % ALIGN == buf.base.ctypes.data % ALIGN
        spans.append((buf.ctypes.data, buf.ctypes.data + buf.nbytes))
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # no two views overlap


@pytest.mark.skipif(not ls.backends.get_backend("native").available(), reason="no C compiler")
def test_a_device_backends_next_generation_takes_the_last_ones_caches_cleared(monkeypatch):
    """On a device backend a finished generation's KV caches (and the prefill's row views of them)
    are the next generation's on the same thread, cleared: its first token makes no allocation
    nor views (~0.35 ms of a 1B's first token on an H100 host, twenty-fourth session).  Here the
    native backend, marked a device backend: every generation's tokens equal those of fresh
    caches (longer prompts first, so stale rows would be read if a clear were missing), one set
    of caches serves them all, and a reused set is all zeros when handed out."""
    from lightspeed.backends import get_backend
    from lightspeed.models import generate as gen_mod

    model = from_hf_config({**TINY, "num_hidden_layers": 2})
    gen = Generator(model, tiny_weights(model, seed=4), backend="native")
    prompts = [[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1], [8, 2, 8, 1, 8], [2, 7, 1]]
    want = [gen.generate(p, 6, stop_ids=()).ids for p in prompts]  # a host backend: fresh caches each time
    made = []
    buffers = gen_mod.cache_buffers
    monkeypatch.setattr(gen_mod, "cache_buffers", lambda *a: made.append(1) or buffers(*a))
    monkeypatch.setattr(get_backend("native"), "device_memory", True)
    # same max length (prompt + new tokens) for the reuse: 8 + 6 rows each
    got = [gen.generate(p, 14 - len(p), stop_ids=()).ids for p in prompts]
    assert [g[:len(w)] for g, w in zip(got, want)] == want
    assert len(made) == 1  # one set of caches for the four generations
    kept = gen._pool.caches
    assert any(np.asarray(b).any() for b in kept.bufs)  # the last generation's keys and values
    shapes = [tuple(b.shape) for b in kept.bufs]
    again = gen.take_caches(shapes, model.dtype.np)
    assert again is kept and not any(np.asarray(b).any() for b in again.bufs)
    other = gen.take_caches([(s[0] + 1, *s[1:]) for s in shapes], model.dtype.np)  # other shapes: new ones
    assert other is not kept and len(made) == 2
