"""The backends' token sampler (``codegen/kernels/sample.py``, ``Backend.sampler``) against the
host sampler (``models.generate.sample_token``, numpy in float64): the same token for the same
uniform draw, over temperatures, top-k, top-p, ties, blocked logits and logit dtypes."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import lightspeed as ls
from lightspeed.errors import InputError
from lightspeed.models.generate import sample_token

NATIVE = ls.backends.get_backend("native")
CUDA = ls.backends.get_backend("cuda")
needs_native = pytest.mark.skipif(not NATIVE.available(), reason="no C compiler")


@pytest.fixture(scope="module", params=["native", pytest.param("cuda", marks=pytest.mark.skipif(
    not CUDA.available(), reason="no GPU")), "cuda-on-host", "cuda-on-host-one-block"])
def sampler(request, tmp_path_factory):
    if request.param == "native":
        if not NATIVE.available():
            pytest.skip("no C compiler")
        return NATIVE.sampler()
    if request.param == "cuda":
        return CUDA.sampler()
    # a cluster of 3 blocks a row (sm_90's form, uneven parts), or one block (GPUs before sm_90)
    return _cuda_kernel_on_host(tmp_path_factory.mktemp("shim"), 1 if request.param.endswith("one-block") else 3)


class _HostBlocks:
    """The cuda dialect's sampler kernel run on host threads (tests/backends/cuda_block_shim.h):
    the kernel's own source, its block and cluster barriers, scans and radix passes, on a machine
    without a GPU."""

    def __init__(self, lib):
        self.fn = lib.run_rows
        self.fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_longlong,
                            ctypes.c_void_p, ctypes.c_void_p]

    def sample(self, logits, params):
        from lightspeed.backends.codegen.kernels.sample import LOGIT_CODES, checked_params
        from lightspeed.program import Pending

        x = np.ascontiguousarray(logits)
        if x.ndim != 2 or x.dtype.name not in LOGIT_CODES:
            raise InputError(f"sampler: logits must be [rows, V] of float32/bfloat16/float16, got {x.dtype.name}")
        prm = checked_params(x.shape[0], params)
        ids = np.empty(x.shape[0], np.int64)
        self.fn(x.ctypes.data, LOGIT_CODES[x.dtype.name], x.shape[0], x.shape[1], x.shape[1], prm.ctypes.data,
                ids.ctypes.data)
        return Pending({"ids": ids}, {"ids": ids})


def _cuda_kernel_on_host(tmp: Path, cluster: int) -> _HostBlocks:
    from lightspeed.backends.codegen.kernels.sample import sampler_source

    threads = 64  # a thread per CUDA thread here: small blocks
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler for the host block harness")
    (tmp / "kernel.cuh").write_text(sampler_source("cuda", threads, cluster))
    (tmp / "run.cpp").write_text(
        f'#include "{Path(__file__).with_name("cuda_block_shim.h")}"\n#include "kernel.cuh"\n'
        'extern "C" void run_rows(const void* x, int dtype, long long rows, long long stride, long long V, '
        'const double* prm, long long* out) {\n'
        '  std::vector<ls_u64> scratch((size_t)(rows * V));\n'
        '  ls_u64* w = scratch.data();\n'
        f'  ls_run_clusters(rows * {cluster}, {cluster}, {threads}, '
        '[=] { ls_sample_rows(x, dtype, rows, stride, V, prm, out, w); });\n}\n')
    res = subprocess.run([cxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-o", str(tmp / "run.so"),
                          str(tmp / "run.cpp")], capture_output=True, text=True)
    if res.returncode != 0 and "std=c++20" in res.stderr:
        pytest.skip("the C++ compiler has no C++20")
    assert res.returncode == 0, res.stderr[-3000:]
    return _HostBlocks(ctypes.CDLL(str(tmp / "run.so")))


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
    slow = isinstance(sampler, _HostBlocks)  # a thread per CUDA thread: fewer cases
    for x, t, k, p, seed in _cases(rng, vocab, (8 if slow else 60) if vocab < 49152 else (4 if slow else 12)):
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
    for x, t, k, p, seed in _cases(rng, 4096, 5 if isinstance(sampler, _HostBlocks) else 20):
        h = x.astype(dtype)
        want = _host(h.astype(np.float64), seed, t, k, p)
        assert int(sampler.sample(h[None], [_row(seed, t, k, p)]).result()["ids"][0]) == want


def test_draws_follow_the_distribution(sampler):
    """Frequencies over many draws match the softmax of the filtered logits (an independent check
    of the kernel, not through the host sampler)."""
    if isinstance(sampler, _HostBlocks):
        pytest.skip("thousands of draws: the native kernel and a GPU check the frequencies")
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


def test_no_rows(sampler):
    assert sampler.sample(np.zeros((0, 8), np.float32), np.zeros((0, 4))).result()["ids"].shape == (0,)


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


def test_cuda_sampler_compiles_for_sm90():
    """The cuda dialect's sampler compiles with NVRTC for sm_90 (no GPU needed)."""
    nvrtc = pytest.importorskip("lightspeed.backends.cuda.nvrtc")
    try:
        nvrtc.nvrtc_version()
    except Exception as e:  # noqa: BLE001 - no NVRTC here: nothing to check
        pytest.skip(f"NVRTC unavailable: {e}")
    from lightspeed.backends.codegen.kernels.sample import sampler_source

    assert len(nvrtc.compile_cubin(sampler_source("cuda"), "sm_90")) > 1000
