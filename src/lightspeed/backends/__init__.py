"""Backends, found by name.

A backend is an object with ``name`` and ``compile(graph, **options) -> Program``.  Backends
register themselves here; ``get_backend`` imports the built-in ones lazily so that importing
lightspeed never pulls in optional dependencies.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from ..errors import LightspeedError

__all__ = ["Backend", "register_backend", "get_backend", "available_backends", "default_backend"]


class Backend(Protocol):
    name: str

    def compile(self, graph: Any, **options: Any) -> Any: ...


_REGISTRY: dict[str, Backend] = {}
_BUILTIN = {"reference": "lightspeed.backends.reference", "cpu": "lightspeed.backends.cpu"}


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


def default_backend() -> str:
    """The backend ``Graph.compile`` uses when none is named: ``cpu`` until a GPU backend exists
    (the cuda backend will take over when a GPU is present)."""
    return "cpu"


def available_backends() -> list[str]:
    return sorted(set(_REGISTRY) | set(_BUILTIN))
