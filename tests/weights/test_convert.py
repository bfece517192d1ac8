"""GGUF -> Hugging Face: tiny random transformers models written to GGUF the way llama.cpp's converter
writes them (names, Q/K row permutation, Gemma's +1 norms, metadata keys), loaded back with
`lightspeed.weights.load`, must give the original state_dict and the same logits."""

from __future__ import annotations

import numpy as np
import pytest

from lightspeed.models.families.llama import permute_qk, unpermute_qk
from lightspeed.weights import WeightError, load

from .gguf_helpers import gguf_name, permute_like_llama_cpp, write_gguf

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def test_unpermute_inverts_llama_cpp_permutation():
    rng = np.random.default_rng(0)
    for n_head, head_dim, cols in ((4, 8, 5), (3, 64, 1), (1, 2, 3)):
        w = rng.standard_normal((n_head * head_dim, cols)).astype(np.float32)
        p = permute_like_llama_cpp(w, n_head)
        assert not np.array_equal(p, w) or head_dim == 2
        np.testing.assert_array_equal(unpermute_qk(p, n_head), w)
        np.testing.assert_array_equal(permute_qk(w, n_head), p)
    # one head of 8: GGUF interleaves the two rotated halves (0 4 1 5 2 6 3 7)
    np.testing.assert_array_equal(permute_qk(np.arange(8), 1), [0, 4, 1, 5, 2, 6, 3, 7])


def _randomise(model, seed):
    # Random values everywhere, norms included (HF initialises Gemma's norm weights to 0, which would hide
    # a missing -1).
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    return model


def _llama_to_gguf(path, model, cfg):
    sd = {k: v.numpy() for k, v in model.state_dict().items() if k != "lm_head.weight" or not cfg.tie_word_embeddings}
    tensors = {}
    for k, v in sd.items():
        if k.endswith("q_proj.weight"):
            v = permute_like_llama_cpp(v, cfg.num_attention_heads)
        elif k.endswith("k_proj.weight"):
            v = permute_like_llama_cpp(v, cfg.num_key_value_heads)
        tensors[gguf_name(k, "llama")] = v
    kv = {"llama.block_count": cfg.num_hidden_layers, "llama.context_length": cfg.max_position_embeddings,
          "llama.embedding_length": cfg.hidden_size, "llama.feed_forward_length": cfg.intermediate_size,
          "llama.attention.head_count": cfg.num_attention_heads,
          "llama.attention.head_count_kv": cfg.num_key_value_heads, "llama.rope.freq_base": 50000.0,
          "llama.attention.layer_norm_rms_epsilon": 1e-5, "llama.vocab_size": cfg.vocab_size,
          "llama.rope.dimension_count": cfg.head_dim, "tokenizer.ggml.bos_token_id": 1,
          "tokenizer.ggml.eos_token_id": 2}
    return write_gguf(path, "llama", kv, tensors), sd


def _logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].numpy()


def _rebuild(w):
    cfg = transformers.AutoConfig.for_model(**w.config)
    model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    res = model.load_state_dict({k: torch.from_numpy(v) for k, v in w.tensors.items()}, strict=False)
    assert not res.unexpected_keys
    assert set(res.missing_keys) <= ({"lm_head.weight"} if w.config["tie_word_embeddings"] else set())
    return model


@pytest.mark.parametrize("tied", [True, False])
def test_llama_gguf_roundtrip(tmp_path, tied):
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                   rope_theta=50000.0, rms_norm_eps=1e-5, tie_word_embeddings=tied)
    torch.manual_seed(0)
    model = _randomise(transformers.LlamaForCausalLM(cfg).eval(), 0)
    path, sd = _llama_to_gguf(tmp_path / "tiny.gguf", model, cfg)
    w = load(path, progress=False)
    assert w.config["model_type"] == "llama" and w.config["tie_word_embeddings"] is tied
    assert w.config["rope_theta"] == 50000.0 and w.config["head_dim"] == 16
    assert set(w.tensors) == set(sd)
    for k, v in sd.items():
        np.testing.assert_array_equal(w.tensors[k], v, err_msg=k)
        assert w.tensors[k].dtype == np.float32
    ids = [3, 17, 5, 90, 41, 8, 8, 60]
    np.testing.assert_allclose(_logits(_rebuild(w), ids), _logits(model, ids), rtol=1e-5, atol=1e-5)


def test_gemma3_gguf_roundtrip(tmp_path):
    layer_types = ["sliding_attention"] * 5 + ["full_attention"] + ["sliding_attention"]
    cfg = transformers.Gemma3TextConfig(
        vocab_size=80, hidden_size=32, intermediate_size=64, num_hidden_layers=7, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16, sliding_window=4, layer_types=layer_types,
        rope_theta=1e6, rope_local_base_freq=10000.0, rms_norm_eps=1e-6, max_position_embeddings=256)
    model = _randomise(transformers.Gemma3ForCausalLM(cfg).eval(), 1)
    sd = {k: v.numpy() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    # llama.cpp stores Gemma norm weights with HF's implicit +1 added.
    tensors = {gguf_name(k, "gemma3"): (v + 1 if k.endswith("norm.weight") else v) for k, v in sd.items()}
    kv = {"gemma3.block_count": 7, "gemma3.context_length": 256, "gemma3.embedding_length": 32,
          "gemma3.feed_forward_length": 64, "gemma3.attention.head_count": 2, "gemma3.attention.head_count_kv": 1,
          "gemma3.attention.key_length": 16, "gemma3.attention.value_length": 16, "gemma3.rope.freq_base": 1e6,
          "gemma3.attention.layer_norm_rms_epsilon": 1e-6, "gemma3.attention.sliding_window": 4,
          "tokenizer.ggml.tokens": [f"t{i}" for i in range(80)], "tokenizer.ggml.model": "llama"}
    path = write_gguf(tmp_path / "g.gguf", "gemma3", kv, tensors)
    w = load(path, progress=False, tokenizer=False)
    c = w.config
    assert c["model_type"] == "gemma3_text" and c["tie_word_embeddings"] and c["layer_types"] == layer_types
    assert (c["sliding_window"], c["query_pre_attn_scalar"], c["rope_local_base_freq"]) == (4, 16, 10000.0)
    assert set(w.tensors) == set(sd)
    for k, v in sd.items():
        np.testing.assert_allclose(w.tensors[k], v, atol=1e-6, err_msg=k)
    ids = [2, 7, 9, 33, 1, 70, 12, 12, 5, 40]  # longer than the sliding window
    np.testing.assert_allclose(_logits(_rebuild(w), ids), _logits(model, ids), rtol=1e-4, atol=1e-4)


def test_llama3_rope_scaling_from_rope_freqs(tmp_path):
    cfg = transformers.LlamaConfig(vocab_size=32, hidden_size=64, intermediate_size=32, num_hidden_layers=1,
                                   num_attention_heads=1, num_key_value_heads=1, head_dim=64,
                                   tie_word_embeddings=True)
    model = transformers.LlamaForCausalLM(cfg)
    path, _ = _llama_to_gguf(tmp_path / "l3.gguf", model, cfg)
    # llama.cpp's rope_freqs for Llama 3.1 (factor 8, low 1, high 4, original context 8192), computed the
    # way its converter does.
    base, dim, factor = 50000.0, 64, 8.0
    freqs = 1.0 / (base ** (np.arange(0, dim, 2) / dim))
    out = []
    for f in freqs:
        wavelen = 2 * np.pi / f
        if wavelen < 8192 / 4:
            out.append(1.0)
        elif wavelen > 8192 / 1:
            out.append(factor)
        else:
            smooth = (8192 / wavelen - 1) / (4 - 1)
            out.append(1 / ((1 - smooth) / factor + smooth))
    import gguf

    from lightspeed.weights.gguf_file import GGUFFile

    with GGUFFile(path) as g:
        kv = {k: v for k, v in g.metadata.items() if not k.startswith("general.")}
        tensors = {n: g.read(n) for n in g.tensors}
    tensors["rope_freqs.weight"] = np.array(out, dtype=np.float32)
    kv = {k: (float(v) if isinstance(v, float) else v) for k, v in kv.items()}
    p2 = write_gguf(tmp_path / "l3b.gguf", "llama", kv, tensors)
    assert gguf.GGUFReader(p2).tensors  # written fine
    w = load(p2, progress=False)
    assert w.config["rope_scaling"] == {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    assert "rope_freqs.weight" not in w.tensors


def _tiny_llama_gguf(tmp_path, **edit):
    cfg = transformers.LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    model = transformers.LlamaForCausalLM(cfg)
    path, sd = _llama_to_gguf(tmp_path / "bad.gguf", model, cfg)
    from lightspeed.weights.gguf_file import GGUFFile

    with GGUFFile(path) as g:
        kv = {k: v for k, v in g.metadata.items() if not k.startswith("general.")}
        tensors = {n: g.read(n) for n in g.tensors}
    for name, value in edit.items():
        name = name.replace("__", ".")
        if value is None:
            del tensors[name]
        else:
            tensors[name] = value
    return write_gguf(tmp_path / "bad2.gguf", "llama", kv, tensors)


def test_wrong_shape_names_tensor(tmp_path):
    bad = np.zeros((48, 31), dtype=np.float32)  # ffn_gate should be (48, 32)
    path = _tiny_llama_gguf(tmp_path, blk__1__ffn_gate__weight=bad)
    with pytest.raises(WeightError, match=r"bad2\.gguf: tensor 'blk\.1\.ffn_gate\.weight' has shape \[48, 31\].*"
                                          r"implies \[48, 32\]"):
        load(path, progress=False)


def test_missing_and_unknown_tensor(tmp_path):
    path = _tiny_llama_gguf(tmp_path, blk__0__attn_v__weight=None)
    with pytest.raises(WeightError, match=r"bad2\.gguf: missing tensor 'model\.layers\.0\.self_attn\.v_proj"):
        load(path, progress=False)
    path = _tiny_llama_gguf(tmp_path, blk__0__mystery__weight=np.zeros(32, dtype=np.float32))
    with pytest.raises(WeightError, match=r"tensor 'blk\.0\.mystery\.weight' has no Hugging Face counterpart"):
        load(path, progress=False)


def test_unsupported_architecture(tmp_path):
    path = write_gguf(tmp_path / "x.gguf", "mamba", {}, {"a": np.zeros(32, dtype=np.float32)})
    with pytest.raises(WeightError, match=r"x\.gguf: GGUF architecture 'mamba' is not supported"):
        load(path, progress=False)
