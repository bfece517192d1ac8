"""The conversions under the translation: type promotion (against torch.result_type itself),
symbolic sizes (sympy -> Expr) and numpy results -> torch tensors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy
import torch
from torch.utils._sympy.functions import FloorDiv, ModularIndexing, PythonMod

import lightspeed as ls
from lightspeed.torch.convert import _sympy_to_expr, ls_dtype, to_torch, torch_result_type

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.int8,
          torch.uint8, torch.bool]


def _operand(g: ls.Graph, kind: str, d: torch.dtype):
    return g.input(f"x{len(g.inputs)}", (2,) if kind == "dim" else (), ls_dtype(d))


@pytest.mark.parametrize("kinds", [("dim", "dim"), ("dim", "zero"), ("zero", "zero")])
def test_promotion_matches_torch_result_type(kinds):
    g = ls.Graph()
    for a, b in itertools.product(DTYPES, DTYPES):
        ta = torch.zeros((2,) if kinds[0] == "dim" else (), dtype=a)
        tb = torch.zeros((2,) if kinds[1] == "dim" else (), dtype=b)
        want = ls_dtype(torch.result_type(ta, tb))
        assert torch_result_type(_operand(g, kinds[0], a), _operand(g, kinds[1], b)) == want, (a, b, kinds)


@pytest.mark.parametrize("scalar", [True, 3, 2.5])
def test_promotion_with_python_scalars(scalar):
    g = ls.Graph()
    for d in DTYPES:
        want = ls_dtype(torch.result_type(torch.zeros(2, dtype=d), scalar))
        assert torch_result_type(_operand(g, "dim", d), scalar) == want, (d, scalar)


def test_sympy_sizes_become_expressions():
    s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
    s = ls.sym
    assert _sympy_to_expr(s0 * 2 + 1) == s("s0") * 2 + 1
    assert _sympy_to_expr(s0 * s1) == s("s0") * s("s1")
    assert _sympy_to_expr(FloorDiv(s0, 2)) == s("s0") // 2
    assert _sympy_to_expr(ModularIndexing(s0, 2, 3)) == (s("s0") // 2) % 3
    assert _sympy_to_expr(PythonMod(s0, 4)) == s("s0") % 4
    with pytest.raises(ls.UnsupportedError, match="data-dependent"):
        _sympy_to_expr(sympy.Symbol("u0", integer=True))


def test_results_to_torch():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = to_torch(a)
    assert t.data_ptr() == a.ctypes.data  # shared, not copied
    b = to_torch(np.broadcast_to(np.float32(1), (2, 3)))  # read-only broadcast view: copied, writable
    b.add_(1)
    assert torch.equal(b, torch.full((2, 3), 2.0))
    bf = to_torch(np.array([1.5, -2.0], dtype=ls.bfloat16.np))
    assert bf.dtype == torch.bfloat16 and bf.tolist() == [1.5, -2.0]
