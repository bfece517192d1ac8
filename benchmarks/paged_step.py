"""The paged step in process at 1 and N rows (``lightspeed serve``'s batched decode, issue 24):
the real SmolLM2 Q4_1 file loaded as the server loads it, ``PagedBatcher`` on ``--backend``
(native), sequences of ``--prompt`` random tokens; the median of ``--steps`` decode steps after
``--warmup``, for each row count, and N rows' tokens/s over one row's.

    python benchmarks/paged_step.py [--rows 1,8] [--steps 25] [--prompt 40] [--backend native]
                                    [--temperature 0.7 --top-p 0.9 [--host-sampler]]

``--temperature`` (with ``--top-k``/``--top-p``): sampled rows, drawn by the backend's sampler
(native's C kernel; ``--host-sampler``: numpy's, the host sampler) instead of greedy argmaxes.
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
    ap.add_argument("--dtype", default="float32", help="float32: the file's blocks kept (native); bfloat16: converted")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-k", type=int, default=None)
    ap.add_argument("--top-p", type=float, default=None)
    ap.add_argument("--host-sampler", action="store_true", help="sample in numpy on the host")
    args = ap.parse_args()
    if args.host_sampler:
        from lightspeed.models import batch

        batch.token_sampler = lambda backend: None
    from lightspeed.models import run as library
    from lightspeed.search import SearchOptions

    counts = [int(r) for r in args.rows.split(",")]
    tm = library.load_text_model(args.family, lazy=library.blocks_for(args.backend) and args.dtype == "float32",
                                 dtype=args.dtype, progress=False)
    batcher = library.compile_batcher(tm, args.backend, SearchOptions(budget=3), max_batch=max(counts), say=None)
    rng = np.random.default_rng(0)
    vocab = tm.model.config.vocab_size
    times = {}
    for n in counts:
        tokens = args.prompt + 4 * (args.warmup + args.steps) + 64  # never reached: every step decodes n rows
        sampling = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
        seqs = [batcher.start(rng.integers(0, vocab, args.prompt).tolist(), tokens, stop_ids=(), seed=i, **sampling)
                for i in range(n)]
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
    how = "greedy" if args.temperature == 0 else (f"T {args.temperature} top-k {args.top_k} top-p {args.top_p}, "
                                                   f"{'numpy' if args.host_sampler else 'the backend'}'s sampler")
    print(f"| rows | step ms | tokens/s | over 1 row |  ({args.family}, {args.backend}, {args.dtype}, "
          f"prompt {args.prompt}, {how})")
    print("|---|---|---|---|")
    base = counts[0] / times[counts[0]]
    for n in counts:
        print(f"| {n} | {times[n] * 1e3:.2f} | {n / times[n]:.1f} | {n / times[n] / base:.2f}x |")


if __name__ == "__main__":
    main()
