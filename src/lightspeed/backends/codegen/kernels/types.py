"""C types and conversions shared by every kernel family, both dialects.

*Numerics.*  Values are computed in a compute type per dtype (float for float32/bfloat16/float16,
double for float64, int/long long for integers, wrapping like two's complement); float8 and the
16-bit floats are converted in software / PTX with round-to-nearest-even (the prelude's
``ls_*`` functions), so both dialects give the same bits.
"""

from __future__ import annotations

import math

import numpy as np

from ....dtypes import DType

__all__ = ["storage_type", "compute_type", "load", "store", "cast", "int_literal", "literal", "min_value",
           "half_of", "store_pair"]

_STORAGE = {"float32": "float", "float64": "double", "float16": "unsigned short", "bfloat16": "unsigned short",
            "float8_e4m3": "unsigned char", "float8_e5m2": "unsigned char", "int8": "signed char",
            "uint8": "unsigned char", "int16": "short", "int32": "int", "int64": "long long",
            "bool": "unsigned char"}
_COMPUTE = {"float32": "float", "float64": "double", "float16": "float", "bfloat16": "float",
            "float8_e4m3": "float", "float8_e5m2": "float", "int8": "int", "uint8": "unsigned int",
            "int16": "int", "int32": "int", "int64": "long long", "bool": "int"}


def storage_type(d: DType) -> str:
    return _STORAGE[d.name]


def compute_type(d: DType) -> str:
    return _COMPUTE[d.name]


def load(d: DType, ref: str) -> str:
    """A stored element as a compute value."""
    conv = {"float16": "ls_h2f", "bfloat16": "ls_bf2f", "float8_e4m3": "ls_e4m3_to_f",
            "float8_e5m2": "ls_e5m2_to_f"}.get(d.name)
    return f"{conv}({ref})" if conv else f"(({compute_type(d)}){ref})"


def store(d: DType, v: str) -> str:
    """A compute value as the stored element."""
    if d.name == "float16":
        return f"ls_f2h((float)({v}))"
    if d.name == "bfloat16":
        return f"ls_f2bf((float)({v}))"
    if d.name == "float8_e4m3":
        return f"ls_f_to_e4m3((float)({v}))"
    if d.name == "float8_e5m2":
        return f"ls_f_to_e5m2((float)({v}))"
    if d.is_bool:
        return f"(unsigned char)(({v}) != 0)"
    return f"({storage_type(d)})({v})"


def half_of(word4: str, e: int) -> str:
    """The bits of element ``e`` (of 8) of a ``uint4`` holding 16-bit values (a 16-byte load)."""
    word = f"{word4}.{'xyzw'[e // 2]}"
    return f"(unsigned short)({word} >> 16)" if e % 2 else f"(unsigned short)({word} & 0xffffu)"


def store_pair(d: DType, lo: str, hi: str) -> str:
    """Two compute values stored as one 32-bit word of 16-bit elements (``lo`` in the low half)."""
    return f"((unsigned int){store(d, lo)} | ((unsigned int){store(d, hi)} << 16))"


def cast(v: str, src: DType, to: DType) -> str:
    """A compute value of ``src`` as a compute value of ``to``, with the reference's semantics."""
    if src == to:
        return v
    if to.is_bool:
        return f"(int)(({v}) != 0)"
    if to.is_float:
        if to.name in ("float16", "bfloat16", "float8_e4m3", "float8_e5m2"):
            return load(to, store(to, f"(float)({v})"))
        return f"(({compute_type(to)})({v}))"
    if src.is_float:  # float -> int truncates; NaN gives 0, out-of-range values saturate
        info = np.iinfo(to.np)
        lo, hi = int_literal(int(info.min)), int_literal(int(info.max))
        return f"(({compute_type(to)})ls_ftoi((double)({v}), {lo}, {hi}))"
    return f"(({compute_type(to)})({storage_type(to)})({v}))"  # int -> int wraps


def int_literal(v: int) -> str:
    if v == -(2 ** 63):
        return "(-9223372036854775807LL - 1)"
    if v >= 2 ** 63:
        return f"{v}ULL"
    return f"{v}LL"


def literal(value, d: DType) -> str:
    """A constant as a compute-type literal (bit-exact: floats as hexadecimal literals)."""
    if d.is_bool:
        return "1" if bool(value) else "0"
    if d.is_int:
        return f"(({compute_type(d)}){int_literal(int(value))})"
    f = float(np.asarray(value, dtype=d.np).astype(np.float64))
    suffix = "" if d.name == "float64" else "f"
    if math.isnan(f):
        return "ls_nan()" if suffix else "((double)ls_nan())"
    if math.isinf(f):
        s = "ls_inf()" if suffix else "((double)ls_inf())"
        return s if f > 0 else f"(-{s})"
    return f"({f.hex()}{suffix})"


def min_value(d: DType) -> str:
    if d.is_float:
        return "(-ls_inf())" if d.name != "float64" else "(-(double)ls_inf())"
    if d.is_bool:
        return "0"
    return literal(int(np.iinfo(d.np).min), d)


