"""Many sequences in one compiled step: a paged KV cache and continuous batching (``lightspeed serve``).

    batcher = PagedBatcher(model, weights, backend="native", max_rows=24)
    a = batcher.start(prompt_a, max_new_tokens=32)      # a PagedSequence: ids, done, stop_reason...
    b = batcher.start(prompt_b, max_new_tokens=32)
    while not (a.done and b.done):
        batcher.step([s for s in (a, b) if not s.done])  # one call: b's prompt chunk beside a's token

One program (the model's ``paged`` graph, :meth:`DecoderLM.paged_graph`) runs every step: its
rows are tokens, each of its own sequence at its own position, so a step mixes decode rows (one
per sequence) with a chunk of a new sequence's prompt (several rows of one sequence at
consecutive positions).  No prompt stalls the others for longer than one chunk.

**Paged cache.** Keys and values live in one pool per layer of fixed-size pages
(``DecoderLM.PAGE_SIZE`` rows); a sequence holds a list of pages (its page table) that grows
with it, and gives them back when it ends or is cancelled.  The pool starts small and doubles
when it runs out (copying its pages), so memory follows the tokens in flight, not max length x
batch.  The program writes each row's key/value into its page and reads every row's keys
through its page table.

**Prefix cache.** A page whose rows are all written holds the keys and values of a known run of
tokens after a known prefix (its parent page): it is indexed by (parent page, its tokens) and a
new sequence whose tokens begin the same way takes such pages instead of computing them again (a
chat's earlier turns, a shared system prompt: only whole pages, and never the page of a prompt's
last token, whose row gives the first token's logits; a prompt that has computed nothing yet
waits while another computes the page it would compute next).  Shared pages are only read (a sequence
writes only the positions it feeds, after the pages it took); a page whose sequences all ended
stays indexed, idle, until a page is wanted and none is free (the least recently used idle page
with no indexed page after it goes first) or :meth:`PagedBatcher.trim` shrinks the pools.  Exact
where the program is batch invariant (below): a page's values are what the sequence would have
computed itself.

**Batch invariance.** Each row's arithmetic is the same whatever rows share its step (the
paged attention's reductions depend only on the key index, and on ``native`` the block matmuls
quantise and dot each of up to 64 rows as a decode row): a greedy sequence gets the same tokens
alone or in any batch.  Steps are kept to at most :attr:`PagedBatcher.max_rows` rows.  The numpy
backends (``cpu``, ``reference``) batch through BLAS, whose sums may depend on the row count.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..backends import get_backend
from ..errors import InputError
from ..search import SearchOptions
from .base import DecoderLM
from .generate import GenerationResult, TokenStream, check_request, compile_model, sample_token, token_sampler

__all__ = ["PagedBatcher", "PagedSequence", "ROWS_LIMIT"]

ROWS_LIMIT = 64  # rows per step the native block kernels treat as decode rows (block_matmul.QUANT_ROWS_MAX)


class PagedSequence(TokenStream):
    """One sequence in a :class:`PagedBatcher`: a :class:`~lightspeed.models.generate.TokenStream`
    (the surface of :class:`~lightspeed.models.generate.GenerationState`: ``ids``, ``done``,
    ``stop_reason``, ``last_logits``, ``cancel()``, ``result()``) advanced by the batcher's
    :meth:`~PagedBatcher.step` instead of its own calls; its pages go back when it ends."""

    def __init__(self, batcher: PagedBatcher, prompt: list[int], max_new_tokens: int, stops: set[int],
                 rng: np.random.Generator, params: dict[str, Any], keep_logits: bool) -> None:
        super().__init__(prompt, max_new_tokens, stops, rng, params, [] if keep_logits else None)
        self.batcher = batcher
        self.fed = 0  # tokens whose keys/values are in the cache
        self.pages: list[int] = []
        self.indexed = 0  # leading pages of this sequence in the prefix index (-1: indexing stopped)
        self._since = time.perf_counter()  # the start, then the last token

    @property
    def prefilling(self) -> bool:
        return self.fed < len(self.prompt)

    def close(self) -> None:
        self.batcher._release(self)

    def _take(self, logits: np.ndarray, token: int | None = None) -> int:
        """Choose the next token from the raw ``logits`` of the last fed row (``token``: sampled
        already, with the batch's other rows)."""
        tok = self.choose(logits, self._since, token)
        self._since = time.perf_counter()
        self.prefill_s = self.ttft_s  # (the prompt's chunks and its first token are one span here)
        return tok


class PagedBatcher:
    """The paged program of ``model`` with ``weights`` resident, its KV page pools and their free
    pages.  ``max_rows``: rows per step (decode rows first, then prompt chunks), at most
    :data:`ROWS_LIMIT`; ``chunk``: prompt rows one sequence feeds per step; ``max_context``:
    the longest sequence (prompt + new tokens); ``pages``: the pool's first size in pages;
    ``pipeline``: on a device, a step of greedy decode rows queues the next one on its own token
    ids before the host waits for them (:meth:`_launch_ahead`); ``batch_invariant``: one
    program for every row count, so a sequence's tokens are the same alone or beside others
    (False: on a backend with many-rows kernels a step of few rows runs a second program searched
    at one row, faster at low load, whose kernels may round differently -- a bfloat16 1B's greedy
    tokens differed alone and beside 31 others on an H100); ``prefix_cache``: sequences take the
    written pages of a prefix they share with earlier ones (off without ``batch_invariant``: a
    page's values could then depend on the rows beside it)."""

    def __init__(self, model: DecoderLM, weights: Mapping[str, Any], *, backend: str = "cpu",
                 search: SearchOptions | None = None, max_rows: int = 24, chunk: int = 16,
                 max_context: int = 2048, pages: int = 64, pipeline: bool = True,
                 batch_invariant: bool = True, prefix_cache: bool = True) -> None:
        if not 1 <= max_rows <= ROWS_LIMIT:
            raise ValueError(f"max_rows must be in [1, {ROWS_LIMIT}], got {max_rows}")
        if not 1 <= chunk <= max_rows:
            raise ValueError(f"chunk must be in [1, max_rows={max_rows}], got {chunk}")
        if max_context < 2:
            raise ValueError(f"max_context must be >= 2, got {max_context}")
        self.model, self.backend = model, backend
        self._logits: np.ndarray | None = None  # the logits' buffer, reused by every step
        self.pipeline = pipeline
        self._ahead: _Ahead | None = None  # the next step, queued on this one's device ids
        self.max_rows, self.chunk, self.max_context = max_rows, chunk, max_context
        self.page = model.PAGE_SIZE
        self.max_pages = math.ceil(max_context / self.page)  # pages of the longest sequence
        t0 = time.perf_counter()
        checked = model.check_weights(weights)
        storage = model.block_storage(checked, backend)
        self.program = compile_model(model, "paged", backend, search, storage=storage,
                                     buckets=not batch_invariant).persist(checked)
        self.compile_s = time.perf_counter() - t0
        self.layers = model.config.num_layers
        self.pools: list[tuple[Any, Any]] = []
        self.free: list[int] = []
        self.n_pages = 0
        self.prefix_cache = prefix_cache and batch_invariant
        self._index: dict[tuple[int, tuple[int, ...]], int] = {}  # (parent page or -1, tokens) -> page
        self._page_keys: dict[int, tuple[int, tuple[int, ...]]] = {}  # an indexed page's key
        self._users: dict[int, int] = {}  # an indexed page's sequences
        self._children: dict[int, int] = {}  # indexed pages whose parent is this page
        self._idle: dict[int, None] = {}  # indexed pages no sequence holds, least recently used first
        self.initial_pages = max(1, pages)
        self._grow(self.initial_pages)
        self.program.reserve(s=max_rows, NP=self.max_pages, N=self.n_pages, r=max_rows)
        self._prime()

    def _prime(self) -> None:
        """One step at the bounds (every row at the last position of a full page table) before the
        first request: the buffers planned for the largest batch become resident now, so the first
        busy spell neither stalls on page faults nor raises the idle memory level.  It writes only
        into free pages, which no sequence reads before writing (a row sees only positions its own
        sequence has written)."""
        rows, width = self.max_rows, self.max_pages
        inputs: dict[str, Any] = {"input_ids": np.zeros(rows, np.int64),
                                  "positions": np.full(rows, width * self.page - 1, np.int64),
                                  "pages": np.zeros((rows, width), np.int64),
                                  "slots": np.arange(rows, dtype=np.int64) % (self.n_pages * self.page)}
        self._call(inputs, rows)

    # ------------------------------------------------------------------ sequences
    def start(self, prompt_ids: Sequence[int], max_new_tokens: int = 64, *, temperature: float = 0.0,
              top_k: int | None = None, top_p: float | None = None, repetition_penalty: float = 1.0,
              seed: int | None = 0, stop_ids: Iterable[int] | None = None, keep_logits: bool = False
              ) -> PagedSequence:
        """A new sequence of ``prompt_ids`` (checked like :meth:`Generator.start`); it joins the
        next :meth:`step` it is passed to."""
        prompt, stops = check_request(self.model, prompt_ids, max_new_tokens, stop_ids)
        if len(prompt) + max_new_tokens > self.max_context:
            raise InputError(f"generate: {len(prompt)} prompt tokens + {max_new_tokens} new ones exceed the "
                             f"context of {self.max_context} tokens")
        params = dict(temperature=temperature, top_k=top_k, top_p=top_p, repetition_penalty=repetition_penalty)
        sample_token(np.zeros(2, np.float32), np.random.default_rng(0), (), **params)  # bad settings fail here
        return PagedSequence(self, prompt, max_new_tokens, stops, np.random.default_rng(seed), params, keep_logits)

    def generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int = 64, **sampling: Any
                 ) -> list[GenerationResult]:
        """Run ``prompts`` together to the end (each with ``sampling``); their results in order."""
        seqs = [self.start(p, max_new_tokens, **sampling) for p in prompts]
        while True:
            live = [s for s in seqs if not s.done]
            if not live:
                return [s.result() for s in seqs]
            self.step(live)

    # ------------------------------------------------------------------ one step
    def step(self, seqs: Sequence[PagedSequence]) -> dict[PagedSequence, int]:
        """One program call for ``seqs`` (unfinished ones of this batcher): a row for each decoding
        sequence, then prompt chunks while rows are left.  Returns the token each sequence that
        produced one chose (a sequence still inside its prompt produces none)."""
        rows: list[tuple[PagedSequence, int, int]] = []  # (sequence, position, token)
        decoding = [s for s in seqs if not s.done and not s.prefilling]
        prefilling = [s for s in seqs if not s.done and s.prefilling]
        waiting = self._share_prefixes(prefilling)
        if len(decoding) > self.max_rows:
            raise InputError(f"a step takes at most {self.max_rows} sequences, got {len(decoding)} decoding")
        for s in decoding:
            rows.append((s, len(s.ids) - 1, s.ids[-1]))
        for s in prefilling:
            if s in waiting:
                continue
            room = min(self.chunk, self.max_rows - len(rows), len(s.prompt) - s.fed)
            if room <= 0:
                break
            rows.extend((s, s.fed + k, s.prompt[s.fed + k]) for k in range(room))
        if not rows:
            return {}
        # rows that choose a token (a sequence's row at its last known token) first: the step
        # computes logits for the first r rows only (at least one: a step inside a prompt
        # computes one it does not use); a row's result does not depend on its place
        rows.sort(key=lambda row: row[1] + 1 != len(row[0].ids))
        choosing = [s for s, pos, _ in rows if pos + 1 == len(s.ids)]
        inputs: dict[str, Any] = {"input_ids": np.array([t for _, _, t in rows], np.int64),
                                  **self._page_inputs([(s, pos) for s, pos, _ in rows])}
        if self._on_device():
            return self._step_on_device(inputs, rows, choosing)
        logits = self._call(inputs, max(1, len(choosing)))
        self._fed(rows)
        picked = self._sample(choosing, logits)
        return {s: s._take(np.asarray(logits[j]), picked.get(j)) for j, s in enumerate(choosing)}

    def _fed(self, rows: list[tuple[PagedSequence, int, int]]) -> None:
        """After a step: each row's position is in its sequence's cache, and the pages so filled
        whole go into the prefix index."""
        for s, pos, _ in rows:
            s.fed = max(s.fed, pos + 1)
        for s in dict.fromkeys(s for s, _, _ in rows):
            self._index_pages(s)

    def _page_inputs(self, rows: list[tuple[PagedSequence, int]]) -> dict[str, Any]:
        """The positions, page table and cache slots of ``rows`` ((sequence, position) each),
        with pages given to every position they write."""
        for s, pos in rows:
            self._cover(s, pos + 1)
        width = max(len(s.pages) for s, _ in rows)
        table = np.zeros((len(rows), width), np.int64)  # padding: page 0, behind the row's mask
        slots = np.empty(len(rows), np.int64)
        for i, (s, pos) in enumerate(rows):
            table[i, :len(s.pages)] = s.pages
            slots[i] = s.pages[pos // self.page] * self.page + pos % self.page
        return {"positions": np.array([p for _, p in rows], np.int64), "pages": table, "slots": slots}

    def _on_device(self) -> bool:
        """Whether the step's tokens are chosen where its outputs live (a device backend: the
        greedy rows' argmaxes, ``next_token``, and the sampled rows by the backend's sampler)."""
        return get_backend(self.backend).device_memory and "next_token" in self.program.output_names

    def _step_on_device(self, inputs: dict[str, Any], rows: list, choosing: list[PagedSequence]
                        ) -> dict[PagedSequence, int]:
        """:meth:`step` on a device backend: only token ids come back (the argmaxes, the sampled
        rows' draws); the logits only when a row needs them on the host (logprobs, kept logits, a
        repetition penalty, no sampler)."""
        r = max(1, len(choosing))
        sampler = token_sampler(self.backend)
        draws = {}  # the rows the sampler draws: {row: its params}
        for j, s in enumerate(choosing):
            if sampler is not None and not s.want_logits and s.kept is None and (row := s.sample_row()) is not None:
                draws[j] = row
        host = [j for j, s in enumerate(choosing) if j not in draws and (
            s.want_logits or s.kept is not None or s.params.get("temperature", 0.0) > 0
            or s.params.get("repetition_penalty", 1.0) != 1.0)]
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead.rows == [(s, pos) for s, pos, _ in rows] and not draws and not host \
                and [t for _, _, t in rows] == [int(t) for t in ahead.fed]:
            step = ahead.step  # queued by the last step on the ids it chose: already running
        else:
            for i, (k, v) in enumerate(self.pools):
                inputs[f"pool.{i}.k"], inputs[f"pool.{i}.v"] = k, v
            step = self.program.launch(inputs, dims={"r": r}, fetch=["next_token", *(["logits"] if host else [])])
        if (self.pipeline and not draws and not host and len(choosing) == len(rows)
                and all(len(s.ids) + 1 - len(s.prompt) < s.max_new_tokens for s in choosing)):
            self._ahead = self._launch_ahead(rows, step)
        picked = None
        if draws:  # every logit row through the sampler (one launch); the greedy rows' draws unused
            params = [draws.get(j, [1.0, 0.0, 1.0, 0.0]) for j in range(r)]
            picked = sampler.sample(step.value("logits"), params).result()["ids"]
        out = step.result()
        self._fed(rows)
        logits = out.get("logits")
        chosen = {}
        for j, s in enumerate(choosing):
            if j in host:
                chosen[s] = s._take(np.asarray(logits[j]))
            else:
                chosen[s] = s._take(None, int(picked[j] if j in draws else out["next_token"][j]))
        if self._ahead is not None:
            self._ahead.fed = out["next_token"][:len(rows)]
        return chosen

    def _launch_ahead(self, rows: list, step: Any) -> _Ahead:
        """The step after this one (greedy decode rows only, every sequence able to go on) queued
        now on this step's ``next_token`` as its input ids, so the device runs it while the host
        reads this step's ids and returns them.  The next :meth:`step` takes it when its rows are
        these (same sequences, next positions, the ids fed are the ones chosen), else drops it:
        a sequence that stopped or a new prompt.  A dropped step wrote keys and values only at
        positions its sequences write again, into pages that stay theirs until they end, before
        (stream order) anything later reads or reuses them."""
        nxt = [(s, pos + 1) for s, pos, _ in rows]
        inputs: dict[str, Any] = {"input_ids": step.value("next_token"), **self._page_inputs(nxt)}
        for i, (k, v) in enumerate(self.pools):
            inputs[f"pool.{i}.k"], inputs[f"pool.{i}.v"] = k, v
        return _Ahead(nxt, self.program.launch(inputs, dims={"r": len(nxt)}, fetch=["next_token"]), step)

    def _sample(self, choosing: list[PagedSequence], logits: Any) -> dict[int, int]:
        """The tokens of the rows the backend's sampler takes (``TokenStream.sample_row``), sampled
        in one call: {row: token}.  The other rows are chosen by their sequences."""
        sampler = token_sampler(self.backend) if any(s.params.get("temperature", 0.0) > 0 for s in choosing) else None
        if sampler is None:
            return {}
        rows = [(j, r) for j, s in enumerate(choosing) if (r := s.sample_row()) is not None]
        if not rows:
            return {}
        picks = [j for j, _ in rows]
        ids = sampler.sample(np.asarray(logits)[picks], [r for _, r in rows]).result()["ids"]
        return {j: int(t) for j, t in zip(picks, ids)}

    def _call(self, inputs: dict[str, Any], logit_rows: int) -> Any:
        """The paged program on ``inputs`` and the pools: the logits of the first ``logit_rows`` rows."""
        for i, (k, v) in enumerate(self.pools):
            inputs[f"pool.{i}.k"], inputs[f"pool.{i}.v"] = k, v
        if self._logits is None or self._logits.shape[0] < logit_rows:
            # written in place every step: a fresh array per step (megabytes at a large vocabulary)
            # had every step fault in zeroed pages and unmap them again
            node = self.program.graph.nodes[self.program.graph.outputs["logits"]]
            self._logits = np.empty((max(logit_rows, self.max_rows), self.model.config.vocab_size), node.dtype.np)
        return self.program(inputs, dims={"r": logit_rows}, out={"logits": self._logits[:logit_rows]})["logits"]

    # ------------------------------------------------------------------ pages
    @property
    def pages_in_use(self) -> int:
        """Pages some sequence holds (neither free nor idle in the prefix index)."""
        return self.n_pages - len(self.free) - len(self._idle)

    @property
    def pages_cached(self) -> int:
        """Pages in the prefix index (held or idle)."""
        return len(self._page_keys)

    def _share_prefixes(self, prefilling: list[PagedSequence]) -> set[PagedSequence]:
        """Before a step: each prompt that has computed nothing of its own yet takes the indexed
        pages it begins with (:meth:`_match`); those whose next page another of ``prefilling`` is
        computing now (the same tokens after the same page: requests with one system prompt
        arriving together) wait for it instead of computing it too.  Returns the waiting ones."""
        waiting: set[PagedSequence] = set()
        if not self.prefix_cache:
            return waiting
        building: set[tuple[int, tuple[int, ...]]] = set()  # the pages prefilling sequences compute
        for s in prefilling:
            fresh = s.fed == s.cached  # nothing computed but what the cache gave
            if fresh:
                self._match(s)
            key = self._next_key(s, fresh)
            if fresh and key in building:
                waiting.add(s)
            elif key is not None:
                building.add(key)
        return waiting

    def _key(self, s: PagedSequence, j: int, tokens: Sequence[int]) -> tuple[int, tuple[int, ...]]:
        """The index key of page ``j`` of ``s`` holding ``tokens``' page j: the page before it in
        ``s``'s table (-1 for the first) and the page's tokens."""
        return (s.pages[j - 1] if j else -1, tuple(tokens[j * self.page:(j + 1) * self.page]))

    def _next_key(self, s: PagedSequence, fresh: bool) -> tuple[int, tuple[int, ...]] | None:
        """The index key of the next page ``s`` computes whole from its prompt (for a ``fresh``
        sequence, one it could take: not its last token's page), or None."""
        j = s.indexed
        if j < 0 or (j + 1) * self.page + (1 if fresh else 0) > len(s.prompt):
            return None
        return self._key(s, j, s.prompt)

    def _match(self, s: PagedSequence) -> None:
        """``s`` (a prompt that has computed nothing of its own) takes the indexed pages its prompt
        begins with after those it holds: whole pages, each under the one before it, none holding
        the prompt's last token (its row is computed: it gives the logits of the first new token)."""
        while (len(s.pages) + 1) * self.page < len(s.prompt):
            page = self._index.get(self._key(s, len(s.pages), s.prompt))
            if page is None:
                break
            self._users[page] += 1
            self._idle.pop(page, None)
            s.pages.append(page)
        s.fed = s.cached = len(s.pages) * self.page
        s.indexed = len(s.pages)

    def _index_pages(self, s: PagedSequence) -> None:
        """Index the pages of ``s`` written whole since the last call, each under the page before
        it.  A page whose key is indexed already (the same tokens computed beside the indexed
        page, in the same step) stays ``s``'s own, and so do its later pages."""
        if not self.prefix_cache:
            return
        while 0 <= s.indexed < len(s.pages) and (s.indexed + 1) * self.page <= s.fed:
            key = self._key(s, s.indexed, s.ids)
            if key in self._index:
                s.indexed = -1
                return
            page = s.pages[s.indexed]
            self._index[key], self._page_keys[page], self._users[page] = page, key, 1
            if key[0] >= 0:
                self._children[key[0]] = self._children.get(key[0], 0) + 1
            s.indexed += 1

    def _evict(self) -> bool:
        """Free the least recently used idle indexed page with no indexed page after it (one
        exists whenever a page is idle: a page's holders hold the pages before it); returns
        whether there was one."""
        page = next((p for p in self._idle if not self._children.get(p)), None)
        if page is None:
            return False
        del self._idle[page], self._users[page]
        key = self._page_keys.pop(page)
        del self._index[key]
        self._children.pop(page, None)
        if key[0] >= 0:
            self._children[key[0]] -= 1
        self.free.append(page)
        return True

    def _forget(self) -> None:
        """Empty the prefix index (the pools are being replaced)."""
        for table in (self._index, self._page_keys, self._users, self._children, self._idle):
            table.clear()

    def trim(self) -> bool:
        """With no page in use, shrink the pools back to their first size (memory returns to the
        idle level after a busy spell); returns whether it did."""
        if self.pages_in_use or self.n_pages <= self.initial_pages:
            return False
        if self._ahead is not None:  # it reads and writes the pools about to go
            self._ahead.step.result()
            self._ahead = None
        self.pools, self.free, self.n_pages = [], [], 0
        self._forget()
        self._grow(self.initial_pages)
        return True

    def _cover(self, s: PagedSequence, rows: int) -> None:
        while len(s.pages) * self.page < rows:
            if not self.free and not self._evict():
                self._grow(self.n_pages * 2)
            s.pages.append(self.free.pop())

    def _release(self, s: PagedSequence) -> None:
        """``s``'s pages back: free, or (indexed ones no other sequence holds) idle in the index,
        the last page first (so that an eviction meets the later pages before the earlier)."""
        for page in reversed(s.pages):
            if page in self._page_keys:
                self._users[page] -= 1
                if not self._users[page]:
                    self._idle[page] = None
            else:
                self.free.append(page)
        s.pages = []

    def _grow(self, n: int) -> None:
        """Make the pools ``n`` pages (keeping the pages in use), the new ones free."""
        shape = (n, self.page)
        old = self.pools
        self.pools = []
        for i in range(self.layers):
            pair = []
            for c in range(2):
                host = np.zeros(shape + tuple(self.model.kv_shape(i)), self.model.dtype.np)
                if old:
                    prev = old[i][c]
                    host[:self.n_pages] = prev if isinstance(prev, np.ndarray) else prev.numpy()
                pair.append(self.program.to_device(host))
            self.pools.append((pair[0], pair[1]))
        self.free = list(range(n - 1, self.n_pages - 1, -1)) + self.free
        self.n_pages = n


class _Ahead:
    """A step queued before its rows were asked for (:meth:`PagedBatcher._launch_ahead`): its rows
    ((sequence, position) each), the pending call, the step whose ids it was fed (kept alive
    until it ran) and, once that step's ids are on the host, those ids (``fed``)."""

    def __init__(self, rows: list[tuple[PagedSequence, int]], step: Any, source: Any) -> None:
        self.rows, self.step, self.source = rows, step, source
        self.fed: Any = ()
