"""The compile pipeline: :func:`compile` (``Graph.compile`` calls it) checks the options, rolls a
run of repeated layers (:func:`compile_rolled`; :mod:`.rolling` finds and splits it) or searches
(:func:`.search.compile_searched`: saturate, candidates, measure, ``Backend.lower``) and traces it.
The core calls backends, never the reverse: no backend imports this module, the search or rolling."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from .backends import trace
from .backends.base import Backend
from .backends.registry import default_backend, get_backend
from .errors import LightspeedError
from .graph import Graph
from .program import Program
from .rolling import find_repeated_blocks, split_graph
from .search import SearchOptions, compile_searched, progress, session

__all__ = ["compile", "compile_rolled"]


def compile(graph: Graph, backend: Backend | str | None = None, search: SearchOptions | None = None,
            **options: Any) -> Program:
    """``graph`` for ``backend`` (a Backend or its name; None: ``default_backend()``): rolled if it repeats and
    ``search.roll``, else searched, then lowered; an unsearched backend (the reference) ignores ``search``."""
    if not graph.outputs:
        raise LightspeedError("graph has no outputs: call g.output(name, tensor) first")
    be = get_backend(backend or default_backend()) if backend is None or isinstance(backend, str) else backend
    if not be.searched:
        if options:
            raise TypeError(f"{be.name} backend takes no options besides search=, got {sorted(options)}")
        return be.lower_graph(graph)
    if options:
        raise TypeError(f"{be.name} backend: unknown options {sorted(options)} "
                        "(pass search=ls.SearchOptions(...))")
    opts = search if search is not None else SearchOptions()
    if not isinstance(opts, SearchOptions):
        raise TypeError(f"{be.name} backend: search must be a SearchOptions, got {type(opts).__name__}")
    t0 = time.perf_counter()
    prog = compile_rolled(graph, be, opts) if opts.roll else None
    if prog is None:
        prog = compile_searched(graph, be, opts)
    if trace.enabled():  # LIGHTSPEED_TRACE: the compile and its phases, rulesets and candidates
        trace.event(f"compile ({be.name})", "compile", t0, time.perf_counter() - t0, nodes=len(graph.nodes),
                    outputs=", ".join(graph.outputs))
        trace.compile_events(getattr(prog, "search_report", None), t0, be.name)
    return prog


def compile_rolled(graph: Graph, backend: Backend, opts: SearchOptions) -> Program | None:
    """The backend's program of its parts (``Backend.compose_rolled``) if the graph has a repeated run worth
    rolling, else None.  Parts are compiled by :func:`compile` with the same options (dim buckets restricted
    to the dims each part uses); prelude and epilogue may roll again (a layer that differs splits the stack)."""
    if opts.dim_buckets and set(opts.dim_buckets) - graph.symbols():
        return None  # the ordinary path reports the bad option
    t0 = time.perf_counter()
    plan = find_repeated_blocks(graph)
    if plan is None:
        return None
    split = split_graph(graph, plan)
    roll_seconds = time.perf_counter() - t0
    compiled = []
    with session():  # the parts share representative inputs (prelude and epilogue: the embedding)
        for j, part in enumerate(split):
            progress(opts, f"part {j + 1}/{len(split)}: {part.role} of {len(plan.blocks)} blocks"
                     if part.role == "template" else f"part {j + 1}/{len(split)}: {part.role}")
            syms = part.graph.symbols()
            buckets = {k: v for k, v in (opts.dim_buckets or {}).items() if k in syms} or None
            sub = dataclasses.replace(opts, dim_buckets=buckets, roll=part.role != "template")
            compiled.append((part, compile(part.graph, backend, search=sub)))
    return backend.compose_rolled(graph, plan, compiled, roll_seconds)
