"""The model zoo: family name -> model class, and models from HF config dicts.

    model = lightspeed.models.from_hf_config(json.load(open("config.json")))
    model = lightspeed.models.get("llama").from_hf_config(cfg)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import dtypes as dt
from ..dtypes import DType
from ..errors import UnsupportedError
from .base import DecoderConfig, DecoderLM
from .gemma3 import Gemma3
from .gemma4 import Gemma4
from .llama import Llama
from .qwen3 import Qwen3
from .qwen3_moe import Qwen3Moe

__all__ = ["MODELS", "get", "family_of", "from_hf_config", "DecoderLM", "DecoderConfig", "Llama", "Qwen3", "Gemma3",
           "Qwen3Moe", "Gemma4"]

MODELS: dict[str, type[DecoderLM]] = {cls.family: cls for cls in (Llama, Qwen3, Gemma3, Qwen3Moe, Gemma4)}


def get(family: str) -> type[DecoderLM]:
    """The model class of ``family`` ('llama', 'qwen3', 'gemma3', 'qwen3_moe', 'gemma4_moe')."""
    try:
        return MODELS[family]
    except KeyError:
        raise UnsupportedError(f"unknown model family {family!r}; known: {', '.join(sorted(MODELS))}") from None


def family_of(config: Mapping[str, Any]) -> str:
    """The family whose class reads this HF config's ``model_type``."""
    mt = config.get("model_type")
    for name, cls in MODELS.items():
        if mt in cls.model_types:
            return name
    raise UnsupportedError(f"HF model_type {mt!r} is not supported; families: {', '.join(sorted(MODELS))}")


def from_hf_config(config: Mapping[str, Any], family: str | None = None, dtype: DType | str = dt.float32
                   ) -> DecoderLM:
    """A model from an HF ``config.json`` dict; ``family`` defaults to the one its model_type names."""
    return get(family or family_of(config)).from_hf_config(config, dtype)
