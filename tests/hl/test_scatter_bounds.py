"""Scatter-family writes whose index is outside its axis are dropped, never written to another
row (PyTorch raises there; a lazy graph cannot).  Checked against a hand computation."""

from __future__ import annotations

import numpy as np

import lightspeed as ls


def test_scatter_drops_indexes_outside_the_axis():
    g = ls.Graph()
    x = g.input("x", (3, 4))
    idx = g.input("i", (2, 4), ls.int64)
    src = g.input("s", (2, 4))
    g.output("y", ls.scatter(x, 1, idx, src))
    xa = np.zeros((3, 4), np.float32)
    ia = np.array([[0, 4, 5, 3], [-1, 1, 7, 2]], np.int64)  # 4, 5, 7 and -1 are outside axis 1
    sa = np.arange(1, 9, dtype=np.float32).reshape(2, 4)
    want = xa.copy()
    for r in range(2):
        for c in range(4):
            if 0 <= ia[r, c] < 4:
                want[r, ia[r, c]] = sa[r, c]
    got = g.compile(backend="reference")(x=xa, i=ia, s=sa)["y"]
    np.testing.assert_array_equal(got, want)
    assert got[1, 0] == 0 and got[2].sum() == 0  # index 4/5 of row 0 did not spill into row 1


def test_index_copy_drops_out_of_range_rows():
    g = ls.Graph()
    x, src = g.input("x", (3, 2)), g.input("s", (2, 2))
    idx = g.input("i", (2,), ls.int64)
    g.output("y", ls.index_copy(x, 0, idx, src))
    xa, sa = np.zeros((3, 2), np.float32), np.ones((2, 2), np.float32)
    got = g.compile(backend="reference")(x=xa, i=np.array([1, 3], np.int64), s=sa)["y"]
    np.testing.assert_array_equal(got, np.array([[0, 0], [1, 1], [0, 0]], np.float32))


def test_slice_scatter_symbolic_start_and_rows_past_the_end():
    """One compiled graph writes at any position p (a dim); rows that would land past the end of
    the axis are dropped, never wrapped onto the next row."""
    g = ls.Graph()
    x, rows = g.input("x", (5, 2)), g.input("r", ("s", 2))
    g.output("y", ls.slice_scatter(x, rows, 0, "p"))
    prog = g.compile(backend="reference")
    base = np.arange(10, dtype=np.float32).reshape(5, 2)
    for p, s in ((0, 2), (3, 2), (4, 2), (5, 1)):
        r = -np.ones((s, 2), np.float32) * (p + 1)
        want = base.copy()
        want[p:p + s] = r[:max(0, 5 - p)]
        np.testing.assert_array_equal(prog(x=base, r=r, dims={"p": p})["y"], want)
