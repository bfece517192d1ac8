"""The Gemma 4 MoE family: names and the ``--random`` config.  The graph is
``lightspeed/models/gemma4.py``.  No GGUF mapping, shape check or default weights; tensor parallel
does not apply (its per-layer inputs, k = v attention and mixed head dims are not in the plan)."""

from __future__ import annotations

from ..family import SMALL_DECODER, Family

__all__ = ["FAMILY"]

FAMILY = Family(
    name="gemma4_moe",
    model="lightspeed.models.gemma4:Gemma4",
    model_types=("gemma4_text", "gemma4"),
    # sliding + global layers, Gemma 4's own global head_dim with k = v, top-2 of 8 experts
    random_config=dict(SMALL_DECODER, model_type="gemma4_text", num_hidden_layers=2,
                       layer_types=["sliding_attention", "full_attention"], sliding_window=16, global_head_dim=64,
                       num_global_key_value_heads=1, attention_k_eq_v=True, enable_moe_block=True, num_experts=8,
                       top_k_experts=2, moe_intermediate_size=64, hidden_size_per_layer_input=0,
                       final_logit_softcapping=30.0, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                       rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                                        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                           "rope_theta": 1_000_000.0}}),
)
