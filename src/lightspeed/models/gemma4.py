"""Gemma 4 (text; the mixture-of-experts models such as gemma-4-26B-A4B, and dense configs of the
same structure).

What Gemma 4 shares with Gemma 3: interleaved sliding-window (local) and global layers with their
own RoPE, norms before and after attention and MLP, q/k norms, GeGLU with tanh-GELU, embeddings
scaled by sqrt(hidden), tied head, final logit soft-capping.  What differs (HF
``modeling_gemma4.py``):

- RMSNorm multiplies by ``w`` (not ``1 + w``); values get a weightless RMSNorm (``v_norm``);
  the attention scale is 1 (the q/k norms set the scale); no attention soft-capping;
- global layers have their own head_dim (``global_head_dim``) and, with ``attention_k_eq_v``,
  their own KV-head count (``num_global_key_value_heads``) and values equal to the keys'
  projection (no ``v_proj``): the per-layer cache shape is :meth:`Gemma4.kv_shape`;
- global layers use "proportional" RoPE: only the first ``partial_rotary_factor`` of the
  frequency pairs rotate (exponents over the full head_dim), the rest have frequency 0;
- each layer output is multiplied by ``layer_scalar`` (a weight);
- with ``enable_moe_block`` every layer adds a mixture of experts *alongside* the dense MLP::

      h1 = post_feedforward_layernorm_1(mlp(pre_feedforward_layernorm(x)))
      w, idx = router(x)                        # nn.moe.Gemma4Router, on the un-normalised residual
      h2 = post_feedforward_layernorm_2(experts(pre_feedforward_layernorm_2(x), w, idx))
      x = x + post_feedforward_layernorm(h1 + h2)

Not supported (raise ``UnsupportedError``): per-layer input embeddings
(``hidden_size_per_layer_input``, the E2B/E4B models), KV sharing across layers
(``num_kv_shared_layers``) and bidirectional attention.

The family (``gemma4_moe``: names, ``--random`` config) is declared in ``families/gemma4.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes as dt
from .. import hl
from ..dtypes import DType
from ..errors import ShapeError, UnsupportedError
from ..graph import Graph, GraphTensor
from ..nn import (
    Attention,
    Builder,
    Embedding,
    GatedMLP,
    Linear,
    Module,
    RMSNorm,
    RotaryEmbedding,
    Step,
)
from ..nn.moe import MOE_CONFIG_MODES, MOE_MODES, Experts, Gemma4Router, moe_mode
from .base import FULL, SLIDING, DecoderConfig, DecoderLM, eos_ids

__all__ = ["Gemma4", "Gemma4Config", "Gemma4Block", "ProportionalRotaryEmbedding"]


@dataclass(frozen=True)
class ProportionalRotaryEmbedding(RotaryEmbedding):
    """HF's "proportional" RoPE: ``int(partial_rotary_factor * head_dim // 2)`` rotated frequency
    pairs ``theta ** -(2i / head_dim)``, the remaining pairs with frequency 0 (cos 1, sin 0: left
    as they are), all divided by ``factor``."""

    rope_type: str = "proportional"
    partial_rotary_factor: float = 1.0

    def __post_init__(self) -> None:
        if self.head_dim % 2:
            raise ShapeError(f"rotary embedding: head_dim must be even, got {self.head_dim}")

    def inv_freq(self) -> np.ndarray:
        f32 = np.float32
        d = self.head_dim
        angles = int(self.partial_rotary_factor * d // 2)
        rot = f32(1.0) / (f32(self.theta) ** (np.arange(0, 2 * angles, 2, dtype=np.int64).astype(f32) / f32(d)))
        inv = np.concatenate([rot.astype(f32), np.zeros(d // 2 - angles, f32)])
        return np.ascontiguousarray(inv / f32(self.factor), dtype=f32)


@dataclass
class Gemma4Config(DecoderConfig):
    """:class:`DecoderConfig` (``head_dim``/``num_kv_heads`` are the sliding layers') plus per-layer
    attention shapes and the mixture-of-experts fields."""

    layer_head_dims: tuple[int, ...] = ()
    layer_kv_heads: tuple[int, ...] = ()
    attention_k_eq_v: bool = False  # global layers: values = the keys' projection (no v_proj)
    enable_moe_block: bool = False
    num_experts: int = 0
    top_k_experts: int = 1
    moe_intermediate_size: int = 0
    moe_prefill: str = "auto"
    moe_decode: str = "gather"

    def __post_init__(self) -> None:
        super().__post_init__()
        n = self.num_layers
        self.layer_head_dims = tuple(int(d) for d in self.layer_head_dims) or (self.head_dim,) * n
        self.layer_kv_heads = tuple(int(d) for d in self.layer_kv_heads) or (self.num_kv_heads,) * n
        if len(self.layer_head_dims) != n or len(self.layer_kv_heads) != n:
            raise ValueError(f"layer_head_dims / layer_kv_heads need {n} entries")
        for i, t in enumerate(self.layer_types):
            if self.rope[t].head_dim != self.layer_head_dims[i]:
                raise ShapeError(f"gemma4: layer {i} ({t}) has head_dim {self.layer_head_dims[i]} but its rotary "
                                 f"embedding has {self.rope[t].head_dim}")
        if self.moe_prefill not in MOE_CONFIG_MODES:
            raise ValueError(f"MoE prefill mode must be one of {MOE_CONFIG_MODES}, got {self.moe_prefill!r}")
        if self.moe_decode not in MOE_MODES:
            raise ValueError(f"MoE decode mode must be one of {MOE_MODES}, got {self.moe_decode!r}")
        if self.enable_moe_block and not 0 < self.top_k_experts <= self.num_experts:
            raise ValueError(f"top_k_experts ({self.top_k_experts}) must be in [1, num_experts ({self.num_experts})]")


class _NormedValues(Module):
    """Gemma 4's values: a projection (``v_proj``, or ``k_proj`` itself when keys equal values)
    followed by a weightless RMSNorm over each head.  Returns [s, n_kv * head_dim] like a Linear,
    so :class:`~lightspeed.nn.Attention` runs unchanged.  A shared ``k_proj`` is one graph input
    and, hash-consed, one product."""

    def __init__(self, proj: Linear, n_kv: int, head_dim: int, eps: float) -> None:
        super().__init__(proj.prefix)
        self.proj, self.n_kv, self.head_dim, self.eps = proj, n_kv, head_dim, eps

    def forward(self, b: Builder, x: GraphTensor) -> GraphTensor:
        s, d = x.shape[0], self.head_dim
        v = self.proj.forward(b, x).reshape(s, self.n_kv, d)
        r = hl.rsqrt((v * v).sum(-1, keepdim=True) * (1.0 / d) + self.eps)
        return (v * r).reshape(s, self.n_kv * d)


class Gemma4Block(Module):
    """One Gemma 4 decoder layer (see the module docstring)."""

    def __init__(self, prefix: str, cfg: Gemma4Config, layer: int) -> None:
        super().__init__(prefix)
        kind = cfg.layer_types[layer]
        self.kind = kind
        h, eps = cfg.hidden_size, cfg.rms_norm_eps
        hd, kv = cfg.layer_head_dims[layer], cfg.layer_kv_heads[layer]

        def norm(name: str, dim: int) -> RMSNorm:
            return RMSNorm(name, dim, eps)

        self.input_layernorm = norm(self.pname("input_layernorm"), h)
        self.self_attn = Attention(
            self.pname("self_attn"), h, cfg.num_heads, kv, hd, rope=cfg.rope[kind], bias=cfg.attention_bias,
            qk_norm=norm, scale=1.0, sliding_window=cfg.sliding_window if kind == SLIDING else None)
        k_eq_v = cfg.attention_k_eq_v and kind != SLIDING
        self.self_attn.v_proj = _NormedValues(self.self_attn.k_proj if k_eq_v else self.self_attn.v_proj, kv, hd, eps)
        self.post_attention_layernorm = norm(self.pname("post_attention_layernorm"), h)
        self.pre_feedforward_layernorm = norm(self.pname("pre_feedforward_layernorm"), h)
        self.mlp = GatedMLP(self.pname("mlp"), h, cfg.intermediate_size, cfg.hidden_act)
        self.post_feedforward_layernorm = norm(self.pname("post_feedforward_layernorm"), h)
        self.moe = cfg.enable_moe_block
        self.modes = {"prefill": cfg.moe_prefill, "decode": cfg.moe_decode}
        if self.moe:
            self.router = Gemma4Router(self.pname("router"), h, cfg.num_experts, cfg.top_k_experts, eps)
            self.experts = Experts(self.pname("experts"), h, cfg.moe_intermediate_size, cfg.num_experts,
                                   cfg.hidden_act)
            self.post_feedforward_layernorm_1 = norm(self.pname("post_feedforward_layernorm_1"), h)
            self.pre_feedforward_layernorm_2 = norm(self.pname("pre_feedforward_layernorm_2"), h)
            self.post_feedforward_layernorm_2 = norm(self.pname("post_feedforward_layernorm_2"), h)

    def own_params(self) -> dict[str, tuple[int, ...]]:
        return {self.pname("layer_scalar"): (1,)}

    def forward(self, b: Builder, step: Step, x: GraphTensor, past: tuple[GraphTensor, GraphTensor] | None
                ) -> tuple[GraphTensor, GraphTensor, GraphTensor]:
        h, k, v = self.self_attn.forward(b, step, self.input_layernorm.forward(b, x), past)
        x = x + self.post_attention_layernorm.forward(b, h)
        h = self.mlp.forward(b, self.pre_feedforward_layernorm.forward(b, x))
        if self.moe:
            mode = moe_mode(self.modes, step, b)
            w, idx = self.router.forward(b, x)
            e = self.experts.forward(b, self.pre_feedforward_layernorm_2.forward(b, x), w, idx, mode)
            h = self.post_feedforward_layernorm_1.forward(b, h) + self.post_feedforward_layernorm_2.forward(b, e)
        x = x + self.post_feedforward_layernorm.forward(b, h)
        return x * b.param(self.pname("layer_scalar"), (1,)), k, v


def _layer_overrides(c: Mapping[str, Any], types: list[str]) -> dict[int, dict[str, Any]]:
    """Per-layer attribute overrides as HF resolves them: ``per_layer_config`` (transformers 5's
    ``to_dict()``, keys are layer indexes) or, from a checkpoint's config.json, ``global_head_dim``
    (default 512) and -- with ``attention_k_eq_v`` -- ``num_global_key_value_heads`` for every
    global layer."""
    plc = c.get("per_layer_config")
    if isinstance(plc, Mapping) and plc:
        return {int(k): dict(v) for k, v in plc.items() if str(k).isdigit()}
    over: dict[str, Any] = {"head_dim": int(c.get("global_head_dim", 512))}
    if c.get("attention_k_eq_v", False) and c.get("num_global_key_value_heads") is not None:
        over["num_key_value_heads"] = int(c["num_global_key_value_heads"])
    return {i: over for i, t in enumerate(types) if t == FULL}


_DEFAULT_ROPE = {SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
                 FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0}}


def _rope(params: Mapping[str, Any], head_dim: int, kind: str) -> RotaryEmbedding:
    p = dict(params)
    rt = p.get("rope_type", "default") or "default"
    theta = float(p.get("rope_theta", _DEFAULT_ROPE[kind]["rope_theta"]))
    if rt == "proportional":
        return ProportionalRotaryEmbedding(head_dim, theta, factor=float(p.get("factor", 1.0)),
                                           partial_rotary_factor=float(p.get("partial_rotary_factor", 1.0)))
    if p.get("partial_rotary_factor", 1.0) != 1.0:
        raise UnsupportedError(f"gemma4: partial_rotary_factor with rope_type {rt!r} is not supported")
    return RotaryEmbedding(head_dim, theta, rope_type=rt, factor=float(p.get("factor", 1.0)))


class Gemma4(DecoderLM):
    """Gemma 4 text model (family ``gemma4_moe``; also reads dense Gemma 4 configs without
    per-layer embeddings or KV sharing)."""

    supports_paged = False  # keys double as values on its global layers: not in the paged step yet

    family = "gemma4_moe"

    def __init__(self, config: Gemma4Config, dtype: DType | str = dt.float32) -> None:
        # not DecoderLM.__init__: its DecoderBlock assumes one head_dim for every layer
        Module.__init__(self, "")
        self.config: Gemma4Config = config
        cfg = config
        self.dtype = dt.as_dtype(dtype)
        self.embed_tokens = Embedding("model.embed_tokens", cfg.vocab_size, cfg.hidden_size, cfg.embed_scale)
        self.layers = [Gemma4Block(f"model.layers.{i}", cfg, i) for i in range(cfg.num_layers)]
        self.norm = RMSNorm("model.norm", cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = None if cfg.tie_word_embeddings else Linear("lm_head", cfg.hidden_size, cfg.vocab_size)
        self._graphs: dict[tuple[str, bool], Graph] = {}

    @classmethod
    def config_from_hf(cls, config: Mapping[str, Any]) -> Gemma4Config:
        c = config
        if c.get("hidden_size_per_layer_input"):
            raise UnsupportedError("gemma4: per-layer input embeddings (hidden_size_per_layer_input) are not "
                                   "supported")
        if c.get("num_kv_shared_layers"):
            raise UnsupportedError("gemma4: KV sharing across layers (num_kv_shared_layers) is not supported")
        if c.get("use_bidirectional_attention"):
            raise UnsupportedError("gemma4: bidirectional attention is not supported")
        n = int(c["num_hidden_layers"])
        heads = int(c.get("num_attention_heads", 8))
        head_dim = int(c.get("head_dim") or 256)
        kv_heads = int(c.get("num_key_value_heads") or heads)
        hidden = int(c["hidden_size"])
        types = list(c.get("layer_types") or [SLIDING if (i + 1) % 6 else FULL for i in range(n)])
        types[-1] = FULL  # HF forces the last layer global
        over = _layer_overrides(c, types)
        head_dims = tuple(int(over.get(i, {}).get("head_dim", head_dim)) for i in range(n))
        kvs = tuple(int(over.get(i, {}).get("num_key_value_heads", kv_heads)) for i in range(n))
        rp = c.get("rope_parameters") or _DEFAULT_ROPE
        rope = {}
        for kind in set(types):
            dims = {head_dims[i] for i in range(n) if types[i] == kind}
            if len(dims) != 1:
                raise UnsupportedError(f"gemma4: {kind} layers with different head_dims {sorted(dims)}")
            rope[kind] = _rope(rp.get(kind) or _DEFAULT_ROPE[kind], dims.pop(), kind)
        moe = bool(c.get("enable_moe_block", False))
        return Gemma4Config(
            vocab_size=int(c.get("vocab_size", 262_144)), hidden_size=hidden,
            intermediate_size=int(c["intermediate_size"]), num_layers=n, num_heads=heads, num_kv_heads=kv_heads,
            head_dim=head_dim, rope=rope, layer_types=tuple(types), sliding_window=c.get("sliding_window", 512),
            rms_norm_eps=float(c.get("rms_norm_eps", 1e-6)),
            hidden_act=c.get("hidden_activation") or c.get("hidden_act") or "gelu_pytorch_tanh",
            tie_word_embeddings=bool(c.get("tie_word_embeddings", True)),
            attention_bias=bool(c.get("attention_bias", False)), qk_norm=True, sandwich_norm=True,
            embed_scale=hidden ** 0.5, attn_scale=1.0, final_softcap=c.get("final_logit_softcapping"),
            bos_token_id=c.get("bos_token_id", 2), eos_token_ids=eos_ids(c.get("eos_token_id", 1)),
            max_position_embeddings=c.get("max_position_embeddings"),
            layer_head_dims=head_dims, layer_kv_heads=kvs, attention_k_eq_v=bool(c.get("attention_k_eq_v", False)),
            enable_moe_block=moe, num_experts=int(c.get("num_experts") or 0) if moe else 0,
            top_k_experts=int(c.get("top_k_experts") or 1) if moe else 1,
            moe_intermediate_size=int(c.get("moe_intermediate_size") or 0) if moe else 0)

    def check_weights(self, tensors: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """As :meth:`DecoderLM.check_weights`; a multimodal checkpoint's text weights
        (``model.language_model.*``, Gemma4ForConditionalGeneration) are read as ``model.*``."""
        pre = "model.language_model."
        if "model.embed_tokens.weight" not in tensors and pre + "embed_tokens.weight" in tensors:
            tensors = {("model." + k[len(pre):] if k.startswith(pre) else k): v for k, v in tensors.items()}
        return super().check_weights(tensors)

    # ------------------------------------------------------------------ per-layer cache shapes
    def kv_shape(self, layer: int) -> tuple[int, int]:
        """(KV heads, head_dim) of layer ``layer``'s cached keys/values: global layers differ."""
        return self.config.layer_kv_heads[layer], self.config.layer_head_dims[layer]
