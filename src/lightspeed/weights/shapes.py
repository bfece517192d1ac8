"""The tensors a Hugging Face causal LM of a known config has, and their shapes.

Used to check loaded weights against their config (a wrong shape or a missing tensor raises
WeightError naming it) for the model types the zoo supports; other model types are not checked.
"""

from __future__ import annotations

from typing import Any

__all__ = ["expected_shapes", "CHECKED_MODEL_TYPES"]

CHECKED_MODEL_TYPES = frozenset({"llama", "gemma3_text", "qwen2", "qwen3"})


def expected_shapes(config: dict[str, Any]) -> dict[str, tuple[int, ...]] | None:
    """HF state_dict name -> shape for `config`, or None when the model type is not one we check.

    `lm_head.weight` is included only when the embeddings are not tied (tied checkpoints omit it)."""
    model_type = config.get("model_type")
    if model_type not in CHECKED_MODEL_TYPES:
        return None
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    inter = int(config["intermediate_size"])
    vocab = int(config["vocab_size"])
    attention_bias = bool(config.get("attention_bias", model_type == "qwen2"))
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    if not config.get("tie_word_embeddings", model_type == "gemma3_text"):
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
        if attention_bias:
            shapes |= {p + "self_attn.q_proj.bias": (heads * head_dim,),
                       p + "self_attn.k_proj.bias": (kv_heads * head_dim,),
                       p + "self_attn.v_proj.bias": (kv_heads * head_dim,)}
            if model_type != "qwen2":  # Qwen2 has biases on q/k/v only; Llama's attention_bias covers o_proj too
                shapes[p + "self_attn.o_proj.bias"] = (hidden,)
        if config.get("mlp_bias"):
            shapes |= {p + "mlp.gate_proj.bias": (inter,), p + "mlp.up_proj.bias": (inter,),
                       p + "mlp.down_proj.bias": (hidden,)}
        if model_type in ("gemma3_text", "qwen3"):
            shapes |= {p + "self_attn.q_norm.weight": (head_dim,), p + "self_attn.k_norm.weight": (head_dim,)}
        if model_type == "gemma3_text":
            shapes |= {p + "pre_feedforward_layernorm.weight": (hidden,),
                       p + "post_feedforward_layernorm.weight": (hidden,)}
    return shapes
