"""The training examples reach what issue 27 asks: the digits MLP >= 95% test accuracy."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


def test_the_digits_mlp_reaches_95_percent():
    pytest.importorskip("sklearn")
    from train_digits import train

    assert train(backend="cpu", steps=300, verbose=False) >= 0.95
