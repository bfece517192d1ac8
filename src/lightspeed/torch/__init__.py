"""lightspeed as a PyTorch compiler: ``torch.compile(model, backend="lightspeed")`` and
:func:`compile_exported` for ``torch.export`` programs.  See docs/torch.md.

Importing this package imports torch (``import lightspeed`` alone does not) and registers the
dynamo backend; installed packages also find it through the ``torch_dynamo_backends`` entry point.
"""

from __future__ import annotations

from .aten import ATEN_TABLE, decompositions
from .dynamo import lightspeed_backend, register
from .export import compile_exported
from .translate import CompiledGraph, FallbackWarning, Options, compile_fx, reset_stats, stats

__all__ = ["ATEN_TABLE", "CompiledGraph", "FallbackWarning", "Options", "compile_exported", "compile_fx",
           "decompositions", "lightspeed_backend", "register", "reset_stats", "stats"]

register()
