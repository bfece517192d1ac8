"""Mixture-of-experts feed-forward blocks: top-k routers (Qwen3-MoE, Gemma 4) and stacked experts.

Routing, per token (Hugging Face's order): router logits [s, E] -> softmax over all E experts
(in float32) -> top-k of the probabilities -> optionally divide the k values by their sum
(Qwen3-MoE's ``norm_topk_prob``; always in Gemma 4, which then multiplies each by a learned
per-expert scale).  The result is ``weights`` [s, k] and expert ``indices`` [s, k] (int64).

Expert weights are stacked graph inputs named like transformers 5's ``state_dict``:
``{prefix}.gate_up_proj`` [E, 2I, H] (the I gate rows, then the I up rows) and
``{prefix}.down_proj`` [E, H, I].  Checkpoints that store one tensor per expert
(``experts.{j}.gate_proj.weight``, ...) are stacked once, when weights are bound
(:func:`fuse_expert_weights`), never per step.

Two exact formulations of ``sum_j weights[j] * down_j(act(gate_j(x)) * up_j(x))``:

- ``"gather"`` (decode): Gather fetches only the k chosen experts' rows of ``gate_up_proj`` and
  ``down_proj`` (an index_select on the expert axis), then one batched vector-matrix product per
  token does its k gate/up projections together, one per (token, expert) the down projections
  (the routing weights already multiplied into the activations), and a sum over the k experts.
  Cost per token: k experts' weights, independent of E.  (The kernel backends read the chosen
  rows in place: a product whose B is such an index_select is a ``GatherMatmul``, offered beside
  the copy; the cpu backend runs Gather through its reference semantics, with an int64 index per
  gathered element: a few passes over the k experts' weights.)
- ``"dense"`` (prefill fallback): every expert on every token, the activations multiplied by the
  dense routing weights (zero for experts not chosen; a one-hot sum, so exact), then a batched
  product per expert and a sum over E.  It computes E/k times the FLOPs of the chosen experts,
  but reads each expert's weights once for the whole prompt, whereas gathering would copy k
  experts' weights *per token* (s * k * 3IH values).  Graph shapes are static, so per-expert
  token groups (grouped GEMM) cannot be formed; dense is the sensible choice for long prompts.
  (A non-finite output of an unchosen expert would turn into NaN here -- 0 * inf; the gather
  form never computes unchosen experts.)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .. import dtypes as dt
from .. import hl
from ..errors import InputError, ShapeError, UnsupportedError
from ..graph import GraphTensor
from .layers import Linear
from .mlp import gelu_tanh_mul, silu_mul
from .module import Builder, Module

__all__ = ["MOE_MODES", "MOE_CONFIG_MODES", "moe_mode", "topk_routing", "TopKRouter", "Gemma4Router", "Experts",
           "SparseMoeBlock", "fuse_expert_weights"]

MOE_MODES = ("gather", "dense")
# a config's prefill form may also be "auto": the graph's builder picks (Builder.moe_prefill: the
# compile pipeline of a model asks for "gather" on native, whose GatherMatmul kernel reads each
# expert once for all the tokens that chose it, and "dense" on the cpu backend and on a device)
MOE_CONFIG_MODES = (*MOE_MODES, "auto")

# gated activations by HF config name: act(gate) * up
_GATED_ACTS: dict[str, Callable[[GraphTensor, GraphTensor], GraphTensor]] = {
    "silu": silu_mul, "swish": silu_mul, "gelu_pytorch_tanh": gelu_tanh_mul, "gelu_tanh": gelu_tanh_mul,
    "gelu_new": gelu_tanh_mul, "gelu_fast": gelu_tanh_mul}


def moe_mode(modes: Mapping[str, str], step: Any, b: Builder) -> str:
    """The experts' form for ``step``'s graph: ``modes["prefill"]`` without a cache (an "auto"
    config's resolved by the builder: ``b.moe_prefill``), else ``modes["decode"]``."""
    mode = modes["prefill" if step.past is None else "decode"]
    return b.moe_prefill if mode == "auto" else mode


def topk_routing(logits: GraphTensor, k: int, normalize: bool) -> tuple[GraphTensor, GraphTensor]:
    """(weights [s, k] in ``logits``' dtype, expert indices [s, k] int64) from router logits
    [s, E]: softmax in float32 over all experts, top-k of the probabilities (sorted, ties to the
    lower expert id), divided by their sum when ``normalize``."""
    E = logits.shape[-1]
    if not E.is_const or not 0 < k <= E.value:
        raise ShapeError(f"top-k routing: k={k} must be in [1, {E}] (the number of experts)")
    # HF upcasts the softmax to float32 whatever the model dtype
    probs = hl.softmax(hl.to(logits, dt.float32) if logits.dtype != dt.float32 else logits, -1)
    vals, idx = hl.topk(probs, k, -1)
    if normalize:
        vals = vals / vals.sum(-1, keepdim=True)
    if logits.dtype != dt.float32:
        vals = hl.to(vals, logits.dtype)
    return vals, idx


class TopKRouter(Module):
    """Qwen3-MoE's router (HF ``mlp.gate``): ``weight`` [E, H]; logits ``x @ weight.T``, then
    :func:`topk_routing`."""

    def __init__(self, prefix: str, hidden: int, num_experts: int, top_k: int, norm_topk_prob: bool) -> None:
        super().__init__(prefix)
        self.hidden, self.num_experts, self.top_k, self.norm_topk_prob = hidden, num_experts, top_k, norm_topk_prob

    def own_params(self) -> dict[str, tuple[int, ...]]:
        return {self.pname("weight"): (self.num_experts, self.hidden)}

    def forward(self, b: Builder, x: GraphTensor) -> tuple[GraphTensor, GraphTensor]:
        w = b.param(self.pname("weight"), (self.num_experts, self.hidden))
        return topk_routing(x @ w.transpose(0, 1), self.top_k, self.norm_topk_prob)


class Gemma4Router(Module):
    """Gemma 4's router (HF ``Gemma4TextRouter``): ``x`` is RMS-normalised without a weight, times
    ``scale`` [H] and ``H ** -0.5``, projected by ``proj`` [E, H]; softmax, top-k, the k
    probabilities divided by their sum, then each multiplied by ``per_expert_scale`` [E] of its
    expert."""

    def __init__(self, prefix: str, hidden: int, num_experts: int, top_k: int, eps: float = 1e-6) -> None:
        super().__init__(prefix)
        self.hidden, self.num_experts, self.top_k, self.eps = hidden, num_experts, top_k, eps
        self.proj = Linear(self.pname("proj"), hidden, num_experts)

    def own_params(self) -> dict[str, tuple[int, ...]]:
        return {self.pname("scale"): (self.hidden,), self.pname("per_expert_scale"): (self.num_experts,)}

    def forward(self, b: Builder, x: GraphTensor) -> tuple[GraphTensor, GraphTensor]:
        s = x.shape[0]
        r = hl.rsqrt((x * x).sum(-1, keepdim=True) * (1.0 / self.hidden) + self.eps)
        h = x * r * b.param(self.pname("scale"), (self.hidden,)) * float(self.hidden ** -0.5)
        w, idx = topk_routing(self.proj.forward(b, h), self.top_k, True)
        pes = b.param(self.pname("per_expert_scale"), (self.num_experts,))
        return w * hl.index_select(pes, 0, idx.reshape(-1)).reshape(s, self.top_k), idx


class Experts(Module):
    """E gated MLPs with stacked weights ``gate_up_proj`` [E, 2I, H] and ``down_proj`` [E, H, I]
    under ``prefix`` (HF: ``mlp.experts`` for Qwen3-MoE, ``experts`` for Gemma 4).

    ``forward(b, x, weights, indices, mode)`` returns ``sum_j weights[:, j] * expert_{indices[:, j]}(x)``
    [s, H]; ``mode`` is ``"gather"`` or ``"dense"`` (see the module docstring)."""

    def __init__(self, prefix: str, hidden: int, intermediate: int, num_experts: int,
                 activation: str = "silu") -> None:
        super().__init__(prefix)
        if activation not in _GATED_ACTS:
            raise UnsupportedError(f"experts {prefix}: activation {activation!r} is not supported "
                                   f"({', '.join(sorted(_GATED_ACTS))} are)")
        self.hidden, self.intermediate, self.num_experts = hidden, intermediate, num_experts
        self.activation = activation

    def own_params(self) -> dict[str, tuple[int, ...]]:
        E, I, H = self.num_experts, self.intermediate, self.hidden
        return {self.pname("gate_up_proj"): (E, 2 * I, H), self.pname("down_proj"): (E, H, I)}

    def _weights(self, b: Builder) -> tuple[GraphTensor, GraphTensor]:
        E, I, H = self.num_experts, self.intermediate, self.hidden
        return (b.param(self.pname("gate_up_proj"), (E, 2 * I, H)), b.param(self.pname("down_proj"), (E, H, I)))

    def forward(self, b: Builder, x: GraphTensor, weights: GraphTensor, indices: GraphTensor,
                mode: str = "gather") -> GraphTensor:
        if x.ndim != 2 or x.shape[1] != self.hidden:
            raise ShapeError(f"experts {self.prefix}: expected x [s, {self.hidden}], got "
                             f"({', '.join(map(str, x.shape))})")
        if indices.ndim != 2 or weights.shape != indices.shape or indices.shape[0] != x.shape[0]:
            raise ShapeError(f"experts {self.prefix}: weights and indices must both be [s, k], got "
                             f"{tuple(map(str, weights.shape))} / {tuple(map(str, indices.shape))}")
        if mode == "gather":
            return self._gather(b, x, weights, indices)
        if mode == "dense":
            return self._dense(b, x, weights, indices)
        raise ValueError(f"experts {self.prefix}: mode must be one of {MOE_MODES}, got {mode!r}")

    def _gather(self, b: Builder, x: GraphTensor, w: GraphTensor, idx: GraphTensor) -> GraphTensor:
        I, H = self.intermediate, self.hidden
        s, k = idx.shape
        gate_up, down = self._weights(b)
        flat = idx.reshape(-1)  # [s*k], token-major
        # the chosen experts' gate/up rows: [s*k, 2I, H]; one vector-matrix product per token
        # covers its k experts: [s, 1, H] @ [s, H, k*2I] (the one-row form the cpu BLAS rules take)
        gu = hl.index_select(gate_up, 0, flat)
        h = (x.reshape(s, 1, H) @ gu.reshape(s, k * 2 * I, H).transpose(1, 2)).reshape(s, k, 2, I)
        # routing weights scale the activations before the (linear) down projection
        a = _GATED_ACTS[self.activation](h[:, :, 0], h[:, :, 1]) * w.reshape(s, k, 1)
        # the chosen experts' down rows [s*k, H, I] (gathered along the stacked weight's own leading
        # axis: a permuted data view would make the Gather read all E experts), one vector-matrix
        # product per (token, expert), then the sum over the token's k experts
        dn = hl.index_select(down, 0, flat)
        y = a.reshape(s * k, 1, I) @ dn.transpose(1, 2)  # [s*k, 1, H]
        return y.reshape(s, k, H).sum(1)

    def _dense(self, b: Builder, x: GraphTensor, w: GraphTensor, idx: GraphTensor) -> GraphTensor:
        E, I, H = self.num_experts, self.intermediate, self.hidden
        s, k = idx.shape
        gate_up, down = self._weights(b)
        # dense routing weights [s, E]: each expert appears at most once among a token's k, so the
        # one-hot sum is exact (the others add exact zeros)
        wd = (hl.to(hl.one_hot(idx, E), w.dtype) * w.reshape(s, k, 1)).sum(1)
        h = (x.reshape(1, s, H) @ gate_up.transpose(1, 2)).reshape(E, s, 2, I)  # [E, s, 2I]
        a = _GATED_ACTS[self.activation](h[:, :, 0], h[:, :, 1]) * wd.permute(1, 0).reshape(E, s, 1)
        return (a @ down.transpose(1, 2)).sum(0)  # [E, s, H] summed over experts


class SparseMoeBlock(Module):
    """Qwen3-MoE's sparse MLP (HF ``Qwen3MoeSparseMoeBlock``): router ``gate`` and ``experts``
    under ``prefix`` (``model.layers.{i}.mlp``)."""

    def __init__(self, prefix: str, hidden: int, intermediate: int, num_experts: int, top_k: int,
                 norm_topk_prob: bool, activation: str = "silu") -> None:
        super().__init__(prefix)
        self.gate = TopKRouter(self.pname("gate"), hidden, num_experts, top_k, norm_topk_prob)
        self.experts = Experts(self.pname("experts"), hidden, intermediate, num_experts, activation)

    def forward(self, b: Builder, x: GraphTensor, mode: str = "gather") -> GraphTensor:
        w, idx = self.gate.forward(b, x)
        return self.experts.forward(b, x, w, idx, mode)


def fuse_expert_weights(tensors: Mapping[str, Any], prefixes: list[str], num_experts: int) -> dict[str, Any]:
    """``tensors`` with, for each experts ``prefix`` that lacks the stacked ``{prefix}.gate_up_proj``
    / ``{prefix}.down_proj`` but has per-expert ``{prefix}.{j}.gate_proj.weight``, ``up_proj``,
    ``down_proj`` (original Qwen3-MoE checkpoints), the stacked tensors built as transformers 5
    does: gate_up = concat(stack(gate_j), stack(up_j)) along dim 1, down = stack(down_j).  The
    per-expert entries are dropped.  Called once when weights are bound."""
    out = dict(tensors)
    for p in prefixes:
        if f"{p}.gate_up_proj" in out or f"{p}.0.gate_proj.weight" not in out:
            continue
        gate, up, down = (_stack_experts(out, p, name, num_experts) for name in ("gate_proj", "up_proj", "down_proj"))
        out[f"{p}.gate_up_proj"] = np.concatenate([gate, up], axis=1)
        out[f"{p}.down_proj"] = down
    return out


def _stack_experts(tensors: dict[str, Any], prefix: str, name: str, num_experts: int) -> np.ndarray:
    """np.stack of ``{prefix}.{j}.{name}.weight`` for every expert j, popped from ``tensors``."""
    keys = [f"{prefix}.{j}.{name}.weight" for j in range(num_experts)]
    missing = [k for k in keys if k not in tensors]
    if missing:
        raise InputError(f"missing expert weight {missing[0]!r} (the experts under {prefix!r} are stored per "
                         "expert)")
    return np.stack([_numpy(tensors.pop(k), k) for k in keys])


def _numpy(a: Any, name: str) -> np.ndarray:
    if isinstance(a, np.ndarray):
        return a
    from ..program import to_numpy

    return to_numpy(a, f"weight {name!r}")
