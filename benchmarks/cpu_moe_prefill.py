"""Mixture-of-experts prompts on the CPU (``native``): the experts' products one output an item,
grouped by expert (the default: kernels/matmul.grouped_gather_matmul_kernel) and in the dense
form, then a whole prompt's TTFT beside Hugging Face transformers' ``Qwen3MoeForCausalLM`` in
PyTorch eager (same random float32 weights, same process).  The shape is benchmarks/cpu_moe.py's
(hidden 1024, 64 experts of 384, top 8).

    python benchmarks/cpu_moe_prefill.py [--rows 1,16,128] [--prompt 128] [--layers 2] [--threads 2]

Prints, per row count, one experts layer's time (best of 5) in each form and the largest
difference from the one-output-an-item result (the grouped form: 0, bit for bit), then the TTFT
(best of 3) of lightspeed with the prompt's experts gathered (the default on a host backend) and
dense, and of transformers, with each system's first greedy token.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def experts_table(rows: list[int]) -> None:
    from tests.backends.test_gather_matmul import _with_gather_matmul

    import lightspeed as ls
    from lightspeed.backends import get_backend
    from lightspeed.backends.codegen.kernels import matmul as matmul_module
    from lightspeed.nn import Builder
    from lightspeed.nn.moe import Experts

    native = get_backend("native")
    n_exp, inter, hidden, top = 64, 384, 1024, 8

    def graph(mode: str) -> ls.Graph:
        b = Builder(dtype=ls.float32)
        g = b.graph
        ex = Experts("ex", hidden, inter, n_exp, "silu")
        g.output("y", ex.forward(b, g.input("x", ("s", hidden)), g.input("w", ("s", top)),
                                 g.input("idx", ("s", top), ls.int64), mode))
        return g

    rng = np.random.default_rng(0)
    weights = {"ex.gate_up_proj": (rng.standard_normal((n_exp, 2 * inter, hidden)) * 0.03).astype(np.float32),
               "ex.down_proj": (rng.standard_normal((n_exp, hidden, inter)) * 0.03).astype(np.float32)}

    def best(prog, ins) -> tuple[float, np.ndarray]:
        p = prog.persist(weights)
        out = np.asarray(p(ins)["y"])
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            p(ins)
            ts.append(time.perf_counter() - t0)
        return min(ts) * 1e3, out

    print(f"one experts layer ({n_exp} experts of {inter}, top {top}, hidden {hidden}), ms, best of 5:")
    print(f"{'rows':>6} {'one output an item':>20} {'grouped (default)':>18} {'dense':>10}  grouped = one-an-item")
    g = graph("gather")
    lp = _with_gather_matmul(native, g)
    grouped = native.lower(g, lp)
    matmul_module.GROUPED = False
    plain = native.lower(g, lp)
    matmul_module.GROUPED = True
    for s in rows:
        ins = {"x": rng.standard_normal((s, hidden)).astype(np.float32),
               "w": rng.uniform(0.1, 1, (s, top)).astype(np.float32),
               "idx": np.stack([rng.choice(n_exp, top, replace=False) for _ in range(s)]).astype(np.int64)}
        tp, op = best(plain, ins)
        tg, og = best(grouped, ins)
        dense = graph("dense").compile(backend="native", search=ls.SearchOptions(budget=3, seed=0, dims={"s": s},
                                                                                 progress=False))
        td, od = best(dense, ins)
        print(f"{s:>6} {tp:>20.2f} {tg:>18.2f} {td:>10.2f}  {'yes' if np.array_equal(og, op) else 'NO'}"
              f" (dense max |diff| {np.abs(od - op).max():.1e})")


def ttft(prompt_len: int, layers: int, threads: int) -> None:
    import torch
    import transformers as tf
    from cpu_moe import config

    import lightspeed as ls
    from lightspeed.models import from_hf_config
    from lightspeed.models.generate import Generator

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = config(layers)
    hf = tf.Qwen3MoeForCausalLM(tf.Qwen3MoeConfig(**cfg)).eval()
    weights = {k: v.detach().numpy().astype(np.float32) for k, v in hf.state_dict().items()}
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, cfg["vocab_size"], prompt_len)]
    print(f"\nQwen3-MoE shape ({layers} layers), a {prompt_len}-token prompt: TTFT ms, best of 3")
    for label, mode in (("lightspeed native, experts gathered (auto)", "auto"), ("lightspeed native, dense", "dense")):
        model = from_hf_config({**cfg, "model_type": "qwen3_moe"}, dtype="float32")
        model = type(model)(dataclasses.replace(model.config, moe_prefill=mode), dtype="float32")
        gen = Generator(model, weights, backend="native", search=ls.SearchOptions(budget=4, seed=0, progress=False))
        gen.generate(prompt, 1, stop_ids=[])
        res = [gen.generate(prompt, 1, stop_ids=[]) for _ in range(3)]
        print(f"{label:44s} {min(r.ttft_s for r in res) * 1e3:9.1f}   first token {res[-1].new_ids[0]}")
    with torch.no_grad():
        ts, out = [], None
        for _ in range(3):
            t0 = time.perf_counter()
            out = hf(torch.tensor([prompt]))
            ts.append(time.perf_counter() - t0)
    print(f"{'transformers eager (torch ' + torch.__version__ + ')':44s} {min(ts) * 1e3:9.1f}   first token "
          f"{int(out.logits[0, -1].argmax())}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="1,16,128")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    experts_table([int(r) for r in args.rows.split(",") if r])
    if args.prompt:
        ttft(args.prompt, args.layers, args.threads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
