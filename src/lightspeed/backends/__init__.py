"""Backends, found by name.

A backend is a :class:`lightspeed.backends.base.Backend` (the interface: its ops, rules, lowering
and timing).  The registry (:mod:`.registry`, re-exported here) imports the built-in ones by name
on first use, so that importing lightspeed never pulls in optional dependencies; a backend module
imports neither the registry nor this package.  Backends are called by the compile pipeline
(:mod:`lightspeed.pipeline`) and never import it.
"""

from __future__ import annotations

from .registry import BUILTIN, available_backends, default_backend, get_backend, register_backend, registered_backends

__all__ = ["register_backend", "get_backend", "available_backends", "default_backend", "registered_backends",
           "BUILTIN"]
