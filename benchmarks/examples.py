"""Run every example of the model zoo, check its output, and print a table of timings.

    python benchmarks/examples.py                      # all examples
    python benchmarks/examples.py --only llama whisper --backend cpu --max-tokens 16

Examples and their checks:

- **llama**: `lightspeed run llama "The capital of France is"` (SmolLM2-135M-Instruct, with the chat
  template and system message the CLI uses). Check: the answer contains "Paris".
- **gemma**: Gemma 3 270M *base*, raw text, through the CLI's own functions
  (`lightspeed.models.run.load_text_model`, `encode_prompt`, `compile_generator`) because the check needs
  the logits. Check: " Paris" is among the top-5 next tokens, or the text contains "Paris". The base
  model greedily continues "the capital of the country of France...", so the text alone is no test;
  its next-token distribution is.
- **qwen3, qwen3_moe, gemma4_moe** (no shipped weights): `lightspeed run FAMILY --random "The capital
  of France is"` (small built-in config, random weights from seed 0, byte-level tokenizer). Check:
  exit 0 and exactly --max-tokens tokens generated; when transformers is importable, the same config
  and random weights in transformers' model (float64; Qwen3ForCausalLM, Qwen3MoeForCausalLM,
  Gemma4ForCausalLM): the prefill logits at every prompt position and the logits behind every
  generated token (transformers recomputing the whole sequence) agree within 1e-4 of the largest logit.
- **whisper**: `lightspeed run whisper jfk.wav`, the WAV spoken by espeak-ng (22.05 kHz; lightspeed.models.audio
  resamples). Check: the transcript contains "what your country can do for you". SKIP without espeak-ng.

Examples that run the command are subprocesses of the installed `lightspeed` script, which is what a
user runs; its last stderr line gives TTFT, TPOT and tok/s. The wall time is the command's (or for
gemma the load + compile + generate calls'), checks excluded. Exit status 1 if any example FAILs.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

PROMPT = "The capital of France is"
JFK = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country"
JFK_CHECK = "what your country can do for you"
TIMING = re.compile(r"TTFT ([\d.]+) ms\s+TPOT ([\d.]+) ms\s+([\d.]+) tok/s")
GENERATED = re.compile(r"(\d+) generated \((\w+)\)")
HF_CLASSES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
              "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
              "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
              "gemma4_moe": ("Gemma4TextConfig", "Gemma4ForCausalLM")}
RTOL = 1e-4  # float32 lightspeed vs float64 transformers, relative to the largest logit (at least 1)


@dataclass
class Outcome:
    name: str
    status: str = "FAIL"  # PASS, FAIL or SKIP
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    tok_s: float | None = None
    wall_s: float | None = None
    detail: str = ""
    log: list[str] = field(default_factory=list)  # output shown when the example fails


def lightspeed_cmd() -> list[str]:
    """The `lightspeed` script of this interpreter's environment (what `pip install` put on PATH)."""
    script = Path(sys.executable).parent / "lightspeed"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "lightspeed"]


def run_cli(out: Outcome, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run `lightspeed ARGS...`, record its wall time and the timings it printed."""
    t0 = time.perf_counter()
    # one BLAS thread: on small machines OpenBLAS's threads only contend (docs/whisper.md)
    env = {"OPENBLAS_NUM_THREADS": "1", **os.environ}
    r = subprocess.run([*lightspeed_cmd(), *args], capture_output=True, text=True, timeout=timeout, env=env)
    out.wall_s = time.perf_counter() - t0
    out.log += [f"$ lightspeed {' '.join(args)}  (exit {r.returncode})", "stdout: " + r.stdout.strip()[-2000:],
                "stderr: " + r.stderr.strip()[-3000:]]
    m = TIMING.search(r.stderr)
    if m:
        out.ttft_ms, out.tpot_ms, out.tok_s = (float(v) for v in m.groups())
    return r


# ---------------------------------------------------------------------- examples
def ex_llama(out: Outcome, opts: argparse.Namespace) -> None:
    r = run_cli(out, "run", "llama", PROMPT, "--max-tokens", str(opts.max_tokens), "--backend", opts.backend)
    answer = r.stdout.strip()
    out.detail = f"answer: {answer[:60]!r}"
    out.status = "PASS" if r.returncode == 0 and "Paris" in answer else "FAIL"


def ex_gemma(out: Outcome, opts: argparse.Namespace) -> None:
    import lightspeed as ls
    from lightspeed.models.run import compile_generator, encode_prompt, load_text_model

    t0 = time.perf_counter()
    tm = load_text_model("gemma3", progress=False)
    ids = encode_prompt(tm, PROMPT)  # no chat template (base model): the raw text, as the CLI does
    gen = compile_generator(tm, opts.backend, ls.SearchOptions(budget=3, seed=0), say=None)  # the CLI's defaults
    tok = tm.tokenizer
    res = gen.generate(ids, opts.max_tokens, stop_ids=set(tm.model.config.eos_token_ids) | set(tok.eos_ids),
                       keep_logits=True)
    out.wall_s = time.perf_counter() - t0
    out.ttft_ms, out.tpot_ms, out.tok_s = res.ttft_s * 1e3, res.tpot_s * 1e3, res.tokens_per_s
    text = tok.decode(res.new_ids, skip_special=True)
    paris = tok.encode(" Paris", add_bos=False)[0]
    top5 = [int(i) for i in np.argsort(-res.logits[0])[:5]]
    rank = top5.index(paris) + 1 if paris in top5 else None
    out.detail = (f"' Paris' is next-token #{rank}" if rank else "' Paris' not in the top 5") + \
        f"; top 5 {[tok.decode([i]) for i in top5]}; text {text[:40]!r}"
    out.log.append(f"gemma text: {text!r}")
    out.status = "PASS" if rank is not None or "Paris" in text else "FAIL"


def _hf_model(family: str, cfg: dict, tensors: dict) -> object:
    """transformers' model of ``family`` built from the same config dict, holding ``tensors``, in float64."""
    import torch
    import transformers as tf

    conf_cls, model_cls = (getattr(tf, n) for n in HF_CLASSES[family])
    kw = {k: v for k, v in cfg.items() if k != "model_type"}
    if family in ("qwen3_moe", "gemma4_moe"):
        kw["experts_implementation"] = "eager"  # the reference loop over experts, exact in float64
    model = model_cls(conf_cls(**kw)).eval()
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in tensors.items()},
                                                strict=False)
    missing = [k for k in missing if k != "lm_head.weight" or not kw.get("tie_word_embeddings")]
    if missing or unexpected:
        raise AssertionError(f"transformers' {model_cls.__name__} does not take these weights: missing {missing[:3]}, "
                             f"unexpected {unexpected[:3]}")
    model.tie_weights()
    return model.double()


def _compare_with_hf(family: str, opts: argparse.Namespace) -> str:
    """Max relative logit error of the same random model against transformers (prefill at every
    position, then each generated token's logits); raises AssertionError when over RTOL."""
    import torch

    import lightspeed as ls
    from lightspeed.models.generate import compile_model
    from lightspeed.models.run import compile_generator, encode_prompt, load_text_model

    tm = load_text_model(family, random=True, seed=0, progress=False)  # what `lightspeed run --random` builds
    ids = encode_prompt(tm, PROMPT)
    search = ls.SearchOptions(budget=3, seed=0)
    prefill = compile_model(tm.model, "prefill", opts.backend, search, all_logits=True)
    got = prefill({"input_ids": np.asarray(ids, np.int64), "positions": np.arange(len(ids)),
                   **tm.model.check_weights(tm.tensors)})["logits"]
    res = compile_generator(tm, opts.backend, search, say=None).generate(ids, opts.max_tokens, stop_ids=(),
                                                                          keep_logits=True)
    hf = _hf_model(family, dict(tm.config), dict(tm.tensors))
    torch.set_num_threads(1)  # tiny model: threads only contend on a small machine
    with torch.no_grad():
        ref = hf(torch.tensor([res.ids[:-1]])).logits[0].numpy()
    scale = max(1.0, float(np.abs(ref).max()))
    e_prefill = float(np.abs(got - ref[:len(ids)]).max()) / scale
    e_decode = float(np.abs(np.stack(res.logits) - ref[len(ids) - 1:]).max()) / scale
    msg = f"vs HF {HF_CLASSES[family][1]}: prefill {e_prefill:.1e}, {len(res.new_ids)} tokens {e_decode:.1e}"
    if max(e_prefill, e_decode) > RTOL:
        raise AssertionError(msg + f" > {RTOL:g}")
    return msg


def ex_random(family: str) -> Callable[[Outcome, argparse.Namespace], None]:
    def run(out: Outcome, opts: argparse.Namespace) -> None:
        n = opts.max_tokens
        r = run_cli(out, "run", family, "--random", PROMPT, "--max-tokens", str(n), "--backend", opts.backend)
        m = GENERATED.search(r.stderr)
        made = int(m.group(1)) if m else None
        if r.returncode != 0 or made != n:
            out.detail = f"exit {r.returncode}, {made} of {n} tokens"
            return
        try:
            import torch  # noqa: F401
            import transformers  # noqa: F401
        except ImportError as e:
            out.status, out.detail = "PASS", f"{n} tokens; not compared with transformers ({e})"
            return
        try:
            out.detail = f"{n} tokens; " + _compare_with_hf(family, opts)
            out.status = "PASS"
        except AssertionError as e:
            out.detail = str(e)
    return run


def ex_whisper(out: Outcome, opts: argparse.Namespace) -> None:
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        out.status, out.detail = "SKIP", "espeak-ng is not installed (apt-get install espeak-ng) to speak the WAV"
        return
    with tempfile.TemporaryDirectory(prefix="lightspeed-examples-") as tmp:
        wav = Path(tmp) / "jfk.wav"
        subprocess.run([espeak, "-w", str(wav), JFK], check=True, capture_output=True)  # 22.05 kHz: resampled
        r = run_cli(out, "run", "whisper", str(wav), "--backend", opts.backend)
    text = r.stdout.strip()
    norm = " ".join(re.sub(r"[^a-z ]", " ", text.lower()).split())
    out.detail = f"transcript: {text[:60]!r}{'...' if len(text) > 60 else ''}"
    out.status = "PASS" if r.returncode == 0 and JFK_CHECK in norm else "FAIL"


EXAMPLES: dict[str, Callable[[Outcome, argparse.Namespace], None]] = {
    "llama": ex_llama, "gemma": ex_gemma, "qwen3": ex_random("qwen3"), "qwen3_moe": ex_random("qwen3_moe"),
    "gemma4_moe": ex_random("gemma4_moe"), "whisper": ex_whisper,
}


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(outcomes: list[Outcome]) -> str:
    head = ("example", "status", "TTFT ms", "TPOT ms", "tok/s", "wall s", "check")
    rows = [(o.name, o.status, _fmt(o.ttft_ms, ".1f"), _fmt(o.tpot_ms, ".1f"), _fmt(o.tok_s, ".1f"),
             _fmt(o.wall_s, ".1f"), o.detail) for o in outcomes]
    widths = [max(len(str(r[i])) for r in (head, *rows)) for i in range(len(head) - 1)]
    lines = []
    for r in (head, *rows):
        lines.append("  ".join(f"{c:<{w}}" if i < 2 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(r, widths)))
                     + "  " + r[-1])
        if r is head:
            lines.append("-" * len(lines[0]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="+", choices=list(EXAMPLES), metavar="NAME",
                    help=f"run only these examples ({', '.join(EXAMPLES)})")
    ap.add_argument("--backend", default="cpu", help="cpu (default), cuda, native, reference or auto")
    ap.add_argument("--max-tokens", type=int, default=16, help="tokens the text examples generate (default 16; "
                    "whisper transcribes the whole clip)")
    opts = ap.parse_args(argv)
    outcomes = []
    for name in opts.only or EXAMPLES:
        out = Outcome(name)
        print(f"{name} ...", end=" ", flush=True)
        t0 = time.perf_counter()
        try:
            EXAMPLES[name](out, opts)
        except Exception as e:  # an example that crashes is a FAIL in the table, the others still run
            out.status, out.detail = "FAIL", f"{type(e).__name__}: {e}"
        print(f"{out.status} ({time.perf_counter() - t0:.1f} s)", flush=True)
        if out.status == "FAIL" and out.log:
            print("\n".join("    " + line for line in "\n".join(out.log).splitlines()), flush=True)
        outcomes.append(out)
    print()
    print(table(outcomes))
    return 1 if any(o.status == "FAIL" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
