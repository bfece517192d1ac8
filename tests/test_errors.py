"""Bad inputs raise the right exception class with a message that names the op or input and shows
the shapes/dtypes involved."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

import lightspeed as ls
from lightspeed.errors import DTypeError, InputError, LightspeedError, ShapeError


def _raises(exc, fn, *needles):
    """Call fn, check the exception type and that every needle is in the message; return the message."""
    with pytest.raises(exc) as ei:
        fn()
    msg = str(ei.value)
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"
    return msg


def test_error_hierarchy():
    for cls in (ShapeError, DTypeError, InputError, ls.UnsupportedError):
        assert issubclass(cls, LightspeedError)
    assert issubclass(ShapeError, ValueError) and issubclass(DTypeError, TypeError)
    assert issubclass(InputError, ValueError) and issubclass(ls.UnsupportedError, NotImplementedError)


# ---------------------------------------------------------------------------- shape errors
def test_incompatible_broadcast():
    g = ls.Graph()
    a, b = g.input("a", (3, 4)), g.input("b", (5,))
    _raises(ShapeError, lambda: a + b, "add", "(3, 4)", "(5,)", "broadcast")
    _raises(ShapeError, lambda: a * b, "mul", "(3, 4)", "(5,)")
    s, t = g.input("s", ("n", 4)), g.input("t", ("m", 4))
    _raises(ShapeError, lambda: s - t, "sub", "(n, 4)", "(m, 4)", "n vs m")


def test_matmul_inner_dim_mismatch():
    g = ls.Graph()
    a, b = g.input("a", (2, 4)), g.input("b", (5, 3))
    _raises(ShapeError, lambda: a @ b, "matmul", "(2, 4)", "(5, 3)", "4 vs 5")
    c, d = g.input("c", ("s", "k")), g.input("d", ("j", 8))
    _raises(ShapeError, lambda: c @ d, "matmul", "(s, k)", "(j, 8)", "k vs j")


def test_reshape_wrong_element_count():
    g = ls.Graph()
    a = g.input("a", (3, 4))
    _raises(ShapeError, lambda: a.reshape(5, 3), "reshape", "(3, 4)", "(5, 3)", "12", "15")
    s = g.input("s", ("n", 4))
    _raises(ShapeError, lambda: s.reshape(3, 4), "reshape", "(n, 4)", "(3, 4)")


def test_permute_bad_order():
    g = ls.Graph()
    a = g.input("a", (3, 4))
    _raises(ShapeError, lambda: a.permute(0, 0), "permute", "(0, 0)")
    _raises(ShapeError, lambda: a.permute(0, 1, 2), "permute", "2", "rank 2")


def test_dim_out_of_range():
    g = ls.Graph()
    a = g.input("a", (3, 4))
    _raises(ShapeError, lambda: a.sum(5), "sum", "dim 5", "rank 2")
    _raises(ShapeError, lambda: a.softmax(-3), "softmax", "dim -3", "rank 2")
    _raises(ShapeError, lambda: g.add_node("SumReduce", [a], 2), "SumReduce", "axis 2", "rank-2", "float32[3, 4]")
    _raises(ShapeError, lambda: g.add_node("MaxReduce", [a], -1), "MaxReduce", "axis -1")


def test_primitive_shape_mismatch_when_calling_add_node():
    g = ls.Graph()
    a, b = g.input("a", (4,), ls.int32), g.input("b", (5,), ls.int32)
    _raises(ShapeError, lambda: g.add_node("Add", [a, b]), "Add", "int32[4]", "int32[5]", "broadcast them first")
    src = g.input("src", (3,), ls.int32)
    idx = g.input("idx", (2,), ls.int64)
    _raises(ShapeError, lambda: g.add_node("Scatter", [a, idx, src]), "Scatter", "(2)", "(3)")


@pytest.mark.parametrize("op", [ls.layer_norm, ls.rms_norm], ids=["layer_norm", "rms_norm"])
def test_norm_normalized_shape_errors(op):
    # an Expr or a dim name is one trailing dim (like torch's int); it must still match the input
    g = ls.Graph()
    x = g.input("x", (2, "s", "d"))
    name = op.__name__
    _raises(ShapeError, lambda: op(x, x.shape[1]), name, "(s,)", "(2, s, d)")
    _raises(ShapeError, lambda: op(x, "e"), name, "(e,)", "(2, s, d)")
    _raises(ShapeError, lambda: op(x, (3, "d")), name, "(3, d)", "(2, s, d)")
    _raises(ShapeError, lambda: op(x, (2, "s", "d", 1)), name, "(2, s, d, 1)")
    for bad in (2.0, True, None, ("d", 1.5)):
        _raises(ShapeError, functools.partial(op, x, bad), name, "normalized_shape", repr(bad))


def test_negative_input_dim():
    _raises(ShapeError, lambda: ls.Graph().input("x", (3, -1)), "'x'", "-1")


# ---------------------------------------------------------------------------- dtype errors
def test_float8_arithmetic_without_cast():
    g = ls.Graph()
    f8 = g.input("f8", (4,), ls.float8_e4m3)
    x = g.input("x", (4,))
    _raises(DTypeError, lambda: f8 + f8, "float8_e4m3", "storage-only", "cast")
    _raises(DTypeError, lambda: f8 * 2.0, "float8_e4m3", "storage-only")
    _raises(DTypeError, lambda: f8 + x, "float8_e4m3", "storage-only", "float32")
    _raises(DTypeError, lambda: f8.exp(), "exp", "float8_e4m3")
    _raises(DTypeError, lambda: g.add_node("SumReduce", [f8], 0), "SumReduce", "float8_e4m3")
    # the supported path: cast first
    y = f8.to(ls.float32) + x
    assert y.dtype == ls.float32


def test_bool_subtraction():
    g = ls.Graph()
    b = g.input("b", (4,), ls.bool_)
    _raises(DTypeError, lambda: b - b, "sub", "bool")


def test_mean_of_ints():
    g = ls.Graph()
    i = g.input("i", (4,), ls.int32)
    _raises(DTypeError, lambda: i.mean(), "mean", "int32")


def test_primitive_dtype_mismatch_when_calling_add_node():
    g = ls.Graph()
    i, f = g.input("i", (4,), ls.int32), g.input("f", (4,))
    _raises(DTypeError, lambda: g.add_node("Add", [i, f]), "Add", "int32", "float32", "int32[4], float32[4]")
    _raises(DTypeError, lambda: g.add_node("Sqrt", [i]), "Sqrt", "floating-point", "int32[4]")
    _raises(DTypeError, lambda: g.add_node("Mod", [g.input("b", (4,), ls.bool_)] * 2), "Mod", "bool")
    _raises(DTypeError, lambda: g.add_node("Gather", [f, f]), "Gather", "integer", "float32")
    idx = g.input("idx", (4,), ls.int64)
    _raises(DTypeError, lambda: g.add_node("Scatter", [f, idx, i]), "Scatter", "float32", "int32")
    _raises(DTypeError, lambda: g.add_node("Cast", [f], "int32"), "Cast", "'int32'")
    _raises(DTypeError, lambda: g.iota("z", (3,), ls.float32), "Iota", "float32")
    _raises(DTypeError, lambda: g.add_node("SumReduce", [g.input("bb", (2,), ls.bool_)], 0), "SumReduce", "bool")


def test_add_node_arity_and_unknown_op():
    g = ls.Graph()
    a = g.input("a", (4,))
    _raises(LightspeedError, lambda: g.add_node("Add", [a]), "Add", "2 operands", "got 1", "float32[4]")
    _raises(KeyError, lambda: g.add_node("Frobnicate", [a]), "Frobnicate", "known:", "Add")
    _raises(TypeError, lambda: g.add_node("Sqrt", [np.zeros(4)]), "Sqrt", "not a GraphTensor")


def test_unknown_dtype_name():
    g = ls.Graph()
    _raises(DTypeError, lambda: g.input("x", (2,), "flaot32"), "flaot32", "float32")
    a = g.input("a", (2,))
    _raises(DTypeError, lambda: a.to("int31"), "int31")


# ---------------------------------------------------------------------------- graph-building misuse
def test_duplicate_input_and_output_names():
    g = ls.Graph()
    x = g.input("x", (2,))
    _raises(ValueError, lambda: g.input("x", (3,)), "'x'", "already")
    g.output("y", x)
    _raises(ValueError, lambda: g.output("y", x.sqrt()), "'y'", "already")


def test_operands_from_two_graphs():
    g1, g2 = ls.Graph(), ls.Graph()
    a = g1.input("a", (4,))
    b = g2.input("b", (4,), ls.int32)
    msg = _raises(LightspeedError, lambda: a + b, "different Graph", "float32[4]")
    assert "one Graph" in msg
    _raises(LightspeedError, lambda: g1.add_node("Mul", [a, g2.input("c", (4,))]), "Mul", "different Graph")
    _raises(TypeError, lambda: g1.output("o", b), "'o'", "this graph")


def test_compile_without_outputs_and_unknown_backend():
    g = ls.Graph()
    x = g.input("x", (2,))
    _raises(LightspeedError, lambda: g.compile(backend="reference"), "no outputs", "g.output")
    g.output("y", x)
    _raises(LightspeedError, lambda: g.compile(backend="tpu-v9"), "'tpu-v9'", "reference")
    _raises(TypeError, lambda: g.compile(backend="reference", opt_level=3), "opt_level")


# ---------------------------------------------------------------------------- program calls
@pytest.fixture
def prog():
    g = ls.Graph()
    x = g.input("x", ("n", 4))
    y = g.input("y", ("n", 4), ls.int32)
    g.output("o", x + y.to(ls.float32))
    return g.compile(backend="reference")


X = np.zeros((2, 4), np.float32)
Y = np.zeros((2, 4), np.int32)


def test_call_ok(prog):
    np.testing.assert_array_equal(prog(x=X + 1, y=Y + 2)["o"], np.full((2, 4), 3.0))


def test_call_missing_input(prog):
    _raises(InputError, lambda: prog(x=X), "missing", "'y'", "['x', 'y']")


def test_call_extra_input(prog):
    _raises(InputError, lambda: prog(x=X, y=Y, z=X), "unexpected", "'z'")


def test_call_input_given_twice(prog):
    _raises(InputError, lambda: prog({"x": X, "y": Y}, x=X), "'x'", "twice")


def test_call_wrong_rank(prog):
    _raises(InputError, lambda: prog(x=X[0], y=Y), "'x'", "rank 2", "(n, 4)", "(4,)")


def test_call_wrong_size_for_constant_dim(prog):
    _raises(InputError, lambda: prog(x=np.zeros((2, 5), np.float32), y=Y), "'x'", "axis 1", "size 4", "5",
            "(2, 5)")


def test_call_conflicting_symbolic_dim(prog):
    _raises(InputError, lambda: prog(x=np.zeros((3, 4), np.float32), y=Y), "'y'", "'n'", "2", "3")


def test_call_wrong_dtype(prog):
    _raises(InputError, lambda: prog(x=X.astype(np.float64), y=Y), "'x'", "float32", "float64", "astype")
    _raises(InputError, lambda: prog(x=X, y=Y.astype(np.int64)), "'y'", "int32", "int64")
    _raises(InputError, lambda: prog(x=torch.zeros(2, 4, dtype=torch.float16), y=Y), "'x'", "float32", "float16")


def test_call_wrong_dtype_hint_for_bfloat16():
    g = ls.Graph()
    g.output("o", g.input("x", (2,), ls.bfloat16))
    prog = g.compile(backend="reference")
    msg = _raises(InputError, lambda: prog(x=np.zeros(2, np.float32)), "'x'", "bfloat16", "float32")
    assert "ml_dtypes.bfloat16" in msg and "np.bfloat16" not in msg  # numpy has no bfloat16


def test_call_with_python_list(prog):
    _raises(InputError, lambda: prog(x=[[0.0] * 4] * 2, y=Y), "'x'", "numpy array", "list")
    _raises(InputError, lambda: prog(x=X, y=3), "'y'", "int")


def test_call_unbound_symbol_needs_dims():
    g = ls.Graph()
    x = g.input("x", ("n",))
    g.output("o", x.reshape("n", 1) + g.iota("z", ("m",)).to(ls.float32))
    p = g.compile(backend="reference")
    _raises(InputError, lambda: p(x=np.zeros(3, np.float32)), "['m']", "dims=")
    assert p(x=np.zeros(3, np.float32), dims={"m": 2})["o"].shape == (3, 2)
    _raises(InputError, lambda: p(x=np.zeros(3, np.float32), dims={"m": -2}), "'m'", "-2")
    _raises(InputError, lambda: p(x=np.zeros(3, np.float32), dims={"m": 2.5}), "'m'", "2.5")


def test_call_derived_dim_needs_its_symbol():
    g = ls.Graph()
    g.output("o", g.input("x", ("n+1",)))
    p = g.compile(backend="reference")
    _raises(InputError, lambda: p(x=np.zeros(3, np.float32)), "'x'", "n + 1", "['n']", "dims=")
    assert p(x=np.zeros(3, np.float32), dims={"n": 2})["o"].shape == (3,)
    _raises(InputError, lambda: p(x=np.zeros(3, np.float32), dims={"n": 5}), "'x'", "n + 1", "6", "3")


def _expand_program():
    g = ls.Graph()
    x = g.input("x", ("n", 1))
    g.output("y", x.expand("n", "m") * 2)
    return g.compile("cpu", search=ls.SearchOptions(budget=1, seed=0, progress=False))


def _graph_with_input():
    g = ls.Graph()
    g.input("x", (2,))
    return g


COLUMN = np.ones((2, 1), np.float32)
# (what a careless caller does, the words the error must contain): every one a LightspeedError
# naming what was wrong, never numpy's, Python's or the allocator's own exception
BAD_CALLS = [
    ("an array instead of a mapping", lambda p: p(COLUMN), ["mapping", "ndarray"]),
    ("a non-string input name", lambda p: p({1: COLUMN}), ["strings", "1"]),
    ("dims not a mapping", lambda p: p(x=COLUMN, dims=[("m", 3)]), ["dims", "mapping"]),
    ("an unknown dim", lambda p: p(x=COLUMN, dims={"m": 3, "zzz": 5}), ["zzz", "unknown"]),
    ("a float dim value", lambda p: p(x=COLUMN, dims={"m": 2.5}), ["'m'", "2.5"]),
    ("a dim of 10^13", lambda p: p(x=COLUMN, dims={"m": 10 ** 13}), ["'m'", "largest"]),
    ("an output of 8 TB", lambda p: p(x=COLUMN, dims={"m": 10 ** 12}), ["'y'", "bytes"]),
    ("a missing input", lambda p: p(dims={"m": 3}), ["missing", "'x'"]),
    ("an extra input", lambda p: p(x=COLUMN, z=COLUMN, dims={"m": 3}), ["unexpected", "'z'"]),
    ("out not a mapping", lambda p: p(x=COLUMN, dims={"m": 3}, out=COLUMN), ["out", "mapping"]),
]


@pytest.mark.parametrize("case", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_program_calls_raise_lightspeed_errors(case):
    _, call, needles = case
    _raises(LightspeedError, functools.partial(call, _expand_program()), *needles)


BAD_GRAPHS = [
    ("a duplicate input name", lambda: _graph_with_input().input("x", (3,)), ["already", "'x'"]),
    ("an empty input name", lambda: ls.Graph().input("", (3,)), ["non-empty"]),
    ("a float dim", lambda: ls.Graph().input("x", (2.5,)), ["2.5", "dimension"]),
    ("a dim name with a space", lambda: ls.Graph().input("x", ("batch size",)), ["batch size"]),
    ("a duplicate output name", lambda: _two_outputs(), ["already", "'y'"]),
    ("a non-tensor output", lambda: ls.Graph().output("y", 3), ["GraphTensor"]),
    ("an alias of no input", lambda: _alias_nothing(), ["aliases", "'nope'"]),
    ("a lazy tensor's truth value", lambda: bool(ls.Graph().input("x", (2,))), ["truth value"]),
]


def _two_outputs():
    g = ls.Graph()
    x = g.input("x", (2,))
    g.output("y", x)
    g.output("y", x * 2)


def _alias_nothing():
    g = ls.Graph()
    g.output("y", g.input("x", (2,)), aliases="nope")


@pytest.mark.parametrize("case", BAD_GRAPHS, ids=[c[0] for c in BAD_GRAPHS])
def test_bad_graph_building_raises_lightspeed_errors(case):
    _, build, needles = case
    _raises(LightspeedError, build, *needles)
