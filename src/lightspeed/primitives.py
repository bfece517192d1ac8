"""The primitive op table: the 15 ops of HLIR plus Input, Constant and Output.

Each op is declared once, as a :class:`PrimitiveOp` row: its name, arity, the rule that checks
operand dtypes and gives the result dtype, the rule that checks operand shapes and gives the
result shape, and its exact reference semantics on numpy arrays.  The graph builder, the
reference runtime, the docs generator (and later the e-graph encoder and the backends) all read
these rows; nothing switches on op names elsewhere.

Reference semantics, stated precisely (they define every backend's correctness):

* Floating-point math on float16/bfloat16 is computed in float32 and rounded once per op;
  SumReduce accumulates float16/bfloat16 in float32 and rounds the result.
* Integer Add/Mul wrap around (two's complement).  Mod is the truncated remainder (``fmod``:
  the sign follows the dividend); an integer Mod by zero yields 0.
* Cast float -> int truncates; NaN and +-inf give 0, finite values out of range saturate.  So an
  integer division by zero (``div(..., rounding_mode=...)``, ``floor_divide``: computed through a
  float division) gives 0 on every backend (PyTorch's CPU raises instead).
* Gather reads ``data_flat[idx]`` (``data_flat`` is the data operand's view in row-major order);
  an index outside ``[0, numel)`` raises ``IndexOutOfRange`` (native after the call, cuda where
  the host next waits: from an error word their kernels set).
* Scatter copies ``dest`` and writes ``out_flat[idx[i]] = src[i]``; indexes outside
  ``[0, numel)`` are skipped, which is how masked writes are expressed.  When several writes hit
  one element, which of them lands is unspecified.
* Iota evaluates a symbolic expression of the flat index ``z`` (and the bound dims).
* Cast to float8 rounds to nearest-even; like PyTorch, out-of-range values (and infinities)
  saturate to +-448 in float8_e4m3 (which has no infinity) and overflow to +-inf in float8_e5m2.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import dtypes as dt
from .dtypes import DType
from .errors import DTypeError, IndexOutOfRange, ShapeError
from .symbolic import INDEX_VAR, Expr, prod

__all__ = ["PrimitiveOp", "PRIMITIVES", "IotaArg", "ConstantValue", "InputArg", "by_name", "float_to_int"]

Shape = tuple[Expr, ...]


@dataclass(frozen=True)
class IotaArg:
    expr: Expr
    shape: Shape
    dtype: DType = dt.int32


@dataclass(frozen=True)
class InputArg:
    name: str
    shape: Shape
    dtype: DType


class ConstantValue:
    """A constant: a Python scalar or a numpy array, with a dtype.  Hashable by content."""

    __slots__ = ("value", "dtype", "shape", "_hash")

    def __init__(self, value: Any, dtype: DType):
        from .symbolic import const

        # integer constants wrap into the dtype (-1 as uint8 is 255), like the integer ops do
        arr = np.asarray(value)
        arr = arr.astype(dtype.np) if arr.dtype != dtype.np else arr
        self.value = arr
        self.dtype = dtype
        self.shape = tuple(const(d) for d in arr.shape)
        self._hash = hash((dtype.name, arr.shape, arr.tobytes()))

    @property
    def is_scalar(self) -> bool:
        return self.value.ndim == 0

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ConstantValue) and self.dtype == other.dtype
                and self.value.shape == other.value.shape
                and self.value.tobytes() == other.value.tobytes())

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        if self.is_scalar:
            return repr(self.value.item())
        return f"array{tuple(self.value.shape)}"


@dataclass(frozen=True)
class PrimitiveOp:
    name: str
    arity: int
    category: str  # unary | binary | reduce | source | index | cast | io
    dtype_rule: Callable[[Sequence[DType], Any], DType]
    shape_rule: Callable[[Sequence[Shape], Any], Shape]
    reference: Callable[[list[np.ndarray], Any, dict], np.ndarray]
    doc: str
    # the e-graph constructor's fields, (name, kind) in order: the encoder writes them, the
    # extractor and the LLIR decoder read them by name (kinds: see lightspeed.egraph.llir.OpDecl)
    fields: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:
        return self.name


# ---------------------------------------------------------------------------- rule helpers
def _fmt(shapes_dtypes) -> str:
    return ", ".join(f"{d.name}[{', '.join(str(x) for x in s)}]" for s, d in shapes_dtypes)


def _no_storage_only(op: str, dts: Sequence[DType]) -> None:
    for d in dts:
        if d.storage_only:
            raise DTypeError(f"{op}: {d.name} is a storage-only dtype; cast it to a compute dtype first")


def _float_unary(op: str):
    def rule(dts: Sequence[DType], arg: Any) -> DType:
        (d,) = dts
        _no_storage_only(op, dts)
        if not d.is_float:
            raise DTypeError(f"{op}: needs a floating-point operand, got {d.name}")
        return d
    return rule


def _same_dtype(op: str, *, allow_bool: bool = True, result: DType | None = None):
    def rule(dts: Sequence[DType], arg: Any) -> DType:
        _no_storage_only(op, dts)
        if len(set(dts)) != 1:
            raise DTypeError(f"{op}: operands must have the same dtype, got {', '.join(d.name for d in dts)}")
        if not allow_bool and dts[0].is_bool:
            raise DTypeError(f"{op}: not defined for bool operands")
        return result or dts[0]
    return rule


def _same_shape(op: str):
    def rule(shapes: Sequence[Shape], arg: Any) -> Shape:
        if any(s != shapes[0] for s in shapes[1:]):
            raise ShapeError(f"{op}: operand shapes must be identical (broadcast them first), got "
                             + ", ".join("(" + ", ".join(str(x) for x in s) + ")" for s in shapes))
        return shapes[0]
    return rule


def _reduce_shape(op: str):
    def rule(shapes: Sequence[Shape], axis: int) -> Shape:
        (s,) = shapes
        if not isinstance(axis, int) or not 0 <= axis < len(s):
            raise ShapeError(f"{op}: axis {axis} out of range for a rank-{len(s)} operand")
        return s[:axis] + s[axis + 1:]
    return rule


def _low_precision(d: np.dtype) -> bool:
    """float16, bfloat16 and float8 (ml_dtypes' types have kind 'V')."""
    return d.kind == "V" or (d.kind == "f" and d.itemsize <= 2)


def _compute(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32) if _low_precision(x.dtype) else x


def _unary_ref(fn):
    def ref(xs, arg, env):
        (x,) = xs
        with np.errstate(all="ignore"):
            return fn(_compute(x)).astype(x.dtype, copy=False)
    return ref


def _binary_ref(fn):
    def ref(xs, arg, env):
        a, b = xs
        with np.errstate(all="ignore"):
            return fn(_compute(a), _compute(b)).astype(a.dtype, copy=False)
    return ref


def _mod_ref(xs, arg, env):
    a, b = xs
    with np.errstate(all="ignore"):
        if a.dtype.kind in "iu":
            safe = np.where(b == 0, 1, b)
            return np.where(b == 0, 0, np.fmod(a, safe)).astype(a.dtype)
        return np.fmod(_compute(a), _compute(b)).astype(a.dtype, copy=False)


def _sum_ref(xs, axis, env):
    (x,) = xs
    if x.dtype.kind in "iub":
        return np.sum(x, axis=axis, dtype=x.dtype)
    with np.errstate(all="ignore"):
        return np.sum(_compute(x), axis=axis).astype(x.dtype, copy=False)


def _max_ref(xs, axis, env):
    (x,) = xs
    if x.shape[axis] == 0:
        shape = x.shape[:axis] + x.shape[axis + 1:]
        return np.full(shape, dt.as_dtype(x.dtype).min_value(), dtype=x.dtype)
    if _low_precision(x.dtype):
        return np.max(x.astype(np.float32), axis=axis).astype(x.dtype)
    return np.max(x, axis=axis)


def _iota_ref(xs, arg: IotaArg, env):
    shape = tuple(int(d.evaluate(env)) for d in arg.shape)
    n = int(np.prod(shape, dtype=np.int64))
    z = np.arange(n, dtype=np.int64)
    vals = arg.expr.evaluate({**env, INDEX_VAR: z})
    return np.broadcast_to(np.asarray(vals, dtype=np.int64), (n,)).astype(arg.dtype.np).reshape(shape)


def _gather_ref(xs, arg, env):
    idx, data = xs
    flat = data.reshape(-1)
    ii = idx.astype(np.int64)
    if ii.size and (ii.min() < 0 or ii.max() >= flat.size):
        bad = ii[(ii < 0) | (ii >= flat.size)][0]
        raise IndexOutOfRange(f"Gather: index {bad} out of range for data with {flat.size} elements")
    return flat[ii]


def _scatter_ref(xs, arg, env):
    dest, idx, src = xs
    out = dest.reshape(-1).copy()
    ii = idx.reshape(-1).astype(np.int64)
    keep = (ii >= 0) & (ii < out.size)
    out[ii[keep]] = src.reshape(-1)[keep]
    return out.reshape(dest.shape)


def float_to_int(x: np.ndarray, to: np.dtype) -> np.ndarray:
    """Floats as integers of type ``to``: truncated, NaN and +-inf 0, out-of-range values saturated
    (in float64, by comparison: a clip to the int type's max in floating point rounds up past it,
    float32 and int32 or float64 and int64, and the cast wraps)."""
    with np.errstate(all="ignore"):
        xc = np.asarray(x, dtype=np.float64)
        t = np.trunc(np.where(np.isfinite(xc), xc, 0))
        info = np.iinfo(to)
        big, small = t >= float(info.max) + 1, t < float(info.min)
        out = np.where(big | small, 0, t).astype(to)
        out[big], out[small] = info.max, info.min
    return out


def _cast_ref(xs, to: DType, env):
    (x,) = xs
    with np.errstate(all="ignore"):
        if to.is_bool:
            return _compute(x) != 0
        if (x.dtype.kind == "f" or _low_precision(x.dtype)) and to.is_int:
            # float -> int truncates toward zero; NaN/inf give 0 and out-of-range values saturate
            # (every backend does the same: the module docstring)
            return float_to_int(_compute(x), to.np)
        if to.storage_only and x.dtype.kind != "b":
            # float8: e4m3 has no inf, so (like PyTorch) out-of-range values saturate to +-max
            # rather than becoming NaN; e5m2 overflows to +-inf as usual
            xc = x.astype(np.float64) if x.dtype.kind in "iu" else _compute(x)
            if to == dt.float8_e4m3:
                lim = float(importlib.import_module("ml_dtypes").finfo(to.np).max)
                xc = np.clip(xc, -lim, lim)
            return xc.astype(to.np)
        return x.astype(to.np)


def _index_dtype(op: str, d: DType) -> None:
    if not d.is_int:
        raise DTypeError(f"{op}: indexes must be an integer dtype, got {d.name}")


def _gather_dtype(dts, arg):
    idx, data = dts
    _index_dtype("Gather", idx)
    return data


def _scatter_dtype(dts, arg):
    dest, idx, src = dts
    _index_dtype("Scatter", idx)
    if dest != src:
        raise DTypeError(f"Scatter: dest and src must have the same dtype, got {dest.name} and {src.name}")
    return dest


def _scatter_shape(shapes, arg):
    dest, idx, src = shapes
    if idx != src:
        raise ShapeError("Scatter: indexes and src must have the same shape, got "
                         f"({', '.join(map(str, idx))}) and ({', '.join(map(str, src))})")
    return dest


def _input_ref(xs, arg, env):  # pragma: no cover - inputs are bound by the runtime
    raise AssertionError("inputs are bound by the runtime")


def _constant_ref(xs, arg: ConstantValue, env):
    return arg.value


def _output_ref(xs, arg, env):
    return xs[0]


def _any_dtype(dts, arg):
    return dts[0]


def _cast_dtype(dts, arg):
    if not isinstance(arg, DType):
        raise DTypeError(f"Cast: target must be a DType, got {arg!r}")
    if arg.block:  # quantising is the weight writer's (gguf), not a graph op
        raise DTypeError(f"Cast: cannot cast to the block type {arg.name}; it may only be cast from")
    return arg


def _iota_dtype(dts, arg: IotaArg):
    if not arg.dtype.is_int:
        raise DTypeError(f"Iota: dtype must be an integer type, got {arg.dtype.name}")
    return arg.dtype


def _max_dtype(dts, arg):
    _no_storage_only("MaxReduce", dts)
    return dts[0]


def _sum_dtype(dts, arg):
    _no_storage_only("SumReduce", dts)
    if dts[0].is_bool:
        raise DTypeError("SumReduce: not defined for bool; cast to an integer type first")
    return dts[0]


_PRIMS: list[PrimitiveOp] = [
    PrimitiveOp("Log2", 1, "unary", _float_unary("Log2"), _same_shape("Log2"), _unary_ref(np.log2),
                "base-2 logarithm"),
    PrimitiveOp("Exp2", 1, "unary", _float_unary("Exp2"), _same_shape("Exp2"), _unary_ref(np.exp2),
                "2 to the power x"),
    PrimitiveOp("Sin", 1, "unary", _float_unary("Sin"), _same_shape("Sin"), _unary_ref(np.sin), "sine"),
    PrimitiveOp("Sqrt", 1, "unary", _float_unary("Sqrt"), _same_shape("Sqrt"), _unary_ref(np.sqrt),
                "square root"),
    PrimitiveOp("Recip", 1, "unary", _float_unary("Recip"), _same_shape("Recip"),
                _unary_ref(np.reciprocal), "1 / x"),
    PrimitiveOp("Add", 2, "binary", _same_dtype("Add"), _same_shape("Add"), _binary_ref(np.add),
                "a + b (logical or on bool)"),
    PrimitiveOp("Mul", 2, "binary", _same_dtype("Mul"), _same_shape("Mul"), _binary_ref(np.multiply),
                "a * b (logical and on bool)"),
    PrimitiveOp("Mod", 2, "binary", _same_dtype("Mod", allow_bool=False), _same_shape("Mod"), _mod_ref,
                "truncated remainder, sign of the dividend"),
    PrimitiveOp("LessThan", 2, "binary", _same_dtype("LessThan", result=dt.bool_), _same_shape("LessThan"),
                lambda xs, a, e: np.less(_compute(xs[0]), _compute(xs[1])), "a < b, bool result"),
    PrimitiveOp("SumReduce", 1, "reduce", _sum_dtype, _reduce_shape("SumReduce"), _sum_ref,
                "sum over one axis (removed)"),
    PrimitiveOp("MaxReduce", 1, "reduce", _max_dtype, _reduce_shape("MaxReduce"), _max_ref,
                "max over one axis (removed); NaN propagates"),
    PrimitiveOp("Iota", 0, "source", _iota_dtype, lambda shapes, arg: arg.shape, _iota_ref,
                "int tensor whose element at flat index z is expr(z)"),
    PrimitiveOp("Gather", 2, "index", _gather_dtype, lambda shapes, arg: shapes[0], _gather_ref,
                "out[i] = data_flat[idx[i]]"),
    PrimitiveOp("Scatter", 3, "index", _scatter_dtype, _scatter_shape, _scatter_ref,
                "copy of dest with out_flat[idx[i]] = src[i]; out-of-range idx skipped"),
    PrimitiveOp("Cast", 1, "cast", _cast_dtype, _same_shape("Cast"), _cast_ref, "dtype conversion"),
    # graph plumbing
    PrimitiveOp("Input", 0, "io", lambda dts, arg: arg.dtype, lambda shapes, arg: arg.shape, _input_ref,
                "named program input"),
    PrimitiveOp("Constant", 0, "io", lambda dts, arg: arg.dtype, lambda shapes, arg: arg.shape,
                _constant_ref, "scalar or array constant"),
    PrimitiveOp("Output", 1, "io", _any_dtype, lambda shapes, arg: shapes[0], _output_ref, "named program output"),
]

def _operands(*names: str) -> tuple[tuple[str, str], ...]:
    return tuple(f for n in names for f in ((n, "ir"), (f"{n}_view", "view")))


_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "unary": _operands("x"), "binary": _operands("a", "b"), "reduce": (("axis", "i64"), *_operands("x")),
    "Iota": (("expr", "expr"), ("shape", "elist"), ("dtype", "dtype")),
    "Gather": _operands("indexes", "data"), "Scatter": _operands("dest", "indexes", "src"),
    "Cast": (("to", "dtype"), *_operands("x")),
    "Input": (("name", "str"), ("shape", "elist"), ("dtype", "dtype")),
    "Constant": (("index", "i64"), ("shape", "elist"), ("dtype", "dtype")),
    "Output": (("name", "str"), *_operands("x")),
}
_PRIMS = [dataclasses.replace(p, fields=_FIELDS.get(p.name) or _FIELDS[p.category]) for p in _PRIMS]
PRIMITIVES: dict[str, PrimitiveOp] = {p.name: p for p in _PRIMS}
COMPUTE_PRIMITIVES: tuple[str, ...] = tuple(p.name for p in _PRIMS if p.category != "io")
assert len(COMPUTE_PRIMITIVES) == 15


def by_name(name: str) -> PrimitiveOp:
    try:
        return PRIMITIVES[name]
    except KeyError:
        raise KeyError(f"no primitive op named {name!r}; known: {', '.join(PRIMITIVES)}") from None


def numel(shape: Shape) -> Expr:
    return prod(shape)
