"""Data types and the promotion rules (stated once, here).

Promotion follows PyTorch's ``torch.result_type`` for tensor-tensor operands:

* categories are ordered bool < integer < floating; the result takes the highest category;
* within integers, the smallest type holding both ranges (uint8 + int8 -> int16);
* within floats, the wider type; float16 with bfloat16 gives float32;
* a Python scalar does not widen a tensor of its own or a higher category (``x_f16 * 2.0`` stays
  float16); a Python float with an integer/bool tensor gives float32, a Python int with a bool
  tensor gives int64.

float8 (e4m3, e5m2) is a storage type: it may be cast to and from, but arithmetic on it raises,
so a silent low-precision computation cannot happen.  So are GGML's block types (``BLOCK_DTYPES``:
a GGUF file's quantised matrices, static [rows, cols] with whole blocks per row), which may only be
cast from: a value is the codec's ``QuantTensor`` (``.qtype``, ``.shape``, ``.blocks``; its
``__array__`` is the float32 values, exactly gguf's dequantisation); docs/kernels.md.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass

import numpy as np

from .errors import DTypeError

__all__ = [
    "DType", "float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32", "int64",
    "bool_", "float8_e4m3", "float8_e5m2", "ALL_DTYPES", "promote_types", "result_type",
    "as_dtype", "scalar_dtype", "BLOCK_DTYPES", "BLOCK_CODEC", "q8_0", "q4_0", "q4_1", "q5_0", "q4_k", "q6_k",
]


@dataclass(frozen=True)
class DType:
    name: str
    itemsize: int
    category: int  # 0 bool, 1 integer, 2 floating
    np_type: type | str  # a str names an ml_dtypes type, imported on first use (the import takes ~1 s)
    storage_only: bool = False
    block: tuple[int, int] | None = None  # a GGML block type: (weights, bytes) per block

    @functools.cached_property
    def np(self) -> np.dtype:
        t = self.np_type
        return np.dtype(getattr(importlib.import_module("ml_dtypes"), t) if isinstance(t, str) else t)

    @property
    def is_float(self) -> bool:
        return self.category == 2

    @property
    def is_int(self) -> bool:
        return self.category == 1

    @property
    def is_bool(self) -> bool:
        return self.category == 0

    @property
    def is_signed(self) -> bool:
        return self.category == 2 or (self.category == 1 and self.np.kind == "i")

    def min_value(self) -> float | int:
        return -float("inf") if self.is_float else False if self.is_bool else int(np.iinfo(self.np).min)

    def max_value(self) -> float | int:
        return float("inf") if self.is_float else True if self.is_bool else int(np.iinfo(self.np).max)

    def __repr__(self) -> str:
        return f"ls.{self.name}"

    __str__ = __repr__


float64 = DType("float64", 8, 2, np.float64)
float32 = DType("float32", 4, 2, np.float32)
float16 = DType("float16", 2, 2, np.float16)
bfloat16 = DType("bfloat16", 2, 2, "bfloat16")
float8_e4m3 = DType("float8_e4m3", 1, 2, "float8_e4m3fn", storage_only=True)
float8_e5m2 = DType("float8_e5m2", 1, 2, "float8_e5m2", storage_only=True)
int64 = DType("int64", 8, 1, np.int64)
int32 = DType("int32", 4, 1, np.int32)
int16 = DType("int16", 2, 1, np.int16)
int8 = DType("int8", 1, 1, np.int8)
uint8 = DType("uint8", 1, 1, np.uint8)
bool_ = DType("bool", 1, 0, np.bool_)

ALL_DTYPES: tuple[DType, ...] = (float64, float32, float16, bfloat16, float8_e4m3, float8_e5m2,
                                 int64, int32, int16, int8, uint8, bool_)
# GGML block types: a row of cols weights is cols / weights blocks of `bytes` each (weights.quant)
q8_0, q4_0, q4_1, q5_0, q4_k, q6_k = BLOCK_DTYPES = tuple(
    DType(n, 1, 2, np.uint8, True, (w, b)) for n, w, b in (("q8_0", 32, 34), ("q4_0", 32, 18), ("q4_1", 32, 20),
                                                        ("q5_0", 32, 22), ("q4_k", 256, 144), ("q6_k", 256, 210)))
BLOCK_CODEC = "lightspeed.weights.quant"  # their values: random ones (random_quant) for the search
_BY_NAME = {d.name: d for d in (*ALL_DTYPES, *BLOCK_DTYPES)} | {"bool_": bool_, "float": float32, "half": float16,
                                               "double": float64, "long": int64, "int": int32,
                                               "bf16": bfloat16, "fp8_e4m3": float8_e4m3,
                                               "fp8_e5m2": float8_e5m2}
_BY_NP = {d.np: d for d in ALL_DTYPES if not isinstance(d.np_type, str)}
_ML_DTYPES = tuple(d for d in ALL_DTYPES if isinstance(d.np_type, str))

DEFAULT_FLOAT = float32
DEFAULT_INT = int64


def as_dtype(x: object) -> DType:
    """Accept a DType, a name ('float32', 'bf16'), a numpy dtype or a torch dtype."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        d = _BY_NAME.get(x)
        if d is None:
            raise DTypeError(f"unknown dtype name {x!r}; known: {sorted(_BY_NAME)}")
        return d
    mod = type(x).__module__
    if mod.startswith("torch"):
        name = str(x).removeprefix("torch.")
        name = {"float8_e4m3fn": "float8_e4m3"}.get(name, name)
        return as_dtype(name)
    try:
        npd = np.dtype(x)
    except TypeError:
        raise DTypeError(f"cannot interpret {x!r} as a lightspeed dtype") from None
    # an array of an ml_dtypes type means ml_dtypes is imported already: comparing costs nothing
    d = _BY_NP.get(npd) or next((m for m in _ML_DTYPES if npd.name == m.np_type and m.np == npd), None)
    if d is None:
        raise DTypeError(f"numpy dtype {npd} has no lightspeed equivalent")
    return d


def _int_range(d: DType) -> tuple[int, int]:
    if d.is_bool:
        return 0, 1
    info = np.iinfo(d.np)
    return int(info.min), int(info.max)


_INTS_BY_SIZE = (uint8, int8, int16, int32, int64)


def promote_types(a: DType, b: DType) -> DType:
    """Promotion of two tensor dtypes (see module docstring)."""
    if a == b:
        return a
    for d in (a, b):
        if d.storage_only:
            raise DTypeError(f"{d.name} is a storage-only dtype: cast it (e.g. .to(ls.bfloat16)) "
                             f"before combining it with {b.name if d is a else a.name}")
    if a.category != b.category:
        return a if a.category > b.category else b
    if a.is_float:
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if a.itemsize > b.itemsize else b
    # integers: the smallest signed/unsigned type covering both ranges
    lo = min(_int_range(a)[0], _int_range(b)[0])
    hi = max(_int_range(a)[1], _int_range(b)[1])
    for d in _INTS_BY_SIZE:
        dlo, dhi = _int_range(d)
        if dlo <= lo and hi <= dhi:
            return d
    return int64


def scalar_dtype(v: object) -> DType:
    """The dtype category of a Python scalar (bool, int64 or float32 as in PyTorch)."""
    if isinstance(v, (bool, np.bool_)):
        return bool_
    if isinstance(v, (int, np.integer)):
        return int64
    if isinstance(v, (float, np.floating)):
        return DEFAULT_FLOAT
    raise TypeError(f"expected a Python scalar, got {type(v).__name__}")


def result_type(*operands: object) -> DType:
    """Promotion over tensors (anything with a ``.dtype`` DType) and Python scalars."""
    tensor_dt: DType | None = None
    scalar_cat = -1
    for o in operands:
        dt = getattr(o, "dtype", None)
        if isinstance(dt, DType):
            tensor_dt = dt if tensor_dt is None else promote_types(tensor_dt, dt)
        else:
            scalar_cat = max(scalar_cat, scalar_dtype(o).category)
    if tensor_dt is None:
        return {0: bool_, 1: DEFAULT_INT, 2: DEFAULT_FLOAT}[scalar_cat]
    if scalar_cat > tensor_dt.category:
        if tensor_dt.storage_only:
            raise DTypeError(f"{tensor_dt.name} is a storage-only dtype: cast it before arithmetic")
        return {1: DEFAULT_INT, 2: DEFAULT_FLOAT}[scalar_cat]
    return tensor_dt
