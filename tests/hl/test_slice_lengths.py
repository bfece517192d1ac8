"""Slicing a symbolic axis: the length is a simple expression where one exists (``x[:, 1::2]`` of
a ``2*t`` axis has ``t`` elements), and it, and the elements read, stay right for every size,
including sizes below the start. Checked against Python's own slicing of ``range(n)``."""

from __future__ import annotations

import itertools

import numpy as np

import lightspeed as ls
from lightspeed.symbolic import smax, sym

STARTS = [None, 0, 1, 2, 3, 5, -1, -2, -5, "k"]
STOPS = [None, 0, 2, 4, 7, -1, -3]
STEPS = [None, 1, 2, 3]


def test_simple_lengths():
    g = ls.Graph()
    x = g.input("x", (4, "2*t"))
    t = sym("t")
    assert x[:, 1::2].shape[1] == t
    assert x[:, 0::2].shape[1] == t
    assert x[:, ::2].shape[1] == t
    y = g.input("y", ("n",))
    n = sym("n")
    assert y[1:].shape[0] == smax(n - 1, 0)
    assert y[0::2].shape[0] == (n + 1) // 2
    assert y[1::2].shape[0] == n // 2


def test_every_bound_matches_python_slicing():
    # one graph, one output per (size expression, start, stop, step); run at sizes 0..9
    g = ls.Graph()
    x = g.input("x", ("n",), ls.int64)
    sizes = {"n": lambda n: n, "2*n": lambda n: 2 * n, "n+1": lambda n: n + 1}
    # x viewed with size 2*n (repeat) and n+1 (pad): the slice code sees those size expressions
    views = {"n": x, "2*n": x.reshape(-1, 1).expand(x.shape[0], 2).reshape(-1), "n+1": ls.pad(x, (0, 1), value=0)}
    specs = list(itertools.product(sizes, STARTS, STOPS, STEPS))
    for j, (sz, a, b, c) in enumerate(specs):
        # a == "k": a symbolic start, the symbol k, bound to 1 or 4 below
        g.output(f"o{j}", views[sz][a:b:c])
    prog = g.compile(backend="reference")
    for n, k in itertools.product(range(10), (1, 4)):
        base = np.arange(n, dtype=np.int64) * 10 + 7
        full = {"n": base, "2*n": np.repeat(base, 2), "n+1": np.concatenate([base, [0]])}
        out = prog({"x": base}, dims={"n": n, "k": k})
        for j, (sz, a, b, c) in enumerate(specs):
            a = k if a == "k" else a
            want = full[sz][a:b:c]
            assert len(full[sz]) == sizes[sz](n)
            np.testing.assert_array_equal(out[f"o{j}"], want, err_msg=f"size {sz}={sizes[sz](n)} [{a}:{b}:{c}]")
