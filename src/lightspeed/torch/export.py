"""Ahead-of-time path: ``lightspeed.torch.compile_exported(torch.export.export(model, args))``.

The exported program is lowered with lightspeed's decomposition table, its parameters, buffers and
constants are bound to the program's own tensors (held by reference, not copied: later in-place
changes to them are seen), and mutated buffers and user inputs are written back after each call, as
``ExportedProgram.module()`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as pytree

from ..errors import InputError, UnsupportedError
from .aten import decompositions
from .translate import CompiledGraph, Options, compile_fx

__all__ = ["compile_exported", "ExportedRunner"]


class ExportedRunner:
    """The compiled exported program: call it with the arguments the model was exported with."""

    def __init__(self, ep: torch.export.ExportedProgram, compiled: CompiledGraph, bound: dict[int, torch.Tensor],
                 user_positions: list[int]):
        self.ep = ep
        self.compiled = compiled
        self.bound = bound
        self.user_positions = user_positions
        self.in_spec = ep.call_spec.in_spec
        self.out_spec = ep.call_spec.out_spec
        specs = ep.graph_signature.input_specs
        self._input_pos = {s.arg.name: i for i, s in enumerate(specs)}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        flat, spec = pytree.tree_flatten((args, kwargs))
        if self.in_spec is not None and spec != self.in_spec:
            raise InputError(f"compiled exported program: arguments do not match the exported signature "
                             f"(expected {self.in_spec}, got {spec})")
        if len(flat) != len(self.user_positions):
            raise InputError(f"compiled exported program takes {len(self.user_positions)} inputs, got {len(flat)}")
        full: list[Any] = [None] * (len(self.bound) + len(self.user_positions))
        for i, t in self.bound.items():
            full[i] = t
        for pos, v in zip(self.user_positions, flat):
            full[pos] = v
        outs = self.compiled(*full)
        user_outs = []
        kinds = torch.export.graph_signature.OutputKind
        for spec, out in zip(self.ep.graph_signature.output_specs, outs):
            if spec.kind == kinds.BUFFER_MUTATION:
                self._state(spec.target).copy_(out)
            elif spec.kind == kinds.USER_INPUT_MUTATION:
                full[self._input_pos[spec.target]].copy_(out)
            elif spec.kind == kinds.USER_OUTPUT:
                user_outs.append(out)
            else:
                raise UnsupportedError(f"exported output kind {spec.kind.name} (training graphs are not supported)")
        if self.out_spec is None:
            return tuple(user_outs)
        return pytree.tree_unflatten(user_outs, self.out_spec)

    def _state(self, name: str) -> torch.Tensor:
        if name in self.ep.state_dict:
            return self.ep.state_dict[name]
        return self.ep.constants[name]


def compile_exported(ep: torch.export.ExportedProgram, *, target: str | None = None, budget: int = 8, seed: int = 0,
                     fallback: str | None = None) -> Callable[..., Any]:
    """Compile a ``torch.export`` program with lightspeed; the options are those of the dynamo
    backend (``target`` defaults by the parameters' device).  Returns a callable taking the exported
    arguments (symbolic dims in ``dynamic_shapes`` stay symbolic)."""
    opts = Options.parse({"target": target, "budget": budget, "seed": seed, "fallback": fallback})
    ep = ep.run_decompositions(decompositions())
    kinds = torch.export.graph_signature.InputKind
    bound: dict[int, torch.Tensor] = {}
    user_positions: list[int] = []
    for i, spec in enumerate(ep.graph_signature.input_specs):
        if spec.kind in (kinds.PARAMETER, kinds.BUFFER):
            bound[i] = ep.state_dict[spec.target] if spec.target in ep.state_dict else ep.constants[spec.target]
        elif spec.kind == kinds.CONSTANT_TENSOR:
            bound[i] = ep.constants[spec.target]
        elif spec.kind == kinds.USER_INPUT:
            user_positions.append(i)
        else:
            raise UnsupportedError(f"exported input kind {spec.kind.name} ({spec.target}) is not supported")
    placeholders = [n for n in ep.graph_module.graph.nodes if n.op == "placeholder"]
    examples = [n.meta.get("val") for n in placeholders]
    examples = [bound.get(i, v) for i, v in enumerate(examples)]
    compiled = compile_fx(ep.graph_module, examples, opts, bound)
    return ExportedRunner(ep, compiled, bound, user_positions)
