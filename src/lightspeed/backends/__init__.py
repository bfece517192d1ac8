"""Backends, found by name.

A backend is a :class:`lightspeed.backends.base.Backend` (the interface: its ops, rules,
lowering, timing and compile).  Backends register themselves here; ``get_backend`` imports the
built-in ones lazily so that importing lightspeed never pulls in optional dependencies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import LightspeedError

if TYPE_CHECKING:
    from .base import Backend

__all__ = ["register_backend", "get_backend", "available_backends", "default_backend", "registered_backends"]

_REGISTRY: dict[str, Backend] = {}
_BUILTIN = {"reference": "lightspeed.backends.reference", "cpu": "lightspeed.backends.cpu",
            "native": "lightspeed.backends.native", "cuda": "lightspeed.backends.cuda"}


def register_backend(backend: Backend) -> Backend:
    _REGISTRY[backend.name] = backend
    return backend


def get_backend(name: str) -> Backend:
    if name not in _REGISTRY and name in _BUILTIN:
        importlib.import_module(_BUILTIN[name])
    try:
        return _REGISTRY[name]
    except KeyError:
        raise LightspeedError(f"unknown backend {name!r}; available: {available_backends()}") from None


def registered_backends() -> list[Backend]:
    """Every built-in backend (imported) and every registered one: the conformance suite's list."""
    for name in _BUILTIN:
        get_backend(name)
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]


def default_backend() -> str:
    """The backend ``Graph.compile`` uses when none is named: ``cuda`` when a GPU and its driver
    are usable here, else ``cpu``."""
    try:
        if get_backend("cuda").available():
            return "cuda"
    except Exception:  # noqa: BLE001 - a broken cuda install must not stop cpu compiles
        pass
    return "cpu"


def available_backends() -> list[str]:
    return sorted(set(_REGISTRY) | set(_BUILTIN))
