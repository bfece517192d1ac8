"""GGML blocks of a GGUF file's quantised matrices, kept beside or instead of their float32 values.

A GGUF file stores most matrices as blocks (Q8_0, Q4_0, Q4_1, Q5_0: 32 weights per block, a
float16 scale, and 8-, 5- or 4-bit integers; Q4_K, Q6_K: 256 weights with sub-block scales).
:func:`lightspeed.weights.load` dequantises every tensor to float32 (what every backend computes
with) and remembers these matrices' blocks beside the array (:func:`attach`); ``load(lazy=True)``
keeps only the blocks (:class:`QuantTensor`).  A backend with kernels that read blocks (the
`native` backend's quantised matmuls and gathers) asks :func:`blocks_of` when the weight is made
resident, and then reads a quarter to a third of the bytes.  The weights are the same values the
float32 array holds (docs/kernels.md).

The association lives in a registry keyed by the array object (a weak reference: it ends with
the array), so it survives the checks that pass an array on unchanged, and is lost, safely,
whenever an array is converted or copied (then the float32 path is taken).
"""

from __future__ import annotations

import weakref

import numpy as np

__all__ = ["Blocks", "BLOCK_BYTES", "QK", "QuantTensor", "attach", "blocks_of", "random_quant"]

QK = 32  # weights per block (per sub-block of a K-quant's 256)
# bytes per block: a float16 scale (+ float16 min), then the integers; K-quants: 256-weight blocks
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20, "q5_0": 22, "q4_k": 144, "q6_k": 210}
BLOCK_WEIGHTS = {"q4_k": 256, "q6_k": 256}  # others: QK
REPACKED = ("q8_0", "q4_0", "q4_1")  # kept with their scales side by side; the others as GGUF has them


class Blocks:
    """The blocks of a [rows, cols] matrix, given as GGUF stores them: ``data`` is uint8 [rows,
    cols // 32 * BLOCK_BYTES[qtype]], row r holding the blocks of row r of the matrix in order.
    Kept only in the packed layout the block kernels read (:attr:`packed`); ``data`` is rebuilt
    from it when asked."""

    def __init__(self, qtype: str, data: np.ndarray):
        if qtype not in BLOCK_BYTES:
            raise ValueError(f"unknown block type {qtype!r} (known: {sorted(BLOCK_BYTES)})")
        if data.dtype != np.uint8 or data.ndim != 2 or not data.flags.c_contiguous:
            raise ValueError(f"blocks must be a C-contiguous 2-D uint8 array, got {data.dtype} {data.shape}")
        if data.shape[1] % BLOCK_BYTES[qtype]:
            raise ValueError(f"{qtype} rows of {data.shape[1]} bytes are not whole blocks")
        self.qtype = qtype
        self.shape = data.shape
        self._wide: Blocks | None = None
        # columns of the float matrix these blocks hold
        self.cols = data.shape[1] // BLOCK_BYTES[qtype] * BLOCK_WEIGHTS.get(qtype, QK)
        if qtype not in REPACKED:
            self.packed = data
            return
        rows, nbytes = data.shape[0], BLOCK_BYTES[qtype]
        nb = data.shape[1] // nbytes
        blocks = data.reshape(rows, nb, nbytes)
        self._heads = 4 if qtype == "q4_1" else 2
        # the same bytes per row: the row's float16 scales d side by side, then (q4_1) its float16
        # mins, then each block's integers in order (8 scales convert at once in the kernels);
        # written in place (no intermediate copies: Gemma's table is 168 MB)
        self.packed = np.empty(data.shape, np.uint8)
        for h in range(0, self._heads, 2):
            self.packed[:, h * nb:(h + 2) * nb].reshape(rows, nb, 2)[...] = blocks[:, :, h:h + 2]
        self.packed[:, self._heads * nb:].reshape(rows, nb, nbytes - self._heads)[...] = blocks[:, :, self._heads:]

    @property
    def data(self) -> np.ndarray:
        """The blocks in GGUF's layout (made from :attr:`packed` on each call)."""
        if self.qtype not in REPACKED:
            return self.packed
        rows, nbytes = self.shape[0], BLOCK_BYTES[self.qtype]
        nb = self.shape[1] // nbytes
        out = np.empty((rows, nb, nbytes), np.uint8)
        for h in range(0, self._heads, 2):  # d (and m): nb float16s each, side by side
            out[:, :, h:h + 2] = self.packed[:, h * nb:(h + 2) * nb].reshape(rows, nb, 2)
        out[:, :, self._heads:] = self.packed[:, self._heads * nb:].reshape(rows, nb, -1)
        return out.reshape(self.shape)

    def widened(self) -> Blocks:
        """These weights as 8-bit blocks when that is exact and cheaper to compute with: a Q5_0
        block (float16 d, 5-bit u, value d * (u - 16)) is the Q8_0 block (d, q = u - 16) of the
        same values, 34 bytes instead of 22, whose dot products need no bit expansion (on the
        2-core VM the Q5_0 kernel ran at ~10 GB/s, the Q8_0 one at the memory's ~30).  Others:
        themselves.  Made once."""
        if self.qtype != "q5_0":
            return self
        if self._wide is None:
            blocks = self.packed.reshape(self.shape[0], -1, 22)
            qh = blocks[:, :, 2:6].copy().view("<u4")  # [rows, nb, 1]: bit t is weight t's fifth bit
            nib = blocks[:, :, 6:]
            u = np.concatenate([nib & 15, nib >> 4], axis=2)  # weights 0-15, then 16-31
            u |= (((qh >> np.arange(32, dtype=np.uint32)) & 1) << 4).astype(np.uint8)
            out = np.empty((*blocks.shape[:2], 34), np.uint8)
            out[:, :, :2] = blocks[:, :, :2]
            out[:, :, 2:] = (u.astype(np.int16) - 16).astype(np.int8).view(np.uint8)
            self._wide = Blocks("q8_0", out.reshape(self.shape[0], -1))
        return self._wide

    def matches(self, shape: tuple[int, ...]) -> bool:
        """Whether these are the blocks of a float matrix of ``shape``."""
        return len(shape) == 2 and shape[0] == self.shape[0] and shape[1] == self.cols


class QuantTensor:
    """A float32 matrix held as its GGML blocks only (``load(..., lazy=True)``): what a backend with
    block kernels reads without ever making the float32 array.  Anything else that asks for the
    values (``np.asarray``, a backend without block kernels, an op other than a block matmul) gets
    them dequantised once, then kept (and carrying the blocks, :func:`blocks_of`)."""

    def __init__(self, blocks: Blocks):
        self.blocks = blocks
        self.shape = (blocks.shape[0], blocks.cols)
        self.dtype = np.dtype(np.float32)
        self._dense: np.ndarray | None = None

    ndim = 2

    @property
    def qtype(self) -> str:
        """The block type (a ``lightspeed.BLOCK_DTYPES`` name): what a graph input declares."""
        return self.blocks.qtype

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    @property
    def nbytes(self) -> int:  # of the float32 values it stands for
        return self.size * 4

    @property
    def is_dense(self) -> bool:
        """Whether the float32 values have been made."""
        return self._dense is not None

    def dense(self) -> np.ndarray:
        """The float32 matrix (made on first use: gguf's dequantisation of the blocks)."""
        if self._dense is None:
            from gguf import GGMLQuantizationType
            from gguf.quants import dequantize

            qt = getattr(GGMLQuantizationType, self.blocks.qtype.upper())
            values = dequantize(self.blocks.data, qt).astype(np.float32, copy=False).reshape(self.shape)
            self._dense = attach(np.ascontiguousarray(values), self.blocks)
        return self._dense

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        d = self.dense()
        return d if dtype is None or np.dtype(dtype) == d.dtype else d.astype(dtype)

    def copy(self) -> np.ndarray:
        return self.dense().copy()

    def __repr__(self) -> str:
        return f"QuantTensor({self.blocks.qtype}, shape={self.shape}{', dense' if self.is_dense else ''})"


def random_quant(qtype: str, shape: tuple[int, ...], seed: int) -> QuantTensor:
    """Random ``qtype`` blocks of a [rows, cols] matrix (the search's profiling values): every byte
    below 0x3C, so each float16 scale, wherever a type keeps it, is finite and below 1."""
    rows, cols = shape
    nbytes = cols // BLOCK_WEIGHTS.get(qtype, QK) * BLOCK_BYTES[qtype]
    data = np.random.default_rng([seed, rows, cols]).integers(0, 0x3C, (rows, nbytes), np.uint8)
    return QuantTensor(Blocks(qtype, data))


_registry: dict[int, tuple[weakref.ref, Blocks]] = {}


def attach(array: np.ndarray, blocks: Blocks) -> np.ndarray:
    """Remember that float32 ``array`` holds exactly the weights of ``blocks``; returns ``array``."""
    if not blocks.matches(tuple(array.shape)):
        raise ValueError(f"{blocks.qtype} blocks {blocks.shape} do not hold a {array.shape} matrix")
    key = id(array)
    _registry[key] = (weakref.ref(array, lambda _, key=key: _registry.pop(key, None)), blocks)
    return array


def blocks_of(array: object) -> Blocks | None:
    """The blocks ``array`` was dequantised from, if it is that very array (not a copy or a view),
    or a :class:`QuantTensor`'s."""
    if isinstance(array, QuantTensor):
        return array.blocks
    entry = _registry.get(id(array))
    if entry is None or entry[0]() is not array:
        return None
    return entry[1]
