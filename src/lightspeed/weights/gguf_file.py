"""Reading GGUF files: metadata, the tensor table, and tensors dequantised to float32.

The header is parsed here with `struct` rather than with `gguf.GGUFReader`: the reader builds one
numpy view per array element, which takes ~20 s for Gemma 3's 262k-token vocabulary (three arrays of
262k entries), against ~0.3 s here. Everything else comes from the `gguf` package: the type enums,
the block sizes and the dequantisation kernels (`gguf.quants.dequantize`). `tests/weights` checks this
parser against `GGUFReader` and the kernels against an independent numpy implementation.
"""

from __future__ import annotations

import math
import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType
from gguf.quants import dequantize

from .errors import WeightError

__all__ = ["GGUFFile", "GGUFTensorInfo", "SUPPORTED_TYPES"]

_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32
# ggml's limit on tensor rank (GGML_MAX_DIMS); llama.cpp's gguf reader refuses more
_MAX_DIMS = 4
# the smallest encodings, used to bound counts by the bytes left before anything is allocated:
# a key/value is a string length (8), a type (4) and at least one byte of value; a tensor-table entry
# is a name length (8), n_dims (4), a type (4) and an offset (8)
_MIN_KV_BYTES = 13
_MIN_TENSOR_BYTES = 24

# The storage types lightspeed dequantises; each one is tested against a hand computation.
SUPPORTED_TYPES = frozenset(
    GGMLQuantizationType[n]
    for n in ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K")
)

_SCALAR_FORMATS = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H", GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i", GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q", GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}
_NUMPY_TYPES = {
    GGUFValueType.UINT8: "<u1", GGUFValueType.INT8: "<i1", GGUFValueType.UINT16: "<u2", GGUFValueType.INT16: "<i2",
    GGUFValueType.UINT32: "<u4", GGUFValueType.INT32: "<i4", GGUFValueType.FLOAT32: "<f4", GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "<u8", GGUFValueType.INT64: "<i8", GGUFValueType.FLOAT64: "<f8",
}


@dataclass(frozen=True)
class GGUFTensorInfo:
    """One entry of the tensor table. `shape` is in numpy order (GGUF lists dims fastest-first)."""

    name: str
    shape: tuple[int, ...]
    qtype: GGMLQuantizationType
    offset: int  # absolute byte offset in the file
    nbytes: int


class _Truncated(Exception):
    """The header ends before a value it declares (internal; becomes a WeightError)."""


class _Cursor:
    """Sequential little-endian reads from a buffer, raising _Truncated at the end."""

    def __init__(self, buf: Any):
        self.buf = buf
        self.pos = 0
        self.size = len(buf)

    def take(self, n: int) -> int:
        if n < 0 or self.pos + n > self.size:
            raise _Truncated
        start = self.pos
        self.pos += n
        return start

    def scalar(self, fmt: str) -> Any:
        start = self.take(struct.calcsize(fmt))
        return struct.unpack_from(fmt, self.buf, start)[0]

    def left(self) -> int:
        return self.size - self.pos

    def string(self) -> str:
        n = self.scalar("<Q")
        start = self.take(n)  # checks n against the bytes left before copying anything
        return bytes(self.buf[start:start + n]).decode("utf-8")

    def strings(self, count: int) -> list[str]:
        """``count`` strings, as ``string()`` reads them (the same checks), without its per-call cost."""
        buf, pos, size, out = self.buf, self.pos, self.size, []
        length = struct.Struct("<Q").unpack_from
        for _ in range(count):
            if pos + 8 > size:
                raise _Truncated
            n = length(buf, pos)[0]
            pos += 8
            if pos + n > size:
                raise _Truncated
            out.append(bytes(buf[pos:pos + n]).decode("utf-8"))
            pos += n
        self.pos = pos
        return out


class _Corrupt(Exception):
    """A header value that cannot be right (internal; becomes a WeightError naming where it was read)."""


class GGUFFile:
    """A memory-mapped GGUF file: `metadata` (key -> value) and `tensors` (name -> GGUFTensorInfo).

    Metadata values are Python scalars and strings; arrays of numbers are numpy arrays and arrays of
    strings are lists. Use as a context manager, or call `close()`, to release the mapping."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                if os.fstat(f.fileno()).st_size == 0:
                    raise WeightError(f"{self.path}: empty file, not a GGUF file")
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as e:
            raise WeightError(f"{self.path}: cannot read: {e}") from e
        try:
            self.metadata, self.tensors, self.data_offset = self._parse()
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        mm = getattr(self, "_mm", None)
        if mm is not None and not mm.closed:
            try:
                mm.close()
            except BufferError:  # an array still views the mapping; it is freed with that array
                pass

    @property
    def architecture(self) -> str:
        arch = self.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise WeightError(f"{self.path}: no general.architecture in the GGUF metadata")
        return arch

    # -- parsing -----------------------------------------------------------------------------------------

    def _parse(self) -> tuple[dict[str, Any], dict[str, GGUFTensorInfo], int]:
        cur = _Cursor(self._mm)
        where = "the header"
        try:
            if bytes(self._mm[:4]) != _MAGIC:
                raise WeightError(f"{self.path}: not a GGUF file (magic {bytes(self._mm[:4])!r}, expected b'GGUF')")
            cur.take(4)
            version = cur.scalar("<I")
            if version & 0xFFFF == 0:
                raise WeightError(f"{self.path}: big-endian GGUF files are not supported")
            if version not in (2, 3):
                raise WeightError(f"{self.path}: GGUF version {version} is not supported (2 and 3 are)")
            n_tensors = cur.scalar("<Q")
            n_kv = cur.scalar("<Q")
            # counts are checked against the file's size before any loop or allocation uses them
            if n_kv * _MIN_KV_BYTES > cur.left():
                raise _Truncated(f"{n_kv} key/values need at least {n_kv * _MIN_KV_BYTES} bytes, {cur.left()} are left")
            if n_tensors * _MIN_TENSOR_BYTES > cur.left():
                raise _Truncated(f"{n_tensors} tensor entries need at least {n_tensors * _MIN_TENSOR_BYTES} bytes, "
                                 f"{cur.left()} are left")
            metadata: dict[str, Any] = {}
            for i in range(n_kv):
                where = f"metadata entry {i}"
                key = cur.string()
                where = f"metadata key {key!r}"
                if key in metadata:
                    raise _Corrupt("a duplicate key")
                metadata[key] = self._value(cur, cur.scalar("<I"), key)
            where = "the tensor table"
            if n_tensors * _MIN_TENSOR_BYTES > cur.left():
                raise _Truncated(f"{n_tensors} tensor entries need at least {n_tensors * _MIN_TENSOR_BYTES} bytes, "
                                 f"{cur.left()} are left")
            infos = []
            for i in range(n_tensors):
                where = f"the tensor table (entry {i})"
                name = cur.string()
                where = f"the tensor table (tensor {name!r})"
                n_dims = cur.scalar("<I")
                if n_dims > _MAX_DIMS:
                    raise _Corrupt(f"{n_dims} dims (at most {_MAX_DIMS})")
                dims = [cur.scalar("<Q") for _ in range(n_dims)]
                raw_type = cur.scalar("<I")
                offset = cur.scalar("<Q")
                infos.append((name, dims, raw_type, offset))
        except _Truncated as e:
            detail = f": {e}" if str(e) else ""
            raise WeightError(f"{self.path}: truncated GGUF file (it ends inside {where}{detail})") from None
        except _Corrupt as e:
            raise WeightError(f"{self.path}: corrupt GGUF file: {where}: {e}") from None
        except UnicodeDecodeError as e:
            raise WeightError(f"{self.path}: invalid UTF-8 in {where}: {e}") from None

        alignment = metadata.get("general.alignment", _DEFAULT_ALIGNMENT)
        # llama.cpp stores it as a uint32; a bool or a string is as wrong as a non-power of two
        if type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1):
            raise WeightError(f"{self.path}: invalid general.alignment {alignment!r} (a power of two is needed)")
        data_offset = -(-cur.pos // alignment) * alignment
        size = cur.size
        if data_offset > size and infos:
            raise WeightError(f"{self.path}: truncated GGUF file (the data section would start at byte "
                              f"{data_offset}, the file has {size})")
        tensors: dict[str, GGUFTensorInfo] = {}
        for name, dims, raw_type, offset in infos:
            if name in tensors:
                raise WeightError(f"{self.path}: tensor {name!r} appears twice")
            try:
                qtype = GGMLQuantizationType(raw_type)
            except ValueError:
                raise WeightError(f"{self.path}: tensor {name!r} has unknown quant type {raw_type}") from None
            if qtype not in GGML_QUANT_SIZES:
                raise WeightError(f"{self.path}: tensor {name!r} has quant type {qtype.name} of unknown size")
            block, type_size = GGML_QUANT_SIZES[qtype]
            if dims and dims[0] % block:
                raise WeightError(f"{self.path}: tensor {name!r} ({qtype.name}) has a row of {dims[0]} elements, "
                                  f"not a multiple of the block size {block}")
            # Python ints: huge dims cannot wrap around to a small, plausible byte count
            count = math.prod(dims)
            if count >= 1 << 63:
                raise WeightError(f"{self.path}: tensor {name!r} has dims {dims} with more than 2^63 elements")
            nbytes = count // block * type_size
            if offset % alignment:
                raise WeightError(f"{self.path}: tensor {name!r} has offset {offset}, not a multiple of the "
                                  f"alignment {alignment}")
            start = data_offset + offset
            if start + nbytes > size:
                raise WeightError(f"{self.path}: tensor {name!r} needs bytes {start}..{start + nbytes} but the file "
                                  f"has {size} bytes (truncated file?)")
            tensors[name] = GGUFTensorInfo(name, tuple(int(d) for d in reversed(dims)), qtype, start, nbytes)
        # As llama.cpp's reader (gguf.cpp) requires: tensors lie back to back in table order, each padded to
        # the alignment, so none overlaps another and a changed type or dim cannot silently shift the data
        # of the next one. The file ends with the last tensor (its padding is optional), so the last
        # one cannot shrink unnoticed either.
        expected = 0
        for t in tensors.values():
            if t.offset - data_offset != expected:
                how = "overlaps the tensor before it" if t.offset - data_offset < expected else "leaves a gap"
                raise WeightError(f"{self.path}: tensor {t.name!r} has offset {t.offset - data_offset}, expected "
                                  f"{expected} ({how}; tensors must follow each other in table order)")
            end = expected + t.nbytes
            expected = -(-end // alignment) * alignment
        if tensors and not data_offset + end <= size <= data_offset + expected:
            raise WeightError(f"{self.path}: the file has {size - data_offset - end} bytes after the last tensor's "
                              f"data (corrupt tensor table?)")
        return metadata, tensors, data_offset

    def _value(self, cur: _Cursor, raw_type: int, key: str, in_array: bool = False) -> Any:
        try:
            vtype = GGUFValueType(raw_type)
        except ValueError:
            raise WeightError(f"{self.path}: metadata key {key!r} has unknown value type {raw_type}") from None
        if in_array and vtype == GGUFValueType.ARRAY:
            # llama.cpp's reader refuses nested arrays too; refusing them also bounds the recursion
            raise WeightError(f"{self.path}: metadata key {key!r} is an array of arrays (not supported)")
        if vtype == GGUFValueType.STRING:
            return cur.string()
        if vtype == GGUFValueType.FLOAT32:
            # The shortest decimal that rounds to this float32, so 1e-5 reads back as 1e-05 and not
            # 9.999999747378752e-06 (configs are compared and printed as text).
            return float(str(np.float32(cur.scalar("<f"))))
        if vtype in _SCALAR_FORMATS:
            return cur.scalar(_SCALAR_FORMATS[vtype])
        if vtype == GGUFValueType.ARRAY:
            etype_raw = cur.scalar("<I")
            count = cur.scalar("<Q")
            try:
                etype = GGUFValueType(etype_raw)
            except ValueError:
                raise WeightError(f"{self.path}: metadata key {key!r} is an array of unknown type "
                                  f"{etype_raw}") from None
            if etype in _NUMPY_TYPES:
                dt = np.dtype(_NUMPY_TYPES[etype])
                start = cur.take(count * dt.itemsize)  # checked against the bytes left before the copy
                return np.frombuffer(self._mm, dtype=dt, count=count, offset=start).copy()
            if count * 8 > cur.left():  # each string has at least its 8-byte length
                raise WeightError(f"{self.path}: corrupt GGUF file: metadata key {key!r} declares {count} strings, "
                                  f"more than the {cur.left()} bytes left can hold")
            if etype == GGUFValueType.STRING:  # a vocabulary: 10^5 strings, read in one tight loop
                return cur.strings(count)
            return [self._value(cur, etype_raw, key, in_array=True) for _ in range(count)]
        raise WeightError(f"{self.path}: metadata key {key!r} has unhandled value type {vtype.name}")

    # -- tensor data -------------------------------------------------------------------------------------

    def check_supported(self) -> None:
        """Raise WeightError naming the first tensor stored in a type lightspeed cannot dequantise."""
        for t in self.tensors.values():
            if t.qtype not in SUPPORTED_TYPES:
                supported = ", ".join(sorted(q.name for q in SUPPORTED_TYPES))
                raise WeightError(f"{self.path}: tensor {t.name!r} is stored as {t.qtype.name}, which lightspeed "
                                  f"does not dequantise (supported: {supported})")

    def raw(self, name: str) -> np.ndarray:
        """The stored bytes of a tensor (a read-only view of the mapping)."""
        t = self.tensors[name]
        return np.frombuffer(self._mm, dtype=np.uint8, count=t.nbytes, offset=t.offset)

    def release(self, name: str) -> None:
        """Drop tensor ``name``'s mapped pages from the process's resident set (after it has been
        copied out; a later read maps them in again from the file)."""
        t = self.tensors[name]
        start = t.offset - t.offset % mmap.PAGESIZE
        if t.nbytes and hasattr(self._mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
            self._mm.madvise(mmap.MADV_DONTNEED, start, t.offset + t.nbytes - start)

    def read(self, name: str) -> np.ndarray:
        """Tensor `name` as a new float32 array in numpy dim order."""
        t = self.tensors[name]
        if t.qtype not in SUPPORTED_TYPES:
            self.check_supported()
        raw = self.raw(name)
        if t.qtype == GGMLQuantizationType.F32:
            out = raw.view("<f4").astype(np.float32)
        elif t.qtype == GGMLQuantizationType.F16:
            out = raw.view("<f2").astype(np.float32)
        elif t.qtype == GGMLQuantizationType.BF16:
            # bfloat16 is the top half of a float32
            out = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            block, type_size = GGML_QUANT_SIZES[t.qtype]
            # Rows of the tensor's own width: gguf's kernels are ~7x slower on one-block-per-row input.
            row_bytes = (t.shape[-1] if t.shape else 1) // block * type_size
            out = dequantize(raw.reshape(-1, row_bytes), t.qtype).astype(np.float32, copy=False)
        return out.reshape(t.shape)
