"""Loop rolling: detection of repeated layers, the rolled programs against the reference runtime,
and the rolled compile of the pipeline (lightspeed.pipeline.compile_rolled) on the cpu backend."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends.cpu import CpuProgram
from lightspeed.backends.rolled import BlockLoopProgram as RolledProgram
from lightspeed.program import BucketedProgram
from lightspeed.rolling import find_repeated_blocks, split_graph

_spec = importlib.util.spec_from_file_location(
    "compile_time", Path(__file__).resolve().parent.parent / "benchmarks" / "compile_time.py")
compile_time = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compile_time)

SMALL = dict(hidden=32, heads=4, kv_heads=2, ffn=48)  # the benchmark's layer, small enough to run fast
OPTS = ls.SearchOptions(budget=2, seed=0, dims={"s": 3}, repeats=1)


def stack(layers: int, **kw) -> ls.Graph:
    return compile_time.build(layers, **{**SMALL, **kw})


def stack_weights_first(layers: int, hidden=32, heads=4, kv_heads=2, ffn=48, eps=None, mask=False) -> ls.Graph:
    """The benchmark's layer with every weight declared before the loop (so no Input node sits
    between layers), an optional per-layer eps and an optional causal mask (built from iota in
    layer 0 and shared by hash-consing)."""
    g = ls.Graph()
    s, dh = "s", hidden // heads
    h = g.input("x", (s, hidden))
    w = [{k: g.input(f"{k}{i}", shp) for k, shp in
          [("wq", (hidden, hidden)), ("wk", (hidden, kv_heads * dh)), ("wv", (hidden, kv_heads * dh)),
           ("wo", (hidden, hidden)), ("w1", (hidden, ffn)), ("w2", (ffn, hidden)), ("w3", (hidden, ffn)),
           ("n1", (hidden,)), ("n2", (hidden,))]} for i in range(layers)]
    for i in range(layers):
        e = eps[i] if eps else 1e-5
        n = ls.rms_norm(h, (hidden,), w[i]["n1"], eps=e)
        q = (n @ w[i]["wq"]).reshape(s, heads, dh).transpose(0, 1)
        k = (n @ w[i]["wk"]).reshape(s, kv_heads, dh).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        v = (n @ w[i]["wv"]).reshape(s, kv_heads, dh).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        scores = (q @ k.transpose(-1, -2)) * dh ** -0.5
        if mask:
            scores = scores + ls.triu(ls.full_like(scores, float("-inf")), 1)
        h = h + (scores.softmax(-1) @ v).transpose(0, 1).reshape(s, hidden) @ w[i]["wo"]
        n = ls.rms_norm(h, (hidden,), w[i]["n2"], eps=e)
        h = h + ((n @ w[i]["w1"]).silu() * (n @ w[i]["w3"])) @ w[i]["w2"]
    g.output("y", h)
    return g


def mlp_stack(layers: int, width: int = 16, skip_bias: int | None = None) -> ls.Graph:
    """Linear + bias + relu layers; layer ``skip_bias`` has no bias (one op fewer)."""
    g = ls.Graph()
    h = g.input("x", ("b", width))
    for i in range(layers):
        h = h @ g.input(f"w{i}", (width, width))
        if i != skip_bias:
            h = h + g.input(f"b{i}", (width,))
        h = h.relu()
    g.output("y", h)
    return g


def kv_decoder(layers: int, hidden=32, heads=4, kv_heads=2) -> ls.Graph:
    """Attention over a KV cache (symbolic "past" and "s"), with each layer's new K/V rows as
    outputs inside the loop and each layer's hidden state as an output after it."""
    g = ls.Graph()
    s, dh, rep = "s", hidden // heads, heads // kv_heads
    h = g.input("x", (s, hidden))
    hs = []
    for i in range(layers):
        n = ls.rms_norm(h, (hidden,), g.input(f"n{i}", (hidden,)), eps=1e-5)
        q = (n @ g.input(f"wq{i}", (hidden, hidden))).reshape(s, heads, dh).transpose(0, 1)
        k = (n @ g.input(f"wk{i}", (hidden, kv_heads * dh))).reshape(s, kv_heads, dh).transpose(0, 1)
        v = (n @ g.input(f"wv{i}", (hidden, kv_heads * dh))).reshape(s, kv_heads, dh).transpose(0, 1)
        g.output(f"new.{i}.k", k)
        g.output(f"new.{i}.v", v)
        k_all = ls.concat([g.input(f"cache.{i}.k", (kv_heads, "past", dh)), k], 1).repeat_interleave(rep, 0)
        v_all = ls.concat([g.input(f"cache.{i}.v", (kv_heads, "past", dh)), v], 1).repeat_interleave(rep, 0)
        att = ((q @ k_all.transpose(-1, -2)) * dh ** -0.5).softmax(-1)
        h = h + (att @ v_all).transpose(0, 1).reshape(s, hidden) @ g.input(f"wo{i}", (hidden, hidden))
        hs.append(h)
    for i, x in enumerate(hs):
        g.output(f"h.{i}", x)
    g.output("y", hs[-1].sum(-1))
    return g


def inputs_for(g: ls.Graph, dims: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, nid in g.inputs.items():
        arg = g.nodes[nid].arg
        shape = tuple(int(d.evaluate(dims)) for d in arg.shape)
        out[name] = (rng.standard_normal(shape) * (0.3 if name.startswith("w") else 1.0)).astype(np.float32)
    return out


def assert_matches_reference(g: ls.Graph, prog: ls.Program, dims: dict[str, int], seed: int = 0) -> None:
    inputs = inputs_for(g, dims, seed)
    want = g.compile(backend="reference")(inputs)
    got = prog(inputs)
    assert set(got) == set(want)
    for k in want:
        # float32 sums in another order (BLAS): entries near zero are held to the output's scale
        scale = max(1.0, float(np.abs(want[k]).max(initial=0.0)))
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-5 * scale, err_msg=k)


def block_layers(g: ls.Graph, plan) -> list[set[str]]:
    """Per block, the names of the weight inputs it reads (tells which layer it is)."""
    return [{g.nodes[b].arg.name for b in bnd if g.nodes[b].op.name == "Input"} for bnd in plan.boundary]


# ---------------------------------------------------------------------------------- detection
@pytest.mark.parametrize("layers", [1, 2, 4])
def test_detects_the_benchmark_stack(layers):
    plan = find_repeated_blocks(stack(layers))
    if layers == 1:
        assert plan is None
        return
    assert plan.count == layers and plan.period == 52
    assert not plan.prelude and len(plan.epilogue) == 1  # the Output node
    assert plan.exported == (51,)  # the residual stream, read by the next layer / the output
    g = stack(layers)
    first = [g.nodes[b[0]] for b in plan.blocks]
    assert all(n.op.name == "Mul" for n in first)  # each block starts at the layer's first op (rms_norm's x*x)
    # the boundary inputs: the hidden state, then the layer's own weights in order of use
    weights = ("n1", "wq", "wk", "wv", "wo", "n2", "w1", "w3", "w2")
    assert block_layers(g, plan) == [{f"{k}{i}" for k in weights} | ({"x"} if i == 0 else set())
                                     for i in range(layers)]


def test_weights_declared_before_the_loop_give_the_same_template():
    in_loop, first = stack(3), stack_weights_first(3)
    p1, p2 = find_repeated_blocks(in_loop), find_repeated_blocks(first)
    assert (p2.count, p2.period) == (p1.count, p1.period) == (3, 52)
    t1 = next(p for p in split_graph(in_loop, p1) if p.role == "template").graph
    t2 = next(p for p in split_graph(first, p2) if p.role == "template").graph
    assert str(t1) == str(t2)  # names are structural: same layer, same template (and cache entry)
    assert [p.role for p in split_graph(first, p2)] == ["template", "epilogue"]


def test_shared_mask_built_in_layer_zero_does_not_exclude_it():
    g = stack_weights_first(4, mask=True)
    plan = find_repeated_blocks(g)
    assert plan.count == 4 and not plan.prelude
    iotas = [n.id for n in g.nodes if n.op.name == "Iota"]
    assert iotas and set(iotas) <= plan.shared  # rebuilt in the template, not passed in


def test_mlp_stack():
    plan = find_repeated_blocks(mlp_stack(6))
    assert plan.count == 6 and plan.period == 5  # Mul, SumReduce, Add (bias), Add (pad), MaxReduce
    g = mlp_stack(6)
    assert block_layers(g, plan)[3] == {"w3", "b3"}


def test_no_repetition():
    g = ls.Graph()
    x, w = g.input("x", ("s", 8)), g.input("w", (8, 8))
    g.output("y", ((x @ w).softmax(-1) @ w).relu().sum(-1))
    assert find_repeated_blocks(g) is None
    assert find_repeated_blocks(mlp_stack(1)) is None


def test_a_layer_that_differs_is_not_rolled():
    g = mlp_stack(7, skip_bias=3)  # layers 0-2 and 4-6 alike; layer 3 has no bias
    plan = find_repeated_blocks(g)
    assert plan.count == 3
    rolled = set().union(*block_layers(g, plan))
    assert "w3" not in rolled and {"w0", "w1", "w2"} <= rolled
    g = stack_weights_first(5, eps=[1e-5, 1e-5, 1e-6, 1e-5, 1e-5])  # layer 2 has another eps
    plan = find_repeated_blocks(g)
    assert plan.count == 2 and "wq2" not in set().union(*block_layers(g, plan))


def test_detection_on_thirty_layers():
    g = stack(30)
    plan = find_repeated_blocks(g)
    assert (plan.count, plan.period) == (30, 52)


# ---------------------------------------------------------------------------------- programs
@pytest.mark.parametrize("layers", [2, 4])
def test_rolled_stack_matches_reference(layers):
    g = stack(layers)
    prog = g.compile(backend="cpu", search=OPTS)
    assert isinstance(prog, RolledProgram) and prog.plan.count == layers
    assert prog.backend_name == "cpu"
    assert_matches_reference(g, prog, {"s": 5})
    assert_matches_reference(g, prog, {"s": 1}, seed=1)


def test_rolled_weights_first_with_mask_matches_reference():
    g = stack_weights_first(3, mask=True)
    prog = g.compile(backend="cpu", search=OPTS)
    assert isinstance(prog, RolledProgram) and prog.plan.count == 3
    assert_matches_reference(g, prog, {"s": 4})


def test_kv_cache_outputs_and_symbolic_dims():
    g = kv_decoder(3)
    plan = find_repeated_blocks(g)
    assert plan.count == 3
    prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=2, seed=0, dims={"s": 1, "past": 4}, repeats=1))
    assert isinstance(prog, RolledProgram)
    roles = {p.role: (p, c) for p, c in prog.parts}
    assert len(roles["template"][0].finals) == 2  # new.{i}.k / new.{i}.v: outputs of the template, renamed per block
    # each layer's hidden state is exported by its block and re-viewed as an output after the loop
    assert set(roles["epilogue"][0].finals.values()) == {"h.0", "h.1", "h.2", "y"}
    for dims in ({"s": 1, "past": 5}, {"s": 3, "past": 0}, {"s": 2, "past": 7}):
        assert_matches_reference(g, prog, dims)


def test_mlp_stack_with_an_odd_layer_rolls_both_runs():
    g = mlp_stack(7, skip_bias=3)
    prog = g.compile(backend="cpu", search=OPTS)
    assert isinstance(prog, RolledProgram) and prog.plan.count == 3
    (_, epilogue), = [(p, c) for p, c in prog.parts if p.role == "epilogue"]
    assert isinstance(epilogue, RolledProgram) and epilogue.plan.count == 3  # layers 4-6, after the odd one
    assert_matches_reference(g, prog, {"b": 6})


def lm(layers: int, width: int = 16, vocab: int = 11, lazy_table: bool = False) -> ls.Graph:
    """Embedding lookup (prelude compute), layers that all read one position table computed from
    an input, and a final norm + head (epilogue compute).  ``lazy_table``: the table is written
    inside the loop, so hash-consing puts it in layer 0 only."""
    g = ls.Graph()
    ids, pos = g.input("ids", ("s",), ls.int64), g.input("pos", ("s", width))
    h = g.input("emb", (vocab, width))[ids]
    table = None if lazy_table else (pos * 0.5).sin()
    for i in range(layers):
        a = (h @ g.input(f"w{i}", (width, width))).tanh()
        t = (pos * 0.5).sin() if lazy_table else table  # lazily: built after layer 0's first ops
        h = h + a * t
    g.output("logits", ls.rms_norm(h, (width,), eps=1e-6) @ g.input("head", (width, vocab)))
    return g


def test_prelude_and_epilogue_with_compute():
    g = lm(4)
    plan = find_repeated_blocks(g)
    assert plan.count == 4 and plan.prelude and plan.epilogue
    sin = next(n.id for n in g.nodes if n.op.name == "Sin")
    assert all(sin in bnd for bnd in plan.boundary)  # the one position table, a boundary input of every block
    prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=2, seed=0, dims={"s": 3}, repeats=1))
    assert [p.role for p, _ in prog.parts] == ["prelude", "template", "epilogue"]
    inputs = inputs_for(g, {"s": 5})
    inputs["ids"] = np.array([0, 3, 10, 3, 7])
    want = g.compile(backend="reference")(inputs)["logits"]
    np.testing.assert_allclose(prog(inputs)["logits"], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_a_value_first_built_in_layer_zero_moves_layer_zero_out():
    g = lm(4, lazy_table=True)  # the table depends on an input, so it is not shared: it sits in layer 0
    plan = find_repeated_blocks(g)
    assert plan.count == 3 and "w0" not in set().union(*block_layers(g, plan))
    prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=2, seed=0, dims={"s": 3}, repeats=1))
    inputs = inputs_for(g, {"s": 4})
    inputs["ids"] = np.array([1, 2, 9, 0])
    want = g.compile(backend="reference")(inputs)["logits"]
    np.testing.assert_allclose(prog(inputs)["logits"], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_hook_report_and_opt_out():
    g = stack(2)
    prog = g.compile(backend="cpu", search=OPTS)
    assert isinstance(prog, RolledProgram)
    text = prog.report()
    assert "rolled: 2 blocks of 52 nodes" in text and "template x2" in text and "[template]" in text
    assert "search report" in text and "[epilogue]" in text  # the template's own report follows
    rep = prog.search_report
    assert {"roll", "encode", "saturate", "serialize", "extract", "profile"} <= set(rep.phases) and rep.lower > 0
    plain = g.compile(backend="cpu", search=ls.SearchOptions(budget=2, seed=0, dims={"s": 3}, roll=False))
    assert isinstance(plain, CpuProgram)
    with pytest.raises(ls.InputError, match="missing input"):
        prog(x=np.zeros((2, 32), np.float32))


def test_saturated_enodes_do_not_grow_with_depth():
    # the timing claim (saturation sub-linear in depth) checked through what saturation works on
    counts = {n: stack(n).compile(backend="cpu", search=OPTS).search_report.egraph_nodes for n in (2, 8)}
    assert counts[2] == counts[8] > 0
    plain = stack(2).compile(backend="cpu", search=ls.SearchOptions(budget=1, dims={"s": 3}, roll=False))
    assert plain.search_report.egraph_nodes > counts[2]


def test_template_is_cached_across_depths(tmp_path, monkeypatch):
    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    first = stack(2).compile(backend="cpu", search=OPTS).search_report
    assert not first.egraph_cached and not first.decision_cached
    deeper = stack(5).compile(backend="cpu", search=OPTS).search_report  # same layer, more of them
    assert deeper.egraph_cached and deeper.decision_cached


def test_dim_buckets_compose_with_rolling():
    g = stack(3)
    opts = ls.SearchOptions(budget=2, seed=0, repeats=1, dim_buckets={"s": [(1, 1), (2, 64)]})
    prog = g.compile(backend="cpu", search=opts)
    assert isinstance(prog, RolledProgram)
    (_, template), = [(p, c) for p, c in prog.parts if p.role == "template"]
    assert isinstance(template, BucketedProgram) and len(template.buckets) == 2
    for s in (1, 5):
        assert_matches_reference(g, prog, {"s": s})
    with pytest.raises(ls.InputError, match="outside every dim bucket"):
        prog(inputs_for(g, {"s": 65}))
    with pytest.raises(ls.LightspeedError, match="does not use"):
        g.compile(backend="cpu", search=ls.SearchOptions(budget=1, dim_buckets={"t": [(1, 2)]}))


@pytest.mark.slow
def test_benchmark_sized_thirty_layers_match_reference():
    g = compile_time.build(30)  # SmolLM2-shaped: hidden 576, 9/3 heads, FFN 1536
    prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=2, seed=0, dims={"s": 1}))
    assert isinstance(prog, RolledProgram) and prog.plan.count == 30
    inputs = inputs_for(g, {"s": 2})
    for k in inputs:
        if k.startswith("w"):
            inputs[k] *= 0.1  # keep 30 residual layers of random weights in a sane range
    want = g.compile(backend="reference")(inputs)["y"]
    np.testing.assert_allclose(prog(inputs)["y"], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_a_block_input_read_in_two_parts_is_cast_in_each():
    """A tied table stored as blocks (the embedding gather in the prelude, the head in the
    epilogue): each part reads the block input itself and casts it there, so its float32 values
    never cross a part boundary; the rolled program matches the reference."""
    from lightspeed.weights.quant import random_quant

    width, vocab, layers = 32, 40, 3
    g = ls.Graph()
    ids = g.input("ids", ("s",), ls.int64)
    table = g.input("emb", (vocab, width), ls.q8_0).to(ls.float32)
    h = table[ids]
    for i in range(layers):
        h = h + (h @ g.input(f"w{i}", (width, width))).tanh()
    g.output("logits", h @ table.transpose(0, 1))
    plan = find_repeated_blocks(g)
    parts = split_graph(g, plan)
    assert [p.role for p in parts] == ["prelude", "template", "epilogue"]
    for part in (parts[0], parts[2]):
        stored = [part.graph.nodes[n].dtype for n in part.graph.inputs.values()]
        assert ls.q8_0 in stored, part.role
        assert all(d != ls.float32 or name != "emb" for name, d in zip(part.graph.inputs, stored))
    # the prelude exports the gathered rows only, not the table's float32 values
    assert [g.nodes[n].op.name for n in parts[0].exports.values()] != ["Cast"] and len(parts[0].exports) == 1
    emb = random_quant("q8_0", (vocab, width), 4)
    rng = np.random.default_rng(0)
    inputs = {"ids": np.array([0, 5, 39, 5]), "emb": emb,
              **{f"w{i}": rng.standard_normal((width, width)).astype(np.float32) * 0.2 for i in range(layers)}}
    want = g.compile(backend="reference")(inputs)["logits"]
    prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=2, seed=0, dims={"s": 4}, repeats=1))
    np.testing.assert_allclose(prog(inputs)["logits"], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_wrappers_share_every_array_hook():
    """A bucketed program hands out its inner program's arrays: on cuda ``rows`` is a view of a
    device array and ``zeros`` a device allocation, which the base hooks (numpy slicing) cannot
    make (the sixteenth session's GPU call failed there, on the bucketed prefill)."""
    class Marked(CpuProgram):
        def zeros(self, shape, dtype):
            return ("zeros", shape)

        def rows(self, array, start, count):
            return ("rows", start, count)

    g = stack(1)
    inner = g.compile(backend="cpu", search=OPTS)
    assert isinstance(inner, CpuProgram)
    inner.__class__ = Marked
    wrapper = BucketedProgram(g, [({"s": (1, 64)}, inner)])
    assert wrapper.zeros((2, 3), np.float32) == ("zeros", (2, 3))
    assert wrapper.rows(np.zeros((4, 2)), 1, 2) == ("rows", 1, 2)


def test_index_arithmetic_over_inputs_is_rebuilt_in_each_layer():
    """Integer arithmetic over graph inputs (a paged step's page-table lookups) is shared: each
    part that reads it rebuilds it (its kernels compute the index where they read it), the
    template takes the input itself, and the rolled program matches the reference. It used to
    stay in the prelude as one materialised index tensor per element that every layer read."""
    g = ls.Graph()
    rows, width = "s", 16
    h = g.input("x", (rows, width))
    pages = g.input("pages", (rows,), dtype=ls.int32)
    for i in range(3):
        table = g.input(f"t{i}", (8, width))
        picked = ls.embedding(pages * 2 + 1, table)  # the gather index: integer math over an input
        h = (h + picked) @ g.input(f"w{i}", (width, width))
    g.output("y", h)
    plan = find_repeated_blocks(g)
    assert plan is not None and plan.count == 3
    index_math = {nid for nid in plan.shared if g.nodes[nid].dtype.is_int}
    assert index_math and not index_math & set(plan.prelude)
    template = next(p for p in split_graph(g, plan) if p.role == "template")
    assert g.inputs["pages"] in template.inputs.values()  # read directly, not through a boundary slot
    prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=2, seed=0, dims={"s": 3}, repeats=1))
    assert isinstance(prog, RolledProgram) and prog.plan.count == 3
    inputs = inputs_for(g, {"s": 3})
    inputs["pages"] = np.array([0, 3, 1], np.int32)
    want = g.compile(backend="reference")(inputs)
    np.testing.assert_allclose(prog(inputs)["y"], want["y"], rtol=1e-5, atol=1e-5)
