"""The Qwen3-MoE family: names, tensor parallel (each expert's width split) and the ``--random``
config.  The graph is ``lightspeed/models/qwen3_moe.py``.  No GGUF mapping, shape check or default
weights: ``--weights`` takes an HF directory, or ``--random``."""

from __future__ import annotations

from ..family import SMALL_DECODER, Family

__all__ = ["FAMILY"]

FAMILY = Family(
    name="qwen3_moe",
    model="lightspeed.models.qwen3_moe:Qwen3Moe",
    model_types=("qwen3_moe",),
    tensor_parallel=True,
    # top-2 of 8 experts
    random_config=dict(SMALL_DECODER, model_type="qwen3_moe", num_hidden_layers=2, rope_theta=1_000_000.0,
                       tie_word_embeddings=False, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
                       norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[]),
)
