"""Generic Matmul (egraph/rules/linalg.egg) on the cpu backend: any batch rank, broadcast batches,
either operand order, row-major one-row/one-column operands and the add epilogue reach BLAS
(np.matmul on strided views), and every candidate agrees with the reference runtime."""

from __future__ import annotations

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends.cpu import CpuProgram
from lightspeed.egraph import Candidate
from lightspeed.egraph.llir import decode_program
from tests.backends.harness import random_inputs
from tests.backends.test_cpu import BACKEND, check_candidates, saturate_cpu


def _compile(g: ls.Graph, dims: dict | None = None):
    return g.compile(backend="cpu", search=ls.SearchOptions(budget=3, seed=0, progress=False, roll=False, dims=dims))


def _greedy_ops(prog) -> dict[str, int]:
    greedy = next(c for c in prog.search_report.candidates if c.origin == "greedy")
    assert greedy.seconds is not None, greedy.error
    return greedy.ops


def _matches_reference(g: ls.Graph, prog, dims: dict | None = None, seed: int = 0):
    inputs = random_inputs(g, dims or {}, seed)
    want = g.compile(backend="reference")(inputs, dims=dims)
    got = prog(inputs, dims=dims)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5)
    return inputs


def _matmul_graph(sa, sb, op=lambda a, b: a @ b, dtype=ls.float32) -> ls.Graph:
    g = ls.Graph()
    g.output("y", op(g.input("a", sa, dtype), g.input("b", sb, dtype)))
    return g


CASES = {
    "4d": ((2, 4, 8, 16), (2, 4, 16, 8), lambda a, b: a @ b),
    "broadcast-batch": ((3, 1, 8, 16), (4, 16, 8), lambda a, b: a @ b),
    "4d-transposed-operands": ((2, 4, 16, 8), (2, 4, 8, 16), lambda a, b: a.transpose(-1, -2) @ b.transpose(-1, -2)),
    "5d-broadcast": ((2, 1, 3, 4, 6), (3, 6, 5), lambda a, b: a @ b),
    "batch-permuted": ((4, 2, 8, 16), (2, 16, 8), lambda a, b: a.transpose(0, 1) @ b.unsqueeze(1)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_batched_products_reach_blas_in_the_greedy_candidate(name):
    sa, sb, op = CASES[name]
    g = _matmul_graph(sa, sb, op)
    prog = _compile(g)
    ops = _greedy_ops(prog)
    assert ops.get("Matmul") == 1 and "SumReduce" not in ops and "Mul" not in ops, ops
    inputs = _matches_reference(g, prog)
    matches, cand_ops, n = check_candidates(g, inputs)  # every random candidate agrees with the reference
    assert matches.get("matmul", 0) == 1 and cand_ops.get("Matmul") and n > 1


@pytest.mark.parametrize("shapes", [((1, 576), (1536, 576)), ((3, 1, 64), (3, 32, 64)), ((2, 3, 1, 16), (2, 3, 8, 16))],
                         ids=["decode-x-wT", "batched-one-row", "4d-one-row"])
def test_one_row_products_with_transposed_weights_reach_blas(shapes):
    # decode: x @ w.T with one row; w's broadcast view is row-major (Contig) when m = 1
    g = _matmul_graph(*shapes, op=lambda a, b: a @ b.transpose(-1, -2))
    prog = _compile(g)
    assert _greedy_ops(prog).get("Matmul") == 1  # (which candidate wins is a timing matter)
    inputs = _matches_reference(g, prog)
    _, ops, _ = check_candidates(g, inputs)
    assert ops.get("Matmul")


def test_one_column_product_reaches_blas():
    g = _matmul_graph((2, 7, 64), (2, 64, 1))
    prog = _compile(g)
    assert "Matmul" in _greedy_ops(prog)
    check_candidates(g, _matches_reference(g, prog))


def test_commuted_mul_operands_are_recognised():
    # the Mul reads b's broadcast view first: y[i, j] = sum_l b[l, j] * a[i, l]
    g = ls.Graph()
    a, b = g.input("a", (5, 7)), g.input("b", (7, 3))
    prod = b.t().unsqueeze(0).expand(5, 3, 7) * a.unsqueeze(1).expand(5, 3, 7)
    g.output("y", prod.sum(-1))
    matches, ops, _ = check_candidates(g, random_inputs(g, {}))
    assert matches.get("matmul-commuted") == 1 and not matches.get("matmul") and ops.get("Matmul")
    assert "Matmul" in _greedy_ops(_compile(g))


def _blas_program(g: ls.Graph) -> CpuProgram:
    """The candidate that takes Matmul/MatmulAdd wherever the rules offer it."""
    _, enc, index, ser = saturate_cpu(g)
    cand = Candidate.build(index, lambda cid, nodes: next((n for n in nodes if n.op in ("MatmulAdd", "Matmul")),
                                                           nodes[0]))
    return CpuProgram(g, decode_program(cand, ser, enc.constants, BACKEND.declarations()))


def test_symbolic_batch_and_rows_serve_every_dim_value():
    # one prepared program, dims read at run time: the strides and the batch are expressions of b, s
    g = _matmul_graph(("b", 2, "s", 16), ("b", 2, 16, 8), lambda a, b: a @ b + a[..., :8])
    prog = _blas_program(g)
    assert prog.lprog.count().get("MatmulAdd") == 1 and not prog.lprog.count().get("SumReduce")
    for dims in ({"b": 2, "s": 5}, {"b": 3, "s": 1}, {"b": 1, "s": 9}):
        _matches_reference(g, prog, dims, seed=dims["s"])
    check_candidates(g, random_inputs(g, {"b": 2, "s": 3}), {"b": 2, "s": 3})


@pytest.mark.parametrize("side", ["lhs", "rhs"])
def test_batched_bias_epilogue(side):
    g = ls.Graph()
    a, b, bias = g.input("a", (2, 3, 4, 6)), g.input("b", (3, 6, 5)), g.input("bias", (5,))
    g.output("y", a @ b + bias if side == "lhs" else bias + a @ b)
    matches, ops, _ = check_candidates(g, random_inputs(g, {}))
    rule = "matmul-add-epilogue" if side == "lhs" else "matmul-add-epilogue-rhs"
    assert matches.get(rule) == 1 and ops.get("MatmulAdd"), (matches, ops)


def test_float64_reaches_blas():
    g = _matmul_graph((2, 3, 4), (2, 4, 5), dtype=ls.float64)
    prog = _compile(g)
    assert "Matmul" in _greedy_ops(prog)
    inputs = random_inputs(g, {})
    np.testing.assert_allclose(prog(inputs)["y"], g.compile(backend="reference")(inputs)["y"], rtol=1e-12)


@pytest.mark.parametrize("dtype", [ls.bfloat16, ls.float16, ls.int32])
def test_other_dtypes_are_not_matmuls(dtype):
    g = _matmul_graph((2, 4, 8, 16), (2, 4, 16, 8), dtype=dtype)
    runner, _, _, _ = saturate_cpu(g)
    m = runner.stats.rule_matches
    assert not m.get("matmul", 0) and not m.get("matmul-commuted", 0), m


def test_sum_over_a_non_k_axis_is_not_a_matmul():
    g = ls.Graph()
    a, b = g.input("a", (2, 4, 8, 16)), g.input("b", (2, 4, 16, 8))
    prod = a.unsqueeze(-2) * b.transpose(-1, -2).unsqueeze(-3)  # [2, 4, 8, 8, 16], the matmul's product
    g.output("y", prod.sum(1))
    g.output("z", prod.sum(-2))
    matches, ops, _ = check_candidates(g, random_inputs(g, {}), n=8)
    assert not matches.get("matmul", 0) and not matches.get("matmul-commuted", 0) and not ops.get("Matmul")
