"""Neural-network building blocks: softmax, log_softmax, layer_norm, rms_norm, attention."""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence

import numpy as np

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import ShapeError, UnsupportedError
from ..graph import GraphTensor
from ..symbolic import Expr, ExprLike, as_expr
from .common import cast, fmt_shape, full, norm_axis
from .elementwise import exp, log, maximum, rsqrt, sub, where
from .linalg import matmul
from .movement import repeat_interleave
from .reduce import amax, mean, sum, var
from .registry import hl_op
from .scan_sort import tril


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


def _norm_axes(x: GraphTensor, normalized_shape: ExprLike | Sequence[ExprLike], op: str) -> list[int]:
    """The trailing axes ``normalized_shape`` names. A single dim (an int as torch takes it, or an
    Expr / dim name such as ``x.shape[-1]`` when that dim is symbolic) means one trailing axis."""
    single = isinstance(normalized_shape, (Expr, str, int, np.integer)) and not isinstance(normalized_shape, bool)
    try:
        ns = tuple(as_expr(d) for d in ((normalized_shape,) if single else normalized_shape))
    except (TypeError, ValueError):  # not iterable, or an element that is no dim (bool, float, bad string)
        raise ShapeError(f"{op}: normalized_shape must be a dim or a sequence of dims (ints or symbolic "
                         f"sizes), got {normalized_shape!r}") from None
    if len(ns) > x.ndim or tuple(x.shape[x.ndim - len(ns):]) != ns:
        raise ShapeError(f"{op}: normalized_shape {fmt_shape(ns)} does not match the trailing dims of "
                         f"input shape {fmt_shape(x.shape)}")
    return list(range(x.ndim - len(ns), x.ndim))


@hl_op(torch="torch.nn.functional.layer_norm", category="nn")
def layer_norm(x: GraphTensor, normalized_shape: ExprLike | Sequence[ExprLike], weight: GraphTensor | None = None,
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
def rms_norm(x: GraphTensor, normalized_shape: ExprLike | Sequence[ExprLike], weight: GraphTensor | None = None,
             eps: float | None = None) -> GraphTensor:
    """x / sqrt(mean(x^2) + eps) * weight; eps defaults to the dtype's machine epsilon (PyTorch)."""
    axes = _norm_axes(x, normalized_shape, "rms_norm")
    if eps is None:
        eps = float(np.finfo(np.float32 if x.dtype.itemsize < 4 else x.dtype.np).eps)
    out = x * rsqrt(mean(x * x, axes, keepdim=True) + eps)
    if weight is not None:
        out = out * weight
    return out


@hl_op(torch="torch.nn.functional.scaled_dot_product_attention", category="nn", method=False)
def scaled_dot_product_attention(query: GraphTensor, key: GraphTensor, value: GraphTensor,
                                 attn_mask: GraphTensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> GraphTensor:
    """softmax(q @ k^T * scale + mask) @ v over (..., L, E) queries and (..., S, E) keys, as one op.

    A bool mask keeps True positions, a float mask is added; ``is_causal`` keeps key j <= query i
    (top-left aligned); ``enable_gqa`` shares each key/value head among query heads (dim -3).  A row
    whose keys are all masked gives zeros, as PyTorch's kernels do."""
    if dropout_p:
        raise UnsupportedError("scaled_dot_product_attention: dropout_p > 0 (training) is not supported")
    if query.ndim < 2 or key.ndim < 2 or value.ndim < 2:
        raise ShapeError(f"scaled_dot_product_attention: query, key and value need (..., L, E) shapes, got "
                         f"{fmt_shape(query.shape)}, {fmt_shape(key.shape)}, {fmt_shape(value.shape)}")
    e = query.shape[-1]
    if scale is None:
        if not e.is_const:
            raise UnsupportedError("scaled_dot_product_attention: a symbolic head dim needs an explicit scale")
        scale = 1.0 / math.sqrt(e.value)
    if query.ndim >= 3 and key.ndim >= 3 and query.shape[-3] != key.shape[-3]:
        hq, hk = query.shape[-3], key.shape[-3]
        if not (enable_gqa and hq.is_const and hk.is_const and hq.value % hk.value == 0):
            raise ShapeError(f"scaled_dot_product_attention: {hq} query heads and {hk} key heads need "
                             "enable_gqa=True and a whole number of query heads per key head")
        key = repeat_interleave(key, hq.value // hk.value, dim=-3)
        value = repeat_interleave(value, hq.value // hk.value, dim=-3)
    scores = matmul(query, key.transpose(-2, -1)) * scale
    neg_inf = full(scores.graph, (), float("-inf"), scores.dtype)
    if is_causal:
        ll, ss = scores.shape[-2], scores.shape[-1]
        keep = tril(full(scores.graph, (ll, ss), True, dt.bool_))
        scores = where(keep, scores, neg_inf)
    if attn_mask is not None:
        if attn_mask.dtype.is_bool:
            scores = where(attn_mask, scores, neg_inf)
        else:
            scores = scores + cast(attn_mask, scores.dtype)
    # softmax whose fully masked rows are 0, not NaN: the row max is clamped to the lowest finite
    # value (so exp(-inf - m) = 0) and the sum to the smallest normal (a live row sums to >= 1)
    npd = scores.dtype.np  # ml_dtypes' finfo only for its own types (importing it takes ~1 s)
    info = np.finfo(npd) if npd.kind == "f" else importlib.import_module("ml_dtypes").finfo(npd)
    lowest, tiny = float(info.min), float(info.tiny)
    m = maximum(amax(scores, -1, keepdim=True), lowest)
    ex = exp(sub(scores, m))
    p = ex / maximum(sum(ex, -1, keepdim=True), tiny)
    return matmul(cast(p, value.dtype), value)
