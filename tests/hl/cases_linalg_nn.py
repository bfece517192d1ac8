"""Op-table cases: matmul (all ranks, broadcast batches, 1-D), linear, softmax, norms."""

from __future__ import annotations

import torch

import lightspeed as ls
from tests.hl.optable import OpCase, Sample, T

F = (ls.float32, ls.float64)
S = ({"s": 1}, {"s": 3})


def _attn_mask(rng, shape, d):
    """Random keep-mask whose second row masks every key (such rows give zeros in PyTorch)."""
    m = rng.random(shape) < 0.6
    m[..., 0] = True
    m[1] = False
    return m


CASES = [
    OpCase("matmul", ls.matmul, torch.matmul, [
        Sample([T((3, 4)), T((4, 5))], name="2d"),
        Sample([T((2, 3, 4)), T((2, 4, 5))], name="batched"),
        Sample([T((2, 1, 3, 4)), T((3, 4, 2))], name="bcast_batch"),
        Sample([T((4,)), T((4, 5))], name="vec_mat"),
        Sample([T((3, 4)), T((4,))], name="mat_vec"),
        Sample([T((4,)), T((4,))], name="dot"),
        Sample([T((2, 3, 4)), T((4,))], name="batched_vec"),
        Sample([T(("s", 8)), T((8, 3))], dims=S, name="sym_m"),
        Sample([T((2, "s", 4)), T((2, 4, "s"))], dims=S, name="sym_mn"),
        Sample([T((3, "k")), T(("k", 2))], dims=({"k": 1}, {"k": 6}), name="sym_k"),
    ], dtypes=F + (ls.bfloat16, ls.float16)),
    OpCase("matmul", ls.matmul, torch.matmul, [Sample([T((3, 4), ls.int32), T((4, 2), ls.int32)])],
           dtypes=(ls.float32,), variant="int"),
    OpCase("linear", ls.linear, torch.nn.functional.linear, [
        Sample([T((3, 4)), T((5, 4)), T((5,))], name="bias"),
        Sample([T((2, "s", 4)), T((5, 4))], dims=S, name="nobias_sym"),
    ]),
    OpCase("softmax", ls.softmax, torch.softmax, [
        Sample([T((3, 5))], {"dim": -1}), Sample([T((2, 3, 4))], {"dim": 1}, name="mid"),
        Sample([T(("s", 7))], {"dim": 1}, dims=S, name="sym"),
        Sample([T((2, 4), gen=lambda r, s, d: [[0, float("-inf"), 1, 2], [5, 5, float("-inf"), -1]])], {"dim": -1},
               name="masked"),
    ], dtypes=F + (ls.bfloat16,)),
    OpCase("log_softmax", ls.log_softmax, torch.log_softmax, [
        Sample([T((3, 5))], {"dim": -1}), Sample([T(("s", 4))], {"dim": 0}, dims=S, name="sym")]),
    OpCase("layer_norm", lambda x, w=None, b=None, **k: ls.layer_norm(x, weight=w, bias=b, **k),
           lambda x, w=None, b=None, **k: torch.nn.functional.layer_norm(x, weight=w, bias=b, **k), [
        Sample([T((3, 8))], {"normalized_shape": (8,)}, name="plain"),
        Sample([T((2, "s", 8)), T((8,)), T((8,))], {"normalized_shape": (8,)}, dims=S, name="affine_sym"),
        Sample([T((2, 3, 4)), T((3, 4)), T((3, 4))], {"normalized_shape": (3, 4), "eps": 1e-3}, name="2d_norm"),
    ], tol={"float32": (1e-4, 1e-5)}),
    OpCase("rms_norm", lambda x, w=None, **k: ls.rms_norm(x, weight=w, **k),
           lambda x, w=None, **k: torch.nn.functional.rms_norm(x, weight=w, **k), [
        Sample([T((3, 8)), T((8,))], {"normalized_shape": (8,), "eps": 1e-6}),
        Sample([T(("s", 8))], {"normalized_shape": [8]}, dims=S, name="sym_noweight"),
    ], dtypes=F + (ls.bfloat16,)),
    OpCase("scaled_dot_product_attention", ls.scaled_dot_product_attention,
           torch.nn.functional.scaled_dot_product_attention, [
        Sample([T((2, 3, 4, 8)), T((2, 3, 6, 8)), T((2, 3, 6, 8))], name="plain"),
        Sample([T((1, 2, 4, 8)), T((1, 2, 4, 8)), T((1, 2, 4, 8))], {"is_causal": True, "scale": 0.3}, name="causal"),
        Sample([T((1, 2, 3, 8)), T((1, 2, 5, 8)), T((1, 2, 5, 8)),
                T((3, 5), ls.bool_, gen=_attn_mask, noncontig=False)], name="bool_mask_with_empty_row"),
        Sample([T((2, 4, "L", 8)), T((2, 2, "S", 8)), T((2, 2, "S", 8)), T((1, 1, "L", "S"))],
               {"enable_gqa": True}, dims=({"L": 1, "S": 4}, {"L": 3, "S": 3}), name="gqa_float_mask_sym"),
    ], dtypes=F + (ls.bfloat16,), tol={"float32": (1e-5, 1e-5), "bfloat16": (3e-2, 3e-2)}),
]
