"""Fused element-wise regions on the cpu: one generated numpy function per region body.

A region body (``ScalarTree`` from :mod:`lightspeed.egraph.llir`) becomes straight-line code of
numpy ufunc calls with ``out=``: intermediate values live in scratch buffers that are reused along
the tree, and the root writes straight into the op's output buffer, so a region of n ops costs n
ufunc calls and no allocations.  Leaves arrive as arrays already read through their views
(broadcast views included), all with the region's shape.  Only dtypes the fusion rules admit
(``fuse_dtype``: float32/float64, plus bool results of comparisons and bool -> float casts) reach
this code; each ufunc computes in the op's own dtype, exactly like the reference's primitive.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ...dtypes import DType
from ...errors import LightspeedError

__all__ = ["Region", "compile_region"]

_UFUNC = {"Log2": "np.log2", "Exp2": "np.exp2", "Sin": "np.sin", "Sqrt": "np.sqrt", "Recip": "np.reciprocal",
          "Add": "np.add", "Mul": "np.multiply", "Mod": "np.fmod", "LessThan": "np.less"}


@dataclass(frozen=True)
class Region:
    """A compiled region: ``fn(leaf_0, ..., leaf_n-1, out, *scratch)``; ``scratch`` lists the dtypes
    of the scratch buffers (each of the region's shape) the caller provides."""

    fn: Callable[..., None]
    scratch: tuple[np.dtype, ...]
    source: str


_CACHE: dict[tuple, Region] = {}


def compile_region(tree: tuple, leaf_dtypes: Sequence[np.dtype], out_dtype: np.dtype) -> Region:
    key = (tree, tuple(leaf_dtypes), out_dtype)
    hit = _CACHE.get(key)
    if hit is None:
        hit = _CACHE[key] = _generate(tree, [np.dtype(d) for d in leaf_dtypes], np.dtype(out_dtype))
    return hit


def _generate(tree: tuple, leaf_dtypes: list[np.dtype], out_dtype: np.dtype) -> Region:
    lines: list[str] = []
    scratch: list[np.dtype] = []
    free: list[int] = []  # scratch buffers not holding a live value
    out_free = [True]

    def dtype_of(node: tuple) -> np.dtype:
        if node[0] == "leaf":
            return leaf_dtypes[node[1]]
        if node[0] == "Cast":
            d = node[1]
            return d.np if isinstance(d, DType) else np.dtype(d)
        if node[0] == "LessThan":
            return np.dtype(bool)
        return dtype_of(node[1])

    def release(var: str) -> None:
        if var == "out":
            out_free[0] = True
        elif var.startswith("t"):
            free.append(int(var[1:]))

    def dest(dtype: np.dtype, is_root: bool) -> str:
        if is_root:
            out_free[0] = False
            return "out"
        for k in free:
            if scratch[k] == dtype:
                free.remove(k)
                return f"t{k}"
        if out_free[0] and dtype == out_dtype:
            out_free[0] = False
            return "out"
        scratch.append(dtype)
        return f"t{len(scratch) - 1}"

    def emit(node: tuple, is_root: bool) -> str:
        if node[0] == "leaf":
            if is_root:  # a body that is a bare read: copy it
                lines.append(f"np.copyto(out, x{node[1]}, casting='unsafe')")
                return "out"
            return f"x{node[1]}"
        if node[0] == "Cast":
            src = emit(node[2], False)
            release(src)
            d = dest(dtype_of(node), is_root)
            if d != src:
                lines.append(f"np.copyto({d}, {src}, casting='unsafe')")
            return d
        fn = _UFUNC.get(node[0])
        if fn is None:
            raise LightspeedError(f"fused region: no kernel for {node[0]}")
        args = [emit(c, False) for c in node[1:]]
        for a in args:
            release(a)  # inputs are read before the ufunc writes: in-place is safe element-wise
        d = dest(dtype_of(node), is_root)
        lines.append(f"{fn}({', '.join(args)}, out={d})")
        return d

    emit(tree, True)
    params = [f"x{i}" for i in range(len(leaf_dtypes))] + ["out"] + [f"t{k}" for k in range(len(scratch))]
    src = f"def region({', '.join(params)}):\n" + "".join(f"    {ln}\n" for ln in lines)
    env: dict = {"np": np}
    exec(compile(src, "<lightspeed fused region>", "exec"), env)  # noqa: S102 - generated from a tree
    return Region(env["region"], tuple(scratch), src)
