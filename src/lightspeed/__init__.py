"""lightspeed: a deep-learning inference compiler.

A model becomes a lazy graph of 15 primitive ops with symbolic shapes; backends compile and run
it.  Start with :class:`Graph`; see README.md for a tour.  Public names load on first use (PEP 562):
``import lightspeed.cli`` (``lightspeed --help``) pays for no numpy, op library or egglog.
"""

from __future__ import annotations

import importlib as _il
import importlib.util
import sys as _sys

__version__ = "0.1.0"
_FROM = {**dict.fromkeys("DType ALL_DTYPES float64 float32 float16 bfloat16 float8_e4m3 float8_e5m2 int64 int32 int16 "
                         "int8 uint8 bool_ promote_types result_type BLOCK_DTYPES q8_0 q4_0 q4_1 q5_0 q4_k q6_k"
                         .split(), "dtypes"),
         **dict.fromkeys("LightspeedError ShapeError DTypeError InputError GraphError OperandError UnsupportedError"
                         .split(), "errors"),
         "Graph": "graph", "GraphTensor": "graph", "Program": "program", "SearchOptions": "search",
         "Expr": "symbolic", "sym": "symbolic", "const": "symbolic",
         "grad": "autograd"}  # the op functions (ls.softmax) come from hl


def __getattr__(name: str) -> object:
    if name.startswith("__") and name != "__all__":
        raise AttributeError(name)
    if "__all__" not in globals() and name not in _FROM and _il.util.find_spec(f"{__name__}.{name}") is not None:
        # a submodule asked for before the public names are loaded (``from . import dtypes`` inside
        # a module the op library imports): loading the op library first would import that
        # module again while it is half initialised
        return _il.import_module(f".{name}", __name__)
    if "__all__" not in globals():  # the first use: the op library registers the GraphTensor methods
        hl = _il.import_module(".hl", __name__)
        globals().update({n: getattr(_il.import_module(f".{m}", __name__), n) for n, m in _FROM.items()},
                         **{n: getattr(hl, n) for n in hl.__all__}, __all__=[*_FROM, *hl.__all__])
    if name in globals():
        return globals()[name]
    try:  # a submodule (lightspeed.search, ...) not imported yet
        return _il.import_module(f".{name}", __name__)
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{name}":
            raise
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    __getattr__("__all__")
    return sorted(globals())


def _register_torch_backend() -> None:
    """``torch.compile(backend="lightspeed")``: registered here only when dynamo is already loaded
    (importing torch costs seconds, so ``import lightspeed`` never does); otherwise the
    ``torch_dynamo_backends`` entry point lets dynamo load it on first use."""
    if "torch._dynamo" in _sys.modules:
        from .torch import register

        register()


_register_torch_backend()
