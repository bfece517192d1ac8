"""The reference runtime: an exact numpy interpreter of HLIR, the oracle for every other backend.

Each node's result is a contiguous numpy array of the node's shape.  An op reads an input through
its view by evaluating the view's index and validity expressions over the flat logical index (a
vectorised numpy evaluation, cached per view and dim binding); masked positions read zero.
Values are freed after their last use.
"""

from __future__ import annotations

import numpy as np

from ..egraph.llir import liveness
from ..graph import Graph
from ..program import Program
from .base import Backend
from .numpy_views import read_view
from .rolled import fill_out

__all__ = ["ReferenceProgram", "ReferenceBackend"]


class ReferenceProgram(Program):
    backend_name = "reference"

    def __init__(self, graph: Graph):
        super().__init__(graph)
        self.order = graph.reachable()
        pos = {nid: k for k, nid in enumerate(self.order)}
        plan = liveness([tuple(pos[src] for src, _ in graph.nodes[i].inputs) for i in self.order])
        self.free_after: dict[int, list[int]] = {self.order[k]: [self.order[j] for j in js] for k, js in plan.items()}

    def execute(self, arrays: dict[str, np.ndarray], dims: dict[str, int], out=None) -> dict[str, np.ndarray]:
        nodes = self.graph.nodes
        values: dict[int, np.ndarray] = {}
        outputs: dict[str, np.ndarray] = {}
        for i in self.order:
            n = nodes[i]
            if n.op.name == "Input":
                val = np.ascontiguousarray(arrays[n.arg.name])
            else:
                args = [read_view(values[src], st, dims) for src, st in n.inputs]
                val = n.op.reference(args, n.arg, dims)
                shape = tuple(int(d.evaluate(dims)) for d in n.shape)
                val = np.ascontiguousarray(np.asarray(val, dtype=n.dtype.np)).reshape(shape)
            if n.op.name == "Output":
                outputs[n.arg] = val.copy()
            values[i] = val
            for src in self.free_after.get(i, ()):
                values.pop(src, None)
        return fill_out({name: outputs[name] for name in self.output_names}, out)


class ReferenceBackend(Backend):
    """Runs HLIR as it is: no e-graph, no search (the compile pipeline accepts ``search=``, so
    callers never branch on the backend's name, and ignores it)."""

    name = "reference"
    searched = False

    def lower_graph(self, graph: Graph) -> ReferenceProgram:
        return ReferenceProgram(graph)
