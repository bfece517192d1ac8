"""Test-wide settings: compile caches go to a per-session temporary directory."""

from __future__ import annotations

import os
import tempfile

import pytest


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache():
    with tempfile.TemporaryDirectory(prefix="lightspeed-test-cache-") as d:
        old = os.environ.get("LIGHTSPEED_CACHE_DIR")
        os.environ["LIGHTSPEED_CACHE_DIR"] = d
        yield d
        if old is None:
            os.environ.pop("LIGHTSPEED_CACHE_DIR", None)
        else:
            os.environ["LIGHTSPEED_CACHE_DIR"] = old
