"""How a kernel backend runs each LLIR op: one table from op name to a lowering, which returns the
op's launches (generated kernels of a family, or library calls) and which form of an input each
operand reads.

The default table (``OpTable()``) maps every op a kernel family renders
(:data:`.kernels.KERNELS`) to its generated kernels.  A backend adds entries: the cuda backend
its cuBLASLt ops (a library launch, or the generated matmul where no plan exists), the native
backend the block ops, whose operand reads an input's packed blocks (:mod:`.blocks`).  The kernel
runtime (:mod:`.program`) asks the table and knows no op, library or weight format by name.

*Input forms.*  An input value may exist in several forms on the device (a GGUF weight: its
packed blocks, and its float32 values made only if a launch reads them): such a value is a
:class:`FormedValue`, placed by one of the table's ``placers``; a lowering names the form an
operand reads in :attr:`Lowered.forms` (the default form, :data:`VALUES`, is the array itself).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...dtypes import DType
from ...egraph.llir import LOp
from ...errors import LightspeedError
from .kernels import KERNELS, KernelSpec, render

__all__ = ["Lowered", "Lowering", "OpTable", "FormedValue", "VALUES", "generated"]

VALUES = "values"  # an input's plain form: its array


@dataclass(frozen=True)
class Lowered:
    """An op's launches, run in order, each writing the op's value; ``forms``: operand position
    -> the form of that (input) operand the launches read instead of its values."""

    specs: list[KernelSpec]
    forms: Mapping[int, str] = field(default_factory=dict)


# (op, its operands' dtypes, the executor's dialect) -> its launches
Lowering = Callable[[LOp, list[DType], str], Lowered]


def generated(op: LOp, in_dtypes: list[DType], dialect: str) -> Lowered:
    """``op`` as the generated kernels of its family."""
    return Lowered(render(op, in_dtypes, dialect))


class FormedValue:
    """An input value held in several device forms; :meth:`form` gives one by name."""

    def form(self, name: str) -> Any:
        raise NotImplementedError


# (a host value, the executor) -> its FormedValue on that executor, or None (an ordinary array)
Placer = Callable[[Any, Any], "FormedValue | None"]


class OpTable:
    """A backend's lowering of each LLIR op (see the module docstring).  ``entries`` override or
    extend the generated kernels; ``placers`` turn special host values into formed ones."""

    def __init__(self, entries: Mapping[str, Lowering] | None = None, placers: tuple[Placer, ...] = ()):
        self.entries: dict[str, Lowering] = {name: generated for name in KERNELS}
        self.entries.update(entries or {})
        self.placers = placers

    def lower(self, op: LOp, in_dtypes: list[DType], dialect: str) -> Lowered:
        lowering = self.entries.get(op.op)
        if lowering is None:
            raise LightspeedError(f"no lowering for {op.op} (known: {', '.join(sorted(self.entries))})")
        return lowering(op, in_dtypes, dialect)

    def place(self, value: Any, executor: Any) -> FormedValue | None:
        for placer in self.placers:
            placed = placer(value, executor)
            if placed is not None:
                return placed
        return None

    def extended(self, entries: Mapping[str, Lowering] = (), placers: tuple[Placer, ...] = ()) -> OpTable:
        """This table with more entries (later ones win) and placers."""
        table = OpTable(placers=(*self.placers, *placers))
        table.entries = {**self.entries, **dict(entries)}
        return table

