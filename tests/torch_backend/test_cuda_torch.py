"""``torch.compile(backend="lightspeed")`` on CUDA tensors (the ``cuda`` target, chosen by the
inputs' device): the module suite against float64 eager, the HF random-config causal LMs' prefill
logits and greedy static-cache decode against eager on the GPU, Whisper's logits.  Inputs and
outputs stay CUDA tensors (no host round trip).  Skipped without a GPU."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn as nn

import lightspeed.torch as lst
from tests.torch_backend.test_hf_models import _model, greedy, tiny_whisper
from tests.torch_backend.test_modules import CausalSelfAttention, ConvNet, _mlp

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU here", allow_module_level=True)
from lightspeed.backends import get_backend  # noqa: E402

if not get_backend("cuda").available():
    pytest.skip("the cuda backend has no device here", allow_module_level=True)

transformers = pytest.importorskip("transformers")
OPTS = {"budget": 2, "seed": 0}  # no target: the CUDA inputs choose cuda


def _check(model: nn.Module, *inputs: torch.Tensor, tol: float = 1e-5) -> None:
    model = model.eval()
    ref_model = copy.deepcopy(model).double()
    dev = [x.cuda() for x in inputs]
    with torch.no_grad():
        got = torch.compile(model.cuda(), backend="lightspeed", options=OPTS)(*dev)
        ref = ref_model(*(x.double() if x.is_floating_point() else x for x in inputs))
    assert got.is_cuda
    np.testing.assert_allclose(got.double().cpu().numpy(), ref.numpy(), rtol=tol, atol=tol)
    assert [g["target"] for g in lst.stats()["graphs"]] == ["cuda"]


def test_mlp():
    _check(_mlp(), torch.randn(5, 8, generator=torch.Generator().manual_seed(1)))


def test_convnet():
    torch.manual_seed(0)
    net = ConvNet()
    for bn in (net.bn1, net.bn2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    _check(net, torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1)), tol=1e-4)


def test_attention():
    torch.manual_seed(0)
    _check(CausalSelfAttention(), torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(1)))


@pytest.mark.parametrize("name", ["llama", "qwen3", "qwen3_moe_batched_mm", "gemma3"])
def test_causal_lm_static_cache_decode_on_the_gpu(name):
    model, cfg = _model(name)
    model = model.cuda()
    ids = torch.randint(0, cfg.vocab_size, (1, 6), generator=torch.Generator().manual_seed(1)).cuda()
    ref_logits, ref_tokens = greedy(model, cfg, ids, 12)
    logits, tokens = greedy(torch.compile(model, backend="lightspeed", options=OPTS), cfg, ids, 12)
    assert logits.is_cuda
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-4)
    assert tokens == ref_tokens
    assert {g["target"] for g in lst.stats()["graphs"]} == {"cuda"}


def test_whisper_logits_on_the_gpu():
    model = tiny_whisper().cuda()
    feats = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(1)).cuda()
    dec = torch.tensor([[1, 5, 7, 9]]).cuda()
    with torch.no_grad():
        ref = model(input_features=feats, decoder_input_ids=dec).logits
        compiled = torch.compile(model, backend="lightspeed", options=OPTS)
        got = compiled(input_features=feats, decoder_input_ids=dec).logits
    assert got.is_cuda
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4)
