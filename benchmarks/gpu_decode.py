"""Batch-1 decode on the GPU: lightspeed's ``cuda`` backend beside PyTorch eager and torch.compile
(``reduce-overhead``: CUDA graphs), Llama shapes, random bf16 weights, in the same run.

    python benchmarks/gpu_decode.py [SHAPE ...] [--steps N] [--prompt N] [--no-peer] [--sample T,P]
    python benchmarks/gpu_decode.py [SHAPE ...] --prefill N [--no-peer | --peers eager,max-autotune-no-cudagraphs]
                                    [--peer-all-logits]
    python benchmarks/gpu_decode.py --weights FAMILY[:PATH] [--dtype bfloat16] [--backend cuda] ...

SHAPE: smollm2-135m (default), llama-3.2-1b, qwen3-0.6b, llama-3-8b.  ``--weights`` runs a real
weight file instead (a GGUF or HF directory; ``llama`` alone: the family's default file, SmolLM2's
Q4_1 GGUF), as ``lightspeed run`` loads it, on ``--backend`` (default cuda; native on a host), with
no peer (the peers take random weights of a shape).  Prints, per shape, TPOT
(median step, ms), tokens/s, % of the HBM floor (weight bytes / measured copy bandwidth) and the
ratio to torch.compile.  Our step is what ``Generator.generate`` times: upload the token, replay
the decode program's CUDA graph(s), download the logits, argmax on the host (the peers keep the
token on the GPU and never synchronise).  Writes ``$OUT/gpu_decode.json`` when ``$OUT`` is set.

``--sample T,P``: a second lightspeed row per shape whose steps sample with temperature T and
top-p P (the backend's sampler on the step's logits where they lie, the next step queued on the
sampled token; the peers stay greedy).

``--prefill N``: time to first token of an N-token prompt instead (our median over 10 prompts
after a warm-up, each ``generate(max_new_tokens=1)``: the prefill program and the first token on
the host) beside PyTorch eager and ``torch.compile(mode="max-autotune-no-cudagraphs")`` in the same
run, with % of the FLOP floor (2 x parameters x N at the measured bf16 matmul rate) and the
prefill's launches; writes ``$OUT/gpu_prefill.json``.  The peers compute the prompt's greedy first
token as ours does (the head on the last row only, as transformers' ``generate()``); before
2026-12-08 they computed every row's logits (``--peer-all-logits``: that form, for comparison).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))


def random_bf16(rng, shape) -> np.ndarray:
    """Seeded random bf16 values of magnitude 2^-7 to 2^-5 with random signs and mantissas, made
    from random bits: drawing the 8B shape's 8e9 normals took minutes of the GPU host's time."""
    import ml_dtypes

    bits = np.frombuffer(rng.bytes(2 * int(np.prod(shape))), np.uint16).reshape(shape)
    # sign and mantissa kept, the exponent 120 or 121 (its low bit random)
    out = (bits & np.uint16(0x80FF)) | np.uint16(120 << 7)
    return out.view(ml_dtypes.bfloat16)


def llama_of(name: str):
    """The bf16 Llama of the peer's shape ``name`` (no weights)."""
    from peer_torch_decode import SHAPES

    from lightspeed.models import from_hf_config

    c = SHAPES[name]
    cfg = dict(model_type="llama", vocab_size=c["vocab"], hidden_size=c["dim"], intermediate_size=c["inter"],
               num_hidden_layers=c["layers"], num_attention_heads=c["nh"], num_key_value_heads=c["nkv"],
               head_dim=c["hd"], rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=c["tied"],
               bos_token_id=1, eos_token_id=-1, max_position_embeddings=131072)
    return from_hf_config(cfg, dtype="bfloat16")


def random_llama(name: str):
    """A Llama of the peer's shape ``name`` with seeded random bf16 weights (norm weights near 1):
    (model, weights, the bytes of weights a decode step reads, the generator that made them)."""
    import ml_dtypes
    from peer_torch_decode import SHAPES

    c = SHAPES[name]
    model = llama_of(name)
    rng = np.random.default_rng(0)
    weights = {}
    for n, shape in model.param_shapes().items():
        if "norm" in n:
            weights[n] = (1.0 + rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)
        else:
            weights[n] = random_bf16(rng, shape)
    wbytes = sum(a.nbytes for n, a in weights.items() if c["tied"] or "embed" not in n)
    return model, weights, wbytes, rng


def ours(name: str, steps: int, prompt: int, sampling: dict | None = None) -> dict:
    from peer_torch_decode import SHAPES

    import lightspeed as ls
    from lightspeed.models.generate import Generator

    c = SHAPES[name]
    model, weights, wbytes, rng = random_llama(name)
    t0 = time.perf_counter()
    gen = Generator(model, weights, backend="cuda", search=ls.SearchOptions(budget=4, seed=0, progress=False))
    compile_s = time.perf_counter() - t0
    ids = list(rng.integers(0, c["vocab"], prompt))
    gen.generate(ids, max_new_tokens=4, stop_ids=[], **(sampling or {}))  # warm-up: plans, captures
    res = gen.generate(ids, max_new_tokens=steps, stop_ids=[], **(sampling or {}))
    tpot = float(np.median(res.step_s)) * 1e3
    kernels = kernels_per_step(gen.decode)
    from lightspeed.backends.cuda.driver import device

    # device memory this process took from the driver at its peak (weights, caches, arenas)
    peak = device().peak_bytes
    return dict(tpot_ms=round(tpot, 4), tok_s=round(1000 / tpot, 1), ttft_ms=round(res.ttft_s * 1e3, 2),
                compile_s=round(compile_s, 1), weight_bytes=wbytes, kernels=kernels,
                kernels_per_layer=kernels_per_layer(gen.decode), device_peak_MB=round(peak / 2**20, 1),
                prefill_chunks=-(-prompt // gen.prefill_chunk) if gen.prefill_chunk else 1)


def kernels_per_layer(prog) -> int | None:
    """Launches of one decoder layer: the block template's (the part a rolled program runs once
    per layer), without the prelude (embedding) and epilogue (final norm, head, argmax)."""
    steps = getattr(getattr(prog, "rolled_from", None), "steps", None) or getattr(prog, "steps", None)
    if not steps:
        return None
    counts: dict[int, int] = {}
    for s in steps:
        counts[id(s.prog)] = counts.get(id(s.prog), 0) + 1
    template = max(steps, key=lambda s: counts[id(s.prog)]).prog
    return kernels_per_step(template) if counts[id(template)] > 1 else None


def kernels_per_step(prog) -> int | None:
    """Launches (kernels and library calls) one call of a decode program makes: its launch list,
    or for a program that runs parts (dim buckets, a host block loop) theirs summed."""
    launches = getattr(prog, "launches", None)
    if launches is not None:
        return len(launches)
    steps = getattr(prog, "steps", None) or getattr(getattr(prog, "rolled_from", None), "steps", None)
    if steps:
        counts = [kernels_per_step(s.prog) for s in steps]
        return sum(counts) if all(c is not None for c in counts) else None
    return None


def ours_prefill(name: str, prompt: int, runs: int = 10) -> dict:
    """TTFT of a ``prompt``-token prompt on cuda: median over ``runs`` after a warm-up call."""
    from peer_torch_decode import SHAPES

    import lightspeed as ls
    from lightspeed.models.generate import Generator

    model, weights, _, rng = random_llama(name)
    t0 = time.perf_counter()
    gen = Generator(model, weights, backend="cuda", search=ls.SearchOptions(budget=4, seed=0, progress=False))
    compile_s = time.perf_counter() - t0
    ids = list(rng.integers(0, SHAPES[name]["vocab"], prompt))
    t0 = time.perf_counter()
    gen.generate(ids, max_new_tokens=1, stop_ids=[])  # warm-up: plans, captures
    first_s = time.perf_counter() - t0
    # graphs captured during the timed calls (a library launch's new pointers, a cache at a new
    # address, capture again: that time would land on the TTFT)
    from lightspeed.backends import get_backend

    executor = get_backend("cuda").executor  # (the Generator's: backends are one per name)
    before = getattr(executor, "captures", 0)
    ttfts = [gen.generate(ids, max_new_tokens=1, stop_ids=[]).ttft_s * 1e3 for _ in range(runs)]
    captures = getattr(executor, "captures", 0) - before
    prog = gen.prefill
    for ranges, bucket in getattr(prog, "buckets", ()):  # the bucket a prompt of this length runs
        if all(lo <= prompt <= hi for lo, hi in ranges.values()):
            prog = bucket
    from lightspeed.backends.cuda.driver import device

    return dict(ttft_ms=round(float(np.median(ttfts)), 3), first_call_ms=round(first_s * 1e3, 1),
                compile_s=round(compile_s, 1), kernels=kernels_per_step(prog),
                device_peak_MB=round(device().peak_bytes / 2**20, 1), captures_while_timed=captures)


def prefill_main(names: list[str], prompt: int, peers: list[str], all_logits: bool = False) -> None:
    import peer_torch_decode as peer

    rate = peer.matmul_rate()
    print(f"bf16 matmul rate {rate / 1e12:.0f} TFLOP/s", flush=True)
    out = {"matmul_TFLOPs": round(rate / 1e12, 1), "prompt": prompt, "date": time.strftime("%Y-%m-%d")}
    rows = []
    for name in names:
        res = {"lightspeed cuda": ours_prefill(name, prompt)}
        print(name, "lightspeed", res["lightspeed cuda"], flush=True)
        if peers:
            n_params, got = peer.prefill(name, prompt, peers, all_logits)
            if "eager" in got:
                res["torch eager"] = got["eager"]
            if "max-autotune-no-cudagraphs" in got:
                res["torch.compile (max-autotune)"] = got["max-autotune-no-cudagraphs"]
        else:
            n_params = peer_params(name)
        floor = 2 * n_params * prompt / rate * 1e3
        base = res.get("torch.compile (max-autotune)", {}).get("ttft_ms")
        for system, r in res.items():
            rows.append((name, system, r["ttft_ms"], 100 * floor / r["ttft_ms"],
                         r["ttft_ms"] / base if base else float("nan"), r.get("kernels")))
        out[name] = dict(params=n_params, flop_floor_ms=round(floor, 3), **res)
    print(f"\n{'shape':<14} {'system':<30} {'TTFT ms':>9} {'% FLOP floor':>13} {'x torch.compile':>16} {'launches':>9}")
    for name, system, ttft, pct, ratio, kernels in rows:
        print(f"{name:<14} {system:<30} {ttft:>9.3f} {pct:>12.1f}% {ratio:>15.2f}x {kernels if kernels else '':>9}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_prefill.json"), "w") as f:
            json.dump(out, f, indent=1)


def peer_params(name: str) -> int:
    """The parameter count of shape ``name`` (counted from its shapes: no weights made)."""
    return int(sum(np.prod([int(d) for d in shape]) for shape in llama_of(name).param_shapes().values()))


def ours_file(spec: str, steps: int, prompt: int, backend: str, dtype: str) -> tuple[str, dict, int]:
    """A real weight file (``FAMILY`` or ``FAMILY:PATH``) as ``lightspeed run`` loads and compiles
    it: (its name, the measurement, the bytes of weights a decode step reads)."""
    import lightspeed as ls
    from lightspeed.models.run import blocks_for, compile_generator, load_text_model

    family, _, path = spec.partition(":")
    # on a host the GGUF blocks stay blocks (lazy: native reads them); cuda gets the dtype's values
    tm = load_text_model(family, path or None, dtype=dtype, progress=False, lazy=blocks_for(backend))
    t0 = time.perf_counter()
    gen = compile_generator(tm, backend, ls.SearchOptions(budget=4, seed=0, progress=False))
    compile_s = time.perf_counter() - t0
    ids = [int(t) for t in np.random.default_rng(0).integers(3, tm.model.config.vocab_size, prompt)]
    gen.generate(ids, max_new_tokens=4, stop_ids=[])  # warm-up: plans, captures
    res = gen.generate(ids, max_new_tokens=steps, stop_ids=[])
    tpot = float(np.median(res.step_s)) * 1e3
    kernels = kernels_per_step(gen.decode)
    item = np.dtype(tm.model.dtype.np).itemsize
    tied = tm.model.config.tie_word_embeddings

    def stored(name: str, shape: tuple) -> int:  # bytes as the backend holds the weight
        blocks = getattr(tm.tensors.get(name), "blocks", None)
        return blocks.data.nbytes if blocks is not None else int(np.prod(shape)) * item

    wbytes = sum(stored(n, shape) for n, shape in tm.model.param_shapes().items() if tied or "embed" not in n)
    name = f"{family}:{Path(tm.source).name}"
    return name, dict(tpot_ms=round(tpot, 4), tok_s=round(1000 / tpot, 1), ttft_ms=round(res.ttft_s * 1e3, 2),
                      compile_s=round(compile_s, 1), weight_bytes=wbytes, kernels=kernels,
                      kernels_per_layer=kernels_per_layer(gen.decode), backend=backend), wbytes


def main() -> None:
    args = sys.argv[1:]
    steps = int(args[args.index("--steps") + 1]) if "--steps" in args else 64
    prompt = int(args[args.index("--prompt") + 1]) if "--prompt" in args else 32
    if "--weights" in args:
        backend = args[args.index("--backend") + 1] if "--backend" in args else "cuda"
        default = "bfloat16" if backend == "cuda" else "float32"
        dtype = args[args.index("--dtype") + 1] if "--dtype" in args else default
        name, r, wb = ours_file(args[args.index("--weights") + 1], steps, prompt, backend, dtype)
        print(f"{name} ({dtype}) on {backend}: TPOT {r['tpot_ms']:.3f} ms, {r['tok_s']} tok/s, TTFT {r['ttft_ms']} ms, "
              f"compile {r['compile_s']} s, {r['kernels']} launches per step ({r['kernels_per_layer']} per layer), "
              f"{wb / 1e9:.3f} GB of weights per step")
        if os.environ.get("OUT"):
            with open(os.path.join(os.environ["OUT"], "gpu_decode_file.json"), "w") as f:
                json.dump({"date": time.strftime("%Y-%m-%d"), name: r}, f, indent=1)
        return
    valued = {"--steps", "--prompt", "--sample", "--prefill", "--peers", "--weights", "--backend", "--dtype"}
    names = [a for i, a in enumerate(args) if not a.startswith("--") and (i == 0 or args[i - 1] not in valued)]
    names = names or ["smollm2-135m"]
    if "--prefill" in args:
        peers = (args[args.index("--peers") + 1].split(",") if "--peers" in args
                 else ["eager", "max-autotune-no-cudagraphs"])
        prefill_main(names, int(args[args.index("--prefill") + 1]), [] if "--no-peer" in args else peers,
                     "--peer-all-logits" in args)
        return
    import peer_torch_decode as peer

    bw = peer.bandwidth()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    out = {"bandwidth_TBps": round(bw / 1e12, 3), "date": time.strftime("%Y-%m-%d")}
    rows = []
    for name in names:
        res = {"lightspeed cuda": ours(name, steps, prompt)}
        wb = res["lightspeed cuda"]["weight_bytes"]
        print(name, "lightspeed", res["lightspeed cuda"], flush=True)
        if "--sample" in args:
            t, p = (float(v) for v in args[args.index("--sample") + 1].split(","))
            key = f"lightspeed cuda (T {t}, top-p {p})"
            try:  # a failing sampler costs its own row, not the shape's greedy and peer rows
                res[key] = ours(name, steps, prompt, dict(temperature=t, top_p=p, seed=0))
                print(name, key, res[key], flush=True)
            except Exception as e:  # noqa: BLE001 - reported, then the table goes on without the row
                print(f"{name} {key} FAILED: {type(e).__name__}: {e}", flush=True)
        if "--no-peer" not in args:
            _, peers = peer.run(name, ["eager", "reduce-overhead"], prompt=prompt, steps=steps)
            res["torch eager"] = peers["eager"]
            res["torch.compile (reduce-overhead)"] = peers["reduce-overhead"]
        floor = wb / bw * 1e3
        base = res.get("torch.compile (reduce-overhead)", {}).get("tpot_ms")
        for system, r in res.items():
            rows.append((name, system, r["tpot_ms"], r["tok_s"], 100 * floor / r["tpot_ms"],
                         (r["tpot_ms"] / base) if base else float("nan"), r.get("kernels_per_layer"), r.get("kernels")))
        out[name] = dict(weight_GB=round(wb / 1e9, 3), floor_ms=round(floor, 4), **res)
    print(f"\n{'shape':<14} {'system':<34} {'TPOT ms':>9} {'tok/s':>8} {'% HBM floor':>12} {'x torch.compile':>16}"
          f" {'kernels/layer':>14} {'kernels/step':>13}")
    for name, system, tpot, toks, pct, ratio, per_layer, per_step in rows:
        print(f"{name:<14} {system:<34} {tpot:>9.3f} {toks:>8.1f} {pct:>11.1f}% {ratio:>15.2f}x"
              f" {per_layer if per_layer is not None else '':>14} {per_step if per_step is not None else '':>13}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_decode.json"), "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
