"""Decode step of a SmolLM2-135M-shaped Llama (random weights, float32) on the cpu backend (and/or
``--backend native``: the generated C kernels), beside
PyTorch eager on the same weights, in one run.

    python benchmarks/cpu_decode.py [--layers 30] [--steps 16] [--rounds 3] [--budget 3] [--backend native ...]

What it prints:

* the step time at two cache lengths (p = 32 and p = 1024) for lightspeed (the program
  ``lightspeed.models.generate`` compiles: weights resident, cache written in place) and for PyTorch
  eager (Hugging Face's LlamaForCausalLM with its KV cache, and a minimal hand-written model with
  a preallocated cache), measured in interleaved rounds (median of every step of every round);
* ratios against the eager peers and the % of the memory floor: the weights' bytes over the
  machine's copy bandwidth measured in the same run (batch-1 decode reads every weight once);
* how flat the step is in p, and the executable preparations counted across 256 consecutive
  steps (dims are run-time arguments: the count must be 0).

Thread counts: OPENBLAS_NUM_THREADS / --torch-threads (report what was used: OpenBLAS's GEMV
speed depends on the machine's other load).
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
from lightspeed.models import from_hf_config  # noqa: E402
from lightspeed.models.generate import compile_model  # noqa: E402

SMOLLM2_135M = dict(model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                    num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                    rms_norm_eps=1e-5, rope_theta=100000.0, tie_word_embeddings=True,
                    max_position_embeddings=8192, hidden_act="silu", bos_token_id=1, eos_token_id=2)
PASTS = (32, 1024)


def copy_bandwidth() -> float:
    """Memory traffic per second of a large numpy copy (it reads and writes every byte, so the
    traffic is twice the array): the machine's streaming bandwidth, the limit of reading weights."""
    a = np.ones(64 << 20, np.float32)
    b = np.empty_like(a)
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t)
    return 2 * a.nbytes / best


class Ours:
    """lightspeed's decode program with its cache, stepping from a given past length."""

    def __init__(self, model, weights, budget: int, max_len: int, backend: str = "cpu"):
        c = model.config
        t0 = time.perf_counter()
        self.decode = compile_model(model, "decode", backend, ls.SearchOptions(budget=budget, seed=0))
        self.compile_s = time.perf_counter() - t0
        self.decode = self.decode.persist(weights).reserve(p=max_len, M=max_len)
        rng = np.random.default_rng(1)
        self.caches = {f"cache.{i}.{kv}": rng.standard_normal((max_len, c.num_kv_heads, c.head_dim), dtype=np.float32)
                       for i in range(c.num_layers) for kv in "kv"}
        self.p = 0

    def start(self, past: int) -> None:
        self.p = past

    def step(self) -> None:
        p = self.p
        self.decode({"input_ids": np.array([5], np.int64), "positions": np.array([p], np.int64), **self.caches},
                    dims={"p": p})
        self.p = p + 1


class BlasOnly:
    """The step's matrix-vector products alone, back to back in numpy (each weight read once): the
    floor of any backend built on numpy's BLAS."""

    def __init__(self, weights: dict):
        self.mats = [(w, np.ones((1, w.shape[1]), np.float32)) for w in weights.values() if w.ndim == 2]

    def start(self, past: int) -> None:
        pass

    def step(self) -> None:
        for w, x in self.mats:
            x @ w.T


class TorchMinimal:
    """A plain eager Llama step (gpt-fast style) with a preallocated cache, on the same weights."""

    def __init__(self, cfg: dict, weights: dict, max_len: int, threads: int):
        import torch

        torch.set_num_threads(threads)
        self.torch = torch
        self.L, self.D, self.H, self.KV, self.hd = (cfg[k] for k in ("num_hidden_layers", "hidden_size",
                                                                     "num_attention_heads", "num_key_value_heads",
                                                                     "head_dim"))
        self.w = {k: torch.from_numpy(v) for k, v in weights.items()}
        self.kc = [torch.randn(self.KV, max_len, self.hd) for _ in range(self.L)]
        self.vc = [torch.randn(self.KV, max_len, self.hd) for _ in range(self.L)]
        self.inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, self.hd, 2).float() / self.hd))
        self.eps = cfg["rms_norm_eps"]
        self.p = 0

    def start(self, past: int) -> None:
        self.p = past

    def step(self) -> None:
        torch = self.torch
        F = torch.nn.functional
        L, D, H, KV, hd, w, p = self.L, self.D, self.H, self.KV, self.hd, self.w, self.p

        def rope(x, cos, sin):
            x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
            return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

        with torch.no_grad():
            f = p * self.inv
            cos, sin = f.cos(), f.sin()
            x = w["model.embed_tokens.weight"][5][None]
            for i in range(L):
                pre = f"model.layers.{i}."
                h = F.rms_norm(x, (D,), w[pre + "input_layernorm.weight"], self.eps)
                q = (h @ w[pre + "self_attn.q_proj.weight"].T).view(H, 1, hd)
                k = (h @ w[pre + "self_attn.k_proj.weight"].T).view(KV, 1, hd)
                v = (h @ w[pre + "self_attn.v_proj.weight"].T).view(KV, 1, hd)
                q, k = rope(q, cos, sin), rope(k, cos, sin)
                self.kc[i][:, p] = k[:, 0]
                self.vc[i][:, p] = v[:, 0]
                y = F.scaled_dot_product_attention(q[None], self.kc[i][None, :, :p + 1], self.vc[i][None, :, :p + 1],
                                                   enable_gqa=True)
                x = x + y.reshape(1, H * hd) @ w[pre + "self_attn.o_proj.weight"].T
                h = F.rms_norm(x, (D,), w[pre + "post_attention_layernorm.weight"], self.eps)
                x = x + (F.silu(h @ w[pre + "mlp.gate_proj.weight"].T) * (h @ w[pre + "mlp.up_proj.weight"].T)) \
                    @ w[pre + "mlp.down_proj.weight"].T
            F.rms_norm(x, (D,), w["model.norm.weight"], self.eps) @ w["model.embed_tokens.weight"].T
        self.p = p + 1


class TorchHF:
    """Hugging Face's LlamaForCausalLM in eager mode with its own KV cache (prefilled to ``past``)."""

    def __init__(self, cfg: dict, weights: dict, threads: int):
        import torch
        import transformers as tf

        torch.set_num_threads(threads)
        self.torch = torch
        self.hf = tf.LlamaForCausalLM(tf.LlamaConfig(**{k: v for k, v in cfg.items() if k != "model_type"})).eval()
        self.hf.load_state_dict({k: torch.from_numpy(v) for k, v in weights.items()}, strict=False)
        self.hf.tie_weights()
        self.caches: dict[int, object] = {}

    def start(self, past: int) -> None:
        torch = self.torch
        ids = torch.from_numpy(np.random.default_rng(1).integers(0, 49152, (1, past)))
        with torch.no_grad():
            self.cache = self.hf(ids, use_cache=True).past_key_values

    def step(self) -> None:
        with self.torch.no_grad():
            self.cache = self.hf(self.torch.tensor([[5]]), past_key_values=self.cache, use_cache=True).past_key_values


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--steps", type=int, default=16, help="timed steps per round and cache length")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=int, default=3)
    ap.add_argument("--torch-threads", type=int, default=int(os.environ.get("OPENBLAS_NUM_THREADS", "0")) or None)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--backend", action="append", choices=["cpu", "native"],
                    help="lightspeed backend(s) to measure (repeatable; default cpu); ratios are against the first")
    ap.add_argument("--no-hf", action="store_true", help="skip the Hugging Face peer (its 1024-token prefill)")
    args = ap.parse_args()
    cfg = dict(SMOLLM2_135M, num_hidden_layers=args.layers)
    model = from_hf_config(cfg)
    rng = np.random.default_rng(0)
    weights = {n: (rng.standard_normal(s, dtype=np.float32) * (0.02 if len(s) == 2 else 1.0) + (len(s) == 1))
               .astype(np.float32) for n, s in model.param_shapes().items()}
    nbytes = sum(v.nbytes for v in weights.values())
    max_len = max(PASTS) + args.steps * args.rounds + 300
    threads = args.torch_threads or os.cpu_count()
    backends = args.backend or ["cpu"]
    systems = {f"lightspeed {b}": Ours(model, weights, args.budget, max_len, b) for b in backends}
    first = f"lightspeed {backends[0]}"
    ours = systems[first]
    systems["numpy BLAS only"] = BlasOnly(weights)
    if not args.no_torch:
        systems["PyTorch eager, minimal"] = TorchMinimal(cfg, weights, max_len, threads)
        if not args.no_hf:
            try:
                systems["PyTorch eager, HF Llama"] = TorchHF(cfg, weights, threads)
            except ImportError:
                pass
    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.rounds):  # interleaved: a load spike hits every system alike
        for past in PASTS:
            for name, sysm in systems.items():
                sysm.start(past)
                sysm.step()  # warm
                for _ in range(args.steps):
                    t = time.perf_counter()
                    sysm.step()
                    times.setdefault((name, past), []).append(time.perf_counter() - t)
    # preparations across 256 consecutive steps (the arena was planned once, at the reserved bounds)
    before = ours.decode.preparations
    ours.start(32)
    for _ in range(256):
        ours.step()
    preps = ours.decode.preparations - before
    bw = copy_bandwidth()
    floor = nbytes / bw
    print(f"SmolLM2-135M-shaped decode step: {cfg['num_hidden_layers']} layers, float32, {nbytes / 1e6:.0f} MB of "
          f"weights; copy bandwidth {bw / 1e9:.1f} GB/s -> floor {floor * 1e3:.1f} ms; "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '-')}, torch threads {threads}; "
          f"search budget {args.budget}, decode compile {ours.compile_s:.1f} s")
    med = {k: statistics.median(v) for k, v in times.items()}
    head = "".join(f"{'p=' + str(p):>12s}" for p in PASTS)
    print(f"  {'system':26s} {head}   vs ours (p=32, 1024)   % of floor")
    for name in systems:
        row = "".join(f"{med[name, p] * 1e3:9.2f} ms" for p in PASTS)
        ratio = ", ".join(f"{med[name, p] / med[first, p]:.2f}x" for p in PASTS)
        pct = ", ".join(f"{floor / med[name, p] * 100:.0f}%" for p in PASTS)
        print(f"  {name:26s} {row}   {ratio:>18s}   {pct}")
    for b in backends:
        flat = med[f"lightspeed {b}", PASTS[1]] / med[f"lightspeed {b}", PASTS[0]]
        print(f"  lightspeed {b} step at p={PASTS[1]} / p={PASTS[0]}: {flat:.2f} (flat within 15%: "
              f"{abs(flat - 1) <= 0.15})")
    print(f"  executable preparations across 256 steps (p = 32..287), {first}: {preps}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
