"""Op-table cases: gather/scatter families, index_select, index_copy, embedding, one_hot."""

from __future__ import annotations

import numpy as np
import torch

import lightspeed as ls
from tests.hl.optable import OpCase, Sample, T

F = (ls.float32, ls.float64)
LOW = (ls.float16, ls.bfloat16)
INTS = (ls.int32, ls.int64)


def uniq(n: int, axis: int, negative: bool = False):
    """Index values in [0, n) that are distinct along ``axis`` (so scatters have one writer per
    target); with ``negative`` about half of them are written as ``i - n`` (ONNX style)."""

    def gen(rng, shape, dtype):
        ax = axis % len(shape)
        wide = list(shape)
        wide[ax] = n
        perm = np.argsort(rng.random(wide), axis=ax)
        out = np.take(perm, np.arange(shape[ax]), axis=ax)
        if negative:
            out = out - n * (rng.random(out.shape) < 0.5)
        return out.astype(dtype)

    return gen


def signed_index(n: int):
    """Index values in [-n, n) (ONNX GatherElements allows negative indexes)."""
    return lambda rng, shape, dtype: rng.integers(-n, n, size=shape).astype(dtype)


# ------------------------------------------------------------------ gather family
def _gather_samples(idt=ls.int64):
    return [
        Sample([T((3, 5)), T((3, 4), idt, gen="index:5")], {"dim": 1}, name="dim1"),
        Sample([T((4, 3)), T((2, 3), idt, gen="index:4")], {"dim": 0}, name="dim0_small"),
        Sample([T(("s", 5)), T(("s", 2), ls.int32, gen="index:5")], {"dim": -1},
               dims=({"s": 1}, {"s": 4}), name="sym_neg"),
        Sample([T((2, 3, 4)), T((2, 5, 3), idt, gen="index:3")], {"dim": 1}, name="3d_long"),
        Sample([T((6,)), T((8,), idt, gen="index:6")], {"dim": 0}, name="1d"),
    ]


def _gather_torch(x, i, dim):
    return torch.gather(x, dim, i.long())


def _take_torch(x, i, dim=None):
    return torch.take_along_dim(x, i.long(), dim)


def _gather_elements_torch(d, i, axis=0):
    return torch.gather(d, axis, torch.remainder(i.long(), d.shape[axis]))


def _embedding_torch(ids, w, **kw):
    return torch.nn.functional.embedding(ids.long(), w, **kw)


def _scatter_samples(idt=ls.int64):
    return [
        Sample([T((3, 5)), T((3, 4), idt, gen=uniq(5, 1)), T((3, 4))], {"dim": 1}, name="dim1"),
        Sample([T((4, 3)), T((2, 3), idt, gen=uniq(4, 0)), T((3, 4))], {"dim": 0}, name="dim0_big_src"),
        Sample([T(("s", 5)), T(("s", 3), ls.int32, gen=uniq(5, -1)), T(("s", 3))], {"dim": -1},
               dims=({"s": 1}, {"s": 4}), name="sym_neg"),
        Sample([T((2, 4, 3)), T((2, 2, 2), idt, gen=uniq(4, 1)), T((2, 3, 3))], {"dim": 1}, name="3d_small"),
        Sample([T((3, 5)), T((3, 2), idt, gen=uniq(5, 1)), 2.5], {"dim": 1}, name="scalar"),
    ]


def _scatter_torch(x, i, s, dim):
    return torch.scatter(x, dim, i.long(), s)


def _scatter_add_samples(idt=ls.int64):
    return [
        Sample([T((3, 5)), T((3, 6), idt, gen="index:5"), T((3, 6))], {"dim": 1}, name="dups"),
        Sample([T((4, 3)), T((6, 2), idt, gen="index:4"), T((6, 3))], {"dim": 0}, name="dim0_pad"),
        Sample([T(("s", 4)), T(("s", 7), ls.int32, gen="index:4"), T(("s", 7))], {"dim": -1},
               dims=({"s": 1}, {"s": 3}), name="sym_neg"),
        Sample([T((2, 3, 4)), T((2, 5, 4), idt, gen="index:3"), T((2, 5, 4))], {"dim": -2}, name="3d"),
    ]


def _scatter_add_torch(x, i, s, dim):
    return torch.scatter_add(x, dim, i.long(), s)


def _index_copy_samples(idt=ls.int64):
    return [
        Sample([T((5, 3)), T((3,), idt, gen=uniq(5, 0)), T((3, 3))], {"dim": 0}, name="dim0"),
        Sample([T((3, 5)), T((2,), idt, gen=uniq(5, 0)), T((3, 2))], {"dim": -1}, name="dim_neg"),
        Sample([T(("s", 6)), T((4,), ls.int32, gen=uniq(6, 0)), T(("s", 4))], {"dim": 1},
               dims=({"s": 1}, {"s": 3}), name="sym"),
        Sample([T((2, 4, 3)), T((4,), idt, gen=uniq(4, 0)), T((2, 4, 3))], {"dim": 1}, name="3d_perm"),
    ]


def _index_copy_torch(x, i, s, dim):
    return torch.index_copy(x, dim, i.long(), s)


def _index_select_samples():
    return [
        Sample([T((4, 5)), T((3,), ls.int64, gen="index:4")], {"dim": 0}, name="dim0"),
        Sample([T((4, 5)), T((7,), ls.int32, gen="index:5")], {"dim": -1}, name="dim_neg"),
        Sample([T(("s", 3, 4)), T(("t",), ls.int64, gen="index:3")], {"dim": 1},
               dims=({"s": 1, "t": 2}, {"s": 3, "t": 5}), name="sym"),
    ]


CASES = [
    OpCase("index_select", lambda x, i, dim: ls.index_select(x, dim, i),
           lambda x, i, dim: torch.index_select(x, dim, i.long()), _index_select_samples()),
    OpCase("index_select", lambda x, i, dim: x.index_select(dim, i),
           lambda x, i, dim: torch.index_select(x, dim, i.long()), _index_select_samples()[:1],
           dtypes=INTS, variant="int_method"),
    # gather
    OpCase("gather", lambda x, i, dim: ls.gather(x, dim, i), _gather_torch, _gather_samples(), dtypes=F + LOW),
    OpCase("gather", lambda x, i, dim: x.gather(dim, i), _gather_torch, _gather_samples(ls.int32)[:2],
           dtypes=INTS + (ls.bool_,), variant="int_method"),
    OpCase("gather_elements", lambda d, i, axis: ls.gather_elements(d, i, axis), _gather_elements_torch,
           [Sample([T((3, 5)), T((3, 4), ls.int64, gen=signed_index(5))], {"axis": 1}, name="neg_idx"),
            Sample([T((4, 3)), T((2, 3), ls.int64, gen=signed_index(4))], {"axis": 0}, name="axis0"),
            Sample([T(("s", 5)), T(("s", 6), ls.int32, gen=signed_index(5))], {"axis": -1},
                   dims=({"s": 1}, {"s": 3}), name="sym"),
            Sample([T(("s", 4)), T((2, 4), ls.int64, gen=signed_index(2))], {"axis": 0},
                   dims=({"s": 2}, {"s": 3}), name="sym_axis")]),
    OpCase("take_along_dim", lambda x, i, dim=None: ls.take_along_dim(x, i, dim), _take_torch,
           [Sample([T((3, 5)), T((3, 2), ls.int64, gen="index:5")], {"dim": 1}, name="dim1"),
            Sample([T((3, 4)), T((1, 2), ls.int64, gen="index:4")], {"dim": -1}, name="bcast_index"),
            Sample([T((1, 4)), T((3, 2), ls.int64, gen="index:4")], {"dim": 1}, name="bcast_input"),
            Sample([T((3, 4)), T((5,), ls.int64, gen="index:12")], {}, name="flat"),
            Sample([T(("s", 4)), T(("s", 3), ls.int32, gen="index:4")], {"dim": -1},
                   dims=({"s": 1}, {"s": 3}), name="sym")]),
    OpCase("take_along_dim", lambda x, i, dim=None: x.take_along_dim(i, dim), _take_torch,
           [Sample([T((3, 5)), T((2, 5), ls.int64, gen="index:3")], {"dim": 0})], dtypes=INTS, variant="int_method"),
    OpCase("embedding", ls.embedding, _embedding_torch,
           [Sample([T((2, 3), ls.int64, gen="index:10"), T((10, 4))], name="2d_ids"),
            Sample([T(("s",), ls.int32, gen="index:7"), T((7, 3))], dims=({"s": 1}, {"s": 5}), name="sym"),
            Sample([T((2, 2, 3), ls.int64, gen="index:5"), T((5, 2))], {"padding_idx": 0}, name="3d_padding_idx")],
           dtypes=F + LOW),
    # scatter family
    OpCase("scatter", lambda x, i, s, dim: ls.scatter(x, dim, i, s), _scatter_torch, _scatter_samples(),
           dtypes=F + LOW),
    OpCase("scatter", lambda x, i, s, dim: x.scatter(dim, i, s), _scatter_torch, _scatter_samples(ls.int32)[:2],
           dtypes=INTS, variant="int_method"),
    OpCase("scatter", lambda x, i, dim: ls.scatter(x, dim, i, value=-1.5),
           lambda x, i, dim: torch.scatter(x, dim, i.long(), value=-1.5),
           [Sample([T((3, 5)), T((3, 2), ls.int64, gen=uniq(5, 1))], {"dim": 1})], variant="value_kw"),
    OpCase("scatter", lambda x, i, s, dim: ls.scatter(x, dim, i, s, reduce="add"), _scatter_add_torch,
           _scatter_add_samples()[:2], variant="reduce_add", tol={"float32": (1e-5, 1e-5)}),
    OpCase("scatter_elements", lambda d, i, u, axis: ls.scatter_elements(d, i, u, axis),
           lambda d, i, u, axis: torch.scatter(d, axis, torch.remainder(i.long(), d.shape[axis]), u),
           [Sample([T((3, 5)), T((3, 4), ls.int64, gen=uniq(5, 1, negative=True)), T((3, 4))], {"axis": 1},
                   name="neg_idx"),
            Sample([T(("s", 3)), T(("s", 3), ls.int32, gen=uniq(3, -1, negative=True)), T(("s", 3))],
                   {"axis": -1}, dims=({"s": 1}, {"s": 4}), name="sym")]),
    OpCase("scatter_elements", lambda d, i, u: ls.scatter_elements(d, i, u, 0, reduction="add"),
           lambda d, i, u: torch.scatter_add(d, 0, torch.remainder(i.long(), d.shape[0]), u),
           [Sample([T((4, 3)), T((6, 3), ls.int64, gen=signed_index(4)), T((6, 3))])],
           variant="add", tol={"float32": (1e-5, 1e-5)}),
    OpCase("scatter_add", lambda x, i, s, dim: ls.scatter_add(x, dim, i, s), _scatter_add_torch,
           _scatter_add_samples(), dtypes=F + LOW, tol={"float32": (1e-5, 1e-5)}),
    OpCase("scatter_add", lambda x, i, s, dim: x.scatter_add(dim, i, s), _scatter_add_torch,
           _scatter_add_samples(ls.int32), dtypes=INTS + (ls.int8,), variant="int_method"),
    OpCase("index_copy", lambda x, i, s, dim: ls.index_copy(x, dim, i, s), _index_copy_torch,
           _index_copy_samples(), dtypes=F + LOW),
    OpCase("index_copy", lambda x, i, s, dim: x.index_copy(dim, i, s), _index_copy_torch,
           _index_copy_samples(ls.int32)[:2], dtypes=INTS, variant="int_method"),
    OpCase("slice_scatter", lambda x, s, dim, start: ls.slice_scatter(x, s, dim, start),
           lambda x, s, dim, start: torch.slice_scatter(x, s, dim, start, start + s.shape[dim]),
           [Sample([T((6, 3)), T((2, 3))], {"dim": 0, "start": 3}, name="rows"),
            Sample([T((2, 5, 3)), T((2, 2, 3))], {"dim": 1, "start": 1}, name="middle"),
            Sample([T((4, 5)), T((4, 1))], {"dim": -1, "start": 4}, name="last_col"),
            Sample([T(("s", 4)), T((1, 4))], {"dim": 0, "start": 0}, dims=({"s": 1}, {"s": 3}), name="sym")],
           dtypes=F + LOW + INTS),
    OpCase("one_hot", lambda t, num_classes: ls.one_hot(t, num_classes),
           lambda t, num_classes: torch.nn.functional.one_hot(t.long(), num_classes),
           [Sample([T((3, 4), gen="index:5")], {"num_classes": 5}, name="2d"),
            Sample([T(("s",), gen="index:3")], {"num_classes": 4}, dims=({"s": 1}, {"s": 6}), name="sym"),
            Sample([T((2, 3), ls.int32, gen="index:2")], {"num_classes": 2}, name="int32")],
           dtypes=(ls.int64,)),
]
