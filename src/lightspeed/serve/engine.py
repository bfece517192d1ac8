"""The serving engine: one worker thread that owns a model's compiled programs and runs every
request in flight.

Requests wait in a bounded queue; the worker admits them up to ``max_batch`` at a time (a new one
joins at the next token boundary) and advances every active request by one token per round until
it ends (a stop token, a stop string, its token budget, or a cancel: a client that went away, a
server shutting down); its KV cache is freed then.  Two ways to run a round:

- **batched** (a :class:`lightspeed.models.batch.PagedBatcher`, the default for the text models):
  one call of the paged program for all of them -- a row per decoding request plus chunks of the
  new requests' prompts -- over a paged KV cache; each row's arithmetic does not depend on the
  others (batch invariance), so a greedy request gets the tokens it gets alone;
- **interleaved** (a :class:`lightspeed.models.generate.Generator`): each request's own batch-1
  prefill and decode calls in turn, each with its own cache.

The worker talks to the HTTP side only through :class:`Request` objects: it appends
:class:`Event` s and calls the request's ``notify`` (the server's event loop wakes the waiting
handler), and reads the request's ``cancelled`` flag at every token boundary.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import LightspeedError

__all__ = ["Engine", "Request", "Event", "QueueFull", "ShuttingDown", "Metrics"]


class QueueFull(LightspeedError):
    """The request queue is full (HTTP 429)."""


class ShuttingDown(LightspeedError):
    """The server is shutting down and admits no new request (HTTP 503)."""


@dataclass
class Event:
    """What the worker reports about a request: new ``text`` (and the ``tokens`` and their
    ``logprobs`` behind it), or the end (``finish`` set: "stop", "length", "cancelled", "error")."""

    text: str = ""
    tokens: list[int] = field(default_factory=list)
    logprobs: list[dict[str, Any]] = field(default_factory=list)
    finish: str | None = None
    error: str | None = None


@dataclass
class Request:
    """One completion request: prompt ids, token budget, sampling and stop strings.  ``logprobs``:
    None, or how many alternatives per token to report (0: only the chosen token's)."""

    prompt_ids: list[int]
    max_tokens: int
    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    logprobs: int | None = None
    notify: Callable[[], None] = lambda: None  # called by the worker after each event (from its thread)
    wake: Any = None  # the HTTP side's waiter that notify sets (an asyncio.Event)
    events: deque = field(default_factory=deque)
    cancelled: threading.Event = field(default_factory=threading.Event)
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens whose keys and values came from the prefix cache
    t_submit: float = field(default_factory=time.perf_counter)

    def cancel(self) -> None:
        self.cancelled.set()

    def _emit(self, event: Event) -> None:
        self.events.append(event)
        self.notify()


class Histogram:
    """A Prometheus histogram (cumulative buckets, sum, count) of seconds."""

    BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

    def __init__(self) -> None:
        self.counts = [0] * (len(self.BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        self.sum += seconds
        for i, b in enumerate(self.BUCKETS):
            if seconds <= b:
                self.counts[i] += 1
                return
        self.counts[-1] += 1

    def lines(self, name: str) -> list[str]:
        out, total = [], 0
        for b, c in zip((*self.BUCKETS, math.inf), self.counts):
            total += c
            le = "+Inf" if b == math.inf else repr(b)
            out.append(f'{name}_bucket{{le="{le}"}} {total}')
        out += [f"{name}_sum {self.sum:.6f}", f"{name}_count {total}"]
        return out


class Metrics:
    """Counters the worker keeps for ``GET /metrics`` (read under the engine's lock)."""

    def __init__(self) -> None:
        self.requests: dict[str, int] = {}  # by finish reason, or the HTTP status of a refusal
        self.prompt_tokens = 0
        self.cached_tokens = 0  # of those, read from the prefix cache
        self.completion_tokens = 0
        self.ttft = Histogram()
        self.tpot = Histogram()

    def count(self, outcome: str) -> None:
        self.requests[outcome] = self.requests.get(outcome, 0) + 1


def _logsumexp(x: np.ndarray) -> float:
    m = float(np.max(x))
    return m + float(np.log(np.sum(np.exp(x - m))))


class _Active:
    """A request the worker runs: its generation state, its text so far and what it has emitted."""

    def __init__(self, req: Request, state: Any, tokenizer: Any) -> None:
        self.req, self.state = req, state
        self.decoder = tokenizer.stream_decoder(skip_special=True)
        self.text = ""  # all the text decoded so far
        self.sent = 0  # characters of it emitted
        self.t_first: float | None = None
        self.t_last = 0.0


_malloc_trim: list[Any] = []  # the C library's malloc_trim, looked up once (None: there is none)


def _release_heap() -> None:
    """Give the C heap's free pages back to the OS (glibc keeps them after a busy spell: threads,
    buffers and arrays of many requests), so an idle server's resident memory returns to its idle
    level.  Nothing where the C library has no ``malloc_trim``."""
    if not _malloc_trim:
        import ctypes
        import ctypes.util

        try:  # (find_library runs ldconfig: once per process)
            _malloc_trim.append(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim)
        except (OSError, AttributeError):
            _malloc_trim.append(None)
    if _malloc_trim[0] is not None:
        _malloc_trim[0](0)


class Engine:
    """Runs requests on ``generator`` (a :class:`lightspeed.models.batch.PagedBatcher`, or a
    :class:`lightspeed.models.generate.Generator`; or a function making one, which the worker
    thread calls first, so that compiling and stepping run on one thread: native kernels get one
    OpenMP team, see ``backends/native/executor.py``) with ``tokenizer``; at most ``max_batch``
    in flight and ``max_queue`` waiting; sequences of at most ``max_context`` tokens (prompt +
    completion), for which the programs are planned once here.  The constructor returns when
    the worker is ready and raises what making the generator raised."""

    def __init__(self, generator: Any, tokenizer: Any, *, max_batch: int = 8, max_queue: int = 64,
                 max_context: int = 2048, stop_ids: Sequence[int] = ()) -> None:
        if max_batch < 1 or max_queue < 0 or max_context < 2:
            raise ValueError(f"engine: max_batch {max_batch} >= 1, max_queue {max_queue} >= 0 and "
                             f"max_context {max_context} >= 2 expected")
        self.tokenizer = tokenizer
        self.max_batch, self.max_queue, self.max_context = max_batch, max_queue, max_context
        self.stop_ids = set(stop_ids)
        self.metrics = Metrics()
        self._lock = threading.Condition()
        self._pending: deque[Request] = deque()
        self._active: list[_Active] = []
        self._stopping = False  # no new requests; the active ones finish or are cancelled
        self._closed = False  # the worker ends
        self._idle = False  # the worker has released memory since the last request
        ready: list[BaseException | None] = []
        started = threading.Event()

        def serve() -> None:
            try:
                self._attach(generator() if callable(generator) else generator)
            except BaseException as e:  # noqa: BLE001 - handed to the constructor
                ready.append(e)
                started.set()
                return
            ready.append(None)
            started.set()
            self._run()

        self._worker = threading.Thread(target=serve, name="lightspeed-engine", daemon=True)
        self._worker.start()
        started.wait()
        if ready[0] is not None:
            raise ready[0]

    def _attach(self, generator: Any) -> None:
        """Check ``generator`` against the engine's bounds and plan its programs for them."""
        self.gen = generator
        self.batched = hasattr(generator, "step")
        if self.batched:
            if self.max_batch > generator.max_rows:
                raise ValueError(f"engine: max_batch {self.max_batch} exceeds the batcher's {generator.max_rows} rows")
            if self.max_context > generator.max_context:
                raise ValueError(f"engine: max_context {self.max_context} exceeds the batcher's "
                                 f"{generator.max_context}")
        else:  # every sequence fits these bounds: no call ever plans anything again
            generator.prefill.reserve(s=self.max_context)
            generator.decode.reserve(**{k: self.max_context for k in ("p", "M") if k in generator.decode.symbols})

    # ------------------------------------------------------------------ the HTTP side
    def submit(self, req: Request) -> None:
        """Queue ``req``; raises :class:`QueueFull` or :class:`ShuttingDown`."""
        with self._lock:
            if self._stopping:
                self.metrics.count("503")
                raise ShuttingDown("the server is shutting down")
            free = max(0, self.max_batch - len(self._active))  # slots the worker fills at the next boundary
            if len(self._pending) >= self.max_queue + free:
                self.metrics.count("429")
                raise QueueFull(f"{len(self._pending)} requests are waiting (the queue holds {self.max_queue})")
            self._pending.append(req)
            self._lock.notify_all()

    @property
    def queue_depth(self) -> int:
        with self._lock:
            return len(self._pending)

    @property
    def active(self) -> int:
        with self._lock:
            return len(self._active)

    def snapshot(self) -> dict[str, Any]:
        """The counters for /metrics, copied under the lock."""
        with self._lock:
            m = self.metrics
            return dict(requests=dict(m.requests), prompt_tokens=m.prompt_tokens, cached_tokens=m.cached_tokens,
                        completion_tokens=m.completion_tokens, queue=len(self._pending), active=len(self._active),
                        ttft=m.ttft.lines("lightspeed_time_to_first_token_seconds"),
                        tpot=m.tpot.lines("lightspeed_time_per_output_token_seconds"))

    def stop(self, grace_s: float = 5.0) -> None:
        """Admit nothing more; let the requests in flight finish for ``grace_s`` seconds, then
        cancel what is left (queued ones at once).  Returns when the worker has ended."""
        with self._lock:
            self._stopping = True
            while self._pending:
                self._finish_queued(self._pending.popleft(), "cancelled")
            self._lock.notify_all()
        deadline = time.perf_counter() + grace_s
        while self.active and time.perf_counter() < deadline:
            time.sleep(0.02)
        with self._lock:
            for a in self._active:
                a.req.cancel()
            self._closed = True
            self._lock.notify_all()
        self._worker.join(timeout=30)

    # ------------------------------------------------------------------ the worker
    def _finish_queued(self, req: Request, reason: str) -> None:
        self.metrics.count(reason)
        req._emit(Event(finish=reason))

    def _admit(self) -> None:
        while self._pending and len(self._active) < self.max_batch:
            req = self._pending.popleft()
            if req.cancelled.is_set():
                self._finish_queued(req, "cancelled")
                continue
            try:
                extra = {} if self.batched else {"reserve": False}
                state = self.gen.start(req.prompt_ids, req.max_tokens, temperature=req.temperature, top_k=req.top_k,
                                       top_p=req.top_p, seed=req.seed, stop_ids=self.stop_ids, **extra)
                state.want_logits = req.logprobs is not None
            except (LightspeedError, ValueError) as e:
                self.metrics.count("error")
                req._emit(Event(finish="error", error=str(e)))
                continue
            self.metrics.prompt_tokens += len(req.prompt_ids)
            self._active.append(_Active(req, state, self.tokenizer))

    def _run(self) -> None:
        while True:
            with self._lock:
                self._admit()
                if not self._active and not self._pending and not self._idle:
                    self._idle = True  # idle: the KV pool back to its first size, freed heap to the OS
                    if self.batched:
                        self.gen.trim()
                    _release_heap()
                elif self._active:
                    self._idle = False
                while not self._active and not self._closed and not self._pending:
                    self._lock.wait(0.5)
                    self._admit()
                if self._closed and not self._active:
                    return
                batch = list(self._active)
            ends = self._round_batched(batch) if self.batched else self._round_interleaved(batch)
            for a, end in ends:
                with self._lock:
                    self._active.remove(a)
                    self.metrics.count(end)
                    if a.t_first is not None:
                        self.metrics.ttft.observe(a.t_first - a.req.t_submit)
                    if a.req.completion_tokens > 1:
                        self.metrics.tpot.observe((a.t_last - a.t_first) / (a.req.completion_tokens - 1))

    def _cancelled(self, a: _Active) -> str | None:
        if not a.req.cancelled.is_set():
            return None
        a.state.cancel()
        a.req._emit(Event(text=self._flush(a), finish="cancelled"))
        return "cancelled"

    def _failed(self, a: _Active, e: Exception) -> str:
        a.state.cancel()
        a.req._emit(Event(finish="error", error=f"{type(e).__name__}: {e}"))
        return "error"

    def _round_interleaved(self, batch: list[_Active]) -> list[tuple[_Active, str]]:
        """One token each, round-robin: a new request's prefill between the others' steps."""
        ends = []
        for a in batch:
            end = self._cancelled(a)
            if end is None:
                try:
                    tok = a.state.advance()
                except Exception as e:  # a failing call ends this request, not the server
                    end = self._failed(a, e)
                else:
                    end = self._deliver(a, tok)
            if end is not None:
                ends.append((a, end))
        return ends

    def _round_batched(self, batch: list[_Active]) -> list[tuple[_Active, str]]:
        """One call of the paged program for every request (a prompt chunk or a token each)."""
        ends = []
        live = []
        for a in batch:
            end = self._cancelled(a)
            if end is None:
                live.append(a)
            else:
                ends.append((a, end))
        if not live:
            return ends
        try:
            toks = self.gen.step([a.state for a in live])
        except Exception as e:  # a failing call ends the requests in it, not the server
            return ends + [(a, self._failed(a, e)) for a in live]
        for a in live:
            if a.state in toks:
                end = self._deliver(a, toks[a.state])
                if end is not None:
                    ends.append((a, end))
        return ends

    def _deliver(self, a: _Active, tok: int) -> str | None:
        """Report ``a``'s new token ``tok``; returns its finish reason when it ended."""
        req, state = a.req, a.state
        now = time.perf_counter()
        first = a.t_first is None
        if first:
            a.t_first = now
            req.cached_tokens = state.cached
        a.t_last = now
        req.completion_tokens += 1
        with self._lock:
            self.metrics.completion_tokens += 1
            if first:
                self.metrics.cached_tokens += req.cached_tokens
        probs = [self._logprob(state, tok, req.logprobs)] if req.logprobs is not None else []
        new = state.new_ids
        ended = state.done and state.stop_reason == "stop_token"
        shown = new[:-1] if ended else new  # a stop token's text is not part of the completion
        a.text += a.decoder.step(shown) if not ended else a.decoder.finish(shown)
        if state.done and not ended:
            a.text += a.decoder.finish(shown)
        cut = self._stop_at(a.text, req.stop)
        if cut is not None:
            a.text = a.text[:cut]
            state.cancel()
            req._emit(Event(text=self._flush(a), tokens=[tok], logprobs=probs, finish="stop"))
            return "stop"
        if state.done:
            reason = "stop" if ended else "length"
            req._emit(Event(text=self._flush(a), tokens=[tok], logprobs=probs, finish=reason))
            return reason
        # hold back a tail that could begin a stop string
        hold = max((k for s in req.stop for k in range(1, len(s)) if a.text.endswith(s[:k])), default=0)
        safe = len(a.text) - hold
        text, a.sent = a.text[a.sent:safe], max(a.sent, safe)
        req._emit(Event(text=text, tokens=[tok], logprobs=probs))
        return None

    @staticmethod
    def _flush(a: _Active) -> str:
        text, a.sent = a.text[a.sent:], len(a.text)
        return text

    @staticmethod
    def _stop_at(text: str, stops: Sequence[str]) -> int | None:
        hits = [i for i in (text.find(s) for s in stops) if i >= 0]
        return min(hits) if hits else None

    def _logprob(self, state: Any, tok: int, top: int) -> dict[str, Any]:
        """The chosen token's log-probability under the model's distribution (the raw logits'
        softmax, before temperature and cuts) and the ``top`` most likely alternatives."""
        logits = np.asarray(state.last_logits, dtype=np.float64)
        z = _logsumexp(logits)
        out: dict[str, Any] = {"id": tok, "token": self.tokenizer.decode([tok]), "logprob": float(logits[tok] - z)}
        if top:
            best = np.argsort(-logits, kind="stable")[:top]
            out["top"] = [{"id": int(i), "token": self.tokenizer.decode([int(i)]), "logprob": float(logits[i] - z)}
                          for i in best]
        return out
