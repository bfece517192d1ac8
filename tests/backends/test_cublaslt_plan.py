"""cuBLASLt plans (backends/cuda/cublaslt.py) without a GPU: the column-major layouts, leading
dimensions, transposes and strided batches of LLIR matmuls, worked out by hand, and every case the
plan must refuse; and that the cuda backend's rules offer ``LtMatmul`` only where they should."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

import lightspeed as ls
from lightspeed import dtypes as dt
from lightspeed.backends.cuda import CudaBackend
from lightspeed.backends.cuda.cublaslt import LtLayout, library_spec, plan_matmul
from lightspeed.egraph import Candidate
from lightspeed.egraph.llir import LOp, decode_program
from lightspeed.primitives import PRIMITIVES
from lightspeed.shape import ShapeTracker
from lightspeed.symbolic import as_expr, sym
from tests.backends.harness import saturate

F32, BF16, F16 = dt.float32, dt.bfloat16, dt.float16


def mm(m, n, k, a_sm, a_sk, b_sk, b_sn, batch=(), a_bs=(), b_bs=(), a_off=0, b_off=0, dtype=F32, r_view=None,
       epilogue=None, bias_view=None):
    """A Matmul LOp (MatmulAdd with ``r_view``; LtMatmulEpi with ``epilogue``, LtMatmulBias with
    ``bias_view`` too) of output shape [*batch, m, n]."""
    e = as_expr
    args = {"batch": tuple(e(b) for b in batch), "m": e(m), "n": e(n), "k": e(k),
            "a": 0, "a_batch_strides": tuple(e(s) for s in a_bs), "a_stride_m": e(a_sm), "a_stride_k": e(a_sk),
            "a_offset": e(a_off), "b": 1, "b_batch_strides": tuple(e(s) for s in b_bs), "b_stride_k": e(b_sk),
            "b_stride_n": e(b_sn), "b_offset": e(b_off)}
    ins = (0, 1)
    if r_view is not None:
        args.update(r=2, r_view=r_view)
        ins = (0, 1, 2)
    name = "MatmulAdd" if r_view is not None else "Matmul"
    if bias_view is not None:
        args.update(bias=2, bias_view=bias_view)
        ins, name = (0, 1, 2), "LtMatmulBias"
    elif epilogue is not None:
        name = "LtMatmulEpi"
    if epilogue is not None:
        args["epilogue"] = epilogue
    return LOp(name, args, ins, tuple(e(d) for d in (*batch, m, n)), dtype)


def plan(op, dtypes=None):
    return plan_matmul(op, dtypes or [op.dtype] * len(op.inputs))


def test_row_major_x_at_w():
    # x[4, 8] @ W[8, 16], both row-major: C^T[16, 4] = W^T x^T; W^T is W read column-major (ld 16),
    # x^T is x read column-major (ld 8); D ld 16
    p = plan(mm(4, 16, 8, a_sm=8, a_sk=1, b_sk=16, b_sn=1))
    assert (p.m, p.n, p.k, p.batch, p.beta) == (16, 4, 8, 1, 0.0)
    assert p.a == LtLayout(16, 8, 16, False, 0)
    assert p.b == LtLayout(8, 4, 8, False, 0)
    assert p.d == LtLayout(16, 4, 16, False, 16 * 4)
    assert p.dtype == "float32" and p.itemsize == 4


def test_transposed_weight():
    # x[4, 8] @ W.T with W[16, 8] row-major (a Linear's weight): B[l, j] = W[j, l] at j*8 + l,
    # so cuBLASLt's A (= B^T = W, [16, 8]) is contiguous along its rows: stored as W^T column-major
    # ([8, 16], ld 8) with TRANSA
    p = plan(mm(4, 16, 8, a_sm=8, a_sk=1, b_sk=1, b_sn=8))
    assert p.a == LtLayout(8, 16, 8, True, 0)
    assert p.b == LtLayout(8, 4, 8, False, 0)


def test_column_major_lhs():
    # A[4, 8] stored column-major (A = X.T with X[8, 4] row-major): A[i, l] at i + l*4
    p = plan(mm(4, 16, 8, a_sm=1, a_sk=4, b_sk=16, b_sn=1))
    assert p.b == LtLayout(4, 8, 4, True, 0)


def test_padded_leading_dimension():
    # rows of W[8, 16] read from a [8, 32] buffer (a column slice): ld 32
    p = plan(mm(4, 16, 8, a_sm=8, a_sk=1, b_sk=32, b_sn=1))
    assert p.a.ld == 32


def test_decode_row():
    # x[1, 64] @ W.T, W[128, 64]: m = 1, the stride on m does not matter
    p = plan(mm(1, 128, 64, a_sm=0, a_sk=1, b_sk=1, b_sn=64))
    assert p.b == LtLayout(64, 1, 64, False, 0)
    assert p.a == LtLayout(64, 128, 64, True, 0)


def test_batched():
    # [3, 2] batches of A[4, 8] @ B[8, 5], all row-major and packed
    p = plan(mm(4, 5, 8, 8, 1, 5, 1, batch=(3, 2), a_bs=(2 * 32, 32), b_bs=(2 * 40, 40)))
    assert p.batch == 6
    assert p.b.batch_stride == 32 and p.a.batch_stride == 40  # cuBLASLt's B is the op's a
    assert p.d.batch_stride == 20


def test_broadcast_batch():
    # one weight for every batch: B's batch stride 0; and size-1 batch dims are dropped
    p = plan(mm(4, 5, 8, 8, 1, 5, 1, batch=(3, 1, 2), a_bs=(64, 999, 32), b_bs=(0, 0, 0)))
    assert p.batch == 6 and p.a.batch_stride == 0 and p.b.batch_stride == 32


def test_attention_heads_interleaved():
    # q[s=6, h=2, d=4] @ k^T per head: q's head stride 4, row stride 8 (ld 8 >= 4)
    p = plan(mm(6, 6, 4, a_sm=8, a_sk=1, b_sk=1, b_sn=8, batch=(2,), a_bs=(4,), b_bs=(4,)))
    assert p.batch == 2 and p.a.batch_stride == 4 and p.b.batch_stride == 4
    assert p.a == LtLayout(4, 6, 8, True, 4) and p.b == LtLayout(4, 6, 8, False, 4)


def test_offsets_are_kept_for_the_pointers():
    p = plan(mm(4, 16, 8, 8, 1, 16, 1, a_off=3, b_off=128))
    assert (p.b_offset, p.a_offset) == (3, 128)  # cuBLASLt's B is the op's a


def test_matmul_add_uses_the_addend_as_c():
    op = mm(4, 16, 8, 8, 1, 16, 1, r_view=ShapeTracker.contiguous((4, 16)))
    p = plan(op)
    assert p.beta == 1.0
    assert library_spec(p, True).buffers == ("out", 0, 1, 2)
    assert library_spec(p, True).source == "" and library_spec(p, True).library == "cublaslt"


@pytest.mark.parametrize("dtype", [BF16, F16])
def test_low_precision(dtype):
    p = plan(mm(4, 16, 8, 8, 1, 16, 1, dtype=dtype))
    assert p.dtype == dtype.name and p.itemsize == 2


def test_rows_of_a_dim_are_planned_per_value():
    """m = s: an LtDimsPlan whose plan at s = 5 is the static product's with m = 5, its launch
    taking the dim's slot before the buffers."""
    from lightspeed.backends.cuda.cublaslt import LtDimsPlan, plan_dims
    r = ShapeTracker.contiguous(("s", 16))
    op = mm("s", 16, 8, a_sm=8, a_sk=1, b_sk=1, b_sn=8, r_view=r, dtype=BF16)
    assert plan(op) is None
    dp = plan_dims(op, [BF16] * 3)
    assert isinstance(dp, LtDimsPlan) and dp.dims == ("s",)
    for s in (1, 5, 1000):
        want = plan(mm(s, 16, 8, a_sm=8, a_sk=1, b_sk=1, b_sn=8, r_view=ShapeTracker.contiguous((s, 16)), dtype=BF16))
        assert dp.at((s,)) == want and dp.at((s,)).n == s
    spec = library_spec(dp, True)
    assert spec.dims == ("s",) and spec.buffers == ("out", 0, 1, 2) and spec.name == f"cublaslt_{dp.key}"
    # another product of the same shape has the same key; a different n another
    assert plan_dims(mm("s", 16, 8, 8, 1, 1, 8, r_view=r, dtype=BF16), [BF16] * 3).key == dp.key
    assert plan_dims(mm("s", 24, 8, 8, 1, 1, 24, r_view=ShapeTracker.contiguous(("s", 24)), dtype=BF16),
                     [BF16] * 3).key != dp.key


@pytest.mark.parametrize("op", [
    mm(4, "n", 8, 8, 1, "n", 1),  # n a dim
    mm("s", 16, 8, "t", 1, 16, 1),  # a stride a dim
    mm("s", 16, 8, 8, 1, 16, 1, a_off="t"),  # an offset a dim
    mm("s", 16, 8, 8, 1, 16, 1, dtype=dt.float64),  # a dtype cuBLASLt is not offered for
    mm(4, 16, 8, 8, 1, 16, 1),  # static: plan_matmul's
])
def test_rows_of_a_dim_refusals(op):
    from lightspeed.backends.cuda.cublaslt import plan_dims
    assert plan_dims(op, [op.dtype] * len(op.inputs)) is None


def test_plans_are_hashable_and_equal_by_value():
    a, b = plan(mm(4, 16, 8, 8, 1, 16, 1)), plan(mm(4, 16, 8, 8, 1, 16, 1))
    assert a == b and hash(a) == hash(b) and a.key == b.key
    assert a.key != plan(mm(4, 16, 8, 8, 1, 1, 8)).key


# ---------------------------------------------------------------- refusals
@pytest.mark.parametrize("op", [
    mm(sym("s"), 16, 8, 8, 1, 16, 1),  # dynamic m
    mm(4, 16, 8, 8, 1, 16, 1, batch=(sym("b"),), a_bs=(32,), b_bs=(0,)),  # dynamic batch
    mm(4, 16, 8, sym("p"), 1, 16, 1),  # dynamic stride
    mm(4, 16, 8, 8, 1, 16, 1, a_off=sym("p")),  # dynamic offset
    mm(4, 16, 8, 16, 2, 16, 1),  # A strided along both axes
    mm(4, 16, 8, 8, 1, 32, 2),  # B strided along both axes
    mm(4, 16, 8, 8, 1, 0, 1),  # B broadcast along k inside the matrix (ld 0)
    mm(4, 16, 8, 4, 1, 16, 1),  # overlapping rows: ld 4 < k = 8
    mm(4, 5, 8, 8, 1, 5, 1, batch=(3, 2), a_bs=(32, 64), b_bs=(0, 0)),  # batch dims not nested
    mm(4, 5, 8, 8, 1, 5, 1, batch=(3, 2), a_bs=(0, 32), b_bs=(0, 0)),  # broadcast over one batch dim only
    mm(4, 16, 8, 8, 1, 16, 1, dtype=dt.float64),
    mm(4, 16, 8, 8, 1, 16, 1, dtype=dt.int32),
    mm(0, 16, 8, 8, 1, 16, 1),  # empty
], ids=["dynamic-m", "dynamic-batch", "dynamic-stride", "dynamic-offset", "a-gapped", "b-gapped", "b-ld0",
        "overlap", "batch-not-nested", "partial-broadcast", "float64", "int32", "empty"])
def test_refused(op):
    assert plan(op) is None


def test_mixed_dtypes_are_refused():
    op = mm(4, 16, 8, 8, 1, 16, 1)
    assert plan_matmul(op, [BF16, F32]) is None
    assert plan_matmul(op, [F32, BF16]) is None
    op16 = mm(4, 16, 8, 8, 1, 16, 1, dtype=BF16)  # bf16 operands, an f32 result
    assert plan_matmul(op16, [BF16, BF16]) is not None
    op16.dtype = F32
    assert plan_matmul(op16, [BF16, BF16]) is None


def test_matmul_add_refusals():
    # a broadcast bias, an addend of another dtype, a transposed addend
    bias = ShapeTracker.contiguous((1, 16)).expand((4, 16))
    assert plan(mm(4, 16, 8, 8, 1, 16, 1, r_view=bias)) is None
    ok = mm(4, 16, 8, 8, 1, 16, 1, r_view=ShapeTracker.contiguous((4, 16)))
    assert plan_matmul(ok, [F32, F32, BF16]) is None
    assert plan(mm(4, 16, 8, 8, 1, 16, 1, r_view=ShapeTracker.contiguous((16, 4)).permute((1, 0)))) is None
    assert plan(mm(4, 16, 8, 8, 1, 16, 1, r_view=ShapeTracker.contiguous((2, 4, 16)))) is None  # another shape


# ---------------------------------------------------------------- the rules
def _lt_ops(graph, backend):
    _, _, index, _ = saturate(backend, graph)
    return [n.op for nodes in index.classes.values() for n in nodes if n.op.startswith("Lt")]


def test_rules_offer_ltmatmul_for_static_float_matmuls():
    cuda = CudaBackend("search")
    for dtype in (ls.float32, ls.bfloat16, ls.float16):
        g = ls.Graph()
        x, w = g.input("x", (4, 8), dtype=dtype), g.input("w", (16, 8), dtype=dtype)
        r = g.input("r", (4, 16), dtype=dtype)
        g.output("y", x @ w.transpose(0, 1) + r)
        assert set(_lt_ops(g, cuda)) == {"LtMatmul", "LtMatmulAdd"}, dtype


def test_rules_offer_ltmatmul_for_rows_of_a_dim():
    """A prompt's products (m = the dim s) are offered as the many-rows library ops, planned per
    call's s (plan_dims); static products keep LtMatmul / LtMatmulAdd alone."""
    g = ls.Graph()
    x, w, r = g.input("x", ("s", 8), dtype=ls.bfloat16), g.input("w", (8, 16), dtype=ls.bfloat16), \
        g.input("r", ("s", 16), dtype=ls.bfloat16)
    g.output("y", x @ w + r)
    cuda = CudaBackend("search")
    assert set(_lt_ops(g, cuda)) == {"LtMatmulRows", "LtMatmulAddRows"}
    decls = cuda.declarations()
    assert decls["LtMatmulRows"].many_rows and decls["LtMatmulRows"].library
    assert not decls["LtMatmul"].many_rows and not decls["LtMatmul"].library


def _candidate_programs(g: ls.Graph) -> dict:
    """The LLIR program of each candidate the search lists for ``g`` on cuda with cuBLASLt and the
    tiles offered (origin -> program), the many-rows and library ops as the search passes them."""
    from lightspeed.search import SearchOptions, candidates

    cuda = CudaBackend("search", mma=True)
    _, enc, index, ser = saturate(cuda, g)
    decls = cuda.declarations()
    many = frozenset(n for n, d in decls.items() if d.many_rows)
    library = frozenset(n for n, d in decls.items() if d.library)
    return {origin: decode_program(cand, ser, enc.constants, decls)
            for origin, cand in candidates(index, SearchOptions(budget=6, seed=0), many, library)}


def test_the_candidates_measure_the_library_against_the_tiles_and_the_warp_kernels():
    """greedy takes cuBLASLt for a prompt's products, fused the tensor-core tiles, few-rows (what a
    decode step runs) neither: each is measured, so a decode row never inherits the library's
    launch cost and a prompt gets the faster of the two many-rows forms."""
    g = ls.Graph()
    x, w, r = g.input("x", ("s", 64), dtype=ls.bfloat16), g.input("w", (64, 32), dtype=ls.bfloat16), \
        g.input("r", ("s", 32), dtype=ls.bfloat16)
    g.output("y", x @ w + r)
    programs = _candidate_programs(g)

    def products(origin):
        return [o.op for o in programs[origin].ops if "Matmul" in o.op]
    assert products("greedy") == ["LtMatmulAddRows"]
    assert products("fused") == ["MatmulAddMma"]
    assert products("few-rows") == ["MatmulAdd"]


def test_rules_refuse_dynamic_float64_and_off():
    g = ls.Graph()
    x, w = g.input("x", (4, "k")), g.input("w", ("k", 16))
    g.output("y", x @ w)
    assert _lt_ops(g, CudaBackend("search")) == []  # k dynamic
    g = ls.Graph()
    x, w = g.input("x", ("s", 8)), g.input("w", (8, "n"))
    g.output("y", x @ w)
    assert _lt_ops(g, CudaBackend("search")) == []  # n dynamic
    g = ls.Graph()
    x, w = g.input("x", (4, 8), dtype=ls.float64), g.input("w", (8, 16), dtype=ls.float64)
    g.output("y", x @ w)
    assert _lt_ops(g, CudaBackend("search")) == []
    g = ls.Graph()
    x, w = g.input("x", (4, 8)), g.input("w", (8, 16))
    g.output("y", x @ w)
    off = CudaBackend("off")
    assert _lt_ops(g, off) == [] and "cublaslt" not in off.rulesets
    assert not {d.name for d in off.ops} & {"LtMatmul", "LtMatmulAdd"}
    assert _lt_ops(g, CudaBackend("search")) == ["LtMatmul"]


def test_unknown_mode_is_an_error():
    with pytest.raises(ValueError):
        CudaBackend("sometimes")


# ---------------------------------------------------------------- the calls, against fake bindings
def _recording_library():
    """A Library over recording stand-ins of nvmath's cublasLt functions (the real enums and
    attribute dtypes): (library, calls, modules)."""
    nvmath = pytest.importorskip("nvmath")
    from nvmath.bindings import cublas
    from nvmath.bindings import cublasLt as real

    from lightspeed.backends.cuda import cublaslt as mod

    calls = []

    class Fake:
        MatmulDescAttribute, MatrixLayoutAttribute = real.MatmulDescAttribute, real.MatrixLayoutAttribute
        MatmulPreferenceAttribute, Epilogue = real.MatmulPreferenceAttribute, real.Epilogue
        get_matmul_desc_attribute_dtype = staticmethod(real.get_matmul_desc_attribute_dtype)
        get_matrix_layout_attribute_dtype = staticmethod(real.get_matrix_layout_attribute_dtype)
        get_matmul_preference_attribute_dtype = staticmethod(real.get_matmul_preference_attribute_dtype)
        MatmulHeuristicResult = real.MatmulHeuristicResult

        def __getattr__(self, name):
            def f(*args):
                calls.append((name, args))
                if name == "matmul_algo_get_heuristic":  # one algorithm found
                    ctypes.c_int32.from_address(args[-1]).value = 1
                if name.endswith("_set_attribute"):
                    calls[-1] = (name, (args[1], bytes((ctypes.c_char * args[3]).from_address(args[2]))))
                return 1000 + len(calls)
            return f

    lib = object.__new__(mod.Library)
    lib.lt, lib.cublas, lib.types, lib.handle = Fake(), cublas, nvmath.CudaDataType, 7
    lib._prepared, lib._algos = {}, {}
    lib._lock, lib._call_lock = threading.RLock(), threading.Lock()  # (as Library.__init__ makes them)
    lib._alpha, lib._betas = np.ones(1, np.float32), {0.0: np.zeros(1, np.float32), 1.0: np.ones(1, np.float32)}
    return lib, calls, (nvmath, cublas, real, mod)


def test_library_calls_in_cublaslt_order(monkeypatch):
    """Library.run against recording stand-ins of nvmath's cublasLt functions (its enums and
    attribute dtypes are the real ones): cuBLASLt's A is the op's b with its offset folded in, B
    the op's a, C the addend (or D), the attributes set with their own dtypes and sizes."""
    lib, calls, (nvmath, cublas, real, mod) = _recording_library()
    op = mm(4, 16, 8, 8, 1, 1, 8, batch=(3,), a_bs=(32,), b_bs=(0,), b_off=5, dtype=BF16,
            r_view=ShapeTracker.contiguous((3, 4, 16)))
    p = plan(op)
    out, pa, pb, pr = 0x10000, 0x20000, 0x30000, 0x40000
    lib.run(p, (out, pa, pb, pr), 0x50000, 99)
    name, args = calls[-1]
    assert name == "matmul" and len(args) == 16
    assert args[3] == pb + 5 * 2 and args[5] == pa and args[8] == pr and args[10] == out
    assert args[0] == 7 and args[13:] == (0x50000, mod.WORKSPACE_BYTES, 99)
    assert bytes((ctypes.c_char * 4).from_address(args[7])) == np.float32(1).tobytes()  # beta = 1
    layouts = [a for n, a in calls if n == "matrix_layout_create"]
    bf16 = int(nvmath.CudaDataType.CUDA_R_16BF)
    assert layouts == [(bf16, 8, 16, 8), (bf16, 8, 4, 8), (bf16, 16, 4, 16)]  # A (W^T stored), B, D
    desc = [a for n, a in calls if n == "matmul_desc_create"]
    assert desc == [(int(cublas.ComputeType.COMPUTE_32F), int(nvmath.CudaDataType.CUDA_R_32F))]
    sets = [a for n, a in calls if n.endswith("_set_attribute")]
    D, L = real.MatmulDescAttribute, real.MatrixLayoutAttribute
    assert (D.TRANSA, np.int32(1).tobytes()) in sets and (D.TRANSB, np.int32(0).tobytes()) in sets
    assert (L.BATCH_COUNT, np.int32(3).tobytes()) in sets
    assert (L.STRIDED_BATCH_OFFSET, np.int64(32).tobytes()) in sets  # the op's a: cuBLASLt's B
    assert (L.STRIDED_BATCH_OFFSET, np.int64(0).tobytes()) in sets  # the broadcast weight
    assert (L.STRIDED_BATCH_OFFSET, np.int64(64).tobytes()) in sets  # D
    # a second call reuses descriptors and the algorithm
    n = len(calls)
    lib.run(p, (out, pa, pb, pr), 0x50000, 99)
    assert [c[0] for c in calls[n:]] == ["matmul"]


# ---------------------------------------------------------------- epilogues
def _row_bias(m, n):
    return ShapeTracker.contiguous((n,)).reshape((1, n)).expand((m, n))


@pytest.mark.parametrize("epilogue", ["relu", "gelu"])
def test_activation_epilogue_plan(epilogue):
    # relu(x[4, 8] @ W.T), W[16, 8]: the plain product's layouts, the epilogue named, no bias, beta 0
    p = plan(mm(4, 16, 8, a_sm=8, a_sk=1, b_sk=1, b_sn=8, epilogue=epilogue))
    assert p.epilogue == epilogue and not p.bias and p.beta == 0.0
    assert p.a == LtLayout(8, 16, 8, True, 0) and p.b == LtLayout(8, 4, 8, False, 0)
    assert library_spec(p, False).buffers == ("out", 0, 1)


@pytest.mark.parametrize("epilogue", ["bias", "relu_bias", "gelu_bias"])
def test_bias_epilogue_plan(epilogue):
    # x[4, 8] @ W[8, 16] + b[16]: cuBLASLt's D^T is [16, 4] (M = 16 = the op's n), and the bias is a
    # vector over those 16 rows: b as it lies; the bias is the launch's fourth buffer, not C (beta 0)
    p = plan(mm(4, 16, 8, 8, 1, 16, 1, epilogue=epilogue, bias_view=_row_bias(4, 16)))
    assert p.bias and p.epilogue == epilogue and p.beta == 0.0 and p.m == 16 and p.n == 4
    assert library_spec(p, False).buffers == ("out", 0, 1, 2)
    assert p.key != plan(mm(4, 16, 8, 8, 1, 16, 1)).key


def test_epilogue_refusals():
    bias = _row_bias(4, 16)
    assert plan(mm(4, 16, 8, 8, 1, 16, 1, epilogue="swish")) is None  # unknown
    assert plan(mm(4, 16, 8, 8, 1, 16, 1, epilogue="relu_bias")) is None  # a bias epilogue without a bias
    assert plan(mm(4, 16, 8, 8, 1, 16, 1, epilogue="relu", bias_view=bias)) is None  # a bias, no bias epilogue
    # a bias that is not one row vector: the full [4, 16] residual, a column vector, an offset, a mask
    assert plan(mm(4, 16, 8, 8, 1, 16, 1, epilogue="bias", bias_view=ShapeTracker.contiguous((4, 16)))) is None
    col = ShapeTracker.contiguous((4,)).reshape((4, 1)).expand((4, 16))
    assert plan(mm(4, 16, 8, 8, 1, 16, 1, epilogue="bias", bias_view=col)) is None
    shifted = ShapeTracker.contiguous((20,)).slice([(4, 20, 1)]).reshape((1, 16)).expand((4, 16))
    assert plan(mm(4, 16, 8, 8, 1, 16, 1, epilogue="bias", bias_view=shifted)) is None
    padded = ShapeTracker.contiguous((4, 15)).pad([(0, 0), (0, 1)])
    assert plan(mm(4, 16, 8, 8, 1, 16, 1, epilogue="bias", bias_view=padded)) is None
    # batched products get no bias; a bias of another dtype is refused
    op = mm(4, 5, 8, 8, 1, 5, 1, batch=(3,), a_bs=(32,), b_bs=(0,), epilogue="bias",
            bias_view=ShapeTracker.contiguous((5,)).reshape((1, 1, 5)).expand((3, 4, 5)))
    assert plan(op) is None
    assert plan_matmul(mm(4, 16, 8, 8, 1, 16, 1, epilogue="bias", bias_view=bias), [F32, F32, BF16]) is None
    assert plan_matmul(mm(4, 16, 8, 8, 1, 16, 1, epilogue="relu", dtype=BF16), [BF16, F32]) is None


def _graph(case, dtype=ls.float32, m=4):
    g = ls.Graph()
    x, w, b = g.input("x", (m, 8), dtype=dtype), g.input("w", (16, 8), dtype=dtype), g.input("b", (16,), dtype=dtype)
    y = x @ w.transpose(0, 1)
    if "bias" in case:
        y = y + b
    if "residual" in case:
        y = y + g.input("r", (m, 16), dtype=dtype)
    if "relu" in case:
        y = y.relu()
    if "max1" in case:  # max(y, 1): not a relu
        y = ls.maximum(y, 1.0)
    if "gelu" in case:
        y = ls.gelu(y, approximate="tanh")
    g.output("y", y)
    return g


def _lt_nodes(graph, backend):
    """(op, epilogue) of the epilogue ops a candidate preferring them takes (what the output reads)."""
    _, enc, index, ser = saturate(backend, graph)

    def pick(cid, nodes):
        for n in nodes:
            if n.op in ("LtMatmulEpi", "LtMatmulBias"):
                return n
        prims = [n for n in nodes if n.op in PRIMITIVES]
        return prims[0] if prims else nodes[0]

    lprog = decode_program(Candidate.build(index, pick), ser, enc.constants, backend.declarations())
    return {(op.op, op.args["epilogue"]) for op in lprog.ops if op.op in ("LtMatmulEpi", "LtMatmulBias")}


def test_rules_offer_epilogues():
    cuda = CudaBackend("search")
    for dtype in (ls.float32, ls.bfloat16, ls.float16):
        assert _lt_nodes(_graph("bias", dtype), cuda) == {("LtMatmulBias", "bias")}
        assert _lt_nodes(_graph("relu", dtype), cuda) == {("LtMatmulEpi", "relu")}
        assert _lt_nodes(_graph("bias-relu", dtype), cuda) == {("LtMatmulBias", "relu_bias")}
    assert _lt_nodes(_graph("bias-relu", m=1), cuda) == {("LtMatmulBias", "relu_bias")}  # a decode row


def test_rules_refuse_other_epilogues():
    cuda = CudaBackend("search")
    assert _lt_nodes(_graph("relu", ls.float64), cuda) == set()
    assert _lt_nodes(_graph("residual-relu"), cuda) == set()  # relu(x @ w + r): no epilogue op (LtMatmulAdd only)
    assert _lt_nodes(_graph("max1"), cuda) == set()  # max(y, 1) is no relu
    assert _lt_nodes(_graph("gelu"), cuda) == set()  # gelu is not matched (yet)
    assert _lt_nodes(_graph("relu"), CudaBackend("off")) == set()


def test_library_bias_relu_calls():
    """relu(x @ W + b) in bfloat16: the descriptor gets EPILOGUE = RELU_BIAS and BIAS_DATA_TYPE =
    bf16 once; every call sets BIAS_POINTER (the launch's fourth buffer, as it lies) just before
    cublasLtMatmul; C is D with beta = 0; a new bias address is set on the next call."""
    lib, calls, (nvmath, cublas, real, mod) = _recording_library()
    D = real.MatmulDescAttribute
    p = plan(mm(4, 16, 8, 8, 1, 16, 1, dtype=BF16, epilogue="relu_bias", bias_view=_row_bias(4, 16)))
    out, pa, pb, bias = 0x10000, 0x20000, 0x30000, 0x40000
    lib.run(p, (out, pa, pb, bias), 0x50000, 99)
    sets = [a for n, a in calls if n == "matmul_desc_set_attribute"]
    bf16 = int(nvmath.CudaDataType.CUDA_R_16BF)
    assert (D.EPILOGUE, np.uint32(int(real.Epilogue.RELU_BIAS)).tobytes()) in sets
    assert (D.BIAS_DATA_TYPE, np.int32(bf16).tobytes()) in sets
    assert calls[-2] == ("matmul_desc_set_attribute", (D.BIAS_POINTER, np.int64(bias).tobytes()))
    name, args = calls[-1]
    assert name == "matmul" and args[3] == pb and args[5] == pa and args[8] == out and args[10] == out
    assert bytes((ctypes.c_char * 4).from_address(args[7])) == np.float32(0).tobytes()  # beta = 0
    n = len(calls)
    lib.run(p, (out, pa, pb, bias + 256), 0x50000, 99)
    assert calls[n:] == [("matmul_desc_set_attribute", (D.BIAS_POINTER, np.int64(bias + 256).tobytes())),
                         calls[-1]]
    assert calls[-1][0] == "matmul"


def test_library_relu_without_bias_sets_no_bias():
    lib, calls, (nvmath, cublas, real, mod) = _recording_library()
    D = real.MatmulDescAttribute
    p = plan(mm(4, 16, 8, 8, 1, 16, 1, epilogue="relu"))
    lib.run(p, (0x10000, 0x20000, 0x30000), 0x50000, 99)
    sets = [a for n, a in calls if n == "matmul_desc_set_attribute"]
    assert (D.EPILOGUE, np.uint32(int(real.Epilogue.RELU)).tobytes()) in sets
    assert not any(a[0] in (D.BIAS_POINTER, D.BIAS_DATA_TYPE) for a in sets)
    # and a plain matmul sets no epilogue at all (cuBLASLt's default)
    lib2, calls2, _ = _recording_library()
    lib2.run(plan(mm(4, 16, 8, 8, 1, 16, 1)), (0x10000, 0x20000, 0x30000), 0x50000, 99)
    assert not any(a[0] == D.EPILOGUE for n, a in calls2 if n == "matmul_desc_set_attribute")


# ---------------------------------------------------------------- fp8 (e4m3, per-tensor scales)
F8 = dt.float8_e4m3


def fp8(m, n, k, a_sm, a_sk, b_sk, b_sn, out=BF16, a_off=0, b_off=0, ins=(F8, F8, F32, F32)):
    """An LtMatmulFp8 LOp: (a * a_scale) @ (b * b_scale), and the in_dtypes to plan it with."""
    op = mm(m, n, k, a_sm, a_sk, b_sk, b_sn, a_off=a_off, b_off=b_off, dtype=out)
    op.op, op.inputs = "LtMatmulFp8", (0, 1, 2, 3)
    op.args.update(a_scale=2, b_scale=3)
    return plan_matmul(op, list(ins))


@pytest.mark.parametrize("out", [BF16, F32])
def test_fp8_linear_is_tn(out):
    # x[32, 64] @ W[48, 64].T: cuBLASLt's A = W stored [64, 48] ld 64 with TRANSA, its B = x^T
    # column-major [64, 32] ld 64 (not transposed): "TN"; D^T [48, 32] ld 48 in the result's dtype
    p = fp8(32, 48, 64, a_sm=64, a_sk=1, b_sk=1, b_sn=64, out=out)
    assert p.fp8 and p.ab_dtype == "float8_e4m3" and p.dtype == out.name and p.ab_itemsize == 1
    assert p.a == LtLayout(64, 48, 64, True, 0) and p.b == LtLayout(64, 32, 64, False, 0)
    assert p.d == LtLayout(48, 32, 48, False, 48 * 32) and p.beta == 0.0 and p.epilogue == "default"
    assert library_spec(p, False).buffers == ("out", 0, 1, 2, 3)


def test_fp8_refusals():
    assert fp8(32, 48, 64, 64, 1, 48, 1) is None  # x @ W with W[k, n] row-major: "NN", not TN
    assert fp8(32, 48, 64, 1, 32, 1, 64) is None  # x column-major: cuBLASLt's B transposed ("TT")
    assert fp8(32, 48, 40, 40, 1, 1, 40) is None  # ld 40 bytes: not a multiple of 16
    assert fp8(32, 44, 64, 64, 1, 1, 64) is None  # D's ld 44 bf16 = 88 bytes
    assert fp8(32, 48, 64, 64, 1, 1, 64, b_off=8) is None  # an operand 8 bytes in
    assert fp8(32, 48, 64, 64, 1, 1, 64, out=F16) is None  # float16 results are not offered
    assert fp8(32, 48, 64, 64, 1, 1, 64, ins=(F8, F8, BF16, F32)) is None  # a scale not float32
    assert fp8(32, 48, 64, 64, 1, 1, 64, ins=(F8, BF16, F32, F32)) is None  # mixed operands
    assert fp8(32, 48, 64, 64, 1, 1, 64, ins=(dt.float8_e5m2, F8, F32, F32)) is None  # e5m2 not offered
    assert fp8(32, 48, 64, 64, 1, 1, 64, ins=(F8, F8, F32)) is None  # no b scale
    # and fp8 operands in a plain Matmul are refused (no scales, mixed dtypes)
    assert plan_matmul(mm(32, 48, 64, 64, 1, 1, 64, dtype=BF16), [F8, F8]) is None


def test_library_fp8_calls():
    """fp8 against the stand-ins: A, B layouts in E4M3, D in bf16; offsets in bytes; the scale of
    cuBLASLt's A (the op's b) and B (the op's a) set per call before cublasLtMatmul; beta 0."""
    lib, calls, (nvmath, cublas, real, mod) = _recording_library()
    D = real.MatmulDescAttribute
    p = fp8(32, 48, 64, 64, 1, 1, 64, a_off=64, b_off=128)
    out, pa, pb, sa, sb = 0x10000, 0x20000, 0x30000, 0x40000, 0x40100
    lib.run(p, (out, pa, pb, sa, sb), 0x50000, 99)
    e4m3, bf16 = int(nvmath.CudaDataType.CUDA_R_8F_E4M3), int(nvmath.CudaDataType.CUDA_R_16BF)
    assert [a for n, a in calls if n == "matrix_layout_create"] == [(e4m3, 64, 48, 64), (e4m3, 64, 32, 64),
                                                                    (bf16, 48, 32, 48)]
    assert calls[-3:-1] == [("matmul_desc_set_attribute", (D.A_SCALE_POINTER, np.int64(sb).tobytes())),
                            ("matmul_desc_set_attribute", (D.B_SCALE_POINTER, np.int64(sa).tobytes()))]
    name, args = calls[-1]
    assert name == "matmul" and args[3] == pb + 128 and args[5] == pa + 64 and args[8] == out and args[10] == out
    assert bytes((ctypes.c_char * 4).from_address(args[7])) == np.float32(0).tobytes()
    sets = [a for n, a in calls if n == "matmul_desc_set_attribute"]
    assert (D.TRANSA, np.int32(1).tobytes()) in sets and (D.TRANSB, np.int32(0).tobytes()) in sets
    assert not any(a[0] in (D.EPILOGUE, D.BIAS_POINTER) for a in sets)


def test_a_library_launch_takes_its_plan_at_the_tables_dims():
    """The executor reads a dims plan's dim values from the run table (the slots before its
    buffers) and calls the library with the plan at those values and the buffers' addresses."""
    from types import SimpleNamespace

    from lightspeed.backends.codegen.program import Launch
    from lightspeed.backends.cuda.cublaslt import plan_dims
    from lightspeed.backends.cuda.executor import GpuExecutor
    op = mm("s", 16, 8, a_sm=8, a_sk=1, b_sk=1, b_sn=8, dtype=BF16)
    dp = plan_dims(op, [BF16] * 2)
    launch = Launch(library_spec(dp, False), (0, 3, 1, 2), 0)  # s's slot, then out, a, b
    state = SimpleNamespace(table=np.array([7, 0x2000, 0x3000, 0x1000], np.int64))
    got, ptrs = GpuExecutor._library_call(state, launch, dp)
    assert got == plan(mm(7, 16, 8, a_sm=8, a_sk=1, b_sk=1, b_sn=8, dtype=BF16)) and ptrs == (0x1000, 0x2000, 0x3000)
    static = plan(mm(4, 16, 8, a_sm=8, a_sk=1, b_sk=1, b_sn=8, dtype=BF16))
    got, ptrs = GpuExecutor._library_call(state, Launch(library_spec(static, False), (3, 1, 2), 0), static)
    assert got is static and ptrs == (0x1000, 0x2000, 0x3000)


def test_the_library_candidate_computes_the_gated_pair_from_two_library_products():
    """silu(x @ G^T) * (x @ U^T) of a prompt: the tile kernel `MatmulGLUMma` has no library op
    beside it, so the greedy candidate takes the region over two `LtMatmulRows` products; the
    fused candidate keeps the tile kernel."""
    from lightspeed.nn.mlp import silu_mul

    g = ls.Graph()
    x = g.input("x", ("s", 64), dtype=ls.bfloat16)
    wg, wu = g.input("wg", (96, 64), dtype=ls.bfloat16), g.input("wu", (96, 64), dtype=ls.bfloat16)
    g.output("y", silu_mul(x @ wg.transpose(0, 1), x @ wu.transpose(0, 1)))
    programs = _candidate_programs(g)

    def ops(origin):
        return [o.op for o in programs[origin].ops if o.op not in ("Input", "Output", "Constant")]
    greedy = ops("greedy")
    assert greedy.count("LtMatmulRows") == 2 and "MatmulGLUMma" not in greedy and "Fused" in greedy, greedy
    assert "MatmulGLUMma" in ops("fused")


def test_the_library_candidate_writes_a_prompts_value_rows_from_a_library_product():
    """A prompt's v projection written into the KV cache: the warp kernels `MatmulScatter` /
    `NormMatmulScatter` compute it with every row re-reading the weight; the greedy candidate
    takes the library product and the in-place scatter of its rows instead (the few-rows
    candidate, a decode step's, keeps the warp kernel). Before, greedy took the warp kernel: a
    512-token prefill ran its v products as 512 x 512 dot products of 2048 each."""
    from lightspeed.models import from_hf_config

    cfg = dict(model_type="llama", vocab_size=64, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-5,
               tie_word_embeddings=True)
    programs = _candidate_programs(from_hf_config(cfg, dtype="bfloat16").decode_graph())

    def ops(origin):
        return [o.op for o in programs[origin].ops]
    greedy = ops("greedy")
    assert not {"MatmulScatter", "NormMatmulScatter"} & set(greedy), greedy
    assert greedy.count("ScatterInPlace") == 2 and greedy.count("LtMatmulRows") >= 2 * 5, greedy
    assert {"MatmulScatter", "NormMatmulScatter"} & set(ops("few-rows"))


@pytest.mark.parametrize("value", ["0", "two", "-3"])
def test_a_bad_algorithm_count_is_refused_by_name(value):
    """``LIGHTSPEED_CUDA_LT_ALGOS`` is a count of 1 or more; anything else stops the import with the
    variable named (a silent fallback would time nothing and hide the typo)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, LIGHTSPEED_CUDA_LT_ALGOS=value)
    proc = subprocess.run([sys.executable, "-c", "import lightspeed.backends.cuda.cublaslt"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "LIGHTSPEED_CUDA_LT_ALGOS" in proc.stderr and repr(value) in proc.stderr
