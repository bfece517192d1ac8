"""Matrix products: broadcast Mul then SumReduce over k.

The canonical form (the one later rules match to BLAS/cuBLASLt) is, for ``a[..., m, k] @
b[..., k, n]``: both operands viewed as ``[..., m, n, k]`` (a with stride 0 on n, b transposed
with stride 0 on m), multiplied, and summed over the last axis.
"""

from __future__ import annotations

from ..errors import DTypeError, ShapeError
from ..graph import GraphTensor
from .common import broadcast_shapes, fmt_shape, prim
from .registry import hl_op


@hl_op(torch="torch.matmul", category="linalg", aliases=("mm", "bmm"))
def matmul(a: GraphTensor, b: GraphTensor) -> GraphTensor:
    """``a @ b`` with PyTorch's rules for 1-D operands and broadcast batch dims."""
    if not isinstance(a, GraphTensor) or not isinstance(b, GraphTensor):
        raise TypeError("matmul: both operands must be GraphTensors")
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("matmul: both operands need at least one dim, got "
                         f"{fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    if a.dtype != b.dtype:  # as in PyTorch: no implicit promotion inside a matmul
        raise DTypeError(f"matmul: operands must have the same dtype, got {a.dtype.name} {fmt_shape(a.shape)} "
                         f"and {b.dtype.name} {fmt_shape(b.shape)}; cast one of them first")
    if a.dtype.is_bool:
        raise DTypeError("matmul: bool operands are not supported")
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    if a_vec:
        a = a.unsqueeze(0)
    if b_vec:
        b = b.unsqueeze(1)
    m, k = a.shape[-2], a.shape[-1]
    k2, n = b.shape[-2], b.shape[-1]
    if k != k2:
        raise ShapeError(f"matmul: inner dims differ: {fmt_shape(a.shape)} @ {fmt_shape(b.shape)} ({k} vs {k2})")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2], op="matmul")
    nb = len(batch)
    # a: [..., m, k] -> [..., m, 1, k] -> [..., m, n, k]
    av = a.with_view(a.st.reshape(a.shape[:-1] + (1,) + a.shape[-1:]))
    av = av.expand(*batch, m, n, k)
    # b: [..., k, n] -> [..., n, k] -> [..., 1, n, k] -> [..., m, n, k]
    bt = b.transpose(-1, -2)
    bv = bt.with_view(bt.st.reshape(bt.shape[:-2] + (1,) + bt.shape[-2:]))
    bv = bv.expand(*batch, m, n, k)
    out = prim("SumReduce", prim("Mul", av, bv), arg=nb + 2)
    if a_vec:
        out = out.squeeze(-2)
    if b_vec:
        out = out.squeeze(-1)
    return out


GraphTensor.__matmul__ = matmul
GraphTensor.__rmatmul__ = lambda self, other: matmul(other, self)


@hl_op(torch="torch.nn.functional.linear", category="linalg")
def linear(x: GraphTensor, weight: GraphTensor, bias: GraphTensor | None = None) -> GraphTensor:
    """``x @ weight.T + bias`` with weight of shape (out_features, in_features)."""
    out = matmul(x, weight.transpose(-1, -2) if weight.ndim >= 2 else weight)
    if bias is not None:
        out = out + bias
    return out
