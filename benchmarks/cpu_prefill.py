"""Prefill (time to first token) of a SmolLM2-135M-shaped Llama (random weights, float32) on the
``native`` backend, beside Hugging Face's ``LlamaForCausalLM`` in PyTorch eager on the same
weights, in one run:

    python benchmarks/cpu_prefill.py [--prompts 64,256] [--layers 30] [--repeats 3]

Prints, per prompt length, lightspeed's TTFT (``Generator.generate``'s prefill plus the first
sampled token; best of ``--repeats`` after a warm-up) and PyTorch's forward over the prompt (best
of the same repeats, ``torch.no_grad``, the threads torch was given), their ratio, and the
GFLOP/s of the weight products (2 x non-embedding params x tokens over lightspeed's time).  The
two must agree on the first greedy token (checked).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import lightspeed as ls
from lightspeed.models import from_hf_config
from lightspeed.models.generate import Generator

CONFIG = dict(model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
              num_attention_heads=9, num_key_value_heads=3, head_dim=64, rms_norm_eps=1e-5, rope_theta=10000.0,
              tie_word_embeddings=True, bos_token_id=1, eos_token_id=-1, max_position_embeddings=8192)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", default="64,256", help="comma-separated prompt lengths")
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    cfg = {**CONFIG, "num_hidden_layers": args.layers}
    model = from_hf_config(cfg, dtype="float32")
    rng = np.random.default_rng(0)
    weights = {n: (rng.standard_normal(s, dtype=np.float32) * 0.02 + (1.0 if "norm" in n else 0.0))
               for n, s in model.param_shapes().items()}
    t0 = time.perf_counter()
    gen = Generator(model, weights, backend="native", search=ls.SearchOptions(budget=4, seed=0, progress=False))
    print(f"native compile {time.perf_counter() - t0:.1f} s (programs compile on first use)")

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    hf_cfg = {k: v for k, v in cfg.items() if k not in ("model_type", "bos_token_id", "eos_token_id")}
    hf = LlamaForCausalLM(LlamaConfig(**hf_cfg))
    hf.load_state_dict({n: torch.from_numpy(a) for n, a in weights.items()}, strict=False)
    hf.eval()
    params = sum(a.size for n, a in weights.items() if "embed" not in n and "norm" not in n)
    print(f"{'tokens':>7} {'lightspeed ms':>14} {'PyTorch eager ms':>17} {'ours / eager':>13} {'GFLOP/s':>8}")
    for n in [int(x) for x in args.prompts.split(",")]:
        ids = [int(t) for t in rng.integers(0, cfg["vocab_size"], n)]
        gen.generate(ids, max_new_tokens=1, stop_ids=[])  # warm-up: the program for this length's bucket
        ours = min(gen.generate(ids, max_new_tokens=1, stop_ids=[]).ttft_s for _ in range(args.repeats))
        first = gen.generate(ids, max_new_tokens=1, stop_ids=[]).new_ids[0]
        with torch.no_grad():
            x = torch.tensor([ids])
            hf(x)
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                logits = hf(x).logits
                times.append(time.perf_counter() - t)
        peer = min(times)
        want = int(logits[0, -1].argmax())
        if first != want:
            raise SystemExit(f"first greedy token differs at {n} tokens: lightspeed {first}, PyTorch {want}")
        print(f"{n:>7} {ours * 1e3:>14.1f} {peer * 1e3:>17.1f} {ours / peer:>12.2f}x "
              f"{2 * params * n / ours / 1e9:>8.1f}")


if __name__ == "__main__":
    main()
