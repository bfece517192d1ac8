"""lightspeed: a deep-learning inference compiler.

A model becomes a lazy graph of 15 primitive ops with symbolic shapes; backends compile and run
it.  Start with :class:`Graph`; see README.md for a tour.
"""

from __future__ import annotations

import sys as _sys

from . import hl
from .dtypes import (
    ALL_DTYPES,
    DType,
    bfloat16,
    bool_,
    float8_e4m3,
    float8_e5m2,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    promote_types,
    result_type,
    uint8,
)
from .errors import DTypeError, InputError, LightspeedError, ShapeError, UnsupportedError
from .graph import Graph, GraphTensor
from .hl import *  # noqa: F403  (the high-level op functions: ls.softmax, ls.concat, ...)
from .program import Program
from .search import SearchOptions
from .symbolic import Expr, const, sym

__version__ = "0.1.0"

__all__ = [
    "Graph", "GraphTensor", "Program", "SearchOptions", "Expr", "sym", "const", "DType", "ALL_DTYPES",
    "float64", "float32", "float16", "bfloat16", "float8_e4m3", "float8_e5m2",
    "int64", "int32", "int16", "int8", "uint8", "bool_", "promote_types", "result_type",
    "LightspeedError", "ShapeError", "DTypeError", "InputError", "UnsupportedError",
] + list(hl.__all__)


def _register_torch_backend() -> None:
    """``torch.compile(backend="lightspeed")``: registered here only when dynamo is already loaded
    (importing torch costs seconds, so ``import lightspeed`` never does); otherwise the
    ``torch_dynamo_backends`` entry point lets dynamo load it on first use."""
    if "torch._dynamo" in _sys.modules:
        from .torch import register

        register()


_register_torch_backend()
