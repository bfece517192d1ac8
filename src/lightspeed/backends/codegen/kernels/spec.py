"""What a generated kernel is: its text and how it is launched.

A :class:`KernelSpec` is a function whose text depends only on an op's structure (never on dim
values or on where its buffers live), so one compiled kernel serves every length and every
program that contains the same op.  Its :class:`LaunchShape` says how the GPU runs it: the grid as
expressions of the dims, the block, the dynamic shared memory and the cluster.  The executors
read these fields and nothing else (the host runs a kernel's work items itself: only ``kind``
and the item count matter there).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ....symbolic import Expr, as_expr

__all__ = ["KernelSpec", "LaunchShape", "grid_stride"]

# a grid-stride kernel gets at most this many blocks per multiprocessor: more would only add
# launch work, since its loop covers the rest (and a grid sized at the dims' bounds stays valid)
BLOCKS_PER_SM = 16


@dataclass(frozen=True)
class LaunchShape:
    """How a kernel is launched: ``grid`` (blocks along x, y, z as expressions of the dims,
    evaluated at the dims' bounds when a plan is made), ``block`` (threads along x, y, z),
    ``shared_bytes`` (dynamic shared memory per block), ``cluster`` (blocks per cluster along
    x, y, z: sm_90 thread-block clusters; (1, 1, 1) is none).  ``capped``: the x extent is at most
    :data:`BLOCKS_PER_SM` blocks per multiprocessor (a grid-stride kernel loops over the rest).
    ``kind`` names the work distribution (``elementwise``, ``warp``, ``matmul_tile``, ...): it is
    part of the kernel's name hash and of traces."""

    kind: str
    grid: tuple[Expr, Expr, Expr]
    block: tuple[int, int, int] = (1, 1, 1)
    shared_bytes: int = 0
    cluster: tuple[int, int, int] = (1, 1, 1)
    capped: bool = False

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def grid_at(self, dims: Mapping[str, int], sm_count: int) -> tuple[int, int, int]:
        """The grid for dims ``dims`` (a plan's bounds) on a device of ``sm_count`` multiprocessors;
        every extent at least 1 and a multiple of the cluster's."""
        out = []
        for axis, e in enumerate(self.grid):
            n = max(1, int(e.evaluate(dims)))
            if axis == 0 and self.capped:
                n = min(n, sm_count * BLOCKS_PER_SM)
            c = self.cluster[axis]
            out.append(-(-n // c) * c)
        return out[0], out[1], out[2]


def grid_stride(kind: str, items: Expr, per_block: int, block: tuple[int, int, int]) -> LaunchShape:
    """A one-dimensional grid of blocks taking ``per_block`` work items each, capped (the
    kernel's grid-stride loop covers the work at any dims)."""
    blocks = (as_expr(items) + (per_block - 1)) // per_block
    return LaunchShape(kind, (blocks, as_expr(1), as_expr(1)), block, capped=True)


@dataclass(frozen=True)
class KernelSpec:
    """A generated kernel: its name (a hash of its text and launch kind), its text in one dialect
    (empty for a library call), the dims and buffers it takes in parameter order (``buffers``:
    ``"out"`` for the op's value, an int k for the op's k-th operand), its launch shape, its
    work-item count (an expression of the dims), the prelude parts it needs beyond the dialect's
    own (``preludes``: see :mod:`.source`), for a library call the library's name, and for a
    merged kernel the kernels it runs (``parts``)."""

    name: str
    source: str
    dims: tuple[str, ...]
    buffers: tuple[str | int, ...]
    launch: LaunchShape
    count: Expr
    preludes: tuple[str, ...] = ()
    library: str | None = None
    parts: tuple[KernelSpec, ...] = ()  # a merged kernel's parts (kernels/merge.py), in block order
