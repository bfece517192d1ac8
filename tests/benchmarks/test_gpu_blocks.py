"""benchmarks/gpu_blocks.py's random model (``random:smollm2``): the block step's A/B without the
real file must hold the real file's block types and the float configurations the same numbers."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gpu_blocks  # noqa: E402

from lightspeed.models.run import random_weights  # noqa: E402
from lightspeed.weights.quant import QuantTensor  # noqa: E402

SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, vocab_size=96, tie_word_embeddings=True)


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setitem(gpu_blocks.RANDOM, "small", ("llama", gpu_blocks.RANDOM["smollm2"][1], SMALL))


def test_the_random_model_holds_q4_1_projections_and_a_q8_0_embedding(small):
    tm = gpu_blocks.random_text_model("small", "float32", blocks=True)
    blocks = {n: v.qtype for n, v in tm.tensors.items() if isinstance(v, QuantTensor)}
    projections = [n for n in tm.model.param_shapes() if n.endswith("proj.weight")]
    assert len(projections) == 2 * 7
    assert blocks == {**{n: "q4_1" for n in projections}, "model.embed_tokens.weight": "q8_0"}
    # what a backend with block kernels declares as block inputs: exactly those
    assert {n: d.name for n, d in tm.model.block_storage(tm.tensors, "native").items()} == blocks


def test_the_float_configurations_run_the_blocks_values(small):
    with_blocks = gpu_blocks.random_text_model("small", "float32", blocks=True)
    floats = gpu_blocks.random_text_model("small", "float32", blocks=False)
    for name, v in with_blocks.tensors.items():
        got = floats.tensors[name]
        assert not isinstance(got, QuantTensor)
        want = v.dense() if isinstance(v, QuantTensor) else v
        np.testing.assert_array_equal(np.asarray(got), want)
    # the quantiser's error, not a copy: Q4_1 of N(0, 1/64) values is within half a step of 16 levels
    raw = random_weights(with_blocks.model, 0)["model.layers.0.mlp.up_proj.weight"]
    err = np.abs(with_blocks.tensors["model.layers.0.mlp.up_proj.weight"].dense() - raw)
    assert 0 < err.max() < (raw.max() - raw.min()) / 15


def test_the_gemma3_random_model_holds_the_real_files_mix_of_block_types(monkeypatch):
    """gemma-3-270m Q4_K_M's mix (Q5_0, Q8_0, Q4_K, Q6_K), the K-quants as random blocks."""
    family, types, shape = gpu_blocks.RANDOM["gemma3"]
    small = {**shape, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 2,
             "head_dim": 128, "vocab_size": 96, "layer_types": ["sliding_attention", "full_attention"],
             "query_pre_attn_scalar": 128}
    monkeypatch.setitem(gpu_blocks.RANDOM, "small", (family, types, small))
    tm = gpu_blocks.random_text_model("small", "float32", blocks=True)
    got = {n.split(".")[-2]: v.qtype for n, v in tm.tensors.items() if isinstance(v, QuantTensor)}
    assert got == {"q_proj": "q5_0", "k_proj": "q5_0", "v_proj": "q8_0", "o_proj": "q4_k", "gate_proj": "q5_0",
                   "up_proj": "q5_0", "down_proj": "q6_k", "embed_tokens": "q8_0"}
    floats = gpu_blocks.random_text_model("small", "float32", blocks=False)
    down = "model.layers.1.mlp.down_proj.weight"
    np.testing.assert_array_equal(np.asarray(floats.tensors[down]), tm.tensors[down].dense())
    assert np.isfinite(tm.tensors[down].dense()).all()
