"""Where a decode step's time goes on the GPU host (no Nsight Systems there): PyTorch's profiler
(CUPTI) records every kernel of the process -- ours, launched through the CUDA driver from CUDA
graphs, included -- over some steps of lightspeed's decode and of torch.compile's, and
scripts/step_timeline.py splits the timeline into steps: kernel time, gaps inside a step, idle time
between steps (the host's part), the kernels that cost most.

    python scripts/gpu_profile.py [SHAPE ...] [--steps 24] [--no-peer] [--paged N]   (traces under $OUT)

``--prefill N``: an N-token prompt's prefill instead of decode steps (ours: ``generate`` of one
token, repeated; the peer: ``torch.compile(mode="max-autotune-no-cudagraphs")`` over the prompt,
as benchmarks/peer_torch_decode.py --prefill times it), each repeat one "step" of the summary.
``--paged N``: the paged batched program instead (``lightspeed serve``'s: ``PagedBatcher``, N
greedy sequences decoding together), to compare its step with the batch-1 program's.
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))


def profiled(fn, path: Path) -> None:
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(path))


def ours(name: str, steps: int, path: Path) -> None:
    from gpu_decode import random_llama
    from peer_torch_decode import SHAPES

    import lightspeed as ls
    from lightspeed.models.generate import Generator

    model, weights, _, rng = random_llama(name)
    gen = Generator(model, weights, backend="cuda", search=ls.SearchOptions(budget=4, seed=0, progress=False))
    ids = list(rng.integers(0, SHAPES[name]["vocab"], 32))
    gen.generate(ids, max_new_tokens=4, stop_ids=[])
    profiled(lambda: gen.generate(ids, max_new_tokens=steps, stop_ids=[]), path)


def ours_prefill(name: str, repeats: int, path: Path, prompt: int) -> None:
    from gpu_decode import random_llama

    import lightspeed as ls
    from lightspeed.models.generate import Generator

    model, weights, _, rng = random_llama(name)
    gen = Generator(model, weights, backend="cuda", search=ls.SearchOptions(budget=4, seed=0, progress=False))
    ids = [int(t) for t in rng.integers(3, model.config.vocab_size, prompt)]
    for _ in range(2):
        gen.generate(ids, max_new_tokens=1, stop_ids=[])

    def loop():
        for _ in range(repeats):
            gen.generate(ids, max_new_tokens=1, stop_ids=[])
    profiled(loop, path)


def peer_prefill(name: str, repeats: int, path: Path, prompt: int) -> None:
    import peer_torch_decode as p
    import torch

    c = p.SHAPES[name]
    torch.manual_seed(0)
    with torch.device("cuda"):
        m = p.LM(c, max(1024, prompt), torch.bfloat16).to(torch.bfloat16)
    m.eval()
    f = torch.compile(m, mode="max-autotune-no-cudagraphs", fullgraph=True)
    idx = torch.randint(0, c["vocab"], (1, prompt), device="cuda")
    pos = torch.arange(prompt, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            f(idx, pos)

        def loop():
            for _ in range(repeats):
                f(idx, pos)
                torch.cuda._sleep(1000)  # a marker kernel (spin_kernel) after each prefill: one a "step"
                torch.cuda.synchronize()
        profiled(loop, path)


def paged(name: str, steps: int, path: Path, streams: int) -> None:
    from gpu_decode import random_llama
    from gpu_serve import decode_steps

    import lightspeed as ls
    from lightspeed.models.batch import PagedBatcher

    model, weights, _, rng = random_llama(name)
    prompts = [[int(t) for t in rng.integers(3, model.config.vocab_size, 32)] for _ in range(streams)]
    batcher = PagedBatcher(model, weights, backend="cuda", search=ls.SearchOptions(budget=4, seed=0, progress=False),
                           max_rows=streams, chunk=min(streams, 16), max_context=32 + steps + 16,
                           pages=streams * -(-(32 + steps + 8) // model.PAGE_SIZE))
    decode_steps(batcher, prompts, 4)  # plans and captures for this row count
    profiled(lambda: decode_steps(batcher, prompts, steps), path)


def peer(name: str, steps: int, path: Path) -> None:
    import peer_torch_decode as p
    import torch

    c = p.SHAPES[name]
    torch.manual_seed(0)
    with torch.device("cuda"):
        m = p.LM(c, 1024, torch.bfloat16).to(torch.bfloat16)
    m.eval()
    step = torch.compile(m, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        tok = torch.zeros(1, 1, dtype=torch.long, device="cuda")
        for i in range(4):
            step(tok, torch.tensor([32 + i], device="cuda"))

        def loop():
            t = tok
            for i in range(steps):
                t = step(t, torch.tensor([36 + i], device="cuda"))[:, -1:].argmax(-1)

        profiled(loop, path)


def main() -> None:
    args = sys.argv[1:]
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 24
    names = [a for a in args if not a.startswith("--") and not a.isdigit()] or ["llama-3.2-1b"]
    out = Path(os.environ.get("OUT", "/tmp/gpu-out"))
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        runs = [("lightspeed", ours, ["--sequence"])]
        if "--prefill" in args:
            n = int(args[args.index("--prefill") + 1])
            runs = [(f"lightspeed prefill {n}", lambda *a, n=n: ours_prefill(*a, prompt=n), ["--sequence"])]
            if "--no-peer" not in args:
                runs.append((f"torch.compile max-autotune prefill {n}", lambda *a, n=n: peer_prefill(*a, prompt=n),
                             ["--marker", "spin_kernel"]))
        elif "--paged" in args:
            n = int(args[args.index("--paged") + 1])
            runs = [(f"lightspeed paged x{n}", lambda *a, n=n: paged(*a, streams=n), ["--sequence"])]
        if "--no-peer" not in args and "--prefill" not in args:  # its loop never waits: steps split after each argmax
            runs.append(("torch.compile", peer, ["--marker", "ArgMax"]))
        for label, fn, extra in runs:
            path = Path("/tmp") / f"trace-{label.replace(' ', '_')}-{name}.json"
            fn(name, steps, path)
            res = subprocess.run([sys.executable, str(ROOT / "scripts" / "step_timeline.py"), str(path), "--name",
                                  f"{label} {name}", *extra], capture_output=True, text=True)
            print(res.stdout + res.stderr, flush=True)
            with open(path, "rb") as src, gzip.open(out / f"{path.stem}.json.gz", "wb") as dst:
                shutil.copyfileobj(src, dst)  # the whole timeline, for a closer look off the host
            (out / f"steps-{label.replace('.', '_').replace(' ', '_')}-{name}.txt").write_text(res.stdout + res.stderr)


if __name__ == "__main__":
    main()
