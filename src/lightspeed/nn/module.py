"""Modules and the builder they emit into.

A :class:`Module` holds parameter *names* and shapes, never values: its ``forward`` appends graph
nodes, and each parameter becomes a graph input named like its Hugging Face ``state_dict`` key
(``model.layers.0.self_attn.q_proj.weight``).  The compiled program is therefore independent of
the weight values; they are passed at call time like any other input.

A :class:`Builder` wraps one :class:`~lightspeed.Graph`: it declares the graph input of a
parameter on first use (the same module used twice, or a tied weight, gives one input; in its
``storage`` dtype where one is given, e.g. a GGUF file's Q4_1 blocks, then cast to the compute
dtype: the backend's rules may read the blocks instead) and memoises subgraphs that many layers
share (rotary tables, attention masks), so they are computed once per program call.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, TypeVar

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import ShapeError
from ..graph import Graph, GraphTensor

__all__ = ["Builder", "Module"]

T = TypeVar("T")


class Builder:
    """Emits one graph: parameters as named inputs (declared once), shared subgraphs memoised."""

    def __init__(self, graph: Graph | None = None, dtype: DType | str = dt.float32,
                 storage: Mapping[str, DType] | None = None) -> None:
        self.graph = graph if graph is not None else Graph()
        self.dtype = dt.as_dtype(dtype)
        # parameters stored in another dtype (a GGUF file's block types): declared so, cast on use
        self.storage = dict(storage or {})
        self.params: dict[str, GraphTensor] = {}
        self._shared: dict[Hashable, Any] = {}
        # a mixture-of-experts prompt's form where the model's config says "auto" (nn/moe.py)
        self.moe_prefill = "dense"

    def param(self, name: str, shape: tuple[int, ...], dtype: DType | None = None) -> GraphTensor:
        """The graph input for parameter ``name``; a second use must agree on the shape."""
        t = self.params.get(name)
        if t is None:
            want = dtype or self.dtype
            stored = self.storage.get(name, want)
            t = self.graph.input(name, shape, stored)
            t = self.params[name] = t if stored == want else t.to(want)
        elif tuple(int(d) for d in t.shape) != tuple(shape):
            raise ShapeError(f"parameter {name!r} is used with shape {tuple(shape)} but was declared "
                             f"with shape {tuple(int(d) for d in t.shape)}")
        return t

    def shared(self, key: Hashable, make: Callable[[], T]) -> T:
        """``make()`` once per key and graph (hash-consing would dedupe the nodes anyway; this also
        skips rebuilding them, and keeps subgraphs with different views from being rebuilt)."""
        if key not in self._shared:
            self._shared[key] = make()
        return self._shared[key]


class Module:
    """Base class: a name prefix, parameter shapes, child modules found among the attributes."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def pname(self, leaf: str) -> str:
        """Full parameter name of ``leaf`` under this module's prefix."""
        return f"{self.prefix}.{leaf}" if self.prefix else leaf

    def own_params(self) -> dict[str, tuple[int, ...]]:
        """This module's own parameters (full name -> shape); children are found automatically."""
        return {}

    def children(self) -> Iterator[Module]:
        for v in vars(self).values():
            if isinstance(v, Module):
                yield v
            elif isinstance(v, (list, tuple)):
                yield from (m for m in v if isinstance(m, Module))

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter of this module and its children: full name -> shape."""
        out = dict(self.own_params())
        for c in self.children():
            out.update(c.param_shapes())
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.prefix!r})"
