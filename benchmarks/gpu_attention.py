"""A prompt's attention alone on the GPU: lightspeed's kernel for the prefill graph's attention
(the tensor-core tiles, ``AttentionMma``, where the search takes them) against PyTorch's
``scaled_dot_product_attention`` (flash, causal, GQA) on the same shapes, in one process.

    python benchmarks/gpu_attention.py [--seq 32,512,4096] [--heads 32] [--kv 8] [--dim 64]
                                       [--reps 20] [--backend cuda]

The graph is :func:`lightspeed.nn.attention.gqa_attention` under the causal mask a prefill
builds from its positions (``Step.mask_new``), queries [kv, group, s, d] and keys/values
[s, kv, d] in bfloat16, as the Llama family's prefill has them.  Ours: the median device time of
the attention kernel per call (``LIGHTSPEED_TRACE``: kernels launched one by one between CUDA
events; the mask's own kernels are listed apart), the peer's: CUDA events around its call.
Prints microseconds, the ratio and TFLOP/s (causal: 2 x 2 x s^2 x d x heads / 2).  A/B switches
(``LIGHTSPEED_CUDA_*``) apply as set in the environment.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("LIGHTSPEED_TRACE", str(Path(tempfile.gettempdir()) / f"gpu_attention_{os.getpid()}.json"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def graph(s: int, heads: int, kv: int, dim: int):
    import ml_dtypes

    import lightspeed as ls
    from lightspeed import hl
    from lightspeed.nn.attention import gqa_attention

    g = ls.Graph()
    q = g.input("q", (kv, heads // kv, "s", dim), dtype=ls.bfloat16)
    k = g.input("k", ("s", kv, dim), dtype=ls.bfloat16)
    v = g.input("v", ("s", kv, dim), dtype=ls.bfloat16)
    pos = g.input("positions", ("s",), dtype=ls.int64)
    blocked = hl.lt(pos.reshape(-1, 1), pos.reshape(1, -1))  # Step.mask_new's causal mask
    mask = hl.to(blocked, ls.bfloat16) * float(ml_dtypes.finfo(ml_dtypes.bfloat16).min)
    g.output("out", gqa_attention(q, k, v, mask))
    return g


def ours(s: int, heads: int, kv: int, dim: int, reps: int, backend: str, rng) -> tuple[float, float, str]:
    """(the attention kernel's median us a call, every kernel's us a call, its kernel kinds)."""
    import ml_dtypes

    import lightspeed as ls
    from lightspeed.backends import trace

    g = graph(s, heads, kv, dim)
    prog = g.compile(backend=backend, search=ls.SearchOptions(budget=3, seed=0, dims={"s": s}, progress=False))
    bf = ml_dtypes.bfloat16
    arrays = {"q": (rng.standard_normal((kv, heads // kv, s, dim)) * 0.125).astype(bf),
              "k": rng.standard_normal((s, kv, dim)).astype(bf), "v": rng.standard_normal((s, kv, dim)).astype(bf),
              "positions": np.arange(s, dtype=np.int64)}
    bound = prog.persist(arrays)  # on the device once: the calls time the kernels, not the uploads
    for _ in range(3):
        bound()
    before = len(trace.events())
    for _ in range(reps):
        bound()
    runs = [e for e in trace.events()[before:] if e.get("cat") == "run.kernel"]
    attention = [e["dur"] for e in runs if "attention" in e.get("args", {}).get("kernel", "")]
    per_call = len(attention) // reps or 1
    att = statistics.median(sum(attention[i:i + per_call]) for i in range(0, len(attention), per_call)) \
        if attention else float("nan")
    total = sum(e["dur"] for e in runs) / reps
    kinds = sorted({e.get("args", {}).get("kind", "?") for e in runs})
    return att, total, ",".join(kinds)


def peer(s: int, heads: int, kv: int, dim: int, reps: int) -> float:
    import torch
    import torch.nn.functional as F

    q = torch.randn(1, heads, s, dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, kv, s, dim, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, kv, s, dim, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq", default="32,512,4096")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv", type=int, default=8)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--no-peer", action="store_true")
    args = ap.parse_args()
    if args.heads % args.kv:
        ap.error("--heads must be a multiple of --kv")
    rng = np.random.default_rng(0)
    print(f"attention: {args.heads} heads, {args.kv} KV heads, head dim {args.dim}, bfloat16, causal; "
          f"backend {args.backend}", flush=True)
    print(f"{'seq':>6} {'ours us':>9} {'all kernels us':>15} {'torch sdpa us':>14} {'ratio':>7} "
          f"{'ours TFLOP/s':>13}  kinds")
    for s in (int(x) for x in args.seq.split(",")):
        t0 = time.perf_counter()
        att, total, kinds = ours(s, args.heads, args.kv, args.dim, args.reps, args.backend, rng)
        ref = float("nan") if args.no_peer else peer(s, args.heads, args.kv, args.dim, args.reps)
        flops = 2 * 2 * s * s * args.dim * args.heads / 2
        print(f"{s:>6} {att:>9.1f} {total:>15.1f} {ref:>14.1f} {att / ref:>6.2f}x {flops / att / 1e6:>13.1f}  {kinds}"
              f"  ({time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
