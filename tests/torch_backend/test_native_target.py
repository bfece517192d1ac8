"""``torch.compile(..., backend="lightspeed", options={"target": "native"})``: the generated C
kernels reached from PyTorch on a CPU, matching eager PyTorch (static and dynamic shapes)."""

from __future__ import annotations

import pytest
import torch

from lightspeed.backends import get_backend
from lightspeed.torch.translate import stats

pytestmark = pytest.mark.skipif(not get_backend("native").available(), reason="no C compiler")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)
        self.norm = torch.nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(x + self.down(torch.nn.functional.silu(self.up(x))))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_native_target_matches_eager(dynamic):
    torch.manual_seed(0)
    model = Block().eval()
    compiled = torch.compile(model, backend="lightspeed", options={"target": "native", "budget": 2},
                             dynamic=dynamic)
    with torch.no_grad():
        for rows in (3, 5):
            x = torch.randn(rows, 16)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
    assert stats()["graphs"][-1]["target"] == "native"
