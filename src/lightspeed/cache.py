"""On-disk cache of compilation results (saturated e-graphs, search decisions).

Entries are JSON files under `cache_dir()`. A missing or unreadable entry is never an error: the caller
recomputes it."""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["cache_dir", "load", "store", "digest"]


def cache_dir() -> Path | None:
    """Where saturated e-graphs and search decisions are kept: ``$LIGHTSPEED_CACHE_DIR`` or
    ``~/.cache/lightspeed``; ``LIGHTSPEED_CACHE=0`` turns the cache off."""
    if os.environ.get("LIGHTSPEED_CACHE", "1") == "0":
        return None
    d = os.environ.get("LIGHTSPEED_CACHE_DIR")
    return Path(d) if d else Path.home() / ".cache" / "lightspeed"


def digest(*parts: object) -> str:
    """A stable key for `parts` (their `str`s, separated so that ("ab", "c") and ("a", "bc") differ)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def load(name: str, validate: Callable[[Any], None] | None = None) -> dict | None:
    """The entry `name`, or None when it is missing, unreadable or rejected by `validate` (which raises)."""
    d = cache_dir()
    if d is None:
        return None
    path = d / f"{name}.json"
    try:
        data = json.loads(path.read_text())
        if validate is not None:
            validate(data)
        return data
    except Exception:
        return None  # missing or corrupt entries are recomputed


def store(name: str, data: dict) -> None:
    """Write the entry `name`; failures are ignored (a read-only home must not stop compilation)."""
    d = cache_dir()
    if d is None:
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(data))
        tmp.replace(d / f"{name}.json")  # atomic: concurrent compiles never read half a file
    except OSError:
        pass
