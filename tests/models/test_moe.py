"""Mixture-of-experts: the routers and experts of ``lightspeed.nn.moe`` against hand computations
and a numpy loop, and Qwen3-MoE / Gemma 4 (MoE) against Hugging Face transformers (float64) on the
same tiny random weights: prefill logits at every position, greedy decoding through the KV cache
(HF's own cached generation for the tokens, HF recomputing the sequence for every step's logits),
chunked decoding, and the structure of the graphs (the decode graph gathers the chosen experts)."""

from __future__ import annotations

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.errors import UnsupportedError
from lightspeed.models.gemma4 import Gemma4
from lightspeed.models.generate import Generator, compile_model
from lightspeed.models.qwen3_moe import Qwen3Moe
from lightspeed.nn import Builder
from lightspeed.nn.moe import Experts, Gemma4Router, TopKRouter, fuse_expert_weights

from .tiny import COMMON, decode_chunk, empty_caches, hf_logits, store_prefill, tf, torch

SEARCH = ls.SearchOptions(budget=2, seed=0)
PROMPT = [1, 17, 33, 100, 3]
STEPS = 20
IDS = np.array([1, 17, 33, 100, 3, 9, 200, 45, 7, 8, 250, 0], dtype=np.int64)
CLASSES = {"qwen3_moe": Qwen3Moe, "gemma4_moe": Gemma4}


# ---------------------------------------------------------------------- tiny HF models
def hf_config(family: str, **over):
    if family == "qwen3_moe":
        # 3 layers, the middle one dense (mlp_only_layers); 8 experts, top 2, renormalised
        kw = dict(COMMON, num_hidden_layers=3, head_dim=32, rope_theta=1_000_000.0, num_experts=8,
                  num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True, mlp_only_layers=[1],
                  tie_word_embeddings=False)
        return tf.Qwen3MoeConfig(**{**kw, **over}, experts_implementation="eager")
    if family == "gemma4_moe":
        # local, global, local, global; window 4 (a 5-token prompt crosses it); global layers with
        # their own head_dim (32 vs 16), one KV head and values = keys (attention_k_eq_v), and
        # proportional RoPE (a quarter of the pairs rotate)
        kw = dict(COMMON, num_hidden_layers=4, head_dim=16, global_head_dim=32, num_global_key_value_heads=1,
                  attention_k_eq_v=True, sliding_window=4, layer_types=["sliding_attention", "full_attention"] * 2,
                  enable_moe_block=True, num_experts=8, top_k_experts=2, moe_intermediate_size=32,
                  hidden_size_per_layer_input=0, final_logit_softcapping=30.0)
        return tf.Gemma4TextConfig(**{**kw, **over}, experts_implementation="eager")
    raise ValueError(family)


def hf_model(family: str, seed: int = 0, **over):
    """(HF model in float64, its config dict, state_dict as float32 numpy).  Weights are redrawn
    with a wide spread (std 0.15) so routing and attention are far from uniform; norm weights,
    router scales and layer scalars around 1 (Gemma 4's norms multiply by w, not 1 + w)."""
    cfg = hf_config(family, **over)
    torch.manual_seed(seed)
    model = (tf.Qwen3MoeForCausalLM if family == "qwen3_moe" else tf.Gemma4ForCausalLM)(cfg).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            around_one = "norm" in name or name.endswith("scale")
            p.copy_((1.0 if around_one else 0.0) + (0.2 if around_one else 0.15) * torch.randn(p.shape, generator=gen))
        for name, buf in model.named_buffers():
            if name.endswith("layer_scalar"):
                buf.copy_(1.0 + 0.2 * torch.randn(buf.shape, generator=gen))
    model = model.double()
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    return model, cfg.to_dict(), sd


_MODELS: dict = {}


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """The reference models are tiny: torch's thread pool only contends with whatever else runs
    on the machine (20 float64 Gemma 4 steps: 0.8 s on one thread, 12 s on two busy cores)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def setup(family: str):
    if family not in _MODELS:
        hf, cfg, sd = hf_model(family)
        _MODELS[family] = hf, CLASSES[family].from_hf_config(cfg), sd
    return _MODELS[family]


def all_logits(model, weights, backend="reference", ids=IDS):
    """The prefill program's logits at every position of ``ids``."""
    prog = compile_model(model, "prefill", backend, SEARCH, all_logits=True)
    return prog({"input_ids": ids, "positions": np.arange(len(ids)), **model.check_weights(weights)})["logits"]


def hf_greedy(hf, prompt, steps):
    with torch.no_grad():
        out = hf.generate(torch.tensor([prompt]), max_new_tokens=steps, do_sample=False, eos_token_id=None,
                          pad_token_id=0)
    return out[0, len(prompt):].tolist()


def greedy_loop(model, weights, backend, prompt, steps):
    """Greedy decoding with the model's compiled prefill and decode programs and a KV cache kept
    per layer in the layer's own shape (Gemma 4's global layers differ); sliding layers get their
    last W - 1 rows, as the Generator does.  Returns (new tokens, logits of every step)."""
    w = model.check_weights(weights)
    prefill = compile_model(model, "prefill", backend, SEARCH)
    decode = compile_model(model, "decode", backend, SEARCH)
    out = prefill({"input_ids": np.asarray(prompt, np.int64), "positions": np.arange(len(prompt)), **w})
    caches = empty_caches(model, len(prompt) + steps)
    store_prefill(caches, out, len(prompt))
    logits, toks = [out["logits"][-1]], [int(np.argmax(out["logits"][-1]))]
    p = len(prompt)
    for _ in range(steps - 1):
        out = decode_chunk(decode, w, caches, [toks[-1]], p)
        p += 1
        logits.append(out["logits"][-1])
        toks.append(int(np.argmax(logits[-1])))
    return toks, np.stack(logits)


# ---------------------------------------------------------------------- routers by hand
def _run(graph_fn, backend="reference", **inputs):
    b = Builder()
    outs = graph_fn(b)
    for name, t in outs.items():
        b.graph.output(name, t)
    prog = b.graph.compile(backend="reference") if backend == "reference" else b.graph.compile(backend=backend,
                                                                                                 search=SEARCH)
    return prog(inputs)


@pytest.mark.parametrize("normalize", [True, False])
def test_topk_router_by_hand(normalize):
    """Gate weight = identity, so the router logits are the inputs themselves.  Row 0: logits
    (1, 3, 2, 0) -> experts 1, 2 with softmax probabilities e^3/Z, e^2/Z (Z = e^0+e^1+e^2+e^3);
    renormalised: 1/(1+e^-1), e^-1/(1+e^-1).  Row 1: (0.5, -1, 2, 2.5) -> experts 3, 2."""
    x = np.array([[1.0, 3.0, 2.0, 0.0], [0.5, -1.0, 2.0, 2.5]], np.float32)

    def graph(b):
        w, idx = TopKRouter("gate", 4, 4, 2, normalize).forward(b, b.graph.input("x", ("s", 4)))
        return {"w": w, "idx": idx}

    out = _run(graph, x=x, **{"gate.weight": np.eye(4, dtype=np.float32)})
    np.testing.assert_array_equal(out["idx"], [[1, 2], [3, 2]])
    e = np.e
    if normalize:
        want = [[1 / (1 + e ** -1), e ** -1 / (1 + e ** -1)], [1 / (1 + e ** -0.5), e ** -0.5 / (1 + e ** -0.5)]]
    else:
        z0, z1 = 1 + e + e ** 2 + e ** 3, e ** 0.5 + e ** -1 + e ** 2 + e ** 2.5
        want = [[e ** 3 / z0, e ** 2 / z0], [e ** 2.5 / z1, e ** 2 / z1]]
    np.testing.assert_allclose(out["w"], want, rtol=1e-6)


def test_gemma4_router_by_hand():
    """x = (2, 2, 2, 2): its RMS is 2, so the weightless norm gives ones; times scale (2, 6, 4, 0)
    and 4^-0.5: logits (1, 3, 2, 0) (proj = identity) -> experts 1, 2 with renormalised weights
    1/(1+e^-1), e^-1/(1+e^-1), times their per-expert scales 2.0 and 0.5."""
    x = np.full((1, 4), 2.0, np.float32)

    def graph(b):
        w, idx = Gemma4Router("router", 4, 4, 2, eps=0.0).forward(b, b.graph.input("x", ("s", 4)))
        return {"w": w, "idx": idx}

    weights = {"router.proj.weight": np.eye(4, dtype=np.float32),
               "router.scale": np.array([2.0, 6.0, 4.0, 0.0], np.float32),
               "router.per_expert_scale": np.array([9.0, 2.0, 0.5, 9.0], np.float32)}
    out = _run(graph, x=x, **weights)
    np.testing.assert_array_equal(out["idx"], [[1, 2]])
    e = np.e
    np.testing.assert_allclose(out["w"], [[2.0 / (1 + e ** -1), 0.5 * e ** -1 / (1 + e ** -1)]], rtol=1e-6)


# ---------------------------------------------------------------------- experts against a loop
def _experts_reference(x, w, idx, gate_up, down, act):
    out = np.zeros(x.shape, np.float64)
    inter = down.shape[2]
    for t in range(x.shape[0]):
        for j in range(idx.shape[1]):
            e = idx[t, j]
            gu = gate_up[e].astype(np.float64) @ x[t]
            g, u = gu[:inter], gu[inter:]
            if act == "silu":
                a = g / (1 + np.exp(-g)) * u
            else:
                a = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3))) * u
            out[t] += w[t, j] * (down[e].astype(np.float64) @ a)
    return out


@pytest.mark.parametrize("backend", ["reference", "cpu", "native"])
@pytest.mark.parametrize("mode", ["gather", "dense"])
@pytest.mark.parametrize("act", ["silu", "gelu_pytorch_tanh"])
def test_experts_match_loop(mode, backend, act):
    """Both formulations against a per-token loop over the chosen experts (a token's k experts in
    any order; repeated experts across tokens), for 1 and 5 tokens."""
    E, inter, H, k = 6, 8, 16, 3
    rng = np.random.default_rng(3)
    gate_up = (rng.standard_normal((E, 2 * inter, H)) * 0.4).astype(np.float32)
    down = (rng.standard_normal((E, H, inter)) * 0.4).astype(np.float32)
    x = rng.standard_normal((5, H)).astype(np.float32)
    idx = np.array([[4, 0, 2], [1, 5, 3], [2, 4, 0], [5, 1, 2], [0, 3, 4]], np.int64)
    w = rng.uniform(0.1, 1.0, (5, k)).astype(np.float32)

    def graph(b):
        g = b.graph
        ex = Experts("ex", H, inter, E, act)
        return {"y": ex.forward(b, g.input("x", ("s", H)), g.input("w", ("s", k)),
                                g.input("idx", ("s", k), ls.int64), mode)}

    b = Builder()
    for name, t in graph(b).items():
        b.graph.output(name, t)
    prog = b.graph.compile(backend="reference") if backend == "reference" else b.graph.compile(
        backend=backend, search=SEARCH)
    for n in (1, 5):
        out = prog({"x": x[:n], "w": w[:n], "idx": idx[:n], "ex.gate_up_proj": gate_up, "ex.down_proj": down})
        np.testing.assert_allclose(out["y"], _experts_reference(x[:n], w[:n], idx[:n], gate_up, down, act),
                                   atol=2e-5, rtol=0)


@pytest.mark.parametrize("family", ["qwen3_moe", "gemma4_moe"])
def test_auto_prompts_gather_the_experts_on_native_and_run_them_densely_elsewhere(family):
    """``moe_prefill="auto"`` (the default): the compile pipeline builds a prompt's experts
    gathered where a host backend reads the chosen rows in place (native's GatherMatmul, grouped
    by expert), dense on the cpu backend (whose Gather would copy each token's experts) and on a
    device; a graph built directly is dense unless asked; a bad mode names the choices."""
    import dataclasses

    _, model, _ = setup(family)
    assert model.config.moe_prefill == "auto"
    for backend, want in (("native", "gather"), ("cpu", "dense")):
        if backend == "native" and not ls.backends.get_backend("native").available():
            continue
        compile_model(model, "prefill", backend, SEARCH)
        gathers = [k for k in model._graphs if k[0] == "prefill" and k[-1] == want]
        assert gathers, (backend, list(model._graphs))
    experts = lambda g: sum(1 for i in g.reachable() if g.nodes[i].op.name == "Gather")  # noqa: E731
    if family == "qwen3_moe":  # (a paged step's rows are built as a prompt's: the same choice)
        assert experts(model.paged_graph(moe_prefill="gather")) > experts(model.paged_graph())
    # gathered: an index_select of gate_up and of down per sparse layer beside the embedding's
    assert experts(model.build_graph("prefill", moe_prefill="gather")) > experts(model.build_graph("prefill"))
    with pytest.raises(ValueError, match="auto"):
        type(model.config)(**{**{f.name: getattr(model.config, f.name) for f in dataclasses.fields(model.config)},
                              "moe_prefill": "grouped"})
    with pytest.raises(ValueError, match="decode mode"):
        dataclasses.replace(model.config, moe_decode="auto")


# ---------------------------------------------------------------------- models against HF
@pytest.mark.parametrize("family,backend", [("qwen3_moe", "cpu"), ("gemma4_moe", "cpu"), ("qwen3_moe", "reference"),
                                            ("gemma4_moe", "reference"), ("qwen3_moe", "native"),
                                            ("gemma4_moe", "native")])
def test_prefill_logits_match_hf(family, backend):
    hf, model, sd = setup(family)
    logits = all_logits(model, sd, backend)
    ref = hf_logits(hf, IDS)
    assert logits.shape == (len(IDS), 256)
    assert np.abs(ref).max() > 2.0  # logits large enough for the tolerance to mean something
    np.testing.assert_allclose(logits, ref, atol=1e-4, rtol=0)


@pytest.mark.parametrize("family,backend", [("qwen3_moe", "cpu"), ("gemma4_moe", "cpu"), ("gemma4_moe", "reference"),
                                            ("qwen3_moe", "native"), ("gemma4_moe", "native")])
def test_greedy_decode_matches_hf(family, backend):
    """STEPS greedy tokens through the KV cache (prefill: dense experts; decode: gathered ones)
    equal HF's cached generation, and every step's logits are within 1e-4 of HF recomputing the
    whole sequence."""
    hf, model, sd = setup(family)
    toks, logits = greedy_loop(model, sd, backend, PROMPT, STEPS)
    assert toks == hf_greedy(hf, PROMPT, STEPS)
    ref = hf_logits(hf, PROMPT + toks)[len(PROMPT) - 1:-1]
    np.testing.assert_allclose(logits, ref, atol=1e-4, rtol=0)
    assert len(set(toks)) > 3  # not a degenerate repetition


@pytest.mark.parametrize("family", ["qwen3_moe", "gemma4_moe"])
def test_generator_matches_hf(family):
    """generate.py's Generator (cpu) runs the MoE families: tokens and logits as HF."""
    hf, model, sd = setup(family)
    res = Generator(model, sd, backend="cpu", search=SEARCH).generate(PROMPT, STEPS, stop_ids=(), keep_logits=True)
    assert res.new_ids == hf_greedy(hf, PROMPT, STEPS) and res.stop_reason == "max_tokens"
    ref = hf_logits(hf, res.ids)[len(PROMPT) - 1:-1]
    np.testing.assert_allclose(np.stack(res.logits), ref, atol=1e-4, rtol=0)


@pytest.mark.parametrize("family", ["qwen3_moe", "gemma4_moe"])
def test_chunked_decode_with_cache(family):
    """The decode graph with s > 1 new tokens after a cache: several tokens' gathered experts at
    once; Gemma's sliding layers get only their last W - 1 cached rows."""
    hf, model, sd = setup(family)
    w = model.check_weights(sd)
    ref = hf_logits(hf, IDS)
    prefill = compile_model(model, "prefill", "reference", all_logits=True)
    decode = compile_model(model, "decode", "reference", all_logits=True)
    caches = empty_caches(model, len(IDS))
    store_prefill(caches, prefill({"input_ids": IDS[:3], "positions": np.arange(3), **w}), 3)
    n = 3
    for chunk in (4, 1, 3, 1):
        out = decode_chunk(decode, w, caches, IDS[n:n + chunk], n)
        np.testing.assert_allclose(out["logits"], ref[n:n + chunk], atol=1e-4, rtol=0)
        n += chunk


def _consumers(g):
    users: dict[int, list] = {}
    for node in g.nodes:
        for src, _ in node.inputs:
            users.setdefault(src, []).append(node)
    return users


@pytest.mark.parametrize("family", ["qwen3_moe", "gemma4_moe"])
def test_decode_gathers_only_chosen_experts(family):
    """In the decode graph the stacked expert weights are read only by Gather (the k chosen
    experts' rows); the prefill graph runs them densely (no Gather on them)."""
    _, model, _ = setup(family)
    for mode, want_gather in (("decode", True), ("prefill", False)):
        g = model.build_graph(mode)
        users = _consumers(g)
        names = [n for n in g.inputs if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]
        assert len(names) == 2 * (2 if family == "qwen3_moe" else 4)
        for name in names:
            ops = {u.op.name for u in users[g.inputs[name]]}
            assert (ops == {"Gather"}) if want_gather else ("Gather" not in ops), (mode, name, ops)


def test_gemma4_cache_shapes():
    """Sliding layers cache [M, 2, 16]; global layers [M, 1, 32] (own head_dim, one KV head)."""
    _, model, _ = setup("gemma4_moe")
    g = model.decode_graph()
    shapes = {n: tuple(str(d) for d in g.nodes[i].shape) for n, i in g.inputs.items() if n.startswith("cache.")}
    assert shapes["cache.0.k"] == ("M", "2", "16") and shapes["cache.1.v"] == ("M", "1", "32")
    assert [model.kv_shape(i) for i in range(4)] == [(2, 16), (1, 32), (2, 16), (1, 32)]
    assert "model.layers.1.self_attn.v_proj.weight" not in model.param_shapes()  # values = keys there
    assert "model.layers.0.self_attn.v_proj.weight" in model.param_shapes()


@pytest.mark.parametrize("family,change", [("qwen3_moe", "top_k"), ("gemma4_moe", "top_k"),
                                           ("gemma4_moe", "per_expert_scale"), ("gemma4_moe", "rope")])
def test_the_tests_can_fail(family, change):
    """The tiny models are sensitive to what is being tested: routing to a different number of
    experts, ignoring Gemma's per-expert scales, or rotating all of a global head changes the
    logits far beyond the tolerance."""
    import dataclasses

    from lightspeed.models.gemma4 import ProportionalRotaryEmbedding

    hf, model, sd = setup(family)
    sd = dict(sd)
    cfg = model.config
    if change == "top_k":
        key = "num_experts_per_tok" if family == "qwen3_moe" else "top_k_experts"
        cfg = dataclasses.replace(cfg, **{key: 3})
    elif change == "rope":
        full = cfg.rope["full_attention"]
        cfg = dataclasses.replace(cfg, rope={**cfg.rope, "full_attention": dataclasses.replace(
            full, partial_rotary_factor=1.0)})
        assert isinstance(full, ProportionalRotaryEmbedding)
    else:
        for k in sd:
            if k.endswith("per_expert_scale"):
                sd[k] = np.ones_like(sd[k])
    other = type(model)(cfg)
    assert np.abs(all_logits(other, sd) - hf_logits(hf, IDS)).max() > 0.05


# ---------------------------------------------------------------------- weights and configs
def test_per_expert_checkpoint_weights_are_stacked_once():
    """Original Qwen3-MoE checkpoints store experts.{j}.gate_proj/up_proj/down_proj; binding
    stacks them into transformers 5's fused tensors, exactly."""
    _, model, sd = setup("qwen3_moe")
    split = {k: v for k, v in sd.items() if ".mlp.experts." not in k}
    for i in model.config.sparse_layers:
        p = f"model.layers.{i}.mlp.experts"
        gu, dn = sd[f"{p}.gate_up_proj"], sd[f"{p}.down_proj"]
        inter = dn.shape[2]
        for j in range(gu.shape[0]):
            split[f"{p}.{j}.gate_proj.weight"] = gu[j, :inter]
            split[f"{p}.{j}.up_proj.weight"] = gu[j, inter:]
            split[f"{p}.{j}.down_proj.weight"] = dn[j]
    got = model.check_weights(split)
    want = model.check_weights(sd)
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])
    assert fuse_expert_weights(sd, ["model.layers.0.mlp.experts"], 8) == sd  # already fused: unchanged


def test_gemma4_multimodal_checkpoint_names():
    """Gemma4ForConditionalGeneration checkpoints name the text weights model.language_model.*."""
    _, model, sd = setup("gemma4_moe")
    mm = {k.replace("model.", "model.language_model.", 1): v for k, v in sd.items()}
    mm["model.vision_tower.patch.weight"] = np.zeros(3, np.float32)
    got, want = model.check_weights(mm), model.check_weights(sd)
    assert got.keys() == want.keys() and all(np.array_equal(got[k], want[k]) for k in want)


def test_qwen3_moe_config():
    """Sparse layers follow mlp_only_layers and decoder_sparse_step; config.json's num_experts and
    to_dict()'s num_local_experts both work."""
    _, cfg, _ = hf_model("qwen3_moe")
    c = Qwen3Moe.config_from_hf(cfg)
    assert c.sparse_layers == (0, 2) and c.num_experts == 8 and c.num_experts_per_tok == 2 and c.norm_topk_prob
    raw = {k: v for k, v in cfg.items() if k != "num_local_experts"}
    raw.update(num_experts=8, num_hidden_layers=6, mlp_only_layers=[], decoder_sparse_step=2)
    assert Qwen3Moe.config_from_hf(raw).sparse_layers == (1, 3, 5)
    dense = Qwen3Moe.from_hf_config({**raw, "num_experts": 0})
    assert dense.config.sparse_layers == () and "mlp.experts" not in " ".join(dense.param_shapes())


def test_gemma4_config_forms():
    """transformers 5's to_dict() (per_layer_config) and a checkpoint's config.json
    (global_head_dim, num_global_key_value_heads) give the same model; PLE and KV sharing are
    refused."""
    _, cfg, _ = hf_model("gemma4_moe")
    a = Gemma4.config_from_hf(cfg)
    raw = {k: v for k, v in cfg.items() if k != "per_layer_config"}
    raw.update(global_head_dim=32, num_global_key_value_heads=1)
    b = Gemma4.config_from_hf(raw)
    assert repr(a) == repr(b)
    assert a.layer_head_dims == (16, 32, 16, 32) and a.layer_kv_heads == (2, 1, 2, 1)
    assert a.rope["full_attention"].inv_freq()[4:].tolist() == [0.0] * 12  # 4 of 16 pairs rotate
    wrapped = Gemma4.from_hf_config({"model_type": "gemma4", "text_config": cfg})  # multimodal wrapper
    assert repr(wrapped.config) == repr(a)
    with pytest.raises(UnsupportedError, match="per-layer input"):
        Gemma4.config_from_hf({**cfg, "hidden_size_per_layer_input": 256})
    with pytest.raises(UnsupportedError, match="KV sharing"):
        Gemma4.config_from_hf({**cfg, "num_kv_shared_layers": 2})


def test_gemma4_dense_variant_matches_hf():
    """enable_moe_block=False: the same structure without experts (dense Gemma 4 configs)."""
    hf, cfg, sd = hf_model("gemma4_moe", enable_moe_block=False)
    model = Gemma4.from_hf_config(cfg)
    assert not any("experts" in n or "router" in n for n in model.param_shapes())
    np.testing.assert_allclose(all_logits(model, sd), hf_logits(hf, IDS), atol=1e-4, rtol=0)


def test_registry():
    from lightspeed.models import family_of, from_hf_config, get

    assert get("qwen3_moe") is Qwen3Moe and get("gemma4_moe") is Gemma4
    assert family_of({"model_type": "qwen3_moe"}) == "qwen3_moe"
    assert family_of({"model_type": "gemma4_text"}) == "gemma4_moe"
    assert isinstance(from_hf_config(hf_model("qwen3_moe")[1]), Qwen3Moe)


@pytest.mark.skipif(not ls.backends.get_backend("native").available(), reason="no C compiler")
def test_a_native_paged_moe_step_matches_batch1_and_is_batch_invariant():
    """lightspeed serve's paged step over a mixture-of-experts model on native (its experts
    gathered and grouped by expert, `moe_prefill="auto"`): three sequences together give each
    one's batch-1 reference logits, and each row's logits are bit for bit the same alone."""
    from lightspeed.models.batch import PagedBatcher

    _, model, sd = setup("qwen3_moe")
    gen = Generator(model, sd, backend="reference")
    batcher = PagedBatcher(model, sd, backend="native", max_rows=12, chunk=5, max_context=64, pages=2)
    prompts = [[1, 17, 33, 100, 3, 9, 200], [5], [7, 8, 250, 45, 19, 22, 31, 60, 2, 11, 13]]
    together = batcher.generate(prompts, 6, keep_logits=True, stop_ids=())
    for p, t in zip(prompts, together):
        want = gen.generate(p, 6, keep_logits=True, stop_ids=())
        ref = np.array(want.logits)
        assert t.new_ids == want.new_ids
        np.testing.assert_allclose(np.array(t.logits), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
        alone = batcher.generate([p], 6, keep_logits=True, stop_ids=())[0]
        assert np.array_equal(np.array(alone.logits), np.array(t.logits))
