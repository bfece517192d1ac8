"""Every row of the ATen translation table, compiled through the backend and compared with eager
PyTorch (float64 references where the op allows), contiguous and non-contiguous inputs."""

from __future__ import annotations

import pytest

from lightspeed.torch import ATEN_TABLE
from lightspeed.torch.aten import check_table
from tests.torch_backend.cases_aten import GPU_ONLY, SAMPLES
from tests.torch_backend.optable import run_sample

ROWS = [(name, s) for name in sorted(ATEN_TABLE) for s in SAMPLES.get(name, [])]


@pytest.mark.parametrize("name,sample", ROWS, ids=[f"{n}-{s.name or i}" for i, (n, s) in enumerate(ROWS)])
def test_aten_op_matches_eager(name, sample):
    run_sample(name, sample)


def test_every_row_has_samples():
    missing = sorted(set(ATEN_TABLE) - {n for n, s in SAMPLES.items() if s} - GPU_ONLY)
    assert not missing, f"ATEN_TABLE rows without test samples: {missing}"
    unknown = sorted(set(SAMPLES) - set(ATEN_TABLE))
    assert not unknown, f"samples for ops that are not in ATEN_TABLE: {unknown}"


def test_rows_name_real_overloads():
    assert check_table() == []


# the same samples on the cpu backend (e-graph search, budget 2): a few rows here, all of them in the
# slow run
CPU_ROWS = ["aten.mm.default", "aten.convolution.default", "aten.scaled_dot_product_attention.default",
            "aten.native_layer_norm.default", "aten.index_put.default", "aten.elu.default", "aten.mul.Tensor"]


@pytest.mark.parametrize("name", CPU_ROWS)
def test_aten_op_on_cpu_backend(name):
    run_sample(name, SAMPLES[name][0], target="cpu")


@pytest.mark.slow
@pytest.mark.parametrize("name,sample", ROWS, ids=[f"{n}-{s.name or i}" for i, (n, s) in enumerate(ROWS)])
def test_aten_op_on_cpu_backend_all(name, sample):
    run_sample(name, sample, target="cpu")
