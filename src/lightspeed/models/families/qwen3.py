"""The Qwen3 family (dense): names, weight files, tensor parallel and the ``--random`` config.  The
graph is ``lightspeed/models/qwen3.py``.  No default weights: ``--weights PATH`` or ``--random``.

Qwen2 files load too (their GGUF config, names and shapes are declared here: Qwen3's structure
without q/k norms, with q/k/v biases), although no class builds a Qwen2 model yet.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from ...weights.shapes import decoder_shapes
from ..family import SMALL_DECODER, Checkpoint, Family

__all__ = ["FAMILY"]


def qwen3_gguf_config(meta: Any, config: dict[str, Any]) -> dict[str, Any]:
    return {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_act": "silu",
            "attention_bias": meta.has_tensor("blk.0.attn_q.bias")}


def qwen2_gguf_config(meta: Any, config: dict[str, Any]) -> dict[str, Any]:
    return {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_act": "silu",
            "use_sliding_window": False}


FAMILY = Family(
    name="qwen3",
    model="lightspeed.models.qwen3:Qwen3",
    model_types=("qwen3",),
    checkpoints=(
        Checkpoint("qwen3", shapes=partial(decoder_shapes, qk_norm=True), gguf_architecture="qwen3",
                   gguf_config=qwen3_gguf_config),
        # Qwen2 has biases on q/k/v only (attention_bias defaults to true); Llama's covers o_proj too
        Checkpoint("qwen2", shapes=partial(decoder_shapes, attention_bias=True, o_proj_bias=False),
                   gguf_architecture="qwen2", gguf_config=qwen2_gguf_config),
    ),
    tensor_parallel=True,
    random_config=dict(SMALL_DECODER, model_type="qwen3", num_hidden_layers=2, rope_theta=1_000_000.0,
                       tie_word_embeddings=True),
)
