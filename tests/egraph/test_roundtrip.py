"""graph -> egglog -> extract -> graph round trips, checked on the reference runtime.

The round trip must be exact (same primitives, same views, same constants), so the rebuilt graph
gives bit-identical outputs.  With commutativity rules the e-graph holds many equivalent programs;
random candidates (fixed seeds) must all be valid and agree.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.egraph import Candidate, EgglogError, EGraphRunner
from tests.egraph.roundtrip import decode_graph, saturate_graph
from tests.hl.optable import all_cases, build_inputs, feed

COMMUTE = """
(ruleset commute)
(rewrite (Mul a va b vb) (Mul b vb a va) :ruleset commute :name "mul-commutes")
(rewrite (Add a va b vb) (Add b vb a va) :ruleset commute :name "add-commutes")
(run-schedule (saturate (run commute)))
"""


def _first_sample_graphs():
    seen = set()
    for case in all_cases():
        if case.op in seen:
            continue
        seen.add(case.op)
        yield case


CASES = list(_first_sample_graphs())


def _build(case):
    sample = case.samples[0]
    dtype = case.dtypes[0]
    g = ls.Graph()
    operands, feeders = build_inputs(case, sample, dtype, "sliced", g)
    outs = case.ls_fn(*operands, **sample.kwargs)
    for j, o in enumerate(outs if isinstance(outs, (tuple, list)) else [outs]):
        g.output(f"out{j}", o)
    dims = dict(sample.dims[-1])
    _, physical = feed(np.random.default_rng(0), sample, dtype, feeders, dims)
    return g, physical, dims


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_roundtrip_is_exact(case):
    g, inputs, dims = _build(case)
    _, enc, index, ser = saturate_graph(g)
    declared = [g.nodes[i].arg for i in g.inputs.values()]
    g2 = decode_graph(Candidate.default(index), ser, enc.constants, declared)
    assert g2.count_ops() == g.count_ops()
    want = g.compile(backend="reference")(inputs, dims=dims or None)
    got = g2.compile(backend="reference")(inputs, dims=dims or None)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


@pytest.mark.parametrize("op", ["matmul", "softmax", "layer_norm", "conv2d", "where", "cumsum"])
def test_random_candidates_agree(op):
    case = next(c for c in CASES if c.op == op)
    g, inputs, dims = _build(case)
    runner, enc, index, ser = saturate_graph(g, COMMUTE)
    assert runner.stats.rule_matches.get("mul-commutes", 0) > 0
    want = g.compile(backend="reference")(inputs, dims=dims or None)
    keys = set()
    for seed in range(20):
        cand = Candidate.random(index, random.Random(seed))
        keys.add(cand.key())
        got = decode_graph(cand, ser, enc.constants).compile(backend="reference")(inputs, dims=dims or None)
        for k in want:
            np.testing.assert_allclose(got[k].astype(np.float64), want[k].astype(np.float64), rtol=1e-6, atol=1e-6)
    assert len(keys) > 1, "the rules should have offered alternatives"


def test_same_seed_same_candidate():
    case = next(c for c in CASES if c.op == "softmax")
    g, _, _ = _build(case)
    _, _, index, _ = saturate_graph(g, COMMUTE)
    a = Candidate.random(index, random.Random(7)).key()
    b = Candidate.random(index, random.Random(7)).key()
    assert a == b


def test_cycle_repair():
    # x*1 = x makes the class of x contain a node that reaches itself; every candidate stays acyclic
    g = ls.Graph()
    x = g.input("x", (3,))
    g.output("y", (x * 1.0).exp())
    rules = """
    (ruleset unit)
    (rule ((= ?m (Mul ?a ?va (Constant ?i ?shape ?dt) ?vc)) (= ?va (Contig ?s)))
          ((union ?m (Mul ?m (Contig ?s) (Constant ?i ?shape ?dt) ?vc)))
          :ruleset unit :name "self-loop")
    (run-schedule (repeat 2 (run unit)))
    """
    _, enc, index, ser = saturate_graph(g, rules)
    xa = np.arange(3, dtype=np.float32)
    want = g.compile(backend="reference")(x=xa)["y"]
    for seed in range(10):
        cand = Candidate.random(index, random.Random(seed))
        got = decode_graph(cand, ser, enc.constants).compile(backend="reference")(x=xa)["y"]
        np.testing.assert_array_equal(got, want)


def test_runner_errors_are_lightspeed_errors():
    r = EGraphRunner()
    with pytest.raises(EgglogError, match="bad.egg"):
        r.run("(datatype E (N i64)", name="bad.egg")
    with pytest.raises(EgglogError, match="Check failed"):
        r.run("(datatype E (N i64))\n(check (= (N 1) (N 2)))", name="check.egg")


def test_long_programs_go_through_include():
    g = ls.Graph()
    x = g.input("x", ("s", 64))
    h = x
    for _ in range(40):
        h = (h * 2.0 + 1.0).softmax(-1)
    g.output("y", h)
    runner, enc, index, ser = saturate_graph(g)
    assert len(enc.program) > 20_000
    g2 = decode_graph(Candidate.default(index), ser, enc.constants)
    assert len(g2.nodes) == len(g.reachable())
