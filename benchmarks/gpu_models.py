"""Every model family on one backend beside transformers on the same device, same weights, same
process: TTFT, decode TPOT and % of the HBM floor per family (issue 26's table).

    python benchmarks/gpu_models.py [ROW ...] [--backend cuda] [--dtype bfloat16] [--steps 32]
                                    [--prompt 64] [--peer eager|compile|none] [--small]
                                    [--layers N] [--file ROW=PATH ...]

ROW (default all): ``smollm2`` and ``gemma3`` (the shipped GGUF files, their weights as the dtype:
the peer cannot read GGUF blocks), ``qwen3`` (Qwen3-0.6B's shape), ``qwen3_moe`` (Qwen3-30B-A3B's
shape with 4 layers), ``gemma4_moe`` (the family's small built-in config: its real shape is not
in the registry), all three with seeded random weights, and ``whisper`` (tiny.en's file, a
synthetic log-mel window).  ``--small``: every random row at the family's small built-in config
(a check of this script on a CPU).  The peer is transformers' model of the family holding the
same weights: ``eager`` runs its forward with a dynamic cache; ``compile`` its ``generate`` with
a static cache (transformers compiles the decode step itself).  TPOT is the median decode step
(ours: ``Generator.generate``'s, with the token chosen on the device where it can be); the floor
is the weights a step reads over the copy bandwidth measured in the same run (a GPU; none on a
CPU).  ``--file ROW=PATH``: where a file row's weights are (a GPU host has no package index:
the GGUF files or the Whisper directory carried in parts); default the installed packages'.
Writes ``$OUT/gpu_models.json`` when ``$OUT`` is set.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

# realistic shapes for the random rows (HF config keys over the family's small built-in config)
SHAPES: dict[str, dict[str, Any]] = {
    "qwen3": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=128, vocab_size=151936, tie_word_embeddings=True,
                  max_position_embeddings=40960),
    "qwen3_moe": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=4, num_attention_heads=32,
                      num_key_value_heads=4, head_dim=128, vocab_size=151936, num_experts=128,
                      num_experts_per_tok=8, moe_intermediate_size=768, max_position_embeddings=40960),
    "gemma4_moe": {},
}
ROWS = ("smollm2", "gemma3", "qwen3", "qwen3_moe", "gemma4_moe", "whisper")
FILE_FAMILY = {"smollm2": "llama", "gemma3": "gemma3"}


def text_model(row: str, dtype: str, small: bool, path: str | None = None, layers: int | None = None
               ) -> tuple[Any, dict[str, Any], dict[str, Any], str]:
    """(model, weights by HF name as float arrays, HF config dict, family) of a text row."""
    from lightspeed.models import get
    from lightspeed.models.run import load_text_model, random_config, random_weights

    if row in FILE_FAMILY:
        tm = load_text_model(FILE_FAMILY[row], path, dtype=dtype, progress=False)
        tensors = {n: np.asarray(v, np.float32) for n, v in tm.tensors.items()}  # GGUF blocks: their values
        return tm.model, tensors, dict(tm.config), FILE_FAMILY[row]
    cfg = random_config(row) if small else {**random_config(row), **SHAPES[row]}
    if layers is not None:
        cfg["num_hidden_layers"] = layers
    model = get(row).from_hf_config(cfg, dtype)
    return model, random_weights(model, 0), cfg, row


def weight_bytes(model: Any, itemsize: int) -> int:
    """Bytes of weights a decode step reads: every parameter but an untied embedding table (a
    gather reads one row); experts as stored (every expert: a batch-1 step reads top-k of them,
    so this is an upper bound for the MoE rows, stated in the table)."""
    tied = getattr(model.config, "tie_word_embeddings", True)
    return sum(int(np.prod(s)) * itemsize for n, s in model.param_shapes().items() if tied or "embed" not in n)


def ours_text(model: Any, weights: dict[str, Any], backend: str, prompt: list[int], steps: int) -> dict:
    import lightspeed as ls
    from lightspeed.models.generate import Generator

    t0 = time.perf_counter()
    gen = Generator(model, weights, backend=backend, search=ls.SearchOptions(budget=4, seed=0, progress=False))
    compile_s = time.perf_counter() - t0
    gen.generate(prompt, 4, stop_ids=())  # warm-up: plans, captures
    res = gen.generate(prompt, steps, stop_ids=())
    # the first token's logits, from a run of its own (keeping logits copies them out every step)
    first = gen.generate(prompt, 1, stop_ids=(), keep_logits=True).logits[0]
    return dict(ttft_ms=res.ttft_s * 1e3, tpot_ms=float(np.median(res.step_s)) * 1e3, compile_s=compile_s,
                tokens=[int(t) for t in res.new_ids], logits=np.asarray(first, np.float32))


def agreement(hf: Any, prompt: list[int], ours: dict, device: str) -> dict:
    """How close our greedy run is to transformers' on the same weights: the first token's logits
    (max |difference| over max |logit|) and how many leading greedy tokens are the same (transformers'
    own uncompiled ``generate``)."""
    import torch

    ids = torch.tensor([prompt], device=device)
    with torch.no_grad():
        ref = hf(ids).logits[0, -1].float().cpu().numpy()
        seq = hf.generate(ids, max_new_tokens=len(ours["tokens"]), min_new_tokens=len(ours["tokens"]), do_sample=False)
    theirs = [int(t) for t in seq[0, len(prompt):].tolist()]
    same = 0
    for a, b in zip(ours["tokens"], theirs):
        if a != b:
            break
        same += 1
    diff = float(np.max(np.abs(ours["logits"] - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
    return dict(logit_rel_diff=diff, same_argmax=bool(np.argmax(ours["logits"]) == np.argmax(ref)),
                same_tokens=same, steps=len(ours["tokens"]))


def hf_model(family: str, cfg: dict, tensors: dict, dtype: str, device: str) -> Any:
    """transformers' model of ``family`` holding ``tensors``, in ``dtype`` on ``device``."""
    import torch
    from examples import HF_CLASSES, _hf_model

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    if family not in HF_CLASSES:
        raise KeyError(f"no transformers class for {family}")
    return _hf_model(family, cfg, tensors).to(device=device, dtype=torch_dtype)


def peer_text(hf: Any, prompt: list[int], steps: int, mode: str, device: str) -> dict:
    """TTFT and median decode step of transformers' model (``eager``: forward with a dynamic cache;
    ``compile``: generate with a static cache, compiled by transformers)."""
    import torch

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    ids = torch.tensor([prompt], device=device)
    with torch.no_grad():
        if mode == "compile":
            def run(n: int) -> float:
                sync()
                t = time.perf_counter()
                hf.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, cache_implementation="static")
                sync()
                return time.perf_counter() - t
            run(steps + 1)  # compile and capture
            first, full = run(1), run(steps + 1)
            return dict(ttft_ms=first * 1e3, tpot_ms=(full - first) / steps * 1e3)
        times = []
        for _ in range(2):  # the first round warms up
            sync()
            t = time.perf_counter()
            out = hf(ids, use_cache=True)
            tok = out.logits[:, -1:].argmax(-1)
            sync()
            ttft = time.perf_counter() - t
            past, times = out.past_key_values, []
            for _ in range(steps):
                t = time.perf_counter()
                out = hf(tok, past_key_values=past, use_cache=True)
                tok, past = out.logits[:, -1:].argmax(-1), out.past_key_values
                sync()
                times.append(time.perf_counter() - t)
        return dict(ttft_ms=ttft * 1e3, tpot_ms=float(np.median(times)) * 1e3)


def whisper_row(backend: str, steps: int, peer: str, device: str, path: str | None = None,
                dtype: str = "float32") -> dict:
    """tiny.en on ``backend`` in ``dtype`` (the peer in the same dtype): a synthetic 30 s window,
    greedy tokens; per-token decode time."""
    from lightspeed.models.whisper import find_model_dir, load_model, prompt_tokens
    from lightspeed.weights.ctranslate2 import load_whisper

    model, _ = load_model(path, backend, dtype=dtype)
    rng = np.random.default_rng(0)
    feats = (rng.standard_normal((model.cfg.num_mel_bins, model.cfg.n_frames)) * 0.5).astype(np.float32)
    ids = prompt_tokens(model.cfg)  # <|startoftranscript|><|notimestamps|> (English-only)

    def decode() -> tuple[float, float]:
        t0 = time.perf_counter()
        state = model.start(model.encode(feats))
        logits = model.step(state, ids)
        first = time.perf_counter() - t0
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            logits = model.step(state, [int(np.argmax(logits[-1]))])
            times.append(time.perf_counter() - t)
        return first, float(np.median(times))

    decode()
    ttft, tpot = decode()
    out = dict(ours=dict(ttft_ms=ttft * 1e3, tpot_ms=tpot * 1e3))
    if peer != "none":
        import torch
        import transformers as tf

        cfg, sd = load_whisper(find_model_dir(path))
        hf = tf.WhisperForConditionalGeneration(tf.WhisperConfig(**cfg)).eval()
        hf.load_state_dict({k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in sd.items()}, strict=False)
        torch_dtype = getattr(torch, dtype)
        hf = hf.to(device=device, dtype=torch_dtype)
        x = torch.from_numpy(feats)[None].to(device=device, dtype=torch_dtype)
        with torch.no_grad():
            def run(n: int) -> float:
                t = time.perf_counter()
                hf.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False)
                if device == "cuda":
                    torch.cuda.synchronize()
                return time.perf_counter() - t
            run(2)
            first, full = run(1), run(steps + 1)
        out["peer"] = dict(ttft_ms=first * 1e3, tpot_ms=(full - first) / steps * 1e3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("rows", nargs="*", metavar="ROW", help=f"default every row: {', '.join(ROWS)}")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--dtype", default=None,
                    help="default bfloat16 on cuda, float32 elsewhere; the whisper row: float32 unless given")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--peer", choices=("eager", "compile", "none"), default="eager")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--layers", type=int, default=None, help="the random rows' layer count (default their shape's)")
    ap.add_argument("--file", action="append", default=[], metavar="ROW=PATH")
    args = ap.parse_args(argv)
    unknown = [r for r in args.rows if r not in ROWS]
    if unknown:  # (argparse's choices reject an empty list's default on some Pythons)
        ap.error(f"unknown rows {unknown}; rows: {', '.join(ROWS)}")
    args.rows = args.rows or list(ROWS)
    files = dict(f.split("=", 1) for f in args.file)
    if set(files) - {"smollm2", "gemma3", "whisper"}:
        ap.error(f"--file names rows with files (smollm2, gemma3, whisper), got {sorted(files)}")
    dtype = args.dtype or ("bfloat16" if args.backend == "cuda" else "float32")
    device = "cuda" if args.backend == "cuda" else "cpu"
    bandwidth = None
    if device == "cuda":
        import peer_torch_decode

        bandwidth = peer_torch_decode.bandwidth()
    itemsize = 4 if dtype == "float32" else 2
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "backend": args.backend, "dtype": dtype,
                               "bandwidth_TBps": bandwidth and round(bandwidth / 1e12, 3)}
    table = []
    for row in args.rows:
        try:
            if row == "whisper":
                r = whisper_row(args.backend, args.steps, args.peer, device, files.get("whisper"),
                                args.dtype or "float32")
                wb = None
            else:
                model, weights, cfg, family = text_model(row, dtype, args.small, files.get(row), args.layers)
                vocab = model.config.vocab_size
                prompt = [int(t) for t in np.random.default_rng(1).integers(3, vocab - 1, args.prompt)]
                r = {"ours": ours_text(model, weights, args.backend, prompt, args.steps)}
                wb = weight_bytes(model, itemsize)
                if args.peer != "none":
                    hf = hf_model(family, cfg, weights, dtype, device)
                    r["peer"] = peer_text(hf, prompt, args.steps, args.peer, device)
                    r["agree"] = agreement(hf, prompt, r["ours"], device)
                    del hf
                r["ours"].pop("tokens")
                r["ours"].pop("logits")
        except Exception as e:  # noqa: BLE001 - one family failing is a row of the table, not the end
            results[row] = {"error": f"{type(e).__name__}: {e}"}
            table.append((row, f"error: {type(e).__name__}: {str(e)[:80]}"))
            print(f"{row}: {type(e).__name__}: {e}", flush=True)
            continue
        floor = wb / bandwidth * 1e3 if (wb and bandwidth) else None
        r["weight_GB"] = wb and round(wb / 1e9, 3)
        results[row] = r
        ours, peer = r["ours"], r.get("peer")
        pct = f"{100 * floor / ours['tpot_ms']:.1f}%" if floor else "-"
        agree = r.get("agree")
        same = f"{agree['same_tokens']}/{agree['steps']} {agree['logit_rel_diff']:.1e}" if agree else "-"
        ratio = f"{ours['tpot_ms'] / peer['tpot_ms']:.2f}x" if peer else "-"
        table.append((row, f"{ours['ttft_ms']:9.2f} {ours['tpot_ms']:9.3f} "
                           f"{peer['ttft_ms'] if peer else float('nan'):10.2f} "
                           f"{peer['tpot_ms'] if peer else float('nan'):10.3f} {ratio:>9} {pct:>8} {same:>14}"))
        print(row, json.dumps(r), flush=True)
    print(f"\n{args.backend} {dtype}; peer: transformers {args.peer} on {device}"
          + (f"; copy bandwidth {bandwidth / 1e12:.2f} TB/s" if bandwidth else ""))
    print(f"{'row':<11} {'TTFT ms':>9} {'TPOT ms':>9} {'peer TTFT':>10} {'peer TPOT':>10} {'x peer':>9} "
          f"{'% floor':>8} {'agree':>14}")
    for row, line in table:
        print(f"{row:<11} {line}")
    print("(% floor: weights read per step over the copy bandwidth; the MoE rows count every expert, "
          "an upper bound on what a step reads; agree: leading greedy tokens equal to transformers' and the "
          "first token's max |logit difference| over max |logit|)")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "gpu_models.json"), "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
