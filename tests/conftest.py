"""Test-wide settings: compile caches go to a per-session temporary directory; search decisions
are cached whatever else runs on the machine (``LIGHTSPEED_SEARCH_CONTENDED=1``: tests that check
caching must not depend on the machine's load; tests/test_search.py checks the limit itself)."""

from __future__ import annotations

import os
import tempfile

import pytest


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache():
    with tempfile.TemporaryDirectory(prefix="lightspeed-test-cache-") as d:
        old = os.environ.get("LIGHTSPEED_CACHE_DIR")
        os.environ["LIGHTSPEED_CACHE_DIR"] = d
        os.environ.setdefault("LIGHTSPEED_SEARCH_CONTENDED", "1")
        yield d
        if old is None:
            os.environ.pop("LIGHTSPEED_CACHE_DIR", None)
        else:
            os.environ["LIGHTSPEED_CACHE_DIR"] = old
