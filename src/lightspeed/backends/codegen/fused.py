"""Fused kernels: ops that join a chain of ops into one kernel, each recognised by a rule file of
this package and measured by the search beside the chain it replaces (docs/kernels.md, "Fused
kernels"): ``Attention`` (``attention.egg``), ``MatmulGLU`` / ``MatmulGeGLU`` (``products.egg``),
``RowNorm`` and the products that normalise their A as they load it, ``NormMatmul`` /
``NormMatmulGLU`` / ``NormMatmulGeGLU`` (``norms.egg``), and ``ScatterRegion`` /
``MatmulScatter`` / ``NormMatmulScatter`` (``writes.egg``: a region's or a product's values
written where a ``ScatterInPlace`` puts them).  Kernel backends (cuda, native) declare these ops
and rules and run them for the dtypes in their ``fused_kernel_dtypes``; the renderers are in
``kernels/`` (attention, matmul, norm, scatter)."""

from __future__ import annotations

from pathlib import Path

from ...egraph.decl import MATMUL, SCATTER_IN_PLACE, OpDecl

__all__ = ["ATTENTION", "MATMUL_GLU", "MATMUL_GEGLU", "ROW_NORM", "ROW_NORM_ADD", "LAYER_NORM", "SCATTER_REGION",
           "MATMUL_SCATTER", "NORM_MATMUL", "NORM_MATMUL_GLU", "NORM_MATMUL_GEGLU", "NORM_MATMUL_SCATTER",
           "GATHER_MATMUL", "FUSED_KERNEL_OPS", "IN_PLACE_OPS", "RULE_FILES", "RULESETS", "gelu_gated"]

_HERE = Path(__file__).parent
# one ruleset per file, named after it: attention, products and norms run after linalg (they read
# its products) and before fusion, as does gathers (a Gather as a region, which fusion's inline
# rule grows readers over); writes runs after fusion (it reads the regions)
RULE_FILES = (_HERE / "attention.egg", _HERE / "products.egg", _HERE / "norms.egg", _HERE / "writes.egg",
              _HERE / "gathers.egg")
RULESETS = ("attention", "products", "norms", "gathers")

# attention of query rows against keys and values, in one op (attention.egg recognises the
# chain softmax_2(Q @ K + mask) @ V; a kernel backend runs it as one kernel): for every batch index
# b (over `batch`), row i < m and column j < dv,
#   x[b, i, l] = sum_c Q[q_offset + <b, q_batch_strides> + i*q_stride_m + c*q_stride_k]
#                      * K[k_offset + <b, k_batch_strides> + c*k_stride_k + l*k_stride_n]     (c < k)
#                + mask[mask_view(flat index of (b, i, l) in [*batch, m, n])]                    (l < n)
#   out[b, i, j] = sum_l 2^(x[b,i,l] - max_l x) V[v_offset + <b, v_batch_strides> + l*v_stride_n
#                        + j*v_stride_j] / sum_l 2^(x[b,i,l] - max_l x)
# out row-major [*batch, m, dv]; intermediates in the compute type (float), not rounded to the dtype.
# Q's element at flat index z is the region `q_body` over `q_shape` at z (a leaf reading the
# queries, or the region that makes them -- RoPE -- computed as the kernel loads them); K's and
# V's likewise (`k_body` over `k_shape`, `v_body` over `v_shape`: a leaf reading a KV cache, or a
# paged step's gather of each row's pages, read through the page table where the kernel loads it)
ATTENTION = OpDecl("Attention", (
    ("batch", "elist"), ("m", "expr"), ("n", "expr"), ("k", "expr"), ("dv", "expr"),
    ("q_batch_strides", "elist"), ("q_stride_m", "expr"), ("q_stride_k", "expr"), ("q_offset", "expr"),
    ("k_batch_strides", "elist"), ("k_stride_k", "expr"), ("k_stride_n", "expr"), ("k_offset", "expr"),
    ("mask", "ir"), ("mask_view", "view"),
    ("v_batch_strides", "elist"), ("v_stride_n", "expr"), ("v_stride_j", "expr"), ("v_offset", "expr"),
    ("q_shape", "elist"), ("q_body", "scalar"), ("k_shape", "elist"), ("k_body", "scalar"),
    ("v_shape", "elist"), ("v_body", "scalar")),
    "softmax_2(Q @ K + mask) @ V, one op")
# two products of one row-major-along-k operand A with weights G and U (rows contiguous along k,
# as nn.Linear stores them), combined by SiLU·mul (products.egg recognises nn.silu_mul's
# chain): g = A @ G^T and u = A @ U^T rounded to the dtype, then out = g * u / (2^(g * c1) + c2)
# in float, c1 and c2 the chain's scalar constants (-log2 e and 1, in the dtype)
MATMUL_GLU = OpDecl("MatmulGLU", (
    ("m", "expr"), ("n", "expr"), ("k", "expr"),
    ("a", "ir"), ("a_stride_m", "expr"), ("a_offset", "expr"),
    ("g", "ir"), ("g_stride_n", "expr"), ("g_offset", "expr"),
    ("u", "ir"), ("u_stride_n", "expr"), ("u_offset", "expr"),
    ("c1", "ir"), ("c2", "ir")),
    "gate and up products with SiLU·mul, one op")
# ... with tanh-GELU's gate instead of SiLU's (products.egg recognises nn.gelu_tanh_mul's chain, Gemma's
# MLP): out = g * u / (2^((g * g * c3 + c1) * g) + c2) in float, g and u rounded as MatmulGLU's; c3, c1
# and c2 the chain's scalar constants (k * 0.044715, k = -2 sqrt(2/pi) log2 e, and 1)
MATMUL_GEGLU = OpDecl("MatmulGeGLU", (*MATMUL_GLU.fields, ("c3", "ir")),
                      "gate and up products with tanh-GELU·mul, one op")
# RMSNorm over rows of x (row-major, rows of n; norms.egg): for each element z of row i,
#   out[z] = x[z] * w[w_view(z)] / sqrt(sum_j x[i*n + j]^2 * c[c_view(i)] + eps[eps_view(i)])
# in float (c and eps read through views of the row shape [.., 1] at the row's flat index)
ROW_NORM = OpDecl("RowNorm", (
    ("n", "expr"), ("x", "ir"), ("c", "ir"), ("c_view", "view"), ("eps", "ir"), ("eps_view", "view"),
    ("w", "ir"), ("w_view", "view")),
    "RMSNorm of each row, one op")
# a residual added to a RowNorm's rows (norms.egg: Gemma's sandwich norms, h = r + norm(x) * w):
#   out[z] = RowNorm's out[z] + r[z]   (r read at the output's flat index)
ROW_NORM_ADD = OpDecl("RowNormAdd", (*ROW_NORM.fields, ("r", "ir")), "RMSNorm of each row plus a residual, one op")
# LayerNorm over rows of x (row-major, rows of n; norms.egg): for each element z of row i, with
#   mean = sum_j x[i*n + j] * cm[cm_view(i)], d(z) = x[z] - mean,
#   out[z] = d(z) / sqrt(sum_j d(i*n + j)^2 * c[c_view(i)] + eps[eps_view(i)]) * w[w_view(z)] + b[b_view(z)]
# in float (hl.layer_norm's chain with a weight and a bias: one kernel instead of the mean's, the
# centring's, a RowNorm and the bias's)
LAYER_NORM = OpDecl("LayerNormRows", (
    ("n", "expr"), ("x", "ir"), ("cm", "ir"), ("cm_view", "view"), ("c", "ir"), ("c_view", "view"),
    ("eps", "ir"), ("eps_view", "view"), ("w", "ir"), ("w_view", "view"), ("b", "ir"), ("b_view", "view")),
    "LayerNorm (weight and bias) of each row, one op")
# a ScatterInPlace whose src is a region (writes.egg): for each element i of `shape` (the scatter's
# index view), dest[indexes(i)] = body(i) -- both region bodies evaluated at flat index i (the
# region's values written where the scatter puts them, never stored on their own: RoPE'd keys into
# the KV cache; the indexes a leaf, or an iota computed in place)
SCATTER_REGION = OpDecl("ScatterRegion", (("dest", "ir"), ("shape", "elist"), ("indexes", "scalar"),
                                          ("body", "scalar")),
                        "ScatterInPlace of a region's values")
# a ScatterInPlace whose src is a product read flat (writes.egg): the product's element i
# (row-major over [*batch, m, n], the Matmul fields' semantics) written to dest[indexes(i)], the
# indexes a region body over `shape` (a value projection straight into the KV cache); the body last,
# so the operands are the destination, A, B, then the indexes' leaves
MATMUL_SCATTER = OpDecl("MatmulScatter", (("dest", "ir"), *MATMUL.fields, ("shape", "elist"),
                                          ("indexes", "scalar")),
                        "ScatterInPlace of a product's values")
# products whose A is a RowNorm (norms.egg, writes.egg): the norm computed as the product loads
# its rows (each output recomputes its row's sum of squares; A is never stored).  The RowNorm
# fields (n = k: rows of x [m, k] row-major), then as NormMatmul: out[i, j] = sum_l A[i, l] *
# B[b_offset + j*b_stride_n + l] (B's rows contiguous along k: weights); A in float, not rounded
_NORM_FIELDS = (("m", "expr"), ("n", "expr"), ("k", "expr"), ("x", "ir"), ("c", "ir"), ("c_view", "view"),
                ("eps", "ir"), ("eps_view", "view"), ("w", "ir"), ("w_view", "view"))
NORM_MATMUL = OpDecl("NormMatmul", (*_NORM_FIELDS, ("b", "ir"), ("b_stride_n", "expr"), ("b_offset", "expr")),
                     "RMSNorm of A's rows as A @ B^T loads them, one op")
# ... MatmulGLU's gated pair over the normed rows (MATMUL_GLU's fields after A)
NORM_MATMUL_GLU = OpDecl("NormMatmulGLU", (*_NORM_FIELDS, ("g", "ir"), ("g_stride_n", "expr"),
                                           ("g_offset", "expr"), ("u", "ir"), ("u_stride_n", "expr"),
                                           ("u_offset", "expr"), ("c1", "ir"), ("c2", "ir")),
                         "RMSNorm, then gate and up products with SiLU·mul, one op")
NORM_MATMUL_GEGLU = OpDecl("NormMatmulGeGLU", (*NORM_MATMUL_GLU.fields, ("c3", "ir")),
                           "RMSNorm, then gate and up products with tanh-GELU·mul, one op")
# ... NormMatmul's element i written to dest[indexes(i)] (MatmulScatter's semantics)
NORM_MATMUL_SCATTER = OpDecl("NormMatmulScatter", (("dest", "ir"), *NORM_MATMUL.fields, ("shape", "elist"),
                                                   ("indexes", "scalar")),
                             "ScatterInPlace of a NormMatmul's values")
# a Matmul whose B is rows of a weight picked by an index (gathers.egg: B an hl.index_select of W
# along its first axis, the encoder's `row_gather` fact): the Matmul fields with B's element f
# (flat in the gathered tensor, through the B fields) read as W[idx[f / inner] * inner + f % inner]
# -- a mixture-of-experts step's chosen experts read in place, never copied; an index outside
# [0, w_rows) reads 0 and sets the call's error word (as a Gather does)
GATHER_MATMUL = OpDecl("GatherMatmul", (
    *MATMUL.fields[:9], ("idx", "ir"), ("inner", "expr"), ("w_rows", "expr"), ("w", "ir"),
    ("b_batch_strides", "elist"), ("b_stride_k", "expr"), ("b_stride_n", "expr"), ("b_offset", "expr")),
    "A @ (rows of W picked by idx), one op")
# the ops the fused kernels run (Backend.fused_kernel_dtypes), and those writing into their first
# operand's buffer (an aliased input; the kernel runtime checks it, as for ScatterInPlace)
FUSED_KERNEL_OPS = (ATTENTION, MATMUL_GLU, MATMUL_GEGLU, ROW_NORM, ROW_NORM_ADD, LAYER_NORM, SCATTER_REGION,
                    MATMUL_SCATTER, NORM_MATMUL, NORM_MATMUL_GLU, NORM_MATMUL_GEGLU, NORM_MATMUL_SCATTER, GATHER_MATMUL)
IN_PLACE_OPS = (SCATTER_IN_PLACE.name, SCATTER_REGION.name, MATMUL_SCATTER.name, NORM_MATMUL_SCATTER.name)




def gelu_gated(name: str) -> bool:
    """Whether the gated product op ``name`` (MatmulGLU, NormMatmulGLU and their GeGLU twins, the
    backends' tile forms) gates with tanh-GELU (a third constant, c3, after c1 and c2) rather than SiLU."""
    return "GeGLU" in name
