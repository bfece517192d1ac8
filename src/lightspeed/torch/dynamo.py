"""The ``torch.compile`` backend: ``torch.compile(model, backend="lightspeed", options={...})``.

Dynamo hands over an FX graph of torch-level ops; AOTAutograd lowers it with
:func:`~lightspeed.torch.aten.decompositions` to a functional core-ATen graph (in-place updates of
inputs and buffers become extra outputs that AOTAutograd copies back into the caller's tensors after
each call), and :func:`~lightspeed.torch.translate.compile_fx` turns that into lightspeed programs.
Parameters and buffers are graph inputs, read from the module's own tensors at every call.

Training too: when inputs or parameters require grad, AOTAutograd splits the forward (which then
also returns the activations the backward reads) from the backward graph, and both are compiled
the same way, so ``loss.backward()`` runs lightspeed programs and gives PyTorch's gradients.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from .aten import decompositions
from .translate import Options, compile_fx

__all__ = ["lightspeed_backend", "register"]

BACKEND_NAME = "lightspeed"


def lightspeed_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                       options: dict[str, Any] | None = None, **kwargs: Any) -> Callable:
    """Dynamo compiler function (``torch.compile(..., backend="lightspeed")``).

    ``options``: ``target`` (``cpu``, ``native``, ``cuda``, ``reference``; default by the inputs' device),
    ``budget`` and ``seed`` (the e-graph search), ``fallback`` (``"eager"`` runs unsupported ops in
    eager PyTorch instead of raising).  ``mode`` is accepted and ignored."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    opts = Options.parse(options)

    def forward_compiler(fx_graph: torch.fx.GraphModule, inputs: Sequence[Any]) -> Callable:
        return make_boxed_func(compile_fx(fx_graph, inputs, opts, mutated=_mutated_outputs()))

    def backward_compiler(fx_graph: torch.fx.GraphModule, inputs: Sequence[Any]) -> Callable:
        # AOTAutograd's backward graph: core ATen ops like the forward's (the gradients' ops are
        # decomposed by the same table), compiled the same way
        return make_boxed_func(compile_fx(fx_graph, inputs, opts))

    aot = aot_autograd(fw_compiler=forward_compiler, inference_compiler=forward_compiler,
                       bw_compiler=backward_compiler, decompositions=decompositions())
    return aot(gm, example_inputs)


def _mutated_outputs() -> dict[int, int]:
    """Output position -> input position for the inputs AOTAutograd copies back after the call
    (its functionalized graph returns their new values first, in input order)."""
    from torch._guards import TracingContext

    ctx = TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    if meta is None:
        return {}
    try:
        from torch._functorch._aot_autograd.schemas import MutationType
    except ImportError:  # pragma: no cover - an older layout: no in-place writes, copies stay correct
        return {}
    out_of_graph = [i for i, info in enumerate(meta.input_info)
                    if getattr(info, "mutation_type", None) == MutationType.MUTATED_OUT_GRAPH
                    and info.mutates_data and not info.mutates_metadata]
    return dict(enumerate(out_of_graph))


def register() -> None:
    """Make ``backend="lightspeed"`` known to dynamo, unless it is already (or its entry point was
    found, in which case dynamo loads and registers it on first use)."""
    from importlib.metadata import EntryPoint

    from torch._dynamo.backends import registry

    if BACKEND_NAME in registry._COMPILER_FNS or isinstance(registry._BACKENDS.get(BACKEND_NAME), EntryPoint):
        return
    registry.register_backend(lightspeed_backend, name=BACKEND_NAME)
