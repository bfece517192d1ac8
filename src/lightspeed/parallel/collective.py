"""The collective op: how a sharded graph says "combine this value across the ranks".

A collective is not a primitive (the core keeps its 15): :func:`all_reduce` / :func:`all_gather`
end the value's life in the graph as an output ``@collective.{k}.send`` and start the combined
value as a new input ``@collective.{k}.recv`` of the combined shape, and record a
:class:`Collective` for the graph (:func:`collectives_of`).  :mod:`lightspeed.parallel.stages`
cuts the graph there: each stage between collectives is compiled through the normal search, and
the collective runs between them on the stage backend's arrays (``Backend.collective``), so it is
an opaque boundary the search never looks across.

A :class:`Communicator` is one rank's handle on the group.  :class:`TorchCommunicator` runs
collectives through torch.distributed's gloo process group on host (numpy) arrays; for device
arrays (the cuda backend's ``DeviceArray``: ``ptr``, ``shape``, ``dtype``) it wraps the memory as a
torch CUDA tensor through ``__cuda_array_interface__`` (no copy) and runs NCCL.  The NCCL path is
written but has never run: it needs a host with two GPUs (docs/status.md, issue 13).
"""

from __future__ import annotations

import datetime
import socket
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import hl  # noqa: F401 - first: in a fresh process (a spawned rank) lightspeed.graph alone is circular
from ..errors import LightspeedError
from ..graph import Graph, GraphTensor
from ..nn import Builder

__all__ = ["Collective", "all_reduce", "all_gather", "collectives_of", "Communicator", "SingleRank",
           "TorchCommunicator", "free_port", "CollectiveError"]

PREFIX = "@collective."
KINDS = ("all_reduce", "all_gather")


class CollectiveError(LightspeedError):
    """A collective failed (a peer died, a timeout, a mismatched group)."""


@dataclass(frozen=True)
class Collective:
    """One collective of a graph: ``kind`` 'all_reduce' (sum) or 'all_gather' (each rank's piece
    concatenated along ``axis``; rank r's piece has length ``sizes[r]``, so a vocabulary that the
    ranks do not divide evenly still gathers)."""

    index: int
    kind: str
    axis: int = -1
    sizes: tuple[int, ...] = ()

    @property
    def send(self) -> str:  # the graph output holding this rank's operand
        return f"{PREFIX}{self.index}.send"

    @property
    def recv(self) -> str:  # the graph input holding the combined value
        return f"{PREFIX}{self.index}.recv"


# graph -> its collectives, in creation order; weak, so a dropped graph takes its table with it
_TABLES: weakref.WeakKeyDictionary[Graph, list[Collective]] = weakref.WeakKeyDictionary()


def collectives_of(graph: Graph) -> list[Collective]:
    """The collectives recorded for ``graph`` (empty for an unsharded graph)."""
    return list(_TABLES.get(graph, ()))


def _emit(b: Builder, x: GraphTensor, kind: str, axis: int, sizes: tuple[int, ...]) -> GraphTensor:
    g = b.graph
    table = _TABLES.setdefault(g, [])
    spec = Collective(len(table), kind, axis, sizes)
    shape = list(x.shape)
    if kind == "all_gather":
        shape[axis] = sum(sizes)
    g.output(spec.send, x)
    table.append(spec)
    return g.input(spec.recv, tuple(shape), x.dtype)


def all_reduce(b: Builder, x: GraphTensor) -> GraphTensor:
    """The sum of ``x`` over the ranks (after a row-parallel product: each rank holds a partial sum)."""
    return _emit(b, x, "all_reduce", -1, ())


def all_gather(b: Builder, x: GraphTensor, axis: int, sizes: Sequence[int]) -> GraphTensor:
    """The ranks' pieces of a tensor concatenated along ``axis`` (``sizes``: each rank's length)."""
    axis = axis % x.ndim
    return _emit(b, x, "all_gather", axis, tuple(int(s) for s in sizes))


# ---------------------------------------------------------------------- communicators
class Communicator:
    """One rank's view of its group: ``rank``, ``world`` and the two collectives on arrays."""

    rank: int = 0
    world: int = 1

    def run(self, spec: Collective, array: Any) -> Any:
        """The combined value of ``array`` (a host or device array of this rank) under ``spec``."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class SingleRank(Communicator):
    """A group of one: every collective is the identity (a sharded graph at world size 1)."""

    def run(self, spec: Collective, array: Any) -> Any:
        return array


def free_port() -> int:
    """A TCP port on localhost that nothing listens on now (for the rendezvous store)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TorchCommunicator(Communicator):
    """torch.distributed process groups built directly on a TCP store (no global default group,
    so one process may hold several and tests may make and drop them): gloo for host arrays,
    NCCL (made on first use) for device arrays.  ``timeout_s`` bounds every collective, so a rank
    that died never leaves the others waiting forever."""

    def __init__(self, rank: int, world: int, port: int, host: str = "127.0.0.1", timeout_s: float = 120.0) -> None:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_gloo_available():
            raise CollectiveError("torch.distributed with the gloo backend is not available in this torch build")
        self.rank, self.world = rank, world
        self._timeout = datetime.timedelta(seconds=timeout_s)
        self._store = dist.TCPStore(host, port, world, rank == 0, timeout=self._timeout)
        self._gloo = dist.ProcessGroupGloo(self._store, rank, world, self._timeout)
        self._nccl: Any = None

    def run(self, spec: Collective, array: Any) -> Any:
        try:
            if isinstance(array, np.ndarray):
                return self._host(spec, array)
            return self._device(spec, array)
        except RuntimeError as e:  # gloo reports a dead peer or a timeout as a RuntimeError
            raise CollectiveError(f"rank {self.rank}: {spec.kind} #{spec.index} failed: {e}") from e

    def _host(self, spec: Collective, array: np.ndarray) -> np.ndarray:
        import torch

        a = np.ascontiguousarray(array)
        if a.dtype.kind == "V" or a.dtype.name == "bfloat16":  # torch has no numpy bfloat16: go through bits
            raise CollectiveError(f"{spec.kind}: host collectives support numpy dtypes, not {a.dtype} "
                                  "(run tensor parallel in float32)")
        if spec.kind == "all_reduce":
            # gathered, then summed in rank order on every rank: every rank gets the same bits, so
            # what the ranks compute from the sum on their own (MoE routing, sampling) never diverges
            t = torch.from_numpy(a)
            pieces = [torch.empty_like(t) for _ in range(self.world)]
            self._gloo.allgather([pieces], [t]).wait()
            out = pieces[0].numpy()
            for p in pieces[1:]:
                out += p.numpy()
            return out
        return self._gather(spec, torch.from_numpy(a), lambda t: t.numpy(), torch)

    def _gather(self, spec: Collective, piece: Any, back: Any, torch: Any) -> Any:
        # gloo gathers equal pieces: pad each to the longest, concatenate the real lengths
        axis, longest = spec.axis, max(spec.sizes)
        pad = [0, 0] * piece.ndim
        pad[2 * (piece.ndim - 1 - axis) + 1] = longest - piece.shape[axis]
        padded = torch.nn.functional.pad(piece, pad).contiguous()
        pieces = [torch.empty_like(padded) for _ in range(self.world)]
        group = self._gloo if piece.device.type == "cpu" else self._nccl
        group.allgather([pieces], [padded]).wait()
        return back(torch.cat([p.narrow(axis, 0, n) for p, n in zip(pieces, spec.sizes)], axis))

    def _device(self, spec: Collective, array: Any) -> Any:
        """NCCL on a device array (``ptr``/``shape``/``dtype``), written for the cuda backend and
        never run (no multi-GPU host was available; see docs/status.md)."""
        import torch
        import torch.distributed as dist

        if self._nccl is None:
            opts = dist.ProcessGroupNCCL.Options()
            self._nccl = dist.ProcessGroupNCCL(self._store, self.rank, self.world, opts)
        from ..backends.cuda import driver

        # the programs run on non-blocking streams: finish them before NCCL reads the memory
        driver.check(driver.bindings().cuCtxSynchronize(), "cuCtxSynchronize")
        t = torch.as_tensor(_CudaView(array), device="cuda")
        if spec.kind == "all_reduce":
            out = driver.DeviceArray.empty(array.shape, array.dtype)
            o = torch.as_tensor(_CudaView(out), device="cuda")
            o.copy_(t)
            self._nccl.allreduce([o]).wait()
            torch.cuda.synchronize()
            return out
        gathered = self._gather(spec, t, lambda x: x, torch)
        torch.cuda.synchronize()
        return driver.DeviceArray(gathered.data_ptr(), tuple(gathered.shape), array.dtype, gathered)

    def close(self) -> None:
        self._gloo = self._nccl = self._store = None


class _CudaView:
    """``__cuda_array_interface__`` of a row-major device array, so torch wraps it without a copy."""

    def __init__(self, array: Any) -> None:
        self.__cuda_array_interface__ = {"shape": tuple(array.shape), "typestr": np.dtype(array.dtype).str,
                                         "data": (int(array.ptr), False), "version": 3, "strides": None}
