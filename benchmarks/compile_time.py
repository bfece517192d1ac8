"""Compile time per phase for 1, 2, 4, 8 and 30 stacked SmolLM2-shaped layers on the cpu backend
(hidden 576, 9 heads, 3 KV heads, FFN 1536), with the on-disk cache turned off.  Phases and e-nodes
are summed over the compiled parts when the layers are rolled (``roll`` is finding and splitting
the repeated run; ``blocks`` is how many layers share one compiled template).

    python benchmarks/compile_time.py [--layers 1 2 4 8 30] [--budget 2] [--no-roll]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import lightspeed as ls  # noqa: E402


def build(layers: int, hidden=576, heads=9, kv_heads=3, ffn=1536) -> ls.Graph:
    g = ls.Graph()
    s, dh = "s", hidden // heads
    h = g.input("x", (s, hidden))
    for i in range(layers):
        wq, wk, wv, wo = (g.input(f"wq{i}", (hidden, hidden)), g.input(f"wk{i}", (hidden, kv_heads * dh)),
                          g.input(f"wv{i}", (hidden, kv_heads * dh)), g.input(f"wo{i}", (hidden, hidden)))
        w1, w2, w3 = (g.input(f"w1{i}", (hidden, ffn)), g.input(f"w2{i}", (ffn, hidden)),
                      g.input(f"w3{i}", (hidden, ffn)))
        n = ls.rms_norm(h, (hidden,), g.input(f"n1{i}", (hidden,)), eps=1e-5)
        q = (n @ wq).reshape(s, heads, dh).transpose(0, 1)
        k = (n @ wk).reshape(s, kv_heads, dh).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        v = (n @ wv).reshape(s, kv_heads, dh).transpose(0, 1).repeat_interleave(heads // kv_heads, 0)
        att = ((q @ k.transpose(-1, -2)) * dh ** -0.5).softmax(-1)
        h = h + (att @ v).transpose(0, 1).reshape(s, hidden) @ wo
        n = ls.rms_norm(h, (hidden,), g.input(f"n2{i}", (hidden,)), eps=1e-5)
        h = h + ((n @ w1).silu() * (n @ w3)) @ w2
    g.output("y", h)
    return g


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--layers", type=int, nargs="*", default=[1, 2, 4, 8, 30])
    ap.add_argument("--budget", type=int, default=2)
    ap.add_argument("--no-roll", action="store_true", help="compile the whole graph as one (no loop rolling)")
    args = ap.parse_args()
    os.environ["LIGHTSPEED_CACHE"] = "0"  # measure the work, not the cache (set here: tests import build)
    cols = ["build", "roll", "encode", "saturate", "serialize", "extract", "profile"]
    print(f"{'layers':>6s} {'nodes':>6s} {'e-nodes':>8s} {'blocks':>6s} "
          + " ".join(f"{c:>10s}" for c in cols) + f" {'total':>9s}")
    for n in args.layers:
        t0 = time.perf_counter()
        g = build(n)
        t_build = time.perf_counter() - t0
        opts = ls.SearchOptions(budget=args.budget, seed=0, dims={"s": 1}, roll=not args.no_roll)
        prog = g.compile(backend="cpu", search=opts)
        rep = prog.search_report
        plan = getattr(prog, "plan", None)
        phases = {"build": t_build, **rep.phases}
        total = sum(phases.values())
        print(f"{n:6d} {len(g.reachable()):6d} {rep.egraph_nodes:8d} {plan.count if plan else 0:6d} "
              + " ".join(f"{phases.get(c, 0.0) * 1e3:8.1f}ms" for c in cols) + f" {total:8.2f}s")
    print("\nsaturation time per layer relative to 1 layer is the scaling to watch (sub-linear is the goal).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
