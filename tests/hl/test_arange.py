"""ls.arange (a function of the Graph, with no tensor inputs) against torch.arange."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import lightspeed as ls


def _run(build, inputs=None, dims=None):
    g = ls.Graph()
    out = build(g)
    g.output("out", out)
    return out, g.compile(backend="reference")(inputs or {}, dims=dims)["out"]


@pytest.mark.parametrize("args,kwargs", [
    ((5,), {}),
    ((2, 9), {}),
    ((2, 9, 3), {}),
    ((9, 2, -3), {}),
    ((-4, 4, 2), {}),
    ((3, 3), {}),
    ((0, 1, 0.1), {}),
    ((1.5, 4), {}),
    ((5, 0, -0.3), {}),
    ((-2.5, 2.5, 0.5), {}),
    ((4.0,), {}),
    ((0, 10, 3), {"dtype": "float64"}),
    ((0, 1, 0.1), {"dtype": "float64"}),
    ((1, 7), {"dtype": "int32"}),
    ((0, 6), {"dtype": "float16"}),
    ((0.5, 5.2, 1.5), {"dtype": "int64"}),
    ((-3.7, 4.9, 2.2), {"dtype": "int32"}),
], ids=str)
def test_arange_matches_torch(args, kwargs):
    out, got = _run(lambda g: ls.arange(g, *args, **kwargs))
    tkw = {"dtype": getattr(torch, kwargs["dtype"])} if "dtype" in kwargs else {}
    ref = torch.arange(*args, **tkw)
    assert out.dtype.np == ref.numpy().dtype, (out.dtype, ref.dtype)
    assert got.dtype == ref.numpy().dtype
    if ref.is_floating_point():
        # PyTorch's CPU kernel rounds start + i*step once per SIMD chunk base (so its last bits depend
        # on the vector width); ours is start + i*step in float64, rounded once
        exact = torch.arange(*args, dtype=torch.float64).to(ref.dtype).numpy()
        np.testing.assert_array_equal(got, exact)
        np.testing.assert_allclose(got, ref.numpy(), rtol=3e-7, atol=1e-7)
    else:
        np.testing.assert_array_equal(got, ref.numpy())


@pytest.mark.parametrize("s", [0, 1, 4, 7])
def test_arange_symbolic_length(s):
    def build(g):
        x = g.input("x", ("s", 2))
        return ls.arange(g, x.shape[0])

    out, got = _run(build, {"x": np.zeros((s, 2), np.float32)})
    assert not out.shape[0].is_const
    np.testing.assert_array_equal(got, torch.arange(s).numpy())


@pytest.mark.parametrize("s", [1, 3, 8])
def test_arange_symbolic_bounds_and_step(s):
    out, got = _run(lambda g: ls.arange(g, 1, "s+2", 2), dims={"s": s})
    np.testing.assert_array_equal(got, torch.arange(1, s + 2, 2).numpy())
    out, got = _run(lambda g: ls.arange(g, "s", -1, -3), dims={"s": s})
    np.testing.assert_array_equal(got, torch.arange(s, -1, -3).numpy())
    out, got = _run(lambda g: ls.arange(g, "s", "s+4", 1, dtype=ls.float32), dims={"s": s})
    np.testing.assert_array_equal(got, torch.arange(s, s + 4, dtype=torch.float32).numpy())


def test_arange_bad_arguments():
    g = ls.Graph()
    with pytest.raises(ls.ShapeError, match="arange"):
        ls.arange(g, 5, 0)
    with pytest.raises(ls.ShapeError, match="arange"):
        ls.arange(g, 0.0, -1.5, 0.5)
    with pytest.raises(ValueError, match="arange"):
        ls.arange(g, 0, 5, 0)
    with pytest.raises(ls.UnsupportedError, match="arange"):
        ls.arange(g, 0.5, "s")
    with pytest.raises(TypeError, match="arange"):
        ls.arange(5)
    with pytest.raises(ls.UnsupportedError, match="arange"):
        ls.arange(g, 0, "s", "s")
    with pytest.raises(TypeError, match="arange"):
        ls.arange(g, 0, 5, 1.5j)
