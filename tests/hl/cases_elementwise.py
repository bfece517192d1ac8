"""Op-table cases: element-wise arithmetic, math, comparisons, logic, select, casts."""

from __future__ import annotations

import torch

import lightspeed as ls
from tests.hl.optable import OpCase, Sample, T

F = (ls.float32, ls.float64)
LOW = (ls.float16, ls.bfloat16)
S = ({"s": 1}, {"s": 3})


def _unary(shape=(3, 4)):
    return [Sample([T(shape)], name="2d"), Sample([T(("s", 5))], dims=({"s": 1}, {"s": 4}), name="sym"),
            Sample([T((7,))], name="1d")]


def _unary_pos(shape=(3, 4)):
    return [Sample([T(shape, gen="positive")], name="2d"),
            Sample([T(("s", 5), gen="positive")], dims=({"s": 2}, {"s": 3}), name="sym")]


def _binary():
    return [
        Sample([T((3, 4)), T((3, 4))], name="same"),
        Sample([T((2, 1, 4)), T((3, 1))], name="bcast"),
        Sample([T(("s", 4)), T((4,))], dims=({"s": 1}, {"s": 5}), name="sym_bcast"),
        Sample([T((3, 4)), 2.5], name="scalar"),
    ]


def _binary_pos():
    return [Sample([T((3, 4)), T((3, 4), gen="positive")], name="same"),
            Sample([T((2, 1, 4)), T((3, 1), gen="positive")], name="bcast")]


def _int_binary():
    nz = lambda rng, shape, d: rng.choice([-7, -3, -2, -1, 1, 2, 3, 5], size=shape)  # noqa: E731
    return [Sample([T((3, 4), ls.int32), T((3, 4), ls.int32, gen=nz)], name="int32"),
            Sample([T((5,), ls.int64), T((5,), ls.int64, gen=nz)], name="int64")]


CASES = [
    OpCase("add", ls.add, torch.add, _binary(), dtypes=F + LOW),
    OpCase("add", ls.add, torch.add, [Sample([T((3, 4)), T((3, 4))], {"alpha": 2})], variant="alpha"),
    OpCase("add", ls.add, torch.add, [Sample([T((4,), ls.int32), T((4,), ls.int64)]),
                                      Sample([T((4,), ls.uint8), T((4,), ls.int8)]),
                                      Sample([T((4,), ls.int32), 1.5])],
           dtypes=(ls.float32,), variant="promote"),
    OpCase("sub", ls.sub, torch.sub, _binary(), dtypes=F + LOW),
    OpCase("mul", ls.mul, torch.mul, _binary(), dtypes=F + LOW),
    OpCase("mul", ls.mul, torch.mul, _int_binary(), dtypes=(ls.float32,), variant="int"),
    OpCase("div", ls.div, torch.div, _binary_pos()),
    OpCase("div", ls.div, torch.div, _int_binary(), dtypes=(ls.float32,), variant="int_true"),
    OpCase("div", lambda a, b: ls.div(a, b, rounding_mode="trunc"),
           lambda a, b: torch.div(a, b, rounding_mode="trunc"), _int_binary() + _binary_pos(),
           dtypes=(ls.float32,), variant="trunc"),
    OpCase("floor_divide", ls.floor_divide, torch.floor_divide, _int_binary() + _binary_pos(),
           dtypes=(ls.float32,)),
    OpCase("neg", ls.neg, torch.neg, _unary(), dtypes=F + LOW),
    OpCase("reciprocal", ls.reciprocal, torch.reciprocal, _unary_pos()),
    OpCase("fmod", ls.fmod, torch.fmod, _binary_pos() + _int_binary()),
    OpCase("remainder", ls.remainder, torch.remainder, _binary_pos() + _int_binary()),
    OpCase("square", ls.square, torch.square, _unary()),
    OpCase("pow", ls.pow, torch.pow, [Sample([T((3, 4)), 2], name="sq"), Sample([T((3, 4)), 3], name="cube"),
                                      Sample([T((3, 4), gen="positive"), -2], name="neg_int"),
                                      Sample([T((3, 4), gen="positive"), 0.5], name="sqrt"),
                                      Sample([T((3, 4), gen="positive"), 1.7], name="float"),
                                      Sample([T((3, 4), gen="positive"), T((3, 4))], name="tensor"),
                                      Sample([T((6,), gen=lambda r, s, d: [-2, -1.5, 0, 0, 2, -3]),
                                              T((6,), gen=lambda r, s, d: [3, 2, 0, 2, -1, 2.5])], name="signs"),
                                      Sample([T((3, 4), ls.int32), 3], name="int")], tol={"float64": (1e-9, 1e-12)}),
    OpCase("exp", ls.exp, torch.exp, _unary(), dtypes=F + LOW, tol={"float64": (1e-13, 1e-14)}),
    OpCase("exp2", ls.exp2, torch.exp2, _unary()),
    OpCase("log", ls.log, torch.log, _unary_pos(), dtypes=F + LOW),
    OpCase("log2", ls.log2, torch.log2, _unary_pos()),
    OpCase("log1p", ls.log1p, torch.log1p, _unary_pos(), tol={"float32": (1e-5, 1e-6)}),
    OpCase("expm1", ls.expm1, torch.expm1, _unary(), tol={"float32": (1e-5, 1e-6)}),
    OpCase("sin", ls.sin, torch.sin, _unary(), dtypes=F + LOW),
    OpCase("cos", ls.cos, torch.cos, _unary(), dtypes=F + LOW, tol={"float32": (1e-5, 1e-6)}),
    OpCase("tan", ls.tan, torch.tan, [Sample([T((3, 4), gen="uniform")])], tol={"float32": (1e-5, 1e-6)}),
    OpCase("sqrt", ls.sqrt, torch.sqrt, _unary_pos(), dtypes=F + LOW),
    OpCase("rsqrt", ls.rsqrt, torch.rsqrt, _unary_pos()),
    OpCase("abs", ls.abs, torch.abs, _unary() + [Sample([T((5,), ls.int32)], name="int")], dtypes=F + LOW),
    OpCase("sign", ls.sign, torch.sign, _unary() + [Sample([T((5,), ls.int32)], name="int"),
                                                     Sample([T((4,), gen=lambda r, s, d: [float("nan"), -0.0, 3, -2])],
                                                            name="special")]),
    OpCase("floor", ls.floor, torch.floor, _unary()),
    OpCase("ceil", ls.ceil, torch.ceil, _unary()),
    OpCase("trunc", ls.trunc, torch.trunc, _unary() + [Sample([T((3,), gen=lambda r, s, d: [float("inf"), -2.5, 1e30])],
                                                                name="special")]),
    OpCase("sigmoid", ls.sigmoid, torch.sigmoid, _unary(), dtypes=F + LOW),
    OpCase("tanh", ls.tanh, torch.tanh, _unary(), dtypes=F + LOW, tol={"float32": (1e-5, 1e-6),
                                                                       "float64": (1e-10, 1e-14)}),
    OpCase("relu", ls.relu, torch.relu, _unary() + [Sample([T((4,), gen=lambda r, s, d: [float("-inf"), float("nan"),
                                                                                     -1, 2])], name="special")],
           dtypes=F + LOW),
    OpCase("silu", ls.silu, torch.nn.functional.silu, _unary(), dtypes=F + LOW),
    # erf uses Abramowitz & Stegun 7.1.26: max abs error 1.5e-7 (documented in docs/ops.md)
    OpCase("erf", ls.erf, torch.erf, _unary(), tol={"float32": (0, 3e-7), "float64": (0, 3e-7)}),
    OpCase("gelu", ls.gelu, torch.nn.functional.gelu, _unary(), dtypes=F + LOW,
           tol={"float32": (1e-5, 4e-7), "float64": (0, 4e-7)}),
    OpCase("gelu", lambda x: ls.gelu(x, approximate="tanh"),
           lambda x: torch.nn.functional.gelu(x, approximate="tanh"), _unary(), variant="tanh",
           tol={"float64": (1e-10, 1e-13)}),
    OpCase("softplus", ls.softplus, torch.nn.functional.softplus,
           _unary() + [Sample([T((3,), gen=lambda r, s, d: [25.0, -30.0, 0.0])], name="threshold")]),
    OpCase("lt", ls.lt, torch.lt, _binary()),
    OpCase("gt", ls.gt, torch.gt, _binary()),
    OpCase("le", ls.le, torch.le, _binary() + [Sample([T((3, 4), ls.int32), T((3, 4), ls.int32)], name="int")]),
    OpCase("ge", ls.ge, torch.ge, _binary()),
    OpCase("eq", ls.eq, torch.eq, [Sample([T((3, 4), ls.int32), T((3, 4), ls.int32)], name="int"),
                                   Sample([T((4,), gen=lambda r, s, d: [float("nan"), 1, 2, float("inf")]),
                                           T((4,), gen=lambda r, s, d: [float("nan"), 1, 3, float("inf")])],
                                          name="special")] + _binary()),
    OpCase("ne", ls.ne, torch.ne, [Sample([T((3, 4), ls.int32), T((3, 4), ls.int32)], name="int")] + _binary()),
    OpCase("isnan", ls.isnan, torch.isnan, [Sample([T((4,), gen=lambda r, s, d: [float("nan"), 1, float("-inf"),
                                                                                 float("inf")])])]),
    OpCase("isinf", ls.isinf, torch.isinf, [Sample([T((4,), gen=lambda r, s, d: [float("nan"), 1, float("-inf"),
                                                                                 float("inf")])])]),
    OpCase("isfinite", ls.isfinite, torch.isfinite,
           [Sample([T((4,), gen=lambda r, s, d: [float("nan"), 1, float("-inf"), float("inf")])])]),
    OpCase("logical_not", ls.logical_not, torch.logical_not, [Sample([T((3, 4), ls.bool_)]),
                                                               Sample([T((3, 4), ls.int32)], name="int")],
           dtypes=(ls.float32,)),
    OpCase("logical_and", ls.logical_and, torch.logical_and, [Sample([T((3, 4), ls.bool_), T((3, 4), ls.bool_)]),
                                                               Sample([T((3, 4)), T((4,), ls.int32)], name="mixed")],
           dtypes=(ls.float32,)),
    OpCase("logical_or", ls.logical_or, torch.logical_or, [Sample([T((3, 4), ls.bool_), T((3, 4), ls.bool_)])],
           dtypes=(ls.float32,)),
    OpCase("logical_xor", ls.logical_xor, torch.logical_xor, [Sample([T((3, 4), ls.bool_), T((1, 4), ls.bool_)])],
           dtypes=(ls.float32,)),
    OpCase("where", ls.where, torch.where,
           [Sample([T((3, 4), ls.bool_), T((3, 4)), T((3, 4))], name="same"),
            Sample([T((3, 1), ls.bool_), T((1, 4)), T((3, 4))], name="bcast"),
            Sample([T(("s", 4), ls.bool_), T(("s", 4)), float("-inf")], dims=({"s": 2}, {"s": 3}), name="neg_inf"),
            Sample([T((5,), ls.bool_), T((5,), gen=lambda r, s, d: [float("inf"), float("nan"), 1, 2, 3]), 0.0],
                   name="special")], dtypes=F + LOW),
    OpCase("maximum", ls.maximum, torch.maximum,
           _binary()[:3] + [Sample([T((4,), gen=lambda r, s, d: [float("nan"), float("-inf"), 1, 2]),
                                    T((4,), gen=lambda r, s, d: [1, 3, float("inf"), -1])], name="special"),
                            Sample([T((3, 4), ls.int32), T((3, 4), ls.int32)], name="int")], dtypes=F + LOW),
    OpCase("minimum", ls.minimum, torch.minimum,
           _binary()[:3] + [Sample([T((4,), gen=lambda r, s, d: [float("nan"), float("-inf"), 1, 2]),
                                    T((4,), gen=lambda r, s, d: [1, 3, float("inf"), -1])], name="special"),
                            Sample([T((3, 4), ls.int8), T((3, 4), ls.int8)], name="int8"),
                            Sample([T((3, 4), ls.uint8), T((3, 4), ls.uint8)], name="uint8")]),
    OpCase("clamp", ls.clamp, torch.clamp, [Sample([T((3, 4))], {"min": -0.5, "max": 0.5}),
                                            Sample([T((3, 4))], {"min": 0.0}, name="min_only"),
                                            Sample([T((3, 4)), T((3, 4)), T((3, 4))], name="tensor_bounds")]),
    OpCase("to", lambda x: ls.to(x, ls.int32), lambda x: x.to(torch.int32),
           [Sample([T((3, 4), gen=lambda r, s, d: r.standard_normal(s) * 10)])], ref_f64=False),
    OpCase("to", lambda x: x.to(ls.bfloat16), lambda x: x.to(torch.bfloat16), [Sample([T((3, 4))])],
           dtypes=(ls.float32,), ref_f64=False, variant="bf16"),
    OpCase("to", lambda x: x.to(ls.float8_e4m3).to(ls.float32),
           lambda x: x.to(torch.float8_e4m3fn).to(torch.float32), [Sample([T((3, 4))])],
           dtypes=(ls.float32,), ref_f64=False, variant="fp8_e4m3", tol={"float32": (0, 0)}),
    OpCase("to", lambda x: x.to(ls.float8_e5m2).to(ls.float32),
           lambda x: x.to(torch.float8_e5m2).to(torch.float32), [Sample([T((3, 4))])],
           dtypes=(ls.float32,), ref_f64=False, variant="fp8_e5m2", tol={"float32": (0, 0)}),
    OpCase("to", lambda x: x.to(ls.bool_), lambda x: x.to(torch.bool), [Sample([T((3, 4), ls.int32)])],
           dtypes=(ls.float32,), variant="bool"),
    OpCase("masked_fill", lambda x, m: x.masked_fill(m, float("-inf")),
           lambda x, m: x.masked_fill(m, float("-inf")),
           [Sample([T((3, 4)), T((1, 4), ls.bool_)]),
            Sample([T(("s", 4)), T(("s", 4), ls.bool_)], dims=S, name="sym")]),
    OpCase("full_like", lambda x: ls.full_like(x, 2.5), lambda x: torch.full_like(x, 2.5),
           [Sample([T((3, 4))]), Sample([T(("s", 4))], dims=S, name="sym")]),
    OpCase("zeros_like", lambda x: ls.zeros_like(x, dtype=ls.int32), lambda x: torch.zeros_like(x, dtype=torch.int32),
           [Sample([T((3, 4))])]),
    OpCase("ones_like", ls.ones_like, torch.ones_like, [Sample([T((3, 4))])], dtypes=F + (ls.bool_,)),
]
