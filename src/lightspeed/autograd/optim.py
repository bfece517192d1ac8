"""Optimisers as graph functions, and a training step compiled as one program.

:func:`sgd` and :func:`adamw` compute a step's new parameters and optimiser state from graph
tensors, with PyTorch's update rules (``torch.optim.SGD`` with momentum and weight decay,
``torch.optim.AdamW``: decoupled weight decay, bias correction from the step number, an input).
:func:`training_step` turns a graph with a scalar loss and named parameter inputs into a training
step: the gradients (:func:`lightspeed.autograd.grad`), the update, and outputs that alias the
parameter and state inputs, so each call updates them in place and a loop of steps moves no
weights (on a device, none on or off it)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from .. import dtypes as dt
from ..errors import InputError
from ..graph import Graph, GraphTensor
from ..hl.common import cast
from ..hl.elementwise import exp2, reciprocal, sqrt
from . import grad

__all__ = ["sgd", "adamw", "training_step"]


def sgd(params: Sequence[GraphTensor], grads: Sequence[GraphTensor], *, lr: float, momentum: float = 0.0,
        weight_decay: float = 0.0, velocity: Sequence[GraphTensor] | None = None
        ) -> tuple[list[GraphTensor], list[GraphTensor]]:
    """``torch.optim.SGD`` (no dampening, no Nesterov): d = g + weight_decay * p; with momentum
    v = momentum * v + d (v = d at the first step: pass the zero velocity and it is the same) and
    p = p - lr * v.  Returns (new parameters, new velocity; empty without momentum)."""
    new_p, new_v = [], []
    for k, (p, g) in enumerate(zip(params, grads)):
        d = g + p * weight_decay if weight_decay else g
        if momentum:
            if velocity is None:
                raise InputError("sgd: momentum needs the velocity tensors")
            d = velocity[k] * momentum + d
            new_v.append(d)
        new_p.append(p - d * lr)
    return new_p, new_v


def adamw(params: Sequence[GraphTensor], grads: Sequence[GraphTensor], m: Sequence[GraphTensor],
          v: Sequence[GraphTensor], step: GraphTensor, *, lr: float, betas: tuple[float, float] = (0.9, 0.999),
          eps: float = 1e-8, weight_decay: float = 0.01
          ) -> tuple[list[GraphTensor], list[GraphTensor], list[GraphTensor]]:
    """``torch.optim.AdamW``: p = p * (1 - lr * wd); m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
    p = p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps), ``step`` t (a scalar tensor,
    counted from 1).  Returns (new parameters, new m, new v)."""
    b1, b2 = betas
    # the bias corrections from the step number, in float64 (as torch's, in Python floats): 1 - b2^t
    # is ~1e-3 early on, so a float32 power's rounding became a 1e-4 relative error of every update
    t = cast(step, dt.float64)
    c1 = cast(reciprocal(1.0 - exp2(t * math.log2(b1))), step.dtype)
    c2 = cast(reciprocal(1.0 - exp2(t * math.log2(b2))), step.dtype)
    out_p, out_m, out_v = [], [], []
    for p, g, mk, vk in zip(params, grads, m, v):
        mk = mk * b1 + g * (1.0 - b1)
        vk = vk * b2 + g * g * (1.0 - b2)
        denom = sqrt(vk * c2) + eps
        decayed = p * (1.0 - lr * weight_decay) if weight_decay else p
        out_p.append(decayed - mk * c1 * reciprocal(denom) * lr)
        out_m.append(mk)
        out_v.append(vk)
    return out_p, out_m, out_v


def training_step(graph: Graph, loss: GraphTensor, params: Mapping[str, GraphTensor], *, optimizer: str = "adamw",
                  **hparams: float) -> Graph:
    """Make ``graph`` a training step: ``params`` (graph inputs, by name) updated in place by
    ``optimizer`` ("adamw" or "sgd", with its keyword hyperparameters) from the gradients of
    ``loss``.  Adds the optimiser's state inputs (``<name>.m`` / ``<name>.v`` for AdamW, with a
    scalar ``step`` input counted from 1; ``<name>.velocity`` for SGD with momentum, zeros at the
    start) and the outputs: ``loss``, and one per parameter and state tensor, each aliasing its
    input (pass the same arrays every call: they hold the new values after it)."""
    names = list(params)
    for n in names:
        if graph.inputs.get(n) != params[n].node or not params[n].st.is_contiguous:
            raise InputError(f"training_step: parameter {n!r} must be the graph input of that name")
    ps = [params[n] for n in names]
    gs = grad(loss, ps)
    graph.output("loss", loss)
    if optimizer == "adamw":
        m = [graph.input(f"{n}.m", p.shape, p.dtype) for n, p in zip(names, ps)]
        v = [graph.input(f"{n}.v", p.shape, p.dtype) for n, p in zip(names, ps)]
        step = graph.input("step", (), ps[0].dtype)
        new_p, new_m, new_v = adamw(ps, gs, m, v, step, **hparams)
        state = [(f"{n}.m", t) for n, t in zip(names, new_m)] + [(f"{n}.v", t) for n, t in zip(names, new_v)]
    elif optimizer == "sgd":
        vel = [graph.input(f"{n}.velocity", p.shape, p.dtype) for n, p in zip(names, ps)] \
            if hparams.get("momentum") else None
        new_p, new_vel = sgd(ps, gs, velocity=vel, **hparams)
        state = [(f"{n}.velocity", t) for n, t in zip(names, new_vel)]
    else:
        raise InputError(f"training_step: unknown optimizer {optimizer!r} (adamw, sgd)")
    for n, t in [*zip(names, new_p), *state]:
        graph.output(f"new.{n}", t, aliases=n)
    return graph
