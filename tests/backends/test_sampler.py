"""The backends' token sampler (``codegen/kernels/sample.py``, ``Backend.sampler``) against the
host sampler (``models.generate.sample_token``, numpy in float64): the same token for the same
uniform draw, over temperatures, top-k, top-p, ties, blocked logits and logit dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import lightspeed as ls
from lightspeed.errors import InputError
from lightspeed.models.generate import sample_token

NATIVE = ls.backends.get_backend("native")
pytestmark = pytest.mark.skipif(not NATIVE.available(), reason="no C compiler")


@pytest.fixture(scope="module")
def sampler():
    return NATIVE.sampler()


def _host(logits, u_seed, temperature, top_k, top_p):
    return sample_token(np.asarray(logits, np.float64), np.random.default_rng(u_seed), temperature=temperature,
                        top_k=top_k or None, top_p=top_p if top_p < 1 else None)


def _row(u_seed, temperature, top_k, top_p):
    return [temperature, top_k, top_p, np.random.default_rng(u_seed).random()]


def _cases(rng, vocab, n):
    for i in range(n):
        x = (rng.standard_normal(vocab) * rng.uniform(0.3, 5)).astype(np.float32)
        if i % 4 == 1:
            x[rng.integers(0, vocab, vocab // 20 + 1)] = x.max()  # ties at the top
        if i % 4 == 2:
            x = np.round(x, 1)  # ties everywhere (top-k's and top-p's boundaries among them)
        if i % 5 == 3:
            x[rng.integers(0, vocab, vocab // 3)] = -np.inf  # blocked tokens
        yield (x, float(rng.choice([0.25, 0.7, 1.0, 1.6])), int(rng.choice([0, 1, 2, 7, vocab - 1, vocab, vocab + 5])),
               float(rng.choice([1.0, 0.95, 0.6, 0.2, 1e-6])), int(rng.integers(1 << 30)))


@pytest.mark.parametrize("vocab", [2, 37, 5000, 49152])
def test_sampler_draws_the_host_samplers_token(sampler, vocab):
    rng = np.random.default_rng(vocab)
    for x, t, k, p, seed in _cases(rng, vocab, 60 if vocab < 49152 else 12):
        want = _host(x, seed, t, k, p)
        got = int(sampler.sample(x[None], [_row(seed, t, k, p)]).result()["ids"][0])
        assert got == want, (vocab, t, k, p, seed)


def test_rows_sampled_together_equal_rows_alone(sampler):
    """Each row's token depends on its own logits and params only (a server's rows side by side)."""
    rng = np.random.default_rng(3)
    cases = list(_cases(rng, 3000, 9))
    x = np.stack([c[0] for c in cases])
    rows = [_row(seed, t, k, p) for _, t, k, p, seed in cases]
    together = sampler.sample(x, rows).result()["ids"]
    alone = [int(sampler.sample(x[i:i + 1], [rows[i]]).result()["ids"][0]) for i in range(len(rows))]
    assert together.tolist() == alone == [_host(*c[:1], c[4], *c[1:4]) for c in cases]


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16])
def test_half_precision_logits(sampler, dtype):
    """bfloat16 / float16 logits (a half-precision model's head) are read as their float values."""
    rng = np.random.default_rng(11)
    for x, t, k, p, seed in _cases(rng, 4096, 20):
        h = x.astype(dtype)
        want = _host(h.astype(np.float64), seed, t, k, p)
        assert int(sampler.sample(h[None], [_row(seed, t, k, p)]).result()["ids"][0]) == want


def test_draws_follow_the_distribution(sampler):
    """Frequencies over many draws match the softmax of the filtered logits (an independent check
    of the kernel, not through the host sampler)."""
    x = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], np.float32))
    rng = np.random.default_rng(0)
    us = rng.random(20000)
    counts = np.bincount(sampler.sample(np.tile(x, (us.size, 1)), [[1.0, 0, 1.0, u] for u in us]).result()["ids"],
                         minlength=5)
    np.testing.assert_allclose(counts / us.size, [0.5, 0.2, 0.15, 0.1, 0.05], atol=0.012)
    # top-p 0.8 keeps {0.5, 0.2, 0.15} (cumulative from the bottom 0.05, 0.15 <= 0.2); top-k 2 keeps two
    p8 = np.bincount(sampler.sample(np.tile(x, (us.size, 1)), [[1.0, 0, 0.8, u] for u in us]).result()["ids"],
                     minlength=5)
    np.testing.assert_allclose(p8 / us.size, [0.5 / 0.85, 0.2 / 0.85, 0.15 / 0.85, 0, 0], atol=0.012)
    k2 = np.bincount(sampler.sample(np.tile(x, (us.size, 1)), [[1.0, 2, 1.0, u] for u in us]).result()["ids"],
                     minlength=5)
    np.testing.assert_allclose(k2 / us.size, [5 / 7, 2 / 7, 0, 0, 0], atol=0.012)


def test_bad_input_is_named(sampler):
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(InputError, match=r"params must be \[2, 4\]"):
        sampler.sample(x, [[1.0, 0, 1.0, 0.5]])
    with pytest.raises(InputError, match="temperature must be > 0"):
        sampler.sample(x, [[0.0, 0, 1.0, 0.5]] * 2)
    with pytest.raises(InputError, match="u in"):
        sampler.sample(x, [[1.0, 0, 1.0, 1.0]] * 2)
    with pytest.raises(InputError, match=r"logits must be \[rows, V\]"):
        sampler.sample(np.zeros(8, np.float32), [[1.0, 0, 1.0, 0.5]])
    with pytest.raises(InputError, match=r"logits must be \[rows, V\]"):
        sampler.sample(np.zeros((2, 8), np.int32), [[1.0, 0, 1.0, 0.5]] * 2)
