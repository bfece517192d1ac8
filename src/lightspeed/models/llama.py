"""Llama family (Llama 2/3.x, SmolLM2, TinyLlama, ...): pre-norm RMSNorm, SwiGLU, RoPE, GQA.

The graph; the family's names, weight files and defaults are declared in ``families/llama.py``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..nn import rope_from_hf
from .base import FULL, DecoderConfig, DecoderLM, eos_ids

__all__ = ["Llama"]


class Llama(DecoderLM):
    family = "llama"

    @classmethod
    def config_from_hf(cls, config: Mapping[str, Any]) -> DecoderConfig:
        c = config
        heads = int(c["num_attention_heads"])
        head_dim = int(c.get("head_dim") or c["hidden_size"] // heads)
        return DecoderConfig(
            vocab_size=int(c["vocab_size"]), hidden_size=int(c["hidden_size"]),
            intermediate_size=int(c["intermediate_size"]), num_layers=int(c["num_hidden_layers"]),
            num_heads=heads, num_kv_heads=int(c.get("num_key_value_heads") or heads), head_dim=head_dim,
            rope={FULL: rope_from_hf(c, head_dim)}, rms_norm_eps=float(c.get("rms_norm_eps", 1e-6)),
            hidden_act=c.get("hidden_act", "silu"), tie_word_embeddings=bool(c.get("tie_word_embeddings", False)),
            attention_bias=bool(c.get("attention_bias", False)), mlp_bias=bool(c.get("mlp_bias", False)),
            bos_token_id=c.get("bos_token_id"), eos_token_ids=eos_ids(c.get("eos_token_id")),
            max_position_embeddings=c.get("max_position_embeddings"))
