"""The e-graph layer: HLIR written as egglog terms, rule files, extraction of candidates.

Three layers, as in egglog-python: ``encode`` (data -> program text), ``runner`` (the only module
that touches egglog's bindings) and ``extract`` (serialised e-graph -> candidates -> programs).
"""

from .encode import SCHEMA, EncodedGraph, encode_graph
from .extract import Candidate, EGraphIndex, ExtractionError
from .runner import EgglogError, EGraphRunner, RunStats, SerializedEGraph

__all__ = [
    "SCHEMA", "EncodedGraph", "encode_graph", "Candidate", "EGraphIndex", "ExtractionError",
    "EGraphRunner", "EgglogError", "RunStats", "SerializedEGraph", "rules_producing",
]


def rules_producing(rules_text: str, ctors: set[str] | None = None) -> dict[str, list[str]]:
    """Constructor -> names of the rules whose actions build it (for reports): a rule produces the
    constructors (``ctors``, default: those declared in the text) that appear in its action half
    (its second s-expression; the first is the query)."""
    import re

    if ctors is None:
        ctors = set(re.findall(r"\(constructor\s+(\w+)", rules_text))
    out: dict[str, list[str]] = {}
    for block in re.split(r"\n\(rule\b", rules_text)[1:]:
        name = re.search(r':name\s+"([^"]+)"', block)
        if not name:
            continue
        actions = _sexprs(block[:name.start()])[1:2]
        for c in sorted(ctors):
            if actions and re.search(rf"\({c}\b", actions[0]):
                out.setdefault(c, []).append(name.group(1))
    return out


def _sexprs(text: str) -> list[str]:
    """The top-level parenthesised expressions of ``text`` (comments dropped)."""
    text = "\n".join(line.split(";", 1)[0] for line in text.split("\n"))
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            if depth == 0:
                start = i
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                out.append(text[start:i + 1])
    return out
