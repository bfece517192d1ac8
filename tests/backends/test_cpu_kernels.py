"""cpu kernels: fused element-wise regions, BLAS (single rows, the epilogue), Gather, and the arena.

Region code is checked against the primitives' reference semantics composed by hand; graph-level
tests check that the search's fused candidate really forms multi-op regions and agrees with the
reference runtime; the arena tests check reuse and that outputs never alias arena memory.
"""

from __future__ import annotations

import random

import ml_dtypes
import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends.cpu import CpuProgram
from lightspeed.backends.cpu.fused import compile_region
from lightspeed.egraph import Candidate
from lightspeed.egraph.llir import decode_program
from lightspeed.primitives import PRIMITIVES
from tests.backends.test_cpu import BACKEND, check_candidates, saturate_cpu

F32 = np.dtype(np.float32)


def _reference_tree(tree, leaves):
    """Evaluate a region body with the primitives' reference functions (the oracle)."""
    if tree[0] == "leaf":
        return leaves[tree[1]]
    if tree[0] == "Cast":
        return PRIMITIVES["Cast"].reference([_reference_tree(tree[2], leaves)], tree[1], {})
    args = [_reference_tree(c, leaves) for c in tree[1:]]
    return PRIMITIVES[tree[0]].reference(args, None, {})


@pytest.mark.parametrize("tree", [
    ("Exp2", ("Recip", ("Sqrt", ("Add", ("leaf", 0), ("leaf", 1))))),
    ("Mul", ("Add", ("leaf", 0), ("Mul", ("leaf", 1), ("leaf", 1))), ("Add", ("Sin", ("leaf", 0)), ("leaf", 1))),
    ("Mul", ("Cast", ls.float32, ("LessThan", ("leaf", 0), ("leaf", 1))), ("Log2", ("leaf", 1))),
    ("Mod", ("Mul", ("leaf", 0), ("leaf", 1)), ("leaf", 1)),
    ("Cast", ls.float64, ("Add", ("leaf", 0), ("leaf", 0))),
])
def test_region_code_matches_the_primitives(tree):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = np.abs(rng.standard_normal((1, 5))).astype(np.float32) + 0.5
    leaves = [a, np.broadcast_to(b, (3, 5))]  # a broadcast leaf, as a stride-0 view gives it
    with np.errstate(all="ignore"):
        want = _reference_tree(tree, leaves)
    region = compile_region(tree, [F32, F32], want.dtype)
    out = np.empty((3, 5), dtype=want.dtype)
    with np.errstate(all="ignore"):  # the runtime runs regions this way (log/sqrt of negatives give NaN)
        region.fn(*leaves, out, *[np.empty((3, 5), dtype=d) for d in region.scratch])
    np.testing.assert_array_equal(out, want)


def test_region_reuses_scratch_buffers():
    chain = ("leaf", 0)
    for op in ["Exp2", "Sqrt", "Recip", "Sin", "Log2"] * 4:
        chain = (op, chain)
    assert compile_region(chain, [F32], F32).scratch == ()  # a chain runs in the output buffer
    wide = ("Add", ("Mul", ("Exp2", ("leaf", 0)), ("Sin", ("leaf", 0))),
            ("Mul", ("Sqrt", ("leaf", 0)), ("Recip", ("leaf", 0))))
    assert len(compile_region(wide, [F32], F32).scratch) <= 2


def _block(g: ls.Graph, d=16):
    x, w1, w2 = g.input("x", ("s", d)), g.input("w1", (d, 2 * d)), g.input("w2", (2 * d, d))
    n = ls.rms_norm(x, (d,), g.input("n", (d,)), eps=1e-5)
    h = (n @ w1).silu() @ w2
    return x + h


def _inputs(g: ls.Graph, dims: dict[str, int], seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for name, nid in g.inputs.items():
        arg = g.nodes[nid].arg
        out[name] = rng.standard_normal(tuple(int(d.evaluate(dims)) for d in arg.shape)).astype(arg.dtype.np)
    return out


def test_fused_candidate_forms_regions_and_matches_reference():
    g = ls.Graph()
    y = _block(g)
    g.output("y", y.softmax(-1))
    prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=3, seed=0, dims={"s": 4}, progress=False))
    fused = next(c for c in prog.search_report.candidates if c.origin == "fused")
    assert fused.ops.get("Fused", 0) >= 3
    inputs = _inputs(g, {"s": 5})
    want = g.compile(backend="reference")(inputs)["y"]
    np.testing.assert_allclose(prog(inputs)["y"], want, rtol=1e-5, atol=1e-6)


def test_producer_region_can_be_read_from_its_buffer():
    """Regression: when a leaf was unioned with its producer's body, a producer region read by a
    consumer could only be recomputed inline; reading its buffer forced the producer back to an
    unfused primitive. With SInline the greedy candidate (no inlining) fuses every f32 op."""
    g = ls.Graph()
    x = g.input("x", ("s", 8))
    e = (x * 2.0).exp()
    g.output("y", e + e.sum(-1, keepdim=True))  # e is read by a region and by a reduction
    _, enc, index, ser = saturate_cpu(g)

    def prefer_leaf(cid, nodes):
        leaf = [n for n in nodes if n.op == "SLeaf"]
        backend = [n for n in nodes if n.op not in PRIMITIVES]
        return (leaf or backend or nodes)[0]

    lprog = decode_program(Candidate.build(index, prefer_leaf), ser, enc.constants, BACKEND.declarations())
    kinds = {op.op for op in lprog.ops}
    assert not kinds & {"Mul", "Add", "Exp2"}, str(lprog)
    inputs = _inputs(g, {"s": 3})
    np.testing.assert_allclose(CpuProgram(g, lprog)(inputs)["y"], g.compile(backend="reference")(inputs)["y"],
                               rtol=1e-5, atol=1e-6)


def test_prefix_reads_are_not_inlined():
    g = ls.Graph()
    x = g.input("x", (2, 4))
    e = x.exp()
    g.output("y", e.reshape(8)[:3].sqrt())  # reads the first 3 elements of e's buffer
    _, enc, index, ser = saturate_cpu(g)
    inputs = {"x": np.abs(np.random.default_rng(1).standard_normal((2, 4))).astype(np.float32)}
    want = g.compile(backend="reference")(inputs)["y"]
    for seed in range(10):
        lprog = decode_program(Candidate.random(index, random.Random(seed)), ser, enc.constants, BACKEND.declarations())
        np.testing.assert_allclose(CpuProgram(g, lprog)(inputs)["y"], want, rtol=1e-6)


def test_low_precision_is_not_fused():
    g = ls.Graph()
    x = g.input("x", (4, 8), ls.bfloat16)
    g.output("y", (x * 3.0).exp() + x)
    prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=3, progress=False))
    assert "Fused" not in prog.lprog.count()
    inputs = {"x": np.random.default_rng(2).standard_normal((4, 8)).astype(ml_dtypes.bfloat16)}
    np.testing.assert_array_equal(prog(inputs)["y"], g.compile(backend="reference")(inputs)["y"])


def test_bias_epilogue_matches_reference():
    g = ls.Graph()
    x, w, b = g.input("x", ("s", 16)), g.input("w", (16, 8)), g.input("b", (8,))
    g.output("y", x @ w + b)
    _, enc, index, ser = saturate_cpu(g)
    cand = Candidate.build(index, lambda cid, nodes: next((n for n in nodes if n.op == "MatmulAdd"), nodes[0]))
    lprog = decode_program(cand, ser, enc.constants, BACKEND.declarations())
    assert lprog.count().get("MatmulAdd") == 1
    inputs = _inputs(g, {"s": 5})
    np.testing.assert_allclose(CpuProgram(g, lprog)(inputs)["y"], g.compile(backend="reference")(inputs)["y"],
                               rtol=1e-5, atol=1e-6)


def test_arena_reuses_buffers_and_outputs_do_not_alias_it():
    g = ls.Graph()
    x = g.input("x", (64, 64))
    y = x
    for _ in range(12):
        y = (y * 0.5).sin()
    g.output("y", y)
    default = g.compile(backend="cpu", search=ls.SearchOptions(budget=1, progress=False, roll=False))  # unfused ops
    assert default.lprog.count().get("Mul", 0) == 12
    one = 64 * 64 * 4
    assert default.arena_bytes({}) <= 2 * one  # 24 intermediates, two live at a time
    a, b = (np.random.default_rng(k).standard_normal((64, 64)).astype(np.float32) for k in (3, 4))
    first = default(x=a)["y"]
    kept = first.copy()
    second = default(x=b)["y"]
    np.testing.assert_array_equal(first, kept)  # the second call did not write into the first result
    np.testing.assert_allclose(second, g.compile(backend="reference")(x=b)["y"], rtol=1e-6, atol=1e-6)


def test_non_row_major_inputs_are_read_correctly():
    """Regression: strided readers addressed a caller's Fortran-ordered array as if row-major."""
    g = ls.Graph()
    x, w = g.input("x", ("s", 6)), g.input("w", (6, 5))
    g.output("y", (x @ w).exp() * x.sum(-1, keepdim=True))
    prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=3, progress=False, roll=False))
    rng = np.random.default_rng(5)
    xa = rng.standard_normal((4, 6)).astype(np.float32)
    wa = np.asfortranarray(rng.standard_normal((6, 5)).astype(np.float32))
    xr = rng.standard_normal((4, 12)).astype(np.float32)[:, ::-2]  # negative-stride view
    for inputs in ({"x": xa, "w": wa}, {"x": xr, "w": wa}):
        want = g.compile(backend="reference")(inputs)["y"]
        np.testing.assert_allclose(prog(inputs)["y"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shapes", [((1, 64), (64, 32)), ((7, 64), (64, 1)), ((3, 1, 64), (3, 64, 16))],
                         ids=["one-row", "one-col", "batched-one-row"])
def test_single_row_products_reach_blas(shapes):
    """Regression: with m = 1 the broadcast view of b is row-major and was encoded Contig, which
    the strided BLAS patterns did not match, so decode steps (one token) ran broadcast products."""
    g = ls.Graph()
    a, b = g.input("a", shapes[0]), g.input("b", shapes[1])
    g.output("y", a @ b)
    prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=2, progress=False, roll=False))
    greedy = next(c for c in prog.search_report.candidates if c.origin == "greedy")
    assert "Matmul" in greedy.ops, greedy.ops
    inputs = _inputs(g, {})
    np.testing.assert_allclose(prog(inputs)["y"], g.compile(backend="reference")(inputs)["y"], rtol=1e-5, atol=1e-5)
    _, ops, _ = check_candidates(g, inputs)  # every candidate, the BLAS ones included, agrees
    assert "Matmul" in ops


@pytest.mark.parametrize("bad", [5, -1])
def test_gather_out_of_range_raises_like_the_reference(bad):
    g = ls.Graph()
    idx, data = g.input("i", (3,), ls.int64), g.input("d", (5,))
    g.output("y", g.add_node("Gather", [idx, data]))
    prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=1, progress=False, roll=False))
    d = np.arange(5, dtype=np.float32)
    np.testing.assert_array_equal(prog(i=np.array([4, 0, 2]), d=d)["y"], [4, 0, 2])
    with pytest.raises(IndexError, match=f"index {bad} out of range"):
        prog(i=np.array([0, bad, 1]), d=d)


def test_dims_are_run_time_arguments_and_buffers_are_planned_at_bounds():
    """Kernels are prepared once; the arena is planned at the dims' bounds, so calls at any p up
    to the reserved bound plan nothing and keep every buffer where it is."""
    g = ls.Graph()
    x, w, k = g.input("x", (1, 16)), g.input("w", (16, 16)), g.input("k", ("p", 16))
    g.output("y", ((x @ w).exp() @ k.transpose(0, 1)).softmax(-1))
    prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=3, progress=False, roll=False))
    ref = g.compile(backend="reference")
    prog.reserve(p=8)
    made = prog.preparations
    steps = None
    for p in (3, 4, 8, 1, 6, 4):
        inputs = _inputs(g, {"p": p}, seed=p)
        np.testing.assert_allclose(prog(inputs)["y"], ref(inputs)["y"], rtol=1e-5, atol=1e-6)
        steps = steps or prog._local.steps
        assert prog._local.steps is steps  # the same prepared steps and buffers every call
    assert prog.preparations == made + 1 and prog.bounds == {"p": 8}
    inputs = _inputs(g, {"p": 20}, seed=20)  # past the bound: planned again, at least twice as large
    np.testing.assert_allclose(prog(inputs)["y"], ref(inputs)["y"], rtol=1e-5, atol=1e-6)
    assert prog.preparations == made + 2 and prog.bounds == {"p": 20}


def test_masked_view_reader_matches_the_reference_on_every_call():
    """The box reader copies only the valid box into a zero array; two calls with different data
    (and an empty box) must each read exactly what an index gather reads."""
    from lightspeed.backends.numpy_views import _gather, make_reader

    g = ls.Graph()
    x = g.input("x", (3, "n"))
    views = [ls.pad(x, (2, 1, 0, 1)).st, ls.pad(x, (-1, 2)).st, ls.pad(x, (5, 0)).st]
    rng = np.random.default_rng(7)
    for st in views:
        reader = make_reader(st)
        for n in (4, 1):
            for _ in range(2):
                buf = rng.standard_normal(3 * n).astype(np.float32)
                shape = tuple(int(d.evaluate({"n": n})) for d in st.shape)
                np.testing.assert_array_equal(reader(buf, {"n": n}), _gather(buf, st, {"n": n}, shape))
