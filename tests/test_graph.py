"""The lazy graph: README example, text/DOT dumps, hash-consing, symbols, dims, count_ops, build speed."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
import torch

import lightspeed as ls


def _readme_graph():
    g = ls.Graph()
    x = g.input("x", ("batch", 16), ls.float32)
    w = g.input("w", (16, 8))
    y = (x @ w).relu().softmax(-1)
    g.output("y", y)
    return g


def _torch_readme(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    xt, wt = torch.from_numpy(x).double(), torch.from_numpy(w).double()
    return torch.softmax(torch.relu(xt @ wt), -1).numpy()


# ---------------------------------------------------------------------------- README example
def test_readme_example_end_to_end_vs_torch():
    g = _readme_graph()
    prog = g.compile(backend="reference")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 16)).astype(np.float32)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    out = prog(x=x, w=w)
    assert list(out) == ["y"]
    assert out["y"].shape == (3, 8) and out["y"].dtype == np.float32
    np.testing.assert_allclose(out["y"], _torch_readme(x, w), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["y"].sum(-1), np.ones(3), rtol=1e-6)
    # the dict-and-dims calling convention gives the same result
    out2 = prog({"x": x, "w": w}, dims={"batch": 3})
    np.testing.assert_array_equal(out2["y"], out["y"])


def test_symbolic_dim_bound_to_several_values_in_one_program():
    prog = _readme_graph().compile(backend="reference")
    rng = np.random.default_rng(1)
    w = rng.standard_normal((16, 8)).astype(np.float32)
    for batch in (1, 5, 2, 0, 7):
        x = rng.standard_normal((batch, 16)).astype(np.float32)
        out = prog(x=x, w=w)["y"]
        assert out.shape == (batch, 8)
        np.testing.assert_allclose(out, _torch_readme(x, w), rtol=1e-5, atol=1e-6)


def test_two_symbols_and_a_derived_dim():
    g = ls.Graph()
    a = g.input("a", ("m", "k"))
    b = g.input("b", ("k", "n"))
    c = g.input("c", ("m", "n+1"))  # a derived dim: checked, not bound
    g.output("o", (a @ b) + c[:, 1:])
    prog = g.compile(backend="reference")
    rng = np.random.default_rng(2)
    for m, k, n in [(2, 3, 4), (5, 1, 2), (1, 6, 1)]:
        av = rng.standard_normal((m, k)).astype(np.float32)
        bv = rng.standard_normal((k, n)).astype(np.float32)
        cv = rng.standard_normal((m, n + 1)).astype(np.float32)
        np.testing.assert_allclose(prog(a=av, b=bv, c=cv)["o"], av @ bv + cv[:, 1:], rtol=1e-5, atol=1e-6)


def test_explicit_dims():
    g = ls.Graph()
    x = g.input("x", ("n",), ls.int64)
    g.output("o", x.reshape("n", 1) * g.iota("z", ("m",), ls.int64).reshape(1, "m"))  # m is only in dims
    prog = g.compile(backend="reference")
    xv = np.array([1, 2, 3], np.int64)
    np.testing.assert_array_equal(prog({"x": xv}, dims={"m": 4})["o"], np.outer(xv, np.arange(4)))
    np.testing.assert_array_equal(prog(x=xv, dims={"m": 2, "n": 3})["o"], np.outer(xv, np.arange(2)))
    with pytest.raises(ls.InputError, match=r"'n'.*already bound to 5"):
        prog(x=xv, dims={"m": 2, "n": 5})  # explicit n contradicts the shape
    with pytest.raises(ls.InputError, match=r"\['m'\].*dims="):
        prog(x=xv)


# ---------------------------------------------------------------------------- hash-consing
def test_hash_consing_same_expression_same_node():
    g = ls.Graph()
    x = g.input("x", ("batch", 16))
    w = g.input("w", (16, 8))
    y1 = (x @ w).relu().softmax(-1)
    n = len(g.nodes)
    y2 = (x @ w).relu().softmax(-1)
    assert y1.node == y2.node and y1.st == y2.st
    assert len(g.nodes) == n  # nothing new was appended
    s1, s2 = g.add_node("Sqrt", [x]), g.add_node("Sqrt", [x])
    assert s1.node == s2.node
    assert g.constant(2.0).node == g.constant(2.0).node
    # different dtype, argument, view or operand order -> a different node
    assert g.constant(2.0).node != g.constant(2, ls.int64).node
    assert g.add_node("SumReduce", [x], 0).node != g.add_node("SumReduce", [x], 1).node
    assert g.add_node("Sqrt", [x.permute(1, 0)]).node != s1.node
    a, b = g.input("a", (3,)), g.input("b", (3,))
    assert g.add_node("Add", [a, b]).node != g.add_node("Add", [b, a]).node
    ids = [nd.id for nd in g.nodes]
    assert ids == list(range(len(g.nodes)))  # ids are positions: the list is a topological order
    for nd in g.nodes:
        assert all(src < nd.id for src, _ in nd.inputs)


def test_array_constants_are_hash_consed_by_content():
    g = ls.Graph()
    c1 = g.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    c2 = g.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    c3 = g.constant(np.arange(6, dtype=np.float32).reshape(3, 2))
    c4 = g.constant(np.arange(6, dtype=np.float32).reshape(2, 3) + 1)
    assert c1.node == c2.node
    assert len({c1.node, c3.node, c4.node}) == 3


# ---------------------------------------------------------------------------- text dump and DOT
def _view_graph():
    g = ls.Graph()
    x = g.input("x", ("batch", 16))
    w = g.input("w", (16, 8), ls.bfloat16)
    g.input("unused", (2,))
    g.output("t", x.permute(1, 0).sqrt())
    g.output("p", ls.pad(x, (1, 2)).flip(0).exp2())
    g.output("m", (x.to(ls.bfloat16) @ w).sum(-1))
    return g


def test_text_dump_shows_ops_shapes_dtypes_and_views():
    g = _view_graph()
    text = str(g)
    lines = text.splitlines()
    assert len(lines) == len(g.reachable())
    assert "Input('x')() : float32[batch, 16]" in text
    assert "Input('w')() : bfloat16[16, 8]" in text
    assert "unused" not in text  # only what the outputs need
    assert re.search(r"= Sqrt\(%0\[shape=\(16, batch\) strides=\(1, 16\)\]\) : float32\[16, batch\]", text), text
    # pad + flip: a negative stride, an offset and a mask on the read of %0
    pad_line = next(ln for ln in lines if "Exp2" in ln)
    assert "strides=(-16, 1)" in pad_line and "offset=" in pad_line and "mask=" in pad_line, pad_line
    assert pad_line.endswith(": float32[batch, 19]")
    assert re.search(r"Cast\(bfloat16\)\(%0\) : bfloat16\[batch, 16\]", text), text
    assert re.search(r"SumReduce\(\d\)", text)
    for name in ("t", "p", "m"):
        assert f"Output('{name}')" in text
    for ln in lines:
        assert re.fullmatch(r"%\d+ = \w+(\(.*?\))?\(.*\) : \w+\[.*\]", ln), ln


def test_text_dump_without_outputs_lists_every_node():
    g = ls.Graph()
    x = g.input("x", (2,), ls.int8)
    g.add_node("Mul", [x, x])
    assert str(g).splitlines() == ["%0 = Input('x')() : int8[2]", "%1 = Mul(%0, %0) : int8[2]"]


def test_dot_export_is_plausible():
    g = _view_graph()
    dot = g.to_dot()
    assert dot.startswith("digraph") and dot.rstrip().endswith("}")
    assert dot.count("{") == dot.count("}") == 1
    node_lines = re.findall(r"^\s*n(\d+) \[label=\"(.*)\"(.*)\];$", dot, re.M)
    reach = g.reachable()
    assert sorted(int(i) for i, _, _ in node_lines) == reach  # one line per reachable node
    defined = {int(i) for i, _, _ in node_lines}
    edges = re.findall(r"^\s*n(\d+) -> n(\d+)( \[label=\"[^\"]*\", fontsize=8\])?;$", dot, re.M)
    expect_edges = sum(len(g.nodes[i].inputs) for i in reach)
    assert len(edges) == expect_edges
    for a, b, _ in edges:
        assert int(a) in defined and int(b) in defined and int(a) < int(b)
    # every line is a statement or the header/footer; quotes are balanced on each line
    for ln in dot.splitlines()[1:-1]:
        assert ln.rstrip().endswith(";"), ln
        assert (ln.count('"') - ln.count('\\"')) % 2 == 0, ln
    labels = " ".join(lbl for _, lbl, _ in node_lines)
    for needle in ("Input('x')", "float32[batch, 16]", "bfloat16[16, 8]", "Sqrt", "Exp2", "Cast(bfloat16)",
                   "SumReduce", "Output('t')"):
        assert needle in labels, needle
    assert "strides=(1, 16)" in dot and "mask=" in dot  # views appear on the edges
    assert "unused" not in dot


# ---------------------------------------------------------------------------- queries
def test_symbols():
    g = ls.Graph()
    assert g.symbols() == set()
    a = g.input("a", ("batch", "seq+1", 4))
    assert g.symbols() == {"batch", "seq"}
    g.iota("z % heads", (3,))
    assert g.symbols() == {"batch", "seq", "heads"}  # z, the index variable, is not a dim
    a[:, :, :2].sqrt()
    g.input("b", (2, 3), ls.int32)
    assert g.symbols() == {"batch", "seq", "heads"}
    g.output("o", a.sum(-1))
    assert g.compile(backend="reference").symbols == {"batch", "seq", "heads"}


def test_count_ops_and_reachable():
    g = ls.Graph()
    x = g.input("x", (4,))
    y = g.input("y", (4,))
    dead = g.add_node("Sin", [x])  # not reachable from the output
    s = g.add_node("Add", [x, y])
    r = g.add_node("Sqrt", [s])
    g.output("o", g.add_node("Mul", [r, s]))
    assert g.count_ops() == {"Input": 2, "Add": 1, "Sqrt": 1, "Mul": 1, "Output": 1}
    assert dead.node not in g.reachable()
    assert g.reachable([dead.node]) == [x.node, dead.node]
    assert g.count_ops([r.node]) == {"Input": 2, "Add": 1, "Sqrt": 1}
    out = g.compile(backend="reference")(x=np.full(4, 7.0, np.float32), y=np.full(4, 9.0, np.float32))["o"]
    np.testing.assert_array_equal(out, np.full(4, 64.0))  # sqrt(16) * 16


def test_count_ops_of_the_readme_graph():
    counts = _readme_graph().count_ops()
    assert counts["Input"] == 2 and counts["Output"] == 1
    assert counts["Mul"] >= 1 and counts["SumReduce"] >= 2 and counts["MaxReduce"] >= 1
    assert set(counts) <= set(ls.primitives.PRIMITIVES)


# ---------------------------------------------------------------------------- scale
HIDDEN, FFN = 64, 128


def _transformerish(layers: int):
    g = ls.Graph()
    h = g.input("h", ("batch", HIDDEN))
    weights = []
    for i in range(layers):
        nw = g.input(f"norm{i}", (HIDDEN,))
        w1 = g.input(f"up{i}", (HIDDEN, FFN))
        w2 = g.input(f"down{i}", (FFN, HIDDEN))
        weights.append((nw, w1, w2))
        x = ls.rms_norm(h, HIDDEN, weight=nw, eps=1e-6)
        h = h + (x @ w1).silu() @ w2
    g.output("h", h)
    return g


def test_thirty_layer_graph_builds_quickly():
    t0 = time.perf_counter()
    g = _transformerish(30)
    prog = g.compile(backend="reference")
    elapsed = time.perf_counter() - t0
    assert elapsed < 10.0, f"building 30 layers took {elapsed:.1f}s"
    one = _transformerish(1).count_ops()
    thirty = g.count_ops()
    assert thirty["Input"] == 1 + 3 * 30
    for op in ("SumReduce", "Mul", "Add"):
        assert thirty[op] == 30 * one[op], op  # every layer adds the same primitives
    assert len(prog.order) == len(g.reachable())
    assert g.symbols() == {"batch"}


def test_few_transformerish_layers_vs_torch():
    layers = 3
    g = _transformerish(layers)
    rng = np.random.default_rng(3)
    feeds = {"h": rng.standard_normal((2, HIDDEN)).astype(np.float32)}
    for i in range(layers):
        feeds[f"norm{i}"] = rng.uniform(0.5, 1.5, HIDDEN).astype(np.float32)
        feeds[f"up{i}"] = (rng.standard_normal((HIDDEN, FFN)) / 8).astype(np.float32)
        feeds[f"down{i}"] = (rng.standard_normal((FFN, HIDDEN)) / 11).astype(np.float32)
    out = g.compile(backend="reference")(**feeds)["h"]
    t = {k: torch.from_numpy(v).double() for k, v in feeds.items()}
    h = t["h"]
    for i in range(layers):
        x = torch.nn.functional.rms_norm(h, (HIDDEN,), t[f"norm{i}"], eps=1e-6)
        h = h + torch.nn.functional.silu(x @ t[f"up{i}"]) @ t[f"down{i}"]
    np.testing.assert_allclose(out, h.numpy(), rtol=1e-4, atol=1e-5)
