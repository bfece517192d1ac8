"""A residual added to an RMSNorm's rows as one kernel (``RowNormAdd``, codegen/norms.egg): Gemma's
sandwich norms (h = r + norm(x) * w after the attention and after the MLP) are one op on the kernel
backends instead of a RowNorm and an element-wise Add, which matches float64 at odd row counts on
native (CI) and on cuda (a GPU), and whose cuda kernels compile with NVRTC (CI)."""

from __future__ import annotations

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends import get_backend
from lightspeed.backends.cuda.backend import CudaBackend
from lightspeed.egraph.llir import decode_program
from lightspeed.search import SearchOptions, candidates
from tests.backends.harness import nvrtc_or_skip, random_inputs, saturate, unaligned_torch_views

CUDA = CudaBackend(cublaslt="off")
EPS = 1e-6


def _graph(shape: tuple, residual_first: bool = True, dtype=ls.float32, bias: bool = False) -> ls.Graph:
    g = ls.Graph()
    n = shape[-1]
    x = g.input("x", shape, dtype)
    normed = ls.hl.rms_norm(x, (n,), g.input("w", (n,), dtype), eps=EPS)
    r = g.input("r", (n,) if bias else shape, dtype)
    g.output("h", r + normed if residual_first else normed + r)
    return g


def _programs(backend, g: ls.Graph) -> list:
    _, enc, index, ser = saturate(backend, g)
    return [decode_program(cand, ser, enc.constants, backend.declarations())
            for _, cand in candidates(index, SearchOptions(budget=4, seed=0))]


def _with_row_norm_add(backend, g: ls.Graph):
    lp = next((lp for lp in _programs(backend, g) if any(o.op == "RowNormAdd" for o in lp.ops)), None)
    assert lp is not None, "no candidate computes the norm and the residual as one RowNormAdd op"
    return lp


def _check(prog, shape: tuple, seed: int, dtype=np.float32, tol: float = 1e-5) -> None:
    rng = np.random.default_rng(seed)
    x, r = (rng.standard_normal(shape).astype(dtype) for _ in range(2))
    w = rng.standard_normal(shape[-1]).astype(dtype)
    x64, r64, w64 = (np.asarray(v, np.float64) for v in (x, r, w))
    want = r64 + x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + EPS) * w64
    got = np.asarray(prog(x=x, w=w, r=r)["h"], np.float64)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("residual_first", [True, False])
@pytest.mark.parametrize("shape", [(1, 96), (17, 96), (255, 640), (2, 3, 40)])
def test_a_residual_after_a_norm_is_one_op_and_matches_float64_on_native(shape, residual_first):
    native = get_backend("native")
    if not native.available():
        pytest.skip("no C compiler")
    g = _graph(tuple("s" if i == 0 else d for i, d in enumerate(shape)), residual_first)
    lp = _with_row_norm_add(native, g)
    assert [o.op for o in lp.ops if o.op in ("RowNormAdd", "RowNorm", "Add")] == ["RowNormAdd"]
    _check(native.lower(g, lp), shape, seed=len(shape) + shape[0])


def test_a_bias_broadcast_along_the_rows_is_not_a_residual():
    """norm(x) * w + b with b of the row's shape reads b at j, not at the row's flat index: the
    rule wants both operands of the Add read flat, so no candidate takes RowNormAdd."""
    g = _graph(("s", 96), bias=True)
    assert not any(o.op == "RowNormAdd" for lp in _programs(CUDA, g) for o in lp.ops)


@pytest.mark.parametrize("dtype", [ls.float32, ls.bfloat16])
def test_the_cuda_row_norm_add_compiles_for_sm90(dtype):
    nvrtc = nvrtc_or_skip()
    from lightspeed.backends.codegen.kernels import module_source

    g = _graph(("s", 640), dtype=dtype)
    lp = _with_row_norm_add(CUDA, g)
    op = next(o for o in lp.ops if o.op == "RowNormAdd")
    spec = CUDA.op_table.lower(op, [lp.ops[i].dtype for i in op.inputs], "cuda").specs[0]
    assert spec.launch.kind == "row"
    # rows held as 16-byte chunks (bfloat16 always, float32 with LIGHTSPEED_CUDA_NORM_F32_CHUNKS, the
    # default): the residual read as chunks beside x and w
    from lightspeed.backends.codegen.kernels import norm

    assert ("_ls_rq" in spec.source) == (dtype == ls.bfloat16 or norm.NORM_F32_CHUNKS)
    assert nvrtc.compile_cubin(module_source([spec], "cuda"), "sm_90")


@pytest.mark.skipif(not CUDA.available(), reason="no GPU")
@pytest.mark.parametrize("dtype,tol", [(ls.float32, 1e-5), (ls.bfloat16, 3e-2)])
@pytest.mark.parametrize("rows", [1, 17, 255, 1000])
def test_row_norm_add_matches_float64_on_cuda(rows, dtype, tol):
    import ml_dtypes

    g = _graph(("s", 640), dtype=dtype)
    np_dtype = np.float32 if dtype == ls.float32 else ml_dtypes.bfloat16
    _check(CUDA.lower(g, _with_row_norm_add(CUDA, g)), (rows, 640), seed=rows, dtype=np_dtype, tol=tol)


@pytest.mark.skipif(not CUDA.available(), reason="no GPU")
@pytest.mark.parametrize("rows", [1, 17])
def test_row_norm_add_of_unaligned_rows_gives_the_aligned_bits_on_cuda(rows):
    """bfloat16 inputs 2 bytes off 16-byte alignment (torch views one element into their buffers)
    take the element-by-element branch, which sums and adds in the chunks' order: the same bits."""
    g = _graph(("s", 640), dtype=ls.bfloat16)
    prog = CUDA.lower(g, _with_row_norm_add(CUDA, g))
    ins = random_inputs(g, {"s": rows}, seed=rows)
    aligned = np.asarray(prog(ins)["h"], np.float32)
    odd = unaligned_torch_views(ins)
    if odd is None:
        pytest.skip("no torch CUDA")
    assert odd["x"].data_ptr() % 16 == 2
    np.testing.assert_array_equal(prog(odd)["h"].float().cpu().numpy(), aligned)
