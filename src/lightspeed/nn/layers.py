"""Basic layers: Linear, Embedding, RMSNorm (plain and Gemma's ``1 + w``), LayerNorm.

Each ``forward(b, x)`` reads its parameters through the :class:`~lightspeed.nn.Builder` ``b`` and
returns a lazy tensor.  Element-wise results come out row-major in the shape of ``x``'s *view*, so
a caller that passes a permuted view gets the permuted layout for free (attention uses this to
lay heads out for batched matmuls without a copy).
"""

from __future__ import annotations

import numpy as np

from .. import hl
from ..errors import ShapeError
from ..graph import GraphTensor
from .module import Builder, Module

__all__ = ["Linear", "Embedding", "RMSNorm", "LayerNorm"]


def _last_dim(x: GraphTensor, want: int, what: str) -> None:
    if x.ndim == 0 or x.shape[-1] != want:
        raise ShapeError(f"{what}: expected an input whose last dim is {want}, got shape "
                         f"({', '.join(map(str, x.shape))})")


class Linear(Module):
    """``x @ weight.T (+ bias)`` with ``weight`` of shape (out_features, in_features), as nn.Linear."""

    def __init__(self, prefix: str, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__(prefix)
        self.in_features, self.out_features, self.bias = in_features, out_features, bias

    def own_params(self) -> dict[str, tuple[int, ...]]:
        p = {self.pname("weight"): (self.out_features, self.in_features)}
        if self.bias:
            p[self.pname("bias")] = (self.out_features,)
        return p

    def forward(self, b: Builder, x: GraphTensor) -> GraphTensor:
        _last_dim(x, self.in_features, self.prefix)
        w = b.param(self.pname("weight"), (self.out_features, self.in_features))
        # weight.T is a strided view: BLAS takes it as a transposed operand, no copy
        out = x @ w.transpose(0, 1)
        if self.bias:
            out = out + b.param(self.pname("bias"), (self.out_features,))
        return out


class Embedding(Module):
    """Rows of ``weight`` (num_embeddings, dim) for integer ids; optional constant ``scale``
    (Gemma multiplies by sqrt(hidden) rounded to the weight dtype)."""

    def __init__(self, prefix: str, num_embeddings: int, dim: int, scale: float | None = None) -> None:
        super().__init__(prefix)
        self.num_embeddings, self.dim, self.scale = num_embeddings, dim, scale

    def own_params(self) -> dict[str, tuple[int, ...]]:
        return {self.pname("weight"): (self.num_embeddings, self.dim)}

    def weight(self, b: Builder) -> GraphTensor:
        return b.param(self.pname("weight"), (self.num_embeddings, self.dim))

    def attend(self, b: Builder, x: GraphTensor) -> GraphTensor:
        """``x @ weight.T``: a tied output head (a vocabulary-parallel embedding gathers it)."""
        return x @ self.weight(b).transpose(0, 1)

    def forward(self, b: Builder, ids: GraphTensor) -> GraphTensor:
        out = hl.embedding(ids, self.weight(b))
        if self.scale is not None:
            out = out * float(np.asarray(self.scale, dtype=out.dtype.np))
        return out


class RMSNorm(Module):
    """``x * rsqrt(mean(x^2) + eps) * w`` over the last dim; ``unit_offset=True`` multiplies by
    ``1 + w`` instead (Gemma, whose weights are stored as offsets from one)."""

    def __init__(self, prefix: str, dim: int, eps: float = 1e-6, unit_offset: bool = False) -> None:
        super().__init__(prefix)
        self.dim, self.eps, self.unit_offset = dim, eps, unit_offset

    def own_params(self) -> dict[str, tuple[int, ...]]:
        return {self.pname("weight"): (self.dim,)}

    def forward(self, b: Builder, x: GraphTensor) -> GraphTensor:
        _last_dim(x, self.dim, self.prefix)
        w = b.param(self.pname("weight"), (self.dim,))
        if self.unit_offset:
            w = w + 1.0
        # sum * (1/n) instead of mean: the same value up to rounding, and the two scalar ops
        # run on the reduced [..., 1] tensor only
        ss = (x * x).sum(-1, keepdim=True)
        r = hl.rsqrt(ss * (1.0 / self.dim) + self.eps)
        return x * r * w


class LayerNorm(Module):
    """nn.LayerNorm over the last dim, with optional weight and bias."""

    def __init__(self, prefix: str, dim: int, eps: float = 1e-5, weight: bool = True, bias: bool = True) -> None:
        super().__init__(prefix)
        self.dim, self.eps, self.has_weight, self.has_bias = dim, eps, weight, bias

    def own_params(self) -> dict[str, tuple[int, ...]]:
        p = {}
        if self.has_weight:
            p[self.pname("weight")] = (self.dim,)
        if self.has_bias:
            p[self.pname("bias")] = (self.dim,)
        return p

    def forward(self, b: Builder, x: GraphTensor) -> GraphTensor:
        _last_dim(x, self.dim, self.prefix)
        w = b.param(self.pname("weight"), (self.dim,)) if self.has_weight else None
        bias = b.param(self.pname("bias"), (self.dim,)) if self.has_bias else None
        return hl.layer_norm(x, (self.dim,), w, bias, eps=self.eps)
