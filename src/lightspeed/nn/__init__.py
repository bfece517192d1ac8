"""``lightspeed.nn``: model building blocks written in lightspeed's tensor API.

Modules hold parameter names (Hugging Face ``state_dict`` keys) and shapes, never values; their
``forward(builder, ...)`` appends graph nodes, and each parameter becomes a graph input of the
same name.  See ``docs/models.md``.
"""

from __future__ import annotations

from .attention import Attention, Step, gqa_attention, paged_attention, softmax_attention
from .layers import Embedding, LayerNorm, Linear, RMSNorm
from .mlp import MLP, GatedMLP, activation, gelu_tanh_mul, silu_mul
from .module import Builder, Module
from .rope import RotaryEmbedding, rope_from_hf

__all__ = [
    "Builder", "Module", "Linear", "Embedding", "RMSNorm", "LayerNorm", "RotaryEmbedding", "rope_from_hf",
    "Attention", "Step", "gqa_attention", "paged_attention", "softmax_attention", "GatedMLP", "MLP", "silu_mul",
    "gelu_tanh_mul", "activation",
]
