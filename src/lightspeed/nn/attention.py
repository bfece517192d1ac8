"""Grouped-query attention with a KV cache that is never copied inside the graph.

Layout (``H`` query heads, ``n_kv`` KV heads, group ``g = H / n_kv``, ``s`` new tokens, ``P`` cached):

- every step, a prefill (no cache) included, lays its queries out rows first ``[s, n_kv, g, d]``
  (the projection's own layout: no copy) and attends in one chain (:func:`softmax_attention`),
  whose output is already ``o_proj``'s layout.  A prefill's keys and values are its own
  ``[s, n_kv, d]`` rows read as ``[n_kv, d, s]`` / ``[n_kv, s, d]`` views; a step with a cache
  ``[M, n_kv, d]`` (updated in place) writes its new rows at ``[p, p + s)`` first, then attends
  to the cache rows ``[lo, p + s)`` read through the same views (never copied).  The chain is
  what the fused attention kernel (``backends/codegen/attention.egg``) is recognised in, and on
  the tensor cores the flash-attention tiles (a prompt's positions and a KV head's query group
  folded into the tiles' rows); paged steps (``lightspeed serve``) use the same chain over their
  page tables' rows.  (:func:`gqa_attention`, one batched product per KV head over ``[n_kv, g*s,
  d]``, was the prefill's form until the fourteenth session: ~7% faster on ``native`` at 64-256
  tokens, but never one Attention op, so never the GPU's tiles);
- the softmax is in base 2 (the query scale carries ``log2 e``, folded into the RoPE tables).

Masks are additive (0 or the dtype's most negative value), built from the positions once per
graph and shared by all layers.  A sliding window of ``W`` keeps keys with ``q_pos - k_pos < W`` (Hugging
Face's convention).  Sliding layers may be given only the last ``W - 1`` cached rows (their own
past-length symbol): older keys are invisible to every new query anyway.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import numpy as np

from .. import dtypes as dt
from .. import hl
from ..errors import ShapeError
from ..graph import GraphTensor
from ..hl.common import full
from ..symbolic import INDEX_VAR, Expr, ExprLike, as_expr, smin, sym
from .layers import Linear
from .module import Builder, Module
from .rope import RotaryEmbedding

__all__ = ["Attention", "Step", "gqa_attention", "paged_attention", "softmax_attention"]

LOG2E = 1.4426950408889634


class Step:
    """One graph's view of the sequence: ``s`` new tokens at integer ``positions`` [s], after
    ``past`` cached ones (None for a prefill graph, which has no cache inputs).

    ``positions`` is a graph input (preferred), or a dim (``"s"``): then the positions are
    ``past + arange(s)`` from an iota.  Everything derived from an input position tensor (RoPE
    tables, masks) is computed once per call when the model builds it before its first layer
    (:meth:`Attention.prepare`) -- also when repeated layers are compiled once and run as a loop
    (``lightspeed.rolling`` rebuilds input-free subgraphs, such as iota-made tables, in every block)."""

    def __init__(self, b: Builder, positions: GraphTensor | ExprLike, past: ExprLike | None = None,
                 pages: GraphTensor | None = None, slots: GraphTensor | None = None, page_size: int = 0) -> None:
        self.b = b
        self.past = None if past is None else as_expr(past)
        # a paged step (lightspeed serve's batches): row i is one token of some sequence, at
        # positions[i]; its sequence's page table is pages[i] and its keys/values go to the pool
        # row slots[i] (see paged_attention)
        self.pages, self.slots, self.page_size = pages, slots, page_size
        if (pages is None) != (slots is None) or (pages is not None and page_size < 1):
            raise ShapeError("a paged step needs pages, slots and a page size")
        if not isinstance(positions, GraphTensor):
            s, start = as_expr(positions), self.past if self.past is not None else as_expr(0)
            positions = b.shared(("positions", start, s),
                                 lambda: b.graph.iota(start + sym(INDEX_VAR), (s,), dt.int64))
        if positions.ndim != 1 or positions.dtype.is_float:
            raise ShapeError(f"positions must be a 1-D integer tensor, got {positions!r}")
        self.positions = positions

    @property
    def s(self) -> Expr:
        return self.positions.shape[0]

    def mask_new(self, window: int | None) -> GraphTensor:
        """[s, s] mask of new queries i against new keys j: causal, and ``pos_i - pos_j < window``."""

        def make() -> GraphTensor:
            pi, pj = self.positions.reshape(-1, 1), self.positions.reshape(1, -1)
            blocked = hl.lt(pi, pj)
            if window is not None:
                blocked = hl.logical_or(blocked, hl.lt(window - 1, pi - pj))
            return additive_mask(blocked, self.b.dtype)

        return self.b.shared(("mask-new", window, self.positions.node, self.positions.st), make)

    @property
    def paged(self) -> bool:
        return self.pages is not None

    def mask_paged(self, window: int | None) -> GraphTensor:
        """[s, L] mask of each row against the L = NP * page_size keys its page table spans (key j
        is the sequence's position j): blocked past the row's own position, and (sliding) for
        ``pos - j >= window``; the padding of a short page table is blocked with it."""
        assert self.pages is not None
        L = self.pages.shape[1] * self.page_size

        def make() -> GraphTensor:
            pos = self.positions.reshape(-1, 1)
            j = self.b.graph.iota(sym(INDEX_VAR), (L,), self.positions.dtype).reshape(1, -1)
            blocked = hl.lt(pos, j)
            if window is not None:
                blocked = hl.logical_or(blocked, hl.lt(window - 1, pos - j))
            return additive_mask(blocked, self.b.dtype)

        return self.b.shared(("mask-paged", window, L, self.positions.node, self.positions.st), make)

    def mask_past(self, window: int, past_len: Expr) -> GraphTensor:
        """[s, L] mask of new queries against the last ``L`` cached keys (positions
        ``pos_0 - L + r``) under a sliding window: blocked iff ``pos_i - pos_0 + L - r >= window``."""
        L = as_expr(past_len)

        def make() -> GraphTensor:
            g = self.b.graph
            d = self.positions - self.positions.narrow(0, 0, 1)  # offsets of the new tokens from the first
            back = g.iota(L - sym(INDEX_VAR), (L,), self.positions.dtype)  # L - r
            return additive_mask(hl.lt(window - 1, d.reshape(-1, 1) + back.reshape(1, -1)), self.b.dtype)

        return self.b.shared(("mask-past", window, L, self.positions.node, self.positions.st), make)

    def mask_cache(self, window: int | None, past_len: ExprLike) -> GraphTensor:
        """[s, L + s] mask of new queries against the last ``L`` cached keys followed by the new
        keys (the cache rows ``[p - L, p + s)``): causal among the new ones, the window over both."""
        L = as_expr(past_len)

        def make() -> GraphTensor:
            new = self.mask_new(window)
            if window is None:  # every cached key is visible: zeros in front (a padded view)
                return hl.pad(new, (L, 0))
            return hl.concat([self.mask_past(window, L), new], -1)

        return self.b.shared(("mask-cache", window, L, self.positions.node, self.positions.st), make)


def additive_mask(blocked: GraphTensor, dtype: dt.DType) -> GraphTensor:
    """An additive attention mask of ``dtype`` from a bool one: 0 where ``blocked`` is false, the
    dtype's most negative value where it is true (not -inf: a row with every key blocked stays
    finite)."""
    # ml_dtypes.finfo knows bfloat16 (numpy >= 2.5's finfo rejects it); numpy's own floats take
    # numpy's finfo, so a float32 model never imports ml_dtypes (~1.4 s)
    npd = dtype.np
    info = np.finfo(npd) if npd.kind == "f" else importlib.import_module("ml_dtypes").finfo(npd)
    return hl.to(blocked, dtype) * float(info.min)


def gqa_attention(q: GraphTensor, k: GraphTensor, v: GraphTensor, mask: GraphTensor | None = None,
                  softcap: float | None = None) -> GraphTensor:
    """A prefill's attention: queries ``q`` [n_kv, g, s, d] -- row-major, already multiplied by
    the softmax scale and by ``log2 e`` (unless ``softcap``: then by the scale only) -- against its
    own keys and values [t, n_kv, d] under ``mask`` (broadcast to [s, t]).  Returns
    [s, n_kv * g * d] (heads in HF order).  A step with a cache uses :func:`softmax_attention`."""
    n_kv, g, s, d = q.shape
    if k.ndim != 3 or k.shape[1:] != (n_kv, d) or v.shape[1:] != (n_kv, d):
        raise ShapeError(f"attention: keys/values must be [t, {n_kv}, {d}], got "
                         f"{tuple(map(str, k.shape))} / {tuple(map(str, v.shape))}")
    t = k.shape[0]
    qf = q.reshape(n_kv, g * s, d)
    scores = (qf @ k.permute(1, 2, 0)).reshape(n_kv, g, s, t)
    if mask is not None:
        scores = scores + mask
    if softcap is not None:
        scores = hl.tanh(scores * (1.0 / softcap)) * (softcap * LOG2E)
    # the negated max is formed on the reduced [.., 1] tensor, so the subtraction is one Add
    e = hl.exp2(scores + scores.amax(-1, keepdim=True) * -1.0)
    den = e.sum(-1, keepdim=True)
    out = e.reshape(n_kv, g * s, t) @ v.permute(1, 0, 2)
    out = out.reshape(n_kv, g, s, d).permute(2, 0, 1, 3) * hl.reciprocal(den).permute(2, 0, 1, 3)
    return out.reshape(s, n_kv * g * d)


def paged_attention(q: GraphTensor, k_pool: GraphTensor, v_pool: GraphTensor, pages: GraphTensor,
                    mask: GraphTensor, softcap: float | None = None) -> GraphTensor:
    """Attention of ``s`` rows, each a token of its own sequence: queries ``q`` [s, n_kv, g, d]
    (scaled as for :func:`gqa_attention`) against the keys/values of the pages their page tables
    ``pages`` [s, NP] name in the pools [N, page, n_kv, d] (already holding this step's rows),
    under ``mask`` [s, NP * page] (:meth:`Step.mask_paged`).  Returns [s, n_kv * g * d].

    Every reduction runs over one row's own keys, padded to the batch's longest page table with
    blocked keys whose weights are exactly 0: a row's result does not depend on the other rows
    (batch invariance) as long as the kernels' reduction order depends only on the key index."""
    s, n_kv, g, d = q.shape
    n_pages, page = k_pool.shape[0], k_pool.shape[1]
    if k_pool.ndim != 4 or k_pool.shape[2:] != (n_kv, d) or v_pool.shape != k_pool.shape:
        raise ShapeError(f"paged attention: pools must both be [N, page, {n_kv}, {d}], got "
                         f"{tuple(map(str, k_pool.shape))} / {tuple(map(str, v_pool.shape))}")
    if pages.ndim != 2 or pages.shape[0] != s:
        raise ShapeError(f"paged attention: pages must be [{s}, NP], got {tuple(map(str, pages.shape))}")
    L = pages.shape[1] * page

    def rows(pool: GraphTensor) -> GraphTensor:  # [s, L, n_kv, d]: each row's keys in position order
        return hl.embedding(pages, pool.reshape(n_pages, page * n_kv * d)).reshape(s, L, n_kv, d)

    keys, values = rows(k_pool), rows(v_pool)
    return softmax_attention(q, keys.permute(0, 2, 3, 1), values.permute(0, 2, 1, 3), mask, softcap)


def softmax_attention(q: GraphTensor, keys_t: GraphTensor, values: GraphTensor, mask: GraphTensor | None,
                      softcap: float | None = None) -> GraphTensor:
    """The attention of query rows ``q`` [s, n_kv, g, d] (scaled as for :func:`gqa_attention`)
    against keys ``keys_t`` [..., n_kv, d, L] and values [..., n_kv, L, d] (batch dims broadcast
    against [s, n_kv]) under an additive ``mask`` [s, L]; returns [s, n_kv * g * d].

    One chain, every tensor laid out rows first: scores = q @ K^T (+ mask), the base-2 softmax
    over the last axis, then (E @ V) * 1/sum(E) -- already the [s, n_kv, g, d] layout ``o_proj``
    reads, so no copy.  The form the fused attention kernel is recognised in (backends/codegen/attention.egg):
    keep it one chain.  Without a mask every key is visible: a zero mask is added (a broadcast
    constant, no memory), since the kernel's pattern starts at the scores plus a mask."""
    s, n_kv, g, d = q.shape
    L = keys_t.shape[-1]
    scores = q @ keys_t  # [s, n_kv, g, L]
    if mask is None:
        mask = full(q.graph, (s, L), 0.0, scores.dtype)
    scores = scores + mask.reshape(s, 1, 1, L)
    if softcap is not None:
        scores = hl.tanh(scores * (1.0 / softcap)) * (softcap * LOG2E)
    e = hl.exp2(scores + scores.amax(-1, keepdim=True) * -1.0)
    den = e.sum(-1, keepdim=True)
    out = (e @ values) * hl.reciprocal(den)  # [s, n_kv, g, d]
    return out.reshape(s, n_kv * g * d)


class Attention(Module):
    """Multi-head attention with grouped KV heads, optional q/k norms (Qwen3, Gemma 3), RoPE,
    a sliding window and logit soft-capping.  Parameters follow HF names: ``q_proj``, ``k_proj``,
    ``v_proj``, ``o_proj`` (+ ``q_norm``, ``k_norm``) under ``prefix``.

    ``bias``: one flag for all four projections or a tuple (q, k, v, o) (Qwen2: (T, T, T, F);
    Whisper: (T, F, T, T)).  ``qk_norm``: a factory ``(prefix, head_dim) -> module`` or None.
    ``scale`` defaults to ``head_dim ** -0.5``."""

    def __init__(self, prefix: str, hidden: int, n_heads: int, n_kv_heads: int, head_dim: int, *,
                 rope: RotaryEmbedding | None = None, bias: bool | tuple[bool, bool, bool, bool] = False,
                 qk_norm: Callable[[str, int], Module] | None = None, scale: float | None = None,
                 sliding_window: int | None = None, softcap: float | None = None, causal: bool = True) -> None:
        super().__init__(prefix)
        if n_heads % n_kv_heads:
            raise ShapeError(f"attention {prefix}: {n_heads} heads are not a multiple of {n_kv_heads} KV heads")
        if rope is not None and rope.head_dim != head_dim:
            raise ShapeError(f"attention {prefix}: rope head_dim {rope.head_dim} != head_dim {head_dim}")
        bq, bk, bv, bo = (bias,) * 4 if isinstance(bias, bool) else bias
        self.hidden, self.n_heads, self.n_kv_heads, self.head_dim = hidden, n_heads, n_kv_heads, head_dim
        self.rope, self.sliding_window, self.softcap, self.causal = rope, sliding_window, softcap, causal
        self.scale = head_dim ** -0.5 if scale is None else scale
        self.q_proj = Linear(self.pname("q_proj"), hidden, n_heads * head_dim, bq)
        self.k_proj = Linear(self.pname("k_proj"), hidden, n_kv_heads * head_dim, bk)
        self.v_proj = Linear(self.pname("v_proj"), hidden, n_kv_heads * head_dim, bv)
        self.o_proj = Linear(self.pname("o_proj"), n_heads * head_dim, hidden, bo)
        self.q_norm = qk_norm(self.pname("q_norm"), head_dim) if qk_norm else None
        self.k_norm = qk_norm(self.pname("k_norm"), head_dim) if qk_norm else None

    def prepare(self, b: Builder, step: Step) -> None:
        """Build what this layer reads from the positions (RoPE tables, masks) now.  A model calls
        it for every layer before the first one, so these subgraphs sit before the repeated layers
        in the graph and are computed once per call."""
        if self.rope is not None:
            self.rope.tables(b, step.positions, self._qscale())
            self.rope.tables(b, step.positions)
        if self.causal and step.paged:
            step.mask_paged(self.sliding_window)
        elif self.causal and step.past is not None:
            step.mask_cache(self.sliding_window, self.past_rows(step)[1])
        elif self.causal:
            step.mask_new(self.sliding_window)

    def past_rows(self, step: Step) -> tuple[Expr, Expr]:
        """(first row, row count) of the cached rows this layer reads at past length ``p``: all
        ``p`` of them, or for a sliding layer the last ``min(p, W - 1)`` (older keys are invisible
        to every new query)."""
        p = step.past
        if self.sliding_window is None or not self.causal:
            return as_expr(0), p
        n = smin(p, self.sliding_window - 1)
        return p - n, n

    def _qscale(self) -> float:
        return self.scale * (LOG2E if self.softcap is None else 1.0)

    def forward(self, b: Builder, step: Step, x: GraphTensor,
                cache: tuple[GraphTensor, GraphTensor] | None = None) -> tuple[GraphTensor, GraphTensor, GraphTensor]:
        """``x`` [s, hidden] -> (output [s, hidden], keys, values).

        Without ``cache`` (a prefill) the keys and values are this step's [s, n_kv, d].  With
        ``cache`` = (keys, values) [M, n_kv, d], the whole preallocated cache of which the first
        ``p = step.past`` rows are filled, the new rows are written at ``[p, p + s)``
        (:func:`~lightspeed.hl.slice_scatter`) and the updated caches are returned: a graph that
        outputs them aliasing its cache inputs updates the cache in place, and attention reads the
        cached rows of the updated cache (so the write happens first) and the new rows directly."""
        if step.paged:
            return self._forward_paged(b, step, x, cache)
        kv, d = self.n_kv_heads, self.head_dim
        if cache is None:
            q, k, v = self._project(b, step, x)
            mask = step.mask_new(self.sliding_window) if self.causal else None
            out = softmax_attention(q, k.permute(1, 2, 0), v.permute(1, 0, 2), mask, self.softcap)
            return self.o_proj.forward(b, out), k, v
        ck, cv = cache
        if step.past is None:
            raise ShapeError(f"attention {self.prefix}: a cache needs a step with a past length")
        if ck.ndim != 3 or ck.shape[1:] != (kv, d) or cv.shape != ck.shape:
            raise ShapeError(f"attention {self.prefix}: caches must both be [M, {kv}, {d}], got "
                             f"{tuple(map(str, ck.shape))} / {tuple(map(str, cv.shape))}")
        q, k, v = self._project(b, step, x)
        ck = hl.slice_scatter(ck, k, 0, step.past)
        cv = hl.slice_scatter(cv, v, 0, step.past)
        # one softmax over the cached rows this layer reads and this step's rows, all read from
        # the updated cache (so the write happens first), every query row at once against them
        lo, n = self.past_rows(step)
        L = n + step.s
        keys, values = ck.narrow(0, lo, L), cv.narrow(0, lo, L)
        mask = step.mask_cache(self.sliding_window, n) if self.causal else None
        out = softmax_attention(q, keys.permute(1, 2, 0), values.permute(1, 0, 2), mask, self.softcap)
        return self.o_proj.forward(b, out), ck, cv

    def _project(self, b: Builder, step: Step, x: GraphTensor) -> tuple[GraphTensor, GraphTensor, GraphTensor]:
        """Queries (q-norm, RoPE, the softmax scale), keys (k-norm, RoPE) and values of ``x``
        [s, hidden]: q as [s, n_kv, g, d] (rows first: the projection's layout), k and v [s, n_kv, d]."""
        s, kv, d = x.shape[0], self.n_kv_heads, self.head_dim
        q = self.q_proj.forward(b, x).reshape(s, kv, self.n_heads // kv, d)
        k = self.k_proj.forward(b, x).reshape(s, kv, d)
        v = self.v_proj.forward(b, x).reshape(s, kv, d)
        if self.q_norm is not None:
            q = self.q_norm.forward(b, q)  # writes q's layout row-major
            k = self.k_norm.forward(b, k)
        qscale = self._qscale()
        if self.rope is not None:
            q = self.rope.apply(q, self.rope.tables(b, step.positions, qscale), seq_axis=0)
            k = self.rope.apply(k, self.rope.tables(b, step.positions), seq_axis=0)
        else:
            q = q * qscale
        return q, k, v

    def _forward_paged(self, b: Builder, step: Step, x: GraphTensor,
                       pools: tuple[GraphTensor, GraphTensor] | None) -> tuple[GraphTensor, GraphTensor, GraphTensor]:
        """A paged step (:class:`Step` with pages): each row of ``x`` [s, hidden] is one token of
        its own sequence; its key and value are written to pool row ``slots[i]`` (in place, when
        the graph's pool outputs alias the inputs) and it attends to its page table's keys
        (:func:`paged_attention`).  Returns (output, updated key pool, updated value pool)."""
        if pools is None or not self.causal:
            raise ShapeError(f"attention {self.prefix}: a paged step needs causal attention and the key/value pools")
        kv, d = self.n_kv_heads, self.head_dim
        pk, pv = pools
        if pk.ndim != 4 or pk.shape[2:] != (kv, d) or pv.shape != pk.shape:
            raise ShapeError(f"attention {self.prefix}: pools must both be [N, page, {kv}, {d}], got "
                             f"{tuple(map(str, pk.shape))} / {tuple(map(str, pv.shape))}")
        q, k, v = self._project(b, step, x)
        n_pages, page = pk.shape[0], pk.shape[1]
        rows = n_pages * page
        pk = hl.index_copy(pk.reshape(rows, kv, d), 0, step.slots, k).reshape(n_pages, page, kv, d)
        pv = hl.index_copy(pv.reshape(rows, kv, d), 0, step.slots, v).reshape(n_pages, page, kv, d)
        mask = step.mask_paged(self.sliding_window)
        out = paged_attention(q, pk, pv, step.pages, mask, self.softcap)
        return self.o_proj.forward(b, out), pk, pv
