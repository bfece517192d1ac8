"""The fusion language on the cpu: regions with constants, iotas and reductions.

Softmax and RMSNorm must be expressible as a few regions (the most-fused candidate is checked op by
op), every random candidate of the graphs here must agree with the reference (NaN propagation of
max, empty reductions and keepdim reads included), and the generated parts of the rule files must
match the table they are generated from (egraph/decl.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.egraph import Candidate
from lightspeed.egraph.decl import SCALAR_TABLE
from lightspeed.egraph.llir import decode_program
from tests.backends.test_cpu import BACKEND, check_candidates, saturate_cpu


def test_generated_rule_sections_are_current():
    root = Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, str(root / "scripts" / "gen_fusion_rules.py"), "--check"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{r.stdout}{r.stderr}\nrun: python scripts/gen_fusion_rules.py"
    names = {o.name for o in SCALAR_TABLE}
    assert {"SConst", "SIota", "SSumReduce", "SMaxReduce", "SInline", "SExp2", "SLessThan"} <= names


_PREFER = {"SInline": 0, "SConst": 1, "SIota": 1, "Fused": 2}


def _most_fused(g: ls.Graph):
    """The candidate that computes everything it can in place: every leaf inlines its producer (or
    becomes a constant / iota), every op is a region where one exists."""
    runner, enc, index, ser = saturate_cpu(g)

    def pick(cid, nodes):
        return min(nodes, key=lambda n: (_PREFER.get(n.op, 9), n.id))
    lprog = decode_program(Candidate.build(index, pick), ser, enc.constants, BACKEND.declarations())
    return runner, lprog


def _kernels(lprog) -> dict[str, int]:
    return {k: v for k, v in lprog.count().items() if k not in ("Input", "Constant", "Output")}


def _check_most_fused(g: ls.Graph, inputs: dict, dims: dict):
    from lightspeed.backends.cpu import CpuProgram

    _, lprog = _most_fused(g)
    want = g.compile(backend="reference")(inputs, dims=dims)
    got = CpuProgram(g, lprog)(inputs, dims=dims)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=str(lprog))
    return lprog


def _x(shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def test_softmax_is_three_regions():
    g = ls.Graph()
    g.output("y", g.input("x", ("s", 64)).softmax(-1))
    primitive_only = g.compile(backend="cpu", search=ls.SearchOptions(budget=1)).search_report.program
    assert sum(_kernels(primitive_only).values()) >= 6
    lprog = _check_most_fused(g, {"x": _x((5, 64))}, {"s": 5})
    # max(x); sum(exp2((x - max) * log2e)); exp2(...) * recip(sum): the 8 primitive kernels in 3 regions
    assert _kernels(lprog) == {"Fused": 3}, str(lprog)
    bodies = [op.args["body"][0] for op in lprog.ops if op.op == "Fused"]
    assert bodies[:2] == ["MaxReduce", "SumReduce"]
    check_candidates(g, {"x": _x((5, 64))}, {"s": 5})


def test_rms_norm_is_two_regions():
    g = ls.Graph()
    g.output("y", ls.rms_norm(g.input("x", ("s", 64)), 64, g.input("w", (64,))))
    inputs = {"x": _x((3, 64)), "w": _x((64,), 1)}
    lprog = _check_most_fused(g, inputs, {"s": 3})
    # recip(sqrt(sum(x*x) * (1/64) + eps)) at [s, 1] (the keepdim read of the sum inlined); x * r * w
    assert _kernels(lprog) == {"Fused": 2}, str(lprog)
    check_candidates(g, inputs, {"s": 3})


def test_searched_softmax_and_rms_norm_report_regions():
    for build in (lambda g: g.input("x", ("s", 64)).softmax(-1),
                  lambda g: ls.rms_norm(g.input("x", ("s", 64)), 64, g.input("w", (64,)))):
        g = ls.Graph()
        g.output("y", build(g))
        prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=8, seed=0))
        rep = prog.search_report
        assert "fuse-sum-reduce-contig" in prog.report()
        # the fused candidate (#2: regions grown over single-reader producers) has no bare reduction left
        fused = next(c for c in rep.candidates if c.origin == "fused")
        assert "SumReduce" not in fused.ops and "MaxReduce" not in fused.ops and fused.ops.get("Fused", 0) <= 4


def test_max_propagates_nan_and_keeps_reference_semantics():
    g = ls.Graph()
    x, y = g.input("x", ("s", 8)), g.input("y", ("s", 8))
    g.output("m", ls.maximum(x, y).exp())
    g.output("r", (x * 2).relu().sum(-1))
    g.output("c", ls.clamp(x, -0.5, 0.5) + y.amax(0, keepdim=True))
    xa, ya = _x((4, 8)), _x((4, 8), 1)
    xa[0, 0], ya[1, 1], xa[2, 2] = np.nan, np.nan, -0.0
    ya[2, 2] = -1.0
    check_candidates(g, {"x": xa, "y": ya}, {"s": 4})
    lprog = _check_most_fused(g, {"x": xa, "y": ya}, {"s": 4})
    assert "MaxReduce" not in _kernels(lprog)


@pytest.mark.parametrize("s", [0, 1, 3])
def test_reductions_over_strided_and_empty_axes(s):
    g = ls.Graph()
    x = g.input("x", ("s", 6))
    g.output("a", (x * x).sum(0))              # over the symbolic axis: empty when s = 0
    g.output("b", x.transpose(0, 1).amax(-1))  # a max over a transposed (strided) read
    g.output("c", x.log_softmax(-1))
    inputs = {"x": _x((s, 6))}
    check_candidates(g, inputs, {"s": s})
    _check_most_fused(g, inputs, {"s": s})


def test_iota_and_constants_in_regions():
    g = ls.Graph()
    x = g.input("x", ("s", 4))
    pos = ls.arange(g, "s").float().reshape("s", 1)   # an iota cast to float, rope-style
    g.output("y", (x * pos + 0.5).sin() * 3.0)
    inputs = {"x": _x((5, 4))}
    check_candidates(g, inputs, {"s": 5})
    lprog = _check_most_fused(g, inputs, {"s": 5})
    trees = [op.args["body"] for op in lprog.ops if op.op == "Fused"]
    text = repr(trees)
    assert "'const'" in text


def test_float64_regions():
    g = ls.Graph()
    x = g.input("x", ("s", 16), ls.float64)
    g.output("y", ls.rms_norm(x.softmax(-1), 16))
    inputs = {"x": np.random.default_rng(2).standard_normal((3, 16))}
    check_candidates(g, inputs, {"s": 3})
    _check_most_fused(g, inputs, {"s": 3})
