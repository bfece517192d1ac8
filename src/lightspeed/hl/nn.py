"""Neural-network building blocks: softmax, log_softmax, layer_norm, rms_norm."""

from __future__ import annotations

from collections.abc import Sequence

from ..dtypes import DType
from ..errors import ShapeError
from ..graph import GraphTensor
from ._base import cast, fmt_shape, norm_axis
from .elementwise import exp, log, rsqrt, sub
from .reduce import amax, mean, sum, var
from .registry import hl_op


@hl_op(torch="torch.softmax", category="nn")
def softmax(x: GraphTensor, dim: int, dtype: DType | None = None) -> GraphTensor:
    if dtype is not None:
        x = cast(x, dtype)
    k = norm_axis(dim, x.ndim, "softmax")
    e = exp(sub(x, amax(x, k, keepdim=True)))
    return e / sum(e, k, keepdim=True)


@hl_op(torch="torch.log_softmax", category="nn")
def log_softmax(x: GraphTensor, dim: int, dtype: DType | None = None) -> GraphTensor:
    if dtype is not None:
        x = cast(x, dtype)
    k = norm_axis(dim, x.ndim, "log_softmax")
    shifted = sub(x, amax(x, k, keepdim=True))
    return sub(shifted, log(sum(exp(shifted), k, keepdim=True)))


def _norm_axes(x: GraphTensor, normalized_shape: int | Sequence, op: str) -> list[int]:
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if len(ns) > x.ndim or tuple(x.shape[x.ndim - len(ns):]) != tuple(ns):
        raise ShapeError(f"{op}: normalized_shape {tuple(ns)} does not match the trailing dims of "
                         f"input shape {fmt_shape(x.shape)}")
    return list(range(x.ndim - len(ns), x.ndim))


@hl_op(torch="torch.nn.functional.layer_norm", category="nn")
def layer_norm(x: GraphTensor, normalized_shape: int | Sequence, weight: GraphTensor | None = None,
               bias: GraphTensor | None = None, eps: float = 1e-5) -> GraphTensor:
    axes = _norm_axes(x, normalized_shape, "layer_norm")
    mu = mean(x, axes, keepdim=True)
    v = var(x, axes, correction=0, keepdim=True)
    out = (x - mu) * rsqrt(v + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


@hl_op(torch="torch.nn.functional.rms_norm", category="nn")
def rms_norm(x: GraphTensor, normalized_shape: int | Sequence, weight: GraphTensor | None = None,
             eps: float | None = None) -> GraphTensor:
    """x / sqrt(mean(x^2) + eps) * weight; eps defaults to the dtype's machine epsilon (PyTorch)."""
    axes = _norm_axes(x, normalized_shape, "rms_norm")
    if eps is None:
        import numpy as np

        eps = float(np.finfo(np.float32 if x.dtype.itemsize < 4 else x.dtype.np).eps)
    out = x * rsqrt(mean(x * x, axes, keepdim=True) + eps)
    if weight is not None:
        out = out * weight
    return out
