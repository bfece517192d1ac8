"""How the backend is found: ``import lightspeed`` stays free of torch, the ``torch_dynamo_backends``
entry point makes ``backend="lightspeed"`` work without importing lightspeed, and the compile
counter counts compilations, not calls."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

import pytest
import torch

import lightspeed.torch as lst


def test_registered_with_dynamo():
    from torch._dynamo.backends.registry import list_backends, lookup_backend

    assert "lightspeed" in list_backends()
    assert lookup_backend("lightspeed") is lst.lightspeed_backend


def test_stats_count_compilations_not_calls():
    f = torch.compile(lambda x: x * 2 + 1, backend="lightspeed", options={"target": "reference"})
    for _ in range(3):
        f(torch.ones(4))
    assert lst.stats()["compilations"] == 1
    lst.reset_stats()
    assert lst.stats() == {"compilations": 0, "graphs": []}


def test_import_lightspeed_does_not_import_torch():
    code = "import sys, lightspeed; print('torch' in sys.modules, 'lightspeed.torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "False"]


_SCRIPT = """
import sys
import torch
assert "lightspeed" not in sys.modules
f = torch.compile(lambda x: torch.sin(x) * 2, backend="lightspeed", options={"target": "reference"})
x = torch.linspace(0, 1, 5)
assert torch.allclose(f(x), torch.sin(x) * 2)
assert "lightspeed.torch" in sys.modules  # loaded by dynamo through the entry point
print("ok")
"""


@pytest.mark.slow  # a fresh process importing torch and dynamo: ~20 s on 2 busy cores
@pytest.mark.skipif(not any(ep.name == "lightspeed" for ep in entry_points(group="torch_dynamo_backends")),
                    reason="package not installed with its entry points (pip install -e .)")
def test_entry_point_without_importing_lightspeed():
    r = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
