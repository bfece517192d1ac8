"""GGML blocks kept beside the float32 weights dequantised from them.

A GGUF file stores most matrices as blocks (Q8_0, Q4_0, Q4_1: 32 weights per block, a float16
scale, and 8- or 4-bit integers).  :func:`lightspeed.weights.load` dequantises every tensor to
float32 (what every backend computes with) and, for these three formats, remembers the file's
blocks beside the array (:func:`attach`).  A backend with kernels that read blocks (the `native`
backend's quantised matmuls) asks :func:`blocks_of` when the weight is made resident, and then
reads 1/4.7 (Q4_1) to 1/3.8 (Q8_0) of the bytes.  The values are the same: a block's weight is
``d * q (+ m)``, whose product is exact in float32 (an 11-bit scale times an integer of at most 8
bits), so a kernel that dequantises in registers sees exactly the float32 weights the other
backends read.

The association lives in a registry keyed by the array object (a weak reference: it ends with
the array), so it survives the checks that pass an array on unchanged, and is lost, safely,
whenever an array is converted or copied (then the float32 path is taken).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from functools import cached_property

import numpy as np

__all__ = ["Blocks", "BLOCK_BYTES", "QK", "attach", "blocks_of"]

QK = 32  # weights per block
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20}  # float16 scale (+ float16 min), then the integers


@dataclass(frozen=True)
class Blocks:
    """The blocks of a [rows, cols] matrix: ``data`` is uint8 [rows, cols // 32 * BLOCK_BYTES[qtype]],
    row r holding the blocks of row r of the matrix in order."""

    qtype: str
    data: np.ndarray

    def __post_init__(self) -> None:
        if self.qtype not in BLOCK_BYTES:
            raise ValueError(f"unknown block type {self.qtype!r} (known: {sorted(BLOCK_BYTES)})")
        if self.data.dtype != np.uint8 or self.data.ndim != 2 or not self.data.flags.c_contiguous:
            raise ValueError(f"blocks must be a C-contiguous 2-D uint8 array, got {self.data.dtype} "
                             f"{self.data.shape}")
        if self.data.shape[1] % BLOCK_BYTES[self.qtype]:
            raise ValueError(f"{self.qtype} rows of {self.data.shape[1]} bytes are not whole blocks")

    @cached_property
    def packed(self) -> np.ndarray:
        """The same bytes per row in the layout the block kernels read: the row's float16 scales
        d side by side, then (q4_1) its float16 mins, then each block's integers in order (so 8
        scales convert at once and two blocks' nibbles are one 32-byte load).  Made once."""
        rows, nbytes = self.data.shape[0], BLOCK_BYTES[self.qtype]
        blocks = self.data.reshape(rows, -1, nbytes)
        heads = 4 if self.qtype == "q4_1" else 2
        parts = [blocks[:, :, h:h + 2].reshape(rows, -1) for h in range(0, heads, 2)]
        return np.ascontiguousarray(np.concatenate([*parts, blocks[:, :, heads:].reshape(rows, -1)], axis=1))

    def matches(self, shape: tuple[int, ...]) -> bool:
        """Whether these are the blocks of a float matrix of ``shape``."""
        return (len(shape) == 2 and shape[0] == self.data.shape[0]
                and shape[1] == self.data.shape[1] // BLOCK_BYTES[self.qtype] * QK)


_registry: dict[int, tuple[weakref.ref, Blocks]] = {}


def attach(array: np.ndarray, blocks: Blocks) -> np.ndarray:
    """Remember that float32 ``array`` holds exactly the weights of ``blocks``; returns ``array``."""
    if not blocks.matches(tuple(array.shape)):
        raise ValueError(f"{blocks.qtype} blocks {blocks.data.shape} do not hold a {array.shape} matrix")
    key = id(array)
    _registry[key] = (weakref.ref(array, lambda _, key=key: _registry.pop(key, None)), blocks)
    return array


def blocks_of(array: object) -> Blocks | None:
    """The blocks ``array`` was dequantised from, if it is that very array (not a copy or a view)."""
    entry = _registry.get(id(array))
    if entry is None or entry[0]() is not array:
        return None
    return entry[1]
