"""The search: reproducible decisions across fresh processes (through the on-disk cache), cache
robustness, the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lightspeed as ls
from lightspeed import cache

SCRIPT = r"""
import json, sys
import pytest

import lightspeed as ls
g = ls.Graph()
x, w1, w2 = g.input("x", ("s", 32)), g.input("w1", (32, 48)), g.input("w2", (48, 32))
g.output("y", ((x @ w1).silu() @ w2).softmax(-1))
prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=5, seed=3))
rep = prog.search_report
print(json.dumps({"program": rep.program_text, "winner": rep.winner,
                  "egraph_cached": rep.egraph_cached, "decision_cached": rep.decision_cached}))
"""


def _run(cache: Path) -> dict:
    env = dict(os.environ, LIGHTSPEED_CACHE_DIR=str(cache))
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_same_graph_and_seed_give_the_same_program_in_a_fresh_process(tmp_path):
    first, second = _run(tmp_path), _run(tmp_path)
    assert not first["egraph_cached"] and not first["decision_cached"]
    assert second["egraph_cached"] and second["decision_cached"]
    assert second["program"] == first["program"] and second["winner"] == first["winner"]
    assert any(f.name.startswith("egraph-") for f in tmp_path.iterdir())


def test_corrupt_cache_entries_are_recomputed(tmp_path, monkeypatch):
    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    g = ls.Graph()
    x, w = g.input("x", ("s", 8)), g.input("w", (8, 4))
    g.output("y", x @ w)
    opts = ls.SearchOptions(budget=2, seed=1)
    g.compile(backend="cpu", search=opts)
    for f in tmp_path.glob("*.json"):
        f.write_text("{not json")
    prog = g.compile(backend="cpu", search=opts)
    assert not prog.search_report.egraph_cached and not prog.search_report.decision_cached
    xa, wa = np.ones((3, 8), np.float32), np.ones((8, 4), np.float32)
    np.testing.assert_array_equal(prog(x=xa, w=wa)["y"], np.full((3, 4), 8, np.float32))
    entry = next(tmp_path.glob("egraph-*.json"))
    cache.check_egraph(cache._decode(entry.read_bytes(), entry.stem))  # rewritten whole


def test_cache_can_be_disabled(tmp_path, monkeypatch):
    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LIGHTSPEED_CACHE", "0")
    g = ls.Graph()
    g.output("y", g.input("x", (4,)).exp())
    g.compile(backend="cpu", search=ls.SearchOptions(budget=1))
    assert not list(tmp_path.iterdir())


def test_log_search_prints_the_report(tmp_path):
    env = dict(os.environ, LIGHTSPEED_CACHE_DIR=str(tmp_path), LIGHTSPEED_LOG="search,egraph")
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=True)
    assert "search report" in r.stderr and "linalg" in r.stderr and "e-nodes" in r.stderr


def test_report_names_the_rules_and_draws_the_program(tmp_path, monkeypatch):
    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    # big enough that BLAS beats the broadcast product by ~100x: the winner is not a timing coin flip
    g = ls.Graph()
    x, w = g.input("x", ("s", 256)), g.input("w", (256, 256))
    g.output("y", (x @ w).softmax(-1))
    prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=2, dims={"s": 256}, repeats=1))
    produced = prog.search_report.produced_by
    assert produced["Matmul"] == ["matmul", "matmul-commuted"]
    assert produced["MatmulAdd"] == ["matmul-add-epilogue", "matmul-add-epilogue-rhs"]
    assert "fuse-exp2" in produced["Fused"] and "matmul" not in produced["Fused"]
    text = prog.report()
    assert "Matmul x1 <- matmul, matmul-commuted" in text
    dot = prog.search_report.to_dot()
    assert dot.startswith("digraph") and dot.rstrip().endswith("}") and "rule: matmul" in dot
    assert dot.count("[label=") == len(prog.lprog.ops)


def test_schedule_caps_stop_saturation(tmp_path, monkeypatch):
    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    g = ls.Graph()
    x, w = g.input("x", ("s", 8)), g.input("w", (8, 4))
    g.output("y", (x @ w) * 1.0)
    free = g.compile(backend="cpu", search=ls.SearchOptions(budget=1)).search_report.rulesets
    assert "linalg" in free and {rs: why for rs, (_, _, why) in free.items()} == {rs: "saturated" for rs in free}
    capped = g.compile(backend="cpu", search=ls.SearchOptions(budget=1, max_enodes=10)).search_report.rulesets
    assert capped["cleanup"][2] == "e-graph size cap 10" and capped["cleanup"][1] == 1
    one = g.compile(backend="cpu", search=ls.SearchOptions(budget=1, iterations=1)).search_report.rulesets
    assert one["linalg"] == (one["linalg"][0], 1, "iteration cap")


def test_time_budget_stops_the_search(tmp_path, monkeypatch):
    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    g = ls.Graph()
    x, w = g.input("x", ("s", 8)), g.input("w", (8, 4))
    g.output("y", ((x @ w) * 2.0).exp())
    opts = ls.SearchOptions(budget=12, time_budget=0.0, roll=False, progress=False)
    rep = g.compile(backend="cpu", search=opts).search_report
    # default, greedy and fused are always measured; nothing after the (zero) budget ran out
    assert [c.origin for c in rep.candidates] == ["default", "greedy", "fused"]


def test_candidates_over_the_memory_cap_are_rejected_without_running(tmp_path, monkeypatch):
    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    g = ls.Graph()
    x, w = g.input("x", ("s", 256)), g.input("w", (256, 512))
    g.output("y", x @ w)
    # the default candidate's broadcast product is s*512*256 floats = 32 MiB at s=64; BLAS needs 128 KiB
    opts = ls.SearchOptions(budget=2, dims={"s": 64}, max_memory=1 << 20, roll=False, progress=False)
    prog = g.compile(backend="cpu", search=opts)
    default, greedy = prog.search_report.candidates[:2]
    assert default.seconds is None and "needs 32 MiB" in default.error and "max_memory 1 MiB" in default.error
    assert greedy.seconds is not None and "Matmul" in greedy.ops
    with pytest.raises(ls.LightspeedError, match="every candidate failed.*max_memory"):
        g.compile(backend="cpu", search=ls.SearchOptions(budget=2, dims={"s": 64}, max_memory=1000, roll=False))


def test_a_candidate_far_larger_than_one_that_ran_is_not_run(tmp_path, monkeypatch):
    """The primitive-only head materialises a broadcast product (here s*512*2048 floats = 64 MiB at
    s=16); once a candidate needing 128 KiB ran it is skipped under the default cap (it set the
    first compile's peak memory of `lightspeed run llama`: 547 MB, 346 MB without it)."""
    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    g = ls.Graph()
    x, w = g.input("x", ("s", 512)), g.input("w", (512, 2048))
    g.output("y", x @ w)
    rep = g.compile(backend="cpu", search=ls.SearchOptions(budget=3, dims={"s": 16}, roll=False,
                                                           progress=False)).search_report
    default = next(c for c in rep.candidates if c.origin == "default")
    assert default.seconds is None and "needs 64 MiB" in default.error and "over 16x" in default.error
    assert any(c.seconds is not None and "Matmul" in c.ops for c in rep.candidates)


def test_a_tie_goes_to_the_candidate_with_the_fewest_intermediate_bytes(tmp_path, monkeypatch):
    """Re-timed finalists within TIE of the fastest are a tie, won by the leanest: with every
    program timed alike the primitive-only broadcast product never wins over the Matmul (a
    timing-noise win of it made the native backend densify block weights)."""
    from lightspeed.backends import get_backend

    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    cpu = get_backend("cpu")
    monkeypatch.setattr(type(cpu), "time", lambda self, prog, inputs, dims, repeats: 1e-3)
    g = ls.Graph()
    x, w = g.input("x", ("s", 8)), g.input("w", (8, 4))
    g.output("y", x @ w)
    rep = g.compile(backend="cpu", search=ls.SearchOptions(budget=3, dims={"s": 2}, roll=False,
                                                           progress=False)).search_report
    winner = next(c for c in rep.candidates if c.index == rep.winner)
    assert len([c for c in rep.candidates if c.seconds is not None]) > 1 and "Matmul" in winner.ops, rep.candidates


_LIST_CANDIDATES = """
import lightspeed as ls
g = ls.Graph()
x, w = g.input("x", ("s", 32)), g.input("w", (32, 32))
g.output("y", ls.rms_norm((x @ w).silu() * x, 32).softmax(-1))
p = g.compile(backend="cpu", search=ls.SearchOptions(budget=8, seed=3, dims={"s": 4}, progress=False, roll=False))
print([(c.index, c.origin, sorted(c.ops.items())) for c in p.search_report.candidates])
"""


def _candidate_lists(n: int) -> list[str]:
    env = {**os.environ, "LIGHTSPEED_CACHE": "0"}
    return [subprocess.run([sys.executable, "-c", _LIST_CANDIDATES], capture_output=True, text=True, env=env,
                           timeout=300, check=True).stdout for _ in range(n)]


def test_fresh_processes_measure_the_same_candidate_list():
    """The candidate list is a function of graph, rules, options and seed alone (draws and
    mutations never depend on measured times): fresh processes with the cache off agree."""
    lists = _candidate_lists(3)
    assert lists[0].count("(") > 8 and len(set(lists)) == 1, lists


@pytest.mark.slow
def test_ten_fresh_processes_measure_the_same_candidate_list():
    lists = _candidate_lists(10)
    assert len(set(lists)) == 1, lists


# ---------------------------------------------------------------------- compile time (issue 14)
def _mlp_graph() -> ls.Graph:
    g = ls.Graph()
    x, w = g.input("x", ("s", 16)), g.input("w", (16, 8))
    g.output("y", (x @ w).silu())
    return g


def test_a_cached_decision_makes_no_profiling_inputs_and_measures_nothing(tmp_path, monkeypatch):
    from lightspeed import search

    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    opts = ls.SearchOptions(budget=3, seed=0, roll=False)
    first = _mlp_graph().compile(backend="cpu", search=opts)

    def forbidden(*a, **k):
        raise AssertionError("a cached decision must not make profiling inputs or measure")

    monkeypatch.setattr(search, "representative_inputs", forbidden)
    monkeypatch.setattr(search, "measure", forbidden)
    second = _mlp_graph().compile(backend="cpu", search=opts)
    rep = second.search_report
    assert rep.egraph_cached and rep.decision_cached and rep.program_text == first.search_report.program_text
    assert set(rep.phases) == {"encode", "saturate", "serialize", "extract", "profile"} and rep.lower > 0
    assert rep.phases["serialize"] == rep.phases["profile"] == 0.0  # the e-graph loaded, nothing measured
    xa = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    wa = np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32)
    z = xa.astype(np.float64) @ wa
    np.testing.assert_allclose(second(x=xa, w=wa)["y"], z / (1 + np.exp(-z)), rtol=1e-5, atol=1e-6)


def test_profiling_inputs_have_the_graph_dtypes_and_are_made_once_per_session():
    from lightspeed import search

    g = ls.Graph()
    g.input("h", ("s", 8), ls.float16)
    g.input("ids", ("s",), ls.int64)
    g.input("m", ("s", "s"), ls.bool_)
    g.input("emb", (3000, 600))  # 1.8M floats: more than one pool (search._POOL)
    with search.session():
        a = search.representative_inputs(g, {"s": 5}, seed=0)
        b = search.representative_inputs(g, {"s": 5}, seed=0)
        assert all(a[k] is b[k] for k in a)  # made once, shared by every search in the session
    assert {k: (v.dtype, v.shape) for k, v in a.items()} == {
        "h": (np.float16, (5, 8)), "ids": (np.int64, (5,)), "m": (np.bool_, (5, 5)), "emb": (np.float32, (3000, 600))}
    assert not a["ids"].any() and not a["m"].any()  # zeros: a valid index for every gather
    flat = a["emb"].reshape(-1)
    n = search._POOL
    # a seeded standard-normal pool, repeated over the larger array
    np.testing.assert_array_equal(flat[:n], np.random.default_rng([0, 3000, 600]).standard_normal(n, np.float32))
    np.testing.assert_array_equal(flat[n:2 * n], flat[:n][:flat.size - n])
    assert abs(float(flat[:n].std()) - 1) < 0.01
    with search.session():  # the first session's arrays were freed when it ended
        assert search.representative_inputs(g, {"s": 5}, seed=0)["emb"] is not a["emb"]


def test_a_candidate_far_slower_than_the_best_gets_one_timed_run():
    from lightspeed import search

    class Stub:
        calls: list[int] = []

        def lower(self, graph, lprog):
            return lambda inputs, dims: {"y": np.zeros((2, 8), np.float32)}

        def time(self, prog, inputs, dims, repeats):
            self.calls.append(repeats)
            return 1.0

    g = _mlp_graph()
    stub = Stub()
    _, sec = search.measure(g, stub, None, {}, {"s": 2}, repeats=3, cutoff=0.2)
    assert sec == 1.0 and stub.calls == [1]  # 5x the best so far: no more runs
    _, sec = search.measure(g, stub, None, {}, {"s": 2}, repeats=3, cutoff=4.0)
    assert stub.calls == [1, 1, 2]  # within the cutoff: all its repeats


def test_progress_goes_to_the_session_and_is_silent_off_a_terminal(tmp_path, monkeypatch, capsys):
    from lightspeed import search

    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    opts = ls.SearchOptions(budget=3, seed=0, roll=False)
    _mlp_graph().compile(backend="cpu", search=opts)  # stderr is no terminal here: nothing printed
    assert capsys.readouterr().err == ""
    said: list[str] = []
    g = _mlp_graph()
    g.output("z", g.input("v", ("s", 8)).exp())  # another graph: saturated and measured afresh
    with search.session(say=said.append):
        g.compile(backend="cpu", search=opts)
    assert said[0].startswith("saturating the e-graph") and "candidate 1/3 (greedy)" in said[1]
    assert any("(default)" in m for m in said) and capsys.readouterr().err == ""


def test_the_pipeline_takes_a_backend_or_its_name_and_keeps_the_errors(tmp_path, monkeypatch):
    """``Graph.compile`` is ``lightspeed.pipeline.compile``: a Backend or its name, the same program
    and decision (one cache entry) either way, and the option errors of every backend."""
    from lightspeed import pipeline
    from lightspeed.backends import get_backend

    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    opts = ls.SearchOptions(budget=2, seed=0, roll=False, progress=False)
    by_name = _mlp_graph().compile("cpu", search=opts)
    by_backend = pipeline.compile(_mlp_graph(), get_backend("cpu"), search=opts)
    assert by_backend.search_report.decision_cached and by_name.search_report.program_text == \
        by_backend.search_report.program_text
    assert type(pipeline.compile(_mlp_graph(), "reference", search=opts)).__name__ == "ReferenceProgram"
    with pytest.raises(TypeError, match=r"cpu backend: unknown options \['budget'\]"):
        pipeline.compile(_mlp_graph(), "cpu", budget=3)
    with pytest.raises(TypeError, match="search must be a SearchOptions, got dict"):
        _mlp_graph().compile(get_backend("cpu"), search={"budget": 2})
    with pytest.raises(TypeError, match=r"reference backend takes no options besides search=, got \['seed'\]"):
        _mlp_graph().compile("reference", seed=0)
    with pytest.raises(ls.LightspeedError, match="graph has no outputs"):
        pipeline.compile(ls.Graph(), "cpu")


def test_a_decision_measured_beside_other_busy_processes_is_used_but_not_cached(tmp_path, monkeypatch):
    """A host backend's candidates timed while other processes kept the CPUs busy (here: the
    probe says 60% of them) give this process its program, but no cached decision: the next
    compile measures again (a loaded machine once crowned an 8x slower candidate for good)."""
    from lightspeed import search

    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LIGHTSPEED_SEARCH_CONTENDED", str(search.CONTENDED))
    monkeypatch.setattr(search, "others_busy", lambda before, after, wall: 0.6)
    opts = ls.SearchOptions(budget=2, seed=0, roll=False)
    first = _mlp_graph().compile(backend="cpu", search=opts)
    assert first.search_report.contention == 0.6 and "60% of the CPUs busy" in first.search_report.format()
    assert not list(tmp_path.glob("search-*.json"))
    monkeypatch.setattr(search, "others_busy", lambda before, after, wall: 0.0)
    second = _mlp_graph().compile(backend="cpu", search=opts)
    assert not second.search_report.decision_cached and list(tmp_path.glob("search-*.json"))
    assert _mlp_graph().compile(backend="cpu", search=opts).search_report.decision_cached


def test_the_load_probe_counts_only_other_processes():
    from lightspeed import search

    ncpu = os.cpu_count() or 1
    # 2 s of wall time; the machine's CPUs were busy ncpu * 1 s, of which this process used 0.5 s
    assert search.others_busy((10.0, 1.0), (10.0 + ncpu, 1.5), 2.0) == pytest.approx((ncpu - 0.5) / (2.0 * ncpu))
    assert search.others_busy((10.0, 1.0), (10.5, 1.5), 2.0) == 0.0  # only this process worked
    assert search.others_busy(None, (1.0, 1.0), 1.0) == 0.0  # no /proc/stat: unknown, cached
    assert search.others_busy((10.0, 1.0), (10.0 + ncpu, 1.0), 0.1) == 0.0  # too short to tell
    ticks = search._cpu_ticks()
    assert ticks is None or (ticks[0] >= 0 and ticks[1] >= 0)


def test_the_load_probe_counts_this_processes_children_as_its_own():
    """The C compiler a native compile runs is this process's work, not another's: a child that
    burns a CPU for half a second leaves the probe's share of other processes near 0 (it was
    counted as other work, and every native decision would have been left out of the cache)."""
    import subprocess
    import time

    from lightspeed import search

    before, t0 = search._cpu_ticks(), time.perf_counter()
    if before is None:
        pytest.skip("no /proc/stat")
    burn = "import time\nt = time.perf_counter()\nwhile time.perf_counter() - t < 0.6: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    busy = search.others_busy(before, search._cpu_ticks(), time.perf_counter() - t0)
    assert busy < 0.2, busy


def test_a_float_copy_of_gguf_blocks_counts_as_a_candidates_memory():
    """``LProgram.dequantised_bytes``: a program that reads a block-dtype weight as float values
    (the loader keeps the copy) needs its float32 bytes; the search adds them to the candidate's
    intermediates, so a candidate reading the blocks wins a near tie (LEAN_TIE)."""
    from lightspeed.egraph.llir import LOp, LProgram

    q = LOp("Input", {"name": "w"}, (), (ls.sym("n"), ls.const(64)), ls.q4_1)
    cast = LOp("Cast", {"to": ls.float32}, (0,), (ls.sym("n"), ls.const(64)), ls.float32)
    out = LOp("Output", {"name": "y"}, (1,), cast.shape, ls.float32)
    prog = LProgram([q, cast, out], {"y": 2})
    assert prog.dequantised_bytes({"n": 10}) == 10 * 64 * 4
    floats = LProgram([LOp("Input", {"name": "x"}, (), (ls.const(8),), ls.float32),
                       LOp("Cast", {"to": ls.float16}, (0,), (ls.const(8),), ls.float16)], {})
    assert floats.dequantised_bytes({}) == 0
    from lightspeed import search
    assert search.LEAN_TIE > search.TIE


def test_candidates_are_timed_with_static_inputs_resident_when_asked(monkeypatch):
    """``static_resident``: a candidate is timed on a copy with its static-shaped inputs (a model's
    weights) persisted and only the others passed; the program returned is the compiled one, with
    nothing resident; without the option everything is passed as before."""
    from lightspeed.backends import get_backend
    from lightspeed.search import measure

    g = ls.Graph()
    x, w = g.input("x", ("s", 4)), g.input("w", (4, 4))
    g.output("y", x @ (w * 2.0))
    backend = get_backend("cpu")
    from lightspeed.egraph.llir import decode_program
    from lightspeed.search import SearchReport, candidates, saturate

    sat = saturate(g, backend, ls.SearchOptions(budget=1), SearchReport(), use_cache=False)
    _, cand = next(iter(candidates(sat.index, ls.SearchOptions(budget=1), frozenset())))
    lprog = decode_program(cand, sat.ser, sat.enc.constants, sat.decls)
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((3, 4)).astype(np.float32), "w": rng.standard_normal((4, 4)).astype(np.float32)}
    timed = []
    monkeypatch.setattr(type(backend), "time", lambda self, prog, ins, dims, n: timed.append(
        (set(prog._resident), set(ins))) or 1e-3)
    for resident, want in ((True, ({"w"}, {"x"})), (False, (set(), {"x", "w"}))):
        timed.clear()
        prog, _ = measure(g, backend, lprog, inputs, {"s": 3}, 2, static_resident=resident)
        assert not prog._resident and timed and all(t == want for t in timed)
        np.testing.assert_allclose(prog(inputs)["y"], inputs["x"] @ (inputs["w"] * 2), rtol=1e-5)
