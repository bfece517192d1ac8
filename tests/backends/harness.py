"""What the backend tests share: small model blocks, random inputs, and the check that every
random candidate a backend's e-graph offers agrees with the reference runtime."""

from __future__ import annotations

import random

import numpy as np

import lightspeed as ls
from lightspeed.egraph import SCHEMA, Candidate, EGraphIndex, EGraphRunner, encode_graph
from lightspeed.egraph.llir import decode_program
from tests.hl.optable import build_inputs, check_close, feed, torch_reference


def attention_block(g: ls.Graph, s="s", d=16, heads=2):
    """Causal multi-head self-attention with a residual, on input ``x`` [s, d]."""
    x = g.input("x", (s, d))
    wq, wk, wv, wo = (g.input(n, (d, d)) for n in ("wq", "wk", "wv", "wo"))
    q = (x @ wq).reshape(s, heads, d // heads).transpose(0, 1)
    k = (x @ wk).reshape(s, heads, d // heads).transpose(0, 1)
    v = (x @ wv).reshape(s, heads, d // heads).transpose(0, 1)
    mask = ls.triu(ls.full_like(q @ k.transpose(-1, -2), float("-inf")), 1)
    att = ((q @ k.transpose(-1, -2)) * (1 / np.sqrt(d // heads)) + mask).softmax(-1)
    return x + ((att @ v).transpose(0, 1).reshape(s, d) @ wo)


def mlp_block(g: ls.Graph, h, d=16):
    """RMSNorm then a SiLU-gated MLP, with a residual."""
    w1, w2, w3 = g.input("w1", (d, 32)), g.input("w2", (32, d)), g.input("w3", (d, 32))
    n = ls.rms_norm(h, (d,), g.input("g", (d,)), eps=1e-6)
    return h + ((n @ w1).silu() * (n @ w3)) @ w2


def random_inputs(g: ls.Graph, dims: dict, seed=0) -> dict[str, np.ndarray]:
    """Every input of ``g`` at ``dims``: normal values scaled by 0.3, in the input's dtype."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, nid in g.inputs.items():
        arg = g.nodes[nid].arg
        shape = tuple(int(d.evaluate(dims)) for d in arg.shape)
        out[name] = (rng.standard_normal(shape) * 0.3).astype(arg.dtype.np)
    return out


def unaligned_torch_views(ins: dict, dtype: str = "bfloat16") -> dict | None:
    """Each input as a torch CUDA tensor of ``dtype`` one element off 16-byte alignment (a view one
    element into its buffer), or None without torch's CUDA."""
    import pytest

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        return None
    t = getattr(torch, dtype)
    return {k: torch.cat([torch.zeros(1, dtype=t), torch.from_numpy(
        np.asarray(v, np.float32)).to(t).reshape(-1)]).cuda()[1:].reshape(v.shape) for k, v in ins.items()}


def nvrtc_or_skip():
    """The NVRTC module (``lightspeed.backends.cuda.nvrtc``), or skip the test where NVRTC cannot
    run (no cuda-python bindings or no NVRTC library): the cuda kernels' compile checks."""
    import pytest

    nvrtc = pytest.importorskip("lightspeed.backends.cuda.nvrtc")
    try:
        nvrtc.nvrtc_version()
    except Exception as e:  # noqa: BLE001 - no NVRTC library here
        pytest.skip(f"NVRTC unavailable: {e}")
    return nvrtc


def saturate(backend, g: ls.Graph):
    """``g`` saturated with the backend's rules and schedule: (runner, encoded, index, serialised)."""
    enc = encode_graph(g)
    r = EGraphRunner()
    r.run(SCHEMA)
    r.run(backend.rules_text())
    r.run(enc.program)
    for rs in backend.rulesets:
        r.run(f"(run-schedule (repeat 8 (run {rs})))")
    ser = r.serialize("$root")
    return r, enc, EGraphIndex(ser, set(backend.declarations())), ser


def memory_hazards(prog, bounds: dict) -> list[tuple]:
    """The launches of ``prog`` (a ``codegen.program.KernelProgram``) run over its memory plan at
    ``bounds``, simulated: which value each byte range (arena) or table slot (inputs, outputs)
    holds after each launch.  Returns every read that finds another value where it expects its
    operand, and every part of a merged launch whose output overlaps what another part of that
    launch reads or writes (the parts run at once)."""
    ops = prog.lprog.ops
    plan = prog._make_plan(bounds)

    def where(v):
        b = prog.buffer_of[v]
        if b in plan.offsets:
            return ("arena", plan.offsets[b], plan.offsets[b] + max(1, plan.caps[b]))
        return ("slot", prog.value_slot[b], None)

    def overlap(a, b):
        return a[0] == b[0] == "arena" and a[1] < b[2] and b[1] < a[2]

    arena: list[tuple[int, int, int]] = []  # (start, end, value)
    slots = {prog.value_slot[i]: i for i, op in enumerate(ops) if op.op in ("Input", "Constant")}
    found, previous = [], None
    for x in prog.launches:
        parts = x.merged or (x.op,)
        if parts == previous:
            continue  # an op's further launches
        previous = parts
        for p in parts:
            for j in ops[p].inputs if ops[p].op != "Output" else ():
                at = where(j)
                held = {slots.get(at[1])} if at[0] == "slot" else {v for a, b, v in arena if a < at[2] and at[1] < b}
                if held != {j}:
                    found.append(("stale", ops[p].op, p, ops[j].op, j, held))
        for p in parts:
            for q in parts:
                if q != p and any(overlap(where(p), where(j)) for j in (*ops[q].inputs, q)):
                    found.append(("merged", ops[p].op, p, ops[q].op, q))
        for p in (p for p in parts if ops[p].op != "Output"):
            at = where(p)
            if at[0] == "slot":
                slots[at[1]] = p
            else:
                arena = [(a, b, v) for a, b, v in arena if not overlap(("arena", a, b), at)] + [(at[1], at[2], p)]
    return found


def random_candidates_agree(backend, g: ls.Graph, inputs: dict, dims: dict | None, n: int = 20,
                            rtol=1e-5, atol=1e-5):
    """Saturate ``g`` with the backend's rules; lower ``n`` random candidates (distinct ones) with
    the backend and compare each with the reference runtime.  Returns (rule matches, the LLIR
    programs that ran, the number of distinct candidates drawn)."""
    runner, enc, index, ser = saturate(backend, g)
    decls = backend.declarations()
    want = g.compile(backend="reference")({k: v.copy() for k, v in inputs.items()}, dims=dims)
    keys, ran = set(), []
    for seed in range(n):
        cand = Candidate.random(index, random.Random(seed))
        if cand.key() in keys:
            continue
        keys.add(cand.key())
        lprog = decode_program(cand, ser, enc.constants, decls)
        try:
            prog = backend.lower(g, lprog)
        except ls.LightspeedError as e:  # a backend may refuse a candidate (the search rejects it)
            assert "in place" in str(e), e  # ... only for a reason it states: an unsafe in-place write
            continue
        got = prog({k: v.copy() for k, v in inputs.items()}, dims=dims)
        for k in want:
            assert got[k].dtype == want[k].dtype
            np.testing.assert_allclose(np.asarray(got[k], np.float64), want[k].astype(np.float64), rtol=rtol,
                                       atol=atol, err_msg=f"{backend.name} candidate seed {seed}:\n{lprog}")
        ran.append(lprog)
    return runner.stats.rule_matches, ran, len(keys)


def op_graph(case, sample, dtype, layout: str):
    """The graph of one op-table sample: (graph, input feeders, the outputs' graph tensors)."""
    g = ls.Graph()
    operands, feeders = build_inputs(case, sample, dtype, layout, g)
    outs = case.ls_fn(*operands, **sample.kwargs)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    for j, o in enumerate(outs):
        g.output(f"out{j}", o)
    return g, feeders, outs


def op_matches_torch(backend, case, sample, dtype, layout: str, search) -> None:
    """Compile one op-table sample for ``backend`` and compare every output, at every dims binding
    the sample lists, with PyTorch (exact for bool and integer results)."""
    g, feeders, outs = op_graph(case, sample, dtype, layout)
    prog = g.compile(backend, search=search)
    for dims in sample.dims:
        logical, physical = feed(np.random.default_rng(0), sample, dtype, feeders, dims)
        got = prog(physical, dims=dims or None)
        for j, ref in enumerate(torch_reference(case, sample, dtype, logical)):
            what = f"{backend.name} {case.id} {dtype.name} {layout} dims={dims} output {j}"
            ours = np.asarray(got[f"out{j}"])
            assert ours.dtype == outs[j].dtype.np, what
            if ref.dtype == np.bool_ or ours.dtype == np.bool_:
                np.testing.assert_array_equal(ours.astype(bool), ref.astype(bool), err_msg=what)
            else:
                check_close(ours, ref, dtype, case, what)
