"""Op-table cases: sort, argsort, topk, cumsum, cumprod, cummax, cummin, tril, triu."""

from __future__ import annotations

import numpy as np
import torch

import lightspeed as ls
from tests.hl.optable import OpCase, Sample, T

F = (ls.float32, ls.float64)
LOW = (ls.float16, ls.bfloat16)
INTS = (ls.int32, ls.int64)

NAN = float("nan")


def ties(rng, shape, dtype):
    """Small integers (as the sample's dtype): many equal elements per row."""
    return rng.integers(-2, 3, size=shape).astype(dtype)


def distinct(rng, shape, dtype):
    """Distinct values (a shuffled range, centred on zero), for ops whose tie order is unspecified."""
    n = int(np.prod(shape))
    return (rng.permutation(n) - n // 2).reshape(shape).astype(dtype)


def with_nans(rng, shape, dtype):
    a = rng.integers(-3, 4, size=shape).astype(np.float64)
    a[rng.random(shape) < 0.25] = np.nan
    return a.astype(dtype)


def special_1d(values):
    return lambda rng, shape, dtype: np.array(values, dtype=dtype)


# ------------------------------------------------------------------ sort family
def _sort_samples():
    return [
        Sample([T((3, 5))], {"dim": -1}, name="last"),
        Sample([T((4, 3))], {"dim": 0, "descending": True}, name="dim0_desc"),
        Sample([T(("s", 6))], {"dim": 1}, dims=({"s": 1}, {"s": 3}), name="sym"),
        Sample([T((3, "s"))], {"dim": -1, "descending": True}, dims=({"s": 1}, {"s": 4}), name="sym_axis"),
        Sample([T((2, 5, 3), gen=ties)], {"dim": 1}, name="ties"),
        Sample([T((2, 6), gen=ties)], {"dim": -1, "descending": True}, name="ties_desc"),
        Sample([T((7,), gen=special_1d([1.0, NAN, 3.0, -np.inf, 3.0, NAN, np.inf]))], {"dim": 0}, name="nan"),
        Sample([T((7,), gen=special_1d([1.0, NAN, 3.0, -np.inf, 3.0, NAN, np.inf]))],
               {"dim": 0, "descending": True}, name="nan_desc"),
    ]


def _int_sort_samples():
    return [Sample([T((3, 6))], {"dim": -1}, name="int"),
            Sample([T((4, 3), gen=ties)], {"dim": 0, "descending": True}, name="int_ties_desc")]


def _sort_torch(x, dim=-1, descending=False):
    return torch.sort(x, dim=dim, descending=descending, stable=True)


def _argsort_torch(x, dim=-1, descending=False):
    return torch.argsort(x, dim=dim, descending=descending, stable=True)


def _topk_samples():
    return [
        Sample([T((3, 6))], {"k": 3}, name="last"),
        Sample([T((5, 3))], {"k": 2, "dim": 0, "largest": False}, name="dim0_smallest"),
        Sample([T(("s", 6))], {"k": 4, "dim": -1}, dims=({"s": 1}, {"s": 3}), name="sym"),
        Sample([T((2, 4, 3))], {"k": 4, "dim": 1}, name="k_eq_n"),
        Sample([T((4,))], {"k": 1}, name="1d_k1"),
        Sample([T((3, 5))], {"k": 2, "sorted": False}, torch_kwargs={"k": 2, "sorted": True}, name="unsorted"),
    ]


def _int_topk_samples():
    return [Sample([T((3, 6), gen=distinct)], {"k": 2}, name="int"),
            Sample([T((6, 2), gen=distinct)], {"k": 3, "dim": 0, "largest": False}, name="int_smallest")]


# ------------------------------------------------------------------ scans
def _scan_samples(gen="normal"):
    return [
        Sample([T((3, 5), gen=gen)], {"dim": 1}, name="dim1"),
        Sample([T((4, 3), gen=gen)], {"dim": 0}, name="dim0"),
        Sample([T(("s", 5), gen=gen)], {"dim": 0}, dims=({"s": 1}, {"s": 4}), name="sym_axis"),
        Sample([T((2, "s"), gen=gen)], {"dim": -1}, dims=({"s": 1}, {"s": 5}), name="sym_neg"),
        Sample([T((2, 3, 4), gen=gen)], {"dim": -2}, name="3d"),
    ]


def _int_scan_samples():
    return [Sample([T((3, 5))], {"dim": 1}, name="int"),
            Sample([T(("s", 4))], {"dim": 0}, dims=({"s": 1}, {"s": 3}), name="int_sym_axis")]


def _small_ints(rng, shape, dtype):
    return rng.integers(-3, 4, size=shape).astype(dtype)


def _cumext_samples():
    return _scan_samples() + [
        Sample([T((3, 6), gen=ties)], {"dim": 1}, name="ties"),
        Sample([T((8,), gen=special_1d([1.0, 3.0, 3.0, NAN, 2.0, NAN, 5.0, -0.0]))], {"dim": 0}, name="nan"),
        Sample([T((2, 7), gen=with_nans)], {"dim": -1}, name="rand_nan"),
    ]


def _tri_samples():
    return [
        Sample([T((4, 5))], {}, name="default"),
        Sample([T((4, 5))], {"diagonal": 1}, name="diag1"),
        Sample([T((5, 3))], {"diagonal": -2}, name="diag_neg"),
        Sample([T(("s", 3, 4))], {"diagonal": -1}, dims=({"s": 1}, {"s": 2}), name="sym_batch"),
        Sample([T(("s", "t"))], {}, dims=({"s": 2, "t": 5}, {"s": 4, "t": 1}), name="sym_matrix"),
    ]


CASES = [
    OpCase("sort", ls.sort, _sort_torch, _sort_samples(), dtypes=F + LOW),
    OpCase("sort", lambda x, **kw: x.sort(**kw, stable=True), _sort_torch, _int_sort_samples(),
           dtypes=INTS + (ls.int8,), variant="int_method"),
    OpCase("argsort", ls.argsort, _argsort_torch, _sort_samples()[:7]),
    OpCase("argsort", lambda x, **kw: x.argsort(**kw), _argsort_torch, _int_sort_samples(), dtypes=INTS,
           variant="int_method"),
    OpCase("topk", ls.topk, torch.topk, _topk_samples(), dtypes=F + LOW),
    OpCase("topk", lambda x, **kw: x.topk(**kw), torch.topk, _int_topk_samples(), dtypes=INTS,
           variant="int_method"),
    # float scans sum/multiply in a different order than PyTorch's sequential loop
    OpCase("cumsum", ls.cumsum, torch.cumsum, _scan_samples(), dtypes=F + LOW, tol={"float32": (1e-5, 1e-5)}),
    OpCase("cumsum", lambda x, **kw: x.cumsum(**kw), torch.cumsum, _int_scan_samples(),
           dtypes=INTS + (ls.uint8, ls.bool_), variant="int_method"),
    OpCase("cumsum", lambda x, dim: ls.cumsum(x, dim, dtype=ls.float64),
           lambda x, dim: torch.cumsum(x, dim, dtype=torch.float64), [Sample([T((3, 4))], {"dim": 1})],
           dtypes=(ls.int32, ls.float32), variant="dtype", ref_f64=False),
    # symbolic-size axes of floats go through log2/exp2 (see prod): a few ulps of relative error
    OpCase("cumprod", ls.cumprod, torch.cumprod, _scan_samples("uniform"), dtypes=F,
           tol={"float32": (2e-5, 1e-6), "float64": (1e-12, 1e-14)}),
    OpCase("cumprod", ls.cumprod, torch.cumprod, [Sample([T((2, 5))], {"dim": 1})], dtypes=LOW, variant="low"),
    OpCase("cumprod", lambda x, **kw: x.cumprod(**kw), torch.cumprod,
           [Sample([T((3, 5), gen=_small_ints)], {"dim": 1}, name="int"),
            Sample([T((6, 2), gen=_small_ints)], {"dim": 0}, name="int_dim0")],
           dtypes=INTS + (ls.bool_,), variant="int_method"),
    OpCase("cummax", ls.cummax, torch.cummax, _cumext_samples(), dtypes=F),
    OpCase("cummax", lambda x, **kw: x.cummax(**kw), torch.cummax,
           _int_scan_samples() + [Sample([T((3, 6), gen=ties)], {"dim": 1}, name="int_ties")],
           dtypes=INTS + (ls.uint8, ls.bool_), variant="int_method"),
    OpCase("cummax", ls.cummax, torch.cummax, [Sample([T((3, 6), gen=ties)], {"dim": 1})], dtypes=LOW,
           variant="low"),
    OpCase("cummin", ls.cummin, torch.cummin, _cumext_samples(), dtypes=F),
    OpCase("cummin", lambda x, **kw: x.cummin(**kw), torch.cummin,
           _int_scan_samples() + [Sample([T((3, 6), gen=ties)], {"dim": 1}, name="int_ties")],
           dtypes=INTS + (ls.uint8, ls.bool_), variant="int_method"),
    OpCase("tril", ls.tril, torch.tril, _tri_samples(), dtypes=F + LOW),
    OpCase("tril", lambda x, **kw: x.tril(**kw), torch.tril, _tri_samples()[:3], dtypes=INTS + (ls.bool_,),
           variant="int_method"),
    OpCase("triu", ls.triu, torch.triu, _tri_samples(), dtypes=F + LOW),
    OpCase("triu", lambda x, **kw: x.triu(**kw), torch.triu, _tri_samples()[:3], dtypes=INTS + (ls.bool_,),
           variant="int_method"),
]
