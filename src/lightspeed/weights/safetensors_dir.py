"""Reading safetensors files and Hugging Face model directories.

The format is an 8-byte little-endian header length, a JSON header (name -> dtype, shape,
data_offsets) and the raw little-endian data. We parse it directly rather than through the
`safetensors` package so that bfloat16 and float8 (which numpy lacks; ml_dtypes has them) load, and
so that a truncated or inconsistent file names the tensor at fault.
"""

from __future__ import annotations

import json
import math
import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .. import dtypes as ldt
from .errors import WeightError

__all__ = ["read_safetensors", "hf_dir_files", "index_weight_map", "read_json", "parse_json"]

# bfloat16 and float8 as lightspeed dtypes: their numpy types (ml_dtypes, ~1 s to import) are made
# only when a file holds one
_DTYPES: dict[str, Any] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": ldt.bfloat16,
    "F8_E4M3": ldt.float8_e4m3, "F8_E5M2": ldt.float8_e5m2,
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
_FLOATS = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}


# The reference implementation (safetensors' Rust crate) refuses headers over 100 MB.
MAX_HEADER_BYTES = 100_000_000
# A valid header nests three deep (header -> entry -> shape); anything much deeper is not a safetensors
# header, and Python's json module would hit its recursion limit on it instead of failing cleanly.
MAX_JSON_DEPTH = 64


def _too_deep(value: Any, limit: int) -> bool:
    """Whether `value` nests objects/arrays more than `limit` levels (iterative: no recursion limit)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict | list):
            if depth > limit:
                return True
            stack.extend((c, depth + 1) for c in (v.values() if isinstance(v, dict) else v))
    return False


def _no_duplicates(where: str) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                raise WeightError(f"{where}: duplicate key {k!r}")
            out[k] = v
        return out
    return hook


def parse_json(raw: bytes | str, where: str) -> Any:
    """JSON text -> value, refusing duplicate keys and nesting deeper than MAX_JSON_DEPTH (WeightError
    naming `where`)."""
    try:
        # CPython's decoder raises RecursionError (it does not crash) past the interpreter's recursion
        # limit, so parsing first and measuring after is safe and linear
        value = json.loads(raw, object_pairs_hook=_no_duplicates(where))
    except RecursionError:
        raise WeightError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except WeightError:
        raise
    except ValueError as e:  # includes UnicodeDecodeError
        raise WeightError(f"{where}: invalid JSON: {e}") from None
    if _too_deep(value, MAX_JSON_DEPTH):
        raise WeightError(f"{where}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def read_json(path: Path) -> Any:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise WeightError(f"{path}: cannot read JSON: {e}") from e
    return parse_json(raw, f"{path}")


def _index_shards(index: Path, directory: Path) -> dict[str, str]:
    """The weight_map of `index`, each shard a file name inside `directory`."""
    data = read_json(index)
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise WeightError(f"{index}: no weight_map")
    root = directory.resolve()
    for name, fname in weight_map.items():
        if not isinstance(fname, str) or not fname:
            raise WeightError(f"{index}: weight_map[{name!r}] is {fname!r}, not a file name")
        rel = Path(fname)
        # an index must not make us read files outside the model directory (absolute paths, "..",
        # or a symlink leading out)
        if rel.is_absolute() or ".." in rel.parts or "\\" in fname or "\0" in fname:
            raise WeightError(f"{index}: weight_map[{name!r}] = {fname!r} points outside {directory}")
        resolved = (directory / rel).resolve()
        if not resolved.is_relative_to(root):
            raise WeightError(f"{index}: weight_map[{name!r}] = {fname!r} points outside {directory}")
    return weight_map


def hf_dir_files(directory: Path) -> list[Path]:
    """The safetensors files of a Hugging Face model directory (one, or the shards of an index)."""
    index = directory / "model.safetensors.index.json"
    single = directory / "model.safetensors"
    if index.exists():
        return [directory / f for f in sorted(set(_index_shards(index, directory).values()))]
    if single.exists():
        return [single]
    raise WeightError(f"{directory}: no model.safetensors or model.safetensors.index.json")


def index_weight_map(directory: Path) -> dict[str, str]:
    """tensor name -> shard file name of a sharded directory's index (validated as in `hf_dir_files`)."""
    return _index_shards(directory / "model.safetensors.index.json", directory)


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _parse_header(path: Path, header: Any, data_len: int) -> list[tuple[str, str, tuple[int, ...], int, int]]:
    """Validate a safetensors header as the reference implementation does (safetensors' `validate`):
    entries {dtype, shape, data_offsets} of a known dtype, non-negative integer dims, byte counts that
    match shape x itemsize, and offsets that tile the data buffer exactly (contiguous, in order, no
    overlap, no gap, nothing left over). Returns (name, dtype, shape, begin, end) sorted by offset."""
    if not isinstance(header, dict):
        raise WeightError(f"{path}: not a safetensors file (header is not an object)")
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise WeightError(f"{path}: __metadata__ must map strings to strings")
            continue
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise WeightError(f"{path}: tensor {name!r} has a malformed header entry {str(info)[:200]}")
        dtype_name, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(dtype_name, str) or dtype_name not in _DTYPES:
            raise WeightError(f"{path}: tensor {name!r} has unsupported dtype {dtype_name!r}")
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise WeightError(f"{path}: tensor {name!r} has an invalid shape {str(shape)[:200]} "
                              f"(dims must be non-negative integers)")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets):
            raise WeightError(f"{path}: tensor {name!r} has invalid data_offsets {str(offsets)[:200]}")
        begin, end = offsets
        if end < begin:
            raise WeightError(f"{path}: tensor {name!r} has data_offsets [{begin}, {end}] that end before they begin")
        # Python ints: a product of huge dims cannot wrap around to a plausible size
        want = math.prod(shape) * _DTYPES[dtype_name].itemsize
        if end - begin != want:
            raise WeightError(f"{path}: tensor {name!r} ({dtype_name}{list(shape)}) has {end - begin} bytes of "
                              f"data, expected {want}")
        entries.append((name, dtype_name, tuple(shape), begin, end))
    entries.sort(key=lambda e: (e[3], e[4]))
    pos = 0
    for name, _, _, begin, end in entries:
        if begin != pos:
            if end > data_len:
                break  # reported below as truncation, the likelier cause
            how = "overlaps the previous tensor" if begin < pos else f"leaves a gap of {begin - pos} bytes before it"
            raise WeightError(f"{path}: tensor {name!r} data_offsets [{begin}, {end}] {how} (offsets must be "
                              f"contiguous)")
        pos = end
    for name, _, _, begin, end in entries:
        if end > data_len:
            raise WeightError(f"{path}: tensor {name!r} needs bytes {begin}..{end} of the data but the file has "
                              f"{data_len} bytes of data (truncated file?)")
    if pos != data_len:
        raise WeightError(f"{path}: the tensors cover {pos} bytes of data but the file has {data_len} "
                          f"({data_len - pos} unaccounted bytes)")
    return entries


def read_safetensors(path: Path, on_bytes: Callable[[int], None] | None = None) -> dict[str, np.ndarray]:
    """All tensors of one safetensors file; floating-point ones as float32, others in their own dtype."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise WeightError(f"{path}: truncated safetensors file ({size} bytes)")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise WeightError(f"{path}: cannot read: {e}") from e
    try:
        n = int.from_bytes(mm[:8], "little")
        if n > MAX_HEADER_BYTES:
            raise WeightError(f"{path}: header length {n} is over the {MAX_HEADER_BYTES}-byte limit (not a "
                              f"safetensors file?)")
        if 8 + n > size:
            raise WeightError(f"{path}: truncated safetensors file (header of {n} bytes, file of {size})")
        raw = bytes(mm[8:8 + n])
        if not raw.startswith(b"{"):
            raise WeightError(f"{path}: not a safetensors file (the header is not a JSON object)")
        try:
            header = parse_json(raw, f"{path}: header")
        except WeightError as e:
            raise WeightError(f"{path}: not a safetensors file ({str(e).removeprefix(f'{path}: ')})") from None
        base = 8 + n
        entries = _parse_header(path, header, size - base)
        out: dict[str, np.ndarray] = {}
        for name, dtype_name, shape, begin, end in entries:
            dt = _DTYPES[dtype_name]
            dt = dt.np if isinstance(dt, ldt.DType) else dt
            a = np.frombuffer(mm, dtype=dt, count=(end - begin) // dt.itemsize, offset=base + begin).reshape(shape)
            out[name] = a.astype(np.float32) if dtype_name in _FLOATS else a.copy()
            del a  # release the view so the mapping can close
            if on_bytes is not None:
                on_bytes(end - begin)
        # the file's order, as before (callers and tests see tensors in header order)
        return {name: out[name] for name in header if name in out}
    finally:
        try:
            mm.close()
        except BufferError:
            pass
