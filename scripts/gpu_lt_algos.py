"""How far cuBLASLt's first heuristic algorithm is from its fastest one on a prompt's products:
for each product of a Llama shape at ``--rows`` rows (x[m, k] @ W[n, k]^T, bf16, fp32 accumulate;
with ``--add`` the residual as C, beta 1), every algorithm the heuristic returns (up to
``--count``) timed on the GPU with events, and the first one's rank.

    python scripts/gpu_lt_algos.py [--shape llama-3.2-1b] [--rows 512] [--count 16] [--reps 50]

What it answers: whether timing the heuristic's candidates per plan (as the search times kernels)
would beat taking its first one (``cublaslt.Library.algorithm`` today).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

SHAPES = {  # hidden, ffn, heads, kv heads, head dim
    "llama-3.2-1b": (2048, 8192, 32, 8, 64),
    "llama-3-8b": (4096, 14336, 32, 8, 128),
}


def products(shape: str) -> list[tuple[str, int, int, bool]]:
    """(name, k, n, residual added) of one layer's products."""
    h, f, nh, kvh, hd = SHAPES[shape]
    return [("qkv", h, (nh + 2 * kvh) * hd, False), ("o + residual", nh * hd, h, True),
            ("gate/up", h, 2 * f, False), ("down + residual", f, h, True)]


def time_algorithm(torch, lt, call: tuple, results, i: int, tail: tuple, d, want, reps: int) -> tuple:
    """(index, median us, a note) of the heuristic's ``i``-th algorithm for ``call``."""
    algo = results[i]["algo"]
    try:
        for _ in range(3):
            lt.matmul(*call, algo.ctypes.data, *tail)
        torch.cuda.synchronize()
    except Exception as e:  # an algorithm the call refuses
        return i, float("inf"), f"refused: {e}"
    err = float((d.float() - want).abs().max() / want.abs().max())
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for a, b in events:
        a.record()
        lt.matmul(*call, algo.ctypes.data, *tail)
        b.record()
    torch.cuda.synchronize()
    us = float(np.median([a.elapsed_time(b) * 1e3 for a, b in events]))
    try:
        waves = f" waves {float(results[i]['waves_count']):.2f}"
    except Exception:
        waves = ""
    return i, us, f"max err {err:.1e} of the largest{waves}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="llama-3.2-1b", choices=sorted(SHAPES))
    ap.add_argument("--rows", type=int, default=512)
    ap.add_argument("--count", type=int, default=16)
    ap.add_argument("--reps", type=int, default=50)
    args = ap.parse_args()

    import torch

    from lightspeed.backends.cuda import cublaslt as ltm

    lib = ltm.Library()
    lt = lib.lt
    stream = torch.cuda.current_stream().cuda_stream
    work = torch.empty(ltm.WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    m = args.rows
    total_first = total_best = 0.0
    print(f"{args.shape} at {m} rows, bf16: each product's algorithms (us, median of {args.reps} launches)")
    for name, k, n, add in products(args.shape):
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") * 0.02
        res = torch.randn(m, n, dtype=torch.bfloat16, device="cuda")
        d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        # the op's b = W^T: b[kk, j] at j*k + kk (see cublaslt.plan_matmul)
        plan = ltm.LtPlan("bfloat16", n, m, k, 1, ltm.LtLayout(k, n, k, True), ltm.LtLayout(k, m, k),
                          ltm.LtLayout(n, m, n, batch_stride=m * n), 0, 0, 1.0 if add else 0.0)
        desc, la, lb, ld = lib.prepare(plan)
        results, found = lib.heuristics(plan, (256, 256, 256, 256), args.count)  # (torch's allocations)
        beta = lib._betas[plan.beta]
        c = res.data_ptr() if add else d.data_ptr()
        want = (x.float() @ w.float().T + (res.float() if add else 0)).to(torch.bfloat16).float()
        call = (lib.handle, desc, lib._alpha.ctypes.data, w.data_ptr(), la, x.data_ptr(), lb, beta.ctypes.data,
                c, ld, d.data_ptr(), ld)
        times = [time_algorithm(torch, lt, call, results, i, (work.data_ptr(), ltm.WORKSPACE_BYTES, stream), d,
                                want, args.reps) for i in range(found)]
        order = sorted(times, key=lambda t: t[1])
        first, best = times[0][1], order[0][1]
        total_first, total_best = total_first + first, total_best + best
        flop = 2 * m * n * k
        print(f"\n{name}: [{m} x {k}] @ [{k} x {n}]  {found} algorithms; first {first:.1f} us "
              f"({flop / first / 1e6:.0f} TFLOP/s), fastest #{order[0][0]} {best:.1f} us "
              f"({flop / best / 1e6:.0f} TFLOP/s), first/fastest {first / best:.2f}")
        for i, us, note in order[:6]:
            print(f"  #{i:<3} {us:8.1f} us  {note}")
    print(f"\na layer's four products: first algorithms {total_first:.1f} us, fastest {total_best:.1f} us "
          f"({total_first / total_best:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
