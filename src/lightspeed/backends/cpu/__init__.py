"""The ``cpu`` backend: numpy/BLAS kernels for LLIR programs chosen by the e-graph search.

What it offers (the backend interface): ``signatures`` (the IR constructors it can run: every
primitive, fused element-wise regions and its own BLAS ops), ``rule_files`` (the .egg files that
add its ops as alternatives, in schedule order), ``kernels`` (per constructor, a function that
prepares a step for given dim values; see :mod:`.runtime`) and ``compile``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...egraph.llir import FUSED_SIGNATURE, PRIMITIVE_SIGNATURES, LOp
from ...graph import Graph
from ...primitives import PRIMITIVES
from ...program import Program
from .. import register_backend
from .fused import compile_region
from .runtime import CpuProgram, Kernel, make_reader, strided_reader

__all__ = ["CpuBackend", "CpuProgram", "SIGNATURES", "RULE_FILES", "KERNELS"]

HERE = Path(__file__).parent
RULE_FILES = [HERE / "matmul.egg"]
# rulesets to run, in order, each capped by the search options (the generic ones first)
RULESETS = ["simplify", "cleanup", "layout", "cpu_matmul", "fusion"]

E = "expr"
SIGNATURES: dict[str, tuple[str, ...]] = dict(PRIMITIVE_SIGNATURES)
SIGNATURES["Fused"] = FUSED_SIGNATURE
SIGNATURES["CpuMatmul"] = (E, E, E, "ir", E, E, E, "ir", E, E, E)
SIGNATURES["CpuBatchMatmul"] = (E, E, E, E, "ir", E, E, E, E, "ir", E, E, E, E)
SIGNATURES["CpuMatmulAdd"] = SIGNATURES["CpuMatmul"] + ("ir", "view")


def _ev(e, dims) -> int:
    return int(e.evaluate(dims))


def _matmul(op: LOp, dims: dict[str, int], in_dtypes: list[np.dtype]) -> Kernel:
    m, n, k, _a, sam, sak, aoff, _b, sbk, sbn, boff = (_ev(f, dims) if i not in (3, 7) else None
                                                       for i, f in enumerate(op.fields[:11]))
    ra = strided_reader(aoff, (m, k), (sam, sak))
    rb = strided_reader(boff, (k, n), (sbk, sbn))

    def run(ins, out, scratch):
        np.matmul(ra(ins[0]), rb(ins[1]), out=out)
    return Kernel(run)


def _matmul_add(op: LOp, dims: dict[str, int], in_dtypes: list[np.dtype]) -> Kernel:
    product = _matmul(op, dims, in_dtypes).run
    (addend_view,) = op.views()
    read_addend = make_reader(addend_view, dims)

    def run(ins, out, scratch):
        product(ins, out, scratch)
        np.add(out, read_addend(ins[2]), out=out)
    return Kernel(run)


def _batch_matmul(op: LOp, dims: dict[str, int], in_dtypes: list[np.dtype]) -> Kernel:
    bt, m, n, k, _a, sab, sam, sak, aoff, _b, sbb, sbk, sbn, boff = (
        _ev(f, dims) if i not in (4, 9) else None for i, f in enumerate(op.fields))
    ra = strided_reader(aoff, (bt, m, k), (sab, sam, sak))
    rb = strided_reader(boff, (bt, k, n), (sbb, sbk, sbn))

    def run(ins, out, scratch):
        np.matmul(ra(ins[0]), rb(ins[1]), out=out)
    return Kernel(run)


def _fused(op: LOp, dims: dict[str, int], in_dtypes: list[np.dtype]) -> Kernel:
    region = compile_region(op.fields[1], in_dtypes, op.dtype.np)
    readers = [make_reader(st, dims) for st in op.views()]
    fn = region.fn

    def run(ins, out, scratch):
        fn(*[r(b) for r, b in zip(readers, ins)], out, *scratch)
    return Kernel(run, region.scratch)


def _reduce(name: str):
    prim = PRIMITIVES[name]
    ufunc = np.add if name == "SumReduce" else np.maximum

    def prepare(op: LOp, dims: dict[str, int], in_dtypes: list[np.dtype]) -> Kernel:
        axis, _x, st = op.fields
        read = make_reader(st, dims)
        dtype = op.dtype.np
        size = _ev(st.shape[axis], dims)
        exact = dtype in (np.float32, np.float64) or (name == "SumReduce" and dtype.kind in "iu")
        if exact and size > 0:  # the reference's own numpy reduction, written in place
            if name == "SumReduce" and dtype.kind in "iu":
                def run(ins, out, scratch):
                    ufunc.reduce(read(ins[0]), axis=axis, dtype=dtype, out=out)
            else:
                def run(ins, out, scratch):
                    ufunc.reduce(read(ins[0]), axis=axis, out=out)
            return Kernel(run)

        def generic(ins, out, scratch):
            np.copyto(out, prim.reference([read(ins[0])], axis, dims), casting="unsafe")
        return Kernel(generic)
    return prepare


def _gather(op: LOp, dims: dict[str, int], in_dtypes: list[np.dtype]) -> Kernel:
    """``out[i] = data_flat[idx[i]]`` straight into the output buffer; out-of-range indexes raise
    like the reference (np.take alone would wrap negative ones)."""
    read_idx, read_data = (make_reader(st, dims) for st in op.views())

    def run(ins, out, scratch):
        idx, flat = read_idx(ins[0]), read_data(ins[1]).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= flat.size):
            bad = idx[(idx < 0) | (idx >= flat.size)].flat[0]
            raise IndexError(f"Gather: index {bad} out of range for data with {flat.size} elements")
        np.take(flat, idx, out=out)
    return Kernel(run)


def _primitive(name: str):
    """Any primitive through its reference semantics (values copied into the output buffer)."""
    prim = PRIMITIVES[name]
    has_arg = PRIMITIVE_SIGNATURES[name][0] in ("i64", "dtype")

    def prepare(op: LOp, dims: dict[str, int], in_dtypes: list[np.dtype]) -> Kernel:
        readers = [make_reader(st, dims) for st in op.views()]
        arg = op.fields[0] if has_arg else None

        def run(ins, out, scratch):
            val = prim.reference([r(b) for r, b in zip(readers, ins)], arg, dims)
            np.copyto(out, np.asarray(val).reshape(out.shape), casting="unsafe")
        return Kernel(run)
    return prepare


KERNELS: dict[str, Any] = {name: _primitive(name) for name in PRIMITIVES
                           if name not in ("Input", "Constant", "Output", "Iota")}
KERNELS["SumReduce"] = _reduce("SumReduce")
KERNELS["MaxReduce"] = _reduce("MaxReduce")
KERNELS["Gather"] = _gather
KERNELS["Fused"] = _fused
KERNELS["CpuMatmul"] = _matmul
KERNELS["CpuBatchMatmul"] = _batch_matmul
KERNELS["CpuMatmulAdd"] = _matmul_add


class CpuBackend:
    name = "cpu"
    signatures = SIGNATURES
    rule_files = RULE_FILES
    rulesets = RULESETS

    def rules_text(self) -> str:
        """The generic rule files (simplify, cleanup, layout, fusion) and the backend's own."""
        from ...egraph.encode import GENERIC_RULES

        return "\n".join(p.read_text() for p in [f for f, _ in GENERIC_RULES] + self.rule_files)

    def compile(self, graph: Graph, search: Any = None, **options: Any) -> Program:
        from ...search import SearchOptions, compile_searched

        if options:
            raise TypeError(f"cpu backend: unknown options {sorted(options)} (pass search=ls.SearchOptions(...))")
        opts = search if search is not None else SearchOptions()
        return compile_searched(graph, self, opts, lambda lp, rep: CpuProgram(graph, lp, rep))


register_backend(CpuBackend())
