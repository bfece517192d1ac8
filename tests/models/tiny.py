"""Tiny random Hugging Face models (the independent reference) and their weights as numpy.

Weights are redrawn with a fixed seed and a larger spread than HF's init (std 0.02 makes every
attention pattern nearly uniform, which would hide mask and RoPE mistakes); norm weights are
drawn around their neutral value.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def hf_config(family: str):
    if family == "llama":
        return tf.LlamaConfig(**COMMON, num_hidden_layers=2, rope_theta=10000.0, tie_word_embeddings=False)
    if family == "qwen3":
        return tf.Qwen3Config(**COMMON, num_hidden_layers=2, head_dim=32, rope_theta=1_000_000.0,
                              tie_word_embeddings=True)
    if family == "gemma3":
        # 4 layers: local, global, local, global; window 4 so that a 5-token prompt already crosses it
        return tf.Gemma3TextConfig(**COMMON, num_hidden_layers=4, head_dim=16, sliding_window=4,
                                   layer_types=["sliding_attention", "full_attention"] * 2,
                                   query_pre_attn_scalar=16,
                                   rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                                                       "rope_theta": 1_000_000.0},
                                                    "sliding_attention": {"rope_type": "default",
                                                                          "rope_theta": 10_000.0}})
    raise ValueError(family)


def hf_model(family: str, seed: int = 0):
    """(HF model in float64, its config dict, state_dict as float32 numpy)."""
    cfg = hf_config(family)
    torch.manual_seed(seed)
    model = getattr(tf, {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM",
                         "gemma3": "Gemma3ForCausalLM"}[family])(cfg).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:  # Gemma stores norm weights as offsets from 1
                base = 0.0 if family == "gemma3" else 1.0
                p.copy_(base + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=gen))
    model = model.double()
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    return model, cfg.to_dict(), sd


def hf_logits(model, ids) -> np.ndarray:
    """HF float64 logits at every position of ``ids``."""
    with torch.no_grad():
        return model(torch.as_tensor(np.asarray(ids))[None]).logits[0].numpy()


def empty_caches(model, rows: int) -> dict:
    """Preallocated per-layer caches ``cache.{i}.k/v`` [rows, n_kv, head_dim] (each layer's own
    shape: Gemma 4's global layers differ), as the Generator makes them."""
    return {f"cache.{i}.{c}": np.zeros((rows, *model.kv_shape(i)), model.dtype.np)
            for i in range(model.num_layers) for c in "kv"}


def store_prefill(caches: dict, out: dict, n: int) -> None:
    """Prefill's rows ``new.{i}.k/v`` written at [0, n) of the caches."""
    for name, buf in caches.items():
        buf[:n] = out["new." + name.removeprefix("cache.")]


def decode_chunk(decode, weights: dict, caches: dict, ids, p: int) -> dict:
    """One decode call for tokens ``ids`` at positions [p, p + len): the program writes their rows
    into ``caches`` in place; checks that it did (the outputs are the caller's own arrays)."""
    ids = np.asarray(ids, np.int64)
    out = decode({"input_ids": ids, "positions": np.arange(p, p + len(ids)), **weights, **caches}, dims={"p": p})
    for name, buf in caches.items():
        assert out[name] is buf, f"{name} was not written in place"
    return out
