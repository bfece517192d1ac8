"""Convolutions on the cpu backend reach BLAS.

hl.conv writes a convolution as one canonical matmul (weight [(G,) Cout/G, Cin/G*K] times the
im2col view [(G,) N*P, Cin/G*K]); the layout rule copies the im2col view once and the BLAS rules
take the product. Before, a rank-5 product ([N, G, Cout, P, Cin*K]) matched no BLAS rule and the
broadcast Mul was materialised: a Whisper-sized conv at 1500 frames needed ~0.5 GB and 2 s.
Results are compared with the reference runtime and with PyTorch in float64.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812

import lightspeed as ls
from tests.backends.test_cpu import saturate_cpu
from tests.hl.cases_conv import CONV1D, CONV2D, CONV3D, LS_C1, LS_C2, LS_C3
from tests.hl.optable import OpCase, build_inputs

BLAS_OPS = ("Matmul", "MatmulAdd")


def _whisper_conv_graph(stride: int, c_in: int):
    g = ls.Graph()
    x = g.input("x", (c_in, "l"))
    w, b = g.input("w", (384, c_in, 3)), g.input("b", (384,))
    g.output("y", ls.conv1d(x, w, b, stride=stride, padding=1))
    return g


@pytest.mark.parametrize("stride, c_in", [(1, 80), (2, 384)], ids=["conv1", "conv2"])
def test_whisper_conv1d_compiles_to_blas(stride, c_in):
    # Whisper's two front-end convs (80 -> 384 and 384 -> 384 stride 2, kernel 3, padding 1)
    g = _whisper_conv_graph(stride, c_in)
    prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=3, seed=0, progress=False, dims={"l": 64}))
    counts = prog.lprog.count()
    assert any(counts.get(op) for op in BLAS_OPS), prog.report()
    assert not counts.get("SumReduce"), prog.report()  # the reduction is inside the BLAS call
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((c_in, 100)).astype(np.float32),
              "w": (rng.standard_normal((384, c_in, 3)) / np.sqrt(3 * c_in)).astype(np.float32),
              "b": rng.standard_normal(384).astype(np.float32)}
    got = prog(inputs)["y"]
    want = g.compile(backend="reference")(inputs)["y"]
    assert got.shape == want.shape == (384, (100 - 1) // stride + 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in inputs.items()}
    exact = F.conv1d(t["x"], t["w"], t["b"], stride=stride, padding=1).numpy()
    np.testing.assert_allclose(got, exact, rtol=1e-4, atol=1e-4)


CONV_CASES = [(name, fn, s) for name, fn, samples in (("conv1d", LS_C1, CONV1D), ("conv2d", LS_C2, CONV2D),
                                                      ("conv3d", LS_C3, CONV3D)) for s in samples]


@pytest.mark.parametrize("name, fn, sample", CONV_CASES, ids=[f"{n}-{s.name}" for n, _, s in CONV_CASES])
@pytest.mark.parametrize("layout", ["contiguous", "permuted", "sliced"])
def test_every_conv_sample_matches_a_blas_rule(name, fn, sample, layout):
    # groups > 1 is a batched product, groups == 1 a plain one; input layouts only add copies
    g = ls.Graph()
    operands, _ = build_inputs(OpCase(name, fn, None, [sample]), sample, ls.float32, layout, g)
    g.output("y", fn(*operands, **sample.kwargs))
    runner, _, _, _ = saturate_cpu(g)
    m = runner.stats.rule_matches
    assert m.get("matmul", 0) + m.get("matmul-commuted", 0) == 1, m


def test_conv_float16_is_not_blas():
    # the BLAS rules' dtype guard still applies: f16 products round per element in the reference
    g = ls.Graph()
    x, w = g.input("x", (1, 4, 9), ls.float16), g.input("w", (6, 4, 3), ls.float16)
    g.output("y", ls.conv1d(x, w, padding=1))
    runner, _, _, _ = saturate_cpu(g)
    assert not runner.stats.rule_matches.get("matmul", 0) and not runner.stats.rule_matches.get("matmul-commuted", 0)
