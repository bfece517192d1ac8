"""The lazy graph (HLIR): nodes of primitive ops whose inputs are views of earlier nodes.

``Graph`` owns an append-only list of :class:`Node`; a node's inputs always come earlier, so the
list is a topological order.  Identical nodes (same op, same input views, same argument) are
hash-consed: building the same sub-expression twice yields one node.

``GraphTensor`` is what users hold: a node plus the view (:class:`ShapeTracker`) through which
it is seen.  Movement ops only change the view; every other op appends a node.  High-level ops
(``softmax``, ``conv2d``, ...) live in :mod:`lightspeed.hl` and attach themselves as methods.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import dtypes as dt
from .dtypes import DType
from .errors import DTypeError, GraphError, LightspeedError, OperandError, ShapeError, describe_operands
from .primitives import PRIMITIVES, ConstantValue, InputArg, IotaArg, PrimitiveOp, by_name
from .shape import ShapeTracker
from .symbolic import Expr, ExprLike, as_expr, prod

if TYPE_CHECKING:
    from .backends.base import Backend
    from .program import Program

__all__ = ["Graph", "GraphTensor", "Node"]

Shape = tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class Node:
    id: int
    op: PrimitiveOp
    inputs: tuple[tuple[int, ShapeTracker], ...]
    arg: Any
    dtype: DType
    shape: Shape

    def __repr__(self) -> str:
        return f"%{self.id}:{self.op.name}"


class Graph:
    """A lazy computation graph.  See the module docstring and README for the API tour."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.inputs: dict[str, int] = {}
        self.outputs: dict[str, int] = {}
        self.output_aliases: dict[str, str] = {}  # output name -> the input it is written into
        self._dedup: dict[tuple, int] = {}

    # ------------------------------------------------------------------ building
    def add_node(self, op: PrimitiveOp | str, inputs: Sequence[GraphTensor], arg: Any = None) -> GraphTensor:
        """Append a primitive op (checked by its dtype and shape rules) and return its result."""
        if isinstance(op, str):
            op = by_name(op)
        if len(inputs) != op.arity:
            raise LightspeedError(f"{op.name} takes {op.arity} operands, got {len(inputs)}"
                                  + (f" ({describe_operands(inputs)})" if inputs else ""))
        for t in inputs:
            if not isinstance(t, GraphTensor):
                raise OperandError(f"{op.name}: operand {t!r} is not a GraphTensor")
            if t.graph is not self:
                raise LightspeedError(f"{op.name}: operand {t!r} belongs to a different Graph "
                                      f"(operands: {describe_operands(inputs)}); build all operands in one Graph")
        try:
            dtype = op.dtype_rule(tuple(t.dtype for t in inputs), arg)
            shape = op.shape_rule(tuple(t.shape for t in inputs), arg)
        except (ShapeError, DTypeError) as e:
            raise type(e)(f"{e} (operands: {describe_operands(inputs)})") from None
        key = (op.name, tuple((t.node, t.st) for t in inputs), arg)
        nid = self._dedup.get(key)
        if nid is None:
            nid = len(self.nodes)
            self.nodes.append(Node(nid, op, key[1], arg, dtype, tuple(shape)))
            self._dedup[key] = nid
        return GraphTensor(self, nid, ShapeTracker.contiguous(shape), dtype)

    def input(self, name: str, shape: Sequence[ExprLike], dtype: DType | str = dt.float32) -> GraphTensor:
        """A named input.  Dims are ints, symbol names (``"batch"``) or expressions (``"s+1"``)."""
        if not isinstance(name, str) or not name:
            raise GraphError(f"input name must be a non-empty string, got {name!r}")
        if name in self.inputs:
            raise GraphError(f"graph already has an input named {name!r}")
        if isinstance(shape, (int, str, Expr)):
            shape = (shape,)
        shp = tuple(as_expr(d) for d in shape)
        for d in shp:
            if d.is_const and d.value < 0:
                raise ShapeError(f"input {name!r}: negative dimension {d} in shape {tuple(shp)}")
        dtype = dt.as_dtype(dtype)
        if dtype.block and (len(shp) != 2 or not all(d.is_const for d in shp) or shp[1].value % dtype.block[0]):
            raise ShapeError(f"input {name!r}: a {dtype.name} input is a static [rows, cols] matrix with cols a "
                             f"multiple of {dtype.block[0]} (whole blocks per row), got shape {tuple(shp)}")
        t = self.add_node(PRIMITIVES["Input"], [], InputArg(name, shp, dtype))
        self.inputs[name] = t.node
        return t

    def constant(self, value: Any, dtype: DType | str | None = None) -> GraphTensor:
        """A constant scalar or array (copied).  dtype defaults as in PyTorch."""
        if dtype is None:
            if isinstance(value, np.ndarray):
                dtype = dt.as_dtype(value.dtype)
            elif isinstance(value, (list, tuple)):
                arr = np.asarray(value)
                dtype = dt.float32 if arr.dtype.kind == "f" else dt.as_dtype(arr.dtype)
                if arr.dtype.kind in "iu":
                    dtype = dt.int64
            else:
                dtype = dt.scalar_dtype(value)
        return self.add_node(PRIMITIVES["Constant"], [], ConstantValue(value, dt.as_dtype(dtype)))

    def iota(self, expr: ExprLike, shape: Sequence[ExprLike], dtype: DType = dt.int32) -> GraphTensor:
        """Integer tensor whose element at flat index ``z`` is ``expr(z)``."""
        shp = tuple(as_expr(d) for d in shape)
        return self.add_node(PRIMITIVES["Iota"], [], IotaArg(as_expr(expr), shp, dt.as_dtype(dtype)))

    def output(self, name: str, tensor: GraphTensor, aliases: str | None = None) -> GraphTensor:
        """Mark ``tensor`` as the program output ``name``.

        ``aliases``: the name of an input of the same shape and dtype that this output is written
        into (Luminal's ``output_aliases_input``): after a call the caller's array holds the
        output, and a backend may compute it in place (a KV cache updated by its new rows)."""
        if not isinstance(tensor, GraphTensor) or tensor.graph is not self:
            raise OperandError(f"output {name!r}: expected a GraphTensor of this graph, got {tensor!r}")
        if name in self.outputs:
            raise GraphError(f"graph already has an output named {name!r}")
        if aliases is not None:
            if aliases not in self.inputs:
                raise GraphError(f"output {name!r} aliases {aliases!r}, which is not an input of this graph")
            arg = self.nodes[self.inputs[aliases]].arg
            if tuple(tensor.shape) != tuple(arg.shape) or tensor.dtype != arg.dtype:
                raise ShapeError(f"output {name!r} aliases input {aliases!r}: it must have the input's shape and "
                                 f"dtype {arg.dtype.name}[{', '.join(map(str, arg.shape))}], got {tensor!r}")
            if aliases in self.output_aliases.values():
                raise GraphError(f"input {aliases!r} is already aliased by another output")
        t = self.add_node(PRIMITIVES["Output"], [tensor], name)
        self.outputs[name] = t.node
        if aliases is not None:
            self.output_aliases[name] = aliases
        return tensor

    # ------------------------------------------------------------------ queries
    def symbols(self) -> set[str]:
        """All dim symbols used anywhere in the graph."""
        out: set[str] = set()
        for n in self.nodes:
            for d in n.shape:
                out |= d.free_vars()
            for _, st in n.inputs:
                for v in st.views:
                    for e in (*v.shape, *v.strides, v.offset):
                        out |= e.free_vars()
            if isinstance(n.arg, IotaArg):
                out |= n.arg.expr.free_vars() - {"z"}
        return out

    def reachable(self, roots: Iterable[int] | None = None) -> list[int]:
        """Ids of nodes that the outputs (or ``roots``) depend on, in topological order."""
        roots = list(self.outputs.values()) if roots is None else list(roots)
        seen = set(roots)
        stack = list(roots)
        while stack:
            for src, _ in self.nodes[stack.pop()].inputs:
                if src not in seen:
                    seen.add(src)
                    stack.append(src)
        return sorted(seen)

    def count_ops(self, roots: Iterable[int] | None = None) -> dict[str, int]:
        counts: dict[str, int] = {}
        for i in self.reachable(roots):
            name = self.nodes[i].op.name
            counts[name] = counts.get(name, 0) + 1
        return counts

    # ------------------------------------------------------------------ compile
    def compile(self, backend: str | Backend | None = None, **options: Any) -> Program:
        """A callable :class:`Program` of the graph's outputs for ``backend`` (a name or a Backend): by
        default the best this machine has (``cuda`` with a GPU, else ``cpu``); ``"reference"`` is the exact oracle."""
        import lightspeed  # lightspeed.pipeline sits above this module: the lazy root (PEP 562) imports it

        return lightspeed.pipeline.compile(self, backend, **options)

    # ------------------------------------------------------------------ printing
    def __str__(self) -> str:
        lines = []
        for i in self.reachable() if self.outputs else range(len(self.nodes)):
            n = self.nodes[i]
            ins = []
            for src, st in n.inputs:
                d = st.describe()
                ins.append(f"%{src}" + (f"[{d}]" if d else ""))
            arg = _fmt_arg(n)
            shape = ", ".join(str(d) for d in n.shape)
            lines.append(f"%{n.id} = {n.op.name}{arg}({', '.join(ins)}) : {n.dtype.name}[{shape}]")
        return "\n".join(lines)

    def to_dot(self) -> str:
        """Graphviz DOT source of the reachable graph."""
        out = ["digraph lightspeed {", "  rankdir=TB;", '  node [shape=box, fontname="monospace"];']
        for i in self.reachable() if self.outputs else range(len(self.nodes)):
            n = self.nodes[i]
            shape = ", ".join(str(d) for d in n.shape)
            label = f"{n.op.name}{_fmt_arg(n)}\\n{n.dtype.name}[{shape}]".replace('"', '\\"')
            style = ', style=filled, fillcolor="#dde8ff"' if n.op.category == "io" else ""
            out.append(f'  n{n.id} [label="{label}"{style}];')
            for src, st in n.inputs:
                d = st.describe().replace('"', '\\"')
                out.append(f'  n{src} -> n{n.id}' + (f' [label="{d}", fontsize=8]' if d else "") + ";")
        out.append("}")
        return "\n".join(out)


def _fmt_arg(n: Node) -> str:
    a = n.arg
    if a is None:
        return ""
    shown = a.name if isinstance(a, DType) else a.expr if isinstance(a, IotaArg) else repr(
        a.name if isinstance(a, InputArg) else a)
    return f"({shown})"


class GraphTensor:
    """A lazy tensor: a node of a :class:`Graph` seen through a view.

    Arithmetic, comparison and indexing operators, and methods such as ``sum``, ``softmax``,
    ``matmul`` and ``reshape`` are attached by :mod:`lightspeed.hl`; their names and signatures
    follow PyTorch.
    """

    __slots__ = ("graph", "node", "st", "dtype")
    __array_priority__ = 1000  # make numpy defer to our reflected operators

    def __init__(self, graph: Graph, node: int, st: ShapeTracker, dtype: DType):
        self.graph = graph
        self.node = node
        self.st = st
        self.dtype = dtype

    @property
    def shape(self) -> Shape:
        return self.st.shape

    @property
    def ndim(self) -> int:
        return len(self.st.shape)

    def dim(self) -> int:
        return self.ndim

    def size(self, dim: int | None = None):
        if dim is None:
            return self.shape
        return self.shape[normalize_axis(dim, self.ndim, "size")]

    def numel(self) -> Expr:
        return prod(self.shape)

    def with_view(self, st: ShapeTracker) -> GraphTensor:
        return GraphTensor(self.graph, self.node, st, self.dtype)

    def __repr__(self) -> str:
        shape = ", ".join(str(d) for d in self.shape)
        return f"GraphTensor(%{self.node}, {self.dtype.name}[{shape}])"

    def __bool__(self) -> bool:
        raise OperandError("a lazy GraphTensor has no truth value (it is not computed yet)")

    def __len__(self) -> int:
        if not self.shape:
            raise OperandError("len() of a 0-d tensor")
        return int(self.shape[0])

    def __iter__(self):
        raise OperandError("a lazy GraphTensor cannot be iterated; index it or use unbind()")

    __hash__ = object.__hash__


def normalize_axis(axis: int, ndim: int, op: str) -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise OperandError(f"{op}: dim must be an int, got {axis!r}")
    a = int(axis)
    lo = -max(ndim, 1)
    if not lo <= a < max(ndim, 1):
        raise ShapeError(f"{op}: dim {axis} out of range for a tensor of rank {ndim}")
    return a % max(ndim, 1)
