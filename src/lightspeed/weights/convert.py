"""GGUF -> Hugging Face conventions: the config, the tensor names, and llama.cpp's layout changes undone.

llama.cpp's `convert_hf_to_gguf.py` changes two things besides names that we reverse here:

* Llama-architecture Q and K projections have their rows permuted so that the two rotated halves of
  each head interleave (GGML's RoPE rotates adjacent pairs, HF's rotates the two halves): see
  `permute_qk` / `unpermute_qk`.
* Gemma's RMSNorm computes `x * (1 + w)`; the GGUF stores `1 + w` for every norm weight. We subtract 1
  from all of them (HF's Gemma3RMSNorm is used for the four layer norms, q_norm, k_norm and the final
  norm).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .errors import WeightError
from .gguf_file import GGUFFile
from .shapes import check_config

__all__ = ["SUPPORTED_ARCHITECTURES", "gguf_config", "hf_name", "permute_qk", "unpermute_qk", "fix_tensor"]

SUPPORTED_ARCHITECTURES = ("llama", "gemma3", "qwen2", "qwen3")

_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "ffn_norm": "post_attention_layernorm",
}
# Gemma 3 has four norms per layer; llama.cpp names the one before the MLP ffn_norm.
_BLOCK_NAMES_GEMMA3 = _BLOCK_NAMES | {
    "ffn_norm": "pre_feedforward_layernorm",
    "post_attention_norm": "post_attention_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
# Tensors llama.cpp stores that have no counterpart in the HF state_dict (they become config entries).
IGNORED_TENSORS = frozenset({"rope_freqs.weight"})


def hf_name(arch: str, name: str) -> str | None:
    """The HF state_dict name of GGUF tensor `name`, or None if it has none."""
    stem, _, kind = name.rpartition(".")
    if kind not in ("weight", "bias"):
        return None
    if stem in _GLOBAL_NAMES:
        return f"{_GLOBAL_NAMES[stem]}.{kind}"
    parts = stem.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit():
        table = _BLOCK_NAMES_GEMMA3 if arch == "gemma3" else _BLOCK_NAMES
        if parts[2] in table:
            return f"model.layers.{parts[1]}.{table[parts[2]]}.{kind}"
    return None


def permute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's permutation of Q/K projection rows (HF layout -> GGUF layout)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of `permute_qk` (GGUF layout -> HF layout)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def fix_tensor(config: dict[str, Any], name: str, w: np.ndarray) -> np.ndarray:
    """Undo llama.cpp's layout changes on tensor `name` (HF name) of a model with HF `config`."""
    model_type = config["model_type"]
    if model_type == "llama":
        if name.endswith("self_attn.q_proj.weight") or name.endswith("self_attn.q_proj.bias"):
            return np.ascontiguousarray(unpermute_qk(w, config["num_attention_heads"]))
        if name.endswith("self_attn.k_proj.weight") or name.endswith("self_attn.k_proj.bias"):
            return np.ascontiguousarray(unpermute_qk(w, config["num_key_value_heads"]))
    elif model_type == "gemma3_text" and name.endswith("norm.weight"):
        w -= 1.0
    return w


def fix_rows(config: dict[str, Any], name: str, rows: np.ndarray) -> np.ndarray | None:
    """`fix_tensor`'s change of tensor `name` applied to per-row data of it (its quantised blocks,
    one row of bytes per matrix row): the same row permutation, or None when the change is not a
    permutation of whole rows (the blocks then no longer hold the fixed tensor)."""
    model_type = config["model_type"]
    if model_type == "llama":
        if name.endswith("self_attn.q_proj.weight"):
            return np.ascontiguousarray(unpermute_qk(rows, config["num_attention_heads"]))
        if name.endswith("self_attn.k_proj.weight"):
            return np.ascontiguousarray(unpermute_qk(rows, config["num_key_value_heads"]))
    elif model_type == "gemma3_text" and name.endswith("norm.weight"):
        return None
    return rows


# -- config ------------------------------------------------------------------------------------------------

_MISSING = object()


class _Meta:
    """Typed access to `<arch>.*` and `tokenizer.ggml.*` metadata with file-naming errors."""

    def __init__(self, g: GGUFFile):
        self.g = g
        self.md = g.metadata
        self.arch = g.architecture

    def get(self, key: str, default: Any = _MISSING, *, kind: type = int) -> Any:
        full = key if key.startswith(("tokenizer.", "general.")) else f"{self.arch}.{key}"
        if full not in self.md:
            if default is _MISSING:
                raise WeightError(f"{self.g.path}: GGUF metadata has no {full!r}, needed for the model config")
            return default
        value = self.md[full]
        if isinstance(value, np.ndarray | list):
            raise WeightError(f"{self.g.path}: GGUF metadata {full!r} is an array (per-layer values are "
                              f"not supported)")
        # the stored type must fit the field: int(...) of a string or a float would silently invent a value
        if kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif kind is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        else:
            ok = isinstance(value, kind)
        if not ok:
            raise WeightError(f"{self.g.path}: GGUF metadata {full!r} is {value!r} ({type(value).__name__}), "
                              f"expected {'a finite number' if kind is float else kind.__name__}")
        return kind(value)

    def positive(self, key: str, default: Any = _MISSING, limit: int = 1 << 31) -> Any:
        """An int field that must lie in 1..limit (or be absent with `default`)."""
        v = self.get(key, default)
        if v is not default and not 0 < v <= limit:
            raise WeightError(f"{self.g.path}: GGUF metadata {self._full(key)!r} is {v}, expected 1..{limit}")
        return v

    def _full(self, key: str) -> str:
        return key if key.startswith(("tokenizer.", "general.")) else f"{self.arch}.{key}"


def _vocab_size(m: _Meta) -> int:
    if f"{m.arch}.vocab_size" in m.md:
        return m.positive("vocab_size")
    if "tokenizer.ggml.tokens" in m.md:
        tokens = m.md["tokenizer.ggml.tokens"]
        if not isinstance(tokens, list) or not tokens:
            raise WeightError(f"{m.g.path}: GGUF metadata 'tokenizer.ggml.tokens' is not a non-empty array of "
                              f"strings")
        return len(tokens)
    if "token_embd.weight" in m.g.tensors:
        return m.g.tensors["token_embd.weight"].shape[0]
    raise WeightError(f"{m.g.path}: cannot tell the vocabulary size (no vocab_size, tokens or token_embd.weight)")


def _rope_scaling(m: _Meta, head_dim: int, rope_theta: float) -> dict[str, Any] | None:
    """HF rope_scaling from llama.cpp's `rope.scaling.*` keys or its `rope_freqs` tensor (Llama 3.1+)."""
    kind = m.get("rope.scaling.type", None, kind=str)
    if kind == "linear":
        return {"rope_type": "linear", "factor": m.get("rope.scaling.factor", kind=float)}
    if kind not in (None, "none"):
        raise WeightError(f"{m.g.path}: rope scaling type {kind!r} is not supported")
    if "rope_freqs.weight" not in m.g.tensors:
        return None
    # llama.cpp stores Llama 3's frequency-dependent factors as a tensor; HF describes them by four numbers.
    # Recover the factor and check the others against Meta's published values.
    freqs = m.g.read("rope_freqs.weight").astype(np.float64)
    factor, low, high, original = float(freqs.max()), 1.0, 4.0, 8192
    inv = rope_theta ** -(np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * math.pi / inv
    smooth = (original / wavelen - low) / (high - low)
    expected = np.where(wavelen < original / high, 1.0,
                        np.where(wavelen > original / low, factor, 1 / ((1 - smooth) / factor + smooth)))
    if expected.shape != freqs.shape or not np.allclose(freqs, expected, rtol=1e-3):
        raise WeightError(f"{m.g.path}: tensor 'rope_freqs.weight' does not match Llama 3 rope scaling "
                          f"(factor {factor}, low 1, high 4, original context 8192); not supported")
    return {"rope_type": "llama3", "factor": factor, "low_freq_factor": low, "high_freq_factor": high,
            "original_max_position_embeddings": original}


def gguf_config(g: GGUFFile) -> dict[str, Any]:
    """A Hugging Face config.json-style dict for the model in GGUF file `g`."""
    m = _Meta(g)
    arch = m.arch
    if arch not in SUPPORTED_ARCHITECTURES:
        raise WeightError(f"{g.path}: GGUF architecture {arch!r} is not supported "
                          f"(supported: {', '.join(SUPPORTED_ARCHITECTURES)})")
    # counts are range-checked before anything divides by them or loops over them
    layers = m.positive("block_count", limit=len(g.tensors) or 1)
    hidden = m.positive("embedding_length")
    heads = m.positive("attention.head_count")
    kv_heads = m.positive("attention.head_count_kv", heads)
    head_dim = m.positive("attention.key_length", None) or hidden // heads
    if head_dim == 0:
        raise WeightError(f"{g.path}: embedding_length {hidden} is smaller than attention.head_count {heads}")
    rope_theta = m.get("rope.freq_base", 10000.0, kind=float)
    if rope_theta <= 0:
        raise WeightError(f"{g.path}: GGUF metadata '{arch}.rope.freq_base' is {rope_theta}, expected > 0")
    cfg: dict[str, Any] = {
        "vocab_size": _vocab_size(m),
        "hidden_size": hidden,
        "intermediate_size": m.positive("feed_forward_length"),
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "max_position_embeddings": m.positive("context_length", 2048),
        "rms_norm_eps": m.get("attention.layer_norm_rms_epsilon", kind=float),
        "rope_theta": rope_theta,
        "rope_scaling": _rope_scaling(m, head_dim, rope_theta),
        "tie_word_embeddings": "output.weight" not in g.tensors,
        "attention_dropout": 0.0,
        "torch_dtype": "float32",
    }
    for hf_key, gguf_key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                             ("pad_token_id", "padding_token_id")):
        tid = m.get(f"tokenizer.ggml.{gguf_key}", None)
        if tid is not None and not 0 <= tid < cfg["vocab_size"]:
            raise WeightError(f"{g.path}: GGUF metadata 'tokenizer.ggml.{gguf_key}' is {tid}, outside the "
                              f"vocabulary of {cfg['vocab_size']}")
        cfg[hf_key] = tid
    if arch == "llama":
        cfg |= {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
                "attention_bias": "blk.0.attn_q.bias" in g.tensors, "mlp_bias": "blk.0.ffn_up.bias" in g.tensors}
    elif arch == "qwen2":
        cfg |= {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu",
                "use_sliding_window": False}
    elif arch == "qwen3":
        cfg |= {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_act": "silu",
                "attention_bias": "blk.0.attn_q.bias" in g.tensors}
    elif arch == "gemma3":
        layers = cfg["num_hidden_layers"]
        # llama.cpp hard-codes these for Gemma 3 when the file does not carry them (llama-model.cpp):
        # every 6th layer is global, local layers use RoPE base 10000, and the 27B model scales queries by
        # hidden/heads instead of head_dim (it is the one with 62 layers). Newer files may store the
        # pattern as one bool per layer (true = sliding window).
        pattern_raw = g.metadata.get(f"{arch}.attention.sliding_window_pattern", 6)
        if isinstance(pattern_raw, int) and not isinstance(pattern_raw, bool):
            if pattern_raw <= 0:
                raise WeightError(f"{g.path}: {arch}.attention.sliding_window_pattern is {pattern_raw}, expected > 0")
            pattern: int | None = pattern_raw
            layer_types = ["full_attention" if (i + 1) % pattern_raw == 0 else "sliding_attention"
                           for i in range(layers)]
        elif isinstance(pattern_raw, np.ndarray) and pattern_raw.ndim == 1 and pattern_raw.dtype.kind in "biu":
            pattern = None
            layer_types = ["sliding_attention" if bool(b) else "full_attention" for b in pattern_raw]
            if len(layer_types) != layers:
                raise WeightError(f"{g.path}: {arch}.attention.sliding_window_pattern has {len(layer_types)} "
                                  f"entries for {layers} layers")
        else:
            raise WeightError(f"{g.path}: {arch}.attention.sliding_window_pattern is {pattern_raw!r}, expected an "
                              f"integer or an array of booleans")
        cfg |= {
            "model_type": "gemma3_text",
            "architectures": ["Gemma3ForCausalLM"],
            "hidden_activation": "gelu_pytorch_tanh",
            "attention_bias": False,
            "sliding_window": m.positive("attention.sliding_window"),
            "sliding_window_pattern": pattern,
            "layer_types": layer_types,
            "rope_local_base_freq": m.get("rope.freq_base_swa", 10000.0, kind=float),
            "query_pre_attn_scalar": hidden // heads if layers == 62 else head_dim,
            "final_logit_softcapping": m.get("final_logit_softcapping", None, kind=float),
            "attn_logit_softcapping": m.get("attn_logit_softcapping", None, kind=float),
            "use_bidirectional_attention": False,
        }
        if pattern is None:
            del cfg["sliding_window_pattern"]
    check_config(g.path, cfg, len(g.tensors))
    return cfg
