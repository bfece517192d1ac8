"""A compiled program: what every backend returns from ``compile``.

:class:`Program` owns the part that is the same for every backend: checking the caller's inputs
against the graph's declared inputs (names, ranks, dims, dtypes) and binding dim symbols from
the input shapes (or from explicit ``dims=``).  A backend subclasses it and implements
:meth:`Program.execute`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from . import dtypes as dt
from .errors import InputError
from .graph import Graph
from .primitives import InputArg
from .symbolic import Expr

__all__ = ["Program", "to_numpy"]


def to_numpy(value: Any, what: str) -> np.ndarray:
    """numpy view of an input value (numpy arrays/scalars, or torch CPU tensors)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.generic):
        return np.asarray(value)
    if type(value).__module__.startswith("torch"):
        import torch

        if isinstance(value, torch.Tensor):
            t = value.detach().cpu()
            d = dt.as_dtype(t.dtype)
            if t.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
                bits = torch.int16 if d.itemsize == 2 else torch.uint8
                return t.contiguous().view(bits).numpy().view(d.np)
            return t.numpy()
    raise InputError(f"{what}: expected a numpy array (or torch tensor), got {type(value).__name__}")


class Program:
    """Callable compiled graph: ``prog(x=array, ...)`` or ``prog({"x": array}, dims={"s": 4})``."""

    backend_name = "abstract"

    def __init__(self, graph: Graph):
        self.graph = graph
        self.input_args: dict[str, InputArg] = {name: graph.nodes[nid].arg for name, nid in graph.inputs.items()}
        self.output_names = tuple(graph.outputs)
        self.symbols = frozenset(graph.symbols())

    def bind(self, inputs: Mapping[str, Any], dims: Mapping[str, int] | None = None
             ) -> tuple[dict[str, np.ndarray], dict[str, int]]:
        """Check inputs and bind dims. Returns (arrays by input name, dim values)."""
        env: dict[str, int] = {}
        for k, v in (dims or {}).items():
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise InputError(f"dim {k!r}: expected a non-negative int, got {v!r}")
            env[k] = int(v)
        extra = set(inputs) - set(self.input_args)
        if extra:
            raise InputError(f"unexpected input(s) {sorted(extra)}; the program takes {sorted(self.input_args)}")
        missing = [n for n in self.input_args if n not in inputs]
        if missing:
            raise InputError(f"missing input(s) {missing}; the program takes {sorted(self.input_args)}")
        arrays: dict[str, np.ndarray] = {}
        deferred: list[tuple[str, int, Expr, int]] = []
        for name, arg in self.input_args.items():
            a = to_numpy(inputs[name], f"input {name!r}")
            want = arg.dtype
            if a.dtype != want.np:
                mod = "ml_dtypes" if want.np.kind == "V" else "np"  # bfloat16/float8 are ml_dtypes types
                raise InputError(f"input {name!r}: expected dtype {want.name}, got {a.dtype} "
                                 f"(cast it, e.g. x.astype({mod}.{want.np.name}))")
            if a.ndim != len(arg.shape):
                raise InputError(f"input {name!r}: expected rank {len(arg.shape)} with shape "
                                 f"({', '.join(map(str, arg.shape))}), got shape {a.shape}")
            for ax, (d, n) in enumerate(zip(arg.shape, a.shape)):
                if d.is_const:
                    if d.value != n:
                        raise InputError(f"input {name!r}: axis {ax} must have size {d.value}, got {n} "
                                         f"(shape {a.shape}, expected ({', '.join(map(str, arg.shape))}))")
                elif d.kind == "var":
                    prev = env.get(d.name)
                    if prev is None:
                        env[d.name] = int(n)
                    elif prev != n:
                        raise InputError(f"input {name!r}: axis {ax} is dim {d.name!r} = {n}, but {d.name!r} "
                                         f"is already bound to {prev}")
                else:
                    deferred.append((name, ax, d, int(n)))
            arrays[name] = a
        for name, ax, d, n in deferred:
            unbound = d.free_vars() - env.keys()
            if unbound:
                raise InputError(f"input {name!r}: axis {ax} has size {d}, which needs dims {sorted(unbound)}; "
                                 "pass them with dims={...}")
            if d.evaluate(env) != n:
                raise InputError(f"input {name!r}: axis {ax} must have size {d} = {d.evaluate(env)}, got {n}")
        unbound = self.symbols - env.keys()
        if unbound:
            raise InputError(f"dims {sorted(unbound)} are not determined by the input shapes; "
                             "pass them explicitly with dims={...}")
        return arrays, env

    def __call__(self, inputs: Mapping[str, Any] | None = None, /, *, dims: Mapping[str, int] | None = None,
                 **named: Any) -> dict[str, np.ndarray]:
        all_inputs = dict(inputs or {})
        dup = all_inputs.keys() & named.keys()
        if dup:
            raise InputError(f"input(s) {sorted(dup)} given twice")
        all_inputs.update(named)
        arrays, env = self.bind(all_inputs, dims)
        return self.execute(arrays, env)

    def execute(self, arrays: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {a.dtype.name}[{', '.join(map(str, a.shape))}]" for n, a in self.input_args.items())
        return f"<{type(self).__name__} backend={self.backend_name} ({ins}) -> {list(self.output_names)}>"
