"""Conversions between PyTorch and lightspeed: dtypes, symbolic sizes, tensors.

* ``dtype``: torch dtypes map one-to-one onto lightspeed's (float8 e4m3fn/e5m2 included).
* ``sym_expr``: a SymInt's sympy expression (``s0 + 1``, ``FloorDiv(s1, 2)``, ``Max(1, s0)``) becomes
  a lightspeed :class:`Expr` over symbols of the same names, so one program serves every size that
  dynamo's guards allow.
* ``to_torch``: numpy results become torch tensors without a copy where numpy allows it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import UnsupportedError
from ..symbolic import Expr, const, smax, smin, sym

__all__ = ["ls_dtype", "torch_dtype", "sym_expr", "size_expr", "shape_of", "to_torch", "torch_result_type"]

_TORCH_TO_LS: dict[torch.dtype, DType] = {
    torch.float64: dt.float64, torch.float32: dt.float32, torch.float16: dt.float16, torch.bfloat16: dt.bfloat16,
    torch.float8_e4m3fn: dt.float8_e4m3, torch.float8_e5m2: dt.float8_e5m2, torch.int64: dt.int64,
    torch.int32: dt.int32, torch.int16: dt.int16, torch.int8: dt.int8, torch.uint8: dt.uint8, torch.bool: dt.bool_,
}
_LS_TO_TORCH = {v: k for k, v in _TORCH_TO_LS.items()}


def ls_dtype(d: torch.dtype) -> DType:
    """The lightspeed dtype of a torch dtype (complex and the rarer integer types are unsupported)."""
    try:
        return _TORCH_TO_LS[d]
    except KeyError:
        raise UnsupportedError(f"dtype {d} has no lightspeed equivalent") from None


def torch_dtype(d: DType) -> torch.dtype:
    return _LS_TO_TORCH[d]


# torch's integer sympy functions (torch.utils._sympy.functions) and sympy's Max/Min, by class name
_SYMPY_FUNCTIONS = {
    "FloorDiv": lambda a: a[0] // a[1],
    "CleanDiv": lambda a: a[0] // a[1],  # a floor division known to be exact
    "CeilDiv": lambda a: a[0].ceildiv(a[1]),
    "ModularIndexing": lambda a: (a[0] // a[1]) % a[2],
    "PythonMod": lambda a: a[0] % a[1],
    "Mod": lambda a: a[0] % a[1],  # sizes are non-negative, so C and Python remainders agree
    "Max": lambda a: smax(*a),
    "Min": lambda a: smin(*a),
}


def _sympy_to_expr(e: Any) -> Expr:
    import sympy

    if isinstance(e, sympy.Integer) or (isinstance(e, sympy.Number) and e.is_integer):
        return const(int(e))
    if isinstance(e, sympy.Symbol):
        if e.name.startswith(("u", "z")):  # unbacked: a value read from data, not a size
            raise UnsupportedError(f"data-dependent size {e.name} (a value read from a tensor's data) is not "
                                   "supported; lightspeed needs sizes that follow from input shapes")
        return sym(e.name)
    if isinstance(e, sympy.Pow):
        base, ex = e.args
        if isinstance(ex, sympy.Integer) and int(ex) >= 0:
            b, out = _sympy_to_expr(base), const(1)
            for _ in range(int(ex)):
                out = out * b
            return out
        raise UnsupportedError(f"symbolic size {e} (a non-integer power) has no lightspeed form")
    if isinstance(e, (sympy.Add, sympy.Mul)):
        args = [_sympy_to_expr(a) for a in e.args]
        out = args[0]
        for a in args[1:]:
            out = out + a if isinstance(e, sympy.Add) else out * a
        return out
    fn = _SYMPY_FUNCTIONS.get(type(e).__name__)
    if fn is None:
        raise UnsupportedError(f"symbolic size {e} ({type(e).__name__}) has no lightspeed form")
    return fn([_sympy_to_expr(a) for a in e.args])


def sym_expr(v: Any) -> Expr | int:
    """An int for a concrete size, else the SymInt's expression as a lightspeed Expr."""
    if isinstance(v, torch.SymInt):
        e = v.node.expr
        out = _sympy_to_expr(e)
        return out.value if out.is_const else out
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, Expr):
        return v.value if v.is_const else v
    raise UnsupportedError(f"expected a size, got {v!r} ({type(v).__name__})")


def size_expr(v: Any) -> Expr:
    e = sym_expr(v)
    return e if isinstance(e, Expr) else const(int(e))


def shape_of(t: torch.Tensor) -> tuple[Expr, ...]:
    """A (fake or real) tensor's shape as lightspeed Exprs."""
    return tuple(size_expr(d) for d in t.shape)


def to_torch(a: np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A torch tensor of a numpy result: shared memory when numpy's layout allows it, else a copy.

    Read-only or overlapping (broadcast) arrays are copied: the caller may write into the result."""
    a = np.asarray(a)
    if not a.flags.writeable or any(s < 0 for s in a.strides) or (a.size > 1 and 0 in a.strides):
        a = np.array(a, order="C")
    kind = a.dtype.name
    if kind == "bfloat16":
        t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    elif kind.startswith("float8"):
        t = torch.from_numpy(a.view(np.uint8)).view(torch.float8_e4m3fn if "e4m3" in kind else torch.float8_e5m2)
    else:
        t = torch.from_numpy(a)
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    return t


def torch_result_type(*operands: Any) -> DType:
    """PyTorch's type promotion over lightspeed tensors and Python scalars, where (unlike
    :func:`lightspeed.dtypes.result_type`) a 0-d tensor only matters when its category is higher
    than every dimensioned tensor's: ``f32[3] + f64[]`` is float32, as in ``torch.result_type``."""
    dim: DType | None = None
    zero: DType | None = None
    wrapped: DType | None = None
    for o in operands:
        d = getattr(o, "dtype", None)
        if isinstance(d, DType):
            if o.ndim > 0:
                dim = d if dim is None else dt.promote_types(dim, d)
            else:
                zero = d if zero is None else dt.promote_types(zero, d)
        elif o is not None:
            s = dt.scalar_dtype(o) if not isinstance(o, Expr) else dt.int64
            wrapped = s if wrapped is None else dt.promote_types(wrapped, s)

    def combine(higher: DType | None, lower: DType | None) -> DType | None:
        if higher is None:
            return lower
        if lower is None:
            return higher
        if higher.is_float:
            return higher
        if higher.is_bool or lower.is_float:
            return dt.promote_types(higher, lower)
        return higher

    out = combine(dim, combine(zero, wrapped))
    if out is None:
        raise UnsupportedError("no operands to promote")
    return out
