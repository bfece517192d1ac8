"""Backends by name: the table of built-in backends and the registry of every backend.

A built-in backend is a plain module: :data:`BUILTIN` names its class like an entry point
(``module:Class``), and :func:`get_backend` imports the module and makes the one instance on first
use, so importing lightspeed never pulls in optional dependencies and no backend imports this
module (or the package, which re-exports it) to join.  Other backends call
:func:`register_backend`.  The compile pipeline (:mod:`lightspeed.pipeline`) looks backends up
here and calls them; nothing here, and no backend, imports the pipeline.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ..errors import LightspeedError

if TYPE_CHECKING:
    from .base import Backend

__all__ = ["BUILTIN", "register_backend", "get_backend", "available_backends", "default_backend",
           "registered_backends"]

# name -> "module:Class" (an entry point): imported and made once, on first use
BUILTIN = {"reference": "lightspeed.backends.reference:ReferenceBackend", "cpu": "lightspeed.backends.cpu:CpuBackend",
           "native": "lightspeed.backends.native:NativeBackend", "cuda": "lightspeed.backends.cuda:CudaBackend"}
_REGISTRY: dict[str, Backend] = {}


def register_backend(backend: Backend) -> Backend:
    _REGISTRY[backend.name] = backend
    return backend


def get_backend(name: str) -> Backend:
    if name not in _REGISTRY and name in BUILTIN:
        module, cls = BUILTIN[name].split(":")
        made = getattr(importlib.import_module(module), cls)
        if name not in _REGISTRY:  # (unless the module registered one itself when imported)
            register_backend(made())
    try:
        return _REGISTRY[name]
    except KeyError:
        raise LightspeedError(f"unknown backend {name!r}; available: {available_backends()}") from None


def registered_backends() -> list[Backend]:
    """Every built-in backend (imported) and every registered one: the conformance suite's list."""
    for name in BUILTIN:
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
    return sorted(set(_REGISTRY) | set(BUILTIN))
