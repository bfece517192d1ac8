"""Llama, Qwen3 and Gemma 3 against Hugging Face transformers (float64) on the same tiny random
weights: prefill logits at every position, then greedy decoding through the KV cache (logits of
every step and the tokens of HF's own cached generation)."""

from __future__ import annotations

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.models import from_hf_config
from lightspeed.models.generate import Generator, compile_model

from .tiny import decode_chunk, empty_caches, hf_logits, hf_model, store_prefill, torch

PROMPT = [1, 17, 33, 100, 3]
STEPS = 32
SEARCH = ls.SearchOptions(budget=3, seed=0)
CASES = [("llama", "cpu"), ("qwen3", "cpu"), ("gemma3", "cpu"), ("llama", "reference"), ("gemma3", "reference")]


_MODELS: dict = {}


def setup(family: str):
    if family not in _MODELS:
        hf, cfg, sd = hf_model(family)
        _MODELS[family] = hf, from_hf_config(cfg), sd
    return _MODELS[family]


@pytest.mark.parametrize("family,backend", CASES)
def test_prefill_logits_match_hf(family, backend):
    hf, model, sd = setup(family)
    ids = np.array([1, 17, 33, 100, 3, 9, 200, 45, 7, 8, 250, 0], dtype=np.int64)
    prog = compile_model(model, "prefill", backend, SEARCH, all_logits=True)
    out = prog({"input_ids": ids, "positions": np.arange(len(ids)), **model.check_weights(sd)})
    ref = hf_logits(hf, ids)
    assert out["logits"].shape == (len(ids), 256)
    assert np.abs(ref).max() > 2.0  # logits large enough for the tolerance to mean something
    np.testing.assert_allclose(out["logits"], ref, atol=1e-4, rtol=0)


@pytest.mark.parametrize("family,backend", CASES)
def test_greedy_decode_matches_hf(family, backend):
    hf, model, sd = setup(family)
    gen = Generator(model, sd, backend=backend, search=SEARCH)
    res = gen.generate(PROMPT, STEPS, stop_ids=(), keep_logits=True)
    assert len(res.new_ids) == STEPS and res.stop_reason == "max_tokens"
    # HF's own greedy generation with its own KV cache
    with torch.no_grad():
        want = hf.generate(torch.tensor([PROMPT]), max_new_tokens=STEPS, do_sample=False, eos_token_id=None,
                           pad_token_id=0)[0, len(PROMPT):].tolist()
    assert res.new_ids == want
    # every step's logits against HF recomputing the whole sequence
    ref = hf_logits(hf, res.ids)[len(PROMPT) - 1:-1]
    np.testing.assert_allclose(np.stack(res.logits), ref, atol=1e-4, rtol=0)
    assert len(res.step_s) == STEPS - 1 and res.tpot_s > 0 and res.ttft_s > 0


@pytest.mark.parametrize("family,backend", [("llama", "reference"), ("gemma3", "reference"), ("gemma3", "cpu")])
def test_chunked_decode_with_cache(family, backend):
    """The decode graph with s > 1 new tokens after a cache (prompt processed in chunks), writing
    its rows into the preallocated caches in place; Gemma's sliding layers read only their last
    W - 1 cached rows.  The caches end up holding what a prefill of the whole sequence computes."""
    hf, model, sd = setup(family)
    w = model.check_weights(sd)
    ids = np.array([1, 17, 33, 100, 3, 9, 200, 45, 7, 8, 250, 0], dtype=np.int64)
    ref = hf_logits(hf, ids)
    prefill = compile_model(model, "prefill", backend, SEARCH, all_logits=True)
    decode = compile_model(model, "decode", backend, SEARCH, all_logits=True)
    caches = empty_caches(model, len(ids) + 2)
    store_prefill(caches, prefill({"input_ids": ids[:3], "positions": np.arange(3), **w}), 3)
    n = 3
    for chunk in (4, 1, 3, 1):
        out = decode_chunk(decode, w, caches, ids[n:n + chunk], n)
        np.testing.assert_allclose(out["logits"], ref[n:n + chunk], atol=1e-4, rtol=0)
        n += chunk
    whole = prefill({"input_ids": ids[:n], "positions": np.arange(n), **w})
    for name, buf in caches.items():
        np.testing.assert_allclose(buf[:n], whole["new." + name.removeprefix("cache.")], atol=1e-5, rtol=1e-5)
        assert not buf[n:].any()  # rows past the last write are untouched


def test_sliding_window_matters():
    """The Gemma test model's window (4) changes its output: a model without it disagrees."""
    import dataclasses

    from lightspeed.models import Gemma3

    hf, model, sd = setup("gemma3")
    ids = np.array([1, 17, 33, 100, 3, 9, 200, 45], dtype=np.int64)
    wide = Gemma3(dataclasses.replace(model.config, sliding_window=1000))
    out = compile_model(wide, "prefill", "reference", all_logits=True)(
        {"input_ids": ids, "positions": np.arange(len(ids)), **wide.check_weights(sd)})
    assert np.abs(out["logits"] - hf_logits(hf, ids)).max() > 0.1


def test_decode_graph_never_copies_the_cache():
    """Each cache input is read once, by the Scatter writing the new rows; the updated cache is
    read by matrix products (Mul feeding a SumReduce) and by its aliased output only: no concat,
    copy or cast of the cache in the graph, and on cpu the write runs in place."""
    _, model, sd = setup("gemma3")
    g = model.decode_graph()
    consumers: dict[int, list] = {}
    for n in g.nodes:
        for src, _ in n.inputs:
            consumers.setdefault(src, []).append(n)
    names = [n for n in g.inputs if n.startswith("cache.")]
    assert len(names) == 2 * model.num_layers
    for name in names:
        (write,) = consumers[g.inputs[name]]
        assert write.op.name == "Scatter", name
        users = consumers[write.id]
        assert {u.op.name for u in users} == {"Mul", "Output"}, name
        for u in users:
            if u.op.name == "Mul":
                assert [c.op.name for c in consumers[u.id]] == ["SumReduce"], name
    prog = compile_model(model, "decode", "cpu", SEARCH)
    assert "ScatterInPlace" in prog.report()


def test_cache_inputs_and_aliases():
    """Every layer takes its whole cache [M, n_kv, d] and outputs it updated, aliasing the input;
    sliding layers read their last W - 1 rows (cache_rows)."""
    _, model, _ = setup("gemma3")
    g = model.decode_graph()
    shapes = {n: tuple(str(d) for d in g.nodes[i].shape) for n, i in g.inputs.items() if n.startswith("cache.")}
    assert shapes["cache.0.k"] == ("M", "2", "16") and shapes["cache.1.k"] == ("M", "2", "16")
    assert [model.cache_rows(i) for i in range(4)] == [3, None, 3, None]
    assert set(g.outputs) == {"logits"} | {f"cache.{i}.{c}" for i in range(4) for c in "kv"}
    assert g.output_aliases == {f"cache.{i}.{c}": f"cache.{i}.{c}" for i in range(4) for c in "kv"}


def test_a_tied_model_refuses_a_different_lm_head_beside_its_embeddings():
    cfg = dict(model_type="llama", vocab_size=16, hidden_size=8, intermediate_size=12, num_hidden_layers=1,
               num_attention_heads=2, num_key_value_heads=1, head_dim=4, tie_word_embeddings=True)
    model = from_hf_config(cfg)
    rng = np.random.default_rng(0)
    w = {n: rng.standard_normal(s).astype(np.float32) for n, s in model.param_shapes().items()}
    assert "lm_head.weight" not in model.check_weights({**w, "lm_head.weight": w["model.embed_tokens.weight"]})
    with pytest.raises(ls.InputError, match="tie_word_embeddings.*lm_head.weight"):
        model.check_weights({**w, "lm_head.weight": w["model.embed_tokens.weight"] + 1})
