"""Transformer block on the CPU: reference runtime vs cpu backend (default candidate and searched
program) vs PyTorch eager, measured in one run.  Prints a table; times are medians of repeats.

    python benchmarks/cpu_block.py [--seq 32] [--hidden 576] [--budget 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import lightspeed as ls  # noqa: E402
from lightspeed.backends.cpu import CpuProgram  # noqa: E402


def build(hidden: int, heads: int, kv_heads: int, ffn: int) -> ls.Graph:
    g = ls.Graph()
    s, dh = "s", hidden // heads
    x = g.input("x", (s, hidden))
    wq, wk, wv, wo = (g.input("wq", (hidden, hidden)), g.input("wk", (hidden, kv_heads * dh)),
                      g.input("wv", (hidden, kv_heads * dh)), g.input("wo", (hidden, hidden)))
    w1, w2, w3 = g.input("w1", (hidden, ffn)), g.input("w2", (ffn, hidden)), g.input("w3", (hidden, ffn))
    n1, n2 = g.input("n1", (hidden,)), g.input("n2", (hidden,))
    h = ls.rms_norm(x, (hidden,), n1, eps=1e-5)
    q = (h @ wq).reshape(s, heads, dh).transpose(0, 1)
    k = (h @ wk).reshape(s, kv_heads, dh).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
    v = (h @ wv).reshape(s, kv_heads, dh).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
    scores = (q @ k.transpose(-1, -2)) * (dh ** -0.5)
    mask = ls.triu(ls.full_like(scores, float("-inf")), 1)
    att = (scores + mask).softmax(-1)
    x = x + (att @ v).transpose(0, 1).reshape(s, hidden) @ wo
    h = ls.rms_norm(x, (hidden,), n2, eps=1e-5)
    g.output("y", x + ((h @ w1).silu() * (h @ w3)) @ w2)
    return g


def torch_block(inputs, heads, kv_heads):
    import torch
    import torch.nn.functional as F

    t = {k: torch.from_numpy(v) for k, v in inputs.items()}
    x = t["x"]
    s, hidden = x.shape
    dh = hidden // heads

    def run():
        with torch.no_grad():
            h = F.rms_norm(x, (hidden,), t["n1"], eps=1e-5)
            q = (h @ t["wq"]).view(s, heads, dh).transpose(0, 1)
            k = (h @ t["wk"]).view(s, kv_heads, dh).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
            v = (h @ t["wv"]).view(s, kv_heads, dh).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
            scores = (q @ k.transpose(-1, -2)) * dh ** -0.5
            mask = torch.triu(torch.full_like(scores, float("-inf")), 1)
            att = (scores + mask).softmax(-1)
            y = x + (att @ v).transpose(0, 1).reshape(s, hidden) @ t["wo"]
            h = F.rms_norm(y, (hidden,), t["n2"], eps=1e-5)
            return y + (F.silu(h @ t["w1"]) * (h @ t["w3"])) @ t["w2"]
    return run


def timeit(fn, repeats: int) -> float:
    fn()
    ts = []
    for _ in range(repeats):
        s = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - s)
    return statistics.median(ts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=576)
    ap.add_argument("--heads", type=int, default=9)
    ap.add_argument("--kv-heads", type=int, default=3)
    ap.add_argument("--ffn", type=int, default=1536)
    ap.add_argument("--budget", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    g = build(args.hidden, args.heads, args.kv_heads, args.ffn)
    dims = {"s": args.seq}
    rng = np.random.default_rng(0)
    inputs = {}
    for name, nid in g.inputs.items():
        shape = tuple(int(d.evaluate(dims)) for d in g.nodes[nid].arg.shape)
        inputs[name] = (rng.standard_normal(shape) * 0.05).astype(np.float32)

    t0 = time.perf_counter()
    searched = g.compile(backend="cpu", search=ls.SearchOptions(budget=args.budget, seed=0, dims=dims))
    compile_s = time.perf_counter() - t0
    rep = searched.search_report
    default_lprog = None
    # rebuild the default candidate (#0) from the same search for a same-run comparison
    from lightspeed.search import SearchOptions, search_program
    default_lprog, _ = search_program(g, searched_backend(), SearchOptions(budget=1, seed=0, dims=dims))
    default = CpuProgram(g, default_lprog)
    reference = g.compile(backend="reference")

    want = reference(inputs)["y"]
    for name, prog in (("cpu default", default), ("cpu searched", searched)):
        err = float(np.abs(prog(inputs)["y"] - want).max())
        assert err < 1e-3, f"{name} disagrees with the reference: {err}"

    rows = [("reference runtime", timeit(lambda: reference(inputs), max(1, args.repeats // 2))),
            ("cpu, default candidate", timeit(lambda: default(inputs), args.repeats)),
            ("cpu, searched", timeit(lambda: searched(inputs), args.repeats))]
    try:
        import torch

        torch.set_num_threads(max(1, torch.get_num_threads()))
        rows.append((f"PyTorch eager ({torch.get_num_threads()} threads)",
                     timeit(torch_block(inputs, args.heads, args.kv_heads), args.repeats)))
    except ImportError:
        pass
    base = rows[2][1]
    print(f"transformer block: seq={args.seq} hidden={args.hidden} heads={args.heads}/{args.kv_heads} "
          f"ffn={args.ffn} float32; search budget {args.budget}, compile {compile_s:.2f} s")
    print(f"{'program':34s} {'ms':>10s} {'vs cpu searched':>16s}")
    for name, t in rows:
        print(f"{name:34s} {t * 1e3:10.2f} {t / base:15.2f}x")
    print()
    print(rep.format())
    return 0


def searched_backend():
    from lightspeed.backends import get_backend

    return get_backend("cpu")


if __name__ == "__main__":
    raise SystemExit(main())
