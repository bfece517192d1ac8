"""A kernel module's text: the dialect's prelude, the prelude parts its kernels name, the kernels.

The preludes are C files beside this module (``prelude/``): ``common.h`` (both dialects: float8
and 16-bit float conversions, Python's floor division, NaN-propagating max), ``cuda.cuh`` (the
cuda dialect's intrinsics and 16-byte dot products), ``c.h`` (the c dialect's headers, vector
types, a vectorisable exp2) and ``ggml_blocks.h`` (GGML block decoders and integer dots, AVX2
where the compiler targets it; a kernel names it in ``KernelSpec.preludes``, since
``<immintrin.h>`` alone costs ~0.6 s per compile).
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from .spec import KernelSpec

__all__ = ["DIALECTS", "prelude", "prelude_part", "prelude_digest", "module_source"]

DIALECTS = ("cuda", "c")
_FOLDER = Path(__file__).parent / "prelude"
_DIALECT_FILE = {"cuda": "cuda.cuh", "c": "c.h"}
_PARTS = {"ggml_blocks": "ggml_blocks.h", "mma": "mma.cuh"}


@cache
def _read(name: str) -> str:
    return (_FOLDER / name).read_text()


def prelude(dialect: str) -> str:
    """What every kernel of ``dialect`` may call: the dialect's file, then the common one."""
    if dialect not in _DIALECT_FILE:
        raise ValueError(f"unknown dialect {dialect!r}")
    return _read(_DIALECT_FILE[dialect]) + _read("common.h")


def prelude_part(name: str) -> str:
    """A prelude part a kernel asks for by name (``KernelSpec.preludes``)."""
    if name not in _PARTS:
        raise ValueError(f"unknown prelude part {name!r} (known: {', '.join(_PARTS)})")
    return _read(_PARTS[name])


def prelude_digest(dialect: str) -> str:
    """A hash of everything a kernel of ``dialect`` may include (its prelude and every part): a
    kernel's name hashes only its own text, so a cache that finds compiled kernels by name must key
    on this too, or a changed prelude function would go on running its old code."""
    text = prelude(dialect) + "".join(prelude_part(p) for p in sorted(_PARTS))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def module_source(specs: list[KernelSpec], dialect: str) -> str:
    """One translation unit holding the prelude, the parts the kernels need and every distinct
    kernel of ``specs`` (sorted by name: the same set gives the same text)."""
    seen: dict[str, KernelSpec] = {}
    for s in specs:
        seen.setdefault(s.name, s)
    parts = sorted({p for s in seen.values() for p in s.preludes})
    return (prelude(dialect) + "".join(prelude_part(p) for p in parts) + "\n"
            + "\n".join(seen[k].source for k in sorted(seen)))
