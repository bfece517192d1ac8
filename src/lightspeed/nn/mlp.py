"""Feed-forward blocks: gated (SwiGLU, GeGLU with tanh-GELU) and plain two-layer MLPs.

The gated activations are written as ``gate * up * 1 / (1 + 2^(t))`` -- one Exp2, one Recip and a
few multiplies -- rather than through ``silu``/``gelu`` + a separate product, because every
primitive is a pass over the ``[s, intermediate]`` tensor (and, on the cpu backend today, a
dispatch): SwiGLU is 6 ops, tanh-GeGLU 9.
"""

from __future__ import annotations

import math

from .. import hl
from ..errors import UnsupportedError
from ..graph import GraphTensor
from .layers import Linear
from .module import Builder, Module

__all__ = ["GatedMLP", "MLP", "silu_mul", "gelu_tanh_mul", "activation"]

LOG2E = 1.4426950408889634


def silu_mul(a: GraphTensor, u: GraphTensor) -> GraphTensor:
    """``silu(a) * u`` = ``a * u / (1 + exp(-a))``."""
    return a * u * hl.reciprocal(hl.exp2(a * -LOG2E) + 1.0)


def gelu_tanh_mul(a: GraphTensor, u: GraphTensor) -> GraphTensor:
    """``gelu(a, approximate='tanh') * u``.  Uses ``0.5 * (1 + tanh(y)) = sigmoid(2y)`` with
    ``y = sqrt(2/pi) * (a + 0.044715 a^3)``, so ``gelu = a / (1 + exp(-2y))``; the exponent is
    ``a * (c1 * a^2 + c0)`` in base 2."""
    k = -2.0 * math.sqrt(2.0 / math.pi) * LOG2E
    t = (a * a * (k * 0.044715) + k) * a
    return a * u * hl.reciprocal(hl.exp2(t) + 1.0)


def activation(name: str, x: GraphTensor) -> GraphTensor:
    """An activation by its HF config name (``hidden_act`` / ``hidden_activation``)."""
    if name in ("silu", "swish"):
        return hl.silu(x)
    if name in ("gelu_pytorch_tanh", "gelu_tanh", "gelu_new", "gelu_fast"):
        return hl.gelu(x, approximate="tanh")
    if name == "gelu":
        return hl.gelu(x)
    if name == "relu":
        return hl.relu(x)
    raise UnsupportedError(f"activation {name!r} is not supported")


_GATED = {"silu": silu_mul, "swish": silu_mul, "gelu_pytorch_tanh": gelu_tanh_mul, "gelu_tanh": gelu_tanh_mul,
          "gelu_new": gelu_tanh_mul, "gelu_fast": gelu_tanh_mul}


class GatedMLP(Module):
    """``down(act(gate(x)) * up(x))``: SwiGLU (``activation='silu'``) or GeGLU (``'gelu_pytorch_tanh'``).
    ``names`` are the three projections' names under ``prefix`` (HF: gate_proj, up_proj, down_proj)."""

    def __init__(self, prefix: str, hidden: int, intermediate: int, activation: str = "silu", bias: bool = False,
                 names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")) -> None:
        super().__init__(prefix)
        if activation not in _GATED:
            raise UnsupportedError(f"gated MLP: activation {activation!r} is not supported "
                                   f"({', '.join(sorted(_GATED))} are)")
        self.activation = activation
        self.gate_proj = Linear(self.pname(names[0]), hidden, intermediate, bias)
        self.up_proj = Linear(self.pname(names[1]), hidden, intermediate, bias)
        self.down_proj = Linear(self.pname(names[2]), intermediate, hidden, bias)

    def forward(self, b: Builder, x: GraphTensor) -> GraphTensor:
        h = _GATED[self.activation](self.gate_proj.forward(b, x), self.up_proj.forward(b, x))
        return self.down_proj.forward(b, h)


class MLP(Module):
    """``fc2(act(fc1(x)))`` (Whisper, GPT-2 style); ``names`` default to fc1, fc2."""

    def __init__(self, prefix: str, hidden: int, intermediate: int, activation: str = "gelu", bias: bool = True,
                 names: tuple[str, str] = ("fc1", "fc2")) -> None:
        super().__init__(prefix)
        self.activation = activation
        self.fc1 = Linear(self.pname(names[0]), hidden, intermediate, bias)
        self.fc2 = Linear(self.pname(names[1]), intermediate, hidden, bias)

    def forward(self, b: Builder, x: GraphTensor) -> GraphTensor:
        return self.fc2.forward(b, activation(self.activation, self.fc1.forward(b, x)))
