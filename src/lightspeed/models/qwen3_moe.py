"""Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B, ...): Qwen3's attention (q/k RMSNorm per head before
RoPE, explicit head_dim) with sparse mixture-of-experts MLPs.

Layer ``i`` is sparse unless ``i in mlp_only_layers`` or ``(i + 1) % decoder_sparse_step != 0``
(or ``num_experts == 0``); dense layers keep the SwiGLU MLP of width ``intermediate_size``.  A
sparse layer's MLP is :class:`~lightspeed.nn.moe.SparseMoeBlock`: softmax over the experts, top
``num_experts_per_tok``, renormalised when ``norm_topk_prob``, experts of width
``moe_intermediate_size`` (see ``lightspeed/nn/moe.py``).

Graphs and weights: as every :class:`~lightspeed.models.base.DecoderLM` (prefill/decode with a
KV cache).  Expert weights are the stacked transformers-5 tensors
``model.layers.{i}.mlp.experts.gate_up_proj`` [E, 2I, H] / ``down_proj`` [E, H, I]; original
checkpoints' per-expert tensors are stacked once by :meth:`Qwen3Moe.check_weights`.  The
prefill graph runs the experts densely, the decode graph gathers the chosen ones
(``moe_prefill`` / ``moe_decode`` in the config).

The family's names, tensor parallel and ``--random`` config are declared in ``families/qwen3_moe.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import UnsupportedError
from ..graph import GraphTensor
from ..nn import Builder, Step
from ..nn.moe import MOE_CONFIG_MODES, MOE_MODES, SparseMoeBlock, fuse_expert_weights, moe_mode
from .base import FULL, SLIDING, DecoderBlock, DecoderConfig, DecoderLM
from .qwen3 import Qwen3

__all__ = ["Qwen3Moe", "Qwen3MoeConfig", "Qwen3MoeBlock"]


@dataclass
class Qwen3MoeConfig(DecoderConfig):
    """:class:`DecoderConfig` plus the mixture-of-experts fields.  ``sparse_layers``: the layer
    indexes whose MLP is sparse.  ``moe_prefill`` / ``moe_decode``: the experts' formulation in
    each graph, ``"dense"`` or ``"gather"`` (part of the config, so of the compile-cache key)."""

    num_experts: int = 0
    num_experts_per_tok: int = 1
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False
    sparse_layers: tuple[int, ...] = ()
    moe_prefill: str = "auto"
    moe_decode: str = "gather"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.sparse_layers = tuple(int(i) for i in self.sparse_layers)
        if self.moe_prefill not in MOE_CONFIG_MODES:
            raise ValueError(f"MoE prefill mode must be one of {MOE_CONFIG_MODES}, got {self.moe_prefill!r}")
        if self.moe_decode not in MOE_MODES:
            raise ValueError(f"MoE decode mode must be one of {MOE_MODES}, got {self.moe_decode!r}")
        if self.sparse_layers and not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ValueError(f"num_experts_per_tok ({self.num_experts_per_tok}) must be in [1, num_experts "
                             f"({self.num_experts})]")


def sparse_layer_ids(n_layers: int, num_experts: int, mlp_only_layers: Any, decoder_sparse_step: int
                     ) -> tuple[int, ...]:
    """The sparse layers, by HF's rule (``Qwen3MoeDecoderLayer.__init__``)."""
    dense = set(mlp_only_layers or ())
    step = int(decoder_sparse_step or 1)
    return tuple(i for i in range(n_layers) if i not in dense and num_experts > 0 and (i + 1) % step == 0)


class Qwen3MoeBlock(DecoderBlock):
    """A Qwen3 decoder layer whose MLP is a :class:`SparseMoeBlock` on sparse layers."""

    def __init__(self, prefix: str, cfg: Qwen3MoeConfig, layer: int) -> None:
        super().__init__(prefix, cfg, layer)
        self.sparse = layer in cfg.sparse_layers
        self.modes = {"prefill": cfg.moe_prefill, "decode": cfg.moe_decode}
        if self.sparse:  # replaces the dense GatedMLP the base built
            self.mlp = SparseMoeBlock(self.pname("mlp"), cfg.hidden_size, cfg.moe_intermediate_size, cfg.num_experts,
                                      cfg.num_experts_per_tok, cfg.norm_topk_prob, cfg.hidden_act)

    def forward(self, b: Builder, step: Step, x: GraphTensor, past: tuple[GraphTensor, GraphTensor] | None
                ) -> tuple[GraphTensor, GraphTensor, GraphTensor]:
        h, k, v = self.self_attn.forward(b, step, self.input_layernorm.forward(b, x), past)
        x = x + h
        y = self.post_attention_layernorm.forward(b, x)
        if self.sparse:
            y = self.mlp.forward(b, y, moe_mode(self.modes, step, b))
        else:
            y = self.mlp.forward(b, y)
        return x + y, k, v


class Qwen3Moe(DecoderLM):
    family = "qwen3_moe"

    def __init__(self, config: Qwen3MoeConfig, dtype: DType | str = dt.float32) -> None:
        super().__init__(config, dtype)
        self.config: Qwen3MoeConfig = config
        self.layers = [Qwen3MoeBlock(f"model.layers.{i}", config, i) for i in range(config.num_layers)]

    @classmethod
    def config_from_hf(cls, config: Mapping[str, Any]) -> Qwen3MoeConfig:
        """Qwen3's attention config (shared reader), plus the experts; only the window rule differs."""
        c = config
        if c.get("shared_expert_intermediate_size"):
            raise UnsupportedError("qwen3_moe: shared experts (Qwen2-MoE style) are not supported")
        base = Qwen3.config_from_hf(c)
        n = base.num_layers
        # HF applies the sliding window to every layer when use_sliding_window is set
        types = (SLIDING if base.sliding_window is not None else FULL,) * n
        # config.json says num_experts; transformers 5's to_dict() writes num_local_experts
        num_experts = int(c.get("num_experts", c.get("num_local_experts", 0)) or 0)
        return Qwen3MoeConfig(
            **{f.name: getattr(base, f.name) for f in dataclasses.fields(DecoderConfig)} | {"layer_types": types},
            num_experts=num_experts, num_experts_per_tok=int(c.get("num_experts_per_tok", 8)),
            moe_intermediate_size=int(c.get("moe_intermediate_size", 768)),
            norm_topk_prob=bool(c.get("norm_topk_prob", False)),
            sparse_layers=sparse_layer_ids(n, num_experts, c.get("mlp_only_layers"),
                                           int(c.get("decoder_sparse_step", 1))))

    def check_weights(self, tensors: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """As :meth:`DecoderLM.check_weights`, after stacking per-expert checkpoint tensors
        (``mlp.experts.{j}.gate_proj.weight``, ...) into the fused inputs, once."""
        prefixes = [f"model.layers.{i}.mlp.experts" for i in self.config.sparse_layers]
        return super().check_weights(fuse_expert_weights(tensors, prefixes, self.config.num_experts))
