"""HF transformers models from tiny random configs (no downloads) through torch.compile, against eager.

Causal LMs: prefill logits, then 16 greedy decode steps with a static KV cache give eager's tokens,
and the model is compiled at most twice (prefill, decode): the cache's tensors keep their shapes
and its write position is a tensor, so every decode step reuses the decode graph.  Whisper: the
encoder-decoder forward's logits.
"""

from __future__ import annotations

import pytest
import torch

import lightspeed.torch as lst

transformers = pytest.importorskip("transformers")

REF = {"target": "reference"}
DIMS = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=128, max_position_embeddings=64, head_dim=16)


def _model(name: str):
    torch.manual_seed(0)
    if name == "llama":
        cfg = transformers.LlamaConfig(**DIMS)
        return transformers.LlamaForCausalLM(cfg).eval(), cfg
    if name == "qwen3":
        cfg = transformers.Qwen3Config(**DIMS)
        return transformers.Qwen3ForCausalLM(cfg).eval(), cfg
    if name.startswith("qwen3_moe"):
        # the default experts implementation ("grouped_mm": tokens sorted by expert, histc offsets, a
        # grouped matmul) and "batched_mm" (gathered expert weights) both have static shapes; the
        # "eager" one loops over the experts that were hit (nonzero), which makes dynamo break graphs
        extra = {"experts_implementation": "batched_mm"} if name.endswith("batched_mm") else {}
        cfg = transformers.Qwen3MoeConfig(**DIMS, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                                          **extra)
        return transformers.Qwen3MoeForCausalLM(cfg).eval(), cfg
    if name == "gemma3":
        # a 4-token sliding window: the decode below runs past it, through the sliding cache layers
        cfg = transformers.Gemma3TextConfig(**DIMS, sliding_window=4)
        return transformers.Gemma3ForCausalLM(cfg).eval(), cfg
    raise ValueError(name)


def tiny_whisper():
    """A tiny random Whisper (seed 0)."""
    torch.manual_seed(0)
    cfg = transformers.WhisperConfig(
        vocab_size=128, num_mel_bins=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128, d_model=64, max_source_positions=16,
        max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    return transformers.WhisperForConditionalGeneration(cfg).eval()


def greedy(model, cfg, ids: torch.Tensor, steps: int) -> tuple[torch.Tensor, list[int]]:
    """Prefill logits and ``steps`` greedy tokens with a static cache."""
    cache = transformers.StaticCache(config=cfg, max_cache_len=32)
    with torch.no_grad():
        out = model(ids, cache=cache, use_cache=True)
        logits = out.logits
        tokens = []
        tok = out.logits[:, -1:].argmax(-1)
        for _ in range(steps):
            tokens.append(int(tok))
            out = model(tok, cache=cache, use_cache=True)
            tok = out.logits[:, -1:].argmax(-1)
    return logits, tokens


def _check_lm(name: str, steps: int = 16) -> None:
    model, cfg = _model(name)
    ids = torch.randint(0, cfg.vocab_size, (1, 6), generator=torch.Generator().manual_seed(1))
    ref_logits, ref_tokens = greedy(model, cfg, ids, steps)
    logits, tokens = greedy(torch.compile(model, backend="lightspeed", options=REF), cfg, ids, steps)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-4)
    assert tokens == ref_tokens
    n = lst.stats()["compilations"]
    assert 1 <= n <= 2, f"{name}: {n} compilations (prefill + decode expected)"


def test_llama_prefill_logits():
    model, cfg = _model("llama")
    ids = torch.randint(0, cfg.vocab_size, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = model(ids).logits
        got = torch.compile(model, backend="lightspeed", options=REF)(ids).logits
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    assert lst.stats()["compilations"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama", "qwen3", "qwen3_moe", "qwen3_moe_batched_mm", "gemma3"])
def test_causal_lm_static_cache_decode(name):
    _check_lm(name)


@pytest.mark.slow
def test_whisper_logits():
    model = tiny_whisper()
    feats = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(1))
    dec = torch.tensor([[1, 5, 7, 9]])
    with torch.no_grad():
        ref = model(input_features=feats, decoder_input_ids=dec).logits
        compiled = torch.compile(model, backend="lightspeed", options=REF)
        got = compiled(input_features=feats, decoder_input_ids=dec).logits
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
    assert lst.stats()["compilations"] == 1


@pytest.mark.slow
def test_llama_generate_with_static_cache_implementation():
    """``generate(cache_implementation="static")`` on a compiled forward: eager's tokens, two graphs."""
    model, cfg = _model("llama")
    model.generation_config.pad_token_id = 0
    ids = torch.randint(1, cfg.vocab_size, (1, 6), generator=torch.Generator().manual_seed(1))
    ref = model.generate(ids, max_new_tokens=16, do_sample=False, cache_implementation="static")
    model.forward = torch.compile(model.forward, backend="lightspeed", options=REF)
    got = model.generate(ids, max_new_tokens=16, do_sample=False, cache_implementation="static")
    assert torch.equal(got, ref)
    assert lst.stats()["compilations"] == 2


@pytest.mark.slow
def test_llama_decode_on_cpu_backend():
    """The same decode on the cpu backend (e-graph search, budget 2) instead of the reference runtime."""
    model, cfg = _model("llama")
    ids = torch.randint(0, cfg.vocab_size, (1, 6), generator=torch.Generator().manual_seed(1))
    ref_logits, ref_tokens = greedy(model, cfg, ids, 8)
    compiled = torch.compile(model, backend="lightspeed", options={"target": "cpu", "budget": 2})
    logits, tokens = greedy(compiled, cfg, ids, 8)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-4)
    assert tokens == ref_tokens
    assert [g["target"] for g in lst.stats()["graphs"]] == ["cpu", "cpu"]
