"""Text generation with a compiled prefill program, a compiled decode program and a KV cache.

    gen = Generator(model, weights)                     # compiles prefill + decode once (cached)
    res = gen.generate(prompt_ids, max_new_tokens=32)  # greedy; temperature/top_k/top_p to sample
    res.new_ids, res.ttft_s, res.tpot_s, res.tokens_per_s

The KV cache is one preallocated numpy buffer per layer and per K/V, ``[max_len, n_kv, head_dim]``.
Prefill returns its rows (``new.{i}.k/v``), stored once at ``[0, n)``; every decode step takes the
whole buffers as its ``cache.{i}.k/v`` inputs with ``dims={"p": p}`` and writes its new row at
``p`` in place (the outputs alias the inputs): the host sends a token id and receives logits, and
no cache row is copied.  On a device backend (``Backend.device_memory``: cuda) a greedy step (no
repetition penalty, logits not kept) fetches only the decode program's own argmax
(``next_token``): one token id comes back, not the logits.  Weights are made resident once
(``Program.persist``) and the programs are planned once for the longest prompt and cache
(``Program.reserve``).  See docs/models.md.

Sampling follows Hugging Face's logits processors, in its order: repetition penalty, temperature,
top-k, top-p; then a draw from a seeded numpy RNG.  ``temperature=0`` is greedy (argmax, on the
device where the decode program makes it).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..backends import get_backend
from ..errors import InputError, LightspeedError
from ..nn.moe import MOE_CONFIG_MODES
from ..program import BucketedProgram, Pending, Program
from ..search import SearchOptions
from .base import DecoderLM

__all__ = ["Generator", "GenerationState", "TokenStream", "check_request", "RankPrograms", "one_process",
           "GenerationResult", "generate", "apply_repetition_penalty", "top_k_mask", "top_p_mask", "process_logits",
           "sample_token", "compile_model", "record_build", "profile_options"]


# ---------------------------------------------------------------------- samplers (pure numpy)
def apply_repetition_penalty(logits: np.ndarray, history: Iterable[int], penalty: float) -> np.ndarray:
    """HF's RepetitionPenaltyLogitsProcessor: each token seen before has its logit divided by
    ``penalty`` if positive, multiplied by it if negative (once per token, however often seen)."""
    out = np.array(logits, dtype=np.float64)
    if penalty == 1.0:
        return out
    if penalty <= 0:
        raise ValueError(f"repetition_penalty must be > 0, got {penalty}")
    ids = np.unique(np.fromiter(history, dtype=np.int64))
    if ids.size:
        v = out[ids]
        out[ids] = np.where(v > 0, v / penalty, v * penalty)
    return out


def top_k_mask(logits: np.ndarray, k: int) -> np.ndarray:
    """Keep the ``k`` largest logits (and any tied with the k-th), set the rest to -inf (HF TopK)."""
    out = np.array(logits, dtype=np.float64)
    if k <= 0 or k >= out.size:
        return out
    kth = np.partition(out, -k)[-k]
    out[out < kth] = -np.inf
    return out


def top_p_mask(logits: np.ndarray, p: float) -> np.ndarray:
    """Nucleus filtering as HF's TopPLogitsWarper: sort ascending, drop the tokens whose cumulative
    probability (theirs plus all smaller ones) is at most ``1 - p``; the most likely token stays."""
    out = np.array(logits, dtype=np.float64)
    if p >= 1.0:
        return out
    if p <= 0:
        raise ValueError(f"top_p must be in (0, 1], got {p}")
    order = np.argsort(out, kind="stable")
    srt = out[order]
    probs = np.exp(srt - srt[-1])
    probs /= probs.sum()
    remove = np.cumsum(probs) <= 1.0 - p
    remove[-1] = False
    out[order[remove]] = -np.inf
    return out


def process_logits(logits: np.ndarray, history: Sequence[int] = (), *, temperature: float = 1.0,
                   top_k: int | None = None, top_p: float | None = None,
                   repetition_penalty: float = 1.0) -> np.ndarray:
    """The sampling distribution's logits (float64, -inf for filtered tokens), HF order."""
    out = apply_repetition_penalty(logits, history, repetition_penalty)
    if temperature > 0 and temperature != 1.0:
        out = out / temperature
    if top_k:
        out = top_k_mask(out, int(top_k))
    if top_p is not None and top_p < 1.0:
        out = top_p_mask(out, float(top_p))
    return out


def sample_token(logits: np.ndarray, rng: np.random.Generator, history: Sequence[int] = (), *,
                 temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                 repetition_penalty: float = 1.0) -> int:
    """One token: argmax when ``temperature == 0`` (after the repetition penalty), else a draw
    from the processed distribution (inverse CDF of one uniform from ``rng``)."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0:
        if repetition_penalty == 1.0:  # no copy to float64 (~85 us for a 128k vocabulary; float32 is exact)
            return int(np.argmax(np.asarray(logits).astype(np.float32, copy=False)))
        return int(np.argmax(apply_repetition_penalty(logits, history, repetition_penalty)))
    z = process_logits(logits, history, temperature=temperature, top_k=top_k, top_p=top_p,
                       repetition_penalty=repetition_penalty)
    probs = np.exp(z - z.max())
    cdf = np.cumsum(probs)
    i = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    return min(i, z.size - 1)


@functools.cache
def token_sampler(backend: str) -> Any | None:
    """``backend``'s token sampler (``Backend.sampler``: native's C kernel, cuda's kernel), built
    once per process when a request first samples; None where the host samples in numpy (the
    reference and cpu backends, or a sampler that could not be built: said once, as a warning)."""
    try:
        return get_backend(backend).sampler()
    except LightspeedError as e:
        warnings.warn(f"lightspeed: {backend}'s token sampler could not be built ({e}); sampling on the host",
                      RuntimeWarning, stacklevel=2)
        return None


# ---------------------------------------------------------------------- compiling
_PROGRAMS: dict[tuple, Program] = {}


# a prompt of at least this many tokens runs a prefill program searched at PROMPT_ROWS[1] rows,
# where the backend offers kernels for many rows only (tensor-core tiles: OpDecl.many_rows); a
# shorter one the program searched at PROMPT_ROWS[0] (the tiles' 64 rows would be mostly padding)
PROMPT_ROWS = (16, 128)
LONG_PROMPT = 64


# profile at the shapes the programs will see: a 16-token prompt; one token after 64 cached ones
# the paged step (models/batch.py) is profiled at a busy step: decode rows and a prompt chunk
# an ``extend`` program (the decode graph run over a long prompt's later chunks) at a chunk's rows
_PROFILE_DIMS = {"prefill": {"s": PROMPT_ROWS[0]}, "decode": {"s": 1, "p": 64, "M": 128},
                 "paged": {"s": 8, "NP": 4, "N": 16, "r": 8}, "extend": {"s": 64, "p": 64, "M": 192}}
# prompts longer than this are prefilled in chunks of it: the first by the prefill program, the
# others by the extend program after the cached rows, so a prefill's intermediates stay bounded
# by the chunk whatever the prompt's length (Generator(prefill_chunk=...))
PREFILL_CHUNK = 2048


def profile_options(mode: str, search: SearchOptions | None = None) -> SearchOptions:
    """The search options a model's ``mode`` program compiles with: ``search`` (default budget 3,
    seed 0), profiled at the shapes the program will see unless it names dims, the weights (its
    inputs of static shape) timed resident, as a generator persists them."""
    opts = search or SearchOptions(budget=3, seed=0)
    opts = dataclasses.replace(opts, static_resident=True)
    return opts if opts.dims is not None else dataclasses.replace(opts, dims=_PROFILE_DIMS[mode])


# a paged step of fewer rows than this (a few streams decoding) runs the paged program searched at
# PAGED_FEW_DIMS; more rows (many streams, a prompt chunk) the one searched at _PROFILE_DIMS["paged"]:
# on an H100 the attention tiles chosen for 8 rows took 44 us a layer for one row (the 1B's paged
# step 3.18 ms at one stream, 2.19 without the tiles; 3.38 vs 5.38 at 32 streams; twentieth session)
PAGED_FEW = 8
PAGED_FEW_DIMS = {"s": 1, "NP": 4, "N": 16, "r": 1}


def row_buckets(backend: str, mode: str, search: SearchOptions | None
                   ) -> list[tuple[dict[str, tuple[int, int]], dict[str, int]]]:
    """``[(ranges of s, the dims it is searched at)]``: the prefill program's two buckets (short
    and long prompts), the paged program's two (few rows and many: :data:`PAGED_FEW`) where the
    backend declares many-rows kernels and the caller's options name no dims nor buckets (else
    it is searched where asked), none otherwise.  Whole programs per bucket, not
    ``SearchOptions.dim_buckets``: those bucket a rolled model's template part, which a kernel
    backend then cannot stitch into one program (one CUDA graph per step)."""
    if mode not in ("prefill", "paged") or (search is not None and (search.dims is not None or search.dim_buckets)):
        return []
    if not any(d.many_rows for d in get_backend(backend).declarations().values()):
        return []
    dims = _PROFILE_DIMS[mode]
    if mode == "paged":
        return [({"s": (1, PAGED_FEW - 1)}, PAGED_FEW_DIMS), ({"s": (PAGED_FEW, 1 << 31)}, dims)]
    return [({"s": (1, LONG_PROMPT - 1)}, {**dims, "s": PROMPT_ROWS[0]}),
            ({"s": (LONG_PROMPT, 1 << 31)}, {**dims, "s": PROMPT_ROWS[1]})]


def compile_model(model: DecoderLM, mode: str, backend: str = "cpu", search: SearchOptions | None = None,
                  all_logits: bool = False, storage: Mapping[str, Any] | None = None, buckets: bool = True
                  ) -> Program:
    """The compiled prefill or decode program of ``model``, cached in-process by (model class,
    config, dtype, mode, backend, search options, weight storage dtypes): programs do not depend
    on weight values.  A prefill or paged step on a backend with many-rows kernels is two
    programs by row count (:func:`row_buckets`), each searched at its own rows, unless
    ``buckets`` is False (one program: a row's arithmetic the same at every row count)."""
    opts = profile_options(mode, search)
    graph_mode = "decode" if mode == "extend" else mode  # the same graph, searched at a chunk's rows
    stored = tuple(sorted((n, d.name) for n, d in (storage or {}).items()))
    # on a device, greedy steps fetch the program's own argmax instead of the logits
    token = get_backend(backend).device_memory
    moe = moe_prefill_choice()
    key = (type(model), repr(model.config), model.dtype, mode, all_logits, backend, repr(opts), stored, token,
           buckets, moe)
    prog = _PROGRAMS.get(key)
    if prog is None:
        t0 = time.perf_counter()
        # an "auto" mixture-of-experts prompt (and a paged step's rows): gathered where the backend
        # groups the chosen rows by expert (``Backend.groups_gathered_rows``: native's GatherMatmul,
        # 46.5 ms vs the dense form's 263 for one layer at 128 tokens, 0.80 vs 8.6 at one, 2-core
        # VM; cuda's tensor-core tiles, a 512-token Qwen3-30B-A3B-shaped prompt 6.90 ms vs 27.07
        # dense, H100), else the dense batched products (the cpu backend, whose Gather would copy
        # them) (LIGHTSPEED_MOE_PREFILL=gather|dense overrides it)
        grouped = get_backend(backend).groups_gathered_rows
        g = model.build_graph(graph_mode, all_logits, storage, next_token=token,
                              moe_prefill=("gather" if grouped else "dense") if moe == "auto" else moe)
        built = time.perf_counter() - t0
        split = row_buckets(backend, mode, search) if buckets else []
        if split:
            prog = BucketedProgram(g, [(ranges, g.compile(backend=backend, search=dataclasses.replace(
                opts, dims=dims))) for ranges, dims in split])
        else:
            prog = g.compile(backend=backend, search=opts)
        record_build(prog, built)
        _PROGRAMS[key] = prog
    return prog


def moe_prefill_choice() -> str:
    """``$LIGHTSPEED_MOE_PREFILL``: a mixture-of-experts prompt's form, ``auto`` (the default: gathered
    where the backend groups the rows by expert -- native's GatherMatmul, cuda's tensor-core tiles --
    dense elsewhere), ``gather`` or ``dense``."""
    mode = os.environ.get("LIGHTSPEED_MOE_PREFILL", "auto")
    if mode not in MOE_CONFIG_MODES:
        raise ValueError(f"LIGHTSPEED_MOE_PREFILL must be one of {MOE_CONFIG_MODES}, got {mode!r}")
    return mode


def record_build(prog: Program, seconds: float) -> None:
    """Put the graph's build time first among the phases its search report shows (``--verbose``)."""
    rep = getattr(prog, "search_report", None)
    if rep is not None:
        rep.phases = {"build": seconds, **rep.phases}


# ---------------------------------------------------------------------- generation
@dataclass
class GenerationResult:
    """Token ids (prompt + new), the new ones, why generation stopped and the timings: ``ttft_s``
    (prefill + first token), ``tpot_s`` (mean decode step), ``tokens_per_s`` (1 / tpot)."""

    ids: list[int]
    new_ids: list[int]
    stop_reason: str  # "stop_token" | "max_tokens" | "cancelled"
    ttft_s: float
    tpot_s: float
    tokens_per_s: float
    prefill_s: float
    step_s: list[float] = field(default_factory=list)
    logits: list[np.ndarray] | None = None  # raw logits behind each new token (keep_logits=True)

    @property
    def total_s(self) -> float:
        return self.ttft_s + sum(self.step_s)


@dataclass
class RankPrograms:
    """What this process runs of a model: ``model``, whose graphs and KV cache it holds (the model
    itself, or this rank's shard under tensor parallel), its checked ``weights``, the compiled
    ``prefill`` and ``decode`` programs with those weights resident, and ``group``: the other ranks
    this process leads, which run every request in step (``follow(**request)``, ``finish()``,
    ``close()``: ``lightspeed.parallel.TensorParallelGroup``), or None."""

    model: DecoderLM
    weights: dict[str, Any]
    prefill: Program
    decode: Program
    group: Any = None
    # the extend program (a long prompt's later chunks), compiled on first use; None: none
    extend: Callable[[], Program] | None = None


def one_process(model: DecoderLM, weights: Mapping[str, Any], backend: str, search: SearchOptions | None
                ) -> RankPrograms:
    """The programs of ``model`` compiled in this process alone (the default of :class:`Generator`)."""
    checked = model.check_weights(weights)
    # the weights become resident once (checked and placed on the device), not passed per step;
    # GGUF block matrices a backend reads as blocks keep their block dtype in the graphs
    storage = model.block_storage(checked, backend)
    prefill = compile_model(model, "prefill", backend, search, storage=storage)
    decode = compile_model(model, "decode", backend, search, storage=storage)
    if get_backend(backend).device_memory:  # uploaded anyway: stacked weights laid out in place
        checked = stacked_layout(prefill, checked, [*prefill.weight_stacks(), *decode.weight_stacks()])
    prefill = prefill.persist(checked)
    # the other programs take the prefill's resident weights as they lie: one device copy (and one
    # placing of GGUF blocks), not one per program (a 1B's 2.5 GB three times on a GPU)
    placed = prefill.resident
    decode = decode.persist(placed)

    def extend() -> Program:
        return compile_model(model, "extend", backend, search, storage=storage).persist(placed)
    return RankPrograms(model, checked, prefill, decode, extend=extend)


def stacked_layout(prog: Program, weights: Mapping[str, Any], stacks: Sequence[tuple[str, ...]]) -> dict[str, Any]:
    """``weights`` on ``prog``'s device with each stack's members (host arrays of one dtype and
    row width) one after another in its order, as row views of one array: a program that reads
    them stacked (codegen/stacked.egg: a layer's q, k and v) then reads the stack in place, with
    no second copy of them (``KernelProgram._hoist``).  A weight in two stacks keeps the first."""
    out, taken = dict(weights), set()
    for names in stacks:
        arrays = [weights.get(n) for n in names]
        if taken & set(names) or not all(isinstance(a, np.ndarray) and a.ndim == 2 for a in arrays) \
                or len({(a.dtype, a.shape[1]) for a in arrays}) != 1:
            continue
        whole = prog.to_device(np.concatenate(arrays))
        start = 0
        for name, a in zip(names, arrays):
            out[name] = prog.rows(whole, start, a.shape[0])
            start += a.shape[0]
        taken |= set(names)
    return out


class Generator:
    """Compiled prefill + decode programs of ``model`` with its ``weights`` (HF state_dict names;
    checked once).  ``backend`` 'cpu' (default) or 'reference'; ``search`` the cpu search options.
    ``programs(model, weights, backend, search)`` makes this process's :class:`RankPrograms`: by
    default :func:`one_process`; ``lightspeed.parallel.tensor_parallel_generator`` passes a tensor-
    parallel rank's (this module knows nothing of tensor parallel).  ``close()`` stops the ranks this
    generator leads, if any.  ``prefill_chunk``: a longer prompt is prefilled in chunks of this
    many tokens (the first by the prefill program, the rest by the extend program, compiled when
    first needed), so its intermediates are bounded by the chunk (the KV cache grows with the
    prompt); ranks without an extend program prefill whole prompts."""

    def __init__(self, model: DecoderLM, weights: Mapping[str, Any], *, backend: str = "cpu",
                 search: SearchOptions | None = None,
                 programs: Callable[[DecoderLM, Mapping[str, Any], str, SearchOptions | None], RankPrograms]
                 = one_process, prefill_chunk: int = PREFILL_CHUNK) -> None:
        if prefill_chunk < 1:
            raise InputError(f"prefill_chunk must be at least 1, got {prefill_chunk}")
        self.model = model
        self.backend = backend
        t0 = time.perf_counter()
        mine = programs(model, weights, backend, search)
        self.shard = mine.model  # the model whose graphs and KV cache this process runs
        self.weights, self.prefill, self.decode = mine.weights, mine.prefill, mine.decode
        self.group = mine.group  # the tensor-parallel ranks this process leads
        self._make_extend, self._extend = mine.extend, None
        self.prefill_chunk = prefill_chunk if mine.extend is not None else None
        self.compile_s = time.perf_counter() - t0
        self._pool = threading.local()  # this thread's KV caches a finished generation left (take_caches)

    def take_caches(self, shapes: Sequence[tuple[int, ...]], dtype: Any) -> KVCaches:
        """KV caches of these shapes, zeroed: on a device backend the ones this thread's last
        finished generation left, cleared on the thread's stream (the first token then makes no
        allocation nor views, and the programs' tables keep their entries: ~0.35 ms of a 1B's
        first token on an H100 host, twenty-fourth session), else new ones."""
        key = (tuple(map(tuple, shapes)), np.dtype(dtype).str)
        kept = self._pool.__dict__.pop("caches", None)
        if kept is not None and kept.key == key:
            for whole in kept.wholes:
                self.decode.clear(whole)
            return kept
        wholes: list[Any] = []
        bufs = cache_buffers(self.decode, shapes, dtype, wholes)
        return KVCaches(key, wholes, bufs, threading.get_ident())

    def give_caches(self, caches: KVCaches) -> None:
        """Keep a finished generation's caches for this thread's next one (one set: a device
        backend's allocator caches what it frees anyway); another thread's, or a host
        backend's (its memory goes back), are dropped."""
        if caches.thread == threading.get_ident() and get_backend(self.backend).device_memory:
            self._pool.caches = caches

    @property
    def extend(self) -> Program:
        """The program that runs a long prompt's later chunks after the cached rows (compiled on
        first use: the decode graph searched at a chunk's rows)."""
        if self._extend is None:
            if self._make_extend is None:
                raise InputError("this generator has no extend program (prompts are prefilled whole)")
            self._extend = self._make_extend()
        return self._extend

    def warm_up(self, prompt_len: int) -> float:
        """Run a throwaway prompt of ``prompt_len`` tokens and a decode step, so what a device
        backend does on a program's first call at these dims (plans, graph captures, lazily
        loaded kernels, library plans) happens here and not in the next request's TTFT (the CLI
        reports it with the compile time); returns its seconds.  Requests after it are unchanged:
        each gets its own cache and sampler."""
        t0 = time.perf_counter()
        self.generate([0] * max(1, prompt_len), 2, stop_ids=())
        return time.perf_counter() - t0

    def chunked(self, prompt_len: int) -> bool:
        """Whether a prompt of ``prompt_len`` tokens is prefilled in chunks."""
        return self.prefill_chunk is not None and prompt_len > self.prefill_chunk

    def close(self) -> None:
        """Stop the tensor-parallel ranks this generator leads (nothing on one process)."""
        if self.group is not None:
            self.group.close()

    def start(self, prompt_ids: Sequence[int], max_new_tokens: int = 64, *, temperature: float = 0.0,
              top_k: int | None = None, top_p: float | None = None, repetition_penalty: float = 1.0,
              seed: int | None = 0, stop_ids: Iterable[int] | None = None, keep_logits: bool = False,
              reserve: bool = True) -> GenerationState:
        """A generation of ``prompt_ids`` ready to run one token at a time (:class:`GenerationState`:
        ``advance()`` prefills, then decodes): its own KV cache of ``len(prompt) + max_new_tokens``
        rows, its own seeded sampler.  Several may be in flight on one generator, interleaved at
        token boundaries (``lightspeed serve``); each one's tokens do not depend on the others.
        ``reserve=False``: the caller has planned the programs for the longest sequence already."""
        prompt, stops = check_request(self.model, prompt_ids, max_new_tokens, stop_ids)
        params = dict(temperature=temperature, top_k=top_k, top_p=top_p, repetition_penalty=repetition_penalty)
        if self.group is not None:  # the other ranks run the same loop in step (same logits, same tokens)
            self.group.follow(prompt_ids=prompt, max_new_tokens=max_new_tokens, seed=seed, stop_ids=sorted(stops),
                              **params)
        max_len = len(prompt) + max_new_tokens
        if reserve:  # plan once for the longest prompt and cache this call can reach: no step prepares anything
            chunk = min(len(prompt), self.prefill_chunk or len(prompt))
            self.prefill.reserve(s=chunk)
            self.decode.reserve(**{k: v for k, v in {"p": max_len, "M": max_len}.items()
                                   if k in self.decode.symbols})
            if self.chunked(len(prompt)):
                self.extend.reserve(**{k: v for k, v in {"s": chunk, "p": max_len, "M": max_len}.items()
                                       if k in self.extend.symbols})
        return GenerationState(self, prompt, max_new_tokens, stops, np.random.default_rng(seed), params,
                               [] if keep_logits else None)

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int = 64, *, temperature: float = 0.0,
                 top_k: int | None = None, top_p: float | None = None, repetition_penalty: float = 1.0,
                 seed: int | None = 0, stop_ids: Iterable[int] | None = None,
                 on_token: Callable[[int], Any] | None = None, keep_logits: bool = False) -> GenerationResult:
        """Prefill ``prompt_ids``, then decode one token per step until a stop token (default:
        the model's EOS ids; it is included in the result) or ``max_new_tokens``.  ``on_token``
        is called with each new token as soon as it is chosen; ``keep_logits`` keeps the raw
        logits [vocab] each token was chosen from."""
        state = self.start(prompt_ids, max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                           repetition_penalty=repetition_penalty, seed=seed, stop_ids=stop_ids,
                           keep_logits=keep_logits)
        while not state.done:
            tok = state.advance()
            if on_token is not None:
                on_token(tok)
        if self.group is not None:
            self.group.finish()
        return state.result()

    def _store(self, out: Mapping[str, np.ndarray], kbuf: list[Any], vbuf: list[Any], p: int, s: int) -> None:
        from ..backends import get_backend

        write = get_backend(self.backend).write_rows
        for i in range(len(kbuf)):
            write(kbuf[i], p, out[f"new.{i}.k"])
            write(vbuf[i], p, out[f"new.{i}.v"])


def check_request(model: DecoderLM, prompt_ids: Sequence[int], max_new_tokens: int,
                  stop_ids: Iterable[int] | None) -> tuple[list[int], set[int]]:
    """A generation request checked (errors name what is wrong): the prompt as ints, and the stop
    ids (default: the model's EOS ids)."""
    cfg = model.config
    prompt = [int(t) for t in prompt_ids]
    if not prompt:
        raise InputError("generate: the prompt is empty")
    bad = [t for t in prompt if not 0 <= t < cfg.vocab_size]
    if bad:
        raise InputError(f"generate: token id {bad[0]} is outside the vocabulary (size {cfg.vocab_size})")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    return prompt, set(cfg.eos_token_ids if stop_ids is None else (int(t) for t in stop_ids))


def last_row(token: Any) -> Any:
    """A decode step's ``input_ids`` ([1] int64) from a host id list or a step's ``next_token``
    output (the last row's argmax: shape [1], where the backend holds it)."""
    if isinstance(token, list):
        return np.asarray(token[-1:], dtype=np.int64)
    if tuple(token.shape) != (1,):
        raise InputError(f"a decode step's next_token has shape {tuple(token.shape)}, expected (1,)")
    return token


class TokenStream:
    """What one generation has chosen so far: its ids, why it ended (``stop_reason``), the raw
    logits of its last token, its timings.  :meth:`choose` samples the next token; a subclass
    runs the programs (:class:`GenerationState`, ``models.batch.PagedSequence``) and frees its
    cache in :meth:`close`, which also runs when the generation ends."""

    def __init__(self, prompt: list[int], max_new_tokens: int, stops: set[int], rng: np.random.Generator,
                 params: dict[str, Any], kept: list[np.ndarray] | None) -> None:
        self.prompt, self.max_new_tokens, self.stops = prompt, max_new_tokens, stops
        self.rng, self.params, self.kept = rng, params, kept
        self.ids: list[int] = list(prompt)
        self.cached = 0  # prompt tokens whose keys and values came from a prefix cache (a paged batch's)
        self.stop_reason: str | None = None
        self.ttft_s = self.prefill_s = 0.0
        self.step_s: list[float] = []
        self.last_logits: np.ndarray | None = None
        # a caller that reads ``last_logits`` after every token (a server's logprobs) sets this
        self.want_logits = False
        # the backend's token sampler for host logits (Backend.sampler), set by a subclass
        self.sampler: Any | None = None

    @property
    def done(self) -> bool:
        return self.stop_reason is not None

    @property
    def new_ids(self) -> list[int]:
        return self.ids[len(self.prompt):]

    def choose(self, logits: np.ndarray, since: float, token: int | None = None) -> int:
        """The next token from the raw ``logits`` (kept for logprobs, and in ``kept`` if asked):
        ``token`` where the caller sampled it already (rows sampled together, each with its
        stream's :meth:`sample_row`), else the backend's sampler or :func:`sample_token`; the
        time from ``since`` counts as the first token's or as one step's."""
        self.last_logits = logits
        if self.kept is not None:
            self.kept.append(logits.copy())
        if token is None:
            row = self.sample_row() if self.sampler is not None else None
            if row is not None:
                token = int(self.sampler.sample(np.asarray(logits).reshape(1, -1), [row]).result()["ids"][0])
            else:
                token = sample_token(logits, self.rng, self.ids, **self.params)
        return self.chose(token, since)

    def sample_row(self) -> list[float] | None:
        """This token's row of a sampler's ``params`` (temperature, top_k, top_p, u), drawing u
        from the stream's generator as :func:`sample_token` would; None where the host samples
        (greedy: an argmax; a repetition penalty: it reads the history)."""
        p = self.params
        temperature = p.get("temperature", 0.0)
        if temperature <= 0 or p.get("repetition_penalty", 1.0) != 1.0:
            return None
        top_p = p.get("top_p")
        return [float(temperature), float(p.get("top_k") or 0), 1.0 if top_p is None else float(top_p),
                float(self.rng.random())]

    def chose(self, tok: int, since: float) -> int:
        """Record ``tok`` as the next token (chosen from this step's logits, here or on the device)."""
        self.ids.append(tok)
        if len(self.ids) == len(self.prompt) + 1:
            self.ttft_s = time.perf_counter() - since
        else:
            self.step_s.append(time.perf_counter() - since)
        if tok in self.stops:
            self.stop_reason = "stop_token"
        elif len(self.ids) - len(self.prompt) >= self.max_new_tokens:
            self.stop_reason = "max_tokens"
        if self.done:
            self.close()
        return tok

    def cancel(self) -> None:
        """End this generation now (its cache freed); ``stop_reason`` becomes "cancelled"."""
        if not self.done:
            self.stop_reason = "cancelled"
        self.close()

    def close(self) -> None:
        """Free the generation's cache (a subclass's)."""

    def result(self) -> GenerationResult:
        tpot = float(np.mean(self.step_s)) if self.step_s else 0.0
        return GenerationResult(ids=list(self.ids), new_ids=self.new_ids, stop_reason=self.stop_reason or "running",
                                ttft_s=self.ttft_s, tpot_s=tpot, tokens_per_s=1.0 / tpot if tpot > 0 else 0.0,
                                prefill_s=self.prefill_s, step_s=list(self.step_s), logits=self.kept)


ALIGN = 256  # bytes: where each of cache_buffers' views starts


def cache_buffers(prog: Any, shapes: Sequence[tuple[int, ...]], dtype: Any, wholes: list[Any] | None = None
                  ) -> list[Any]:
    """Zero-filled arrays of these shapes on ``prog``'s device (a generation's KV caches), as
    row views of one allocation per distinct row shape, cleared once: on a GPU each array was an
    allocation (a fresh ``cuMemAlloc`` when its size class was new) and a clearing launch of its
    own, 32 for a 16-layer model, on the first token's path (a 32-token TTFT grew ~0.15 ms a
    layer on an H100, twenty-second session)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, shape in enumerate(shapes):
        groups.setdefault(tuple(shape[1:]), []).append(i)
    out: list[Any] = [None] * len(shapes)
    for tail, members in groups.items():
        # each view starts 256-byte aligned, as an allocation of its own did (vector loads)
        row_bytes = max(1, math.prod(tail) * np.dtype(dtype).itemsize)
        step = ALIGN // math.gcd(row_bytes, ALIGN)
        starts = np.cumsum([0] + [-(-shapes[i][0] // step) * step for i in members])
        whole = prog.zeros((int(starts[-1]), *tail), dtype)
        if wholes is not None:  # (the allocations, for a reuse to clear)
            wholes.append(whole)
        for i, start in zip(members, starts[:-1]):
            out[i] = prog.rows(whole, int(start), int(shapes[i][0]))
    return out


@dataclass
class KVCaches:
    """A generation's KV caches (:func:`cache_buffers`' views: each layer's K, then each V) and
    the prefill's ``out=`` row views of them at one prompt length, kept for the next generation
    of the same thread on a device backend (:meth:`Generator.take_caches`)."""

    key: tuple
    wholes: list[Any]  # the allocations the views share (cleared on reuse)
    bufs: list[Any]
    thread: int  # the thread whose stream last used them
    rows: tuple[int, dict[str, Any]] | None = None  # (rows, {new.i.k/v: the first rows' views})

    def first_rows(self, prog: Any, count: int) -> dict[str, Any]:
        """The prefill's outputs' destinations: each cache's first ``count`` rows (made once per
        count: a 16-layer model's 32 views, and their table entries, on every first token)."""
        if self.rows is None or self.rows[0] != count:
            half = len(self.bufs) // 2
            made = {}
            for i in range(half):
                made[f"new.{i}.k"] = prog.rows(self.bufs[i], 0, count)
                made[f"new.{i}.v"] = prog.rows(self.bufs[half + i], 0, count)
            self.rows = (count, made)
        return self.rows[1]


class GenerationState(TokenStream):
    """One generation in flight (made by :meth:`Generator.start`): ``advance()`` runs the prefill
    (first call) or one decode step and returns the token it chose; ``done`` once a stop token or
    the token budget ends it (``stop_reason``); ``close()`` frees its KV cache early (a cancelled
    request).  Its KV cache is one buffer per layer and per K/V on the decode program's device."""

    def __init__(self, gen: Generator, prompt: list[int], max_new_tokens: int, stops: set[int],
                 rng: np.random.Generator, params: dict[str, Any], kept: list[np.ndarray] | None) -> None:
        super().__init__(prompt, max_new_tokens, stops, rng, params, kept)
        self.gen = gen
        if params.get("temperature", 0.0) > 0:
            self.sampler = token_sampler(gen.backend)
        self._inputs: dict[str, Any] | None = None  # the decode inputs; None until the prefill ran
        self._caches: KVCaches | None = None  # its KV caches (given back to the generator when it ends)
        # a step queued ahead: (its row, the call, the generator's state before the call's draw)
        self._ahead: tuple[int, Pending, Any] | None = None

    def advance(self) -> int:
        """Prefill (first call) or one decode step; returns the new token."""
        if self.done:
            raise InputError(f"generation already ended ({self.stop_reason})")
        gen = self.gen
        t0 = time.perf_counter()
        if self._inputs is None:
            n, max_len = len(self.prompt), len(self.prompt) + self.max_new_tokens
            layers = gen.model.config.num_layers
            shapes = [(max_len, *gen.shard.kv_shape(i)) for i in range(layers)]
            self._caches = gen.take_caches(shapes + shapes, gen.model.dtype.np)
            kbuf, vbuf = self._caches.bufs[:layers], self._caches.bufs[layers:]
            head = gen.prefill_chunk if gen.chunked(n) else n  # a long prompt: its first chunk
            # greedy on a device: the prompt's token is the program's own argmax, not a copy of the
            # logits and an argmax on the host (~0.13 ms of a 128k vocabulary's first token)
            fetch = ["next_token" if self._greedy_on_device(gen.prefill) else "logits"]
            first = {"input_ids": np.asarray(self.prompt[:head], dtype=np.int64)}
            if "positions" in gen.prefill.input_args:  # models may derive positions from the dims instead
                first["positions"] = np.arange(head, dtype=np.int64)
            # the prefill writes its keys and values into the cache's first rows
            rows = self._caches.first_rows(gen.prefill, head) if gen.group is None else {}
            if rows and set(rows) <= set(gen.prefill.output_names):
                out = gen.prefill(first, out=rows, fetch=fetch)  # only the logits (or token) to the host
            else:  # tensor-parallel ranks: the rows through the host
                out = gen.prefill(first)
                gen._store(out, kbuf, vbuf, 0, head)
            inputs: dict[str, Any] = {}
            for i in range(len(kbuf)):  # the whole buffers: each step writes its row into them
                inputs[f"cache.{i}.k"], inputs[f"cache.{i}.v"] = kbuf[i], vbuf[i]
            self._inputs = inputs
            for p in range(head, n, gen.prefill_chunk or n):  # the other chunks after the cached rows
                s = min(gen.prefill_chunk, n - p)
                rest = dict(inputs, input_ids=np.asarray(self.prompt[p:p + s], dtype=np.int64))
                if "positions" in gen.extend.input_args:
                    rest["positions"] = np.arange(p, p + s, dtype=np.int64)
                out = gen.extend(rest, dims={"p": p}, fetch=fetch)
            self.prefill_s = time.perf_counter() - t0
            if fetch == ["next_token"]:
                self.last_logits = None
                return self.chose(int(np.asarray(out["next_token"]).reshape(-1)[-1]), t0)
        else:
            p = len(self.ids) - 1  # rows in the cache: every id but the last, which this step feeds
            if self._on_device():  # the token chosen on the device: no logits copied to the host
                return self._device_step(p, t0)
            self._drop_ahead()  # a step queued ahead is dropped: this one needs its logits
            out = gen.decode(self._step_inputs(p, [self.ids[-1]]), dims={"p": p})
        return self.choose(out["logits"][-1], t0)

    def _device_step(self, p: int, t0: float) -> int:
        """One step whose token the device chooses (greedy: the decode program's own argmax,
        ``next_token``; sampled: the backend's sampler on the step's logits where they lie).  The
        step after it is queued before this one's token is read, fed with this step's token where
        it lies (on a GPU the host never waits between steps: it reads token k while step k + 1
        runs); a step queued past a stop token is dropped (it wrote only the cache row after the
        generation's end, and its draw came from a generator no later token reads)."""
        if self._ahead is not None and self._ahead[0] == p:
            step, self._ahead = self._ahead[1], None
        else:
            self._drop_ahead()
            step = self._launch(p, [self.ids[-1]])
        name = self._token_name()
        if len(self.new_ids) + 1 < self.max_new_tokens:  # another step will follow this one
            state = self.rng.bit_generator.state
            self._ahead = (p + 1, self._launch(p + 1, step.value(name)), state)
        self.last_logits = None
        return self.chose(int(step.result()[name].reshape(-1)[-1]), t0)

    def _drop_ahead(self) -> None:
        """Drop the step queued ahead, if any, and give its draw back (the generator as before
        it): the next token draws what the host sampler would."""
        if self._ahead is not None:
            self.rng.bit_generator.state = self._ahead[2]
            self._ahead = None

    def _token_name(self) -> str:
        return "next_token" if self.params.get("temperature", 0.0) == 0 else "ids"

    def _launch(self, p: int, token: Any) -> Pending:
        """The decode step at row ``p`` fed ``token``, queued (see :meth:`_step_inputs`), and its
        token's pick: the program's ``next_token``, or the sampler queued on its logits with this
        token's draw (the draws come in the order the host sampler makes them)."""
        if self._token_name() == "next_token":
            return self.gen.decode.launch(self._step_inputs(p, token), dims={"p": p}, fetch=["next_token"])
        step = self.gen.decode.launch(self._step_inputs(p, token), dims={"p": p})
        return token_sampler(self.gen.backend).sample(step.value("logits"), [self.sample_row()])

    def _step_inputs(self, p: int, token: Any) -> dict[str, Any]:
        """The decode step's inputs at row ``p``: the caches, ``token`` (a host id list, or the last
        step's ``next_token`` where the backend holds it) and, if the model reads them, positions."""
        inputs = dict(self._inputs)
        inputs["input_ids"] = last_row(token)
        if "positions" in self.gen.decode.input_args:
            inputs["positions"] = np.asarray([p], dtype=np.int64)
        return inputs

    def _on_device(self) -> bool:
        """Whether this step's token may be chosen where the step's outputs live (a device
        backend): greedy by the decode program's own argmax (``next_token``), sampled by the
        backend's sampler; never with a repetition penalty (it reads the history) or when someone
        wants the logits (``keep_logits``, ``want_logits``: a server's logprobs)."""
        p = self.params
        if (not get_backend(self.gen.backend).device_memory or p.get("repetition_penalty", 1.0) != 1.0
                or self.kept is not None or self.want_logits):
            return False
        if p.get("temperature", 0.0) == 0:
            return "next_token" in getattr(self.gen.decode, "output_names", ())
        return self.sampler is not None

    def _greedy_on_device(self, prog: Any) -> bool:
        """Whether this generation's next token is ``prog``'s own argmax (``next_token``): greedy
        on a device backend, nobody reading the logits (:meth:`_on_device`)."""
        return (self._token_name() == "next_token" and self._on_device()
                and "next_token" in getattr(prog, "output_names", ()))

    def close(self) -> None:
        self._ahead = None  # (a step queued ahead runs on this thread's stream, before any reuse)
        self._inputs = {} if self._inputs is not None else None  # drop the cache buffers
        caches, self._caches = self._caches, None
        if caches is not None:
            self.gen.give_caches(caches)


def generate(model: DecoderLM, tokenizer: Any, prompt_ids: Sequence[int], *, weights: Mapping[str, Any],
             max_new_tokens: int = 64, backend: str = "cpu", search: SearchOptions | None = None,
             stop_ids: Iterable[int] | None = None, **sampling: Any) -> GenerationResult:
    """One-call generation.  Stop tokens default to the model's and the tokenizer's EOS ids;
    ``sampling``: temperature, top_k, top_p, repetition_penalty, seed, on_token."""
    if stop_ids is None:
        stop_ids = set(model.config.eos_token_ids) | set(getattr(tokenizer, "eos_ids", None) or ())
    gen = Generator(model, weights, backend=backend, search=search)
    return gen.generate(prompt_ids, max_new_tokens, stop_ids=stop_ids, **sampling)
