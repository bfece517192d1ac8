"""A sharded graph cut at its collectives into stages, compiled and run as one program.

Every node gets a stage: the latest stage among the values it reads, and the result of a
collective one more than its operand's (so a stage never waits on a collective it feeds).  Graph
inputs, constants and iotas belong to no stage: each stage that reads one declares or rebuilds
it.  A value read by a later stage is exported by its own stage and kept until its last reader.
Each stage becomes a Graph of its own, built with ``add_node`` (every rule checked again) and
named structurally (``i0``, ``i1``, ... / ``o0``, ...), so the stages of different layers print
the same text and are compiled once: a 30-layer model has 61 stages but 4 distinct ones.

:class:`StagedProgram` runs stage 0, the collectives stage 0 fed, stage 1, ... (the collectives
through ``Backend.collective``) and returns the graph's outputs; it is a
:class:`~lightspeed.program.Program` of the whole sharded graph, so input checks, dims,
``persist``, aliased outputs (the KV cache written in place) work as for any program.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..graph import Graph, GraphTensor
from ..program import Program, share_array_hooks
from ..search import SearchReport
from .collective import Collective, Communicator, collectives_of

__all__ = ["Stage", "split_stages", "StagedProgram", "compile_staged"]

FREE_OPS = ("Input", "Constant", "Iota")


@dataclass
class Stage:
    """One stage's graph and its wiring: ``inputs`` stage input -> value key (a graph input
    name, a collective's ``recv`` name, or the id of a node an earlier stage exported);
    ``outputs`` stage output -> value key it provides (a node id, a collective's ``send`` name, or
    ``('final', graph output name)``); ``collectives``: those whose operand this stage makes."""

    graph: Graph
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    collectives: list[Collective]


def _stage_numbers(graph: Graph, specs: list[Collective]) -> dict[int, int]:
    nodes = graph.nodes
    recv = {graph.inputs[c.recv]: graph.outputs[c.send] for c in specs}  # recv input -> send output node
    stage: dict[int, int] = {}
    for n in nodes:  # topological order
        if n.id in recv:
            stage[n.id] = stage[recv[n.id]] + 1
        elif n.op.name in FREE_OPS:
            continue
        else:
            stage[n.id] = max((stage[s] for s, _ in n.inputs if s in stage), default=0)
    return stage


def split_stages(graph: Graph) -> list[Stage]:
    """The graph's stages in run order (one stage when it has no collectives)."""
    nodes = graph.nodes
    specs = collectives_of(graph)
    recv_ids = {graph.inputs[c.recv]: c.recv for c in specs}
    send_of = {graph.outputs[c.send]: c for c in specs}
    stage = _stage_numbers(graph, specs)
    live = set(graph.reachable())
    count = max((stage[i] for i in live if i in stage), default=0) + 1
    members: list[list[int]] = [[] for _ in range(count)]
    passthrough = set(_final_inputs(graph).values())
    for nid in sorted(live):
        if nid in stage and nid not in recv_ids and nid not in passthrough:
            members[stage[nid]].append(nid)
    exported = {src for k in range(count) for nid in members[k] for src, _ in nodes[nid].inputs
                if src in stage and src not in recv_ids and stage[src] < k}
    stages = [_build_stage(graph, m, exported, recv_ids, send_of) for m in members if m]
    return stages


def _build_stage(graph: Graph, members: list[int], exported: set[int], recv_ids: dict[int, str],
                 send_of: dict[int, Collective]) -> Stage:
    """One stage's Graph: ``members`` rebuilt with ``add_node``, an input per outside value."""
    nodes = graph.nodes
    part = Graph()
    tens: dict[int, GraphTensor] = {}
    inputs: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    made: list[Collective] = []

    def operand(src: int, st: Any) -> GraphTensor:
        t = tens.get(src)
        if t is None:
            n = nodes[src]
            if n.op.name in ("Constant", "Iota"):  # rebuilt in every stage that reads it
                t = part.add_node(n.op, [], n.arg)
            else:  # a graph input, a collective's result or an earlier stage's value
                key = recv_ids.get(src, n.arg.name if n.op.name == "Input" else src)
                name = f"i{len(inputs)}"
                inputs[name] = key
                t = part.input(name, n.shape, n.dtype)
            tens[src] = t
        return t.with_view(st)

    for nid in members:
        n = nodes[nid]
        ops = [operand(src, st) for src, st in n.inputs]
        if n.op.name != "Output":
            tens[nid] = part.add_node(n.op, ops, n.arg)
            continue
        name = f"o{len(outputs)}"
        if nid in send_of:
            outputs[name] = send_of[nid].send
            made.append(send_of[nid])
            part.output(name, ops[0])
            continue
        # an output written into an input stays so when the stage reads that input
        alias = graph.output_aliases.get(n.arg)
        part_in = next((i for i, key in inputs.items() if key == alias), None) if alias else None
        outputs[name] = ("final", n.arg)
        part.output(name, ops[0], aliases=part_in)
    for nid in members:
        if nid in exported:
            name = f"o{len(outputs)}"
            outputs[name] = nid
            part.output(name, tens[nid])
    return Stage(part, inputs, outputs, made)


def _final_inputs(graph: Graph) -> dict[str, int]:
    """Graph outputs that are a collective's result as it is (an all-gathered head): output name
    -> the Output node, which no stage computes."""
    recv = {graph.inputs[c.recv] for c in collectives_of(graph)}
    out = {}
    for name, nid in graph.outputs.items():
        src, st = graph.nodes[nid].inputs[0]
        if src in recv and st.describe() == "" and graph.nodes[nid].shape == graph.nodes[src].shape:
            out[name] = nid
    return out


def _stage_key(g: Graph) -> tuple:
    """Equal for stages that compile to the same program (the text names no layer)."""
    return (str(g), tuple(n.arg for n in g.nodes if n.op.name == "Constant"))


class StagedProgram(Program):
    """Runs a sharded graph's stages with the collectives between them (module docstring)."""

    def __init__(self, graph: Graph, stages: list[tuple[Stage, Program]], comm: Communicator, backend: Any,
                 compile_s: float = 0.0) -> None:
        super().__init__(graph)
        specs = collectives_of(graph)
        # the collectives' send/recv ends are wiring inside the program, not the caller's
        for c in specs:
            self.input_args.pop(c.recv, None)
        self.output_names = tuple(n for n in self.output_names if n not in {c.send for c in specs})
        self.stages = stages
        self.comm = comm
        self.backend = backend
        self.backend_name = stages[0][1].backend_name
        share_array_hooks(self, stages[0][1])
        self.distinct = len({id(p) for _, p in stages})
        self.compile_s = compile_s
        self.search_report = _combined_report([p for p in {id(p): p for _, p in stages}.values()])
        last: dict[Any, int] = {}  # value key -> last stage reading it
        for k, (st, _) in enumerate(stages):
            for key in st.inputs.values():
                last[key] = k
        self._free = [[key for key, k2 in last.items() if k2 == k] for k in range(len(stages))]
        recv_names = {graph.inputs[c.recv]: c.recv for c in specs}
        self._passthrough = {name: recv_names[graph.nodes[nid].inputs[0][0]]
                             for name, nid in _final_inputs(graph).items()}

    def execute(self, arrays: dict[str, Any], dims: dict[str, int],
                out: Mapping[str, Any] | None = None) -> dict[str, Any]:
        # a stage's outputs are kept while the same compiled stage runs again for a later layer:
        # this relies on programs returning fresh output arrays, as the host programs do (the
        # rolled block loop relies on it too)
        values: dict[Any, Any] = dict(arrays)
        finals: dict[str, Any] = {}
        for (st, prog), free in zip(self.stages, self._free):
            res = prog.execute({i: values[key] for i, key in st.inputs.items()},
                               {k: v for k, v in dims.items() if k in prog.symbols})
            for o, key in st.outputs.items():
                if isinstance(key, tuple):
                    finals[key[1]] = res[o]
                else:
                    values[key] = res[o]
            for c in st.collectives:  # this stage's operands, combined before any later stage runs
                values[c.recv] = self.backend.collective(self.comm, c, values.pop(c.send))
            for key in free:
                if key not in arrays:
                    values.pop(key, None)
        for name, key in self._passthrough.items():
            finals[name] = values[key]
        from ..backends.rolled import fill_out

        return fill_out({name: finals[name] for name in self.output_names}, out)

    def with_comm(self, comm: Communicator) -> StagedProgram:
        """The same compiled stages run with ``comm``'s collectives."""
        bound = copy.copy(self)
        bound.comm = comm
        return bound

    @property
    def preparations(self) -> int:
        return sum(p.preparations for p in {id(p): p for _, p in self.stages}.values())

    def reserve(self, **bounds: int) -> StagedProgram:
        super().reserve(**bounds)
        for p in {id(p): p for _, p in self.stages}.values():
            p.reserve(**{k: v for k, v in bounds.items() if k in p.symbols})
        return self


def _combined_report(progs: list[Program]) -> SearchReport:
    """One report for the distinct stages (what ``lightspeed run -v`` prints): phases and e-nodes
    summed, cached only when every stage's e-graph / decision was."""
    out = SearchReport()
    reports = [r for r in (getattr(p, "search_report", None) for p in progs) if isinstance(r, SearchReport)]
    for r in reports:
        for k, v in r.phases.items():
            out.phases[k] = out.phases.get(k, 0.0) + v
        out.egraph_nodes += r.egraph_nodes
        out.lower += r.lower
    out.egraph_cached = bool(reports) and all(r.egraph_cached for r in reports)
    out.decision_cached = bool(reports) and all(r.decision_cached for r in reports)
    return out


def compile_staged(graph: Graph, backend: str, search: Any, comm: Communicator) -> StagedProgram:
    """The sharded ``graph``'s stages compiled for ``backend`` (each distinct stage once, through
    the backend's own compile and search), run by ``comm``'s collectives."""
    from ..backends import get_backend
    from ..search import SearchOptions, session

    be = get_backend(backend)
    opts = search if search is not None else SearchOptions()
    t0 = time.perf_counter()
    stages = split_stages(graph)
    compiled: dict[tuple, Program] = {}
    out = []
    with session():  # the stages share representative inputs (the embedding, the head)
        for st in stages:
            key = _stage_key(st.graph)
            prog = compiled.get(key)
            if prog is None:
                syms = st.graph.symbols()
                sub = opts
                if isinstance(opts, SearchOptions):  # one stage holds no repeated layers to roll
                    sub = dataclasses.replace(opts, roll=False, dims={k: v for k, v in (opts.dims or {}).items()
                                                                      if k in syms} or None)
                prog = compiled[key] = st.graph.compile(be, search=sub)
            out.append((st, prog))
    return StagedProgram(graph, out, comm, be, time.perf_counter() - t0)
