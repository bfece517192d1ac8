"""Optimisers in the graph against ``torch.optim`` (float64), and a compiled training step that
updates its parameters and optimiser state in place, step for step as PyTorch trains the same MLP."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import lightspeed as ls
from lightspeed.autograd.optim import training_step

BACKENDS = ["reference", "cpu", pytest.param("native", marks=pytest.mark.skipif(
    not ls.backends.get_backend("native").available(), reason="no C compiler"))]


def _mlp_graph(batch, d_in, hidden, d_out):
    g = ls.Graph()
    x = g.input("x", (batch, d_in), ls.float64)
    y = g.input("y", (batch, d_out), ls.float64)
    params = {"w1": g.input("w1", (d_in, hidden), ls.float64), "b1": g.input("b1", (hidden,), ls.float64),
              "w2": g.input("w2", (hidden, d_out), ls.float64), "b2": g.input("b2", (d_out,), ls.float64)}
    h = ls.tanh(x @ params["w1"] + params["b1"])
    logits = h @ params["w2"] + params["b2"]
    loss = -(ls.log_softmax(logits, -1) * y).sum() * (1.0 / batch)
    return g, loss, params


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("optimizer,hparams", [
    ("sgd", dict(lr=0.1, momentum=0.9, weight_decay=1e-3)),
    ("adamw", dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)),
])
def test_a_training_step_matches_torch_step_for_step(backend, optimizer, hparams):
    batch, d_in, hidden, d_out = 8, 5, 7, 3
    g, loss, params = _mlp_graph(batch, d_in, hidden, d_out)
    training_step(g, loss, params, optimizer=optimizer, **hparams)
    search = None if backend == "reference" else ls.SearchOptions(budget=2, seed=0, progress=False)
    prog = g.compile(backend=backend, search=search) if search else g.compile(backend=backend)
    rng = np.random.default_rng(0)
    init = {"w1": rng.standard_normal((d_in, hidden)) * 0.5, "b1": rng.standard_normal(hidden) * 0.1,
            "w2": rng.standard_normal((hidden, d_out)) * 0.5, "b2": rng.standard_normal(d_out) * 0.1}
    state = {k: v.copy() for k, v in init.items()}
    for k, v in init.items():
        if optimizer == "adamw":
            state[f"{k}.m"], state[f"{k}.v"] = np.zeros_like(v), np.zeros_like(v)
        else:
            state[f"{k}.velocity"] = np.zeros_like(v)
    tparams = {k: torch.tensor(v, requires_grad=True) for k, v in init.items()}
    opt = (torch.optim.AdamW(tparams.values(), **hparams) if optimizer == "adamw"
           else torch.optim.SGD(tparams.values(), **hparams))
    for step in range(1, 6):
        x = rng.standard_normal((batch, d_in))
        y = np.eye(d_out)[rng.integers(0, d_out, batch)]
        extra = {"step": np.array(float(step))} if optimizer == "adamw" else {}
        out = prog({"x": x, "y": y, **state, **extra})
        # torch, the same step
        opt.zero_grad()
        tx, ty = torch.tensor(x), torch.tensor(y)
        h = torch.tanh(tx @ tparams["w1"] + tparams["b1"])
        tl = -(torch.log_softmax(h @ tparams["w2"] + tparams["b2"], -1) * ty).sum() / batch
        tl.backward()
        opt.step()
        np.testing.assert_allclose(float(out["loss"]), tl.item(), rtol=1e-10)
        for k, t in tparams.items():  # the inputs hold the updated parameters
            np.testing.assert_allclose(state[k], t.detach().numpy(), rtol=1e-9, atol=1e-12, err_msg=f"{k} {step}")


def test_training_step_refuses_what_it_cannot_update():
    g, loss, params = _mlp_graph(2, 3, 4, 2)
    with pytest.raises(ls.InputError, match="unknown optimizer"):
        training_step(g, loss, params, optimizer="lion", lr=0.1)
    g, loss, params = _mlp_graph(2, 3, 4, 2)
    with pytest.raises(ls.InputError, match="must be the graph input"):
        training_step(g, loss, {"w1": params["w1"].transpose(0, 1)}, lr=0.1)


@pytest.mark.skipif(not ls.backends.get_backend("native").available(), reason="no C compiler")
def test_a_training_steps_activations_share_the_arena_by_liveness():
    """The forward pass's activations live until the backward pass reads them for the last time,
    then their places are reused: a deeper MLP's training step needs far less arena than the sum
    of its computed values, and no less than what is live where the backward pass begins (every
    activation)."""
    batch, width, depth = 64, 96, 6
    g = _mlp_step(ls.tanh, depth, batch, width, lr=0.1)
    prog = g.compile(backend="native", search=ls.SearchOptions(budget=2, seed=0, progress=False))
    arena, values = prog.arena_bytes(), prog.value_bytes()
    activation = batch * width * 4
    assert depth * activation <= arena < values / 2, (arena, values)  # every activation is live at the turn


def _mlp_step(act, depth: int = 6, batch: int = 64, width: int = 96, lr: float = 0.01) -> ls.Graph:
    """An SGD step of ``depth`` square layers ``act(h @ w)`` on the loss sum(h^2)."""
    g = ls.Graph()
    x = g.input("x", (batch, width))
    params = {f"w{i}": g.input(f"w{i}", (width, width)) for i in range(depth)}
    h = x
    for i in range(depth):
        h = act(h @ params[f"w{i}"])
    training_step(g, (h * h).sum(), params, optimizer="sgd", lr=lr)
    return g


def _relu_mlp_step() -> ls.Graph:
    return _mlp_step(ls.relu)


def _mlp_feeds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((64, 96)).astype(np.float32),
            **{f"w{i}": (rng.standard_normal((96, 96)) * 0.1).astype(np.float32) for i in range(6)}}


def test_recomputing_cheap_activations_keeps_the_values_and_frees_memory():
    """``LProgram.rematerialized``: element-wise values (a relu's output, read by the next layer and
    again by the backward pass) computed a second time just before their late readers, from values
    alive there anyway: a lower peak of live intermediates, more ops, and a training step whose
    results are bit for bit the original program's (the same computations, kept for less time)."""
    from lightspeed.egraph.llir import decode_program
    from lightspeed.search import candidates
    from tests.backends.harness import saturate

    g = _relu_mlp_step()
    backend = ls.backends.get_backend("cpu")
    _, enc, index, ser = saturate(backend, g)
    greedy = dict(candidates(index, ls.SearchOptions(budget=3, seed=0)))["greedy"]
    lprog = decode_program(greedy, ser, enc.constants, backend.declarations())
    lean = lprog.rematerialized()
    assert len(lean.ops) > len(lprog.ops) and lean.peak_bytes({}) < lprog.peak_bytes({})
    assert lean.rematerialized(min_gap=10**9) is lean  # nothing left far enough apart
    feeds = _mlp_feeds(0)
    a, b = backend.lower(g, lprog), backend.lower(g, lean)
    fa, fb = ({k: v.copy() for k, v in feeds.items()} for _ in range(2))
    for _ in range(3):
        out_a, out_b = a(fa), b(fb)
        np.testing.assert_array_equal(out_a["loss"], out_b["loss"])
    for k in feeds:
        np.testing.assert_array_equal(fa[k], fb[k])


def test_the_search_recomputes_under_a_memory_budget():
    """With ``max_memory`` below a candidate's live intermediates but above them recomputed, the
    search measures that candidate recomputed (origin ``+recompute``) instead of rejecting it; a
    cached decision recomputes again; the step computes what the unconstrained one does."""
    from lightspeed.egraph.llir import decode_program
    from lightspeed.search import candidates
    from tests.backends.harness import saturate

    g = _relu_mlp_step()
    backend = ls.backends.get_backend("cpu")
    _, enc, index, ser = saturate(backend, g)
    greedy = decode_program(dict(candidates(index, ls.SearchOptions(budget=3, seed=0)))["greedy"], ser,
                            enc.constants, backend.declarations())
    budget = (greedy.peak_bytes({}) + greedy.rematerialized().peak_bytes({})) // 2
    opts = ls.SearchOptions(budget=3, seed=0, roll=False, progress=False, max_memory=budget)
    prog = _relu_mlp_step().compile(backend="cpu", search=opts)
    rep = prog.search_report
    assert any(c.origin.endswith("+recompute") and c.seconds is not None for c in rep.candidates), rep.format()
    assert all(c.seconds is None or "intermediates" not in (c.error or "") for c in rep.candidates)
    again = _relu_mlp_step().compile(backend="cpu", search=opts)
    assert again.search_report.decision_cached and again.search_report.program_text == rep.program_text
    free = _relu_mlp_step().compile(backend="cpu", search=ls.SearchOptions(budget=3, seed=0, roll=False))
    feeds = _mlp_feeds(1)
    fa, fb = ({k: v.copy() for k, v in feeds.items()} for _ in range(2))
    np.testing.assert_allclose(prog(fa)["loss"], free(fb)["loss"], rtol=1e-5)
    for k in feeds:
        np.testing.assert_allclose(fa[k], fb[k], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS[1:])
def test_float32_adamw_updates_have_exact_bias_corrections(backend):
    """float32 AdamW against the update computed in float64 (torch's formula, its bias corrections
    1 - b^t in Python floats), gradient g = c fixed by a linear loss, over 4 steps: every parameter
    within 3e-6 of lr.  The corrections are computed in float64 from the step number: as a float32
    power (1 - 0.999^1 = 1e-3) they put 7e-6 of lr on every update, and Adam's normalisation
    carried that into a char transformer's weights (3% of an update away after 3 steps; its float32
    loss curve 1.4% from float64's over 200 steps, PyTorch's 0.5%)."""
    n, lr, b1, b2, eps, wd = 1000, 0.01, 0.9, 0.999, 1e-8, 0.01
    g = ls.Graph()
    p, c = g.input("p", (n,)), g.input("c", (n,))
    training_step(g, (p * c).sum(), {"p": p}, optimizer="adamw", lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    prog = g.compile(backend=backend, search=ls.SearchOptions(budget=1, seed=0, progress=False))
    rng = np.random.default_rng(4)
    c0 = (rng.standard_normal(n) * 10.0 ** rng.uniform(-6, 1, n)).astype(np.float32)
    state = {"p": (rng.standard_normal(n) * 0.01).astype(np.float32), "p.m": np.zeros(n, np.float32),
             "p.v": np.zeros(n, np.float32)}  # small weights: their float32 rounding is far below lr * 1e-5
    want, m, v = state["p"].astype(np.float64), np.zeros(n), np.zeros(n)
    gd = c0.astype(np.float64)
    for t in range(1, 5):
        prog({"c": c0, "step": np.array(t, np.float32), **state})
        want = want * (1 - lr * wd)
        m, v = b1 * m + (1 - b1) * gd, b2 * v + (1 - b2) * gd * gd
        want = want - (lr / (1 - b1 ** t)) * m / (np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps)
        assert np.abs(state["p"] - want).max() <= 3e-6 * lr, (t, np.abs(state["p"] - want).max() / lr)
