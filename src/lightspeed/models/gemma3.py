"""Gemma 3 (text): interleaved sliding-window (local) and global layers with different RoPE bases
(global layers may have rope scaling), RMSNorm with ``1 + w``, norms before *and* after attention
and MLP, q/k norms, GeGLU with tanh-GELU, embeddings scaled by sqrt(hidden), attention scale
``query_pre_attn_scalar ** -0.5``, tied head.

The graph; the family's names, weight files (the GGUF norms' ``1 + w``) and defaults are declared
in ``families/gemma3.py``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..nn import RotaryEmbedding, rope_from_hf
from .base import FULL, SLIDING, DecoderConfig, DecoderLM, eos_ids

__all__ = ["Gemma3"]


class Gemma3(DecoderLM):
    family = "gemma3"

    @classmethod
    def config_from_hf(cls, config: Mapping[str, Any]) -> DecoderConfig:
        c = config
        heads = int(c.get("num_attention_heads", 8))
        head_dim = int(c.get("head_dim") or 256)
        hidden = int(c["hidden_size"])
        n = int(c["num_hidden_layers"])
        types = c.get("layer_types")
        if not types:  # older configs: every `sliding_window_pattern`-th layer is global
            pattern = int(c.get("sliding_window_pattern", 6))
            types = [SLIDING if (i + 1) % pattern else FULL for i in range(n)]
        rp = c.get("rope_parameters")
        if isinstance(rp, Mapping) and isinstance(rp.get(FULL), Mapping):  # transformers 5: per layer type
            rope_full = rope_from_hf(c, head_dim, FULL, default_theta=1_000_000.0)
            rope_local = rope_from_hf(c, head_dim, SLIDING, default_theta=10_000.0)
        else:  # config.json: rope_theta (+ rope_scaling) is global, rope_local_base_freq local
            rope_full = rope_from_hf(c, head_dim, default_theta=1_000_000.0)
            rope_local = RotaryEmbedding(head_dim, float(c.get("rope_local_base_freq", 10_000.0)))
        return DecoderConfig(
            vocab_size=int(c.get("vocab_size", 262_208)), hidden_size=hidden,
            intermediate_size=int(c["intermediate_size"]), num_layers=n, num_heads=heads,
            num_kv_heads=int(c.get("num_key_value_heads") or heads), head_dim=head_dim,
            rope={FULL: rope_full, SLIDING: rope_local}, layer_types=tuple(types),
            sliding_window=c.get("sliding_window", 4096), rms_norm_eps=float(c.get("rms_norm_eps", 1e-6)),
            hidden_act=c.get("hidden_activation") or c.get("hidden_act") or "gelu_pytorch_tanh",
            tie_word_embeddings=bool(c.get("tie_word_embeddings", True)),
            attention_bias=bool(c.get("attention_bias", False)), qk_norm=True, norm_unit_offset=True,
            sandwich_norm=True, embed_scale=hidden ** 0.5,
            attn_scale=float(c.get("query_pre_attn_scalar", 256)) ** -0.5,
            attn_softcap=c.get("attn_logit_softcapping"), final_softcap=c.get("final_logit_softcapping"),
            bos_token_id=c.get("bos_token_id", 2), eos_token_ids=eos_ids(c.get("eos_token_id", 1)),
            max_position_embeddings=c.get("max_position_embeddings"))
