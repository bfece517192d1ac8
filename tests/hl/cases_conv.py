"""Op-table cases: convolution, pooling, nearest interpolation, group/batch norm."""

from __future__ import annotations

import warnings

import numpy as np
import torch.nn.functional as F  # noqa: N812

import lightspeed as ls
from tests.hl.optable import OpCase, Sample, T

FL = (ls.float32, ls.float64)
CONV_TOL = {"float32": (1e-5, 1e-5)}
EXACT = {"float32": (0, 0), "float64": (0, 0)}
HW2 = ({"h": 5, "w": 6}, {"h": 8, "w": 3})


def _conv_fn(name: str):
    """ls/torch convN with the bias passed positionally only when the sample has one."""
    ls_f, t_f = getattr(ls, name), getattr(F, name)

    def torch_conv(x, w, b=None, **kw):
        with warnings.catch_warnings():  # padding='same' with even kernels: a perf note from torch
            warnings.simplefilter("ignore", UserWarning)
            return t_f(x, w, b, **kw)

    return (lambda x, w, b=None, **kw: ls_f(x, w, b, **kw)), torch_conv


def _with_nan(rng, shape, d):
    a = rng.standard_normal(shape)
    flat = a.reshape(-1)
    flat[::7] = np.nan
    flat[3::11] = -np.inf
    return a


LS_C1, T_C1 = _conv_fn("conv1d")
LS_C2, T_C2 = _conv_fn("conv2d")
LS_C3, T_C3 = _conv_fn("conv3d")

CONV1D = [
    Sample([T((2, 3, 8)), T((4, 3, 3)), T((4,))], name="bias"),
    Sample([T((2, 4, 9)), T((6, 4, 3))], {"stride": 2, "padding": 1, "dilation": 2}, name="stride_pad_dil"),
    Sample([T((2, 4, 7)), T((6, 2, 3)), T((6,))], {"groups": 2, "padding": "same"}, name="groups_same"),
    Sample([T((1, 3, 6)), T((3, 1, 2))], {"groups": 3, "padding": "valid"}, name="depthwise"),
    Sample([T((3, 7)), T((2, 3, 3))], {"padding": (2,)}, name="unbatched"),
    Sample([T((2, 3, "s")), T((4, 3, 3)), T((4,))], {"stride": 2, "padding": 1}, dims=({"s": 5}, {"s": 8}),
           name="sym"),
]

CONV2D = [
    Sample([T((2, 3, 5, 6)), T((4, 3, 3, 3)), T((4,))], name="bias"),
    Sample([T((1, 2, 7, 6)), T((3, 2, 3, 2))], {"stride": (2, 1), "padding": (1, 2)}, name="stride_pad"),
    Sample([T((1, 2, 7, 7)), T((2, 2, 2, 3))], {"dilation": (2, 1), "padding": 1}, name="dilation"),
    Sample([T((2, 4, 5, 5)), T((6, 2, 3, 3)), T((6,))], {"groups": 2, "stride": 2, "padding": 1}, name="groups"),
    Sample([T((1, 4, 6, 5)), T((4, 1, 3, 3))], {"groups": 4, "padding": "same"}, name="depthwise_same"),
    Sample([T((1, 2, 5, 6)), T((3, 2, 2, 4))], {"padding": "same", "dilation": (1, 2)}, name="same_even"),
    Sample([T((3, 5, 5)), T((2, 3, 3, 3)), T((2,))], name="unbatched"),
    Sample([T((2, 4, 3, 3)), T((5, 4, 1, 1))], name="pointwise"),
    Sample([T((2, 3, "h", "w")), T((4, 3, 3, 3)), T((4,))], {"stride": 2, "padding": 1}, dims=HW2, name="sym"),
    Sample([T(("n", 2, "h", 4)), T((4, 1, 2, 2))], {"groups": 2, "dilation": (2, 1)},
           dims=({"n": 1, "h": 3}, {"n": 3, "h": 6}), name="sym_batch_groups"),
]

CONV3D = [
    Sample([T((1, 2, 3, 4, 4)), T((3, 2, 2, 2, 3)), T((3,))], {"padding": (1, 0, 1)}, name="pad"),
    Sample([T((2, 3, 4, 3)), T((2, 1, 2, 2, 2))], {"groups": 2, "stride": (1, 2, 1)}, name="unbatched_groups"),
]

MAX_POOL2D = [
    Sample([T((2, 3, 6, 6))], {"kernel_size": 2}, name="k2"),
    Sample([T((2, 3, 7, 6))], {"kernel_size": 3, "stride": 2, "padding": 1}, name="k3s2p1"),
    Sample([T((1, 2, 7, 8))], {"kernel_size": (2, 3), "stride": (1, 2), "padding": 1, "dilation": 2}, name="dilation"),
    Sample([T((1, 2, 7, 6))], {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}, name="ceil"),
    Sample([T((1, 2, 5, 8))], {"kernel_size": 2, "stride": 3, "ceil_mode": True}, name="ceil_overhang"),
    Sample([T((3, 5, 5))], {"kernel_size": 2, "stride": 1}, name="unbatched"),
    Sample([T((1, 2, 6, 6), gen=_with_nan)], {"kernel_size": 2, "padding": 1}, name="nan_inf"),
    Sample([T((2, 2, "h", "w"))], {"kernel_size": 3, "stride": 2, "padding": 1}, dims=HW2, name="sym"),
    Sample([T((1, 2, "h", "w"))], {"kernel_size": 2, "ceil_mode": True}, dims=({"h": 5, "w": 6}, {"h": 7, "w": 3}),
           name="sym_ceil"),
]

MAX_POOL1D = [
    Sample([T((2, 3, 9))], {"kernel_size": 3, "stride": 2, "padding": 1}, name="k3s2p1"),
    Sample([T((3, 8))], {"kernel_size": 2, "dilation": 3, "ceil_mode": True}, name="unbatched_dil_ceil"),
    Sample([T((2, 2, "s"))], {"kernel_size": 2}, dims=({"s": 4}, {"s": 7}), name="sym"),
]

AVG_POOL2D = [
    Sample([T((2, 3, 6, 6))], {"kernel_size": 2}, name="k2"),
    Sample([T((2, 3, 7, 6))], {"kernel_size": 3, "stride": 2, "padding": 1}, name="k3s2p1"),
    Sample([T((2, 3, 7, 6))], {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False},
           name="exclude_pad"),
    Sample([T((1, 2, 7, 6))], {"kernel_size": (3, 2), "stride": 2, "padding": 1, "ceil_mode": True}, name="ceil"),
    Sample([T((1, 2, 7, 6))], {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True,
                               "count_include_pad": False}, name="ceil_exclude_pad"),
    Sample([T((1, 2, 5, 5))], {"kernel_size": 2, "padding": 1, "divisor_override": 3}, name="divisor_override"),
    Sample([T((3, 5, 4))], {"kernel_size": (2, 3), "stride": 1}, name="unbatched"),
    Sample([T((2, 2, "h", "w"))], {"kernel_size": 3, "stride": 2, "padding": 1}, dims=HW2, name="sym"),
    Sample([T((1, 2, "h", "w"))], {"kernel_size": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False},
           dims=({"h": 5, "w": 6}, {"h": 7, "w": 3}), name="sym_ceil_exclude_pad"),
]

AVG_POOL1D = [
    Sample([T((2, 3, 9))], {"kernel_size": 4, "stride": 3, "padding": 2, "ceil_mode": True}, name="ceil_pad"),
    Sample([T((3, 8))], {"kernel_size": 3, "padding": 1, "count_include_pad": False}, name="unbatched_exclude"),
    Sample([T((2, 2, "s"))], {"kernel_size": 2, "stride": 1}, dims=({"s": 4}, {"s": 7}), name="sym"),
]

INTERP = [
    Sample([T((1, 2, 3, 4))], {"scale_factor": 2}, name="sf2"),
    Sample([T((1, 2, 3, 4))], {"scale_factor": 3}, name="sf3"),
    Sample([T((1, 2, 3, 4))], {"size": (5, 7)}, name="size"),
    Sample([T((2, 1, 5, 7))], {"scale_factor": (1.7, 0.6)}, name="sf_frac"),
    Sample([T((1, 2, 6, 8))], {"scale_factor": 0.5}, name="down2"),
    Sample([T((1, 2, 4, 6))], {"size": (7, 3), "mode": "nearest-exact"}, name="exact_size"),
    Sample([T((1, 2, 4, 6))], {"scale_factor": 1.3, "recompute_scale_factor": True, "mode": "nearest-exact"},
           name="exact_recompute"),
    Sample([T((2, 3, 7))], {"size": 16}, name="1d_size"),
    Sample([T((2, 3, 7))], {"scale_factor": 2.5}, name="1d_sf"),
    Sample([T((1, 1, 2, 3, 2))], {"scale_factor": (2, 1.5, 1)}, name="3d"),
    Sample([T((1, 2, "h", "w"))], {"scale_factor": 2}, dims=HW2, name="sym_sf2"),
    Sample([T((1, 2, "h", "w"))], {"scale_factor": (1.5, 0.5)}, dims=HW2, name="sym_sf_frac"),
    Sample([T((1, 2, "h"))], {"size": 9}, dims=({"h": 4}, {"h": 7}), name="sym_size"),
    Sample([T((1, 2, "h"))], {"size": 9, "mode": "nearest-exact"}, dims=({"h": 4}, {"h": 7}), name="sym_exact"),
    Sample([T((1, 2, "h"))], {"scale_factor": 0.75}, dims=({"h": 5}, {"h": 9}), name="sym_sf_down"),
]

# PyTorch's float index arithmetic (float32 for float32 data, float64 for float64 data) at
# sizes where a naive rational floor(i * in / out) would differ
_SWEEP = [(32, 41), (1000, 30), (1000, 60), (36, 57), (39, 40), (7, 3), (255, 97), (97, 255)]
INTERP_SWEEP = (
    [Sample([T((1, 1, n))], {"size": m}, name=f"size_{n}_{m}") for n, m in _SWEEP]
    + [Sample([T((1, 1, n))], {"size": m, "mode": "nearest-exact"}, name=f"exact_{n}_{m}") for n, m in _SWEEP]
    + [Sample([T((1, 1, n))], {"scale_factor": sf}, name=f"sf_{n}_{sf:.3f}")
       for n, sf in [(39, 1.001), (1000, 1.001), (30, 0.999), (4097, 0.7), (11, 1 / 3), (13, 2 / 3)]]
    # 2-D: out_h + out_w <= 128 takes PyTorch's legacy float32 kernel (with its out == in and
    # out == 2 * in shortcuts), larger outputs the generic one
    + [Sample([T((1, 1, h, w))], {"size": o, "mode": m}, name=f"2d_{h}x{w}_{o[0]}x{o[1]}_{m}")
       for (h, w), o in [((30, 24), (69, 21)), ((30, 24), (69, 70)), ((32, 1000), (41, 30)), ((32, 1000), (41, 100)),
                         ((3, 7), (3, 11)), ((3, 7), (6, 5))]
       for m in ("nearest", "nearest-exact")]
    + [Sample([T((1, 1, 5, 4))], {"scale_factor": (1.25, 1.0)}, name="2d_sf_same_size"),
       Sample([T((1, 1, "h", "w"))], {"scale_factor": (1.25, 2)}, dims=({"h": 3, "w": 4}, {"h": 40, "w": 50}),
              name="2d_sym_kernel_switch")]
)


def _gn(mod):
    return lambda x, w=None, b=None, **kw: mod.group_norm(x, weight=w, bias=b, **kw)


GROUP_NORM = [
    Sample([T((2, 6, 3, 4)), T((6,)), T((6,))], {"num_groups": 3}, name="affine"),
    Sample([T((2, 4, 5))], {"num_groups": 4}, name="instance"),
    Sample([T((3, 4))], {"num_groups": 2, "eps": 1e-3}, name="2d"),
    Sample([T((2, 4, 2, 3)), T((4,))], {"num_groups": 1}, name="one_group_weight"),
    Sample([T(("n", 6, "s")), T((6,)), T((6,))], {"num_groups": 2}, dims=({"n": 1, "s": 3}, {"n": 3, "s": 5}),
           name="sym"),
]

BATCH_NORM = [
    Sample([T((2, 3, 4, 5)), T((3,)), T((3,), gen="positive"), T((3,)), T((3,))], name="affine"),
    Sample([T((4, 3)), T((3,)), T((3,), gen="positive")], name="2d_no_affine"),
    Sample([T((2, 3, "s")), T((3,)), T((3,), gen="positive"), T((3,))], {"eps": 1e-3},
           dims=({"s": 2}, {"s": 5}), name="sym_weight"),
]

CASES = [
    OpCase("conv1d", LS_C1, T_C1, CONV1D, dtypes=FL, tol=CONV_TOL),
    OpCase("conv2d", LS_C2, T_C2, CONV2D, dtypes=FL, tol=CONV_TOL),
    OpCase("conv3d", LS_C3, T_C3, CONV3D, dtypes=FL, tol=CONV_TOL),
    OpCase("max_pool1d", ls.max_pool1d, F.max_pool1d, MAX_POOL1D, dtypes=FL, tol=EXACT),
    OpCase("max_pool2d", ls.max_pool2d, F.max_pool2d, MAX_POOL2D, dtypes=FL, tol=EXACT),
    OpCase("max_pool2d", ls.max_pool2d, F.max_pool2d,
           [Sample([T((2, 2, 5, 5), ls.int64)], {"kernel_size": 3, "stride": 2, "padding": 1}, name="int64")],
           dtypes=(ls.float32,), variant="int"),
    OpCase("avg_pool1d", ls.avg_pool1d, F.avg_pool1d, AVG_POOL1D, dtypes=FL),
    OpCase("avg_pool2d", ls.avg_pool2d, F.avg_pool2d, AVG_POOL2D, dtypes=FL),
    # the index arithmetic depends on the data dtype (as in PyTorch), so compare like with like
    OpCase("interpolate", ls.interpolate, F.interpolate, INTERP, dtypes=FL, ref_f64=False, tol=EXACT),
    OpCase("interpolate", ls.interpolate, F.interpolate, INTERP_SWEEP, dtypes=FL, ref_f64=False, tol=EXACT,
           layouts=("contiguous",), variant="index_sweep"),
    OpCase("group_norm", _gn(ls), _gn(F), GROUP_NORM, dtypes=FL, tol=CONV_TOL),
    OpCase("batch_norm", ls.batch_norm, F.batch_norm, BATCH_NORM, dtypes=FL),
]
