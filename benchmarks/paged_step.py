"""The paged step in process at 1 and N rows (``lightspeed serve``'s batched decode, issue 24):
the real SmolLM2 Q4_1 file loaded as the server loads it, ``PagedBatcher`` on ``--backend``
(native), sequences of ``--prompt`` random tokens; the median of ``--steps`` decode steps after
``--warmup``, for each row count, and N rows' tokens/s over one row's.

    python benchmarks/paged_step.py [--rows 1,8] [--steps 25] [--prompt 40] [--backend native]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1,8")
    ap.add_argument("--steps", type=int, default=25)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--prompt", type=int, default=40)
    ap.add_argument("--backend", default="native")
    ap.add_argument("--family", default="llama")
    args = ap.parse_args()
    from lightspeed.models import run as library
    from lightspeed.search import SearchOptions

    counts = [int(r) for r in args.rows.split(",")]
    tm = library.load_text_model(args.family, lazy=library.blocks_for(args.backend), progress=False)
    batcher = library.compile_batcher(tm, args.backend, SearchOptions(budget=3), max_batch=max(counts), say=None)
    rng = np.random.default_rng(0)
    vocab = tm.model.config.vocab_size
    times = {}
    for n in counts:
        tokens = args.prompt + 4 * (args.warmup + args.steps) + 64  # never reached: every step decodes n rows
        seqs = [batcher.start(rng.integers(0, vocab, args.prompt).tolist(), tokens, stop_ids=()) for _ in range(n)]
        while any(s.prefilling for s in seqs):
            batcher.step(seqs)
        for _ in range(args.warmup):
            batcher.step(seqs)
        ts = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            made = batcher.step(seqs)
            ts.append(time.perf_counter() - t0)
            if len(made) != n:  # every timed step decodes all n sequences
                raise SystemExit(f"a step of {n} sequences made {len(made)} tokens (a stop token?)")
        for s in seqs:
            s.cancel()
        batcher.step([])
        times[n] = statistics.median(ts)
    print(f"| rows | step ms | tokens/s | over 1 row |  ({args.family}, {args.backend}, prompt {args.prompt})")
    print("|---|---|---|---|")
    base = counts[0] / times[counts[0]]
    for n in counts:
        print(f"| {n} | {times[n] * 1e3:.2f} | {n / times[n]:.1f} | {n / times[n] / base:.2f}x |")


if __name__ == "__main__":
    main()
