"""dtypes: promotion vs PyTorch, scalar promotion, as_dtype conversions and errors."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
import torch

import lightspeed as ls
from lightspeed import dtypes as dt
from lightspeed.errors import DTypeError, LightspeedError

TORCH = {
    ls.float64: torch.float64, ls.float32: torch.float32, ls.float16: torch.float16, ls.bfloat16: torch.bfloat16,
    ls.float8_e4m3: torch.float8_e4m3fn, ls.float8_e5m2: torch.float8_e5m2,
    ls.int64: torch.int64, ls.int32: torch.int32, ls.int16: torch.int16, ls.int8: torch.int8,
    ls.uint8: torch.uint8, ls.bool_: torch.bool,
}
FROM_TORCH = {v: k for k, v in TORCH.items()}
COMPUTE = [d for d in ls.ALL_DTYPES if not d.storage_only]
FP8 = [ls.float8_e4m3, ls.float8_e5m2]


def test_dtype_table_is_complete():
    assert set(TORCH) == set(ls.ALL_DTYPES) and len(COMPUTE) == 10
    for d in ls.ALL_DTYPES:
        assert d.itemsize == d.np.itemsize == TORCH[d].itemsize
        assert d.is_float == TORCH[d].is_floating_point
        assert d.is_bool == (d == ls.bool_)
        assert d.is_signed == TORCH[d].is_signed or d.is_bool
    assert {d for d in ls.ALL_DTYPES if d.storage_only} == set(FP8)


@pytest.mark.parametrize("a,b", list(itertools.product(COMPUTE, COMPUTE)), ids=lambda d: d.name)
def test_promote_types_matches_torch(a, b):
    got = ls.promote_types(a, b)
    assert got == FROM_TORCH[torch.promote_types(TORCH[a], TORCH[b])]
    assert got == ls.promote_types(b, a)  # symmetric


def test_promote_types_by_hand():
    assert ls.promote_types(ls.uint8, ls.int8) == ls.int16
    assert ls.promote_types(ls.float16, ls.bfloat16) == ls.float32
    assert ls.promote_types(ls.int64, ls.float16) == ls.float16
    assert ls.promote_types(ls.bool_, ls.uint8) == ls.uint8


@pytest.mark.parametrize("f8", FP8, ids=lambda d: d.name)
@pytest.mark.parametrize("other", COMPUTE + FP8, ids=lambda d: d.name)
def test_promote_types_refuses_float8(f8, other):
    if other == f8:
        assert ls.promote_types(f8, f8) == f8  # same dtype: nothing to promote
        return
    for a, b in ((f8, other), (other, f8)):
        with pytest.raises(DTypeError, match="storage-only"):
            ls.promote_types(a, b)


SCALARS = [True, False, 0, 3, -1, 300, 2.5, -0.5, float("inf")]


@pytest.mark.parametrize("d", COMPUTE, ids=lambda d: d.name)
@pytest.mark.parametrize("s", SCALARS, ids=repr)
def test_result_type_tensor_and_scalar_matches_torch(d, s):
    t = SimpleNamespace(dtype=d)  # anything with a DType .dtype counts as a tensor
    expect = FROM_TORCH[torch.result_type(torch.zeros(2, dtype=TORCH[d]), s)]
    assert ls.result_type(t, s) == expect
    assert ls.result_type(s, t) == expect


def test_result_type_with_graph_tensors_and_several_operands():
    g = ls.Graph()
    i8, u8 = g.input("a", (2,), ls.int8), g.input("b", (2,), ls.uint8)
    h, b = g.input("h", (2,), ls.float16), g.input("c", (2,), ls.bool_)
    cases = [((i8, u8), ls.int16), ((i8, u8, 2.5), ls.float32), ((h, 7), ls.float16), ((b, True), ls.bool_),
             ((b, 1), ls.int64), ((h, i8, u8, 1.0), ls.float16), ((u8, -1), ls.uint8)]
    for ops, expect in cases:
        assert ls.result_type(*ops) == expect, ops
        # torch agrees when the same operands are added up
        tops = [torch.zeros(2, dtype=TORCH[o.dtype]) if isinstance(o, ls.GraphTensor) else o for o in ops]
        acc = tops[0]
        for o in tops[1:]:
            acc = acc + o
        assert FROM_TORCH[acc.dtype] == expect, ops
    # the user-level path agrees: x_f16 * 2.0 stays float16, int8 + 2.5 is float32, bool + 1 is int64
    assert (h * 2.0).dtype == ls.float16 and (i8 + 2.5).dtype == ls.float32 and (b + 1).dtype == ls.int64


@pytest.mark.parametrize("scalars", [(True, False), (1, True), (2, 2.5), (True, 0.5), (3, 4)], ids=repr)
def test_result_type_scalars_only_matches_torch(scalars):
    assert ls.result_type(*scalars) == FROM_TORCH[torch.result_type(*scalars)]


def test_result_type_scalar_with_float8():
    f8 = SimpleNamespace(dtype=ls.float8_e4m3)
    assert ls.result_type(f8, 2.0) == ls.float8_e4m3  # same category: no promotion (the op itself refuses)
    with pytest.raises(DTypeError, match="storage-only"):
        ls.result_type(SimpleNamespace(dtype=ls.float8_e5m2), SimpleNamespace(dtype=ls.int8))
    with pytest.raises(DTypeError, match="storage-only"):
        ls.result_type(SimpleNamespace(dtype=ls.float8_e5m2), SimpleNamespace(dtype=ls.float8_e4m3))


# ---------------------------------------------------------------------------- as_dtype
def test_as_dtype_from_names():
    for d in ls.ALL_DTYPES:
        assert dt.as_dtype(d.name) is d
        assert dt.as_dtype(d) is d
    aliases = {"bool_": ls.bool_, "float": ls.float32, "half": ls.float16, "double": ls.float64,
               "long": ls.int64, "int": ls.int32, "bf16": ls.bfloat16, "fp8_e4m3": ls.float8_e4m3,
               "fp8_e5m2": ls.float8_e5m2}
    for name, d in aliases.items():
        assert dt.as_dtype(name) is d
        assert TORCH[d] == getattr(torch, name, TORCH[d])  # torch's aliases mean the same


def test_as_dtype_from_numpy():
    cases = {np.float64: ls.float64, np.float32: ls.float32, np.float16: ls.float16, np.int64: ls.int64,
             np.int32: ls.int32, np.int16: ls.int16, np.int8: ls.int8, np.uint8: ls.uint8, np.bool_: ls.bool_,
             ml_dtypes.bfloat16: ls.bfloat16, ml_dtypes.float8_e4m3fn: ls.float8_e4m3,
             ml_dtypes.float8_e5m2: ls.float8_e5m2}
    for t, d in cases.items():
        assert dt.as_dtype(t) is d
        assert dt.as_dtype(np.dtype(t)) is d
        assert dt.as_dtype(np.zeros(1, t).dtype) is d
        assert d.np == np.dtype(t)


def test_as_dtype_from_torch():
    for d, t in TORCH.items():
        assert dt.as_dtype(t) is d
    assert dt.as_dtype(torch.half) is ls.float16 and dt.as_dtype(torch.long) is ls.int64


@pytest.mark.parametrize("bad", ["flaot32", "float128", "", "Float32", "complex64"])
def test_as_dtype_unknown_name(bad):
    with pytest.raises(DTypeError) as ei:
        dt.as_dtype(bad)
    msg = str(ei.value)
    assert repr(bad) in msg and "float32" in msg and "bfloat16" in msg  # lists the known names
    assert isinstance(ei.value, (TypeError, LightspeedError))


@pytest.mark.parametrize("bad", [np.complex64, np.uint16, np.dtype("U3"), torch.complex64, torch.uint16,
                                 object(), 3.5], ids=repr)
def test_as_dtype_unsupported(bad):
    with pytest.raises(DTypeError):
        dt.as_dtype(bad)


def test_scalar_dtype():
    assert dt.scalar_dtype(True) is ls.bool_ and dt.scalar_dtype(np.bool_(False)) is ls.bool_
    assert dt.scalar_dtype(3) is ls.int64 and dt.scalar_dtype(np.int8(3)) is ls.int64
    assert dt.scalar_dtype(2.5) is ls.float32
    with pytest.raises(TypeError, match="str"):
        dt.scalar_dtype("2")


def test_min_max_values():
    assert ls.float16.min_value() == -np.inf and ls.bfloat16.max_value() == np.inf
    assert ls.int8.min_value() == -128 and ls.uint8.max_value() == 255 and ls.int64.max_value() == 2 ** 63 - 1
    assert ls.bool_.min_value() is False and ls.bool_.max_value() is True


# ---------------------------------------------------------------- GGML block storage dtypes
def test_block_dtypes_are_storage_only_and_cast_from():
    """The six GGML block types: named like gguf's, (weights, bytes) per block as ggml states
    them, storage-only (no arithmetic), castable from but never to."""
    assert [d.name for d in ls.BLOCK_DTYPES] == ["q8_0", "q4_0", "q4_1", "q5_0", "q4_k", "q6_k"]
    assert {d.name: d.block for d in ls.BLOCK_DTYPES} == {"q8_0": (32, 34), "q4_0": (32, 18), "q4_1": (32, 20),
                                                          "q5_0": (32, 22), "q4_k": (256, 144), "q6_k": (256, 210)}
    assert dt.as_dtype("q4_k") is ls.q4_k and all(d.storage_only for d in ls.BLOCK_DTYPES)
    assert not any(d.block for d in ls.ALL_DTYPES)
    g = ls.Graph()
    w = g.input("w", (4, 64), ls.q4_1)
    with pytest.raises(DTypeError, match="storage-only"):
        w + w
    with pytest.raises(DTypeError, match="cannot cast to the block type q4_0"):
        w.to(ls.float32).to(ls.q4_0)
    assert w.to(ls.float32).dtype == ls.float32


@pytest.mark.parametrize("shape", [(64,), (4, 48), ("n", 64), (2, 4, 64)])
def test_a_block_input_is_a_static_matrix_of_whole_blocks(shape):
    with pytest.raises(ls.ShapeError, match="a q4_1 input is a static \\[rows, cols\\] matrix"):
        ls.Graph().input("w", shape, ls.q4_1)


@pytest.mark.parametrize("qtype", ["q8_0", "q4_0", "q4_1", "q5_0", "q4_k", "q6_k"])
def test_reference_and_cpu_cast_a_block_input_like_gguf(qtype):
    """A block input cast to float32 gives gguf's dequantisation of its blocks exactly (reference
    and cpu backends), read through a view like any value; a float array is refused."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    from lightspeed.weights.quant import random_quant

    q = random_quant(qtype, (6, 256), 1)
    want = dequantize(q.blocks.data, getattr(GGMLQuantizationType, qtype.upper())).reshape(6, 256)
    g = ls.Graph()
    w = g.input("w", (6, 256), qtype).to(ls.float32)
    g.output("y", w)
    g.output("t", w.transpose(0, 1) * 2.0)
    for backend in ("reference", "cpu"):
        out = g.compile(backend=backend, search=ls.SearchOptions(budget=2, seed=0, progress=False))(w=q)
        np.testing.assert_array_equal(out["y"], want)
        np.testing.assert_array_equal(out["t"], want.T * 2)
    with pytest.raises(ls.InputError, match=f"input 'w': expected {qtype} blocks"):
        g.compile(backend="reference")(w=want)
