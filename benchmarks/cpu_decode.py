"""Decode step of a SmolLM2-135M-shaped Llama (random weights, float32) on the cpu backend, next to
PyTorch eager on the same weights and the BLAS floor, all in one run.

    python benchmarks/cpu_decode.py [--layers 30] [--past 128] [--steps 20] [--budget 2]

Rows: lightspeed's decode program (the one `lightspeed.generate` compiles); "BLAS only": the
step's 7 x layers + 1 matrix-vector products back to back in numpy (the floor of a numpy backend:
reading every weight once); PyTorch eager as Hugging Face's LlamaForCausalLM with its KV cache
(when transformers is installed) and as a minimal hand-written model with a preallocated cache.
Thread counts: set OPENBLAS_NUM_THREADS / --torch-threads (the machine's other load changes
OpenBLAS's multi-threaded GEMV by orders of magnitude; report what was used).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import lightspeed as ls  # noqa: E402
from lightspeed.generate import compile_model  # noqa: E402
from lightspeed.models import from_hf_config  # noqa: E402

SMOLLM2_135M = dict(model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                    num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                    rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True,
                    max_position_embeddings=8192, hidden_act="silu", bos_token_id=1, eos_token_id=2)


def timed(fn, steps: int) -> list[float]:
    fn()
    out = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def fmt(ts: list[float]) -> str:
    return f"median {statistics.median(ts) * 1e3:8.2f} ms   min {min(ts) * 1e3:8.2f} ms"


def torch_minimal(cfg: dict, weights: dict, past: int, steps: int, threads: int) -> list[float]:
    """A plain eager Llama step (gpt-fast style) with a preallocated cache, on the same weights."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    L, D, H, KV, hd = (cfg[k] for k in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                                        "num_key_value_heads", "head_dim"))
    w = {k: torch.from_numpy(v) for k, v in weights.items()}
    kc = [torch.randn(KV, past + steps + 2, hd) for _ in range(L)]
    vc = [torch.randn(KV, past + steps + 2, hd) for _ in range(L)]
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
    eps = cfg["rms_norm_eps"]
    pos = [past]

    def rope(x, cos, sin):
        x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    @torch.no_grad()
    def step():
        p = pos[0]
        f = p * inv
        cos, sin = f.cos(), f.sin()
        x = w["model.embed_tokens.weight"][5][None]
        for i in range(L):
            pre = f"model.layers.{i}."
            h = F.rms_norm(x, (D,), w[pre + "input_layernorm.weight"], eps)
            q = (h @ w[pre + "self_attn.q_proj.weight"].T).view(H, 1, hd)
            k = (h @ w[pre + "self_attn.k_proj.weight"].T).view(KV, 1, hd)
            v = (h @ w[pre + "self_attn.v_proj.weight"].T).view(KV, 1, hd)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            kc[i][:, p] = k[:, 0]
            vc[i][:, p] = v[:, 0]
            y = F.scaled_dot_product_attention(q[None], kc[i][None, :, :p + 1], vc[i][None, :, :p + 1],
                                               enable_gqa=True)
            x = x + y.reshape(1, H * hd) @ w[pre + "self_attn.o_proj.weight"].T
            h = F.rms_norm(x, (D,), w[pre + "post_attention_layernorm.weight"], eps)
            x = x + (F.silu(h @ w[pre + "mlp.gate_proj.weight"].T) * (h @ w[pre + "mlp.up_proj.weight"].T)) \
                @ w[pre + "mlp.down_proj.weight"].T
        return F.rms_norm(x, (D,), w["model.norm.weight"], eps) @ w["model.embed_tokens.weight"].T

    return timed(step, steps)


def torch_hf(cfg: dict, weights: dict, past: int, steps: int, threads: int) -> list[float] | None:
    try:
        import torch
        import transformers as tf
    except ImportError:
        return None
    torch.set_num_threads(threads)
    hf = tf.LlamaForCausalLM(tf.LlamaConfig(**{k: v for k, v in cfg.items() if k != "model_type"})).eval()
    hf.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=False)
    hf.tie_weights()
    ids = torch.from_numpy(np.random.default_rng(1).integers(0, cfg["vocab_size"], (1, past)))
    with torch.no_grad():
        out = hf(ids, use_cache=True)
    state = {"cache": out.past_key_values}
    tok = torch.tensor([[5]])

    def step():
        with torch.no_grad():
            state["cache"] = hf(tok, past_key_values=state["cache"], use_cache=True).past_key_values
    return timed(step, steps)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--past", type=int, default=128, help="cached tokens before the timed steps")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--budget", type=int, default=3)
    ap.add_argument("--torch-threads", type=int, default=int(os.environ.get("OPENBLAS_NUM_THREADS", "0")) or None)
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    cfg = dict(SMOLLM2_135M, num_hidden_layers=args.layers)
    model = from_hf_config(cfg)
    c = model.config
    rng = np.random.default_rng(0)
    weights = {n: (rng.standard_normal(s, dtype=np.float32) * (0.02 if len(s) == 2 else 1.0) + (len(s) == 1))
               .astype(np.float32) for n, s in model.param_shapes().items()}
    nbytes = sum(v.nbytes for v in weights.values())
    t0 = time.perf_counter()
    decode = compile_model(model, "decode", "cpu", ls.SearchOptions(budget=args.budget, seed=0))
    compile_s = time.perf_counter() - t0
    P = args.past
    buf = {f"past.{i}.{kv}": rng.standard_normal((P + args.steps + 2, c.num_kv_heads, c.head_dim), dtype=np.float32)
           for i in range(c.num_layers) for kv in "kv"}
    pos = [P]

    def step():  # p grows by one per step, as in generation; the cache is passed as views
        p = pos[0]
        decode({"input_ids": np.array([5], dtype=np.int64), "positions": np.array([p], dtype=np.int64), **weights,
                **{k: v[:p] for k, v in buf.items()}})
        pos[0] = p + 1
    ours = timed(step, args.steps)
    pos[0] = P

    def step_fixed():
        decode({"input_ids": np.array([5], dtype=np.int64), "positions": np.array([P], dtype=np.int64), **weights,
                **{k: v[:P] for k, v in buf.items()}})
    fixed = timed(step_fixed, args.steps)

    mats = [(weights[k], np.ones((1, weights[k].shape[1]), np.float32)) for k in weights if weights[k].ndim == 2]

    def blas():
        for w, x in mats:
            x @ w.T
    floor = timed(blas, args.steps)
    threads = args.torch_threads or os.cpu_count()
    print(f"SmolLM2-135M-shaped decode step: {c.num_layers} layers, past {P} (+1 per step), float32, "
          f"{nbytes / 1e6:.0f} MB of weights; OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '-')}, "
          f"torch threads {threads}; search budget {args.budget}, decode compile {compile_s:.1f} s")
    rows = [("lightspeed cpu (p grows)", ours), ("lightspeed cpu (same p)", fixed), ("numpy BLAS only", floor)]
    if not args.no_torch:
        hf = torch_hf(cfg, weights, P, args.steps, threads)
        if hf is not None:
            rows.append(("PyTorch eager, HF Llama", hf))
        rows.append(("PyTorch eager, minimal", torch_minimal(cfg, weights, P, args.steps, threads)))
    base = statistics.median(ours)
    for name, ts in rows:
        print(f"  {name:28s} {fmt(ts)}   {statistics.median(ts) / base:5.2f}x of ours   "
              f"{nbytes / statistics.median(ts) / 1e9:5.1f} GB/s of weights")
    rep = getattr(decode, "search_report", None)
    if rep is not None:
        print(rep.format().splitlines()[-1] if rep.candidates else "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
