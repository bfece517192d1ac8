"""The fused Attention op: ``backends/codegen/attention.egg`` recognises the softmax chain of
``nn.softmax_attention`` (a decode step's attention over its cache, a paged step's over its page
tables) and ``kernels/attention.py`` runs it as one kernel.  References: the reference runtime on
the same graph and inputs (float32: 1e-5), and the rule's guards, checked on chains it must not
take."""

from __future__ import annotations

import numpy as np
import pytest

import lightspeed as ls
from lightspeed import hl
from lightspeed.backends import get_backend
from lightspeed.egraph.llir import decode_program
from lightspeed.models import from_hf_config
from lightspeed.nn import softmax_attention
from lightspeed.search import candidates
from tests.backends.harness import saturate
from tests.models.tiny import hf_model

NATIVE = get_backend("native")
needs_native = pytest.mark.skipif(not NATIVE.available(), reason="no C compiler")
# the kernel on each backend that has it (cuda: the GPU tests, scripts/gpu_check.sh)
KERNEL_BACKENDS = [pytest.param("native", marks=needs_native),
                   pytest.param("cuda", marks=pytest.mark.skipif(not get_backend("cuda").available(), reason="no GPU"))]


def _programs_with(backend, graph, op: str = "Attention"):
    """The LLIR programs of the search's fixed candidates (greedy, fused) that use ``op``."""
    _, enc, index, ser = saturate(backend, graph)
    out = []
    for _, cand in candidates(index, ls.SearchOptions(budget=3, seed=0)):
        lprog = decode_program(cand, ser, enc.constants, backend.declarations())
        if any(o.op == op for o in lprog.ops):
            out.append(lprog)
    return out


def to_numpy(x) -> np.ndarray:
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def _inputs(graph, dims: dict, positions: np.ndarray, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for name, nid in graph.inputs.items():
        arg = graph.nodes[nid].arg
        shape = tuple(int(d.evaluate(dims)) for d in arg.shape)
        if name == "positions":
            out[name] = positions.astype(arg.dtype.np)
        elif not arg.dtype.is_float:
            out[name] = rng.integers(0, 64, shape).astype(arg.dtype.np)
        else:
            scale = 1.0 if "cache" in name else 0.3
            out[name] = (rng.standard_normal(shape) * scale).astype(arg.dtype.np)
    return out


def _steps_match_the_reference(graph, prog, steps) -> None:
    """``prog`` (a decode graph's program) at each (rows s, cached rows p) of ``steps``: its logits
    and updated caches as the reference computes them (float32: 1e-5)."""
    ref = graph.compile(backend="reference")
    for s, p in steps:
        dims = {"s": s, "p": p, "M": 16}
        inputs = _inputs(graph, dims, p + np.arange(s))
        want = ref({k: v.copy() for k, v in inputs.items()}, dims=dims)
        got = prog({k: v.copy() for k, v in inputs.items()}, dims=dims)
        for k in want:
            w, g = np.asarray(want[k]), to_numpy(got[k])
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(w).max()), err_msg=f"{k} {s} {p}")


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("family", ["llama", "qwen3", "gemma3"])
def test_a_decode_step_with_the_fused_attention_matches_the_reference(family, backend):
    """Llama, Qwen3 (q/k norms) and Gemma 3 (sliding-window layers reading only their window's
    rows, the window crossed at p = 9): one decode row and a 4-row step, after 0 and 9 cached
    rows; logits and the updated caches as the reference computes them."""
    _, cfg, _ = hf_model(family)
    graph = from_hf_config(cfg).decode_graph()
    be = get_backend(backend)
    lprogs = _programs_with(be, graph)
    assert lprogs, "no candidate uses the fused attention"
    _steps_match_the_reference(graph, be.lower(graph, lprogs[-1]), ((1, 0), (1, 9), (4, 9)))


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
def test_qwen3_q_and_k_norms_run_as_row_norms(backend):
    """Qwen3's per-head q/k norms read a product's [s, heads * d] rows as [s, heads, d] (a view at
    another shape): still RMSNorm's chain over rows of d, so one RowNorm each (three region
    kernels before), and the step matches the reference."""
    _, cfg, _ = hf_model("qwen3")
    graph = from_hf_config(cfg).decode_graph()
    be = get_backend(backend)
    layers = cfg["num_hidden_layers"]
    lprogs = [lp for lp in _programs_with(be, graph, "RowNorm")
              if sum(o.op == "RowNorm" and o.args["n"] == cfg["head_dim"] for o in lp.ops) == 2 * layers]
    assert lprogs, "the q/k norms are not RowNorm ops in any candidate"
    _steps_match_the_reference(graph, be.lower(graph, lprogs[-1]), ((1, 0), (3, 5)))


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("ops", [("MatmulGLU", "RowNorm", "MatmulScatter"),
                                 ("NormMatmulGLU", "NormMatmul", "NormMatmulScatter")],
                         ids=["norm-kernel", "norm-in-products"])
def test_a_bfloat16_decode_step_with_the_fused_kernels(backend, ops):
    """The bfloat16 paths of the fused kernels (16-bit loads, 8-wide conversions in the c dialect's
    gated product): a Llama decode step against the reference (which rounds every step to
    bfloat16: the kernels keep float intermediates, so the tolerance is the dtype's); once with the
    norms as kernels of their own (the greedy candidate), once computed by the products that read
    them (the fused one: no RowNorm left)."""
    import ml_dtypes

    _, cfg, _ = hf_model("llama")
    graph = from_hf_config(cfg, dtype="bfloat16").decode_graph()
    be = get_backend(backend)
    lprogs = _programs_with(be, graph, ops[0])
    assert lprogs
    have = {o.op for o in lprogs[-1].ops}
    assert {"Attention", "ScatterRegion", *ops} <= have, have
    assert ops[0] != "NormMatmulGLU" or "RowNorm" not in have
    ref = graph.compile(backend="reference")
    prog = be.lower(graph, lprogs[-1])
    dims = {"s": 2, "p": 5, "M": 8}
    inputs = _inputs(graph, dims, 5 + np.arange(2))
    want = ref({k: v.copy() for k, v in inputs.items()}, dims=dims)["logits"].astype(np.float32)
    got = to_numpy(prog({k: v.copy() for k, v in inputs.items()}, dims=dims)["logits"]).astype(np.float32)
    assert got.dtype == np.float32 and inputs["cache.0.k"].dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(got, want, rtol=3e-2, atol=3e-2 * np.abs(want).max())


def _chain(g: ls.Graph, softcap=None, scale_by_max=-1.0, mask=True):
    """A standalone softmax_attention: q [s, 2, 3, 8] against 2 KV heads of L keys."""
    q = g.input("q", ("s", 2, 3, 8))
    kt = g.input("k", (2, 8, "L"))
    v = g.input("v", (2, "L", 8))
    m = g.input("mask", ("s", "L")) if mask else None
    if scale_by_max == -1.0:
        return softmax_attention(q, kt, v, m, softcap)
    scores = q @ kt + m.reshape(-1, 1, 1, m.shape[1])
    e = hl.exp2(scores + scores.amax(-1, keepdim=True) * scale_by_max)
    return ((e @ v) * hl.reciprocal(e.sum(-1, keepdim=True))).reshape(-1, 48)


def _chain_inputs(s=3, L=11, seed=1, blocked=()):
    rng = np.random.default_rng(seed)
    mask = np.zeros((s, L), np.float32)
    for i, j in blocked:
        mask[i, j] = np.finfo(np.float32).min
    return {"q": rng.standard_normal((s, 2, 3, 8)).astype(np.float32),
            "k": rng.standard_normal((2, 8, L)).astype(np.float32),
            "v": rng.standard_normal((2, L, 8)).astype(np.float32), "mask": mask}


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
def test_the_kernel_matches_the_chain_with_blocked_keys(backend):
    """Blocked keys first, in the middle and last (the online softmax starts from a blocked key and
    rescales when a larger score comes), at several key counts; a row whose keys are all blocked
    (the c kernel skips a key every row blocks only after the row saw an open one, so such a row
    averages its values as the chain does)."""
    g = ls.Graph()
    g.output("out", _chain(g))
    be = get_backend(backend)
    lprogs = _programs_with(be, g)
    assert lprogs
    prog = be.lower(g, lprogs[-1])
    ref = g.compile(backend="reference")
    causal = tuple((i, j) for i in range(3) for j in range(i))
    all_of_row_1 = tuple((1, j) for j in range(11))
    for L, blocked in ((1, ()), (11, ((0, 0), (1, 5), (2, 10))), (40, causal), (300, ((0, 299), (2, 0))),
                       (11, all_of_row_1 + ((0, 10), (2, 10)))):
        x = _chain_inputs(L=L, blocked=blocked)
        np.testing.assert_allclose(to_numpy(prog(x, dims={"s": 3, "L": L})["out"]),
                                   ref(x, dims={"s": 3, "L": L})["out"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("group,head", [(1, 64), (3, 64), (3, 40), (8, 80), (2, 8)])
def test_a_prompts_positions_share_their_key_loads(backend, group, head):
    """A prompt's rows attend to the same keys (the queries' position axis reads the keys with
    stride 0): native's kernel takes several positions an item, loads each key block once for
    all their rows and scores a block as a vector over its keys (the block transposed).  Against
    the reference at prompt lengths around the item's tile (1, 7, 8, 9, 17, 40 positions), head
    sizes that are not a multiple of 16 (40: padded to 8-element chunks; 80: values past the
    vectors' multiple), one and two rows an item's last pair, keys past a block's end, and masks:
    causal after a cached prefix, a sliding window, a row with every key blocked and a row whose
    first keys are blocked (it keeps keys until it sees an open one)."""
    g = ls.Graph()
    q = g.input("q", ("s", 2, group, head))
    kt = g.input("k", (2, head, "L"))
    v = g.input("v", (2, "L", head))
    m = g.input("mask", ("s", "L"))
    g.output("out", softmax_attention(q, kt, v, m))
    be = get_backend(backend)
    lprogs = _programs_with(be, g)
    assert lprogs
    prog = be.lower(g, lprogs[-1])
    ref = g.compile(backend="reference")
    low = np.finfo(np.float32).min
    rng = np.random.default_rng(group * 100 + head)
    for s, prefix, window in ((1, 0, None), (7, 5, None), (8, 0, None), (9, 3, 4), (17, 20, None), (40, 1, 13)):
        L = prefix + s
        pos = prefix + np.arange(s)[:, None]
        keys = np.arange(L)[None, :]
        blocked = keys > pos
        if window is not None:
            blocked |= keys <= pos - window
        mask = np.where(blocked, low, 0.0).astype(np.float32)
        if s > 2:
            mask[1] = low  # every key blocked: the row averages its values, as the chain does
            mask[2, :min(L, 3)] = low  # blocked first keys, then open ones
        x = {"q": (rng.standard_normal((s, 2, group, head)) * 0.5).astype(np.float32),
             "k": rng.standard_normal((2, head, L)).astype(np.float32),
             "v": rng.standard_normal((2, L, head)).astype(np.float32), "mask": mask}
        dims = {"s": s, "L": L}
        np.testing.assert_allclose(to_numpy(prog(x, dims=dims)["out"]), ref(x, dims=dims)["out"],
                                   rtol=1e-5, atol=1e-5, err_msg=f"s={s} L={L}")
    if backend == "native":  # the tiled, transposed form where an item holds enough rows
        src = next(spec.source for spec in prog.kernels if "attention" in spec.name)
        assert ("ls_scores_t16x2" in src) == (24 // group * group >= 8), src[:200]


def test_the_rule_takes_only_the_softmax_chain():
    """A chain whose row maximum is scaled by 2 instead of negated is not a softmax: no
    Attention; softcapped scores (tanh between the product and the softmax) are not matched either
    (the kernel has no soft-capping yet); the chain itself is."""
    for kwargs, want in (({}, True), ({"scale_by_max": 2.0}, False), ({"softcap": 30.0}, False)):
        g = ls.Graph()
        g.output("out", _chain(g, **kwargs))
        assert bool(_programs_with(NATIVE, g)) == want, kwargs


def test_backends_without_the_kernel_get_no_attention_op():
    """The cpu backend states no fused_kernel_dtype: the chain stays as it is."""
    g = ls.Graph()
    g.output("out", _chain(g))
    cpu = get_backend("cpu")
    assert "Attention" not in cpu.declarations()
    assert not _programs_with(cpu, g)


def test_each_layer_gets_its_own_attention():
    """One Attention node per layer, reading that layer's queries and cache (a single rule with
    the whole chain as its body paired every layer's output with every layer's scores in egglog
    13.2: the staged rules must not)."""
    _, cfg, _ = hf_model("gemma3")
    _, _, _, ser = saturate(NATIVE, from_hf_config(cfg).decode_graph())
    nodes = [n for n in ser.nodes.values() if n["op"] == "Attention"]
    assert len(nodes) == cfg["num_hidden_layers"]
    assert len({n["eclass"] for n in nodes}) == len(nodes)


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
def test_a_paged_step_reads_keys_through_the_page_tables(backend):
    """A paged step (rows of two sequences at their own positions, each with its page table) whose
    attention computes every key and value where it reads them -- the page table looked up in the
    kernel, no gathered copy -- gives the reference's logits and pools."""
    _, cfg, _ = hf_model("llama")
    graph = from_hf_config(cfg).paged_graph()
    be = get_backend(backend)
    lprogs = [lp for lp in _programs_with(be, graph)
              if all(o.args["k_body"][0] == "gather" for o in lp.ops if o.op == "Attention")]
    assert lprogs, "no candidate reads the keys through the page tables"
    ref = graph.compile(backend="reference")
    prog = be.lower(graph, lprogs[-1])
    page = int(graph.nodes[graph.inputs["pool.0.k"]].arg.shape[1].value)
    dims = {"s": 3, "NP": 2, "N": 3, "r": 3}
    inputs = _inputs(graph, dims, np.array([5, 6, 3]))
    inputs["pages"] = np.array([[0, 1], [0, 1], [2, 0]], np.int64)  # rows 0, 1: sequence A; row 2: B
    inputs["slots"] = np.array([5, 6, 2 * page + 3], np.int64)
    if backend == "native":  # the page looked up once per position's row (Operand.inline_run)
        assert any("_ls_kzb" in spec.source for spec in prog.kernels if "attention" in spec.name)
    want = ref({k: v.copy() for k, v in inputs.items()}, dims=dims)
    got = prog({k: v.copy() for k, v in inputs.items()}, dims=dims)
    for k in want:
        w, g = np.asarray(want[k]), to_numpy(got[k])
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(w).max()), err_msg=k)


def test_run_slopes_of_index_arithmetic():
    """How an index expression of the flat index z moves inside a run of z that keeps every
    divisor's quotient (the check a kernel makes before reading a run at once): the page-table
    arithmetic of a paged step rises by one; anything it cannot vouch for is None."""
    from lightspeed.backends.codegen.kernels.attention import below, run_slope, tree_slope
    from lightspeed.shape import ShapeTracker
    from lightspeed.symbolic import const, sym

    z, s = sym("z"), sym("s")
    cases = [(z, 1, []), (z // 8, 0, [8]), (z % 8, 1, [8]), (3 * (z % 8) + 5, 3, [8]),
             (z // (8 * s), 0, [8 * s]), (s * (z // 8), 0, [8]), ((z + 1) // 8, None, None),
             ((z % 8) * (z // 8), None, None), (s * z, None, None), (s + 2, 0, [])]
    for e, slope, divisors in cases:
        found: list = []
        assert run_slope(e, found) == slope, e
        if divisors is not None:
            assert found == divisors, e
    # pages[z // 64] * 64 + z % 64: rises by one inside a page row
    view = ShapeTracker.contiguous((4,)).reshape((4, 1)).expand((4, 64))  # element z reads pages[z // 64]
    tree = ("Add", ("iota", z % 64, ls.int64), ("Mul", ("leaf", 0), ("iota", const(64), ls.int64)))
    found = []
    assert tree_slope(tree, [view], found) == 1
    assert tree_slope(("Mul", ("leaf", 0), ("iota", z % 64, ls.int64)), [view], []) is None  # no constant factor
    # a quotient by the whole flat range is 0 (z < n): nothing to divide at run time
    n = 256 * s
    assert below(("iota", 4 * (z // n) + z % 64, ls.int64), n) == ("iota", z % 64, ls.int64)


@needs_native
@pytest.mark.parametrize("own_values_index", [False, True], ids=["one-index", "two-indexes"])
def test_keys_gathered_through_an_index_buffer_are_copied_as_runs(own_values_index):
    """Keys and values gathered through a materialised index (a rolled paged step's: one index per
    element, shared by the layers) are read a position's row at a time when its indexes are one
    run inside the pool (checked, then vector loads), element by element otherwise (a scrambled
    row here): the reference's values either way.  Values gathered through the keys' own index
    buffer reuse the keys' check (`_ls_krun`); through an index of their own (scrambled at
    another row) they check their own runs."""
    s, n_kv, g, d, L, slots = 3, 2, 2, 16, 40, 128
    graph = ls.Graph()
    q = graph.input("q", (s, n_kv, g, d))
    pool_k, pool_v = graph.input("pk", (slots, n_kv * d)), graph.input("pv", (slots, n_kv * d))
    index = graph.input("index", (s, L, n_kv * d), ls.int64)
    index_v = graph.input("index_v", (s, L, n_kv * d), ls.int64) if own_values_index else index
    mask = graph.input("mask", (s, L))

    def rows(pool, ix):
        return hl.gather(pool.reshape(-1), 0, ix.reshape(-1)).reshape(s, L, n_kv, d)

    graph.output("y", softmax_attention(q, rows(pool_k, index).permute(0, 2, 3, 1),
                                        rows(pool_v, index_v).permute(0, 2, 1, 3), mask))
    progs = [lp for lp in _programs_with(NATIVE, graph)
             if all(o.args["k_body"][0] == "gather" for o in lp.ops if o.op == "Attention")]
    assert progs, "no candidate gathers the keys in the kernel"
    prog = NATIVE.lower(graph, progs[-1])
    assert any("_ls_one" in spec.source for spec in prog.kernels)
    assert any("_ls_krun" in spec.source for spec in prog.kernels) == (not own_values_index)
    rng = np.random.default_rng(4)
    table = rng.permutation(slots)[:s * L].reshape(s, L)
    idx = table[:, :, None] * (n_kv * d) + np.arange(n_kv * d)
    idx_v = idx.copy()
    idx[2, 7] = rng.permutation(idx[2, 7])  # not a run: read element by element
    idx_v[1, 3] = rng.permutation(idx_v[1, 3])
    inputs = {"q": rng.standard_normal((s, n_kv, g, d)).astype(np.float32),
              "pk": rng.standard_normal((slots, n_kv * d)).astype(np.float32),
              "pv": rng.standard_normal((slots, n_kv * d)).astype(np.float32),
              "index": idx.astype(np.int64),
              "mask": np.where(rng.random((s, L)) < 0.2, -1e30, 0.0).astype(np.float32)}
    if own_values_index:
        inputs["index_v"] = idx_v.astype(np.int64)
    want = graph.compile(backend="reference")(inputs)["y"]
    np.testing.assert_allclose(prog(inputs)["y"], want, rtol=1e-5, atol=1e-5)
