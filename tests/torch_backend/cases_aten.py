"""Samples for every row of ``lightspeed.torch.ATEN_TABLE`` (see optable.py).

Binary ops cover broadcasting, tensor-scalar operands and PyTorch's type promotion (int with float,
a 0-d float64 tensor with a float32 tensor, bool with float); the harness also runs every sample
with non-contiguous inputs.
"""

from __future__ import annotations

import torch

from tests.torch_backend.optable import TT, Sample

f32, f64, i64, i32, b8 = torch.float32, torch.float64, torch.int64, torch.int32, torch.bool
INT64_MAX = 2**63 - 1


def _perm(n: int, shape=None):
    """Distinct indexes in [0, n) (scatter-type ops with repeated indexes are nondeterministic)."""
    def gen(g, shp):
        shp = shape or shp
        k = 1
        for s in shp:
            k *= s
        return torch.randperm(n, generator=g)[:k].reshape(shp)
    return gen


def _rows_perm(n: int):
    """Per-row distinct indexes in [0, n) along the last dim."""
    def gen(g, shp):
        rows = [torch.randperm(n, generator=g)[:shp[-1]] for _ in range(int(torch.tensor(shp[:-1]).prod()))]
        return torch.stack(rows).reshape(shp)
    return gen


def binary(*, positive_rhs: bool = False, ints: bool = True, bools: bool = False) -> list[Sample]:
    rhs = "positive" if positive_rhs else "normal"
    out = [
        Sample([TT((3, 4)), TT((3, 4), gen=rhs)], name="same"),
        Sample([TT((3, 1)), TT((4,), gen=rhs)], name="broadcast"),
        Sample([TT((2, 3)), TT((), f64, gen=rhs)], name="f32_with_0d_f64"),
        Sample([TT((2, 3)), TT((2, 3), i64, gen="nzint" if positive_rhs else "int")], name="f32_int64"),
    ]
    if ints:
        out.append(Sample([TT((2, 5), i32, gen="int"), TT((5,), i64, gen="nzint" if positive_rhs else "int")],
                          name="int32_int64"))
    if bools:
        out.append(Sample([TT((2, 3), b8), TT((2, 3))], name="bool_float"))
    return out


def binary_scalar(value: float = 2.5, ints: bool = True) -> list[Sample]:
    out = [Sample([TT((3, 4)), value], name="float_scalar")]
    if ints:
        out += [Sample([TT((2, 3), i64, gen="int"), 3], name="int_int"),
                Sample([TT((2, 3), i32, gen="int"), value], name="int_float_promotes")]
    return out


def unary(gen: str = "normal", ints: bool = False) -> list[Sample]:
    out = [Sample([TT((3, 4), gen=gen)], name="2d"), Sample([TT((2, 3, 5), gen=gen)], name="3d")]
    if ints:
        out.append(Sample([TT((4, 3), i64, gen="positive" if gen == "positive" else "int")], name="int"))
    return out


def compare(scalar: float = 0.0) -> list[Sample]:
    return [
        Sample([TT((3, 4), i64, gen="index:3"), TT((3, 4), i64, gen="index:3")], name="ints_with_ties"),
        Sample([TT((3, 1)), TT((4,))], name="broadcast"),
        Sample([TT((2, 3)), TT((2, 3), i64, gen="int")], name="promote"),
        Sample([TT((2, 3), gen="special"), TT((2, 3), gen="special")], name="nan_inf"),
    ]


def compare_scalar() -> list[Sample]:
    return [Sample([TT((3, 4), gen="half"), 0.5], name="float"), Sample([TT((3, 4), i64, gen="int"), 2], name="int"),
            Sample([TT((3, 4), i64, gen="int"), 1.5], name="int_vs_float")]


def reduce_dims() -> list[Sample]:
    return [Sample([TT((3, 4)), [1]], name="dim1"), Sample([TT((2, 3, 4)), [0, 2], True], name="dims_keepdim"),
            Sample([TT((3, 4)), [-1]], name="neg_dim")]


LOGICAL = [Sample([TT((3, 4), b8), TT((3, 4), b8)], name="bool"), Sample([TT((3, 1)), TT((4,), b8)], name="float_bool"),
           Sample([TT((2, 3), i64, gen="index:2"), TT((2, 3), b8)], name="int_bool")]

CONV2D = [TT((2, 3, 7, 6)), TT((4, 3, 3, 3)), TT((4,))]
QKV = [TT((2, 4, 5, 8)), TT((2, 4, 6, 8)), TT((2, 4, 6, 8))]
# grouped matmul offsets: rows 0-1 expert 0, expert 1 empty, rows 2-4 expert 2, row 5 past the end
OFFS = TT((3,), i32, gen=lambda g, s: torch.tensor([2, 2, 5]), nc=False)
QKV_C = [TT((2, 4, 5, 8), nc=False), TT((2, 4, 6, 8), nc=False), TT((2, 4, 6, 8), nc=False)]

SAMPLES: dict[str, list[Sample]] = {
    # ---- arithmetic
    "aten.add.Tensor": binary(bools=True) + [Sample([TT((3, 4)), TT((4,))], {"alpha": 2}, name="alpha")],
    "aten.add.Scalar": binary_scalar(),
    "aten.sub.Tensor": binary() + [Sample([TT((3, 4)), TT((4,))], {"alpha": 0.5}, name="alpha")],
    "aten.sub.Scalar": binary_scalar(),
    "aten.rsub.Tensor": [Sample([TT((3, 4)), TT((4,))], name="broadcast"),
                         Sample([TT((3, 4)), TT((3, 4))], {"alpha": 2}, name="alpha")],
    "aten.rsub.Scalar": binary_scalar(1.0),
    "aten.mul.Tensor": binary(bools=True),
    "aten.mul.Scalar": binary_scalar(),
    "aten.div.Tensor": binary(positive_rhs=True),
    "aten.div.Scalar": binary_scalar(4.0),
    "aten.div.Tensor_mode": [
        Sample([TT((3, 4)), TT((3, 4), gen="positive")], {"rounding_mode": "floor"}, name="floor"),
        Sample([TT((3, 4)), TT((4,), gen="positive")], {"rounding_mode": "trunc"}, name="trunc"),
        Sample([TT((3, 4), i64, gen="int"),
                TT((3, 4), i64, gen="nzint")], {"rounding_mode": "floor"}, name="int_floor"),
        Sample([TT((3, 4), i64, gen="int"),
                TT((3, 4), i64, gen="nzint")], {"rounding_mode": "trunc"}, name="int_trunc"),
    ],
    "aten.div.Scalar_mode": [Sample([TT((3, 4)), 0.7], {"rounding_mode": "floor"}, name="floor"),
                             Sample([TT((3, 4), i64, gen="int"), 4], {"rounding_mode": "trunc"}, name="int_trunc")],
    "aten.floor_divide.default": [Sample([TT((3, 4)), TT((3, 4), gen="positive")], name="float"),
                                  Sample([TT((3, 4), i64, gen="int"), TT((4,), i64, gen="nzint")], name="int")],
    "aten.remainder.Tensor": binary(positive_rhs=True),
    "aten.remainder.Scalar": [Sample([TT((3, 4)), 0.75], name="float"),
                              Sample([TT((3, 4), i64, gen="int"), 4], name="int")],
    "aten.fmod.Tensor": binary(positive_rhs=True),
    "aten.fmod.Scalar": [Sample([TT((3, 4)), 0.75], name="float"),
                         Sample([TT((3, 4), i64, gen="int"), -4], name="int")],
    "aten.pow.Tensor_Scalar": [Sample([TT((3, 4)), 2], name="square"), Sample([TT((3, 4)), 3], name="cube"),
                               Sample([TT((3, 4), gen="positive"), 0.5], name="sqrt"),
                               Sample([TT((3, 4), gen="positive"), -1.5], name="neg_frac"),
                               Sample([TT((3, 4), i64, gen="int"), 2], name="int")],
    "aten.pow.Tensor_Tensor": [Sample([TT((3, 4), gen="positive"), TT((3, 4))], name="float"),
                               Sample([TT((3, 4), gen="positive"), TT((4,), i64, gen="index:3")], name="int_exponent")],
    "aten.pow.Scalar": [Sample([2.0, TT((3, 4))], name="float_base"),
                        Sample([3, TT((3, 4), i64, gen="index:4")], name="int")],
    "aten.neg.default": unary(ints=True),
    "aten.abs.default": unary(ints=True),
    "aten.sign.default": unary(ints=True) + [Sample([TT((3, 4), gen="special")], name="special")],
    "aten.reciprocal.default": unary("positive", ints=True),
    "aten.maximum.default": binary() + [Sample([TT((3, 4), gen="special"), TT((3, 4))], name="nan")],
    "aten.minimum.default": binary() + [Sample([TT((3, 4), gen="special"), TT((3, 4))], name="nan")],
    "aten.clamp.default": [Sample([TT((3, 4)), -0.5, 0.5], name="both"), Sample([TT((3, 4))], {"max": 0.2}, name="max"),
                           Sample([TT((3, 4), i64, gen="int"), -2, 3], name="int"),
                           Sample([TT((3, 4), i64, gen="int"), 0.5], name="int_float_bound")],
    "aten.clamp.Tensor": [Sample([TT((3, 4)), TT((4,)), TT((3, 1))], name="broadcast"),
                          Sample([TT((3, 4)), None, TT((3, 4))], name="max_only")],
    "aten.clamp_min.default": [Sample([TT((3, 4)), 0.1])],
    "aten.clamp_max.default": [Sample([TT((3, 4)), 0.1]), Sample([TT((3, 4), i64, gen="int"), 2], name="int")],
    "aten.hypot.default": binary(ints=False)[:2],
    # ---- math
    "aten.exp.default": unary(ints=True),
    "aten.exp2.default": unary(ints=True),
    "aten.expm1.default": unary("uniform"),
    "aten.log.default": unary("positive", ints=True),
    "aten.log2.default": unary("positive"),
    "aten.log10.default": unary("positive"),
    "aten.log1p.default": unary("positive"),
    "aten.sqrt.default": unary("positive", ints=True),
    "aten.rsqrt.default": unary("positive"),
    "aten.sin.default": unary(ints=True),
    "aten.cos.default": unary(),
    "aten.tan.default": unary("uniform"),
    "aten.sinh.default": unary(),
    "aten.cosh.default": unary(),
    "aten.tanh.default": unary(ints=True),
    "aten.sigmoid.default": unary(ints=True),
    "aten.erf.default": unary(),
    "aten.floor.default": unary("half", ints=True),
    "aten.ceil.default": unary("half", ints=True),
    "aten.trunc.default": unary("half"),
    "aten.round.default": unary("half") + [Sample([TT((3, 4))], name="normal")],
    # ---- activations
    "aten.relu.default": unary(ints=True),
    "aten.gelu.default": unary() + [Sample([TT((3, 4))], {"approximate": "tanh"}, name="tanh")],
    "aten.silu.default": unary(),
    "aten.hardtanh.default": unary() + [Sample([TT((3, 4)), 0.0, 6.0], name="relu6")],
    "aten.leaky_relu.default": unary() + [Sample([TT((3, 4)), 0.2], name="slope")],
    "aten.elu.default": unary() + [Sample([TT((3, 4)), 1.6732632423543772, 1.0507009873554805, 1.0], name="selu")],
    # ---- comparison and logic
    **{f"aten.{op}.Tensor": compare() for op in ("eq", "ne", "lt", "le", "gt", "ge")},
    **{f"aten.{op}.Scalar": compare_scalar() for op in ("eq", "ne", "lt", "le", "gt", "ge")},
    "aten.isnan.default": [Sample([TT((3, 5), gen="special")], name="special"), Sample([TT((3, 4), i64)], name="int")],
    "aten.isinf.default": [Sample([TT((3, 5), gen="special")], name="special")],
    "aten.isfinite.default": [Sample([TT((3, 5), gen="special")], name="special")],
    "aten.logical_not.default": [Sample([TT((3, 4), b8)], name="bool"), Sample([TT((3, 4), gen="half")], name="float")],
    "aten.logical_and.default": LOGICAL,
    "aten.logical_or.default": LOGICAL,
    "aten.logical_xor.default": LOGICAL,
    "aten.bitwise_not.default": [Sample([TT((3, 4), b8)], name="bool"),
                                 Sample([TT((3, 4), i64, gen="int")], name="int64"),
                                 Sample([TT((3, 4), i32, gen="int")], name="int32")],
    **{f"aten.bitwise_{op}.Tensor": [Sample([TT((3, 4), b8),
                                     TT((4,), b8)], name="bool")] for op in ("and", "or", "xor")},
    **{f"aten.bitwise_{op}.Scalar": [Sample([TT((3, 4), b8), True], name="bool")] for op in ("and", "or", "xor")},
    "aten.where.self": [Sample([TT((3, 4), b8), TT((3, 4)), TT((3, 4))], name="same"),
                        Sample([TT((3, 1), b8), TT((4,)), TT(())], name="broadcast"),
                        Sample([TT((3, 4), b8), TT((3, 4), i64), TT((3, 4))], name="promote"),
                        Sample([TT((3, 4), b8), TT((), f64), TT((3, 4))], name="0d_f64_with_f32")],
    "aten.masked_fill.Scalar": [Sample([TT((3, 4)), TT((4,), b8), -1.5], name="broadcast"),
                                Sample([TT((3, 4), i64, gen="int"), TT((3, 4), b8), 7], name="int")],
    "aten.masked_fill.Tensor": [Sample([TT((3, 4)), TT((3, 4), b8), TT(())], name="0d_value")],
    # ---- reductions
    "aten.sum.dim_IntList": reduce_dims() + [Sample([TT((3, 4), i32, gen="int"), [0]], name="int"),
                                             Sample([TT((3, 4), b8), [1]], name="bool"),
                                             Sample([TT((3, 4)), [1]], {"dtype": f64}, name="dtype"),
                                             Sample([TT((3, 4)), None], name="all")],
    "aten.sum.default": [Sample([TT((3, 4))], name="float"), Sample([TT((3, 4), b8)], name="bool")],
    "aten.mean.dim": reduce_dims() + [Sample([TT((3, 4)), [1]], {"dtype": f64}, name="dtype")],
    "aten.mean.default": [Sample([TT((3, 4))])],
    "aten.amax.default": reduce_dims() + [Sample([TT((3, 4), i64, gen="int"), [0]], name="int"),
                                          Sample([TT((3, 4))], name="all")],
    "aten.amin.default": reduce_dims() + [Sample([TT((3, 4), i64, gen="int"), [0]], name="int")],
    "aten.max.dim": [Sample([TT((3, 4)), 1], name="dim1"), Sample([TT((3, 4)), 0, True], name="keepdim"),
                     Sample([TT((3, 4), i64, gen="index:3"), 1], name="int_ties")],
    "aten.min.dim": [Sample([TT((3, 4)), 1], name="dim1"),
                     Sample([TT((3, 4), i64, gen="index:3"), 0, True], name="ties")],
    "aten.max.default": [Sample([TT((3, 4))]), Sample([TT((3, 4), i64, gen="int")], name="int")],
    "aten.min.default": [Sample([TT((3, 4))])],
    "aten.argmax.default": [Sample([TT((3, 4)), 1], name="dim"), Sample([TT((3, 4))], name="flat"),
                            Sample([TT((3, 4), i64, gen="index:3"), 0, True], name="ties_keepdim")],
    "aten.argmin.default": [Sample([TT((3, 4)), 1], name="dim"),
                            Sample([TT((3, 4), i64, gen="index:3"), 0], name="ties")],
    "aten.any.default": [Sample([TT((3, 4), b8)]), Sample([TT((3, 4), gen="index:2")], name="float")],
    "aten.any.dim": [Sample([TT((3, 4), b8), 1]), Sample([TT((3, 4), b8), 0, True], name="keepdim")],
    "aten.any.dims": [Sample([TT((2, 3, 4), b8), [0, 2]])],
    "aten.all.default": [Sample([TT((3, 4), b8)])],
    "aten.all.dim": [Sample([TT((3, 4), b8), 1])],
    "aten.all.dims": [Sample([TT((2, 3, 4), b8), [1]])],
    "aten.prod.default": [Sample([TT((2, 3), gen="uniform")]), Sample([TT((2, 3), i64, gen="index:4")], name="int")],
    "aten.prod.dim_int": [Sample([TT((3, 4), gen="uniform"), 1]),
                          Sample([TT((3, 4), gen="uniform"), 0, True], name="keepdim")],
    "aten.var.correction": [Sample([TT((3, 5)), [1]], name="unbiased"),
                            Sample([TT((3, 5)), [0, 1]], {"correction": 0, "keepdim": True}, name="biased_keepdim")],
    "aten.var.dim": [Sample([TT((3, 5)), [1]]), Sample([TT((3, 5)), [0], False, True], name="biased_keepdim")],
    "aten.std.correction": [Sample([TT((3, 5)), [1]], name="unbiased"),
                            Sample([TT((3, 5)), [1]], {"correction": 0}, name="biased")],
    "aten.var_mean.correction": [Sample([TT((3, 5)), [1]], {"correction": 0, "keepdim": True})],
    "aten.cumsum.default": [Sample([TT((3, 5)), 1]), Sample([TT((3, 5), i32, gen="int"), 0], name="int"),
                            Sample([TT((3, 5)), 0], {"dtype": f64}, name="dtype")],
    "aten.cumprod.default": [Sample([TT((3, 5), gen="uniform"), 1])],
    "aten.cummax.default": [Sample([TT((3, 5)), 1]), Sample([TT((3, 5), i64, gen="index:3"), 0], name="ties")],
    "aten.cummin.default": [Sample([TT((3, 5)), 1])],
    "aten.logsumexp.default": [Sample([TT((3, 5)), [1]]), Sample([TT((3, 5)), [0], True], name="keepdim")],
    "aten.linalg_vector_norm.default": [Sample([TT((3, 5))], name="l2_all"), Sample([TT((3, 5)), 1, [1]], name="l1"),
                                        Sample([TT((3, 5)), float("inf"), [0], True], name="inf")],
    "aten._softmax.default": [Sample([TT((3, 5)), -1, False]), Sample([TT((2, 3, 4)), 1, False], name="mid")],
    "aten._log_softmax.default": [Sample([TT((3, 5)), -1, False])],
    "aten._safe_softmax.default": [Sample([TT((3, 5), gen=lambda g, s: torch.where(
        torch.arange(s[0])[:, None] == 1, float("-inf"), torch.randn(s, generator=g))), -1], name="dead_row")],
    # ---- linear algebra, nn
    "aten.mm.default": [Sample([TT((3, 4)), TT((4, 5))])],
    "aten.bmm.default": [Sample([TT((2, 3, 4)), TT((2, 4, 5))])],
    "aten.addmm.default": [Sample([TT((5,)), TT((3, 4)), TT((4, 5))], name="bias"),
                           Sample([TT((3, 5)), TT((3, 4)),
                                   TT((4, 5))], {"beta": 0.5, "alpha": 2.0}, name="beta_alpha")],
    "aten.baddbmm.default": [Sample([TT((2, 3, 5)), TT((2, 3, 4)), TT((2, 4, 5))], {"alpha": 0.5})],
    "aten.convolution.default": [
        Sample([*CONV2D, [1, 1], [1, 1], [1, 1], False, [0, 0], 1], name="conv2d"),
        Sample([TT((2, 4, 7, 7)),
                TT((4, 2, 3, 3)), None, [2, 2], [1, 1], [1, 1], False, [0, 0], 2], name="groups_stride"),
        Sample([TT((2, 3, 9)), TT((4, 3, 3)), TT((4,)), [2], [0], [2], False, [0], 1], name="conv1d_dilation"),
        Sample([TT((1, 2, 4, 4, 4)), TT((3, 2, 2, 2, 2)), None, [1, 1, 1], [0, 0, 0], [1, 1, 1], False, [0, 0, 0], 1],
               name="conv3d")],
    "aten.native_layer_norm.default": [
        Sample([TT((2, 3, 8)), [8], TT((8,)), TT((8,)), 1e-5], name="affine", tol=(1e-4, 1e-5)),
        Sample([TT((2, 3, 4)), [3, 4], None, None, 1e-5], name="2d_plain", tol=(1e-4, 1e-5))],
    "aten.native_group_norm.default": [
        Sample([TT((2, 6, 4, 4), nc=False), TT((6,)),
                TT((6,)), 2, 6, 16, 3, 1e-5], tol=(1e-4, 1e-5))],  # eager: contiguous
    "aten._native_batch_norm_legit_no_training.default": [
        Sample([TT((2, 3, 4, 4)), TT((3,)), TT((3,)), TT((3,)), TT((3,), gen="positive"), 0.1, 1e-5], outputs=[0])],
    "aten.native_batch_norm.default": [
        Sample([TT((2, 3, 5)), TT((3,)), None, TT((3,)), TT((3,), gen="positive"), False, 0.1, 1e-5], outputs=[0])],
    "aten.max_pool2d_with_indices.default": [
        Sample([TT((2, 3, 6, 6)), [2, 2]], outputs=[0], name="k2"),
        Sample([TT((1, 2, 7, 7)), [3, 3], [2, 2], [1, 1], [1, 1], True], outputs=[0], name="stride_pad_ceil")],
    "aten.avg_pool2d.default": [
        Sample([TT((2, 3, 6, 6)), [2, 2]], name="k2"),
        Sample([TT((1, 2, 7, 7)), [3, 3], [2, 2], [1, 1], True, False], name="pad_ceil_exclude")],
    "aten._adaptive_avg_pool2d.default": [Sample([TT((2, 3, 8, 8)), [1, 1]], name="global"),
                                          Sample([TT((2, 3, 8, 6)), [4, 2]], name="divisible")],
    "aten.constant_pad_nd.default": [Sample([TT((3, 4)), [1, 2]], name="last"),
                                     Sample([TT((2, 3, 4)), [1, 1, 0, 2], 0.5], name="two_dims_value"),
                                     Sample([TT((3, 4)), [-1, 2]], name="crop")],
    "aten.embedding.default": [Sample([TT((10, 4)), TT((2, 3), i64, gen="index:10")]),
                               Sample([TT((10, 4)), TT((5,), i32, gen="index:10", nc=False)], name="int32")],
    "aten.scaled_dot_product_attention.default": [
        Sample(QKV, name="plain"),
        Sample([TT((1, 2, 4, 8)), TT((1, 2, 4, 8)), TT((1, 2, 4, 8))], {"is_causal": True}, name="causal"),
        Sample([*QKV, TT((5, 6))], name="float_mask"),
        Sample([TT((1, 4, 3, 8)), TT((1, 2, 3, 8)), TT((1, 2, 3, 8)), TT((3, 3), b8, gen="bool")],
               {"enable_gqa": True, "scale": 0.2}, name="gqa_bool_mask")],
    # the private CPU flash kernel assumes a unit last-dim stride (the public API checks it first), so
    # its eager reference is wrong for permuted inputs: contiguous only
    "aten._scaled_dot_product_flash_attention_for_cpu.default": [
        Sample(QKV_C, outputs=[0], name="plain"),
        Sample([TT((1, 2, 4, 8), nc=False)] * 3 + [0.0, True], outputs=[0], name="causal"),
        Sample(QKV_C, {"attn_mask": TT((5, 6)), "scale": 0.3}, outputs=[0], name="mask_scale"),
        # the logsumexp output (read by the backward in training)
        Sample(QKV_C, outputs=[0, 1], name="logsumexp"),
        Sample([TT((1, 2, 4, 8), nc=False)] * 3 + [0.0, True], outputs=[0, 1], name="causal_logsumexp")],
    # its backward (training): gradients of q, k, v from the output's gradient, the output and the
    # logsumexp (any values: the kernel's formula reads them as given)
    "aten._scaled_dot_product_flash_attention_for_cpu_backward.default": [
        Sample([TT((2, 4, 5, 8), nc=False), *QKV_C, TT((2, 4, 5, 8), nc=False), TT((2, 4, 5), f32, nc=False),
                0.0, False], name="plain", f64=False),
        Sample([TT((1, 2, 4, 8), nc=False)] * 5 + [TT((1, 2, 4), f32, nc=False), 0.0, True],
               {"scale": 0.3}, name="causal_scale", f64=False)],
    # torch's CPU kernel wants 16-byte row strides (contiguous inputs, N = 8), no float64, and leaves
    # rows past the last offset uninitialised: offsets that cover every row
    "aten._grouped_mm.default": [Sample([TT((6, 4), nc=False), TT((3, 4, 8), nc=False),
                                         TT((3,), i32, gen=lambda g, s: torch.tensor([2, 2, 6]), nc=False)],
                                        name="empty_group", f64=False)],
    "transformers.grouped_mm_fallback.default": [Sample([TT((6, 4)), TT((3, 4, 5)), OFFS], name="empty_group_tail")],
    "aten.histc.default": [
        Sample([TT((7,), gen=lambda g, s: torch.tensor([0.0, 1, 1, 3, 2, 3, 3])), 4, 0, 3], name="expert_counts"),
        Sample([TT((3, 5)), 6], name="data_range"),
        Sample([TT((3, 5)), 4, -1, 1], name="drops_outside")],
    # ---- movement
    "aten.view.default": [Sample([TT((2, 6), nc=False), [3, 4]]),
                          Sample([TT((2, 3, 4), nc=False), [-1, 4]], name="infer")],
    "aten._unsafe_view.default": [Sample([TT((2, 6), nc=False), [12]])],
    "aten.reshape.default": [Sample([TT((2, 6)), [3, 4]]), Sample([TT((2, 3, 4)), [6, -1]], name="infer")],
    "aten.permute.default": [Sample([TT((2, 3, 4)), [2, 0, 1]])],
    "aten.expand.default": [Sample([TT((3, 1)), [2, 3, 4]]), Sample([TT((3, 1)), [-1, 5]], name="keep")],
    "aten.unsqueeze.default": [Sample([TT((3, 4)), 1]), Sample([TT((3, 4)), -1], name="last")],
    "aten.squeeze.default": [Sample([TT((3, 1, 4, 1))])],
    "aten.squeeze.dim": [Sample([TT((3, 1, 4)), 1]), Sample([TT((3, 4)), 0], name="not_one")],
    "aten.squeeze.dims": [Sample([TT((1, 3, 1, 4)), [0, 2]])],
    "aten.transpose.int": [Sample([TT((2, 3, 4)), 0, 2])],
    "aten.t.default": [Sample([TT((3, 4))]), Sample([TT((4,))], name="1d")],
    "aten.slice.Tensor": [Sample([TT((5, 4)), 0, 1, 3], name="basic"),
                          Sample([TT((5, 6)), 1, 0, INT64_MAX, 2], name="step"),
                          Sample([TT((5, 4)), 0, -2, INT64_MAX], name="negative"),
                                  Sample([TT((5, 4)), 1, 2, 100], name="clamp")],
    "aten.select.int": [Sample([TT((3, 4)), 1, 2]), Sample([TT((3, 4)), 0, -1], name="negative")],
    "aten.narrow.default": [Sample([TT((5, 4)), 0, 1, 3]), Sample([TT((5, 4)), 1, -2, 2], name="negative")],
    "aten.cat.default": [Sample([[TT((2, 3)), TT((1, 3))]], name="dim0"), Sample([[TT((2, 3)),
                         TT((2, 2))], -1], name="dim1"),
                         Sample([[TT((2, 3)), TT((2, 3), f64)]], name="promote"),
                         Sample([[TT((2, 3)), TT((0,))]], name="legacy_empty")],
    "aten.stack.default": [Sample([[TT((2, 3)), TT((2, 3))], 1])],
    "aten.split_with_sizes.default": [Sample([TT((5, 3)), [2, 3]]), Sample([TT((3, 6)), [1, 2, 3], 1], name="dim1")],
    "aten.split.Tensor": [Sample([TT((5, 3)), 2])],
    "aten.unbind.int": [Sample([TT((3, 4)), 1])],
    "aten.flip.default": [Sample([TT((3, 4)), [0, 1]])],
    "aten.repeat.default": [Sample([TT((2, 3)), [2, 1, 2]])],
    "aten.roll.default": [Sample([TT((3, 4)), [1], [0]], name="dim"), Sample([TT((3, 4)), [2, -1], [0, 1]], name="two"),
                          Sample([TT((3, 4)), [5]], name="flat")],
    "aten.unfold.default": [Sample([TT((2, 7)), 1, 3, 2])],
    "aten.tril.default": [Sample([TT((4, 5))]), Sample([TT((2, 4, 5)), -1], name="diag")],
    "aten.triu.default": [Sample([TT((4, 5)), 1])],
    "aten.clone.default": [Sample([TT((3, 4))])],
    "aten.alias.default": [Sample([TT((3, 4))])],
    "aten.lift_fresh_copy.default": [Sample([TT((3, 4))])],
    "aten.detach.default": [Sample([TT((3, 4))])],
    "aten.contiguous.default": [Sample([TT((3, 4))])],
    "aten._to_copy.default": [Sample([TT((3, 4))], {"dtype": f64}, name="f64"),
                              Sample([TT((3, 4), gen="half")], {"dtype": i64}, name="to_int"),
                              Sample([TT((3, 4), i64, gen="index:2")], {"dtype": b8}, name="to_bool"),
                              Sample([TT((3, 4))], {"dtype": torch.bfloat16}, name="bf16", f64=False)],
    "aten.copy.default": [Sample([TT((3, 4)), TT((4,))], name="broadcast"),
                          Sample([TT((3, 4)), TT((3, 4), i64, gen="int")], name="cast")],
    "prims.convert_element_type.default": [Sample([TT((3, 4), gen="half"), i32])],
    # ---- indexing
    "aten.index.Tensor": [
        Sample([TT((5, 4)), [TT((3,), i64, gen="index:5")]], name="rows"),
        Sample([TT((3, 5, 4)), [None, TT((2, 2), i64, gen="index:5")]], name="middle"),
        Sample([TT((3, 5, 4)), [TT((2,), i64, gen="index:3"), None, TT((2,), i64, gen="index:4")]], name="separated"),
        Sample([TT((5, 4)), [TT((3,), i64, gen=lambda g, s: torch.tensor([-1, 0, -5]))]], name="negative"),
        Sample([TT((5, 4)), [TT((3, 1), i64, gen="index:5"), TT((2,), i64, gen="index:4")]], name="broadcast")],
    "aten._unsafe_index.Tensor": [Sample([TT((5, 4)), [None, TT((3,), i64, gen="index:4")]])],
    "aten.index_put.default": [
        Sample([TT((5, 4)), [TT((3,), i64, gen=_perm(5))], TT((4,))], name="rows_broadcast"),
        Sample([TT((2, 3, 6, 4)), [None, None, TT((2,), i64, gen=_perm(6))], TT((2, 3, 2, 4))], name="cache_update"),
        Sample([TT((5, 4)), [TT((4,), i64, gen=lambda g, s: torch.tensor([1, 3, 1, 0]))], TT((4, 4))],
                {"accumulate": True},
               name="accumulate_dups")],
    "aten._unsafe_index_put.default": [Sample([TT((5, 4)), [TT((2,), i64, gen=_perm(5))], TT((2, 4))])],
    "aten.index_select.default": [Sample([TT((4, 5)), 1, TT((3,), i64, gen="index:5")]),
                                  Sample([TT((4, 5)), 0, TT((), i64, gen="index:4")], name="0d_index")],
    "aten.gather.default": [Sample([TT((3, 5)), 1, TT((3, 2), i64, gen="index:5")])],
    "aten.scatter.src": [Sample([TT((3, 5)), 1, TT((3, 2), i64, gen=_rows_perm(5)), TT((3, 2))])],
    "aten.scatter.value": [Sample([TT((3, 5)), 1, TT((3, 2), i64, gen=_rows_perm(5)), 1.5])],
    "aten.scatter_add.default": [Sample([TT((3, 5)), 1, TT((3, 4), i64, gen="index:5"), TT((3, 4))])],
    "aten.scatter_reduce.two": [Sample([TT((3, 5)), 1, TT((3, 4), i64, gen="index:5"), TT((3, 4)), "sum"])],
    "aten.index_copy.default": [Sample([TT((5, 3)), 0, TT((2,), i64, gen=_perm(5)), TT((2, 3))]),
                                Sample([TT((2, 3, 6, 4)), 2, TT((1,), i64, gen=_perm(6)),
                                        TT((2, 3, 1, 4))], name="cache")],
    "aten.index_add.default": [Sample([TT((5, 3)), 0, TT((4,), i64, gen="index:5"), TT((4, 3))], {"alpha": 2})],
    "aten.slice_scatter.default": [Sample([TT((5, 4)), TT((2, 4)), 0, 1, 3], name="rows"),
                                   Sample([TT((3, 6)), TT((3, 3)), 1, 0, INT64_MAX, 2], name="step")],
    "aten.select_scatter.default": [Sample([TT((3, 4)), TT((4,)), 0, 1]), Sample([TT((3, 4)),
                                    TT((3,)), 1, -1], name="neg")],
    # ---- creation
    "aten.full.default": [Sample([[2, 3], 1.5]), Sample([[2, 3], 4], {"dtype": i32}, name="int")],
    "aten.full_like.default": [Sample([TT((2, 3)), 2.0]), Sample([TT((2, 3)), 1], {"dtype": i64}, name="dtype")],
    "aten.zeros.default": [Sample([[2, 3]])],
    "aten.ones.default": [Sample([[2, 3]], {"dtype": i64})],
    "aten.zeros_like.default": [Sample([TT((2, 3), i64)])],
    "aten.ones_like.default": [Sample([TT((2, 3))])],
    "aten.empty.memory_format": [Sample([[2, 3]], check="meta")],
    "aten.empty_permuted.default": [Sample([[2, 3], [1, 0]], check="meta")],
    "aten.empty_like.default": [Sample([TT((2, 3))], check="meta")],
    "aten.empty_strided.default": [Sample([[2, 3], [3, 1]], check="meta")],
    "aten.new_full.default": [Sample([TT((2, 3)), [4], 3.0])],
    "aten.new_zeros.default": [Sample([TT((2, 3), i64), [4, 2]])],
    "aten.new_ones.default": [Sample([TT((2, 3)), [4]])],
    "aten.new_empty.default": [Sample([TT((2, 3)), [4]], check="meta")],
    "aten.fill.Scalar": [Sample([TT((2, 3)), 2.5])],
    "aten.fill.Tensor": [Sample([TT((2, 3)), TT(())])],
    "aten.arange.default": [Sample([5]), Sample([4], {"dtype": f32}, name="float")],
    "aten.arange.start": [Sample([2, 7])],
    "aten.arange.start_step": [Sample([0, 10, 3]), Sample([0.0, 1.0, 0.25], name="float"),
                               Sample([5, -3, -2], name="down")],
    "aten.scalar_tensor.default": [Sample([2.5]), Sample([3], {"dtype": i64}, name="int")],
    # ---- sorting
    "aten.sort.default": [Sample([TT((3, 5))]), Sample([TT((3, 5)), 0, True], name="descending")],
    "aten.sort.stable": [Sample([TT((3, 5), i64, gen="index:3")], {"stable": True, "dim": 1}, name="ties")],
    "aten.argsort.default": [Sample([TT((3, 5)), 1, True])],
    "aten.topk.default": [Sample([TT((3, 6)), 2]), Sample([TT((4, 3)), 3, 0, False], name="smallest_dim0")],
    # ---- sizes and runtime assertions
    "aten.sym_size.int": [Sample([TT((3, 4)), 1])],
    "aten.sym_numel.default": [Sample([TT((3, 4))])],
    "aten._assert_scalar.default": [Sample([True, "size check"])],
    "aten._assert_tensor_metadata.default": [Sample([TT((3, 4))])],
    "aten._assert_async.default": [Sample([TT((), b8, gen=lambda g, s: torch.tensor(True))])],
    "aten._assert_async.msg": [Sample([TT((), b8, gen=lambda g, s: torch.tensor(True)), "in range"])],
    "aten.sym_constrain_range_for_size.default": [Sample([5])],
}


# rows with no CPU kernel to run a sample against (the attention kernels SDPA becomes on a GPU):
# tests/torch_backend/test_modules.py traces them with fake tensors and checks them against SDPA's math
GPU_ONLY = {"aten._scaled_dot_product_efficient_attention.default", "aten._scaled_dot_product_flash_attention.default",
            "aten._scaled_dot_product_cudnn_attention.default"}
