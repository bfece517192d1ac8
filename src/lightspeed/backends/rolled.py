"""The default way a backend runs a rolled program (``lightspeed.rolling``, composed by the
compile pipeline through ``Backend.compose_rolled``): a host loop.

The prelude runs once, the block template once per block (bound to that block's boundary values
and weights), the epilogue once.  Values crossing parts are the producers' full tensors, kept
until their last reader has run.  A GPU backend overrides ``Backend.compose_rolled`` to run the
same parts as one captured graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import InputError
from ..graph import Graph
from ..program import BucketedProgram, Program, SearchReport, share_array_hooks

__all__ = ["BlockLoopProgram", "fill_out"]


def fill_out(res: dict[str, np.ndarray], out: Mapping[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """Copy results into the caller's ``out`` arrays (for programs that do not write them directly)."""
    for k, dest in (out or {}).items():
        if dest.shape != res[k].shape:
            raise InputError(f"out[{k!r}] has shape {dest.shape}, the output has shape {res[k].shape}")
        np.copyto(dest, res[k], casting="unsafe")
        res[k] = dest
    return res



@dataclass
class _Step:
    prog: Program
    inputs: dict[str, int]  # part input name -> node id of the value it takes
    exports: dict[str, int]  # part output name -> node id of the value it gives
    finals: dict[str, str]  # part output name -> graph output name


def _search_reports(prog: Program) -> list[SearchReport]:
    if isinstance(prog, BucketedProgram):
        return [r for _, p in prog.buckets for r in _search_reports(p)]
    rep = getattr(prog, "search_report", None)
    return [rep] if isinstance(rep, SearchReport) else []


def _combine(reports: list[SearchReport], roll_seconds: float) -> SearchReport:
    """One report for the whole program: phases, e-nodes and rule matches summed over the parts."""
    out = SearchReport()
    out.phases["roll"] = roll_seconds
    for r in reports:
        for k, v in r.phases.items():
            out.phases[k] = out.phases.get(k, 0.0) + v
        for k, v in r.rule_matches.items():
            out.rule_matches[k] = out.rule_matches.get(k, 0) + v
        for k, v in r.produced_by.items():
            out.produced_by.setdefault(k, v)
        out.profile_dims.update(r.profile_dims)
        out.egraph_nodes += r.egraph_nodes
        out.lower += r.lower
    out.egraph_cached = bool(reports) and all(r.egraph_cached for r in reports)
    out.decision_cached = bool(reports) and all(r.decision_cached for r in reports)
    out.program_text = "\n\n".join(r.program_text for r in reports)
    return out


class BlockLoopProgram(Program):
    """Runs prelude, the template once per block, and the epilogue, as host calls."""

    def __init__(self, graph: Graph, plan: Any, parts: Sequence[tuple[Any, Program]], roll_seconds: float):
        super().__init__(graph)
        self.plan = plan
        self.parts = list(parts)
        self.backend_name = self.parts[0][1].backend_name if self.parts else "rolled"
        if self.parts:
            share_array_hooks(self, self.parts[0][1])
        self.steps: list[_Step] = []
        for part, prog in self.parts:
            if part.role != "template":
                self.steps.append(_Step(prog, part.inputs, part.exports, part.finals))
                continue
            for i, block in enumerate(plan.blocks):  # rename block 0's nodes to block i's by offset
                at = dict(zip(plan.blocks[0], block))
                at.update(zip(plan.boundary[0], plan.boundary[i]))
                self.steps.append(_Step(prog, {n: at.get(s, s) for n, s in part.inputs.items()},  # inputs: as they are
                                        {n: at[s] for n, s in part.exports.items()},
                                        {n: graph.nodes[block[int(n[1:])]].arg for n in part.finals}))
        last: dict[int, int] = {}
        for k, step in enumerate(self.steps):
            for nid in step.inputs.values():
                last[nid] = k
        self._free: list[list[int]] = [[] for _ in self.steps]
        for nid, k in last.items():
            self._free[k].append(nid)
        self._graph_inputs = {nid: graph.nodes[nid].arg.name for nid in last if graph.nodes[nid].op.name == "Input"}
        self.search_report = _combine([r for _, p in self.parts for r in _search_reports(p)], roll_seconds)

    def execute(self, arrays: dict[str, Any], dims: dict[str, int], out=None) -> dict[str, Any]:
        values = {nid: arrays[name] for nid, name in self._graph_inputs.items()}
        outputs: dict[str, Any] = {}
        for step, free in zip(self.steps, self._free):
            res = step.prog.execute({n: values[s] for n, s in step.inputs.items()}, dims)
            for n, nid in step.exports.items():
                values[nid] = res[n]
            for n, final in step.finals.items():
                outputs[final] = res[n]
            for nid in free:
                del values[nid]
        return fill_out({name: outputs[name] for name in self.output_names}, out)

    @property
    def preparations(self) -> int:
        """Executable preparations of all parts (see CpuProgram.preparations)."""
        return sum(p.preparations for _, p in self.parts)

    def reserve(self, **bounds: int) -> BlockLoopProgram:
        super().reserve(**bounds)
        for _, prog in self.parts:
            prog.reserve(**{k: v for k, v in bounds.items() if k in prog.symbols})
        return self

    def report(self) -> str:
        phases = ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.search_report.phases.items())
        roles = ", ".join(part.role + (f" x{self.plan.count}" if part.role == "template" else "")
                          for part, _ in self.parts)
        lines = [f"rolled: {self.plan.describe()}; the template is compiled once",
                 f"  parts: {roles}",
                 f"  phases summed over parts: {phases}; {self.search_report.egraph_nodes} e-nodes"]
        for part, prog in self.parts:
            body = prog.report() if hasattr(prog, "report") else repr(prog)
            lines.append(f"\n[{part.role}]\n{body}")
        return "\n".join(lines)
