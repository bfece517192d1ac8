"""Round-trip helpers for the e-graph tests: saturate a graph with some rules, and rebuild an HLIR
graph from a candidate whose chosen nodes are all primitives (the encoding's inverse)."""

from __future__ import annotations

from collections.abc import Iterable

from lightspeed.egraph import SCHEMA, Candidate, EGraphIndex, EGraphRunner, encode_graph
from lightspeed.egraph.extract import Decoder, ExtractionError, list_items
from lightspeed.egraph.runner import SerializedEGraph
from lightspeed.graph import Graph, GraphTensor
from lightspeed.primitives import PRIMITIVES, ConstantValue


def saturate_graph(graph: Graph, rules: str = ""):
    """Encode ``graph``, run ``rules`` (egglog text), return (runner, encoded, index, serialised)."""
    enc = encode_graph(graph)
    runner = EGraphRunner()
    runner.run(SCHEMA, name="schema.egg")
    runner.run(enc.program, name="graph")
    if rules:
        runner.run(rules, name="rules")
    ser = runner.serialize("$root")
    return runner, enc, EGraphIndex(ser), ser


def decode_graph(candidate: Candidate, ser: SerializedEGraph, constants: list[ConstantValue],
                 inputs: Iterable | None = None) -> Graph:
    """Rebuild an HLIR :class:`Graph` from a candidate whose chosen nodes are all primitives.

    ``inputs`` (InputArg rows of the original graph) re-declares inputs that no output reads, so
    the rebuilt program keeps the caller-visible signature."""
    index = candidate.index
    dec = Decoder(index, ser)
    g = Graph()
    built: dict[str, GraphTensor] = {}

    def build(cid: str) -> GraphTensor:
        if cid in built:
            return built[cid]
        n = candidate.choice[cid]
        ch = n.children
        op = n.op
        if op == "Input":
            t = g.input(dec.string(ch[0]), dec.elist(ch[1]), dec.dtype(ch[2]))
        elif op == "Constant":
            t = g.add_node(PRIMITIVES["Constant"], [], constants[dec.int(ch[0])])
        elif op == "Iota":
            t = g.iota(dec.expr(ch[0]), dec.elist(ch[1]), dec.dtype(ch[2]))
        elif op == "Output":
            src = build(ch[1])
            t = g.output(dec.string(ch[0]), src.with_view(dec.view(ch[2])))
        else:
            prim = PRIMITIVES.get(op)
            if prim is None:
                raise ExtractionError(f"decode_graph: {op} is not a primitive (lower it with a backend)")
            arg = None
            rest = ch
            if prim.category == "reduce":
                arg, rest = dec.int(ch[0]), ch[1:]
            elif op == "Cast":
                arg, rest = dec.dtype(ch[0]), ch[1:]
            ins = [build(rest[i]).with_view(dec.view(rest[i + 1])) for i in range(0, len(rest), 2)]
            t = g.add_node(prim, ins, arg)
        built[cid] = t
        return t

    for cid in list_items(index, index.root.children[0]):
        build(cid)
    for arg in inputs or ():
        if arg.name not in g.inputs:
            g.input(arg.name, arg.shape, arg.dtype)
    return g
