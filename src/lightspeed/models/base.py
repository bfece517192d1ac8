"""The decoder-only transformer shared by the Llama, Qwen3 and Gemma 3 families.

A model object holds a :class:`DecoderConfig` and the module tree; it never holds weights.  It
builds two graphs (see ``docs/models.md``):

- **prefill**: ``input_ids`` and ``positions`` int64 [s] -> ``logits`` [1, vocab] (the last
  position; [s, vocab] with ``all_logits=True``) and ``new.{i}.k`` / ``new.{i}.v``
  [s, n_kv, head_dim] per layer;
- **decode**: the same inputs plus ``cache.{i}.k`` / ``cache.{i}.v`` [M, n_kv, head_dim], each
  layer's whole preallocated cache, and the dim ``p`` (the rows already filled: the tokens before
  ``positions[0]``, passed as ``dims={"p": p}``).  The step writes its new keys/values into rows
  ``[p, p + s)`` in place (the outputs ``cache.{i}.k/v`` alias the inputs) and reads rows
  ``[0, p)``; sliding layers read only the last ``min(p, W - 1)`` of them (see
  :meth:`DecoderLM.cache_rows`).  Nothing about ``p`` or ``M`` is compiled in.

Weights are graph inputs named exactly like the Hugging Face ``state_dict`` keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .. import dtypes as dt
from .. import hl
from ..dtypes import DType
from ..errors import InputError, UnsupportedError
from ..graph import Graph, GraphTensor
from ..nn import Attention, Builder, Embedding, GatedMLP, Linear, Module, RMSNorm, RotaryEmbedding, Step
from ..symbolic import ExprLike

__all__ = ["DecoderConfig", "DecoderBlock", "DecoderLM", "FULL", "SLIDING"]

FULL, SLIDING = "full_attention", "sliding_attention"


@dataclass
class DecoderConfig:
    """Everything the decoder needs, in one family-independent form (``from_hf_config`` of each
    family fills it from an HF ``config.json`` dict)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope: dict[str, RotaryEmbedding]  # per layer type
    layer_types: tuple[str, ...] = ()  # FULL or SLIDING per layer; empty = all FULL
    sliding_window: int | None = None
    rms_norm_eps: float = 1e-6
    hidden_act: str = "silu"
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    norm_unit_offset: bool = False  # Gemma: RMSNorm multiplies by (1 + w)
    sandwich_norm: bool = False  # Gemma: norms before and after attention and MLP
    embed_scale: float | None = None
    attn_scale: float | None = None  # default head_dim ** -0.5
    attn_softcap: float | None = None
    final_softcap: float | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    max_position_embeddings: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.layer_types:
            self.layer_types = (FULL,) * self.num_layers
        self.layer_types = tuple(self.layer_types)
        if len(self.layer_types) != self.num_layers:
            raise ValueError(f"layer_types has {len(self.layer_types)} entries for {self.num_layers} layers")
        for t in set(self.layer_types):
            if t not in (FULL, SLIDING):
                raise UnsupportedError(f"layer type {t!r} is not supported ({FULL!r}, {SLIDING!r} are)")
            if t not in self.rope:
                raise ValueError(f"no rotary embedding for layer type {t!r}")
        if SLIDING in self.layer_types and not self.sliding_window:
            raise ValueError("sliding_attention layers need a sliding_window")


def eos_ids(value: Any) -> tuple[int, ...]:
    """HF's ``eos_token_id`` (an int, a list or None) as a tuple."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(int(v) for v in value)
    return (int(value),)


class DecoderBlock(Module):
    """One pre-norm transformer layer: ``x + attn(norm(x))``, ``x + mlp(norm(x))``; with
    ``sandwich_norm`` each sub-block output is normalised too before the residual add (Gemma)."""

    def __init__(self, prefix: str, cfg: DecoderConfig, layer: int) -> None:
        super().__init__(prefix)
        kind = cfg.layer_types[layer]
        self.kind = kind

        def norm(name: str, dim: int) -> RMSNorm:
            return RMSNorm(name, dim, cfg.rms_norm_eps, cfg.norm_unit_offset)

        h = cfg.hidden_size
        self.input_layernorm = norm(self.pname("input_layernorm"), h)
        self.self_attn = Attention(
            self.pname("self_attn"), h, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, rope=cfg.rope[kind],
            bias=cfg.attention_bias, qk_norm=norm if cfg.qk_norm else None, scale=cfg.attn_scale,
            sliding_window=cfg.sliding_window if kind == SLIDING else None, softcap=cfg.attn_softcap)
        self.post_attention_layernorm = norm(self.pname("post_attention_layernorm"), h)
        if cfg.sandwich_norm:
            self.pre_feedforward_layernorm = norm(self.pname("pre_feedforward_layernorm"), h)
            self.post_feedforward_layernorm = norm(self.pname("post_feedforward_layernorm"), h)
        self.sandwich = cfg.sandwich_norm
        self.mlp = GatedMLP(self.pname("mlp"), h, cfg.intermediate_size, cfg.hidden_act, cfg.mlp_bias)

    def forward(self, b: Builder, step: Step, x: GraphTensor, past: tuple[GraphTensor, GraphTensor] | None
                ) -> tuple[GraphTensor, GraphTensor, GraphTensor]:
        h, k, v = self.self_attn.forward(b, step, self.input_layernorm.forward(b, x), past)
        if self.sandwich:
            x = x + self.post_attention_layernorm.forward(b, h)
            h = self.mlp.forward(b, self.pre_feedforward_layernorm.forward(b, x))
            return x + self.post_feedforward_layernorm.forward(b, h), k, v
        x = x + h
        return x + self.mlp.forward(b, self.post_attention_layernorm.forward(b, x)), k, v


class DecoderLM(Module):
    """A decoder-only language model (see the module docstring).  Subclasses set ``family`` (the
    name their ``lightspeed.models.family.Family`` declares, with the HF ``model_type`` values they
    read) and implement ``config_from_hf``; the structure is configured by :class:`DecoderConfig`."""

    family: ClassVar[str] = "decoder"

    def __init__(self, config: DecoderConfig, dtype: DType | str = dt.float32) -> None:
        super().__init__("")
        self.config = cfg = config
        self.dtype = dt.as_dtype(dtype)
        self.embed_tokens = Embedding("model.embed_tokens", cfg.vocab_size, cfg.hidden_size, cfg.embed_scale)
        self.layers = [DecoderBlock(f"model.layers.{i}", cfg, i) for i in range(cfg.num_layers)]
        self.norm = RMSNorm("model.norm", cfg.hidden_size, cfg.rms_norm_eps, cfg.norm_unit_offset)
        self.lm_head = None if cfg.tie_word_embeddings else Linear("lm_head", cfg.hidden_size, cfg.vocab_size)
        self._graphs: dict[tuple, Graph] = {}

    # ------------------------------------------------------------------ construction
    @classmethod
    def config_from_hf(cls, config: Mapping[str, Any]) -> DecoderConfig:
        raise NotImplementedError

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any], dtype: DType | str = dt.float32) -> DecoderLM:
        """The model described by an HF ``config.json`` dict (either transformers convention)."""
        if isinstance(config.get("text_config"), Mapping):  # multimodal wrapper: the text model
            config = {**config["text_config"], **{k: v for k, v in config.items() if k == "torch_dtype"}}
        return cls(cls.config_from_hf(config), dtype)

    # ------------------------------------------------------------------ cache layout
    @property
    def num_layers(self) -> int:
        return self.config.num_layers

    def cache_rows(self, layer: int) -> int | None:
        """How many of the latest cached rows layer ``layer`` needs (None: all of them).  A
        sliding layer of window W never looks further back than W - 1 rows before a new token."""
        if self.config.layer_types[layer] == SLIDING:
            return int(self.config.sliding_window) - 1
        return None

    def kv_shape(self, layer: int) -> tuple[int, int]:
        """(KV heads, head_dim) of layer ``layer``'s cache rows (Gemma 4's global layers differ)."""
        return (self.config.num_kv_heads, self.config.head_dim)

    # ------------------------------------------------------------------ graphs
    def forward(self, b: Builder, step: Step, ids: GraphTensor, caches: list | None, all_logits: bool,
                out_prefix: str = "cache", logit_rows: ExprLike | None = None
                ) -> tuple[GraphTensor, list[tuple[GraphTensor, GraphTensor]]]:
        for layer in self.layers:  # tables and masks first: computed once, before the layers
            layer.self_attn.prepare(b, step)
        x = self.embed_tokens.forward(b, ids)
        new = []
        for i, layer in enumerate(self.layers):
            x, k, v = layer.forward(b, step, x, caches[i] if caches is not None else None)
            new.append((k, v))
            # each layer's cache outputs are declared with the layer, so they sit inside the
            # repeated block: a rolled template then writes its own cache input in place
            if caches is not None:
                b.graph.output(f"{out_prefix}.{i}.k", k, aliases=f"{out_prefix}.{i}.k")
                b.graph.output(f"{out_prefix}.{i}.v", v, aliases=f"{out_prefix}.{i}.v")
            else:
                b.graph.output(f"new.{i}.k", k)
                b.graph.output(f"new.{i}.v", v)
        if logit_rows is not None:  # the first rows choose a token (a paged step): norm and head on them
            x = x.narrow(0, 0, logit_rows)
        elif not all_logits:  # only the last position feeds generation: norm and head on one row
            x = x.narrow(0, step.s - 1, 1)
        x = self.norm.forward(b, x)
        if self.lm_head is not None:
            logits = self.lm_head.forward(b, x)
        else:
            logits = self.embed_tokens.attend(b, x)
        if self.config.final_softcap is not None:
            c = self.config.final_softcap
            logits = hl.tanh(logits * (1.0 / c)) * c
        return logits, new

    def build_graph(self, mode: str, all_logits: bool = False, storage: Mapping[str, DType] | None = None,
                    next_token: bool = False, moe_prefill: str = "dense") -> Graph:
        """The ``'prefill'``, ``'decode'`` or ``'paged'`` graph (cached per model object);
        ``storage``: weights declared in another dtype than the model's (:func:`block_storage`),
        cast where used; ``next_token``: the prefill and decode graphs also output their last
        row's argmax (int64 [1]), the paged graph each logit row's (int64 [r]), so a greedy step
        (and a greedy first token) can fetch token ids instead of the logits.  ``moe_prefill``:
        a mixture-of-experts prompt's form where the config says "auto" (nn/moe.py)."""
        if mode == "paged":
            return self.paged_graph(storage, next_token, moe_prefill)
        if mode not in ("prefill", "decode"):
            raise ValueError(f"mode must be 'prefill', 'decode' or 'paged', got {mode!r}")
        key = (mode, all_logits, tuple(sorted((n, d.name) for n, d in (storage or {}).items())), next_token,
               moe_prefill)
        if key in self._graphs:
            return self._graphs[key]
        cfg = self.config
        b = Builder(dtype=self.dtype, storage=storage)
        b.moe_prefill = moe_prefill
        g = b.graph
        ids = g.input("input_ids", ("s",), dt.int64)
        step = Step(b, g.input("positions", ("s",), dt.int64), "p" if mode == "decode" else None)
        caches = None
        if mode == "decode":  # the whole preallocated cache of every layer, M rows
            caches = [tuple(g.input(f"cache.{i}.{c}", ("M", *self.kv_shape(i)), self.dtype) for c in "kv")
                      for i in range(cfg.num_layers)]
        logits, _ = self.forward(b, step, ids, caches, all_logits)  # declares the cache outputs
        g.output("logits", logits)
        if next_token and not all_logits:  # greedy on the device: fetch just this (the prefill's too)
            g.output("next_token", hl.argmax(logits, -1))
        self._graphs[key] = g
        return g

    PAGE_SIZE: ClassVar[int] = 32  # rows of a KV page (a multiple of the kernels' 32 reduction lanes)
    supports_paged: ClassVar[bool] = True  # whether paged_graph builds (lightspeed serve batches it)

    def paged_graph(self, storage: Mapping[str, DType] | None = None, next_token: bool = False,
                    moe_prefill: str = "dense") -> Graph:
        """The batched step over a paged KV cache (``lightspeed serve``): ``s`` rows, each one
        token of some sequence: ``input_ids``, ``positions`` and ``slots`` int64 [s] (the pool row
        its key/value goes to: page * PAGE_SIZE + position % PAGE_SIZE), ``pages`` int64 [s, NP]
        (its sequence's page table, padded with any valid page), ``pool.{i}.k`` / ``pool.{i}.v``
        [N, PAGE_SIZE, n_kv, head_dim] per layer, updated in place (outputs aliasing them), and
        ``logits`` [r, vocab] of the first ``r`` rows (the dim ``r``: a step puts the rows that
        choose a token first, so the inner rows of a prompt chunk cost no head).  Rows of one
        sequence at consecutive positions are a prompt chunk (each sees the rows before it).  A
        row's logits do not depend on the other rows (see :func:`lightspeed.nn.paged_attention`).
        ``next_token``: also each logit row's argmax, ``next_token`` int64 [r] (a device backend's
        greedy rows fetch it instead of their logits).  ``moe_prefill``: the experts' form where
        the config's prompt form is "auto" (a paged step has no cache of its own: its rows are
        built as a prompt's)."""
        if not self.supports_paged:
            raise UnsupportedError(f"{self.family}: no paged (batched) step yet")
        key = ("paged", tuple(sorted((n, d.name) for n, d in (storage or {}).items())), next_token, moe_prefill)
        if key in self._graphs:
            return self._graphs[key]
        b = Builder(dtype=self.dtype, storage=storage)
        b.moe_prefill = moe_prefill
        g = b.graph
        ids = g.input("input_ids", ("s",), dt.int64)
        step = Step(b, g.input("positions", ("s",), dt.int64), pages=g.input("pages", ("s", "NP"), dt.int64),
                    slots=g.input("slots", ("s",), dt.int64), page_size=self.PAGE_SIZE)
        pools = [tuple(g.input(f"pool.{i}.{c}", ("N", self.PAGE_SIZE, *self.kv_shape(i)), self.dtype) for c in "kv")
                 for i in range(self.config.num_layers)]
        logits, _ = self.forward(b, step, ids, pools, True, out_prefix="pool", logit_rows="r")
        g.output("logits", logits)
        if next_token:
            g.output("next_token", hl.argmax(logits, -1))
        self._graphs[key] = g
        return g

    def prefill_graph(self, all_logits: bool = False) -> Graph:
        return self.build_graph("prefill", all_logits)

    def decode_graph(self, all_logits: bool = False) -> Graph:
        return self.build_graph("decode", all_logits)

    # ------------------------------------------------------------------ weights
    def own_params(self) -> dict[str, tuple[int, ...]]:
        return {}

    def block_storage(self, weights: Mapping[str, Any], backend: str) -> dict[str, DType]:
        """The parameters to declare with their GGML block dtype: those of ``weights`` (as loaded, or
        as :meth:`check_weights` gave them: the answer is the same) held as blocks
        (``weights.quant.QuantTensor``) of a type ``backend`` reads as blocks
        (``Backend.block_dtypes``), in a float32 model; the others are float values.  Entries that
        are no parameter (a tied ``lm_head.weight``) are left out, so every caller compiles the
        same graphs."""
        from ..backends import get_backend

        readable = {d.name: d for d in get_backend(backend).block_dtypes} if self.dtype == dt.float32 else {}
        params = self.param_shapes()
        return {n: readable[a.qtype] for n, a in weights.items()
                if n in params and getattr(a, "qtype", None) in readable}

    def check_weights(self, tensors: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The weights the graphs take, checked (every name present, every shape right) and made
        contiguous arrays of the model dtype; other entries (e.g. a tied ``lm_head.weight``) are
        left out.  Errors name the tensor."""
        shapes = self.param_shapes()
        missing = [n for n in shapes if n not in tensors]
        if missing:
            more = f" (and {len(missing) - 1} more: {missing[1:4]}{'...' if len(missing) > 4 else ''})" \
                if len(missing) > 1 else ""
            raise InputError(f"{self.family}: missing weight {missing[0]!r} of shape {shapes[missing[0]]}{more}")
        out: dict[str, np.ndarray] = {}
        for name, shape in shapes.items():
            a = tensors[name]
            if getattr(a, "blocks", None) is not None and a.dtype == self.dtype.np and tuple(a.shape) == tuple(shape):
                out[name] = a  # held as GGML blocks (weights.quant.QuantTensor): float32 values made on demand
                continue
            if not isinstance(a, np.ndarray):
                from ..program import to_numpy

                a = to_numpy(a, f"weight {name!r}")
            if tuple(a.shape) != tuple(shape):
                raise InputError(f"{self.family}: weight {name!r} has shape {tuple(a.shape)}, "
                                 f"the model expects {tuple(shape)}")
            out[name] = np.ascontiguousarray(a, dtype=self.dtype.np)
        self._check_tied_head(tensors)
        return out

    def _check_tied_head(self, tensors: Mapping[str, Any]) -> None:
        """A tied model computes logits with its embeddings: an ``lm_head.weight`` beside them that
        differs would be dropped without a word, so it is an error (an equal copy, as some
        checkpoints carry, is fine)."""
        head, embed = tensors.get("lm_head.weight"), tensors.get("model.embed_tokens.weight")
        if self.lm_head is not None or head is None or embed is None:
            return
        if not (isinstance(head, np.ndarray) and isinstance(embed, np.ndarray)):
            return  # blocks or device arrays: a file's own layout, not compared here
        if head.shape != embed.shape or not np.array_equal(head, embed):
            raise InputError(f"{self.family}: the config ties the output head to the embeddings "
                             "(tie_word_embeddings), but the weights hold a different 'lm_head.weight'; "
                             "set tie_word_embeddings to false to use it, or drop it")

    def __repr__(self) -> str:
        c = self.config
        return (f"{type(self).__name__}(layers={c.num_layers}, hidden={c.hidden_size}, heads={c.num_heads}/"
                f"{c.num_kv_heads}, head_dim={c.head_dim}, ffn={c.intermediate_size}, vocab={c.vocab_size})")
