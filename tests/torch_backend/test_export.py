"""Ahead of time: ``lightspeed.torch.compile_exported(torch.export.export(...))``."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import lightspeed.torch as lst

REF = {"target": "reference"}
# torch.export's own pytree code warns about LeafSpec (a PyTorch deprecation, not ours)
pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec.*:FutureWarning")


class Counter(nn.Module):
    """A linear layer with a buffer and an input updated in place."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 3)
        self.register_buffer("calls", torch.zeros(3))

    def forward(self, x: torch.Tensor, acc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls.add_(1)
        y = torch.relu(self.lin(x)) + self.calls
        acc.add_(y.sum(0))
        return y, y.mean()


def test_exported_program_matches_eager_and_writes_back_mutations():
    torch.manual_seed(0)
    eager, model = Counter().eval(), Counter().eval()
    model.load_state_dict(eager.state_dict())
    x = torch.randn(2, 4)
    ep = torch.export.export(model, (x, torch.zeros(3)))
    run = lst.compile_exported(ep, **REF)
    acc, ref_acc = torch.zeros(3), torch.zeros(3)
    with torch.no_grad():
        for _ in range(2):
            got = run(x, acc)
            ref = eager(x, ref_acc)
            for g, r in zip(got, ref):
                torch.testing.assert_close(g, r)
    torch.testing.assert_close(acc, ref_acc)  # user input mutation
    torch.testing.assert_close(model.calls, eager.calls)  # buffer mutation reaches the module's buffer
    assert lst.stats()["compilations"] == 1


def test_parameters_are_read_not_copied():
    """Parameters are bound by reference: changing the module's weight changes the result."""
    torch.manual_seed(0)
    lin = nn.Linear(3, 2).eval()
    x = torch.randn(1, 3)
    run = lst.compile_exported(torch.export.export(lin, (x,)), **REF)
    with torch.no_grad():
        lin.weight.mul_(2)
        torch.testing.assert_close(run(x), lin(x))


def test_exported_dynamic_batch():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(4, 2)).eval()
    batch = torch.export.Dim("batch", min=1, max=16)
    ep = torch.export.export(net, (torch.randn(2, 3, 8, 8),), dynamic_shapes=({0: batch},))
    run = lst.compile_exported(ep, **REF)
    with torch.no_grad():
        for n in (1, 3, 5):
            x = torch.randn(n, 3, 8, 8, generator=torch.Generator().manual_seed(n))
            torch.testing.assert_close(run(x), net(x), rtol=1e-5, atol=1e-5)
    assert lst.stats()["compilations"] == 1
    assert lst.stats()["graphs"][0]["symbols"]
