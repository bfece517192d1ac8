"""The ``cpu`` backend: numpy/BLAS kernels for LLIR programs chosen by the e-graph search.

What it offers (the backend interface): ``signatures`` (the IR constructors it can run: every
primitive plus its own ops), ``rule_files`` (the .egg files that add its ops as alternatives, in
schedule order), ``kernels`` (one numpy implementation per constructor) and ``compile``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...egraph.llir import PRIMITIVE_SIGNATURES, LOp, LProgram
from ...graph import Graph
from ...primitives import PRIMITIVES, IotaArg
from ...program import Program
from ...shape import ShapeTracker
from .. import register_backend
from ..reference import last_uses, read_view, strided_array

__all__ = ["CpuBackend", "CpuProgram", "SIGNATURES", "RULE_FILES"]

HERE = Path(__file__).parent
RULE_FILES = [HERE / "matmul.egg"]
# rulesets to run, in order, each capped by the search options (the generic ones first)
RULESETS = ["simplify", "cleanup", "layout", "cpu_matmul"]

E = "expr"
SIGNATURES: dict[str, tuple[str, ...]] = dict(PRIMITIVE_SIGNATURES)
SIGNATURES["CpuMatmul"] = (E, E, E, "ir", E, E, E, "ir", E, E, E)
SIGNATURES["CpuBatchMatmul"] = (E, E, E, E, "ir", E, E, E, E, "ir", E, E, E, E)


def _ev(e, dims) -> int:
    return int(e.evaluate(dims))


def _matmul(op: LOp, ins: list[np.ndarray], dims: dict[str, int]) -> np.ndarray:
    m, n, k, _a, sam, sak, aoff, _b, sbk, sbn, boff = op.fields
    m, n, k = _ev(m, dims), _ev(n, dims), _ev(k, dims)
    a = strided_array(ins[0], _ev(aoff, dims), (m, k), (_ev(sam, dims), _ev(sak, dims)))
    b = strided_array(ins[1], _ev(boff, dims), (k, n), (_ev(sbk, dims), _ev(sbn, dims)))
    return np.matmul(a, b)


def _batch_matmul(op: LOp, ins: list[np.ndarray], dims: dict[str, int]) -> np.ndarray:
    bt, m, n, k, _a, sab, sam, sak, aoff, _b, sbb, sbk, sbn, boff = op.fields
    bt, m, n, k = (_ev(x, dims) for x in (bt, m, n, k))
    a = strided_array(ins[0], _ev(aoff, dims), (bt, m, k), (_ev(sab, dims), _ev(sam, dims), _ev(sak, dims)))
    b = strided_array(ins[1], _ev(boff, dims), (bt, k, n), (_ev(sbb, dims), _ev(sbk, dims), _ev(sbn, dims)))
    return np.matmul(a, b)


def _primitive_kernel(name: str):
    prim = PRIMITIVES[name]

    def run(op: LOp, ins: list[np.ndarray], dims: dict[str, int]) -> np.ndarray:
        views = op.views()
        args = [read_view(buf, st, dims) for buf, st in zip(ins, views)]
        arg = op.fields[0] if PRIMITIVE_SIGNATURES[name][0] in ("i64", "dtype") else None
        return prim.reference(args, arg, dims)

    return run


KERNELS: dict[str, Any] = {name: _primitive_kernel(name) for name in PRIMITIVES
                           if name not in ("Input", "Constant", "Output", "Iota")}
KERNELS["CpuMatmul"] = _matmul
KERNELS["CpuBatchMatmul"] = _batch_matmul


class CpuProgram(Program):
    """Runs an LLIR program op by op; values are freed after their last use."""

    backend_name = "cpu"

    def __init__(self, graph: Graph, lprog: LProgram, report: Any = None):
        super().__init__(graph)
        self.lprog = lprog
        self.search_report = report
        self.free_after = last_uses([op.inputs for op in lprog.ops])

    def execute(self, arrays: dict[str, np.ndarray], dims: dict[str, int]) -> dict[str, np.ndarray]:
        values: dict[int, np.ndarray] = {}
        outputs: dict[str, np.ndarray] = {}
        for i, op in enumerate(self.lprog.ops):
            if op.op == "Input":
                val = arrays[op.fields[0]]
            elif op.op == "Constant":
                val = self.lprog.constants[op.fields[0]].value
            elif op.op == "Iota":
                val = PRIMITIVES["Iota"].reference([], IotaArg(op.fields[0], op.fields[1], op.fields[2]), dims)
            elif op.op == "Output":
                st: ShapeTracker = op.fields[2]
                val = np.array(read_view(values[op.inputs[0]], st, dims), dtype=op.dtype.np, copy=True)
                outputs[op.fields[0]] = val
            else:
                val = KERNELS[op.op](op, [values[j] for j in op.inputs], dims)
                val = np.ascontiguousarray(np.asarray(val, dtype=op.dtype.np))
            values[i] = val
            for j in self.free_after.get(i, ()):
                values.pop(j, None)
        return {name: outputs[name] for name in self.output_names}

    def report(self) -> str:
        return self.search_report.format() if self.search_report is not None else "no search was run"


class CpuBackend:
    name = "cpu"
    signatures = SIGNATURES
    rule_files = RULE_FILES
    rulesets = RULESETS

    def rules_text(self) -> str:
        """The generic rule files (simplify, cleanup) and the backend's own, in schedule order."""
        from ...egraph.encode import GENERIC_RULES

        return "\n".join(p.read_text() for p in [f for f, _ in GENERIC_RULES] + self.rule_files)

    def compile(self, graph: Graph, search: Any = None, **options: Any) -> Program:
        from ...search import SearchOptions, compile_searched

        if options:
            raise TypeError(f"cpu backend: unknown options {sorted(options)} (pass search=ls.SearchOptions(...))")
        opts = search if search is not None else SearchOptions()
        return compile_searched(graph, self, opts, lambda lp, rep: CpuProgram(graph, lp, rep))


register_backend(CpuBackend())
