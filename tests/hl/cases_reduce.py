"""Op-table cases: reductions over one or several axes, argmax/argmin."""

from __future__ import annotations

import torch

import lightspeed as ls
from tests.hl.optable import OpCase, Sample, T

F = (ls.float32, ls.float64)
S = ({"s": 1}, {"s": 4})


def _red(**kw):
    return [Sample([T((3, 4, 5))], {"dim": 1, **kw}, name="mid"),
            Sample([T((3, 4, 5))], {"dim": (0, 2), **kw}, name="multi"),
            Sample([T((3, 4, 5))], {"dim": -1, "keepdim": True, **kw}, name="keep"),
            Sample([T(("s", 6))], {"dim": 0, **kw}, dims=S, name="sym")]


CASES = [
    OpCase("sum", ls.sum, torch.sum, _red() + [Sample([T((3, 4))], name="all")], dtypes=F + (ls.bfloat16,)),
    OpCase("sum", ls.sum, torch.sum, [Sample([T((3, 4), ls.int32)], {"dim": 1}), Sample([T((3, 4), ls.bool_)])],
           dtypes=(ls.float32,), variant="int"),
    OpCase("amax", ls.amax, torch.amax, _red(), dtypes=F + (ls.int32,)),
    OpCase("amin", ls.amin, torch.amin, _red(), dtypes=F + (ls.int32,)),
    OpCase("amin", ls.amin, torch.amin, [Sample([T((4, 3), ls.uint8)], {"dim": 0})], variant="uint8"),
    OpCase("max", lambda x: ls.max(x), lambda x: torch.max(x), [Sample([T((3, 4))])]),
    OpCase("max", lambda x: ls.max(x, 1), lambda x: torch.max(x, 1), [Sample([T((3, 4))])], variant="dim"),
    OpCase("min", lambda x: ls.min(x, 0, keepdim=True), lambda x: torch.min(x, 0, keepdim=True),
           [Sample([T((3, 4))]), Sample([T((5, 2), ls.int32)], name="int")]),
    OpCase("mean", ls.mean, torch.mean, _red() + [Sample([T((3, 4))], name="all")], dtypes=F + (ls.float16,)),
    OpCase("var", ls.var, torch.var, _red() + [Sample([T((3, 4))], {"dim": 1, "correction": 0}, name="biased")]),
    OpCase("std", ls.std, torch.std, _red()),
    OpCase("prod", ls.prod, torch.prod, [Sample([T((3, 4), gen="uniform")], {"dim": 1}),
                                         Sample([T((3, 4), gen="uniform")], name="all"),
                                         Sample([T((2, 5), ls.int32, gen=lambda r, s, d: r.integers(-3, 4, s))],
                                                {"dim": 1}, name="int")]),
    OpCase("prod", ls.prod, torch.prod,
           [Sample([T(("s", 3), gen="uniform")], {"dim": 0}, dims=S),
            Sample([T((4,), gen=lambda r, s, d: [-2.0, 0.5, -1.5, 3.0])], {"dim": 0}, name="signs")],
           variant="symbolic", tol={"float64": (1e-12, 1e-14)}),
    OpCase("all", ls.all, torch.all, [Sample([T((3, 4), ls.bool_)], {"dim": 1}),
                                      Sample([T((3, 4), ls.int32, gen=lambda r, s, d: r.integers(0, 3, s))])],
           dtypes=(ls.float32,)),
    OpCase("any", ls.any, torch.any, [Sample([T((3, 4), ls.bool_)], {"dim": 0}),
                                      Sample([T((3, 4), gen=lambda r, s, d: r.integers(0, 2, s) * r.random(s))])],
           dtypes=(ls.float32,)),
    OpCase("argmax", ls.argmax, torch.argmax,
           [Sample([T((3, 4, 5))], {"dim": 1}), Sample([T((3, 4))], name="all"),
            Sample([T(("s", 5))], {"dim": -1, "keepdim": True}, dims=S, name="sym"),
            Sample([T((2, 6), gen=lambda r, s, d: r.integers(0, 3, s))], {"dim": 1}, name="ties"),
            # no axis before dim (a row of logits): positions without the modulo, inner axes after it
            Sample([T((1, 6, 3), gen=lambda r, s, d: r.integers(0, 3, s))], {"dim": 1}, name="lead1"),
            Sample([T((4,), gen=lambda r, s, d: [1.0, float("nan"), 3.0, float("nan")])], {"dim": 0}, name="nan")],
           dtypes=F + (ls.int32,)),
    OpCase("argmin", ls.argmin, torch.argmin,
           [Sample([T((3, 4, 5))], {"dim": 0}), Sample([T((2, 6), gen=lambda r, s, d: r.integers(0, 3, s))],
                                                       {"dim": 1}, name="ties")],
           dtypes=F + (ls.int32,)),
]
