"""Regions on the cpu: one generated numpy function per region body.

A region body (``ScalarTree`` from :mod:`lightspeed.egraph.llir`) becomes straight-line code of
numpy ufunc calls with ``out=``: intermediate values live in scratch buffers that are reused along
the tree, and the root writes straight into the op's output buffer, so a region of n ops costs n
ufunc calls and no allocations.  Leaves arrive as arrays read through their views.

Index spaces: space 0 is the region's shape (``out.shape``); every reduction node opens a new
space, its pre-reduction shape.  Each node's value is an array of its space's shape; a leaf is
reshaped to the space it is read in (shapes that agree up to size-1 dims: a view, never a copy of
data the view did not already need), a reduction writes through a reshape of its destination.
Scratch of space 0 comes from the runtime (``Kernel.scratch``); scratch of the other spaces is
allocated by the kernel per shape.

Only dtypes the fusion rules admit (``fuse_dtype``: float32/float64, plus bool results of
comparisons and bool -> float casts) reach this code; each ufunc computes in the op's own dtype,
exactly like the reference's primitive, and the reductions are the reference's own numpy
reductions (``np.add.reduce``; ``np.maximum.reduce``, which propagates NaN like ``np.max``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ...dtypes import DType
from ...errors import LightspeedError
from ...primitives import float_to_int
from ...symbolic import INDEX_VAR, compile_exprs

__all__ = ["Region", "compile_region", "region_kernel", "iota_values"]

_UFUNC = {"Log2": "np.log2", "Exp2": "np.exp2", "Sin": "np.sin", "Sqrt": "np.sqrt", "Recip": "np.reciprocal",
          "Add": "np.add", "Mul": "np.multiply", "Mod": "np.fmod", "LessThan": "np.less"}
_REDUCE = {"SumReduce": "np.add.reduce", "MaxReduce": "np.maximum.reduce"}


@dataclass(frozen=True)
class Region:
    """A compiled region: ``fn(leaf_0, ..., leaf_n-1, out, *scratch, S=None, dims=None)``;
    ``scratch`` lists the dtypes of the scratch buffers the caller provides, ``scratch_spaces`` the
    space of each (0: the region's shape).  ``S`` holds the spaces' shapes (``S[0]`` =
    ``out.shape``, ``S[i]`` = ``spaces[i - 1]`` evaluated); a region without reductions or iotas
    needs neither ``S`` nor ``dims``."""

    fn: Callable[..., None]
    scratch: tuple[np.dtype, ...]
    scratch_spaces: tuple[int, ...]
    spaces: tuple[tuple, ...]  # pre-reduction shapes (Exprs) of spaces 1, 2, ...
    source: str


_CACHE: dict[tuple, Region] = {}


def compile_region(tree: tuple, leaf_dtypes: Sequence[np.dtype], out_dtype: np.dtype) -> Region:
    key = (tree, tuple(leaf_dtypes), out_dtype)
    hit = _CACHE.get(key)
    if hit is None:
        hit = _CACHE[key] = _generate(tree, [np.dtype(d) for d in leaf_dtypes], np.dtype(out_dtype))
    return hit


def _np_dtype(d) -> np.dtype:
    return d.np if isinstance(d, DType) else np.dtype(d)


def iota_values(expr, dims, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """``expr(z)`` at every flat index z of ``shape``, as the reference's Iota computes it."""
    n = int(np.prod(shape, dtype=np.int64))
    vals = expr.evaluate({**dims, INDEX_VAR: np.arange(n, dtype=np.int64)})
    return np.broadcast_to(np.asarray(vals, dtype=np.int64), (n,)).astype(dtype).reshape(shape)


def _generate(tree: tuple, leaf_dtypes: list[np.dtype], out_dtype: np.dtype) -> Region:
    lines: list[str] = []
    scratch: list[tuple[np.dtype, int]] = []
    free: list[int] = []  # scratch buffers not holding a live value
    out_free = [True]
    spaces: list[tuple] = []
    env: dict = {"np": np, "_iota": iota_values, "_ftoi": float_to_int}
    shaped: dict[tuple[int, int], str] = {}  # (leaf, space) -> the leaf's array in that space

    def dtype_of(node: tuple) -> np.dtype:
        tag = node[0]
        if tag == "leaf":
            return leaf_dtypes[node[1]]
        if tag in ("const", "iota"):
            return _np_dtype(node[2])
        if tag == "Cast":
            return _np_dtype(node[1])
        if tag == "LessThan":
            return np.dtype(bool)
        return dtype_of(node[-1] if tag in _REDUCE else node[1])

    def release(var: str) -> None:
        if var == "out":
            out_free[0] = True
        elif var.startswith("t"):
            free.append(int(var[1:]))

    def dest(dtype: np.dtype, space: int, is_root: bool) -> str:
        if is_root:
            out_free[0] = False
            return "out"
        for k in free:
            if scratch[k] == (dtype, space):
                free.remove(k)
                return f"t{k}"
        if space == 0 and out_free[0] and dtype == out_dtype:
            out_free[0] = False
            return "out"
        scratch.append((dtype, space))
        return f"t{len(scratch) - 1}"

    def emit(node: tuple, space: int, is_root: bool) -> str:
        tag = node[0]
        if tag in ("leaf", "const", "iota"):
            if tag == "leaf":
                key = (node[1], space)
                if key not in shaped:
                    shaped[key] = f"x{node[1]}_{space}"
                    lines.insert(0, f"x{node[1]}_{space} = x{node[1]}.reshape(S[{space}])")
                val = shaped[key]
            elif tag == "const":
                val = f"c{len(env)}"
                env[val] = _np_dtype(node[2]).type(node[1])
            else:
                val = f"e{len(env)}"
                env[val] = node[1]
                lines.append(f"{val}v = _iota({val}, dims, S[{space}], np.{_np_dtype(node[2]).name})")
                val += "v"
            if is_root:  # a body that is a bare read: copy it
                lines.append(f"np.copyto(out, {val}, casting='unsafe')")
                return "out"
            return val
        if tag == "Cast":
            src = emit(node[2], space, False)
            release(src)
            d = dest(dtype_of(node), space, is_root)
            if dtype_of(node).kind in "iu" and dtype_of(node[2]).kind not in "iub":  # the primitive's rule
                lines.append(f"np.copyto({d}, _ftoi({src}, {d}.dtype))")
            elif d != src:
                lines.append(f"np.copyto({d}, {src}, casting='unsafe')")
            return d
        if tag in _REDUCE:
            axis, sp, child = node[1], node[2], node[3]
            spaces.append(tuple(sp.shape))
            inner = len(spaces)
            src = emit(child, inner, False)
            if src.startswith("c"):  # a constant is a numpy scalar: give the reduction a full array
                t = dest(dtype_of(child), inner, False)
                lines.append(f"np.copyto({t}, {src}, casting='unsafe')")
                src = t
            release(src)
            d = dest(dtype_of(node), space, is_root)
            reduced = f"S[{inner}][:{axis}] + S[{inner}][{axis + 1}:]"
            call = f"{_REDUCE[tag]}({src}, axis={axis}, out={d}.reshape({reduced}))"
            if tag == "MaxReduce":  # an empty axis has no maximum: the reference gives the dtype's minimum
                lines.append(f"if S[{inner}][{axis}] == 0: {d}.fill(-np.inf)")
                lines.append(f"else: {call}")
            else:
                lines.append(call)
            return d
        fn = _UFUNC.get(tag)
        if fn is None:
            raise LightspeedError(f"fused region: no kernel for {tag}")
        args = [emit(c, space, False) for c in node[1:]]
        for a in args:
            release(a)  # inputs are read before the ufunc writes: in-place is safe element-wise
        d = dest(dtype_of(node), space, is_root)
        lines.append(f"{fn}({', '.join(args)}, out={d})")
        return d

    emit(tree, 0, True)
    params = [f"x{i}" for i in range(len(leaf_dtypes))] + ["out"] + [f"t{k}" for k in range(len(scratch))]
    head = ["if S is None: S = (out.shape,)"]
    src = f"def region({', '.join(params)}, S=None, dims=None):\n" + "".join(f"    {ln}\n" for ln in head + lines)
    exec(compile(src, "<lightspeed fused region>", "exec"), env)  # noqa: S102 - generated from a tree
    return Region(env["region"], tuple(d for d, _ in scratch), tuple(s for _, s in scratch), tuple(spaces), src)


def region_kernel(region: Region, readers: Sequence[Callable]) -> tuple[Callable, tuple[np.dtype, ...]]:
    """``run(ins, out, scratch, dims)`` for a compiled region whose leaves are read by ``readers``,
    and the dtypes of the scratch it takes from the runtime (those of the region's own shape).
    Scratch of the reduction spaces depends on the dims of the call: it is allocated here, once per
    thread and shape (a new shape replaces the old buffers)."""
    fn = region.fn
    pairs = list(zip(region.scratch, region.scratch_spaces))
    own = tuple(d for d, sp in pairs if sp == 0)
    if not region.spaces:
        def run(ins, out, scratch, dims):
            fn(*[r(b, dims) for r, b in zip(readers, ins)], out, *scratch, S=(out.shape,), dims=dims)
        return run, own

    lengths = [len(s) for s in region.spaces]
    numbers = compile_exprs([e for s in region.spaces for e in s])
    local = threading.local()

    def run(ins, out, scratch, dims):
        flat = numbers(dims)
        shapes, i = [out.shape], 0
        for n in lengths:
            shapes.append(tuple(int(v) for v in flat[i:i + n]))
            i += n
        key = tuple(shapes[1:])
        held = getattr(local, "held", None)
        if held is None or held[0] != key:
            held = local.held = (key, [None if sp == 0 else np.empty(shapes[sp], d) for d, sp in pairs])
        bufs, own_iter = [], iter(scratch)
        for b in held[1]:
            bufs.append(next(own_iter) if b is None else b)
        fn(*[r(b, dims) for r, b in zip(readers, ins)], out, *bufs, S=shapes, dims=dims)
    return run, own
