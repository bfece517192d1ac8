"""GGUF -> Hugging Face conventions: the config, the tensor names, and llama.cpp's layout changes undone.

What every decoder file shares is read here: the common config entries, the global and per-layer
tensor names (:data:`GLOBAL_NAMES`, :data:`BLOCK_NAMES`).  What differs by architecture is
declared by its family (``lightspeed.models.family.Checkpoint``): the architecture's own config
entries, its tensor names, and the layout changes llama.cpp's ``convert_hf_to_gguf.py`` made
(Llama's interleaved Q/K rows, Gemma's ``1 + w`` norms: see ``models/families/llama.py`` and
``models/families/gemma3.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..models import family as registry
from .errors import WeightError
from .gguf_file import GGUFFile
from .shapes import check_config

__all__ = ["supported_architectures", "gguf_config", "hf_name", "fix_tensor", "fix_rows", "GGUFMetadata",
           "GLOBAL_NAMES", "BLOCK_NAMES", "IGNORED_TENSORS"]

GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
BLOCK_NAMES = {
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
# Tensors llama.cpp stores that have no counterpart in the HF state_dict (they become config entries).
IGNORED_TENSORS = frozenset({"rope_freqs.weight"})


def supported_architectures() -> tuple[str, ...]:
    """The GGUF architectures some family declares, in registry order."""
    return tuple(c.gguf_architecture for f in registry.families().values() for c in f.checkpoints
                 if c.gguf_architecture is not None)


def hf_name(arch: str, name: str) -> str | None:
    """The HF state_dict name of GGUF tensor `name`, or None if it has none."""
    stem, _, kind = name.rpartition(".")
    if kind not in ("weight", "bias"):
        return None
    if stem in GLOBAL_NAMES:
        return f"{GLOBAL_NAMES[stem]}.{kind}"
    parts = stem.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit():
        declared = registry.gguf_checkpoint(arch)
        table = {**BLOCK_NAMES, **declared.gguf_block_names} if declared is not None else BLOCK_NAMES
        if parts[2] in table:
            return f"model.layers.{parts[1]}.{table[parts[2]]}.{kind}"
    return None


def fix_tensor(config: Mapping[str, Any], name: str, w: np.ndarray) -> np.ndarray:
    """Undo llama.cpp's layout changes on tensor `name` (HF name) of a model with HF `config`."""
    declared = registry.checkpoint(config["model_type"])
    return w if declared is None or declared.fix_tensor is None else declared.fix_tensor(config, name, w)


def fix_rows(config: Mapping[str, Any], name: str, rows: np.ndarray) -> np.ndarray | None:
    """`fix_tensor`'s change of tensor `name` applied to per-row data of it (its quantised blocks,
    one row of bytes per matrix row): the same row permutation, or None when the change is not a
    permutation of whole rows (the blocks then no longer hold the fixed tensor)."""
    declared = registry.checkpoint(config["model_type"])
    return rows if declared is None or declared.fix_rows is None else declared.fix_rows(config, name, rows)


# -- config ------------------------------------------------------------------------------------------------

_MISSING = object()


class GGUFMetadata:
    """Typed access to `<arch>.*` and `tokenizer.ggml.*` metadata with file-naming errors (what a
    family's `Checkpoint.gguf_config` reads its entries through)."""

    def __init__(self, g: GGUFFile):
        self.g = g
        self.md = g.metadata
        self.arch = g.architecture

    @property
    def path(self) -> Any:
        return self.g.path

    @property
    def values(self) -> dict[str, Any]:
        """Every metadata key/value of the file, unchecked."""
        return self.md

    def has_tensor(self, name: str) -> bool:
        return name in self.g.tensors

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


def _vocab_size(m: GGUFMetadata) -> int:
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


def _rope_scaling(m: GGUFMetadata, head_dim: int, rope_theta: float) -> dict[str, Any] | None:
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
    m = GGUFMetadata(g)
    arch = m.arch
    declared = registry.gguf_checkpoint(arch)
    if declared is None or declared.gguf_config is None:
        raise WeightError(f"{g.path}: GGUF architecture {arch!r} is not supported "
                          f"(supported: {', '.join(supported_architectures())})")
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
    cfg |= declared.gguf_config(m, cfg)  # the architecture's own entries (its family declares them)
    check_config(g.path, cfg, len(g.tensors))
    return cfg
