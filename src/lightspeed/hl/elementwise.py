"""Element-wise high-level ops: arithmetic, math functions, comparisons, logic, select, casts.

All are compositions of the primitives Add, Mul, Mod, LessThan, Recip, Exp2, Log2, Sin, Sqrt,
Cast, plus Iota + Scatter for ``where`` (an exact select, even when a branch holds inf/NaN), and
Pad + Add + MaxReduce for ``maximum``/``minimum`` (exact, NaN-propagating).
"""

from __future__ import annotations

import builtins
import math
from typing import Any

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import DTypeError
from ..graph import GraphTensor
from ..symbolic import INDEX_VAR, sym
from .common import as_tensor, binary_operands, broadcast_shapes, broadcast_to, cast, fill_expr, full, graph_of, prim
from .registry import hl_op

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def _float_operand(x: GraphTensor, op: str) -> GraphTensor:
    """Ints and bools go to float32 for transcendental functions (as in PyTorch)."""
    if x.dtype.storage_only:
        raise DTypeError(f"{op}: {x.dtype.name} is storage-only; cast it first")
    return x if x.dtype.is_float else cast(x, dt.float32)


def _scalar_like(x: GraphTensor, value: Any) -> GraphTensor:
    return full(x.graph, x.shape, value, x.dtype)


# ============================================================== arithmetic
@hl_op(torch="torch.add", category="arithmetic")
def add(a: Any, b: Any, alpha: float | int = 1) -> GraphTensor:
    if alpha != 1:
        b = mul(b, alpha)
    x, y = binary_operands(a, b, "add")
    return prim("Add", x, y)


@hl_op(torch="torch.sub", category="arithmetic", aliases=("subtract",))
def sub(a: Any, b: Any, alpha: float | int = 1) -> GraphTensor:
    x, y = binary_operands(a, b, "sub")
    if x.dtype.is_bool:
        raise DTypeError("sub: subtraction of bool tensors is not supported (use logical_xor)")
    return prim("Add", x, prim("Mul", y, _scalar_like(y, -alpha)))


@hl_op(torch="torch.mul", category="arithmetic", aliases=("multiply",))
def mul(a: Any, b: Any) -> GraphTensor:
    x, y = binary_operands(a, b, "mul")
    return prim("Mul", x, y)


@hl_op(torch="torch.div", category="arithmetic", aliases=("divide", "true_divide"))
def div(a: Any, b: Any, rounding_mode: str | None = None) -> GraphTensor:
    """True division (ints promote to float32); ``rounding_mode`` 'trunc' or 'floor' as in PyTorch."""
    if rounding_mode is not None:
        if rounding_mode == "floor":
            return floor_divide(a, b)
        if rounding_mode == "trunc":
            x, y = binary_operands(a, b, "div")
            if x.dtype.is_int:
                return _int_trunc_div(x, y)
            return trunc(div(x, y))
        raise ValueError(f"div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    rdt = dt.result_type(a, b)
    if not rdt.is_float:
        rdt = dt.float32
    x, y = binary_operands(a, b, "div", dtype=rdt)
    return prim("Mul", x, prim("Recip", y))


def _int_trunc_div(x: GraphTensor, y: GraphTensor) -> GraphTensor:
    # x = q*y + r with r = fmod(x, y) exactly, so q = (x - r) / y; compute via float64 division
    r = prim("Mod", x, y)
    q = div(cast(sub(x, r), dt.float64), cast(y, dt.float64))
    return cast(q, x.dtype)


@hl_op(torch="torch.floor_divide", category="arithmetic")
def floor_divide(a: Any, b: Any) -> GraphTensor:
    x, y = binary_operands(a, b, "floor_divide")
    if x.dtype.is_int:
        q = _int_trunc_div(x, y)
        # truncation differs from floor when the remainder is nonzero and the signs differ
        r = prim("Mod", x, y)
        adjust = logical_and(ne(r, 0), ne(lt(r, 0), lt(y, 0)))
        return sub(q, cast(adjust, x.dtype))
    return floor(div(x, y))


@hl_op(torch="torch.neg", category="arithmetic", aliases=("negative",))
def neg(x: GraphTensor) -> GraphTensor:
    if x.dtype.is_bool:
        raise DTypeError("neg: negation of a bool tensor is not supported (use logical_not)")
    return prim("Mul", x, _scalar_like(x, -1))


@hl_op(torch="torch.reciprocal", category="arithmetic")
def reciprocal(x: GraphTensor) -> GraphTensor:
    return prim("Recip", _float_operand(x, "reciprocal"))


@hl_op(torch="torch.fmod", category="arithmetic")
def fmod(a: Any, b: Any) -> GraphTensor:
    x, y = binary_operands(a, b, "fmod")
    return prim("Mod", x, y)


@hl_op(torch="torch.remainder", category="arithmetic")
def remainder(a: Any, b: Any) -> GraphTensor:
    """Floor-mod: the result has the divisor's sign (Python's %)."""
    x, y = binary_operands(a, b, "remainder")
    r = prim("Mod", x, y)
    fix = logical_and(ne(r, 0), ne(lt(r, 0), lt(y, 0)))
    return where(fix, add(r, y), r)


@hl_op(torch="torch.square", category="arithmetic")
def square(x: GraphTensor) -> GraphTensor:
    return prim("Mul", x, x)


@hl_op(torch="torch.pow", category="arithmetic")
def pow(a: Any, b: Any) -> GraphTensor:  # noqa: A001 - torch name
    """a ** b: integer scalar exponents by exact repeated multiplication, others via exp2/log2.

    Negative bases follow PyTorch: real results for integer exponents, NaN otherwise."""
    if isinstance(a, GraphTensor) and isinstance(b, (int, float)) and not isinstance(b, bool):
        if float(b).is_integer() and builtins.abs(b) <= 64:
            n = int(b)
            if a.dtype.is_int and n < 0:
                raise DTypeError("pow: integers to negative integer powers are not allowed")
            x = a if n >= 0 else _float_operand(a, "pow")
            result = _scalar_like(x, 1)
            base, k = x, builtins.abs(n)
            first = True
            while k:
                if k & 1:
                    result = base if first else prim("Mul", result, base)
                    first = False
                k >>= 1
                if k:
                    base = prim("Mul", base, base)
            return result if n >= 0 else prim("Recip", result)
        if b == 0.5:
            return sqrt(a)
    rdt = dt.result_type(a, b)
    if not rdt.is_float:
        rdt = dt.float32
    x, y = binary_operands(a, b, "pow", dtype=rdt)
    mag = exp2(mul(y, log2(abs(x))))
    y_int = eq(prim("Mod", y, _scalar_like(y, 1.0)), 0.0)
    y_odd = eq(prim("Mod", abs(y), _scalar_like(y, 2.0)), 1.0)
    neg_base = lt(x, 0.0)
    nan = _scalar_like(x, float("nan"))
    signed = where(y_int, where(y_odd, neg(mag), mag), nan)
    out = where(neg_base, signed, mag)
    return where(eq(y, 0.0), _scalar_like(x, 1.0), out)


# ============================================================== math functions
@hl_op(torch="torch.exp", category="math")
def exp(x: GraphTensor) -> GraphTensor:
    x = _float_operand(x, "exp")
    return prim("Exp2", mul(x, LOG2E))


@hl_op(torch="torch.exp2", category="math")
def exp2(x: GraphTensor) -> GraphTensor:
    return prim("Exp2", _float_operand(x, "exp2"))


@hl_op(torch="torch.log", category="math")
def log(x: GraphTensor) -> GraphTensor:
    x = _float_operand(x, "log")
    return mul(prim("Log2", x), LN2)


@hl_op(torch="torch.log2", category="math")
def log2(x: GraphTensor) -> GraphTensor:
    return prim("Log2", _float_operand(x, "log2"))


@hl_op(torch="torch.log1p", category="math")
def log1p(x: GraphTensor) -> GraphTensor:
    return log(add(_float_operand(x, "log1p"), 1.0))


@hl_op(torch="torch.expm1", category="math")
def expm1(x: GraphTensor) -> GraphTensor:
    return sub(exp(x), 1.0)


@hl_op(torch="torch.sin", category="math")
def sin(x: GraphTensor) -> GraphTensor:
    return prim("Sin", _float_operand(x, "sin"))


@hl_op(torch="torch.cos", category="math")
def cos(x: GraphTensor) -> GraphTensor:
    x = _float_operand(x, "cos")
    return prim("Sin", add(x, math.pi / 2))


@hl_op(torch="torch.tan", category="math")
def tan(x: GraphTensor) -> GraphTensor:
    return div(sin(x), cos(x))


@hl_op(torch="torch.sqrt", category="math")
def sqrt(x: GraphTensor) -> GraphTensor:
    return prim("Sqrt", _float_operand(x, "sqrt"))


@hl_op(torch="torch.rsqrt", category="math")
def rsqrt(x: GraphTensor) -> GraphTensor:
    return prim("Recip", sqrt(x))


@hl_op(torch="torch.abs", category="math", aliases=("absolute",))
def abs(x: GraphTensor) -> GraphTensor:  # noqa: A001 - torch name
    if x.dtype.is_bool:
        return x
    return mul(x, sign(x))


@hl_op(torch="torch.sign", category="math")
def sign(x: GraphTensor) -> GraphTensor:
    """-1, 0 or 1 (0 for NaN, as in PyTorch)."""
    if x.dtype.is_bool:
        return x
    return sub(cast(lt(0, x), x.dtype), cast(lt(x, 0), x.dtype))


@hl_op(torch="torch.floor", category="math")
def floor(x: GraphTensor) -> GraphTensor:
    if not x.dtype.is_float:
        return x
    t = trunc(x)
    return sub(t, cast(lt(x, t), x.dtype))


@hl_op(torch="torch.ceil", category="math")
def ceil(x: GraphTensor) -> GraphTensor:
    if not x.dtype.is_float:
        return x
    t = trunc(x)
    return add(t, cast(lt(t, x), x.dtype))


@hl_op(torch="torch.trunc", category="math")
def trunc(x: GraphTensor) -> GraphTensor:
    if not x.dtype.is_float:
        return x
    frac = prim("Mod", x, _scalar_like(x, 1.0))
    # inf: fmod(inf, 1) is NaN; keep inf as is
    return where(isinf(x), x, sub(x, frac))


@hl_op(torch="torch.sigmoid", category="activation")
def sigmoid(x: GraphTensor) -> GraphTensor:
    x = _float_operand(x, "sigmoid")
    return prim("Recip", add(exp(neg(x)), 1.0))


@hl_op(torch="torch.tanh", category="activation")
def tanh(x: GraphTensor) -> GraphTensor:
    x = _float_operand(x, "tanh")
    return sub(mul(sigmoid(mul(x, 2.0)), 2.0), 1.0)


@hl_op(torch="torch.relu", category="activation")
def relu(x: GraphTensor) -> GraphTensor:
    return maximum(x, 0)


@hl_op(torch="torch.nn.functional.silu", category="activation")
def silu(x: GraphTensor) -> GraphTensor:
    return mul(x, sigmoid(x))


@hl_op(torch="torch.erf", category="math")
def erf(x: GraphTensor) -> GraphTensor:
    """Abramowitz & Stegun 7.1.26 (max abs error 1.5e-7): exp, Recip, polynomial, sign."""
    x = _float_operand(x, "erf")
    s = sign(x)
    a = abs(x)
    t = prim("Recip", add(mul(a, 0.3275911), 1.0))
    poly = _scalar_like(t, 1.061405429)
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly = add(mul(poly, t), c)
    y = sub(1.0, mul(mul(poly, t), exp(neg(mul(a, a)))))
    return mul(s, y)


@hl_op(torch="torch.nn.functional.gelu", category="activation")
def gelu(x: GraphTensor, approximate: str = "none") -> GraphTensor:
    """GELU: exact (erf) form, or ``approximate='tanh'``."""
    x = _float_operand(x, "gelu")
    if approximate == "tanh":
        inner = mul(add(x, mul(mul(mul(x, x), x), 0.044715)), math.sqrt(2.0 / math.pi))
        return mul(mul(x, 0.5), add(tanh(inner), 1.0))
    if approximate != "none":
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return mul(mul(x, 0.5), add(erf(mul(x, 1.0 / math.sqrt(2.0))), 1.0))


@hl_op(torch="torch.nn.functional.softplus", category="activation")
def softplus(x: GraphTensor, beta: float = 1.0, threshold: float = 20.0) -> GraphTensor:
    x = _float_operand(x, "softplus")
    bx = mul(x, beta)
    soft = div(log1p(exp(bx)), beta)
    return where(lt(threshold, bx), x, soft)


# ============================================================== comparisons and logic
@hl_op(torch="torch.lt", category="comparison", aliases=("less",))
def lt(a: Any, b: Any) -> GraphTensor:
    x, y = binary_operands(a, b, "lt")
    return prim("LessThan", x, y)


@hl_op(torch="torch.gt", category="comparison", aliases=("greater",))
def gt(a: Any, b: Any) -> GraphTensor:
    x, y = binary_operands(a, b, "gt")
    return prim("LessThan", y, x)


@hl_op(torch="torch.le", category="comparison", aliases=("less_equal",))
def le(a: Any, b: Any) -> GraphTensor:
    x, y = binary_operands(a, b, "le")
    r = logical_not(prim("LessThan", y, x))
    return _and_not_nan(r, x, y)


@hl_op(torch="torch.ge", category="comparison", aliases=("greater_equal",))
def ge(a: Any, b: Any) -> GraphTensor:
    x, y = binary_operands(a, b, "ge")
    r = logical_not(prim("LessThan", x, y))
    return _and_not_nan(r, x, y)


@hl_op(torch="torch.eq", category="comparison")
def eq(a: Any, b: Any) -> GraphTensor:
    x, y = binary_operands(a, b, "eq")
    r = logical_not(prim("Add", prim("LessThan", x, y), prim("LessThan", y, x)))
    return _and_not_nan(r, x, y)


@hl_op(torch="torch.ne", category="comparison", aliases=("not_equal",))
def ne(a: Any, b: Any) -> GraphTensor:
    return logical_not(eq(a, b))


def _and_not_nan(r: GraphTensor, x: GraphTensor, y: GraphTensor) -> GraphTensor:
    if not x.dtype.is_float:
        return r
    return prim("Mul", prim("Mul", r, logical_not(isnan(x))), logical_not(isnan(y)))


@hl_op(torch="torch.isnan", category="comparison")
def isnan(x: GraphTensor) -> GraphTensor:
    """NaN is the only value neither below +inf nor above -inf."""
    if not x.dtype.is_float:
        return full(x.graph, x.shape, False, dt.bool_)
    below = prim("LessThan", x, _scalar_like(x, float("inf")))
    above = prim("LessThan", _scalar_like(x, float("-inf")), x)
    return logical_not(prim("Add", below, above))


@hl_op(torch="torch.isinf", category="comparison")
def isinf(x: GraphTensor) -> GraphTensor:
    if not x.dtype.is_float:
        return full(x.graph, x.shape, False, dt.bool_)
    below = prim("LessThan", x, _scalar_like(x, float("inf")))
    above = prim("LessThan", _scalar_like(x, float("-inf")), x)
    finite_or_nan = prim("Mul", below, above)
    return logical_and(logical_not(finite_or_nan), logical_not(isnan(x)))


@hl_op(torch="torch.isfinite", category="comparison")
def isfinite(x: GraphTensor) -> GraphTensor:
    if not x.dtype.is_float:
        return full(x.graph, x.shape, True, dt.bool_)
    below = prim("LessThan", x, _scalar_like(x, float("inf")))
    above = prim("LessThan", _scalar_like(x, float("-inf")), x)
    return prim("Mul", below, above)


def _to_bool(x: Any, g) -> GraphTensor:
    t = as_tensor(x, g)
    return t if t.dtype.is_bool else ne(t, 0)


@hl_op(torch="torch.logical_not", category="logic")
def logical_not(x: GraphTensor) -> GraphTensor:
    b = _to_bool(x, x.graph)
    return prim("LessThan", b, full(b.graph, b.shape, True, dt.bool_))


@hl_op(torch="torch.logical_and", category="logic")
def logical_and(a: Any, b: Any) -> GraphTensor:
    g = graph_of(a, b)
    x, y = binary_operands(_to_bool(a, g), _to_bool(b, g), "logical_and")
    return prim("Mul", x, y)


@hl_op(torch="torch.logical_or", category="logic")
def logical_or(a: Any, b: Any) -> GraphTensor:
    g = graph_of(a, b)
    x, y = binary_operands(_to_bool(a, g), _to_bool(b, g), "logical_or")
    return prim("Add", x, y)


@hl_op(torch="torch.logical_xor", category="logic")
def logical_xor(a: Any, b: Any) -> GraphTensor:
    g = graph_of(a, b)
    x, y = binary_operands(_to_bool(a, g), _to_bool(b, g), "logical_xor")
    return ne(x, y)


# ============================================================== select, min/max
@hl_op(torch="torch.where", category="select", method=False)
def where(condition: Any, a: Any, b: Any) -> GraphTensor:
    """Exact select: Scatter writes ``a`` where ``condition`` holds into a copy of ``b``
    (the other positions get an out-of-range index, which Scatter skips)."""
    g = graph_of(condition, a, b)
    c = _to_bool(condition, g)
    rdt = dt.result_type(a, b)
    ta, tb = as_tensor(a, g, rdt), as_tensor(b, g, rdt)
    shape = broadcast_shapes(c.shape, ta.shape, tb.shape, op="where")
    c, ta, tb = (broadcast_to(t, shape, "where") for t in (c, ta, tb))
    from ..symbolic import prod

    n = prod(shape)
    idt = dt.int64
    pos = g.iota(sym(INDEX_VAR), shape, idt)
    skip = prim("Mul", cast(logical_not(c), idt), fill_expr(g, n, shape, idt))
    return prim("Scatter", tb, prim("Add", pos, skip), ta)


def _stack2_reduce_max(x: GraphTensor, y: GraphTensor) -> GraphTensor:
    """max(x, y) element-wise: stack along a new last axis (pad + add) and MaxReduce it."""
    shp = x.shape + (1,)
    xs = x.with_view(x.st.reshape(shp).pad([(0, 0)] * x.ndim + [(0, 1)]))
    ys = y.with_view(y.st.reshape(shp).pad([(0, 0)] * y.ndim + [(1, 0)]))
    return prim("MaxReduce", prim("Add", xs, ys), arg=x.ndim)


def order_reverse(x: GraphTensor) -> GraphTensor:
    """An order-reversing bijection: -x for floats, ~x = -1 - x for integers, not x for bool."""
    if x.dtype.is_bool:
        return logical_not(x)
    if x.dtype.is_float:
        return neg(x)
    return prim("Add", prim("Mul", x, _scalar_like(x, -1)), _scalar_like(x, -1))


@hl_op(torch="torch.maximum", category="select", aliases=("max_elementwise",))
def maximum(a: Any, b: Any) -> GraphTensor:
    x, y = binary_operands(a, b, "maximum")
    return _stack2_reduce_max(x, y)


@hl_op(torch="torch.minimum", category="select")
def minimum(a: Any, b: Any) -> GraphTensor:
    x, y = binary_operands(a, b, "minimum")
    return order_reverse(_stack2_reduce_max(order_reverse(x), order_reverse(y)))


@hl_op(torch="torch.clamp", category="select", aliases=("clip",))
def clamp(x: GraphTensor, min: Any = None, max: Any = None) -> GraphTensor:  # noqa: A002
    if min is None and max is None:
        raise ValueError("clamp: at least one of min and max must be given")
    out = x
    if min is not None:
        out = maximum(out, min)
    if max is not None:
        out = minimum(out, max)
    return out


# ============================================================== casts
@hl_op(torch="torch.Tensor.to", category="cast", aliases=("cast", "type"))
def to(x: GraphTensor, dtype: DType | str) -> GraphTensor:
    return cast(x, dtype)


def _cast_method(name: str, dtype: DType):
    def f(x: GraphTensor) -> GraphTensor:
        return cast(x, dtype)
    f.__name__ = name
    f.__doc__ = f"Cast to {dtype.name}."
    return f


for _n, _d in (("float", dt.float32), ("double", dt.float64), ("half", dt.float16), ("bfloat16", dt.bfloat16),
               ("int", dt.int32), ("long", dt.int64), ("bool", dt.bool_)):
    setattr(GraphTensor, _n, _cast_method(_n, _d))


# ============================================================== operators
def _swap(f):
    return lambda a, b: f(b, a)


GraphTensor.__add__ = add
GraphTensor.__radd__ = _swap(add)
GraphTensor.__sub__ = sub
GraphTensor.__rsub__ = _swap(sub)
GraphTensor.__mul__ = mul
GraphTensor.__rmul__ = _swap(mul)
GraphTensor.__truediv__ = div
GraphTensor.__rtruediv__ = _swap(div)
GraphTensor.__floordiv__ = floor_divide
GraphTensor.__rfloordiv__ = _swap(floor_divide)
GraphTensor.__mod__ = remainder
GraphTensor.__rmod__ = _swap(remainder)
GraphTensor.__pow__ = pow
GraphTensor.__rpow__ = _swap(pow)
GraphTensor.__neg__ = neg
GraphTensor.__abs__ = abs
GraphTensor.__lt__ = lt
GraphTensor.__le__ = le
GraphTensor.__gt__ = gt
GraphTensor.__ge__ = ge
GraphTensor.__eq__ = eq  # type: ignore[assignment]  # element-wise, as in PyTorch
GraphTensor.__ne__ = ne  # type: ignore[assignment]
GraphTensor.__and__ = logical_and
GraphTensor.__rand__ = _swap(logical_and)
GraphTensor.__or__ = logical_or
GraphTensor.__ror__ = _swap(logical_or)
GraphTensor.__xor__ = logical_xor
GraphTensor.__rxor__ = _swap(logical_xor)
GraphTensor.__invert__ = logical_not


@hl_op(torch="torch.Tensor.masked_fill", category="select")
def masked_fill(x: GraphTensor, mask: GraphTensor, value: Any) -> GraphTensor:
    """``value`` where ``mask`` is true, else ``x`` (mask broadcasts to x's shape; dtype stays x's)."""
    v = value if isinstance(value, GraphTensor) else full(x.graph, (), value, x.dtype)
    return where(broadcast_to(_to_bool(mask, x.graph), x.shape, "masked_fill"), cast(v, x.dtype), x)


@hl_op(torch="torch.full_like", category="creation")
def full_like(x: GraphTensor, fill_value: Any, dtype: DType | None = None) -> GraphTensor:
    return full(x.graph, x.shape, fill_value, dt.as_dtype(dtype) if dtype is not None else x.dtype)


@hl_op(torch="torch.zeros_like", category="creation")
def zeros_like(x: GraphTensor, dtype: DType | None = None) -> GraphTensor:
    return full_like(x, 0, dtype)


@hl_op(torch="torch.ones_like", category="creation")
def ones_like(x: GraphTensor, dtype: DType | None = None) -> GraphTensor:
    return full_like(x, 1, dtype)
