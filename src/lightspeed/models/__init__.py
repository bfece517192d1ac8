"""The model zoo: family name -> model class, and models from HF config dicts.

    model = lightspeed.models.from_hf_config(json.load(open("config.json")))
    model = lightspeed.models.get("llama").from_hf_config(cfg)

The model classes are imported on first use (PEP 562): :data:`FAMILIES` names every family and the
HF ``model_type`` values it reads without importing the graph library (``lightspeed models``,
``lightspeed fetch`` and the CLI's option checks use it; a test keeps it equal to the classes).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import UnsupportedError

if TYPE_CHECKING:
    from ..dtypes import DType
    from .base import DecoderConfig, DecoderLM
    from .gemma3 import Gemma3
    from .gemma4 import Gemma4
    from .llama import Llama
    from .qwen3 import Qwen3
    from .qwen3_moe import Qwen3Moe

__all__ = ["MODELS", "FAMILIES", "get", "family_of", "from_hf_config", "DecoderLM", "DecoderConfig", "Llama",
           "Qwen3", "Gemma3", "Qwen3Moe", "Gemma4"]

# family -> (module, class, HF model_type values), in the order `lightspeed models` lists them
FAMILIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "llama": ("llama", "Llama", ("llama",)),
    "qwen3": ("qwen3", "Qwen3", ("qwen3",)),
    "gemma3": ("gemma3", "Gemma3", ("gemma3_text", "gemma3")),
    "qwen3_moe": ("qwen3_moe", "Qwen3Moe", ("qwen3_moe",)),
    "gemma4_moe": ("gemma4", "Gemma4", ("gemma4_text", "gemma4")),
}
_CLASSES = {cls: mod for mod, cls, _ in FAMILIES.values()} | {"DecoderLM": "base", "DecoderConfig": "base"}


def __getattr__(name: str) -> Any:
    if name == "MODELS":
        value: Any = {f: get(f) for f in FAMILIES}
    elif name in _CLASSES:
        value = getattr(importlib.import_module(f".{_CLASSES[name]}", __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def get(family: str) -> type[DecoderLM]:
    """The model class of ``family`` ('llama', 'qwen3', 'gemma3', 'qwen3_moe', 'gemma4_moe')."""
    try:
        mod, cls, _ = FAMILIES[family]
    except KeyError:
        raise UnsupportedError(f"unknown model family {family!r}; known: {', '.join(sorted(FAMILIES))}") from None
    return getattr(importlib.import_module(f".{mod}", __name__), cls)


def family_of(config: Mapping[str, Any]) -> str:
    """The family whose class reads this HF config's ``model_type``."""
    mt = config.get("model_type")
    for name, (_, _, types) in FAMILIES.items():
        if mt in types:
            return name
    raise UnsupportedError(f"HF model_type {mt!r} is not supported; families: {', '.join(sorted(FAMILIES))}")


def from_hf_config(config: Mapping[str, Any], family: str | None = None, dtype: DType | str = "float32"
                   ) -> DecoderLM:
    """A model from an HF ``config.json`` dict; ``family`` defaults to the one its model_type names."""
    return get(family or family_of(config)).from_hf_config(config, dtype)
