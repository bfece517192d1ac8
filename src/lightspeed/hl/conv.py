"""Convolution, pooling, nearest-neighbour interpolation and channel normalisation.

Every op here is a view-heavy composition of primitives:

* ``conv1d/2d/3d``: the input is padded (a masked view), sliding windows are ``unfold`` views
  (a dilated window is an unfold of size ``(k-1)*d+1`` followed by a strided slice), and the
  grouped product is the canonical :func:`~lightspeed.hl.linalg.matmul` (broadcast Mul +
  SumReduce over one axis) of the weight ``[G, Cout/G, Cin/G*K]`` with the im2col view
  ``[G, N*P, Cin/G*K]`` (the batch folded into the output positions, ``G`` dropped when 1), so
  backends see at most one batch dim and match it to BLAS; the only nodes are the Mul, the
  SumReduce and the bias Add.
* ``max_pool*``: ``-inf`` padding (a select), unfold windows, MaxReduce.  ``avg_pool*``: zero
  padding (a view), unfold windows, SumReduce, divided by a window-size tensor computed by Iota
  index arithmetic (so ``ceil_mode`` and ``count_include_pad`` follow PyTorch exactly).
* ``interpolate(mode='nearest' | 'nearest-exact')``: per spatial axis, PyTorch's float index
  arithmetic decides the source index; an axis whose indices form a repeat (``i // k``) or a
  stride (``i * k``) pattern becomes a view, the rest are read with one Gather.
* ``group_norm``/``batch_norm``: mean/var reductions, or (eval-mode batch norm) one per-channel
  scale-and-shift.

Kernel sizes, channel counts and groups must be constants; batch and spatial dims may be symbolic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..errors import DTypeError, ShapeError, UnsupportedError
from ..graph import GraphTensor
from ..symbolic import INDEX_VAR, Expr, ExprLike, as_expr, prod, smax, smin, sym
from .common import cast, fill_expr, fmt_shape, full, prim
from .elementwise import div, minimum, rsqrt
from .linalg import matmul
from .movement import pad as pad_
from .reduce import amax, mean, var
from .reduce import sum as sum_
from .registry import hl_op

__all__ = [
    "conv1d", "conv2d", "conv3d", "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d",
    "interpolate", "group_norm", "batch_norm",
]


# ============================================================== argument helpers
def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _ntuple(v: Any, n: int, what: str, op: str) -> tuple[int, ...]:
    """An int or a sequence of 1 or n ints, as an n-tuple (PyTorch's _single/_pair/_triple)."""
    if _is_int(v):
        return (int(v),) * n
    if isinstance(v, (tuple, list)) and all(_is_int(x) for x in v):
        if len(v) == n:
            return tuple(int(x) for x in v)
        if len(v) == 1:
            return (int(v[0]),) * n
    raise ShapeError(f"{op}: {what} must be an int or a sequence of {n} ints, got {v!r}")


def _shapes(*ts: GraphTensor | None) -> str:
    return ", ".join(fmt_shape(t.shape) if isinstance(t, GraphTensor) else "None" for t in ts)


def _const_dim(d: Expr, what: str, op: str) -> int:
    if not d.is_const:
        raise UnsupportedError(f"{op}: {what} must be a constant, got the symbolic size {d}")
    return d.value


def _check_tensor(x: Any, name: str, op: str) -> GraphTensor:
    if not isinstance(x, GraphTensor):
        raise TypeError(f"{op}: {name} must be a GraphTensor, got {type(x).__name__}")
    return x


def _spatial_input(x: GraphTensor, nsp: int, op: str, allow_unbatched: bool = True) -> tuple[GraphTensor, bool]:
    """(batched input, whether it was unbatched); checks the rank."""
    ranks = (nsp + 1, nsp + 2) if allow_unbatched else (nsp + 2,)
    if x.ndim not in ranks:
        want = " or ".join(f"{r}-D" for r in ranks)
        raise ShapeError(f"{op}: expected a {want} input ((N, C, *spatial) with {nsp} spatial dims), "
                         f"got shape {fmt_shape(x.shape)}")
    if x.ndim == nsp + 1:
        return x.unsqueeze(0), True
    return x, False


def _windows(x: GraphTensor, first_axis: int, kernel: Sequence[int], stride: Sequence[int],
             dilation: Sequence[int]) -> GraphTensor:
    """Sliding windows over axes ``first_axis, first_axis+1, ...`` as a view: each spatial axis
    becomes the window-position axis and one window axis per kernel dim is appended at the end."""
    st = x.st
    for j, (k, s, d) in enumerate(zip(kernel, stride, dilation)):
        eff = (k - 1) * d + 1
        st = st.unfold(first_axis + j, eff, s)
        if d > 1:
            bounds = [(0, n, 1) for n in st.shape]
            bounds[-1] = (0, eff, d)
            st = st.slice(bounds)
    return x.with_view(st)


def _check_window_fits(op: str, sizes: Sequence[Expr], pads: Sequence[tuple[int, int]], kernel: Sequence[int],
                       dilation: Sequence[int], x: GraphTensor) -> None:
    padded, effs = [], []
    for n, (lo, hi), k, d in zip(sizes, pads, kernel, dilation):
        padded.append(n + lo + hi)
        effs.append((k - 1) * d + 1)
    if any(p.is_const and p.value < e for p, e in zip(padded, effs)):
        raise ShapeError(f"{op}: the (dilated) kernel {tuple(effs)} is larger than the padded input "
                         f"{fmt_shape(padded)} (input shape {fmt_shape(x.shape)})")


# ============================================================== convolution
def _conv(op: str, nsp: int, x: Any, weight: Any, bias: Any, stride: Any, padding: Any, dilation: Any,
          groups: Any) -> GraphTensor:
    x = _check_tensor(x, "input", op)
    weight = _check_tensor(weight, "weight", op)
    if bias is not None:
        bias = _check_tensor(bias, "bias", op)
    if weight.ndim != nsp + 2:
        raise ShapeError(f"{op}: weight must be {nsp + 2}-D (out_channels, in_channels/groups, *kernel), got "
                         f"shape {fmt_shape(weight.shape)} (input {fmt_shape(x.shape)})")
    xb, unbatched = _spatial_input(x, nsp, op)
    for t, name in ((x, "input"), (weight, "weight"), (bias, "bias")):
        if t is not None and not t.dtype.is_float:
            raise DTypeError(f"{op}: {name} must be a floating-point tensor, got {t.dtype.name}")
    if weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        raise DTypeError(f"{op}: input, weight and bias must have the same dtype, got "
                         f"{x.dtype.name}, {weight.dtype.name}" + (f", {bias.dtype.name}" if bias is not None else ""))
    if not _is_int(groups) or groups < 1:
        raise ShapeError(f"{op}: groups must be a positive int, got {groups!r}")
    groups = int(groups)
    c_out = _const_dim(weight.shape[0], "out_channels (weight dim 0)", op)
    c_in_g = _const_dim(weight.shape[1], "in_channels/groups (weight dim 1)", op)
    kernel = tuple(_const_dim(d, "kernel size", op) for d in weight.shape[2:])
    c_in = xb.shape[1]
    if c_in != c_in_g * groups:
        raise ShapeError(f"{op}: weight of shape {fmt_shape(weight.shape)} with groups={groups} expects an input "
                         f"with {c_in_g * groups} channels, got input of shape {fmt_shape(x.shape)}")
    if c_out % groups:
        raise ShapeError(f"{op}: out_channels ({c_out}) must be divisible by groups ({groups}) "
                         f"(weight {fmt_shape(weight.shape)}, input {fmt_shape(x.shape)})")
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != c_out):
        raise ShapeError(f"{op}: bias must have shape ({c_out},), got {fmt_shape(bias.shape)} "
                         f"(weight {fmt_shape(weight.shape)})")
    if any(k < 1 for k in kernel):
        raise ShapeError(f"{op}: kernel sizes must be positive, got weight shape {fmt_shape(weight.shape)}")
    stride = _ntuple(stride, nsp, "stride", op)
    dilation = _ntuple(dilation, nsp, "dilation", op)
    if any(s < 1 for s in stride):
        raise ShapeError(f"{op}: stride must be positive, got {stride}")
    if any(d < 1 for d in dilation):
        raise ShapeError(f"{op}: dilation must be positive, got {dilation}")
    if isinstance(padding, str):
        if padding == "valid":
            pads = [(0, 0)] * nsp
        elif padding == "same":
            if any(s != 1 for s in stride):
                raise ShapeError(f"{op}: padding='same' is not supported for strided convolutions (stride={stride})")
            pads = []
            for k, d in zip(kernel, dilation):
                total = d * (k - 1)
                pads.append((total // 2, total - total // 2))
        else:
            raise ShapeError(f"{op}: padding must be an int, a tuple, 'same' or 'valid', got {padding!r}")
    else:
        p = _ntuple(padding, nsp, "padding", op)
        if any(v < 0 for v in p):
            raise ShapeError(f"{op}: negative padding is not supported, got {p}")
        pads = [(v, v) for v in p]
    spatial = xb.shape[2:]
    _check_window_fits(op, spatial, pads, kernel, dilation, x)

    if any(lo or hi for lo, hi in pads):
        xb = xb.with_view(xb.st.pad([(0, 0), (0, 0)] + list(pads)))
    win = _windows(xb, 2, kernel, stride, dilation)  # [N, Cin, *O, *K]
    n = win.shape[0]
    out_sp = win.shape[2:2 + nsp]
    g, cog = groups, c_out // groups
    ck = c_in_g * math.prod(kernel)
    npos = n * prod(out_sp)
    win = win.reshape(n, g, c_in_g, *out_sp, *kernel)
    # im2col as a view: [N, G, Cg, *O, *K] -> [G, N, *O, Cg, *K] -> [G, N*P, Cg*K]. The batch is
    # folded into the output positions (one GEMM per group, not one per sample) so that the
    # product has at most one batch dim (the groups): the BLAS rules match [m, n, k] and
    # [b, m, n, k] products, and a [N, G, ...] product of rank 5 would stay a broadcast Mul that
    # materialises Cout * positions * Cin*K elements.
    order = [1, 0] + [3 + j for j in range(nsp)] + [2] + [3 + nsp + j for j in range(nsp)]
    cols = win.permute(*order).reshape(g, npos, ck)
    wmat = weight.reshape(g, cog, ck)
    if g == 1:  # a batch dim of size 1 would still make the product one rank too many for a 2-D Matmul
        cols, wmat = cols.squeeze(0), wmat.squeeze(0)
    out = matmul(wmat, cols.transpose(-1, -2))  # [(G,) Cout/G, N*P]
    if bias is not None:
        # added to the product read row-major with its own shape, so a matmul+bias epilogue can take it
        out = out + bias.reshape(*((g,) if g > 1 else ()), cog, 1)
    # [G, Cout/G, N, *O] -> [N, G, Cout/G, *O] -> [N, Cout, *O]: permutes and merges of strided
    # axes, so still a single view of the product
    out = out.reshape(g, cog, n, *out_sp).permute(2, 0, 1, *range(3, 3 + nsp)).reshape(n, c_out, *out_sp)
    return out.squeeze(0) if unbatched else out


@hl_op(torch="torch.nn.functional.conv1d", category="conv", method=False)
def conv1d(input: GraphTensor, weight: GraphTensor, bias: GraphTensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> GraphTensor:
    """1-D convolution (cross-correlation) over (N, C, L) or (C, L) inputs, as torch."""
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


@hl_op(torch="torch.nn.functional.conv2d", category="conv", method=False)
def conv2d(input: GraphTensor, weight: GraphTensor, bias: GraphTensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> GraphTensor:
    """2-D convolution over (N, C, H, W) or (C, H, W) inputs, as torch (padding may be 'same'/'valid')."""
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


@hl_op(torch="torch.nn.functional.conv3d", category="conv", method=False)
def conv3d(input: GraphTensor, weight: GraphTensor, bias: GraphTensor | None = None, stride: Any = 1,
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> GraphTensor:
    """3-D convolution over (N, C, D, H, W) or (C, D, H, W) inputs, as torch."""
    return _conv("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


# ============================================================== pooling
def _pool_params(op: str, nsp: int, kernel_size: Any, stride: Any, padding: Any,
                 dilation: Any) -> tuple[tuple[int, ...], ...]:
    kernel = _ntuple(kernel_size, nsp, "kernel_size", op)
    if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0):
        stride = kernel
    else:
        stride = _ntuple(stride, nsp, "stride", op)
    pad = _ntuple(padding, nsp, "padding", op)
    dil = _ntuple(dilation, nsp, "dilation", op)
    if any(k < 1 for k in kernel):
        raise ShapeError(f"{op}: kernel_size must be positive, got {kernel}")
    if any(s < 1 for s in stride):
        raise ShapeError(f"{op}: stride must be positive, got {stride}")
    if any(d < 1 for d in dil):
        raise ShapeError(f"{op}: dilation must be positive, got {dil}")
    if any(p < 0 or p > k // 2 for p, k in zip(pad, kernel)):
        raise ShapeError(f"{op}: padding must be between 0 and half the kernel size, got padding={pad} "
                         f"for kernel_size={kernel}")
    return kernel, stride, pad, dil


def _pool_geometry(op: str, x: GraphTensor, sizes: Sequence[Expr], kernel, stride, pad, dil,
                   ceil_mode: bool) -> tuple[list[tuple[Expr, Expr]], list[Expr]]:
    """Per spatial axis: the (before, after) padding that makes the output windows fit (the after
    part grows in ceil_mode), and the output size, by PyTorch's pooling_output_shape."""
    pads, outs = [], []
    for n, k, s, p, d in zip(sizes, kernel, stride, pad, dil):
        eff = (k - 1) * d + 1
        if n.is_const:
            num = n.value + 2 * p - eff + (s - 1 if ceil_mode else 0)
            o = num // s + 1
            if ceil_mode and (o - 1) * s >= n.value + p:
                o -= 1
            if o < 1:
                raise ShapeError(f"{op}: output size is too small (input shape {fmt_shape(x.shape)}, "
                                 f"kernel_size={kernel}, stride={stride}, padding={pad}, dilation={dil})")
            extra = max(0, (o - 1) * s + eff - (n.value + 2 * p))
            pads.append((as_expr(p), as_expr(p + extra)))
            outs.append(as_expr(o))
        else:
            if ceil_mode:
                o = (n + (2 * p - eff + s - 1)) // s + 1
                o = o - ((o - 1) * s).ge(n + p)
                extra = as_expr(s - 1)  # enough for the last window; the window axis is cut to o
            else:
                o = (n + (2 * p - eff)) // s + 1
                extra = as_expr(0)
            pads.append((as_expr(p), p + extra))
            outs.append(o)
    return pads, outs


def _pool_windows(xb: GraphTensor, nsp: int, outs: Sequence[Expr], kernel, stride, dil) -> GraphTensor:
    win = _windows(xb, 2, kernel, stride, dil)
    if tuple(win.shape[2:2 + nsp]) != tuple(outs):  # symbolic ceil_mode: cut the padded tail
        bounds = [(0, d, 1) for d in win.shape]
        for j, o in enumerate(outs):
            bounds[2 + j] = (0, o, 1)
        win = win.with_view(win.st.slice(bounds))
    return win


def _max_pool(op: str, nsp: int, x: Any, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
              ceil_mode: bool, return_indices: bool) -> GraphTensor:
    x = _check_tensor(x, "input", op)
    if return_indices:
        raise UnsupportedError(f"{op}: return_indices=True is not supported")
    if x.dtype.is_bool:
        raise DTypeError(f"{op}: bool inputs are not supported")
    kernel, stride, pad, dil = _pool_params(op, nsp, kernel_size, stride, padding, dilation)
    xb, unbatched = _spatial_input(x, nsp, op)
    pads, outs = _pool_geometry(op, x, xb.shape[2:], kernel, stride, pad, dil, ceil_mode)
    if any(lo != 0 or hi != 0 for lo, hi in pads):
        fill = x.dtype.min_value()  # -inf for floats
        flat = []
        for lo, hi in reversed(pads):
            flat += [lo, hi]
        xb = pad_(xb, flat, value=fill)
    win = _pool_windows(xb, nsp, outs, kernel, stride, dil)
    out = amax(win, list(range(2 + nsp, 2 + 2 * nsp)))
    return out.squeeze(0) if unbatched else out


@hl_op(torch="torch.nn.functional.max_pool1d", category="pool", method=False)
def max_pool1d(input: GraphTensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> GraphTensor:
    """1-D max pooling over (N, C, L) or (C, L); padding counts as -inf; NaN propagates."""
    return _max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


@hl_op(torch="torch.nn.functional.max_pool2d", category="pool", method=False)
def max_pool2d(input: GraphTensor, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1,
               ceil_mode: bool = False, return_indices: bool = False) -> GraphTensor:
    """2-D max pooling over (N, C, H, W) or (C, H, W); padding counts as -inf; NaN propagates."""
    return _max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def _unflat_out(z: Expr, outs: Sequence[Expr]) -> list[Expr]:
    """Per-axis indexes of flat index z over the row-major shape ``outs``."""
    idx, inner = [], as_expr(1)
    for k in range(len(outs) - 1, -1, -1):
        i = z // inner
        if k:
            i = i % outs[k]
        idx.append(i)
        inner = inner * outs[k]
    return idx[::-1]


def _avg_divisor(x: GraphTensor, sizes: Sequence[Expr], outs: Sequence[Expr], kernel, stride, pad,
                 extras: Sequence[Expr], count_include_pad: bool) -> GraphTensor | int:
    """PyTorch's avg-pool divide factor per output position (an int when it is the same everywhere);
    ``extras`` is the ceil_mode padding beyond ``pad`` on the right."""
    overhang = any(not e.is_const or e.value != 0 for e in extras)
    if not overhang and (count_include_pad or all(p == 0 for p in pad)):
        return math.prod(kernel)
    z = sym(INDEX_VAR)
    count = as_expr(1)
    for o, n, k, s, p in zip(_unflat_out(z, outs), sizes, kernel, stride, pad):
        start = o * s - p
        end = smin(start + k, n + p)
        if count_include_pad:
            count = count * (end - start)
        else:
            count = count * (smin(end, n) - smax(start, 0))
    return cast(x.graph.iota(count, tuple(outs), dt.int64), x.dtype)


def _avg_pool(op: str, nsp: int, x: Any, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool,
              count_include_pad: bool, divisor_override: int | None) -> GraphTensor:
    x = _check_tensor(x, "input", op)
    if not x.dtype.is_float:
        raise DTypeError(f"{op}: needs a floating-point input, got {x.dtype.name}")
    kernel, stride, pad, dil = _pool_params(op, nsp, kernel_size, stride, padding, 1)
    if divisor_override is not None and (not _is_int(divisor_override) or divisor_override == 0):
        raise ShapeError(f"{op}: divisor_override must be a nonzero int, got {divisor_override!r}")
    xb, unbatched = _spatial_input(x, nsp, op)
    sizes = xb.shape[2:]
    pads, outs = _pool_geometry(op, x, sizes, kernel, stride, pad, dil, ceil_mode)
    if any(lo != 0 or hi != 0 for lo, hi in pads):
        xb = xb.with_view(xb.st.pad([(0, 0), (0, 0)] + pads))
    win = _pool_windows(xb, nsp, outs, kernel, stride, dil)
    total = sum_(win, list(range(2 + nsp, 2 + 2 * nsp)))
    if divisor_override is not None:
        divisor: GraphTensor | int = int(divisor_override)
    else:
        extras = [hi - p for p, (_, hi) in zip(pad, pads)]
        divisor = _avg_divisor(x, sizes, outs, kernel, stride, pad, extras, count_include_pad)
    if isinstance(divisor, GraphTensor):
        divisor = divisor.expand(*total.shape)
    out = div(total, divisor)
    return out.squeeze(0) if unbatched else out


@hl_op(torch="torch.nn.functional.avg_pool1d", category="pool", method=False)
def avg_pool1d(input: GraphTensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> GraphTensor:
    """1-D average pooling over (N, C, L) or (C, L), as torch."""
    return _avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


@hl_op(torch="torch.nn.functional.avg_pool2d", category="pool", method=False)
def avg_pool2d(input: GraphTensor, kernel_size: Any, stride: Any = None, padding: Any = 0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> GraphTensor:
    """2-D average pooling over (N, C, H, W) or (C, H, W); ceil_mode, count_include_pad, divisor_override.

    The divisor per output position follows PyTorch's CPU kernel exactly (Iota index arithmetic)."""
    return _avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


# ============================================================== interpolation
# PyTorch's CPU nearest kernels compute source indexes in one of two ways:
# * the generic kernel (1-D, 3-D, and 2-D outputs with out_h + out_w > 128): HelperInterpNearest[Exact]
#   with the scale and products in the data's opmath type t (float64 for float64 data, else float32);
# * the "channels-last" kernel (2-D outputs with out_h + out_w <= 128, for NCHW-contiguous inputs):
#   the legacy nearest_idx / nearest_exact_idx, in float32, with shortcuts for out == in, out == 2*in.
# Both are reproduced bit for bit, in numpy for constant sizes and in the graph for symbolic ones.
_LEGACY_2D_MAX_OUT = 128


def _np_nearest_index(n_in: int, n_out: int, sf: float | None, exact: bool, t: type,
                      legacy: bool = False) -> np.ndarray:
    """PyTorch's CPU nearest / nearest-exact source indexes along one axis (see above)."""
    i = np.arange(n_out, dtype=np.int64)
    if legacy:
        if not exact and n_out == n_in:
            return i
        if not exact and n_out == 2 * n_in:
            return i >> 1
        t = np.float32
    scale = t(1.0 / sf) if sf is not None else t(t(n_in) / t(n_out))
    if legacy and exact:
        idx = np.floor(((i + 0.5) * np.float64(scale)).astype(np.float32))
    elif exact:
        real = (np.float64(scale) * (i + 0.5) - 0.5).astype(t)
        real = np.where(real < 0, t(0), real)
        idx = np.floor((real.astype(np.float64) + 0.5).astype(np.float32))
    else:
        idx = np.floor((scale * i.astype(t)).astype(t).astype(np.float32))
    return np.minimum(idx.astype(np.int64), n_in - 1)


def _graph_nearest_index(x: GraphTensor, n_in: Expr, n_out: Expr, sf: float | None, exact: bool,
                         t: dt.DType, legacy: bool = False) -> GraphTensor:
    """The same index arithmetic as :func:`_np_nearest_index`, in the graph (for symbolic sizes).

    A scale computed from the sizes is ``fl_t(n_in / n_out)``: float64 ``n_in * (1 / n_out)`` rounded
    once to t, which is the correctly rounded quotient for t = float32 (sizes below 2**24); for
    t = float64 it may be 1 ulp off, which cannot change an index for sizes below 4096."""
    g = x.graph
    shape = (n_out,)
    if legacy:
        t = dt.float32
    i = g.iota(sym(INDEX_VAR), shape, dt.int64)
    if sf is not None:
        scale = full(g, shape, float(np.asarray(1.0 / sf, dtype=t.np)), t)
    else:
        q = prim("Mul", cast(fill_expr(g, n_in, shape), dt.float64),
                 prim("Recip", cast(fill_expr(g, n_out, shape), dt.float64)))
        scale = cast(q, t)
    half = full(g, shape, 0.5, dt.float64)
    if legacy and exact:  # floorf((i + 0.5) * scale), the product in float64
        real = prim("Mul", prim("Add", cast(i, dt.float64), half), cast(scale, dt.float64))
    elif exact:  # real = t(fl64(fl64(scale * (i + 0.5)) - 0.5)); index = floorf(real + 0.5)
        real = prim("Mul", prim("Add", cast(i, dt.float64), half), cast(scale, dt.float64))
        real = cast(prim("Add", real, full(g, shape, -0.5, dt.float64)), t)
        real = prim("Add", cast(real, dt.float64), half)
    else:
        real = prim("Mul", cast(i, t), scale)
    # values are >= 0 (a negative real is at least -0.5 and truncates to 0), so truncation is floor
    idx = cast(cast(real, dt.float32), dt.int64)
    idx = minimum(idx, fill_expr(g, n_in - 1, shape, dt.int64))
    if legacy and not exact:  # the shortcuts: out == in -> i; out == 2*in -> i >> 1
        z = sym(INDEX_VAR)
        same, double = n_out.eq(n_in), n_out.eq(2 * n_in)
        if not (same.is_const and same.value == 0 and double.is_const and double.value == 0):
            shortcut = g.iota(same * z + (1 - same) * double * (z // 2), shape, dt.int64)
            use_float = g.iota((1 - same) * (1 - double), shape, dt.int64)
            idx = prim("Add", shortcut, prim("Mul", use_float, idx))
    return idx


def _blend_index(g, cond: Expr, a: GraphTensor, b: GraphTensor) -> GraphTensor:
    """``a`` where the 0/1 dim expression ``cond`` holds, else ``b`` (exact integer arithmetic)."""
    c = g.iota(cond, a.shape, dt.int64)
    return prim("Add", b, prim("Mul", c, prim("Add", a, prim("Mul", b, full(g, b.shape, -1, dt.int64)))))


def _dyadic(sf: float) -> tuple[int, int] | None:
    """sf == p / 2**m with small p and m (so floor(n * sf) is exact integer arithmetic)."""
    fr = Fraction(sf)
    den = fr.denominator
    if den & (den - 1) == 0 and den <= 2**20 and fr.numerator < 2**20:
        return fr.numerator, den
    return None


def _pow2(v: int) -> bool:
    return v >= 1 and v & (v - 1) == 0


@hl_op(torch="torch.nn.functional.interpolate", category="resize", method=False)
def interpolate(input: GraphTensor, size: Any = None, scale_factor: Any = None, mode: str = "nearest",
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> GraphTensor:
    """Nearest / nearest-exact resize of (N, C, *spatial), 1 to 3 spatial dims; indexes bit-exact with torch CPU.

    PyTorch's CPU kernels compute source indexes in float arithmetic that depends on the data
    dtype and, for 2-D, on the output size (see the comment above ``_LEGACY_2D_MAX_OUT``); this op
    reproduces it, so results match PyTorch run on the same dtype with an NCHW-contiguous input.
    Repeat and stride index patterns become views; other axes are read by one Gather."""
    op = "interpolate"
    x = _check_tensor(input, "input", op)
    if mode not in ("nearest", "nearest-exact"):
        raise UnsupportedError(f"{op}: mode {mode!r} is not supported (only 'nearest' and 'nearest-exact')")
    if align_corners is not None:
        raise ShapeError(f"{op}: align_corners can only be set with the linear interpolating modes")
    if antialias:
        raise ShapeError(f"{op}: antialias is only defined for the bilinear/bicubic modes")
    nsp = x.ndim - 2
    if nsp not in (1, 2, 3):
        raise ShapeError(f"{op}: expected a 3-D, 4-D or 5-D input (N, C, *spatial), got shape {fmt_shape(x.shape)}")
    in_sizes = list(x.shape[2:])
    if (size is None) == (scale_factor is None):
        raise ShapeError(f"{op}: exactly one of size and scale_factor must be given")
    if size is not None:
        if recompute_scale_factor:
            raise ShapeError(f"{op}: recompute_scale_factor is not meaningful with an explicit size")
        sizes = list(size) if isinstance(size, (tuple, list)) else [size] * nsp
        if len(sizes) != nsp:
            raise ShapeError(f"{op}: size {tuple(sizes)} must have one entry per spatial dim of input "
                             f"{fmt_shape(x.shape)}")
        out_sizes = [as_expr(s) for s in sizes]
        scales: list[float | None] = [None] * nsp
    else:
        sfs = list(scale_factor) if isinstance(scale_factor, (tuple, list)) else [scale_factor] * nsp
        if len(sfs) != nsp:
            raise ShapeError(f"{op}: scale_factor {tuple(sfs)} must have one entry per spatial dim of input "
                             f"{fmt_shape(x.shape)}")
        out_sizes, scales = [], []
        for n, sf in zip(in_sizes, sfs):
            sf = float(sf)
            if not sf > 0:
                raise ShapeError(f"{op}: scale_factor must be positive, got {sf}")
            if n.is_const:
                out_sizes.append(as_expr(math.floor(n.value * sf)))
            else:
                pq = _dyadic(sf)
                if pq is None:
                    raise UnsupportedError(f"{op}: scale_factor {sf} with the symbolic size {n} is not supported "
                                           "(needs a dyadic factor such as 2, 0.5 or 1.5); pass size= instead")
                out_sizes.append((n * pq[0]) // pq[1])
            scales.append(None if recompute_scale_factor else sf)
    for n, o in zip(in_sizes, out_sizes):
        if (n.is_const and n.value < 1) or (o.is_const and o.value < 1):
            raise ShapeError(f"{op}: input and output sizes must be positive, got input {fmt_shape(x.shape)} "
                             f"and output size {tuple(str(s) for s in out_sizes)}")
    exact = mode == "nearest-exact"
    t = dt.float64 if x.dtype == dt.float64 else dt.float32

    # which PyTorch kernel (and so which index arithmetic): a bool, or a 0/1 dim expression
    legacy: bool | Expr = False
    if nsp == 2:
        cond = (out_sizes[0] + out_sizes[1]).le(_LEGACY_2D_MAX_OUT)
        legacy = bool(cond.value) if cond.is_const else cond

    # per axis: a view (repeat / stride pattern) or a 1-D index tensor for the Gather
    st = x.st
    gathers: dict[int, GraphTensor] = {}
    for j, (n, o, sf) in enumerate(zip(in_sizes, out_sizes, scales)):
        ax = 2 + j
        if n.is_const and o.is_const:
            arrs = {leg: _np_nearest_index(n.value, o.value, sf, exact, t.np.type, leg)
                    for leg in ((False, True) if isinstance(legacy, Expr) else (legacy,))}
            if len(arrs) == 1 or np.array_equal(arrs[False], arrs[True]):
                idx = next(iter(arrs.values()))
                st, done = _index_as_view(st, ax, idx)
                if not done:
                    gathers[ax] = x.graph.constant(idx, dt.int64)
            else:
                gathers[ax] = _blend_index(x.graph, legacy, x.graph.constant(arrs[True], dt.int64),
                                           x.graph.constant(arrs[False], dt.int64))
            continue
        st, done = _symbolic_nearest_view(st, ax, n, o, sf, exact)
        if done:
            continue
        if isinstance(legacy, Expr):
            gathers[ax] = _blend_index(x.graph, legacy, _graph_nearest_index(x, n, o, sf, exact, t, True),
                                       _graph_nearest_index(x, n, o, sf, exact, t, False))
        else:
            gathers[ax] = _graph_nearest_index(x, n, o, sf, exact, t, legacy)
    y = x.with_view(st)
    if not gathers:
        return y
    return _gather_axes(y, gathers)


def _index_as_view(st, ax: int, idx: np.ndarray):
    """Express ``out[..., i, ...] = in[..., idx[i], ...]`` along ``ax`` as a view when idx is a
    repeat (i // k) or an arithmetic progression (a + i * k)."""
    m = idx.shape[0]
    i = np.arange(m)
    n = st.shape[ax]
    if m > 1 and idx[-1] >= idx[0] and (idx[1] - idx[0]) >= 1 and np.array_equal(idx, idx[0] + i * (idx[1] - idx[0])):
        step = int(idx[1] - idx[0])
        bounds = [(0, d, 1) for d in st.shape]
        bounds[ax] = (int(idx[0]), int(idx[0]) + (m - 1) * step + 1, step)
        return st.slice(bounds), True
    if m == 1 or np.all(idx == idx[0]):
        bounds = [(0, d, 1) for d in st.shape]
        bounds[ax] = (int(idx[0]), int(idx[0]) + 1, 1)
        st = st.slice(bounds)
        return _repeat_axis(st, ax, m), True
    if n.is_const and m % n.value == 0:
        k = m // n.value
        if np.array_equal(idx, i // k):
            return _repeat_axis(st, ax, k), True
    return st, False


def _repeat_axis(st, ax: int, k: ExprLike):
    """Repeat each element of axis ``ax`` k times (repeat_interleave) as a view."""
    k = as_expr(k)
    shape = list(st.shape)
    n = shape[ax]
    inter = shape[:ax + 1] + [as_expr(1)] + shape[ax + 1:]
    target = shape[:ax + 1] + [k] + shape[ax + 1:]
    final = shape[:ax] + [n * k] + shape[ax + 1:]
    return st.reshape(inter).expand(target).reshape(final)


def _symbolic_nearest_view(st, ax: int, n: Expr, o: Expr, sf: float | None, exact: bool):
    """Views for symbolic sizes where PyTorch's index arithmetic (either kernel) is provably a
    repeat/stride for every binding: power-of-two up- and down-scaling, where the float scale and
    products are exact."""
    if exact:
        return st, False
    if sf is not None:
        if float(sf).is_integer() and _pow2(int(sf)):
            k = int(sf)  # scale 1/k exact, i * (1/k) exact, floor = i // k; o == n * k
            return (_repeat_axis(st, ax, k), True) if k > 1 else (st, True)
        inv = 1.0 / sf
        if float(inv).is_integer() and _pow2(int(inv)):
            k = int(inv)  # scale k exact: index i * k; o == n // k
            bounds = [(0, d, 1) for d in st.shape]
            bounds[ax] = (0, o * k - (k - 1), k)
            return st.slice(bounds), True
        return st, False
    for k in (1, 2, 4, 8, 16, 32, 64):
        if o == n * k:
            return (_repeat_axis(st, ax, k), True) if k > 1 else (st, True)
        if k > 1 and n == o * k:
            bounds = [(0, d, 1) for d in st.shape]
            bounds[ax] = (0, o * k - (k - 1), k)
            return st.slice(bounds), True
    return st, False


def _gather_axes(y: GraphTensor, gathers: dict[int, GraphTensor]) -> GraphTensor:
    """One Gather reading ``y`` at the given per-axis source indexes (other axes pass through)."""
    g = y.graph
    in_shape = y.shape
    out_shape = tuple(gathers[a].shape[0] if a in gathers else d for a, d in enumerate(in_shape))
    in_strides = []
    acc = as_expr(1)
    for d in reversed(in_shape):
        in_strides.append(acc)
        acc = acc * d
    in_strides = in_strides[::-1]
    z = sym(INDEX_VAR)
    coords = _unflat_out(z, out_shape)
    base = as_expr(0)
    for a, (c, s) in enumerate(zip(coords, in_strides)):
        if a not in gathers:
            base = base + c * s
    flat = g.iota(base, out_shape, dt.int64)
    for a, idx in gathers.items():
        shp = [1] * len(out_shape)
        shp[a] = out_shape[a]
        term = idx.reshape(*shp)
        if in_strides[a] != 1:
            term = prim("Mul", term, fill_expr(g, in_strides[a], term.shape, dt.int64))
        flat = prim("Add", flat, term.expand(*out_shape))
    return prim("Gather", flat, y)


# ============================================================== normalisation
def _channel_param(p: Any, c: Expr, name: str, op: str, x: GraphTensor) -> GraphTensor | None:
    if p is None:
        return None
    p = _check_tensor(p, name, op)
    if p.ndim != 1 or p.shape[0] != c:
        raise ShapeError(f"{op}: {name} must have shape ({c},) (one value per channel), got {fmt_shape(p.shape)} "
                         f"for input of shape {fmt_shape(x.shape)}")
    if not p.dtype.is_float:
        raise DTypeError(f"{op}: {name} must be a floating-point tensor, got {p.dtype.name}")
    return p


@hl_op(torch="torch.nn.functional.group_norm", category="nn", method=False)
def group_norm(input: GraphTensor, num_groups: int, weight: GraphTensor | None = None,
               bias: GraphTensor | None = None, eps: float = 1e-5) -> GraphTensor:
    """Normalise (N, C, *) over groups of channels and all trailing dims, then a per-channel affine.

    Each of the num_groups groups holds C/num_groups consecutive channels; the variance is biased."""
    op = "group_norm"
    x = _check_tensor(input, "input", op)
    if x.ndim < 2:
        raise ShapeError(f"{op}: expected an input of at least 2 dims (N, C, *), got shape {fmt_shape(x.shape)}")
    if not x.dtype.is_float:
        raise DTypeError(f"{op}: needs a floating-point input, got {x.dtype.name}")
    if isinstance(num_groups, Expr):  # e.g. x.shape[1] (instance norm): a dim object, fine when it is a constant
        num_groups = _const_dim(num_groups, "num_groups", op)
    if not _is_int(num_groups) or num_groups < 1:
        raise ShapeError(f"{op}: num_groups must be a positive int, got {num_groups!r}")
    num_groups = int(num_groups)
    c = _const_dim(x.shape[1], "the channel dim", op)
    if c % num_groups:
        raise ShapeError(f"{op}: the number of channels ({c}) must be divisible by num_groups ({num_groups}), "
                         f"input shape {fmt_shape(x.shape)}")
    weight = _channel_param(weight, x.shape[1], "weight", op, x)
    bias = _channel_param(bias, x.shape[1], "bias", op, x)
    n, rest = x.shape[0], x.shape[2:]
    xs = x.reshape(n, num_groups, c // num_groups, *rest)
    axes = list(range(2, xs.ndim))
    mu = mean(xs, axes, keepdim=True)
    v = var(xs, axes, correction=0, keepdim=True)
    out = ((xs - mu) * rsqrt(v + eps)).reshape(*x.shape)
    bshape = (c,) + (1,) * len(rest)
    if weight is not None:
        out = out * weight.reshape(*bshape)
    if bias is not None:
        out = out + bias.reshape(*bshape)
    return out


@hl_op(torch="torch.nn.functional.batch_norm", category="nn", method=False)
def batch_norm(input: GraphTensor, running_mean: GraphTensor | None, running_var: GraphTensor | None,
               weight: GraphTensor | None = None, bias: GraphTensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> GraphTensor:
    """Eval-mode batch norm over (N, C, *) with running statistics: one per-channel ``x * a + b``.

    ``a = weight / sqrt(running_var + eps)`` and ``b = bias - running_mean * a``, as PyTorch's CPU
    kernel.  ``training=True`` (batch statistics) raises UnsupportedError."""
    op = "batch_norm"
    x = _check_tensor(input, "input", op)
    if training:
        raise UnsupportedError(f"{op}: training=True (batch statistics) is not supported; use training=False")
    if running_mean is None or running_var is None:
        raise UnsupportedError(f"{op}: running_mean and running_var must be given in evaluation mode")
    if x.ndim < 2:
        raise ShapeError(f"{op}: expected an input of at least 2 dims (N, C, *), got shape {fmt_shape(x.shape)}")
    if not x.dtype.is_float:
        raise DTypeError(f"{op}: needs a floating-point input, got {x.dtype.name}")
    if eps < 0:
        raise ShapeError(f"{op}: eps must be non-negative, got {eps}")
    c = x.shape[1]
    rm = _channel_param(running_mean, c, "running_mean", op, x)
    rv = _channel_param(running_var, c, "running_var", op, x)
    weight = _channel_param(weight, c, "weight", op, x)
    bias = _channel_param(bias, c, "bias", op, x)
    pdt = dt.result_type(*[p for p in (rm, rv, weight, bias) if p is not None])
    scale = rsqrt(cast(rv, pdt) + eps)
    if weight is not None:
        scale = scale * cast(weight, pdt)
    shift = -(cast(rm, pdt) * scale)
    if bias is not None:
        shift = shift + cast(bias, pdt)
    bshape = (c,) + (1,) * (x.ndim - 2)
    return x * cast(scale, x.dtype).reshape(*bshape) + cast(shift, x.dtype).reshape(*bshape)
