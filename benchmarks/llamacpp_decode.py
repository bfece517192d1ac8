"""Decode on the CPU, every system on the same GGUF file in one run: SmolLM2-135M-Instruct (Q4_1,
``--model llama``, the default) or Gemma 3 270M (Q4_K_M, ``--model gemma``), the files ``lightspeed
run`` loads.  lightspeed: the ``native`` generated kernels (block matmuls reading the file's blocks,
with 16-bit activations; ``native-q8``: 8-bit ones as llama.cpp; ``native-exact``: float ones;
``native-f32``: every weight dequantised to float32) and the numpy ``cpu`` backend; llama.cpp (the
blocks as they are); PyTorch eager (transformers on the same dequantised weights, its own KV cache).

    pip install ../shared/wheels/llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl   # the peer
    python benchmarks/llamacpp_decode.py [--model llama|gemma] [--f32] [--steps 48] [--rounds 3] \
        [--only native llama.cpp]

``--f16``: an F16 copy likewise (lightspeed computes with float16 weights; their values are the
file's). ``--f32``: every system reads an F32 copy of the file instead (made once by llama.cpp's own
requantiser, ``llama_model_quantize`` to ALL_F32; its weights are bit for bit the ones lightspeed
dequantises), the equal-precision comparison.

Each system runs in its own process (so its peak RSS is its own), once per round, the rounds
interleaved (a load spike hits every system alike).  Every system starts from the same prompt
tokens and decodes greedily.  Printed per system: TTFT (the prompt step), TPOT (median step of
every round after the first step), tok/s, peak RSS, the bytes of weights one step reads and the %
of the memory floor (those bytes over the copy bandwidth measured in this run), and the tokens
(the greedy texts agree when the numerics do).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT.parent / "shared" / "wheels"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from cpu_decode import copy_bandwidth  # noqa: E402  (the same measure as the decode benchmark)

SYSTEMS = ("native", "native-q8", "native-exact", "native-f32", "cpu", "llama.cpp", "torch")
PROMPT = "The capital of France is"


F32 = False  # --f32
F16 = False  # --f16
MODELS = {"llama": "SmolLM2-135M-Instruct", "gemma": "Gemma 3 270M"}
FAMILY = {"llama": "llama", "gemma": "gemma3"}  # the zoo's family of each --model (its default weights)


def weights_file(family: str, f32: bool, f16: bool = False) -> Path:
    """The GGUF file of ``family`` every system reads: the default one, or its F32 (F16) copy."""
    from lightspeed.weights import default_weights

    src = default_weights(family, progress=False)
    if not (f32 or f16):
        return src
    dst = src.with_name(src.stem + (".F32.gguf" if f32 else ".F16.gguf"))
    if not dst.exists():
        import ctypes

        import llama_cpp

        params = llama_cpp.llama_model_quantize_default_params()
        ftype = llama_cpp.LLAMA_FTYPE_ALL_F32 if f32 else llama_cpp.LLAMA_FTYPE_MOSTLY_F16
        params.ftype, params.nthread, params.allow_requantize = ftype, 2, True
        tmp = dst.with_suffix(".tmp")
        if llama_cpp.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params)) != 0:
            raise SystemExit(f"llama.cpp could not write an {'F32' if f32 else 'F16'} copy of {src}")
        tmp.replace(dst)
    return dst


def _lightspeed(family: str, backend: str, steps: int, blocks: bool = True) -> dict:
    import lightspeed as ls
    from lightspeed.models.generate import Generator
    from lightspeed.models.run import load_text_model

    tm = load_text_model(FAMILY[family], weights_file(family, F32, F16), progress=False,
                         lazy=backend == "native" and blocks, dtype="float16" if F16 else "float32")
    prompt = tm.tokenizer.encode(PROMPT)
    # float32 copies of the blocks: the float path
    tensors = tm.tensors if blocks else {k: np.array(v) for k, v in tm.tensors.items()}
    gen = Generator(tm.model, tensors, backend=backend, search=ls.SearchOptions(budget=3, seed=0))
    gen.generate(prompt, max_new_tokens=4, stop_ids=())  # warm (caches, first-call preparation)
    res = gen.generate(prompt, max_new_tokens=steps, stop_ids=())
    from lightspeed.backends.codegen.blocks import KERNEL_QTYPE, block_activations

    # what a step reads: the blocks of the weights whose blocks a block kernel reads (Q5_0: the
    # Q8_0 blocks it widens to), else the float arrays
    read_blocks = {name for name, _ in getattr(gen.decode, "forms_at", {}).values()}
    nbytes, kinds = 0, set()
    for name, v in gen.weights.items():
        if name not in read_blocks:
            nbytes += v.nbytes
            continue
        b = v.blocks.widened() if v.qtype in KERNEL_QTYPE else v.blocks
        nbytes += b.packed.nbytes
        kinds.add(v.qtype.upper() + ("" if b.qtype == v.qtype else f" as {b.qtype.upper()}"))
    what = "+".join(sorted(kinds)) + " blocks" if kinds else ("f16 weights" if F16 else "f32 weights")
    if kinds:
        what += f", {block_activations()} activations"
    return {"ttft": res.ttft_s, "steps": res.step_s, "tokens": res.new_ids, "bytes": nbytes,
            "label": f"lightspeed {backend} ({what})"}


def _llama_cpp(family: str, steps: int, threads: int) -> dict:
    try:
        import llama_portable  # noqa: F401  (points ggml at the wheel's CPU variants)
    except ImportError:
        pass
    from llama_cpp import Llama

    from lightspeed.weights.tokenizer import Tokenizer

    path = weights_file(family, F32, F16)
    llm = Llama(str(path), n_threads=threads, n_ctx=512, verbose=False, logits_all=True)  # scores of the last row
    prompt = Tokenizer.from_gguf(path).encode(PROMPT)  # the very ids lightspeed starts from
    llm.eval(prompt)
    llm.reset()
    t = time.perf_counter()
    llm.eval(prompt)
    ttft = time.perf_counter() - t
    out, step_s = [], []
    for _ in range(steps):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(tok)
        t = time.perf_counter()
        llm.eval([tok])
        step_s.append(time.perf_counter() - t)
    from gguf import GGUFReader

    nbytes = sum(int(t.n_bytes) for t in GGUFReader(str(path)).tensors)
    return {"ttft": ttft, "steps": step_s, "tokens": out, "bytes": nbytes,
            "label": f"llama.cpp ({threads} threads)"}


def _torch(family: str, steps: int, threads: int) -> dict:
    import torch
    import transformers as tf

    from lightspeed.models.run import load_text_model

    torch.set_num_threads(threads)
    tm = load_text_model(FAMILY[family], weights_file(family, F32, F16), progress=False)
    cfg = {k: v for k, v in tm.config.items() if k not in ("model_type", "architectures", "torch_dtype")}
    cls, ccls = ((tf.LlamaForCausalLM, tf.LlamaConfig) if family == "llama" else
                 (tf.Gemma3ForCausalLM, tf.Gemma3TextConfig))
    hf = cls(ccls(**cfg)).eval()
    hf.load_state_dict({k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in tm.tensors.items()}, strict=False)
    hf.tie_weights()
    prompt = torch.tensor([tm.tokenizer.encode(PROMPT)])
    with torch.no_grad():
        hf(prompt, use_cache=True)  # warm
        t = time.perf_counter()
        out = hf(prompt, use_cache=True)
        ttft = time.perf_counter() - t
        cache, tok = out.past_key_values, int(out.logits[0, -1].argmax())
        toks, step_s = [tok], []
        for _ in range(steps - 1):
            t = time.perf_counter()
            out = hf(torch.tensor([[tok]]), past_key_values=cache, use_cache=True)
            step_s.append(time.perf_counter() - t)
            cache, tok = out.past_key_values, int(out.logits[0, -1].argmax())
            toks.append(tok)
    nbytes = sum(p.numel() * p.element_size() for p in hf.parameters())
    return {"ttft": ttft, "steps": step_s, "tokens": toks, "bytes": nbytes,
            "label": "PyTorch eager (transformers, f32)"}


def peak_rss_mb() -> float:
    """This process's peak resident memory.  /proc's VmHWM, not getrusage: Linux carries ru_maxrss
    over exec from the parent that forked us (this script's parent holds the bandwidth probe's
    arrays), so every child would report at least the parent's peak."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(family: str, system: str, steps: int, threads: int) -> None:
    if system in ("native", "cpu"):
        res = _lightspeed(family, system, steps)
    elif system in ("native-q8", "native-exact"):  # blocks with other activations than the default
        os.environ["LIGHTSPEED_NATIVE_ACTIVATIONS"] = "q8" if system == "native-q8" else "float"
        res = _lightspeed(family, "native", steps)
    elif system == "native-f32":
        res = _lightspeed(family, "native", steps, blocks=False)
    elif system == "llama.cpp":
        res = _llama_cpp(family, steps, threads)
    else:
        res = _torch(family, steps, threads)
    res["rss_mb"] = peak_rss_mb()
    print("RESULT " + json.dumps(res))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), default="llama")
    ap.add_argument("--f32", action="store_true", help="an F32 copy of the file for every system")
    ap.add_argument("--f16", action="store_true",
                    help="an F16 copy for every system (lightspeed computes with float16 weights, torch f32)")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--child", choices=SYSTEMS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    global F32, F16
    F32, F16 = args.f32, args.f16 and not args.f32
    if args.child:
        child(args.model, args.child, args.steps, args.threads)
        return 0
    bw = copy_bandwidth()
    runs: dict[str, list[dict]] = {s: [] for s in args.only}
    for _ in range(args.rounds):
        for system in args.only:
            p = subprocess.run([sys.executable, __file__, "--child", system, "--model", args.model, "--steps",
                                str(args.steps), "--threads", str(args.threads)] + ["--f32"] * F32 + ["--f16"] * F16,
                               capture_output=True, text=True, cwd=ROOT)
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
            if p.returncode or not line:
                print(f"{system}: not measured (exit {p.returncode}): {p.stderr.strip().splitlines()[-1:]}")
                runs.pop(system, None)
                continue
            if system in runs:
                runs[system].append(json.loads(line[0][7:]))
    weights_file(args.model, F32, F16)  # made before the rounds
    name = MODELS[args.model] + (" (F32 copy)" if F32 else " (F16 copy)" if F16 else "")
    print(f"{name}, greedy from {PROMPT!r}, {args.steps} steps x {args.rounds} rounds (one process "
          f"per system and round, interleaved); {args.threads} threads; copy bandwidth {bw / 1e9:.1f} GB/s")
    print(f"  {'system':52s} {'TTFT':>9s} {'TPOT':>9s} {'tok/s':>7s} {'peak RSS':>9s} {'bytes/step':>10s} "
          f"{'% floor':>8s}")
    first = None
    tokens = {}
    for system, rs in runs.items():
        if not rs:
            continue
        tpot = statistics.median(s for r in rs for s in r["steps"][1:])
        ttft = statistics.median(r["ttft"] for r in rs)
        rss = max(r["rss_mb"] for r in rs)
        nbytes = rs[0]["bytes"]
        first = first or tpot
        floor = nbytes / bw
        print(f"  {rs[0]['label']:52s} {ttft * 1e3:7.1f}ms {tpot * 1e3:7.2f}ms {1 / tpot:7.1f} {rss:7.0f}MB "
              f"{nbytes / 1e6:8.0f}MB {100 * floor / tpot:7.0f}%   ({tpot / first:.2f}x the first)")
        tokens[system] = rs[0]["tokens"]
    ref = next(iter(tokens.values()), None)
    for system, toks in tokens.items():
        same = next((i for i, (a, b) in enumerate(zip(toks, ref)) if a != b), min(len(toks), len(ref)))
        print(f"  {system}: first {same} tokens equal to {next(iter(tokens))}'s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
