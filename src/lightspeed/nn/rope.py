"""Rotary position embeddings (the "rotate half" convention of Llama, Qwen and Gemma).

Frequencies are computed in numpy float32 the way Hugging Face computes them (default, linear and
llama3 scaling); cos/sin tables are built in the graph from integer positions, once per graph and
scale (:meth:`Builder.shared`), and shared by every layer.

The rotation ``x * cos + rotate_half(x) * sin`` is written without a concat: ``x`` is viewed as
``[..., 2, d/2]`` and ``rotate_half`` becomes a *flip* of the size-2 axis (a free view) times a
sign-carrying sin table ``[-sin, sin]``.  Three element-wise ops, no copies.  A constant factor
(the attention scale) can be folded into the tables so queries need no separate scaling op.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes as dt
from .. import hl
from ..errors import ShapeError, UnsupportedError
from ..graph import GraphTensor
from .module import Builder

__all__ = ["RotaryEmbedding", "rope_from_hf"]


@dataclass(frozen=True)
class RotaryEmbedding:
    """RoPE over ``head_dim`` with base ``theta``; ``rope_type`` 'default', 'linear' or 'llama3'."""

    head_dim: int
    theta: float = 10000.0
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int | None = None
    attention_scaling: float = 1.0

    def __post_init__(self) -> None:
        if self.head_dim % 2:
            raise ShapeError(f"rotary embedding: head_dim must be even, got {self.head_dim}")
        if self.rope_type not in ("default", "linear", "llama3"):
            raise UnsupportedError(f"rotary embedding: rope_type {self.rope_type!r} is not supported "
                                   "(default, linear, llama3 are)")

    def inv_freq(self) -> np.ndarray:
        """float32 [head_dim / 2], computed with Hugging Face's float32 operations."""
        f32 = np.float32
        d = self.head_dim
        inv = f32(1.0) / (f32(self.theta) ** (np.arange(0, d, 2, dtype=np.int64).astype(f32) / f32(d)))
        if self.rope_type == "linear":
            inv = inv / f32(self.factor)
        elif self.rope_type == "llama3":
            old = self.original_max_position_embeddings
            if old is None:
                raise UnsupportedError("llama3 rope scaling needs original_max_position_embeddings")
            low_wl, high_wl = old / self.low_freq_factor, old / self.high_freq_factor
            wavelen = f32(2 * math.pi) / inv
            scaled = np.where(wavelen > low_wl, inv / f32(self.factor), inv).astype(f32)
            smooth = ((f32(old) / wavelen - f32(self.low_freq_factor))
                      / f32(self.high_freq_factor - self.low_freq_factor)).astype(f32)
            smoothed = ((f32(1) - smooth) * scaled / f32(self.factor) + smooth * scaled).astype(f32)
            medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
            inv = np.where(medium, smoothed, scaled)
        return np.ascontiguousarray(inv, dtype=f32)

    def tables(self, b: Builder, positions: GraphTensor, scale: float = 1.0) -> tuple[GraphTensor, GraphTensor]:
        """(cos [s, d/2], signed sin [s, 2, d/2]) for integer ``positions`` [s], both times ``scale``
        (and the rope type's attention scaling)."""
        inv = self.inv_freq()
        key = ("rope", inv.tobytes(), float(scale) * self.attention_scaling, positions.node, positions.st, b.dtype)

        def make() -> tuple[GraphTensor, GraphTensor]:
            g = b.graph
            half = self.head_dim // 2
            s = positions.shape[0]
            k = float(scale) * self.attention_scaling

            def angles(shape: tuple) -> GraphTensor:
                # position * inv_freq in float32, exactly Hugging Face's product, formed at the
                # table's own shape from the positions read by broadcast: each table is then one
                # element-wise chain from graph inputs, one kernel (a region read by broadcast is
                # never inlined: formed once at [s] and broadcast, the tables were five kernels)
                pos = positions.reshape(s, *([1] * (len(shape) - 1))).expand(*shape)
                return hl.to(pos, dt.float32) * g.constant(inv.reshape(*([1] * (len(shape) - 1)), half))

            # cos(f) = 1 - 2 sin(f/2)^2: f/2 is exact, while sin(f + pi/2) would round the angle
            # (an absolute error of ~ulp(f), 5e-4 at position 8192)
            h = hl.sin(angles((s, half)) * 0.5)
            cos = h * h * -2.0 + 1.0
            sin = hl.sin(angles((s, 2, half)))  # [s, 2, half]: the sign axis too
            if b.dtype != dt.float32:
                cos, sin = hl.to(cos, b.dtype), hl.to(sin, b.dtype)
            if k != 1.0:
                cos = cos * k
            sign = g.constant(np.array([[-k], [k]], dtype=b.dtype.np))  # [2, 1]: rotate_half's signs
            return cos, sin * sign  # [s, half], [s, 2, half]

        return b.shared(key, make)

    def apply(self, x: GraphTensor, tables: tuple[GraphTensor, GraphTensor], seq_axis: int) -> GraphTensor:
        """Rotate ``x`` [..., head_dim] whose axis ``seq_axis`` runs over the positions of the
        tables.  The result is row-major in x's (view) shape."""
        cos, sin2 = tables
        d, half = self.head_dim, self.head_dim // 2
        if x.shape[-1] != d:
            raise ShapeError(f"rotary embedding: expected last dim {d}, got shape ({', '.join(map(str, x.shape))})")
        a = seq_axis % x.ndim
        if a == x.ndim - 1:
            raise ShapeError("rotary embedding: the sequence axis cannot be the head_dim axis")
        x5 = x.reshape(*x.shape[:-1], 2, half)
        cshape = [1] * (x.ndim + 1)
        cshape[a], cshape[-1] = x.shape[a], half
        sshape = list(cshape)
        sshape[-2] = 2
        out = x5 * cos.reshape(*cshape) + x5.flip(-2) * sin2.reshape(*sshape)
        return out.reshape(*x.shape)


def _rope_params(cfg: Mapping[str, Any], layer_type: str | None) -> dict[str, Any]:
    """The RoPE parameter dict of an HF config in either convention: transformers 5's
    ``rope_parameters`` (per layer type for Gemma 3) or the older ``rope_theta`` + ``rope_scaling``."""
    rp = cfg.get("rope_parameters")
    if isinstance(rp, Mapping) and layer_type is not None and isinstance(rp.get(layer_type), Mapping):
        return dict(rp[layer_type])
    if isinstance(rp, Mapping) and ("rope_theta" in rp or "rope_type" in rp):
        return dict(rp)
    out: dict[str, Any] = {}
    if cfg.get("rope_theta") is not None:
        out["rope_theta"] = cfg["rope_theta"]
    if isinstance(cfg.get("rope_scaling"), Mapping):
        out.update(cfg["rope_scaling"])
    return out


def rope_from_hf(cfg: Mapping[str, Any], head_dim: int, layer_type: str | None = None,
                 default_theta: float = 10000.0) -> RotaryEmbedding:
    """A :class:`RotaryEmbedding` from an HF config dict (``layer_type`` picks Gemma 3's
    per-layer-type parameters)."""
    p = _rope_params(cfg, layer_type)
    kind = p.get("rope_type", p.get("type", "default")) or "default"
    if p.get("partial_rotary_factor", 1.0) != 1.0:
        raise UnsupportedError("rotary embedding: partial_rotary_factor != 1 is not supported")
    return RotaryEmbedding(
        head_dim=head_dim,
        theta=float(p.get("rope_theta", default_theta)),
        rope_type=kind,
        factor=float(p.get("factor", 1.0)),
        low_freq_factor=float(p.get("low_freq_factor", 1.0)),
        high_freq_factor=float(p.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=p.get("original_max_position_embeddings",
                                               cfg.get("max_position_embeddings")),
    )
