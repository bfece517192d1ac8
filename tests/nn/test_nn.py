"""lightspeed.nn modules against Hugging Face / PyTorch modules (float64) and a numpy attention."""

from __future__ import annotations

import numpy as np
import pytest

import lightspeed as ls
from lightspeed import nn
from lightspeed.errors import ShapeError, UnsupportedError

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

RNG = np.random.default_rng(0)


def run(build, inputs, backend="reference"):
    """Build a graph with ``build(builder, graph_inputs) -> tensor`` and run it on ``inputs``
    (float32 arrays; keys ``w:NAME`` are parameters)."""
    b = nn.Builder()
    xs = {k: b.graph.input(k, v.shape) for k, v in inputs.items() if not k.startswith("w:")}
    b.graph.output("y", build(b, xs))
    params = {k[2:]: v for k, v in inputs.items() if k.startswith("w:")}
    search = ls.SearchOptions(budget=2, seed=0) if backend == "cpu" else None
    prog = b.graph.compile(backend=backend, search=search) if search else b.graph.compile(backend=backend)
    return prog({**{k: v for k, v in inputs.items() if not k.startswith("w:")}, **params})["y"]


def f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("unit_offset", [False, True])
@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_rms_norm_matches_hf(unit_offset, backend):
    x, w = f32(5, 3, 16), f32(16, scale=0.5)
    mod = nn.RMSNorm("n", 16, eps=1e-6, unit_offset=unit_offset)
    # a permuted view in, the same layout out
    y = run(lambda b, i: mod.forward(b, i["x"].permute(1, 0, 2)), {"x": x, "w:n.weight": w}, backend)
    ref_mod = (tf.models.gemma3.modeling_gemma3.Gemma3RMSNorm(16, 1e-6) if unit_offset
               else tf.models.llama.modeling_llama.LlamaRMSNorm(16, 1e-6)).double()
    with torch.no_grad():
        ref_mod.weight.copy_(torch.from_numpy(w))
        ref = ref_mod(torch.from_numpy(x).double().permute(1, 0, 2)).numpy()
    np.testing.assert_allclose(y, ref, atol=1e-5, rtol=1e-5)
    assert mod.param_shapes() == {"n.weight": (16,)}


def test_layer_norm_linear_embedding():
    x, w, bias = f32(4, 8), f32(8), f32(8)
    ln = nn.LayerNorm("ln", 8, eps=1e-5)
    y = run(lambda b, i: ln.forward(b, i["x"]), {"x": x, "w:ln.weight": w, "w:ln.bias": bias})
    ref = torch.nn.functional.layer_norm(torch.from_numpy(x).double(), (8,), torch.from_numpy(w).double(),
                                         torch.from_numpy(bias).double(), 1e-5).numpy()
    np.testing.assert_allclose(y, ref, atol=1e-5)
    lw, lb = f32(6, 8), f32(6)
    fc = nn.Linear("fc", 8, 6, bias=True)
    y = run(lambda b, i: fc.forward(b, i["x"]), {"x": x, "w:fc.weight": lw, "w:fc.bias": lb})
    np.testing.assert_allclose(y, x.astype(np.float64) @ lw.T + lb, atol=1e-5)
    table = f32(10, 4)
    ids = np.array([3, 0, 9, 3], dtype=np.int64)
    b = nn.Builder()
    emb = nn.Embedding("emb", 10, 4, scale=2.0)
    b.graph.output("y", emb.forward(b, b.graph.input("ids", ("s",), ls.int64)))
    y = b.graph.compile(backend="reference")({"ids": ids, "emb.weight": table})["y"]
    np.testing.assert_array_equal(y, table[ids] * 2)


def test_linear_rejects_wrong_width():
    b = nn.Builder()
    with pytest.raises(ShapeError, match="fc"):
        nn.Linear("fc", 8, 6).forward(b, b.graph.input("x", (2, 7)))


@pytest.mark.parametrize("params", [
    {"rope_type": "default", "rope_theta": 10000.0},
    {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0},
    {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8192},
])
def test_rope_frequencies_match_hf(params):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = tf.LlamaConfig(hidden_size=128, num_attention_heads=2, rope_parameters=dict(params),
                         max_position_embeddings=131072)
    kind = params["rope_type"]
    fn = tf.models.llama.modeling_llama.LlamaRotaryEmbedding.compute_default_rope_parameters \
        if kind == "default" else ROPE_INIT_FUNCTIONS[kind]
    want, scaling = fn(cfg)
    rope = nn.rope_from_hf(cfg.to_dict(), 64)
    assert scaling == 1.0 and rope.rope_type == kind
    np.testing.assert_allclose(rope.inv_freq(), want.numpy(), rtol=2e-7)


def test_rope_rotation_matches_hf_at_large_positions():
    rope = nn.RotaryEmbedding(64, theta=10000.0)
    pos = np.array([0, 1, 7, 1000, 4095, 8191], dtype=np.int32)
    x = f32(2, len(pos), 64)  # [heads, s, d]: sequence axis 1

    def build(b, i):
        return rope.apply(i["x"], rope.tables(b, i["pos"]), seq_axis=1)

    b = nn.Builder()
    xin, pin = b.graph.input("x", x.shape), b.graph.input("pos", pos.shape, ls.int32)
    b.graph.output("y", build(b, {"x": xin, "pos": pin}))
    y = b.graph.compile(backend="reference")({"x": x, "pos": pos})["y"]
    # HF: float32 angles, then cos/sin (here in float64 of the same float32 angles)
    freqs = pos.astype(np.float32)[:, None] * rope.inv_freq()[None, :]
    emb = np.concatenate([freqs, freqs], -1).astype(np.float64)
    cos, sin = torch.from_numpy(np.cos(emb)), torch.from_numpy(np.sin(emb))
    q = torch.from_numpy(x).double()[None]
    want, _ = tf.models.llama.modeling_llama.apply_rotary_pos_emb(q, q, cos[None], sin[None])
    np.testing.assert_allclose(y, want[0].numpy(), atol=1e-5)


def test_rope_rejects_unknown_type():
    with pytest.raises(UnsupportedError, match="yarn"):
        nn.rope_from_hf({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}, "rope_theta": 1e4}, 64)


@pytest.mark.parametrize("act", ["silu", "gelu_pytorch_tanh"])
@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_gated_mlp_matches_hf(act, backend):
    from transformers.models.gemma3.modeling_gemma3 import Gemma3MLP
    from transformers.models.llama.modeling_llama import LlamaMLP

    x = f32(5, 16, scale=2.0)  # large enough to reach both tails of the activation
    ws = {"w:mlp.gate_proj.weight": f32(32, 16, scale=0.5), "w:mlp.up_proj.weight": f32(32, 16, scale=0.5),
          "w:mlp.down_proj.weight": f32(16, 32, scale=0.5)}
    mlp = nn.GatedMLP("mlp", 16, 32, act)
    y = run(lambda b, i: mlp.forward(b, i["x"]), {"x": x, **ws}, backend)
    if act == "silu":
        ref_mod = LlamaMLP(tf.LlamaConfig(hidden_size=16, intermediate_size=32, num_attention_heads=2))
    else:
        ref_mod = Gemma3MLP(tf.Gemma3TextConfig(hidden_size=16, intermediate_size=32, num_attention_heads=2,
                                                hidden_activation=act))
    ref_mod = ref_mod.double()
    with torch.no_grad():
        for k, v in ws.items():
            ref_mod.get_parameter(k[len("w:mlp."):]).copy_(torch.from_numpy(v))
        ref = ref_mod(torch.from_numpy(x).double()).numpy()
    np.testing.assert_allclose(y, ref, atol=2e-5, rtol=1e-5)


def naive_attention(q, k, v, q_pos, k_pos, window=None, softcap=None):
    """float64 reference: q [H, s, d] (unscaled), k/v [T, n_kv, d], absolute positions."""
    H, s, d = q.shape
    n_kv = k.shape[1]
    out = np.zeros((s, H, d))
    for h in range(H):
        kh = k[:, h // (H // n_kv)].astype(np.float64)
        vh = v[:, h // (H // n_kv)].astype(np.float64)
        sc = q[h].astype(np.float64) @ kh.T * d ** -0.5
        if softcap:
            sc = np.tanh(sc / softcap) * softcap
        ok = k_pos[None, :] <= q_pos[:, None]
        if window:
            ok &= q_pos[:, None] - k_pos[None, :] < window
        sc = np.where(ok, sc, -np.inf)
        p = np.exp(sc - sc.max(-1, keepdims=True))
        out[:, h] = (p / p.sum(-1, keepdims=True)) @ vh
    return out.reshape(s, H * d)


@pytest.mark.parametrize("past,s,window,rows,softcap", [
    (0, 6, None, None, None),   # prefill, causal
    (0, 6, 3, None, None),      # prefill, sliding window
    (7, 1, None, None, None),   # decode step, whole cache
    (7, 3, None, None, None),   # chunk after a cache
    (9, 3, 4, 3, None),         # sliding layer given its last W - 1 rows
    (9, 3, 4, None, 20.0),      # sliding layer given the whole cache; soft-capped logits
    (2, 3, 4, 2, None),         # cache shorter than the window
])
@pytest.mark.parametrize("backend", ["reference", "cpu"])
def test_attention_matches_naive(past, s, window, rows, softcap, backend):
    """A prefill's gqa_attention, and a cached step's softmax_attention over the cache rows it reads
    followed by its new rows (as Attention.forward builds it), against float64 by hand."""
    n_kv, g, d = 2, 3, 8
    q = f32(n_kv * g, s, d)
    kall, vall = f32(past + s, n_kv, d), f32(past + s, n_kv, d)
    lo = past - min(past, rows) if rows is not None else 0
    b = nn.Builder()
    G = b.graph
    step = nn.Step(b, G.input("pos", ("s",), ls.int64), "p" if past else None)
    qi = G.input("q", (n_kv * g, "s", d))
    kn, vn = G.input("k", ("s", n_kv, d)), G.input("v", ("s", n_kv, d))
    scale = d ** -0.5 * (1.4426950408889634 if softcap is None else 1.0)
    q4 = qi.reshape(n_kv, g, "s", d) * scale
    inputs = {"q": q, "k": kall[past:], "v": vall[past:], "pos": np.arange(past, past + s)}
    if past:
        L = "w" if rows is not None else "p"
        pk, pv = G.input("pk", (L, n_kv, d)), G.input("pv", (L, n_kv, d))
        inputs.update(pk=kall[lo:past], pv=vall[lo:past])
        keys, values = ls.concat([pk, kn], 0), ls.concat([pv, vn], 0)
        y = nn.softmax_attention(q4.permute(2, 0, 1, 3), keys.permute(1, 2, 0), values.permute(1, 0, 2),
                                 step.mask_cache(window, pk.shape[0]), softcap)
    else:
        y = nn.gqa_attention(q4, kn, vn, step.mask_new(window), softcap)
    G.output("y", y)
    search = ls.SearchOptions(budget=2, seed=0) if backend == "cpu" else None
    prog = G.compile(backend=backend, search=search) if search else G.compile(backend=backend)
    dims = {"p": past} if past and rows is None else {}  # with a window the cache rows are "w", from pk
    y = prog(inputs, dims=dims)["y"]
    k_pos = np.arange(lo, past + s)
    want = naive_attention(q, kall[lo:], vall[lo:], np.arange(past, past + s), k_pos, window, softcap)
    np.testing.assert_allclose(y, want, atol=2e-5)


def test_attention_module_param_names():
    att = nn.Attention("model.layers.3.self_attn", 64, 4, 2, 16, bias=(True, True, True, False),
                       qk_norm=lambda p, d: nn.RMSNorm(p, d))
    assert att.param_shapes() == {
        "model.layers.3.self_attn.q_proj.weight": (64, 64), "model.layers.3.self_attn.q_proj.bias": (64,),
        "model.layers.3.self_attn.k_proj.weight": (32, 64), "model.layers.3.self_attn.k_proj.bias": (32,),
        "model.layers.3.self_attn.v_proj.weight": (32, 64), "model.layers.3.self_attn.v_proj.bias": (32,),
        "model.layers.3.self_attn.o_proj.weight": (64, 64),
        "model.layers.3.self_attn.q_norm.weight": (16,), "model.layers.3.self_attn.k_norm.weight": (16,)}
    with pytest.raises(ShapeError, match="multiple"):
        nn.Attention("a", 64, 3, 2, 16)


def test_builder_declares_each_parameter_once():
    b = nn.Builder()
    lin = nn.Linear("fc", 4, 4)
    x = b.graph.input("x", (2, 4))
    lin.forward(b, lin.forward(b, x))
    assert list(b.graph.inputs) == ["x", "fc.weight"]
    with pytest.raises(ShapeError, match="fc.weight"):
        b.param("fc.weight", (4, 5))
