"""Each test starts with dynamo's caches and lightspeed's compile counters empty (a test that reused
another's compiled code, or hit dynamo's recompile limit and silently ran eagerly, would prove
nothing)."""

from __future__ import annotations

import pytest
import torch

import lightspeed.torch as lst


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    lst.reset_stats()
    yield
    torch._dynamo.reset()
