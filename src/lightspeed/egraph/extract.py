"""Extraction: from a serialised e-graph to concrete programs.

A *candidate* picks one e-node for every ``IR`` e-class reachable from the root.  Other sorts
(``Expr``, ``EList``, ``View``, ``DType``) only hold equivalent descriptions of one value, so they
are decoded with their smallest term.  Candidates are drawn at random and repaired so that they
are acyclic (an e-class may contain a node that reaches itself, e.g. after ``x*1 = x``); the repair
falls back to a node whose children are strictly "lower" (closer to the leaves) than its class,
which always exists for a class that has any finite term.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import LightspeedError
from ..primitives import PRIMITIVES
from ..shape import ShapeTracker, View
from ..symbolic import INDEX_VAR, Expr, const, smax, smin, sym
from .decl import SCALAR_OPS
from .encode import CTOR_DTYPE
from .runner import SerializedEGraph

__all__ = ["EGraphIndex", "Candidate", "Decoder", "ExtractionError", "SCALAR_OPS", "list_items"]

# SCALAR_OPS: the Scalar constructors of region bodies (rules/fusion.egg, declared once in decl.py)
# -> the primitive each one computes.  Their e-classes are choices of a candidate like IR classes:
# a leaf class may also hold the producer's inlined body, a constant or an iota.
IR_OPS = set(PRIMITIVES) | {"Input", "Constant", "Output"}
# analysis functions declared in schema.egg: they appear as e-nodes but are not terms
ANALYSIS_FUNCTIONS = frozenset({"dtype", "shape", "view_shape"})


class ExtractionError(LightspeedError):
    """The e-graph has no valid (finite, acyclic) program for the requested root."""


@dataclass(frozen=True)
class ENode:
    id: str
    op: str
    children: tuple[str, ...]  # child e-class ids
    eclass: str


class EGraphIndex:
    """Serialised e-graph indexed by e-class, restricted to the constructors we understand."""

    def __init__(self, ser: SerializedEGraph, ir_ops: Iterable[str] = IR_OPS):
        self.ir_ops = set(ir_ops) | set(SCALAR_OPS)  # scalar classes are choices too
        self.classes: dict[str, list[ENode]] = {}
        self.sort_of: dict[str, str] = {}
        self.dtype_of: dict[str, str] = {}  # IR e-class -> DType e-class (the `dtype` analysis)
        for nid, n in ser.nodes.items():
            if n["op"] == "dtype":
                self.dtype_of[ser.nodes[n["children"][0]]["eclass"]] = n["eclass"]
            if n.get("subsumed") or n["op"] in ANALYSIS_FUNCTIONS:
                continue
            node = ENode(nid, n["op"], tuple(ser.nodes[c]["eclass"] for c in n["children"]), n["eclass"])
            self.classes.setdefault(node.eclass, []).append(node)
        for cid, data in ser.class_data.items():
            self.sort_of[cid] = data.get("type", "")
        for nodes in self.classes.values():
            nodes.sort(key=lambda n: n.id)  # serialisation order is not stable across processes
        root = [n for nodes in self.classes.values() for n in nodes if n.op == "Root"]
        if len(root) != 1:
            raise ExtractionError(f"expected one Root node, found {len(root)}")
        self.root = root[0]
        self._levels = self._compute_levels()
        self._lowest: dict[tuple[str, bool], ENode] = {}

    def is_ir(self, node: ENode) -> bool:
        return node.op in self.ir_ops

    def ir_nodes(self, eclass: str) -> list[ENode]:
        return [n for n in self.classes.get(eclass, ()) if self.is_ir(n)]

    def _compute_levels(self) -> dict[str, int]:
        """Height of the lowest finite term of every e-class (Knuth's generalisation of Dijkstra:
        a node's height is 1 + the max of its children's, final once all children are final)."""
        import heapq

        level: dict[str, int] = {}
        pending: dict[str, int] = {}
        parents: dict[str, list[ENode]] = {}
        heap: list[tuple[int, str]] = []
        for nodes in self.classes.values():
            for n in nodes:
                kids = set(n.children)
                pending[n.id] = len(kids)
                for c in kids:
                    parents.setdefault(c, []).append(n)
                if not kids:
                    heapq.heappush(heap, (1, n.eclass))
        while heap:
            h, cid = heapq.heappop(heap)
            if cid in level:
                continue
            level[cid] = h
            for p in parents.get(cid, ()):
                pending[p.id] -= 1
                if pending[p.id] == 0 and p.eclass not in level:
                    heapq.heappush(heap, (1 + max(level[c] for c in p.children), p.eclass))
        return level

    def lowest(self, eclass: str, ir_only: bool = False) -> ENode:
        """A node of minimal height (ties: smallest id): always part of a finite, acyclic term."""
        hit = self._lowest.get((eclass, ir_only))
        if hit is not None:
            return hit
        self._lowest[(eclass, ir_only)] = n = self._find_lowest(eclass, ir_only)
        return n

    def _find_lowest(self, eclass: str, ir_only: bool) -> ENode:
        lv = self._levels
        best = None
        for n in self.classes.get(eclass, ()):
            if ir_only and not self.is_ir(n):
                continue
            if all(c in lv for c in n.children):
                h = 1 + max((lv[c] for c in n.children), default=0)
                if best is None or h < best[0]:
                    best = (h, n)
        if best is None:
            raise ExtractionError(f"e-class {eclass} has no finite term")
        return best[1]

    def descending(self, eclass: str) -> list[ENode]:
        """IR nodes whose children are all strictly lower than the class: safe against cycles."""
        lv = self._levels
        own = lv.get(eclass)
        return [n for n in self.ir_nodes(eclass)
                if own is not None and all(c in lv and lv[c] < own for c in n.children)]


class Candidate:
    """One e-node choice per reachable IR e-class."""

    def __init__(self, index: EGraphIndex, choice: dict[str, ENode]):
        self.index = index
        self.choice = choice

    def key(self) -> tuple:
        return tuple(sorted((c, n.id) for c, n in self.choice.items()))

    @staticmethod
    def default(index: EGraphIndex) -> Candidate:
        return Candidate.build(index, lambda cid, nodes: index.lowest(cid, ir_only=True))

    @staticmethod
    def random(index: EGraphIndex, rng: random.Random) -> Candidate:
        return Candidate.build(index, lambda cid, nodes: rng.choice(nodes))

    @staticmethod
    def build(index: EGraphIndex, pick, base: dict[str, ENode] | None = None) -> Candidate:
        """Walk from the root choosing with ``pick`` (or ``base``), repairing cycles.

        A pick whose child is an e-class on the current path would close a cycle.  We first try
        another node of the class that avoids the path; failing that, we force the class (or the
        class it hit) to its lowest node and walk again.  Lowest nodes have strictly lower children,
        so forcing every class gives an acyclic program and the loop ends."""
        forced: set[str] = set()
        for _ in range(len(index.classes) + 1):
            choice: dict[str, ENode] = {}
            on_path: dict[str, None] = {}  # insertion-ordered: the current walk from the root
            try:
                for cid in list_items(index, index.root.children[0]):
                    _walk(index, cid, pick, base, forced, choice, on_path)
                return Candidate(index, choice)
            except _Cycle as cyc:
                # force the first class of the cycle that is not forced yet; forced classes take
                # strictly descending nodes, so once every member is forced the cycle is gone
                loop = cyc.path[cyc.path.index(cyc.hit):] + [cyc.cid]
                free = [c for c in loop if c not in forced]
                if not free:  # pragma: no cover - lowest nodes never form a cycle
                    break
                forced.add(free[0])
        raise ExtractionError("could not find an acyclic candidate")  # pragma: no cover


class _Cycle(Exception):
    def __init__(self, cid: str, hit: str, path: list[str]):
        self.cid, self.hit, self.path = cid, hit, path


def _walk(index, cid, pick, base, forced, choice, on_path) -> None:
    if cid in choice:
        return
    nodes = index.ir_nodes(cid)
    if not nodes:
        return  # not an IR class (views, exprs, dtypes...)
    on_path[cid] = None  # a node may reach its own class directly (x*1 = x)
    if cid in forced:
        n = index.lowest(cid, ir_only=True)
    else:
        n = base[cid] if base is not None and cid in base else pick(cid, nodes)
        if any(c in on_path for c in n.children):
            ok = [m for m in nodes if not any(c in on_path for c in m.children)]
            n = ok[0] if ok else n
    hit = next((c for c in n.children if c in on_path), None)
    if hit is not None:
        raise _Cycle(cid, hit, list(on_path))
    for c in n.children:
        _walk(index, c, pick, base, forced, choice, on_path)
    del on_path[cid]
    choice[cid] = n


def list_items(index: EGraphIndex, cid: str) -> list[str]:
    """The element classes of an IList class (an ICons/INil chain)."""
    out = []
    while True:
        node = next((n for n in index.classes[cid] if n.op in ("ICons", "INil")), None)
        if node is None or node.op == "INil":
            return out
        out.append(node.children[0])
        cid = node.children[1]


# ============================================================================ decoding
class Decoder:
    def __init__(self, index: EGraphIndex, ser: SerializedEGraph):
        self.index = index
        self.ser = ser
        self._cache: dict[object, object] = {}

    def prim_value(self, cid: str) -> str:
        node = self.index.classes[cid][0]
        return node.op

    def string(self, cid: str) -> str:
        return json.loads(self.prim_value(cid))

    def int(self, cid: str) -> int:
        return int(self.prim_value(cid))

    def expr(self, cid: str) -> Expr:
        hit = self._cache.get(cid)
        if hit is not None:
            return hit  # type: ignore[return-value]
        n = self.index.lowest(cid)
        op = n.op
        if op == "MNum":
            e = const(self.int(n.children[0]))
        elif op == "MVar":
            e = sym(self.string(n.children[0]))
        elif op == "MIter":
            e = sym(INDEX_VAR)
        else:
            a, b = (self.expr(c) for c in n.children)
            e = {"MAdd": lambda: a + b, "MMul": lambda: a * b, "MDiv": lambda: a // b, "MMod": lambda: a % b,
                 "MMin": lambda: smin(a, b), "MMax": lambda: smax(a, b), "MLt": lambda: a.lt(b)}[op]()
        self._cache[cid] = e
        return e

    def elist(self, cid: str) -> tuple[Expr, ...]:
        hit = self._cache.get(("elist", cid))
        if hit is None:
            hit = self._cache[("elist", cid)] = self._elist(cid)
        return hit  # type: ignore[return-value]

    def _elist(self, cid: str) -> tuple[Expr, ...]:
        out = []
        while True:
            n = self.index.lowest(cid)
            if n.op == "ENil":
                return tuple(out)
            out.append(self.expr(n.children[0]))
            cid = n.children[1]

    def dtype(self, cid: str):
        n = self.index.lowest(cid)
        return CTOR_DTYPE[n.op]

    def view(self, cid: str) -> ShapeTracker:
        hit = self._cache.get(("view", cid))
        if hit is None:
            hit = self._cache[("view", cid)] = self._view(cid)
        return hit  # type: ignore[return-value]

    def _view(self, cid: str) -> ShapeTracker:
        n = self.index.lowest(cid)
        if n.op == "Contig":
            return ShapeTracker.contiguous(self.elist(n.children[0]))
        if n.op == "Stacked":
            outer, inner = self.view(n.children[0]), self.view(n.children[1])
            return ShapeTracker(inner.views + outer.views)
        if n.op == "Strided":
            shape, strides, off = self.elist(n.children[0]), self.elist(n.children[1]), self.expr(n.children[2])
            return ShapeTracker((View(shape, strides, off),))
        if n.op == "Masked":
            shape, strides = self.elist(n.children[0]), self.elist(n.children[1])
            off = self.expr(n.children[2])
            lo, hi = self.elist(n.children[3]), self.elist(n.children[4])
            return ShapeTracker((View(shape, strides, off, tuple(zip(lo, hi))),))
        raise ExtractionError(f"unknown view constructor {n.op}")
