"""The e-graph layer: HLIR written as egglog terms, rule files, extraction of candidates.

Three layers, as in egglog-python: ``encode`` (data -> program text), ``runner`` (the only module
that touches egglog's bindings) and ``extract`` (serialised e-graph -> candidates -> programs).
"""

from .encode import SCHEMA, EncodedGraph, encode_graph
from .extract import Candidate, EGraphIndex, ExtractionError, decode_graph
from .runner import EgglogError, EGraphRunner, RunStats, SerializedEGraph

__all__ = [
    "SCHEMA", "EncodedGraph", "encode_graph", "Candidate", "EGraphIndex", "ExtractionError", "decode_graph",
    "EGraphRunner", "EgglogError", "RunStats", "SerializedEGraph", "saturate_graph",
]


def saturate_graph(graph, rules: str = ""):
    """Encode ``graph``, run ``rules`` (egglog text), return (runner, encoded, index, serialised)."""
    enc = encode_graph(graph)
    runner = EGraphRunner()
    runner.run(SCHEMA, name="schema.egg")
    runner.run(enc.program, name="graph")
    if rules:
        runner.run(rules, name="rules")
    ser = runner.serialize("$root")
    return runner, enc, EGraphIndex(ser), ser
