"""Shared helpers for high-level ops: operand coercion, broadcasting, promotion, axes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import DTypeError, ShapeError, describe_operands
from ..graph import Graph, GraphTensor, normalize_axis
from ..primitives import PRIMITIVES
from ..symbolic import INDEX_VAR, Expr, ExprLike, as_expr, prod, sym

__all__ = [
    "prim", "graph_of", "as_tensor", "full", "fill_expr", "broadcast_shapes", "broadcast_to",
    "cast", "binary_operands", "norm_axis", "norm_axes", "index_dtype", "is_scalar", "fmt_shape",
]

Shape = tuple[Expr, ...]


def prim(op: str, *inputs: GraphTensor, arg: Any = None, graph: Graph | None = None) -> GraphTensor:
    """Append primitive ``op`` to the graph of its operands."""
    g = graph if graph is not None else inputs[0].graph
    return g.add_node(PRIMITIVES[op], list(inputs), arg)


def is_scalar(x: object) -> bool:
    return isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating))


def graph_of(*xs: object) -> Graph:
    for x in xs:
        if isinstance(x, GraphTensor):
            return x.graph
        if isinstance(x, (list, tuple)):
            for y in x:
                if isinstance(y, GraphTensor):
                    return y.graph
    raise TypeError("at least one operand must be a GraphTensor")


def fmt_shape(shape: Sequence[ExprLike]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def full(graph: Graph, shape: Sequence[ExprLike], value: Any, dtype: DType) -> GraphTensor:
    """A tensor filled with ``value`` (a scalar constant seen through a broadcast view)."""
    shape = tuple(as_expr(d) for d in shape)
    c = graph.constant(value, dtype)
    st = c.st.reshape((1,) * len(shape)).expand(shape)
    return c.with_view(st)


def axis_positions(x: GraphTensor, k: int) -> GraphTensor:
    """int64 tensor of x's shape holding each element's position along axis k: no 64-bit modulo
    per element where no axis lies before k (a [1, vocab] row of logits: the flat index is below
    x.shape[k] * inner already; ~20 us of a 1B's argmax on an H100)."""
    index = sym(INDEX_VAR) // prod(x.shape[k + 1:])
    outer = prod(x.shape[:k])
    return x.graph.iota(index if outer.is_const and outer.value == 1 else index % x.shape[k], x.shape, dt.int64)


def fill_expr(graph: Graph, expr: ExprLike, shape: Sequence[ExprLike], dtype: DType = dt.int64) -> GraphTensor:
    """A tensor filled with the (possibly symbolic) integer value ``expr``."""
    e = as_expr(expr)
    if e.is_const:
        return full(graph, shape, e.value, dtype)
    itype = dtype if dtype.is_int else dt.int64
    return cast(graph.iota(e, shape, itype), dtype)


def as_tensor(x: Any, graph: Graph, dtype: DType | None = None) -> GraphTensor:
    if isinstance(x, GraphTensor):
        return x if dtype is None else cast(x, dtype)
    if is_scalar(x):
        return graph.constant(x, dtype or dt.scalar_dtype(x))
    if isinstance(x, (np.ndarray, list, tuple)):
        return graph.constant(np.asarray(x), dtype)
    raise TypeError(f"cannot use {type(x).__name__} as a tensor operand")


def cast(x: GraphTensor, dtype: DType | str) -> GraphTensor:
    dtype = dt.as_dtype(dtype)
    if x.dtype == dtype:
        return x
    return prim("Cast", x, arg=dtype)


def broadcast_shapes(*shapes: Sequence[Expr], op: str = "broadcast") -> Shape:
    """NumPy/PyTorch broadcasting of symbolic shapes; dims must be equal or literally 1."""
    ndim = max((len(s) for s in shapes), default=0)
    out: list[Expr] = []
    for k in range(ndim):
        dim: Expr | None = None
        for s in shapes:
            j = k - (ndim - len(s))
            if j < 0:
                continue
            d = as_expr(s[j])
            if d == 1:
                continue
            if dim is None or dim == d:
                dim = d
            else:
                raise ShapeError(f"{op}: shapes {', '.join(fmt_shape(s) for s in shapes)} are not "
                                 f"broadcastable (dim {k}: {dim} vs {d})")
        out.append(dim if dim is not None else as_expr(1))
    return tuple(out)


def broadcast_to(x: GraphTensor, shape: Sequence[ExprLike], op: str = "broadcast_to") -> GraphTensor:
    shape = tuple(as_expr(d) for d in shape)
    if x.shape == shape:
        return x
    if len(shape) < x.ndim:
        raise ShapeError(f"{op}: cannot broadcast shape {fmt_shape(x.shape)} to {fmt_shape(shape)}")
    lead = (as_expr(1),) * (len(shape) - x.ndim)
    st = x.st.reshape(lead + x.shape) if lead else x.st
    for k, (a, b) in enumerate(zip(st.shape, shape)):
        if a != b and a != 1:
            raise ShapeError(f"{op}: cannot broadcast shape {fmt_shape(x.shape)} to {fmt_shape(shape)} "
                             f"(dim {k}: {a} vs {b})")
    return x.with_view(st.expand(shape))


def binary_operands(a: Any, b: Any, op: str, dtype: DType | None = None,
                    allow_storage_only: bool = False) -> tuple[GraphTensor, GraphTensor]:
    """Promote (PyTorch rules) and broadcast two operands, one of which may be a Python scalar."""
    g = graph_of(a, b)
    try:
        rdt = dtype or dt.result_type(a, b)
    except TypeError as e:
        raise DTypeError(f"{op}: {e} (operands: {describe_operands([a, b])})") from None
    ta, tb = as_tensor(a, g, rdt), as_tensor(b, g, rdt)
    shape = broadcast_shapes(ta.shape, tb.shape, op=op)
    return broadcast_to(ta, shape, op), broadcast_to(tb, shape, op)


def norm_axis(axis: int, ndim: int, op: str) -> int:
    return normalize_axis(axis, ndim, op)


def norm_axes(dim: int | Sequence[int] | None, ndim: int, op: str) -> list[int]:
    """Sorted, unique, non-negative axes; None means all axes."""
    if dim is None:
        return list(range(ndim))
    if isinstance(dim, (int, np.integer)):
        dim = [int(dim)]
    axes = sorted({norm_axis(d, ndim, op) for d in dim})
    if len(axes) != len(list(dim)):
        raise ShapeError(f"{op}: dim {tuple(dim)} repeats an axis")
    return axes


def index_dtype(numel: ExprLike) -> DType:
    """int32 when ``numel`` is a known constant below 2**31, else int64."""
    n = as_expr(numel)
    return dt.int32 if n.is_const and n.value < 2**31 else dt.int64


def numel_of(shape: Sequence[ExprLike]) -> Expr:
    return prod(shape)
