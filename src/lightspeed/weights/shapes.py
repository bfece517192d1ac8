"""The tensors a Hugging Face causal LM of a known config has, and their shapes.

Used to check loaded weights against their config (a wrong shape or a missing tensor raises
WeightError naming it) for the model types a family declares shapes for
(``lightspeed.models.family.Checkpoint.shapes``; most use :func:`decoder_shapes`); other model
types are not checked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..models import family as registry
from .errors import WeightError

__all__ = ["expected_shapes", "check_config", "checked_model_types", "decoder_shapes"]


def checked_model_types() -> frozenset[str]:
    """The model types whose configs and shapes are checked: those a family declares shapes for."""
    return frozenset(c.model_type for f in registry.families().values() for c in f.checkpoints
                     if c.shapes is not None)


# No dimension of a real model comes near this; a bigger value is corruption, refused before any
# shape arithmetic or allocation uses it.
MAX_DIM = 1 << 31

_POSITIVE_INTS = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                  "vocab_size", "num_hidden_layers", "max_position_embeddings", "sliding_window",
                  "query_pre_attn_scalar", "original_max_position_embeddings")
_REQUIRED = ("hidden_size", "intermediate_size", "num_attention_heads", "vocab_size", "num_hidden_layers")
_BOOLS = ("tie_word_embeddings", "attention_bias", "mlp_bias")
_EPSILONS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def check_config(where: object, config: Any, n_tensors: int | None = None) -> None:
    """Range-check the config values lightspeed builds from (layers, heads, dims, vocabulary, RoPE,
    epsilon), raising WeightError naming `where` and the field.

    Present fields are checked for every model type; the checked types (`checked_model_types()`) must have
    the required ones. With `n_tensors` (the file's tensor count), a layer count no file of that many
    tensors could hold is refused at once, before anything loops over the layers."""
    if not isinstance(config, dict):
        raise WeightError(f"{where}: the config is not a JSON object")
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise WeightError(f"{where}: config field 'model_type' is {model_type!r}, not a string")
    checked = model_type in checked_model_types()
    for key in _POSITIVE_INTS:
        v = config.get(key)
        if v is None:
            if checked and key in _REQUIRED:
                raise WeightError(f"{where}: config has no {key!r} (needed for {model_type})")
            continue
        if not _is_int(v) or not 0 < v <= MAX_DIM:
            raise WeightError(f"{where}: config field {key!r} is {v!r}, expected an integer in 1..{MAX_DIM}")
    for key in _BOOLS:
        if key in config and not isinstance(config[key], bool):
            raise WeightError(f"{where}: config field {key!r} is {config[key]!r}, expected true or false")
    for key in _EPSILONS:
        v = config.get(key)
        if v is not None and not (_is_number(v) and 0 < v < 1):
            raise WeightError(f"{where}: config field {key!r} is {v!r}, expected a number in (0, 1)")
    for key in ("rope_theta", "rope_local_base_freq"):
        v = config.get(key)
        if v is not None and not (_is_number(v) and v > 0):
            raise WeightError(f"{where}: config field {key!r} is {v!r}, expected a positive number")
    scaling = config.get("rope_scaling")
    if scaling is not None:
        if not isinstance(scaling, dict):
            raise WeightError(f"{where}: config field 'rope_scaling' is {scaling!r}, expected an object or null")
        kind = scaling.get("rope_type", scaling.get("type"))
        if kind is not None and not isinstance(kind, str):
            raise WeightError(f"{where}: config field 'rope_scaling.rope_type' is {kind!r}, expected a string")
        for key in ("factor", "low_freq_factor", "high_freq_factor"):
            v = scaling.get(key)
            if v is not None and not (_is_number(v) and v > 0):
                raise WeightError(f"{where}: config field 'rope_scaling.{key}' is {v!r}, expected a positive number")
    heads, kv_heads = config.get("num_attention_heads"), config.get("num_key_value_heads")
    if heads is not None and kv_heads is not None and heads % kv_heads:
        raise WeightError(f"{where}: config num_attention_heads {heads} is not a multiple of "
                          f"num_key_value_heads {kv_heads}")
    if checked:
        head_dim = config.get("head_dim") or config["hidden_size"] // heads
        if head_dim == 0 or head_dim % 2:
            raise WeightError(f"{where}: config head_dim {head_dim} (from head_dim or hidden_size / "
                              f"num_attention_heads) must be a positive even number for rotary embeddings")
    layers = config.get("num_hidden_layers")
    if n_tensors is not None and layers is not None and layers > n_tensors:
        raise WeightError(f"{where}: config num_hidden_layers {layers} cannot fit in a file of {n_tensors} "
                          f"tensors (each layer has at least one)")
    layer_types = config.get("layer_types")
    if layer_types is not None and (not isinstance(layer_types, list) or len(layer_types) != layers
                                    or not all(isinstance(t, str) for t in layer_types)):
        raise WeightError(f"{where}: config field 'layer_types' must be a list of {layers} strings")


def expected_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]] | None:
    """HF state_dict name -> shape for `config`, or None when no family declares shapes for its model type.

    `lm_head.weight` is included only when the embeddings are not tied (tied checkpoints omit it)."""
    declared = registry.checkpoint(config.get("model_type"))
    return None if declared is None or declared.shapes is None else declared.shapes(config)


def decoder_shapes(config: Mapping[str, Any], *, attention_bias: bool = False, o_proj_bias: bool = True,
                   tied: bool = False, qk_norm: bool = False, sandwich_norm: bool = False
                   ) -> dict[str, tuple[int, ...]]:
    """The tensors of a Llama-shaped decoder (``lightspeed.models.base``): pre-norm layers, GQA
    attention, a gated MLP.  ``attention_bias`` / ``tied``: the defaults of those config fields;
    ``o_proj_bias``: whether ``attention_bias`` covers o_proj too (Llama) or only q/k/v (Qwen2);
    ``qk_norm``: per-head q/k norms (Qwen3, Gemma 3); ``sandwich_norm``: norms before and after the
    MLP too (Gemma 3)."""
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    inter = int(config["intermediate_size"])
    vocab = int(config["vocab_size"])
    with_bias = bool(config.get("attention_bias", attention_bias))
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    if not config.get("tie_word_embeddings", tied):
        shapes["lm_head.weight"] = (vocab, hidden)
    for i in range(int(config["num_hidden_layers"])):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (hidden,),
            p + "post_attention_layernorm.weight": (hidden,),
            p + "self_attn.q_proj.weight": (heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": (hidden, heads * head_dim),
            p + "mlp.gate_proj.weight": (inter, hidden),
            p + "mlp.up_proj.weight": (inter, hidden),
            p + "mlp.down_proj.weight": (hidden, inter),
        }
        if with_bias:
            shapes |= {p + "self_attn.q_proj.bias": (heads * head_dim,),
                       p + "self_attn.k_proj.bias": (kv_heads * head_dim,),
                       p + "self_attn.v_proj.bias": (kv_heads * head_dim,)}
            if o_proj_bias:
                shapes[p + "self_attn.o_proj.bias"] = (hidden,)
        if config.get("mlp_bias"):
            shapes |= {p + "mlp.gate_proj.bias": (inter,), p + "mlp.up_proj.bias": (inter,),
                       p + "mlp.down_proj.bias": (hidden,)}
        if qk_norm:
            shapes |= {p + "self_attn.q_norm.weight": (head_dim,), p + "self_attn.k_norm.weight": (head_dim,)}
        if sandwich_norm:
            shapes |= {p + "pre_feedforward_layernorm.weight": (hidden,),
                       p + "post_feedforward_layernorm.weight": (hidden,)}
    return shapes
