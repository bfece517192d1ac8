"""Tensor-parallel generation: one process per rank on this host, torchrun-style.

``tensor_parallel_generator(model, weights, N)`` (and ``lightspeed run MODEL --tp N``) makes the
calling process rank 0 and starts ranks 1..N-1 as spawned processes (``multiprocessing`` spawn context:
a fresh interpreter, no forked threads) that rendezvous on a free localhost port.  Rank 0 cuts
every rank's weights (:meth:`ShardedModel.shard_weights`) and hands them over when it starts
them; each rank compiles its own stages.  Every rank then runs the same generation loop: the
logits are all-gathered and the all-reduce gives every rank the same bits, so every rank samples
the same tokens from the same seed and no token is sent.  Only rank 0 reports tokens.  The loop
is :class:`~lightspeed.models.generate.Generator`'s, given a rank's programs (:func:`start_rank`):
parallel builds on generation, never the other way round.

Processes always end: a worker exits when rank 0 says so, when its pipe to rank 0 closes (rank 0
died) or when a collective times out; :meth:`TensorParallelGroup.close` (also run when the group
is garbage collected and at exit) joins them and terminates any that do not stop.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import signal
import time
import traceback
import weakref
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..errors import LightspeedError, UnsupportedError
from ..models.generate import Generator, RankPrograms, profile_options, record_build
from ..search import SearchOptions
from .collective import Communicator, TorchCommunicator, free_port
from .plan import ShardedModel, backend_refusal, check_tp, shard_model
from .stages import StagedProgram, compile_staged

__all__ = ["Rank", "TensorParallelGroup", "compile_shard", "start_rank", "tensor_parallel_generator", "TIMEOUT_S"]

TIMEOUT_S = 120.0  # a collective or a worker reply slower than this means a rank is gone

_STAGED: dict[tuple, StagedProgram] = {}


@dataclass
class Rank:
    """One rank of a group started elsewhere: its communicator (rank, world), and whether the
    weights it is given are already its shards (else it cuts them from the full weights)."""

    comm: Communicator
    weights_are_shards: bool = False


def compile_shard(shard: ShardedModel, mode: str, backend: str, search: SearchOptions | None,
                  comm: Communicator) -> StagedProgram:
    """The rank's compiled ``mode`` program (stages + collectives), cached in-process by the
    rank's model, rank and options (the stages do not depend on weights or the communicator)."""
    opts = profile_options(mode, search)
    m = shard.model
    key = (type(m), repr(m.config), m.dtype, mode, shard.world, shard.rank, backend, repr(opts))
    prog = _STAGED.get(key)
    if prog is None:
        t0 = time.perf_counter()
        g = m.build_graph(mode)
        built = time.perf_counter() - t0
        prog = _STAGED[key] = compile_staged(g, backend, opts, comm)
        record_build(prog, built)
    return prog.with_comm(comm)


def _local(model: Any, weights: Any, world: int, rank: int, comm: Communicator, backend: str,
           search: SearchOptions | None, shards: bool) -> RankPrograms:
    shard = shard_model(model, world, rank)
    w = shard.model.check_weights(weights) if shards else shard.shard_weights(weights)
    prefill = compile_shard(shard, "prefill", backend, search, comm).persist(w)
    decode = compile_shard(shard, "decode", backend, search, comm).persist(w)
    return RankPrograms(shard.model, w, prefill, decode)


def start_rank(model: Any, weights: Any, backend: str, search: SearchOptions | None, *, tp: int | Rank
               ) -> RankPrograms:
    """This process's programs as a rank: rank 0 of ``tp`` ranks (it starts and leads the others:
    ``group``), or the ``Rank`` of a group started elsewhere.  A ``Generator``'s ``programs``."""
    why = backend_refusal(backend)
    if why:
        raise UnsupportedError(why)
    if isinstance(tp, Rank):
        return _local(model, weights, tp.comm.world, tp.comm.rank, tp.comm, backend, search, tp.weights_are_shards)
    group = TensorParallelGroup(model, weights, tp, backend, search)
    return dataclasses.replace(group.local, group=group)


def tensor_parallel_generator(model: Any, weights: Any, tp: int, *, backend: str = "cpu",
                              search: SearchOptions | None = None) -> Generator:
    """A :class:`~lightspeed.models.generate.Generator` of ``model`` split over ``tp`` ranks: this
    process is rank 0 and starts ranks 1..tp-1 (``Generator.close`` stops them); ``tp=1`` is the
    one-process Generator.  Refused (naming why) before any process starts when the backend or the
    model's dims do not allow it."""
    if tp == 1:
        return Generator(model, weights, backend=backend, search=search)
    return Generator(model, weights, backend=backend, search=search, programs=partial(start_rank, tp=tp))


def _worker(rank: int, world: int, port: int, cls: type, config: Any, dtype: str, weights: dict, backend: str,
            search: SearchOptions | None, conn: Any, timeout_s: float) -> None:
    """A rank > 0: build, compile, say ready, then run each ``generate`` rank 0 asks for."""
    from ..search import session

    # Ctrl-C on a terminal reaches every process of the group: rank 0 handles it and stops the others
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if backend == "cuda":  # one GPU per rank (never run: no multi-GPU host; docs/status.md)
            os.environ.setdefault("CUDA_VISIBLE_DEVICES", str(rank))
        # imported and unpickled: rank 0 joins the rendezvous only now, so a rank that cannot
        # even start is reported instead of leaving rank 0 waiting for it
        conn.send(("started", None))
        comm = TorchCommunicator(rank, world, port, timeout_s=timeout_s)
        with session(say=lambda msg: None):  # rank 0 alone reports compile progress
            gen = Generator(cls(config, dtype), weights, backend=backend, search=search,
                            programs=partial(start_rank, tp=Rank(comm, True)))
        del weights
        conn.send(("ready", None))
    except BaseException:  # noqa: BLE001 - reported to rank 0, which raises it
        conn.send(("error", traceback.format_exc()))
        return
    while True:
        try:
            cmd, kwargs = conn.recv()
        except (EOFError, OSError):  # rank 0 is gone
            return
        if cmd == "stop":
            return
        try:
            res = gen.generate(**kwargs)
            conn.send(("done", res.new_ids))
        except BaseException:  # noqa: BLE001 - rank 0 raises it (and stops the group)
            conn.send(("error", traceback.format_exc()))


def _shutdown(procs: list[Any], conns: list[Any], comm: Communicator) -> None:
    for c in conns:
        try:
            c.send(("stop", None))
        except (OSError, ValueError):
            pass
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.terminate()
            p.join(timeout=5)
    for c in conns:
        c.close()
    comm.close()


class TensorParallelGroup:
    """Rank 0 of ``world`` ranks of ``model``: starts the other ranks and leads them (module
    docstring).  ``local``: rank 0's programs (``RankPrograms``, without the group)."""

    def __init__(self, model: Any, weights: Any, world: int, backend: str = "cpu",
                 search: SearchOptions | None = None, timeout_s: float = TIMEOUT_S) -> None:
        check_tp(model, world)
        self.world, self.timeout_s = world, timeout_s
        full = model.check_weights(weights)
        port = free_port()
        ctx = mp.get_context("spawn")
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        self.comm: Communicator | None = None
        try:
            for r in range(1, world):
                mine, theirs = ctx.Pipe()
                shard = shard_model(model, world, r).shard_weights(full)
                p = ctx.Process(target=_worker, name=f"lightspeed-tp-rank{r}", daemon=True,
                                args=(r, world, port, type(model), model.config, model.dtype.name, shard, backend,
                                      search, theirs, timeout_s))
                p.start()
                theirs.close()
                self.procs.append(p)
                self.conns.append(mine)
            self._replies("started")
            self.comm = TorchCommunicator(0, world, port, timeout_s=timeout_s)
            self.local = _local(model, full, world, 0, self.comm, backend, search, False)
            self._replies("ready")
        except BaseException:
            _shutdown(self.procs, self.conns, self.comm or Communicator())
            raise
        self._pending = False
        self._finalizer = weakref.finalize(self, _shutdown, self.procs, self.conns, self.comm)

    def _replies(self, want: str) -> list[Any]:
        """Each other rank's ``want`` message; raises when one reports an error, exits or is silent
        for ``timeout_s``."""
        out = []
        for r, (c, p) in enumerate(zip(self.conns, self.procs), 1):
            deadline = time.monotonic() + self.timeout_s
            while not c.poll(0.05):  # short polls, so a rank that died is noticed at once
                if not p.is_alive() and not c.poll(0):
                    raise LightspeedError(f"tensor parallel: rank {r} exited (status {p.exitcode}) before "
                                          f"saying {want!r}")
                if time.monotonic() > deadline:
                    raise LightspeedError(f"tensor parallel: rank {r} did not say {want!r} within "
                                          f"{self.timeout_s:.0f} s")
            try:
                kind, value = c.recv()
            except EOFError:
                raise LightspeedError(f"tensor parallel: rank {r} exited") from None
            if kind != want:
                raise LightspeedError(f"tensor parallel: rank {r} failed:\n{value}" if kind == "error" else
                                      f"tensor parallel: rank {r} said {kind!r}, expected {want!r}")
            out.append(value)
        return out

    def follow(self, **kwargs: Any) -> None:
        """Ask every other rank to run ``Generator.generate(**kwargs)`` with this rank."""
        if not self._finalizer.alive:
            raise LightspeedError("tensor parallel: the ranks were stopped (close(), or an earlier failure)")
        if self._pending:  # the last request ended in an error on this rank: the ranks are out of step
            self.close()
            raise LightspeedError("tensor parallel: a generate failed midway on rank 0, so the ranks were "
                                  "stopped; make a new Generator")
        for c in self.conns:
            c.send(("generate", kwargs))
        self._pending = True

    def finish(self) -> list[list[int]]:
        """Every other rank's new tokens from the last ``follow`` (errors raise here)."""
        try:
            return self._replies("done")
        except BaseException:
            self.close()
            raise
        finally:
            self._pending = False

    def close(self) -> None:
        """Stop the other ranks (joined; terminated when they do not stop in time, or at once when
        a request is still running: they wait in a collective, not on their pipe)."""
        if self._pending:
            for p in self.procs:
                p.terminate()
        self._finalizer()
