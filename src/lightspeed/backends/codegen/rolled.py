"""A rolled program (prelude, a block template repeated per block, epilogue) as one kernel program.

The template is compiled once (its kernels are shared by every block: same structure, same
source), and the parts' LLIR programs are stitched into one: each block's copy of the template
reads its own weights and boundary values, values crossing parts are read where their producer
wrote them (no copy unless the exporting view is not the producer's own layout), and the graph's
outputs (an aliased cache per layer included) come out of the parts that compute them.  The
result is lowered once: on the GPU one CUDA graph per plan runs the whole model.  Parts that are
not single kernel programs (dim buckets) fall back to the host loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...egraph.llir import LOp, LProgram
from ...graph import Graph
from ...program import Program
from ..rolled import BlockLoopProgram
from .program import KernelProgram

__all__ = ["compose_rolled_kernels", "stitch"]


def stitch(graph: Graph, loop: BlockLoopProgram) -> LProgram | None:
    """The steps of ``loop`` as one LLIR program, or None when a part is not a kernel program."""
    progs = [step.prog for step in loop.steps]
    if not all(isinstance(p, KernelProgram) for p in progs):
        return None
    out = LProgram(decls=dict(progs[0].lprog.decls))
    value_of: dict[int, int] = {}  # graph node id -> the combined op holding it (row-major, whole)
    inputs: dict[str, int] = {}  # graph input name -> its Input op

    def add(op: LOp) -> int:
        out.ops.append(op)
        return len(out.ops) - 1

    for step in loop.steps:
        lp = step.prog.lprog
        base = len(out.constants)
        out.constants.extend(lp.constants)
        at: dict[int, int] = {}
        for i, op in enumerate(lp.ops):
            if op.op == "Input":
                nid = step.inputs[op.args["name"]]
                if nid in value_of:
                    at[i] = value_of[nid]
                    continue
                name = graph.nodes[nid].arg.name
                if name not in inputs:
                    inputs[name] = add(LOp("Input", {**op.args, "name": name}, (), op.shape, op.dtype))
                at[i] = inputs[name]
                continue
            if op.op == "Output":
                name = op.args["name"]
                src = at[op.inputs[0]]
                nid = step.exports.get(name)
                if nid is not None:
                    view = op.args["x_view"]
                    if view.is_contiguous and tuple(out.ops[src].shape) == tuple(op.shape):
                        value_of[nid] = src
                    else:  # a copy through the exporting view, as the part's output would be
                        value_of[nid] = add(LOp("Fused", {"shape": tuple(op.shape), "body": ("leaf", 0)}, (src,),
                                                op.shape, op.dtype, (view,)))
                final = step.finals.get(name)
                if final is not None:
                    out.outputs[final] = add(LOp("Output", {**op.args, "name": final}, (src,), op.shape, op.dtype))
                continue
            args = dict(op.args)
            if op.op == "Constant":
                args["index"] = op.args["index"] + base
            at[i] = add(LOp(op.op, args, tuple(at[j] for j in op.inputs), op.shape, op.dtype, op.leaf_views))
    if set(out.outputs) != set(graph.outputs):
        return None
    return out


def compose_rolled_kernels(backend: Any, graph: Graph, plan: Any, parts: Sequence[tuple[Any, Program]],
                           roll_seconds: float) -> Program:
    """``Backend.compose_rolled`` of the kernel backends: one stitched program (see the module
    docstring), else the host loop."""
    loop = BlockLoopProgram(graph, plan, parts, roll_seconds)
    lprog = stitch(graph, loop)
    if lprog is None:
        return loop
    prog = backend.lower(graph, lprog, loop.search_report)
    prog.rolled_from = loop  # the parts and their reports (``report()`` of the loop)
    return prog
