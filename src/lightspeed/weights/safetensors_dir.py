"""Reading safetensors files and Hugging Face model directories.

The format is an 8-byte little-endian header length, a JSON header (name -> dtype, shape,
data_offsets) and the raw little-endian data. We parse it directly rather than through the
`safetensors` package so that bfloat16 and float8 (which numpy lacks; ml_dtypes has them) load, and
so that a truncated or inconsistent file names the tensor at fault.
"""

from __future__ import annotations

import json
import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from .errors import WeightError

__all__ = ["read_safetensors", "hf_dir_files", "read_json"]

_DTYPES: dict[str, Any] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype(ml_dtypes.bfloat16),
    "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn), "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
_FLOATS = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise WeightError(f"{path}: cannot read JSON: {e}") from e


def hf_dir_files(directory: Path) -> list[Path]:
    """The safetensors files of a Hugging Face model directory (one, or the shards of an index)."""
    index = directory / "model.safetensors.index.json"
    single = directory / "model.safetensors"
    if index.exists():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise WeightError(f"{index}: no weight_map")
        return [directory / f for f in sorted(set(weight_map.values()))]
    if single.exists():
        return [single]
    raise WeightError(f"{directory}: no model.safetensors or model.safetensors.index.json")


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
        if 8 + n > size:
            raise WeightError(f"{path}: truncated safetensors file (header of {n} bytes, file of {size})")
        try:
            header = json.loads(bytes(mm[8:8 + n]))
        except ValueError as e:
            raise WeightError(f"{path}: not a safetensors file (bad JSON header: {e})") from e
        if not isinstance(header, dict):
            raise WeightError(f"{path}: not a safetensors file (header is not an object)")
        base = 8 + n
        out: dict[str, np.ndarray] = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            try:
                dtype_name, shape, (begin, end) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
            except (KeyError, TypeError, ValueError):
                raise WeightError(f"{path}: tensor {name!r} has a malformed header entry {info!r}") from None
            if dtype_name not in _DTYPES:
                raise WeightError(f"{path}: tensor {name!r} has unsupported dtype {dtype_name}")
            dt = _DTYPES[dtype_name]
            count = int(np.prod(shape, dtype=np.int64))
            if end - begin != count * dt.itemsize or begin < 0:
                raise WeightError(f"{path}: tensor {name!r} ({dtype_name}{list(shape)}) has {end - begin} bytes of "
                                  f"data, expected {count * dt.itemsize}")
            if base + end > size:
                raise WeightError(f"{path}: tensor {name!r} needs bytes {base + begin}..{base + end} but the file has "
                                  f"{size} bytes (truncated file?)")
            a = np.frombuffer(mm, dtype=dt, count=count, offset=base + begin).reshape(shape)
            out[name] = a.astype(np.float32) if dtype_name in _FLOATS else a.copy()
            del a  # release the view so the mapping can close
            if on_bytes is not None:
                on_bytes(end - begin)
        return out
    finally:
        try:
            mm.close()
        except BufferError:
            pass
