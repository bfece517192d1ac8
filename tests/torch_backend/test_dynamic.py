"""Dynamic shapes: SymInt sizes become lightspeed symbols, so a decode loop whose cache grows by one
position per step compiles once (mark_dynamic, dynamic=True, or dynamo's automatic dynamic after
one recompile), not once per length."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import lightspeed.torch as lst

REF = {"target": "reference"}


class GrowingCacheAttention(nn.Module):
    """One decode step of single-head attention over a cache that grows by concatenation."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor):
        keys = torch.cat([keys, self.k(x)], dim=1)
        values = torch.cat([values, self.v(x)], dim=1)
        att = (self.q(x) @ keys.transpose(1, 2) / keys.shape[-1] ** 0.5).softmax(-1)
        return att @ values, keys, values


def _decode(step, steps: int = 6, start: int = 2, mark: bool = False):
    torch.manual_seed(0)
    keys, values = torch.randn(1, start, 16), torch.randn(1, start, 16)
    outs = []
    with torch.no_grad():
        for i in range(steps):
            x = torch.randn(1, 1, 16, generator=torch.Generator().manual_seed(i))
            if mark:
                torch._dynamo.mark_dynamic(keys, 1)
                torch._dynamo.mark_dynamic(values, 1)
            y, keys, values = step(x, keys, values)
            outs.append(y)
    return outs, keys


@pytest.mark.parametrize("how", ["dynamic_true", "mark_dynamic"])
def test_growing_cache_compiles_once(how):
    torch.manual_seed(0)
    model = GrowingCacheAttention().eval()
    ref, ref_keys = _decode(model)
    compiled = torch.compile(model, backend="lightspeed", options=REF, dynamic=True if how == "dynamic_true" else None)
    got, keys = _decode(compiled, mark=how == "mark_dynamic")
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(keys, ref_keys)
    s = lst.stats()
    assert s["compilations"] == 1, s
    assert s["graphs"][0]["symbols"], "the cache length should be a symbol"


def test_automatic_dynamic_recompiles_once():
    """Without hints dynamo compiles the first length statically, then once with a symbol."""
    torch.manual_seed(0)
    model = GrowingCacheAttention().eval()
    ref, _ = _decode(model)
    got, _ = _decode(torch.compile(model, backend="lightspeed", options=REF))
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-5, atol=1e-5)
    assert lst.stats()["compilations"] == 2


def test_symbolic_batch_and_sequence():
    """Reshapes, softmax and layer norm over a (batch, seq) that are both symbols."""
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 8)).eval()

    def f(x):
        b, s, _ = x.shape
        h = block(x).reshape(b * s, 8).softmax(0).reshape(b, s, 8)
        return h.sum(1) + s

    compiled = torch.compile(f, backend="lightspeed", options=REF, dynamic=True)
    with torch.no_grad():
        for b, s in [(2, 3), (3, 5), (4, 2)]:
            x = torch.randn(b, s, 8, generator=torch.Generator().manual_seed(b * s))
            torch.testing.assert_close(compiled(x), f(x), rtol=1e-5, atol=1e-5)
    assert lst.stats()["compilations"] == 1


@pytest.mark.slow
def test_llama_dynamic_cache_decode_dynamic_true():
    """An HF Llama decoding with its default (growing) DynamicCache under dynamic=True: prefill and
    one decode graph whose cache length is a symbol serve all 8 steps."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=128, max_position_embeddings=64, head_dim=16)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 128, (1, 6), generator=torch.Generator().manual_seed(1))

    def loop(m):
        with torch.no_grad():
            out = m(ids, use_cache=True)
            toks = []
            for _ in range(8):
                tok = out.logits[:, -1:].argmax(-1)
                toks.append(int(tok))
                out = m(tok, cache=out.past_key_values, use_cache=True)
        return toks

    ref = loop(model)
    assert loop(torch.compile(model, backend="lightspeed", options=REF, dynamic=True)) == ref
    s = lst.stats()
    assert s["compilations"] == 2, s
    assert s["graphs"][1]["symbols"]


def test_a_segment_without_the_dynamic_dim():
    """An op run eagerly splits the graph in two lightspeed segments; the second has no dynamic
    dim. Each program gets only the dims it has (the runner had passed every graph dim to every
    segment, which a program now refuses: a Gemma 3 static-cache decode failed this way)."""
    torch._dynamo.reset()

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        a = torch.lgamma(x.sum(0))  # no translation: runs in PyTorch between the two segments
        return a * w + 1.0

    step = torch.compile(f, backend="lightspeed", options={**REF, "fallback": "eager"})
    w = torch.randn(4)
    with torch.no_grad():
        for n in (3, 5, 7):
            x = torch.randn(n, 4)
            torch._dynamo.mark_dynamic(x, 0)
            torch.testing.assert_close(step(x, w), f(x, w))
