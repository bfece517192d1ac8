"""The paged prefix cache in process (``lightspeed serve``'s KV pool, issue 24): the time to the first
token of a request whose prompt begins with an earlier request's (a chat's next turn, a shared
system prompt), with the cache and without, on the real SmolLM2 Q4_1 file loaded as the server
loads it, and whether the greedy tokens are the same.

    python benchmarks/prefix_cache.py [--shared 512,1024] [--tail 16] [--tokens 8] [--backend native]

Per shared length: a first request of ``shared`` random tokens + a tail runs to the end; then a
second of the same ``shared`` tokens + another tail, timed from its start to its first token, in a
batcher with the prefix cache and in one without (each its own pool; the second compile comes from
the compile cache: the same program).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def ttft(batcher, prompt: list[int], tokens: int) -> tuple[float, list[int], int]:
    """Seconds from start to the first token, the greedy tokens, the prompt tokens read from the cache."""
    t0 = time.perf_counter()
    s = batcher.start(prompt, tokens, stop_ids=())
    first = None
    while not s.done:
        batcher.step([s])
        if first is None and len(s.ids) > len(prompt):
            first = time.perf_counter() - t0
    return first, s.new_ids, s.cached


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shared", default="512,1024")
    ap.add_argument("--tail", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--backend", default="native")
    args = ap.parse_args()
    from lightspeed.models import run as library
    from lightspeed.search import SearchOptions

    shared = [int(n) for n in args.shared.split(",")]
    tm = library.load_text_model("llama", lazy=library.blocks_for(args.backend), progress=False)
    context = max(shared) + args.tail + args.tokens + 64
    cached, plain = (library.compile_batcher(tm, args.backend, SearchOptions(budget=3), max_batch=1, say=None,
                                             max_context=context, prefix_cache=on) for on in (True, False))
    rng = np.random.default_rng(0)
    vocab = tm.model.config.vocab_size
    print(f"| shared tokens | prompt | TTFT cached ms | TTFT uncached ms | speed-up | cached tokens | same tokens |"
          f"  (llama SmolLM2 Q4_1, {args.backend})")
    print("|---|---|---|---|---|---|---|")
    for n in shared:
        head = rng.integers(3, vocab, n).tolist()
        first, second = (head + rng.integers(3, vocab, args.tail).tolist() for _ in range(2))
        for b in (cached, plain):
            ttft(b, first, args.tokens)  # the earlier request (the cache's pages, or nothing)
        hit, got, n_cached = ttft(cached, second, args.tokens)
        miss, want, _ = ttft(plain, second, args.tokens)
        print(f"| {n} | {len(second)} | {hit * 1e3:.1f} | {miss * 1e3:.1f} | {miss / hit:.1f}x | {n_cached} | "
              f"{got == want} |")


if __name__ == "__main__":
    main()
