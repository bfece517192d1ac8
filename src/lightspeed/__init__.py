"""lightspeed: a deep-learning inference compiler.

A model becomes a lazy graph of 15 primitive ops with symbolic shapes; backends compile and run
it.  Start with :class:`Graph`; see README.md for a tour.

The public names below are loaded on first use (PEP 562), so that ``import lightspeed.cli``
(``lightspeed --help``, ``models``, ``fetch``) does not pay for numpy, the op library or egglog.
"""

from __future__ import annotations

import importlib as _importlib
import sys as _sys
from typing import Any as _Any

__version__ = "0.1.0"

# public name -> the module it comes from; the high-level op functions (ls.softmax, ...) come from hl
_FROM = {
    **dict.fromkeys(["DType", "ALL_DTYPES", "float64", "float32", "float16", "bfloat16", "float8_e4m3", "float8_e5m2",
                     "int64", "int32", "int16", "int8", "uint8", "bool_", "promote_types", "result_type"], "dtypes"),
    **dict.fromkeys(["LightspeedError", "ShapeError", "DTypeError", "InputError", "UnsupportedError"], "errors"),
    "Graph": "graph", "GraphTensor": "graph", "Program": "program", "SearchOptions": "search",
    "Expr": "symbolic", "sym": "symbolic", "const": "symbolic",
}


def _load() -> None:
    """Import the public API (the op library registers the GraphTensor methods) into this module."""
    if "__all__" in globals():
        return
    hl = _importlib.import_module(".hl", __name__)
    for name, mod in _FROM.items():
        globals()[name] = getattr(_importlib.import_module(f".{mod}", __name__), name)
    globals().update({n: getattr(hl, n) for n in hl.__all__})
    globals()["__all__"] = [*_FROM, *hl.__all__]


def __getattr__(name: str) -> _Any:
    if name.startswith("__") and name != "__all__":
        raise AttributeError(name)
    _load()
    if name in globals():
        return globals()[name]
    try:  # a submodule (lightspeed.search, ...) not imported yet
        return _importlib.import_module(f".{name}", __name__)
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    _load()
    return sorted(globals())


def _register_torch_backend() -> None:
    """``torch.compile(backend="lightspeed")``: registered here only when dynamo is already loaded
    (importing torch costs seconds, so ``import lightspeed`` never does); otherwise the
    ``torch_dynamo_backends`` entry point lets dynamo load it on first use."""
    if "torch._dynamo" in _sys.modules:
        from .torch import register

        register()


_register_torch_backend()
