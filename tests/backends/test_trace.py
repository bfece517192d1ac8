"""LIGHTSPEED_TRACE: a Chrome/Perfetto trace of compiles (phases, candidates) and runs (one event
per kernel or host op), on the cpu and native backends (the cuda one is checked on the GPU)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends import get_backend, trace


@pytest.fixture()
def tracing(tmp_path):
    path = tmp_path / "trace.json"
    trace._enable_for_tests(str(path))
    yield path
    trace._enable_for_tests(None)


@pytest.mark.parametrize("backend", ["cpu", "native"])
def test_trace_has_the_compile_its_phases_candidates_and_every_kernel_of_a_run(tracing, backend):
    b = get_backend(backend)
    if not b.available():
        pytest.skip(f"{backend} unavailable")
    g = ls.Graph()
    x, w = g.input("x", ("s", 8)), g.input("w", (8, 4))
    g.output("y", (x @ w).softmax(-1))
    prog = g.compile(b, search=ls.SearchOptions(budget=3, seed=0, progress=False, dims={"s": 3}))
    rng = np.random.default_rng(0)
    prog(x=rng.standard_normal((3, 8)).astype(np.float32), w=rng.standard_normal((8, 4)).astype(np.float32))
    assert trace.flush() == str(tracing)
    evs = json.loads(tracing.read_text())["traceEvents"]
    cats = {e["cat"] for e in evs}
    assert {"compile", "compile.phase", "compile.candidate", "run"} <= cats, cats
    compile_ev = next(e for e in evs if e["cat"] == "compile")
    for e in evs:  # well-formed complete events
        assert e["ph"] == "X" and e["dur"] >= 0 and isinstance(e["ts"], float)
    phases = [e for e in evs if e["cat"] == "compile.phase"]
    assert {"saturate", "profile"} <= {e["name"] for e in phases} or {"load", "profile"} <= {e["name"] for e in phases}
    assert all(compile_ev["ts"] <= e["ts"] for e in phases)
    run = [e for e in evs if e["cat"] == "run"][-1]
    ops = [e for e in evs if e["cat"] in ("run.op", "run.kernel") and run["ts"] <= e["ts"] <= run["ts"] + run["dur"]]
    lowered = prog.lprog.ops if hasattr(prog, "lprog") else []
    assert ops and {e["name"] for e in ops} <= {o.op for o in lowered}
    assert any(e["name"] in ("Matmul", "Fused") for e in ops)


def test_no_trace_without_the_variable():
    trace._enable_for_tests(None)
    assert not trace.enabled() and trace.flush() is None
