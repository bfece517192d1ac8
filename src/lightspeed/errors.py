"""Exception types.  Every error names what was wrong: the op, the operands' shapes and dtypes,
or the program input."""

from __future__ import annotations

__all__ = ["LightspeedError", "ShapeError", "DTypeError", "InputError", "GraphError", "OperandError",
           "UnsupportedError", "IndexOutOfRange"]


class LightspeedError(Exception):
    """Base class of lightspeed's errors."""


class ShapeError(LightspeedError, ValueError):
    """Operands whose shapes do not fit the op (raised while the graph is built)."""


class DTypeError(LightspeedError, TypeError):
    """Operands whose dtypes do not fit the op (raised while the graph is built)."""


class InputError(LightspeedError, ValueError):
    """A program was called with a missing, extra, mis-shaped or mis-typed input, or unbound dims."""


class IndexOutOfRange(LightspeedError, IndexError):
    """A program's gather met an index outside its data (an embedding id past the vocabulary, an
    index_select past the rows): raised by every host backend, after the call on ``native``."""


class GraphError(LightspeedError, ValueError):
    """A graph built wrongly: a duplicate or empty input/output name, a bad alias, a dim that is
    neither an int nor a valid dim name (raised while the graph is built)."""


class OperandError(LightspeedError, TypeError):
    """A value of the wrong kind where a tensor, an axis or a dim was expected (a Python object
    as an op's operand, a float dim, the truth value of a lazy tensor)."""


class UnsupportedError(LightspeedError, NotImplementedError):
    """A feature that lightspeed does not (yet) provide."""


def describe_operands(tensors) -> str:
    """'float32[s, 16], int32[4]' for error messages."""
    parts = []
    for t in tensors:
        shape = getattr(t, "shape", None)
        dtype = getattr(t, "dtype", None)
        if shape is None:
            parts.append(repr(t))
        else:
            parts.append(f"{getattr(dtype, 'name', dtype)}[{', '.join(str(d) for d in shape)}]")
    return ", ".join(parts)
