"""Where the host's time goes in a prompt's first token on cuda (the TTFT beyond the prefill's
kernels): cProfile over repeated ``Generator.generate(prompt, max_new_tokens=1)`` calls of a
random-weight Llama shape, after a warm-up, with the TTFT and prefill time of each call.

    python scripts/gpu_host_profile.py [SHAPE] [--prompt 512] [--repeats 20]
"""

from __future__ import annotations

import cProfile
import pstats
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))


def stages(gen, ids, repeats: int) -> None:
    """The first token's host path split at marks (each a wrapped function's entry or exit; a
    few microseconds of wrapping each): median milliseconds from one mark to the next."""
    import time

    from lightspeed import program
    from lightspeed.backends.codegen import program as kernel_program
    from lightspeed.backends.cuda import driver, executor
    from lightspeed.backends.cuda import program as cuda_program
    from lightspeed.models import generate

    marks: list[tuple[str, float]] = []
    points = [(generate.GenerationState, "advance", "advance"), (generate, "cache_buffers", "cache_buffers"),
              (program.Program, "__call__", "prefill call"), (program.Program, "bind", "bind"),
              (kernel_program.KernelProgram, "execute", "kernel execute"),
              (executor.GpuExecutor, "run", "executor run"), (driver.Device, "launch_graph", "graph launch"),
              (cuda_program.CudaProgram, "deliver", "deliver")]
    saved = []
    for owner, attr, label in points:
        fn = getattr(owner, attr)
        saved.append((owner, attr, fn))

        def wrapped(*a, _fn=fn, _label=label, **k):
            marks.append((_label + " in", time.perf_counter()))
            try:
                return _fn(*a, **k)
            finally:
                marks.append((_label + " out", time.perf_counter()))
        setattr(owner, attr, wrapped)
    rows: dict[tuple[str, str], list[float]] = {}
    try:
        for _ in range(repeats):
            marks.clear()
            gen.generate(ids, max_new_tokens=1, stop_ids=[])
            for (a, ta), (b, tb) in zip(marks, marks[1:]):
                rows.setdefault((a, b), []).append((tb - ta) * 1e3)
    finally:
        for owner, attr, fn in saved:
            setattr(owner, attr, fn)
    print("\nthe first token's host path, mark to mark (median ms over the calls; one line a pair):")
    for (a, b), ms in rows.items():
        print(f"  {a:>22} -> {b:<22} {np.median(ms):8.3f}  (x{len(ms) / repeats:.0f})")


def main() -> None:
    from gpu_decode import random_llama

    import lightspeed as ls
    from lightspeed.models.generate import Generator

    args = sys.argv[1:]
    name = next((a for a in args if not a.startswith("--") and not a.isdigit()), "llama-3.2-1b")
    prompt = int(args[args.index("--prompt") + 1]) if "--prompt" in args else 512
    repeats = int(args[args.index("--repeats") + 1]) if "--repeats" in args else 20
    model, weights, _, rng = random_llama(name)
    gen = Generator(model, weights, backend="cuda", search=ls.SearchOptions(budget=4, seed=0, progress=False))
    ids = [int(t) for t in rng.integers(3, model.config.vocab_size, prompt)]
    for _ in range(3):
        gen.generate(ids, max_new_tokens=1, stop_ids=[])
    from lightspeed.backends import get_backend

    executor = get_backend("cuda").executor  # (the Generator's: backends are one per name)
    before = getattr(executor, "captures", 0)
    plain = [gen.generate(ids, max_new_tokens=1, stop_ids=[]).ttft_s * 1e3 for _ in range(repeats)]
    print(f"{name} prompt {prompt}: TTFT median {np.median(plain):.3f} ms without the profiler; "
          f"{getattr(executor, 'captures', 0) - before} graphs captured in those {repeats} calls")
    # without the profiler: the host's time before the graph launch (a call's checks, the caches,
    # the table) and from the launch to the token (the kernels, then the copy back)
    import time

    from lightspeed.backends.cuda import driver

    marks: list[float] = []
    launch = driver.Device.launch_graph

    def timed_launch(self, *a, **k):
        marks.append(time.perf_counter())
        return launch(self, *a, **k)

    driver.Device.launch_graph = timed_launch
    before_launch, after_launch = [], []
    for _ in range(repeats):
        marks.clear()
        t0 = time.perf_counter()
        gen.generate(ids, max_new_tokens=1, stop_ids=[])
        t1 = time.perf_counter()
        if marks:
            before_launch.append((marks[0] - t0) * 1e3)
            after_launch.append((t1 - marks[-1]) * 1e3)
    driver.Device.launch_graph = launch
    if before_launch:
        print(f"without the profiler: {np.median(before_launch):.3f} ms from the call to the graph launch, "
              f"{np.median(after_launch):.3f} ms from the launch to the token (kernels included)")
    stages(gen, ids, repeats)
    ttft, pre = [], []
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(repeats):
        res = gen.generate(ids, max_new_tokens=1, stop_ids=[])
        ttft.append(res.ttft_s * 1e3)
        pre.append(res.prefill_s * 1e3)
    prof.disable()
    print(f"profiled: TTFT median {np.median(ttft):.3f} ms, prefill call {np.median(pre):.3f} ms "
          f"(over {repeats})")
    for key in ("tottime", "cumulative"):
        print(f"\n== by {key} (ms per call = total / {repeats})")
        pstats.Stats(prof).sort_stats(key).print_stats(28)


if __name__ == "__main__":
    main()
