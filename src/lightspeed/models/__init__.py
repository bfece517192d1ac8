"""The model zoo: family name -> model class, and models from HF config dicts.

    model = lightspeed.models.from_hf_config(json.load(open("config.json")))
    model = lightspeed.models.get("llama").from_hf_config(cfg)

The families are declared in the registry (:mod:`lightspeed.models.family`: one module per family
under ``models/families/``), which imports no graph code; the model classes are imported on first
use (PEP 562), so ``lightspeed models``, ``lightspeed fetch`` and the CLI's option checks read the
families without numpy.  :func:`get` and :data:`MODELS` cover the text decoders (``task ==
"generate"``); Whisper is a family too, with its own entry points (``lightspeed.models.whisper``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import UnsupportedError
from . import family as registry

if TYPE_CHECKING:
    from ..dtypes import DType
    from .base import DecoderConfig, DecoderLM
    from .gemma3 import Gemma3
    from .gemma4 import Gemma4
    from .llama import Llama
    from .qwen3 import Qwen3
    from .qwen3_moe import Qwen3Moe

__all__ = ["MODELS", "get", "family_of", "from_hf_config", "text_families", "DecoderLM", "DecoderConfig", "Llama",
           "Qwen3", "Gemma3", "Qwen3Moe", "Gemma4"]

_BASE = {"DecoderLM", "DecoderConfig"}


def __getattr__(name: str) -> Any:
    if name == "MODELS":  # recomputed on each use: a family registered later appears too
        return {f: get(f) for f in text_families()}
    if name in _BASE:
        from . import base

        return getattr(base, name)
    for fam in text_families().values():  # Llama, Qwen3, ...: the classes the registry names
        if fam.model.rpartition(":")[2] == name:
            return fam.model_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def text_families() -> dict[str, registry.Family]:
    """The registered decoder LM families (``task == "generate"``) by name, in registry order."""
    return {n: f for n, f in registry.families().items() if f.task == "generate"}


def get(family: str) -> type[DecoderLM]:
    """The model class of decoder family ``family`` ('llama', 'qwen3', 'gemma3', 'qwen3_moe', 'gemma4_moe')."""
    fam = text_families().get(family)
    if fam is None:
        raise UnsupportedError(f"unknown model family {family!r}; known: {', '.join(sorted(text_families()))}")
    return fam.model_class()


def family_of(config: Mapping[str, Any]) -> str:
    """The decoder family whose class reads this HF config's ``model_type``."""
    mt = config.get("model_type")
    for name, fam in text_families().items():
        if mt in fam.model_types:
            return name
    raise UnsupportedError(f"HF model_type {mt!r} is not supported; families: {', '.join(sorted(text_families()))}")


def from_hf_config(config: Mapping[str, Any], family: str | None = None, dtype: DType | str = "float32"
                   ) -> DecoderLM:
    """A model from an HF ``config.json`` dict; ``family`` defaults to the one its model_type names."""
    return get(family or family_of(config)).from_hf_config(config, dtype)
