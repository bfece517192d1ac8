"""Qwen3 family (dense): Llama's structure plus RMSNorm on each head's queries and keys
(``q_norm`` / ``k_norm`` over head_dim, before RoPE) and an explicit head_dim.

The graph; the family's names, weight files and defaults are declared in ``families/qwen3.py``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..nn import rope_from_hf
from .base import FULL, SLIDING, DecoderConfig, DecoderLM
from .llama import Llama

__all__ = ["Qwen3"]


class Qwen3(DecoderLM):
    family = "qwen3"

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
        # Llama's reader, with Qwen3's rope default, per-head q/k norms, no MLP bias and windows
        return dataclasses.replace(
            Llama.config_from_hf(c), rope={FULL: rope, SLIDING: rope}, layer_types=tuple(types),
            sliding_window=window, qk_norm=True, mlp_bias=False)
