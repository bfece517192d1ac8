"""Tensor-parallel decode on this host: a smoke run, not the issue 13 measurement.

Decodes a Llama-shaped model with random weights at each ``--tp`` value
(``tensor_parallel_generator(model, weights, N)``: N processes joined by torch.distributed gloo) and
prints TTFT, TPOT and whether the greedy tokens equal the first value's.  On a CPU host the ranks
share the same cores and every layer costs two gloo collectives, so this checks the path end to
end; it does not show a speed-up.  The issue's measurement (Llama-3-8B-shaped bfloat16 decode at
TP 1/2/4 on the GPUs of one host, beside torch.compile, with % of the per-GPU bandwidth floor)
needs a multi-GPU kind (``nvidia-h200-x2``) and the NCCL path, which has not run yet
(docs/status.md, issue 13).

    python benchmarks/tp_decode.py [--tp 1 2] [--layers 4] [--hidden 512] [--heads 8] [--kv-heads 4]
                                   [--ffn 1408] [--vocab 8192] [--tokens 16] [--backend cpu]
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tp", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=1408)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--backend", default="cpu", choices=("cpu", "reference"))
    args = ap.parse_args()

    import lightspeed as ls
    from lightspeed.models import from_hf_config
    from lightspeed.models.run import random_weights
    from lightspeed.parallel import tensor_parallel_generator

    cfg = dict(model_type="llama", vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
               num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
               max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=500_000.0, tie_word_embeddings=False)
    model = from_hf_config(cfg)
    weights = random_weights(model, seed=0)
    prompt = list(range(1, 17))
    search = ls.SearchOptions(budget=2, seed=0)
    print(f"{model!r}, float32, {args.backend} backend, prompt {len(prompt)} tokens, {args.tokens} new")
    first = None
    for n in args.tp:
        t0 = time.perf_counter()
        gen = tensor_parallel_generator(model, weights, n, backend=args.backend, search=search)
        try:
            setup = time.perf_counter() - t0
            res = gen.generate(prompt, args.tokens, stop_ids=())
        finally:
            gen.close()
        first = res.new_ids if first is None else first
        same = "same tokens" if res.new_ids == first else "DIFFERENT TOKENS"
        print(f"tp {n}: start + compile {setup:.1f} s, TTFT {res.ttft_s * 1e3:.1f} ms, "
              f"TPOT {res.tpot_s * 1e3:.1f} ms ({same} as tp {args.tp[0]})")


if __name__ == "__main__":
    main()
