"""The high-level op registry.

Every high-level op is a plain function over :class:`GraphTensor` built only from primitives (via
``Graph.add_node``) and other high-level ops.  ``@hl_op`` records it once, with its PyTorch
counterpart, and attaches it as a ``GraphTensor`` method and/or a ``lightspeed.<name>`` function.
``docs/ops.md`` and the op-table tests read this registry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..graph import GraphTensor

__all__ = ["HLOp", "HL_OPS", "hl_op"]


@dataclass
class HLOp:
    name: str
    fn: Callable
    torch: str | None
    category: str
    method: bool
    function: bool
    aliases: tuple[str, ...] = field(default_factory=tuple)


HL_OPS: dict[str, HLOp] = {}


def hl_op(name: str | None = None, *, torch: str | None = None, category: str = "misc",
          method: bool = True, function: bool = True, aliases: tuple[str, ...] = ()) -> Callable:
    """Register a high-level op. ``torch`` names the PyTorch counterpart (for docs and tests)."""

    def deco(fn: Callable) -> Callable:
        n = name or fn.__name__.rstrip("_")
        if n in HL_OPS:
            raise ValueError(f"high-level op {n!r} registered twice")
        HL_OPS[n] = HLOp(n, fn, torch, category, method, function, tuple(aliases))
        if method:
            for a in (n, *aliases):
                setattr(GraphTensor, a, fn)
        return fn

    return deco
