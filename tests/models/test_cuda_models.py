"""The model zoo on the ``cuda`` backend (float32) against Hugging Face transformers in float64, on
the same tiny random weights as the cpu tests: Llama, Qwen3, Gemma 3 (prefill logits at every
position; greedy decoding through the Generator's on-device KV cache), Qwen3-MoE and Gemma 4 MoE,
and Whisper's encoder, prefill and decode steps.  Skipped without a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from lightspeed.backends import get_backend

if not get_backend("cuda").available():
    pytest.skip("the cuda backend has no device here", allow_module_level=True)

from . import test_models as dense  # noqa: E402
from . import test_moe as moe  # noqa: E402
from . import test_whisper as whisper  # noqa: E402


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3"])
def test_prefill_logits_match_hf(family):
    dense.test_prefill_logits_match_hf(family, "cuda")


@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3"])
def test_greedy_decode_matches_hf(family):
    dense.test_greedy_decode_matches_hf(family, "cuda")


@pytest.mark.parametrize("family", ["qwen3_moe", "gemma4_moe"])
def test_moe_prefill_logits_match_hf(family):
    moe.test_prefill_logits_match_hf(family, "cuda")


@pytest.mark.parametrize("family", ["qwen3_moe", "gemma4_moe"])
def test_moe_greedy_decode_matches_hf(family):
    hf, model, sd = moe.setup(family)
    res = moe.Generator(model, sd, backend="cuda", search=moe.SEARCH).generate(moe.PROMPT, moe.STEPS, stop_ids=(),
                                                                               keep_logits=True)
    assert res.new_ids == moe.hf_greedy(hf, moe.PROMPT, moe.STEPS)
    ref = moe.hf_logits(hf, res.ids)[len(moe.PROMPT) - 1:-1]
    np.testing.assert_allclose(np.stack(res.logits), ref, atol=1e-4, rtol=0)


def test_whisper_matches_transformers():
    model, cfg, sd = whisper.small_hf_whisper()
    rng = np.random.default_rng(1)
    feats = rng.standard_normal((whisper.SMALL["num_mel_bins"], 2 * whisper.SMALL["max_source_positions"]))
    wm = whisper.WhisperModel(cfg, sd, backend="cuda", search=whisper.SEARCH)
    whisper.check_model(wm, model, feats.astype(np.float32), steps=8)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_whisper_in_16_bits_matches_transformers(dtype):
    """Whisper's programs in float16 / bfloat16 on the GPU (their products, the encoder's
    convolutions among them, candidates for the tensor-core tiles) against transformers in float32."""
    model, cfg, sd = whisper.small_hf_whisper()
    rng = np.random.default_rng(1)
    feats = rng.standard_normal((whisper.SMALL["num_mel_bins"], 2 * whisper.SMALL["max_source_positions"]))
    wm = whisper.WhisperModel(cfg, sd, backend="cuda", search=whisper.SEARCH, dtype=dtype)
    whisper.check_half_model(wm, model, feats.astype(np.float32), steps=8)
