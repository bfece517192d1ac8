"""In-place updates of buffers and inputs (a static KV cache written with index_copy_, copy_,
slice assignment) reach the caller's tensors, as in eager PyTorch."""

from __future__ import annotations

import copy

import torch
import torch.nn as nn

import lightspeed.torch as lst

REF = {"target": "reference"}


class StaticCacheAttention(nn.Module):
    """Single-head attention with a preallocated cache written in place at ``pos`` each step."""

    def __init__(self, dim: int = 8, max_len: int = 6) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.register_buffer("keys", torch.zeros(1, max_len, dim))
        self.register_buffer("values", torch.zeros(1, max_len, dim))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        self.keys.index_copy_(1, pos, self.k(x))
        self.values[:, pos] = self.v(x)
        self.steps.add_(1)
        live = torch.arange(self.keys.shape[1]) <= pos
        att = (self.q(x) @ self.keys.transpose(1, 2)).masked_fill(~live, float("-inf")).softmax(-1)
        return att @ self.values


def test_static_kv_cache_buffers_are_written_back():
    torch.manual_seed(0)
    eager = StaticCacheAttention().eval()
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, backend="lightspeed", options=REF)
    with torch.no_grad():
        for i in range(5):
            x = torch.randn(1, 1, 8, generator=torch.Generator().manual_seed(i))
            pos = torch.tensor([i])
            torch.testing.assert_close(compiled(x, pos), eager(x, pos), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model.keys, eager.keys)
    torch.testing.assert_close(model.values, eager.values)
    assert int(model.steps) == 5
    assert lst.stats()["compilations"] == 1  # the write position is a tensor: one graph for all steps


def test_inputs_mutated_in_place():
    def f(cache, x, out):
        cache[:, 1:3] = x * 2
        out.copy_(cache.sum(1))
        return cache.mean()

    cache, x, out = torch.zeros(2, 4), torch.randn(2, 2), torch.empty(2)
    ref_cache, ref_out = cache.clone(), out.clone()
    ref = f(ref_cache, x, ref_out)
    got = torch.compile(f, backend="lightspeed", options=REF)(cache, x, out)
    torch.testing.assert_close(got, ref)
    torch.testing.assert_close(cache, ref_cache)
    torch.testing.assert_close(out, ref_out)


def test_outputs_do_not_alias_inputs():
    """A result that equals an input (clone) is a fresh tensor: writing to it leaves the input alone."""
    def f(x):
        return x.clone(), x + 0

    x = torch.ones(3)
    a, b = torch.compile(f, backend="lightspeed", options=REF)(x)
    a.add_(1)
    b.add_(1)
    torch.testing.assert_close(x, torch.ones(3))


def test_static_kv_cache_is_written_in_place_on_cpu(monkeypatch):
    """On the cpu target the cache buffers are outputs aliasing their inputs: the compiled
    program writes the new rows into the caller's buffers (ScatterInPlace, no whole-cache copy) and
    returns the buffers themselves, so AOTAutograd's copy back is a no-op.  Results, cache contents
    and the buffers' storage match eager at every step."""
    import lightspeed.torch.dynamo as dynamo

    made = []
    real = dynamo.compile_fx

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(dynamo, "compile_fx", spy)
    torch.manual_seed(0)
    eager = StaticCacheAttention().eval()
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, backend="lightspeed", options={"target": "cpu", "budget": 3})
    storage = (model.keys.data_ptr(), model.values.data_ptr())
    with torch.no_grad():
        for p in range(4):
            x = torch.randn(1, 1, 8)
            pos = torch.tensor([p])
            torch.testing.assert_close(compiled(x, pos), eager(x, pos), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(model.keys, eager.keys, rtol=1e-6, atol=1e-7)
            torch.testing.assert_close(model.values, eager.values, rtol=1e-6, atol=1e-7)
    assert (model.keys.data_ptr(), model.values.data_ptr()) == storage
    (cg,) = made
    assert len(cg.written) == 3  # keys, values and the step counter are written into the caller's buffers
    assert any("ScatterInPlace" in seg.program.report() for seg in cg.segments)


def test_compiled_module_is_safe_to_call_from_threads():
    """4 threads call one torch.compile'd module (cpu target) with different inputs: every result
    equals eager PyTorch's (the compiled program's buffers are per thread)."""
    import threading

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).eval()
    compiled = torch.compile(model, backend="lightspeed", options={"target": "cpu", "budget": 3})
    xs = [torch.randn(64, 16) for _ in range(6)]
    with torch.no_grad():
        wants = [model(x) for x in xs]
        compiled(xs[0])  # compile once, before the threads
    errors: list[str] = []

    def worker(t: int) -> None:
        with torch.no_grad():
            for it in range(30):
                k = (t * 5 + it) % len(xs)
                if not torch.allclose(compiled(xs[k]), wants[k], rtol=1e-5, atol=1e-6):
                    errors.append(f"thread {t} call {it}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:5]
