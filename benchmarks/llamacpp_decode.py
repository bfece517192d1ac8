"""SmolLM2-135M-Instruct decode on the CPU: lightspeed (the file ``lightspeed run llama`` loads, its
Q4_1 blocks dequantised to float32) beside llama.cpp on the same GGUF file, in one run.

    pip install ../shared/wheels/llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl   # the peer
    python benchmarks/llamacpp_decode.py [--steps 48] [--rounds 3] [--backend native --backend cpu]

Every system starts from the same prompt tokens and decodes greedily; TPOT is the median step of
every round (rounds interleaved, so a load spike hits all alike).  llama.cpp runs with 2 threads
and reads the Q4_1 blocks as they are (a quarter of the bytes lightspeed reads today).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared" / "wheels"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backend", action="append", choices=["cpu", "native"])
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()

    import lightspeed as ls
    from lightspeed.cli import load_text_model
    from lightspeed.models.generate import Generator

    tm = load_text_model("llama", progress=False)
    prompt = tm.tokenizer.encode("The capital of France is")
    systems = {}
    for b in args.backend or ["native", "cpu"]:
        gen = Generator(tm.model, tm.tensors, backend=b, search=ls.SearchOptions(budget=3, seed=0))

        def run(gen=gen) -> list[float]:
            return gen.generate(prompt, max_new_tokens=args.steps, stop_ids=()).step_s
        systems[f"lightspeed {b} (f32 from Q4_1)"] = run
    try:
        try:
            import llama_portable  # noqa: F401  (points ggml at the wheel's CPU variants)
        except ImportError:
            pass
        from llama_cpp import Llama

        llm = Llama(str(tm.source), n_threads=args.threads, n_ctx=512, verbose=False, logits_all=False)

        def run_llama() -> list[float]:
            llm.reset()
            llm.eval(prompt)
            steps = []
            for _ in range(args.steps):
                tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
                t = time.perf_counter()
                llm.eval([tok])
                steps.append(time.perf_counter() - t)
            return steps
        systems[f"llama.cpp Q4_1 ({args.threads} threads)"] = run_llama
    except ImportError as e:
        print(f"llama.cpp not measured: {e}")
    times: dict[str, list[float]] = {k: [] for k in systems}
    for _ in range(args.rounds):
        for name, run in systems.items():
            times[name] += run()[1:]  # the first step warms up
    print(f"SmolLM2-135M-Instruct ({Path(tm.source).name}), greedy, {args.steps} steps x {args.rounds} rounds")
    base = statistics.median(next(iter(times.values())))
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"  {name:38s} TPOT {med * 1e3:7.2f} ms   ({med / base:.2f}x the first)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
