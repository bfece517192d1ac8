"""LayerNorm as one kernel (``LayerNormRows``, codegen/norms.egg): hl.layer_norm's chain with a
weight and a bias -- the mean, the centred RMSNorm, the bias -- is one op on the kernel backends,
which matches float64 at odd row counts on native (CI) and on cuda (a GPU), and whose cuda kernel
compiles with NVRTC (CI)."""

from __future__ import annotations

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends import get_backend
from lightspeed.backends.cuda.backend import CudaBackend
from lightspeed.egraph.llir import decode_program
from lightspeed.search import SearchOptions, candidates
from tests.backends.harness import nvrtc_or_skip, saturate

CUDA = CudaBackend(cublaslt="off")
EPS = 1e-5


def _graph(shape: tuple) -> ls.Graph:
    g = ls.Graph()
    n = shape[-1]
    x = g.input("x", shape)
    g.output("y", ls.hl.layer_norm(x, (n,), g.input("w", (n,)), g.input("b", (n,)), eps=EPS))
    return g


def _with_layer_norm(backend, g: ls.Graph):
    _, enc, index, ser = saturate(backend, g)
    for _, cand in candidates(index, SearchOptions(budget=4, seed=0)):
        lp = decode_program(cand, ser, enc.constants, backend.declarations())
        if any(o.op == "LayerNormRows" for o in lp.ops):
            return lp
    raise AssertionError("no candidate computes the layer norm as one LayerNormRows op")


def _want(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + EPS) * w + b


def _check(prog, shape: tuple, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = (3 * rng.standard_normal(shape) + 1).astype(np.float32)  # a mean far from 0: the centring matters
    w, b = (rng.standard_normal(shape[-1]).astype(np.float32) for _ in range(2))
    got = np.asarray(prog(x=x, w=w, b=b)["y"])
    np.testing.assert_allclose(got, _want(x, w, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape", [(1, 96), (17, 96), (255, 384), (2, 3, 40)])
def test_layer_norm_is_one_op_and_matches_float64_on_native(shape):
    native = get_backend("native")
    if not native.available():
        pytest.skip("no C compiler")
    g = _graph(tuple("s" if i == 0 else d for i, d in enumerate(shape)))
    lp = _with_layer_norm(native, g)
    assert sum(o.op == "LayerNormRows" for o in lp.ops) == 1
    assert not any(o.op == "RowNorm" for o in lp.ops)
    _check(native.lower(g, lp), shape, seed=len(shape) + shape[0])


def test_the_cuda_layer_norm_compiles_for_sm90():
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import module_source

    g = _graph(("s", 384))
    lp = _with_layer_norm(CUDA, g)
    op = next(o for o in lp.ops if o.op == "LayerNormRows")
    spec = CUDA.op_table.lower(op, [lp.ops[i].dtype for i in op.inputs], "cuda").specs[0]
    assert spec.launch.kind == "row"
    assert nvrtc.compile_cubin(module_source([spec], "cuda"), "sm_90")


@pytest.mark.skipif(not CUDA.available(), reason="no GPU")
@pytest.mark.parametrize("rows", [1, 17, 255, 1000])
def test_layer_norm_matches_float64_on_cuda(rows):
    g = _graph(("s", 384))
    _check(CUDA.lower(g, _with_layer_norm(CUDA, g)), (rows, 384), seed=rows)
