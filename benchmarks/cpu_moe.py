"""Mixture-of-experts decode on the CPU: lightspeed's ``native`` backend beside Hugging Face
transformers' ``Qwen3MoeForCausalLM`` in PyTorch eager (its grouped experts), same random float32
weights, same process.  The shape is Qwen3-MoE's with fewer and narrower parts (a 2-core machine
holds it): hidden 1024, 64 experts of 384, top 8, 2 layers by default.

    python benchmarks/cpu_moe.py [--layers 2] [--steps 24] [--prompt 16] [--threads 2]

Prints each system's decode TPOT (median of a generation's steps, best of 3 generations) and
how many of the greedy tokens agree (float32 sums in other orders may flip a near tie).
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def config(layers: int) -> dict:
    return dict(vocab_size=32000, hidden_size=1024, intermediate_size=2048, moe_intermediate_size=384,
                num_hidden_layers=layers, num_attention_heads=16, num_key_value_heads=4, head_dim=64, num_experts=64,
                num_experts_per_tok=8, norm_topk_prob=True, rms_norm_eps=1e-6, rope_theta=1e6,
                tie_word_embeddings=False, max_position_embeddings=4096, mlp_only_layers=[])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    import torch
    import transformers as tf

    import lightspeed as ls
    from lightspeed.models import from_hf_config
    from lightspeed.models.generate import Generator

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = config(args.layers)
    hf = tf.Qwen3MoeForCausalLM(tf.Qwen3MoeConfig(**cfg)).eval()
    weights = {k: v.detach().numpy().astype(np.float32) for k, v in hf.state_dict().items()}
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, cfg["vocab_size"], args.prompt)]

    model = from_hf_config({**cfg, "model_type": "qwen3_moe"}, dtype="float32")
    gen = Generator(model, weights, backend="native", search=ls.SearchOptions(budget=4, seed=0, progress=False))
    gen.generate(prompt, 4, stop_ids=[])
    ours, ours_ids = [], []
    for _ in range(3):
        res = gen.generate(prompt, args.steps, stop_ids=[])
        ours.append(float(np.median(res.step_s)) * 1e3)
        ours_ids = res.new_ids

    peer, peer_ids = [], []
    with torch.no_grad():
        for _ in range(3):
            out = hf(torch.tensor([prompt]), use_cache=True)
            past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
            ids, times = [int(tok)], []
            for _ in range(args.steps - 1):
                t0 = time.perf_counter()
                out = hf(tok, past_key_values=past, use_cache=True)
                past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
                times.append(time.perf_counter() - t0)
                ids.append(int(tok))
            peer.append(float(np.median(times)) * 1e3)
            peer_ids = ids

    agree = next((i for i, (a, b) in enumerate(zip(ours_ids, peer_ids)) if a != b), len(ours_ids))
    print(f"Qwen3-MoE shape, {args.layers} layers, 64 experts of 384, top 8; float32; prompt {args.prompt}, "
          f"{args.steps} steps, {args.threads} threads")
    print(f"{'system':<36} {'TPOT ms':>8} {'x eager':>8}")
    best_ours, best_peer = min(ours), min(peer)
    print(f"{'lightspeed native':<36} {best_ours:>8.2f} {best_ours / best_peer:>7.2f}x")
    print(f"{'transformers eager (grouped experts)':<36} {best_peer:>8.2f} {1.0:>7.2f}x")
    print(f"greedy tokens equal for the first {agree} of {len(ours_ids)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
