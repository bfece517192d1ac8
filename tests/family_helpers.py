"""Registering a model family from a test, as a family outside lightspeed would: a module whose
``FAMILY`` is the declaration, named in the registry (``lightspeed.models.family.FAMILY_MODULES``)."""

from __future__ import annotations

import sys
import types

from lightspeed.models import family as registry


def register(monkeypatch, fam: registry.Family) -> None:
    """Make ``fam`` a registered family until the test ends (replacing one of the same name)."""
    module = types.ModuleType(f"test_family_{fam.name}_{id(fam)}")
    module.FAMILY = fam
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(registry, "FAMILY_MODULES", (*registry.FAMILY_MODULES, module.__name__))
