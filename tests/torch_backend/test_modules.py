"""Whole modules through ``torch.compile(backend="lightspeed")`` against eager PyTorch in float64:
an MLP, a convnet (batch norm, pooling, interpolation) and multi-head attention with a causal mask."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: N812

import lightspeed.torch as lst

REF = {"target": "reference"}


def _check(model: nn.Module, *inputs: torch.Tensor, options: dict | None = None, tol: float = 1e-5) -> None:
    """Compiled float32 output vs the float64 eager model on the same inputs; one compilation."""
    model = model.eval()
    ref_model = copy.deepcopy(model).double()
    with torch.no_grad():
        got = torch.compile(model, backend="lightspeed", options=options or REF)(*inputs)
        ref = ref_model(*(x.double() if x.is_floating_point() else x for x in inputs))
    got = got if isinstance(got, tuple) else (got,)
    ref = ref if isinstance(ref, tuple) else (ref,)
    for g, r in zip(got, ref):
        if r is None:
            continue
        assert g.dtype == torch.float32
        np.testing.assert_allclose(g.double().numpy(), r.numpy(), rtol=tol, atol=tol)
    assert lst.stats()["compilations"] == 1


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.LayerNorm(32), nn.Dropout(0.1), nn.Linear(32, 32), nn.SiLU(),
                         nn.Linear(32, 4), nn.Tanh())


def test_mlp():
    _check(_mlp(), torch.randn(5, 8, generator=torch.Generator().manual_seed(1)))


def test_mlp_on_the_cpu_backend():
    _check(_mlp(), torch.randn(5, 8, generator=torch.Generator().manual_seed(1)),
           options={"target": "cpu", "budget": 2, "seed": 0})
    assert lst.stats()["graphs"][0]["target"] == "cpu"


def test_cpu_tensors_default_to_the_native_backend():
    """CPU tensors compile for the fastest CPU path: native (generated C) when a C compiler is
    usable, else the numpy cpu backend; the result matches eager."""
    from lightspeed.backends import get_backend

    lin, x = nn.Linear(4, 2), torch.randn(3, 4)
    with torch.no_grad():
        got = torch.compile(lin, backend="lightspeed", options={"budget": 1})(x)
        torch.testing.assert_close(got, lin(x))
    want = "native" if get_backend("native").available() else "cpu"
    assert lst.stats()["graphs"][0]["target"] == want


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.avg = nn.AvgPool2d(2)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        y = F.interpolate(x, scale_factor=2, mode="nearest") + F.interpolate(x, scale_factor=2, mode="bilinear")
        x = F.relu6(self.bn2(self.conv2(self.avg(y))))
        return F.log_softmax(self.fc(torch.flatten(self.gap(x), 1)), -1)


def test_convnet_with_batch_norm_pooling_interpolation():
    torch.manual_seed(0)
    net = ConvNet()
    for bn in (net.bn1, net.bn2):  # non-trivial running statistics
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    _check(net, torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1)), tol=1e-4)


class CausalSelfAttention(nn.Module):
    """A GPT block written out: fused qkv projection, heads, causal mask by masked_fill, softmax."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.register_buffer("mask", torch.tril(torch.ones(16, 16, dtype=torch.bool)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (c // self.heads) ** 0.5
        att = att.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, c))


def test_attention_with_causal_mask_written_out():
    torch.manual_seed(0)
    _check(CausalSelfAttention(), torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(1)))


@pytest.mark.parametrize("kind", ["bool_mask", "is_causal"])
def test_nn_multihead_attention_causal(kind):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(32, 4, batch_first=True)
    x = torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(1))
    mask = nn.Transformer.generate_square_subsequent_mask(6) if kind == "is_causal" else \
        torch.triu(torch.ones(6, 6, dtype=torch.bool), 1)

    class Wrap(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mha = mha

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.mha(x, x, x, attn_mask=mask, need_weights=False, is_causal=kind == "is_causal")[0]

    _check(Wrap(), x)


def test_sdpa_stays_one_op_in_the_translated_graph():
    """scaled_dot_product_attention reaches the translation whole (not decomposed into matmuls)."""
    seen = []

    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    from torch._dynamo.backends.common import aot_autograd

    def spy(gm, example_inputs):
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return gm

    qkv = [torch.randn(1, 2, 5, 8) for _ in range(3)]
    torch.compile(f, backend=aot_autograd(fw_compiler=spy, decompositions=lst.decompositions()))(*qkv)
    assert any("scaled_dot_product" in s for s in seen), seen
    assert not any("bmm" in s or "_softmax" in s for s in seen), seen


@pytest.mark.parametrize("op,args", [
    ("_scaled_dot_product_efficient_attention", (None, False, 0.0, True)),
    ("_scaled_dot_product_flash_attention", (0.0, True)),
    ("_scaled_dot_product_cudnn_attention", (None, False, 0.0, True)),
])
def test_the_gpu_attention_kernels_translate(op, args):
    """On a GPU, SDPA reaches the graph as one of CUDA's attention kernels: traced here with fake
    tensors (no GPU needed), translated, and run on the reference against the math of SDPA."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from lightspeed.torch.translate import Options, compile_fx

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=gen) for _ in range(3))

    def f(q, k, v):
        return getattr(torch.ops.aten, op)(q, k, v, *args)[0]

    gm = make_fx(f, tracing_mode="fake")(q, k, v)  # getitems of every output: dead ones read nothing
    got = compile_fx(gm, [q, k, v], Options(target="reference"))(q, k, v)
    got = got[0] if isinstance(got, (tuple, list)) else got
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    np.testing.assert_allclose(got.double().numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
