"""Batched paged decode (the program `lightspeed serve` runs) on one device: a Llama of a peer
shape with seeded random bf16 weights, ``PagedBatcher`` with N concurrent greedy sequences against
the same batcher with one, in one process.  Issue 24's GPU figure: 32 streams of the 1B shape.

    python benchmarks/gpu_serve.py [SHAPE] [--streams 1,8,32] [--prompt 32] [--tokens 32]
                                   [--backend cuda] [--check N] [--sample T,P] [--no-pipeline]
                                   [--buckets]

Prints per stream count: the decode steps' median time (every sequence decoding), aggregate
tokens/s over those steps, the ratio to one stream, and the batch-1 ``Generator`` TPOT of the
same weights (the non-paged decode program) for reference.  ``--check N``: the first N sequences
of the largest count are also run alone and must give the same greedy tokens (batch invariance;
the script exits 1 when one differs).  ``--sample T,P``: every sequence samples with temperature
T and top-p P (sequence i seeded i; the backend's sampler draws the step's rows together) instead
of greedy.  ``--no-pipeline``: each step waits for its ids before the next is queued
(``PagedBatcher(pipeline=False)``; an A/B switch).  ``--buckets``: steps of fewer than 8 rows
run a second program searched at one row (``PagedBatcher(batch_invariant=False)``).  Writes
``$OUT/gpu_serve.json`` when ``$OUT`` is set.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))


def decode_steps(batcher, prompts: list[list[int]], tokens: int, sampling: dict | None = None,
                 seeds: list[int] | None = None) -> tuple[list[float], list[list[int]]]:
    """Run ``prompts`` together (greedy, or ``sampling`` with sequence i seeded ``seeds[i]``); the
    wall time of each step in which every sequence decodes (prefill steps excluded) and each
    sequence's new tokens."""
    seeds = seeds or list(range(len(prompts)))
    seqs = [batcher.start(p, max_new_tokens=tokens, stop_ids=[], **(dict(sampling, seed=seed) if sampling else {}))
            for p, seed in zip(prompts, seeds)]
    times = []
    calls.clear()
    while True:
        live = [s for s in seqs if not s.done]
        if not live:
            break
        all_decoding = not any(s.prefilling for s in live)
        t0 = time.perf_counter()
        calls.append([t0])
        batcher.step(live)
        calls[-1].append(time.perf_counter())
        if all_decoding:
            times.append(time.perf_counter() - t0)
        else:
            calls.pop()
    for s in seqs:
        if s.pages:
            s.close()
    return times, [s.new_ids for s in seqs]


# per timed step: [start, the program's launch called, launch returned, step end] (host seconds)
calls: list[list[float]] = []


def timed_launches(program) -> None:
    """Record when each step calls and leaves the paged program's ``launch``: the host's work
    before the launch (page table, slots, inputs), the launch itself (uploads, graph launch)
    and the wait for the step's ids, split per step."""
    launch = program.launch

    def wrapped(*args, **kw):
        if calls:
            calls[-1].append(time.perf_counter())
        out = launch(*args, **kw)
        if calls:
            calls[-1].append(time.perf_counter())
        return out
    program.launch = wrapped


def host_split() -> str:
    """Median ms of the last run's steps: before the launch, in it, after it (the wait)."""
    full = [c for c in calls if len(c) == 4]
    if not full:
        return "host split: no launch recorded (the host path)"
    parts = [float(np.median([(c[k + 1] - c[k]) * 1e3 for c in full])) for k in range(3)]
    return f"host split (median ms): building {parts[0]:.3f}, launching {parts[1]:.3f}, waiting {parts[2]:.3f}"


def main() -> None:
    from gpu_decode import random_llama

    import lightspeed as ls
    from lightspeed.models.batch import PagedBatcher
    from lightspeed.models.generate import Generator

    args = sys.argv[1:]

    def opt(name: str, default: str) -> str:
        return args[args.index(name) + 1] if name in args else default

    values = {args[i + 1] for i, a in enumerate(args) if a.startswith("--") and i + 1 < len(args)}
    names = [a for a in args if not a.startswith("--") and a not in values]
    shape = names[0] if names else "llama-3.2-1b"
    streams = sorted({int(x) for x in opt("--streams", "1,8,32").split(",")} | {1})
    prompt, tokens = int(opt("--prompt", "32")), int(opt("--tokens", "32"))
    backend, check = opt("--backend", "cuda"), int(opt("--check", "4"))
    sampling = None
    if "--sample" in args:
        t, p = (float(v) for v in opt("--sample", "").split(","))
        sampling = dict(temperature=t, top_p=p)
    model, weights, wbytes, rng = random_llama(shape)
    vocab = model.config.vocab_size
    prompts = [[int(t) for t in rng.integers(3, vocab, prompt)] for _ in range(max(streams))]
    search = ls.SearchOptions(budget=4, seed=0, progress=False)

    t0 = time.perf_counter()
    gen = Generator(model, weights, backend=backend, search=search)
    gen.generate(prompts[0], max_new_tokens=4, stop_ids=[])
    single = gen.generate(prompts[0], max_new_tokens=tokens, stop_ids=[])
    tpot1 = float(np.median(single.step_s)) * 1e3
    print(f"{shape} on {backend}: Generator batch-1 TPOT {tpot1:.3f} ms ({1000 / tpot1:.1f} tok/s), "
          f"compiled in {time.perf_counter() - t0:.1f} s", flush=True)
    del gen

    t0 = time.perf_counter()
    batcher = PagedBatcher(model, weights, backend=backend, search=search, max_rows=max(streams),
                           chunk=min(max(streams), 16), max_context=prompt + tokens + 16,
                           pages=max(streams) * -(-(prompt + tokens) // model.PAGE_SIZE),
                           pipeline="--no-pipeline" not in args, batch_invariant="--buckets" not in args)
    print(f"paged program compiled in {time.perf_counter() - t0:.1f} s", flush=True)
    timed_launches(batcher.program)
    decode_steps(batcher, prompts[:2], 4)  # warm-up: plans and captures for small row counts
    out = {"date": time.strftime("%Y-%m-%d"), "shape": shape, "backend": backend, "prompt": prompt,
           "sampling": sampling, "pipeline": batcher.pipeline,
           "buckets": "--buckets" in args,
           "tokens": tokens, "generator_tpot_ms": round(tpot1, 4), "weight_GB": round(wbytes / 1e9, 3)}
    rows, base, outputs = [], None, {}
    for n in streams:
        decode_steps(batcher, prompts[:n], 2, sampling)  # this row count's first call (capture) untimed
        times, new = decode_steps(batcher, prompts[:n], tokens, sampling)
        split = host_split()
        outputs[n] = new
        step = float(np.median(times)) * 1e3
        tok_s = n * 1000 / step
        base = base or tok_s
        rows.append((n, step, tok_s, tok_s / base))
        out[f"streams_{n}"] = dict(step_ms=round(step, 4), tok_s=round(tok_s, 1), x_one=round(tok_s / base, 2))
        out[f"streams_{n}"]["host_split"] = split
        print(f"{n} streams: step {step:.3f} ms, {tok_s:.1f} tok/s; {split}", flush=True)
    same = True
    if check:
        n = max(streams)
        for i in range(min(check, n)):
            _, alone = decode_steps(batcher, [prompts[i]], tokens, sampling, [i])
            if alone[0] != outputs[n][i]:
                same = False
                print(f"sequence {i}: alone {alone[0][:8]}... beside {n - 1} others {outputs[n][i][:8]}...")
        out["batch_invariant"] = same
        out["checked"] = min(check, n)
    print(f"\n{'streams':>8} {'step ms':>9} {'tok/s':>9} {'x 1 stream':>11}")
    for n, step, tok_s, ratio in rows:
        print(f"{n:>8} {step:>9.3f} {tok_s:>9.1f} {ratio:>10.2f}x")
    print(f"Generator batch-1 TPOT {tpot1:.3f} ms ({1000 / tpot1:.1f} tok/s); "
          f"batch invariance ({out.get('checked', 0)} sequences alone vs beside the rest): {same}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_serve.json"), "w") as f:
            json.dump(out, f, indent=1)
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
