"""Qwen3 family (dense): Llama's structure plus RMSNorm on each head's queries and keys
(``q_norm`` / ``k_norm`` over head_dim, before RoPE) and an explicit head_dim."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..nn import rope_from_hf
from .base import FULL, SLIDING, DecoderConfig, DecoderLM, eos_ids

__all__ = ["Qwen3"]


class Qwen3(DecoderLM):
    family = "qwen3"
    model_types = ("qwen3",)

    @classmethod
    def config_from_hf(cls, config: Mapping[str, Any]) -> DecoderConfig:
        c = config
        heads = int(c["num_attention_heads"])
        head_dim = int(c.get("head_dim") or c["hidden_size"] // heads)
        n = int(c["num_hidden_layers"])
        # sliding attention only when use_sliding_window is set (HF: layers >= max_window_layers)
        window = c.get("sliding_window") if c.get("use_sliding_window", False) else None
        types = c.get("layer_types")
        if not types:
            mwl = int(c.get("max_window_layers", n))
            types = [SLIDING if window is not None and i >= mwl else FULL for i in range(n)]
        if window is None:
            types = [FULL] * n
        rope = rope_from_hf(c, head_dim, default_theta=1_000_000.0)
        return DecoderConfig(
            vocab_size=int(c["vocab_size"]), hidden_size=int(c["hidden_size"]),
            intermediate_size=int(c["intermediate_size"]), num_layers=n, num_heads=heads,
            num_kv_heads=int(c.get("num_key_value_heads") or heads), head_dim=head_dim,
            rope={FULL: rope, SLIDING: rope}, layer_types=tuple(types), sliding_window=window,
            rms_norm_eps=float(c.get("rms_norm_eps", 1e-6)), hidden_act=c.get("hidden_act", "silu"),
            tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
            attention_bias=bool(c.get("attention_bias", False)), qk_norm=True,
            bos_token_id=c.get("bos_token_id"), eos_token_ids=eos_ids(c.get("eos_token_id")),
            max_position_embeddings=c.get("max_position_embeddings"))
