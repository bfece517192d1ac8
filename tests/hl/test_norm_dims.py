"""Normalisation ops take their sizes as dim objects too: ``layer_norm(x, x.shape[-1])`` with a
symbolic last dim used to raise ``TypeError: 'Expr' object is not iterable``. Results are checked
against PyTorch in float64 at two bindings of the symbolic dims."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

import lightspeed as ls


def _run(build, shapes: dict, dims_list):
    """Build ``build(graph, inputs) -> output`` over float64 inputs, run it on the reference
    runtime at each binding; yields (numpy inputs, output)."""
    g = ls.Graph()
    ins = {n: g.input(n, s, ls.float64) for n, s in shapes.items()}
    g.output("y", build(ins))
    prog = g.compile(backend="reference")
    rng = np.random.default_rng(0)
    for dims in dims_list:
        arrs = {n: rng.standard_normal(tuple(dims.get(d, d) for d in s)) for n, s in shapes.items()}
        yield arrs, prog(arrs)["y"]


DIMS = ({"s": 1, "d": 5}, {"s": 3, "d": 8})


@pytest.mark.parametrize("how", ["expr", "name", "expr_tuple", "two_exprs"])
def test_layer_norm_symbolic_normalized_shape(how):
    def build(t):
        x = t["x"]
        ns = {"expr": x.shape[-1], "name": "d", "expr_tuple": (x.shape[-1],),
              "two_exprs": (x.shape[-2], x.shape[-1])}[how]
        return ls.layer_norm(x, ns, eps=1e-5)

    for arrs, got in _run(build, {"x": (2, "s", "d")}, DIMS):
        x = torch.tensor(arrs["x"])
        ns = x.shape[-2:] if how == "two_exprs" else x.shape[-1:]
        np.testing.assert_allclose(got, F.layer_norm(x, ns, eps=1e-5).numpy(), rtol=1e-10, atol=1e-10)


def test_layer_norm_int_and_affine_with_expr():
    for arrs, got in _run(lambda t: ls.layer_norm(t["x"], t["x"].shape[-1], t["w"], t["b"]),
                          {"x": ("s", 6), "w": (6,), "b": (6,)}, DIMS):
        x, w, b = (torch.tensor(arrs[k]) for k in "xwb")
        np.testing.assert_allclose(got, F.layer_norm(x, (6,), w, b).numpy(), rtol=1e-10, atol=1e-10)


def test_rms_norm_symbolic_normalized_shape():
    for arrs, got in _run(lambda t: ls.rms_norm(t["x"], t["x"].shape[-1], eps=1e-6), {"x": ("s", "d")}, DIMS):
        x = torch.tensor(arrs["x"])
        np.testing.assert_allclose(got, F.rms_norm(x, x.shape[-1:], eps=1e-6).numpy(), rtol=1e-10, atol=1e-10)


def test_group_norm_num_groups_as_dim():
    # instance norm written with the channel dim object, spatial dim symbolic
    for arrs, got in _run(lambda t: ls.group_norm(t["x"], t["x"].shape[1]), {"x": (2, 4, "s")}, DIMS):
        x = torch.tensor(arrs["x"])
        np.testing.assert_allclose(got, F.group_norm(x, 4).numpy(), rtol=1e-10, atol=1e-10)
