"""``torch.compile(model, backend="lightspeed")`` in training: AOTAutograd's forward and backward
graphs both compiled by lightspeed (no eager fallback allowed), 20 SGD steps of a small Hugging
Face Llama with the losses of eager PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _losses(compiled: bool, attn: str) -> np.ndarray:
    from transformers import LlamaConfig, LlamaForCausalLM

    import lightspeed  # noqa: F401 - registers the backend

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=64, attn_implementation=attn)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).float().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    f = torch.compile(model, backend="lightspeed") if compiled else model
    gen = torch.Generator().manual_seed(1)
    out = []
    for _ in range(20):
        ids = torch.randint(0, 64, (2, 16), generator=gen)
        loss = f(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(loss.item())
    return np.array(out)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_training_a_llama_through_torch_compile_matches_eager(attn):
    torch._dynamo.reset()
    eager = _losses(False, attn)
    compiled = _losses(True, attn)
    np.testing.assert_allclose(compiled, eager, rtol=1e-4)
    assert compiled[-1] != compiled[0]  # it trained: the weights moved
