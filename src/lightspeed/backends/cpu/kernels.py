"""The cpu backend's kernels: per LLIR constructor, a function that prepares a step once per
program (``KERNELS[op](lop, input_dtypes) -> Kernel``; :mod:`.runtime` runs them): numpy/BLAS on
strided views of the operands' flat buffers, generated numpy functions for regions (:mod:`.fused`)
and every other primitive through its reference semantics.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...egraph.llir import LOp
from ...errors import IndexOutOfRange
from ...primitives import PRIMITIVES
from ...symbolic import compile_exprs
from ..numpy_views import make_reader, strided_array
from .fused import compile_region

__all__ = ["Kernel", "Prepare", "KERNELS"]

Dims = Mapping[str, int]


@dataclass
class Kernel:
    """A prepared op: ``run(ins, out, scratch, dims)`` where ``ins`` are the op's input buffers
    (raw, not read through views: the kernel reads them itself, with the dims of this call),
    ``out`` its result array and ``scratch`` arrays of the result's shape, one per dtype listed."""

    run: Callable[[list[np.ndarray], np.ndarray, list[np.ndarray], Dims], None]
    scratch: tuple[np.dtype, ...] = ()
    # the op writes into its first operand's buffer (``out`` is that buffer): no arena slot
    in_place: bool = False


# a kernel's preparation: (op, input dtypes) -> Kernel; done once per program
Prepare = Callable[[LOp, list[np.dtype]], Kernel]


def _flat(buf: np.ndarray) -> np.ndarray:
    return buf.reshape(-1)


def _blas_operand(buf: np.ndarray, offset: int, batch, rows: int, cols: int, batch_strides, sr: int, sc: int):
    """A strided view numpy hands to BLAS: a size-1 dim gets a leading-dimension stride (numpy's
    matmul takes a stride 0 there, e.g. a decode step's single row, for non-BLAS layout and runs
    its slow loop), and a matrix BLAS cannot take (broadcast rows, negative or gapped strides in
    both dims) is copied row-major first, which costs far less than the product."""
    if rows == 1:
        sr = max(1, cols * abs(sc))
    if cols == 1:
        sc = max(1, rows * abs(sr))
    arr = strided_array(_flat(buf), offset, (*batch, rows, cols), (*batch_strides, sr, sc))
    if not ((sc == 1 and sr >= cols) or (sr == 1 and sc >= rows)):
        arr = np.ascontiguousarray(arr)
    return arr


def _matmul(op: LOp, in_dtypes: list[np.dtype]) -> Kernel:
    """``Matmul``: one np.matmul over every batch dim at once, on strided views of the operands'
    flat buffers (a batch stride of 0 broadcasts), written into ``out`` ([*batch, m, n])."""
    a = op.args
    nb = len(a["batch"])
    if len(a["a_batch_strides"]) != nb or len(a["b_batch_strides"]) != nb:
        raise ValueError(f"{op.op}: {nb} batch dims but batch strides {a['a_batch_strides']}, {a['b_batch_strides']}")
    nums = compile_exprs([*a["batch"], a["m"], a["n"], a["k"],
                          *a["a_batch_strides"], a["a_stride_m"], a["a_stride_k"], a["a_offset"],
                          *a["b_batch_strides"], a["b_stride_k"], a["b_stride_n"], a["b_offset"]])

    def run(ins, out, scratch, dims):
        v = nums(dims)
        batch, (m, n, k) = v[:nb], v[nb:nb + 3]
        sa, (sam, sak, aoff) = v[nb + 3:2 * nb + 3], v[2 * nb + 3:2 * nb + 6]
        sb, (sbk, sbn, boff) = v[2 * nb + 6:3 * nb + 6], v[3 * nb + 6:]
        np.matmul(_blas_operand(ins[0], aoff, batch, m, k, sa, sam, sak),
                  _blas_operand(ins[1], boff, batch, k, n, sb, sbk, sbn), out=out)
    return Kernel(run)


def _matmul_add(op: LOp, in_dtypes: list[np.dtype]) -> Kernel:
    product = _matmul(op, in_dtypes).run
    read_addend = make_reader(op.args["r_view"])

    def run(ins, out, scratch, dims):
        product(ins, out, scratch, dims)
        np.add(out, read_addend(ins[2], dims), out=out)
    return Kernel(run)



def _fused(op: LOp, in_dtypes: list[np.dtype]) -> Kernel:
    from .fused import region_kernel

    region = compile_region(op.args["body"], in_dtypes, op.dtype.np)
    return Kernel(*region_kernel(region, [make_reader(st) for st in op.operand_views()]))


def _reduce(name: str):
    prim = PRIMITIVES[name]
    ufunc = np.add if name == "SumReduce" else np.maximum

    def prepare(op: LOp, in_dtypes: list[np.dtype]) -> Kernel:
        axis = op.args["axis"]
        read = make_reader(op.args["x_view"])
        size_of = compile_exprs([op.args["x_view"].shape[axis]])
        dtype = op.dtype.np
        integer_sum = name == "SumReduce" and dtype.kind in "iu"
        exact = dtype in (np.float32, np.float64) or integer_sum

        def run(ins, out, scratch, dims):
            x = read(ins[0], dims)
            if exact and size_of(dims)[0] > 0:  # the reference's own numpy reduction, in place
                if integer_sum:
                    ufunc.reduce(x, axis=axis, dtype=dtype, out=out)
                else:
                    ufunc.reduce(x, axis=axis, out=out)
            else:
                np.copyto(out, prim.reference([x], axis, dims), casting="unsafe")
        return Kernel(run)
    return prepare


def _gather(op: LOp, in_dtypes: list[np.dtype]) -> Kernel:
    """``out[i] = data_flat[idx[i]]`` straight into the output buffer; out-of-range indexes raise
    like the reference (np.take alone would wrap negative ones)."""
    read_idx, read_data = make_reader(op.args["indexes_view"]), make_reader(op.args["data_view"])

    def run(ins, out, scratch, dims):
        idx, flat = read_idx(ins[0], dims), read_data(ins[1], dims).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= flat.size):
            bad = idx[(idx < 0) | (idx >= flat.size)].flat[0]
            raise IndexOutOfRange(f"Gather: index {bad} out of range for data with {flat.size} elements")
        np.take(flat, idx, out=out)
    return Kernel(run)


def _scatter_in_place(op: LOp, in_dtypes: list[np.dtype]) -> Kernel:
    """``dest_flat[idx[i]] = src[i]`` written into the destination's own buffer (an aliased input,
    checked by the runtime); indexes outside the buffer are skipped, like Scatter's."""
    read_idx, read_src = make_reader(op.args["indexes_view"]), make_reader(op.args["src_view"])

    def run(ins, out, scratch, dims):
        flat = out.reshape(-1)
        idx = read_idx(ins[1], dims).reshape(-1)
        src = read_src(ins[2], dims).reshape(-1)
        keep = (idx >= 0) & (idx < flat.size)
        if keep.all():
            flat[idx] = src
        else:
            flat[idx[keep]] = src[keep]
    return Kernel(run, in_place=True)


def _primitive(name: str):
    """Any primitive through its reference semantics (values copied into the output buffer)."""
    prim = PRIMITIVES[name]
    arg_field = {"reduce": "axis", "cast": "to"}.get(prim.category)

    def prepare(op: LOp, in_dtypes: list[np.dtype]) -> Kernel:
        readers = [make_reader(st) for st in op.operand_views()]
        arg = op.args[arg_field] if arg_field else None

        def run(ins, out, scratch, dims):
            val = prim.reference([r(b, dims) for r, b in zip(readers, ins)], arg, dims)
            np.copyto(out, np.asarray(val).reshape(out.shape), casting="unsafe")
        return Kernel(run)
    return prepare


KERNELS: dict[str, Any] = {name: _primitive(name) for name in PRIMITIVES
                           if name not in ("Input", "Constant", "Output", "Iota")}
KERNELS["SumReduce"] = _reduce("SumReduce")
KERNELS["MaxReduce"] = _reduce("MaxReduce")
KERNELS["Gather"] = _gather
KERNELS["ScatterInPlace"] = _scatter_in_place
KERNELS["Fused"] = _fused
KERNELS["Matmul"] = _matmul
KERNELS["MatmulAdd"] = _matmul_add
