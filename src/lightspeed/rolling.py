"""Loop rolling: a model of N identical layers is saturated and searched once, not N times.

A loop over layers leaves a periodic run in the node list (nodes are appended in creation order).
:func:`find_repeated_blocks` finds it in the *sequence* (reachable compute and Output nodes in id
order; inputs and *shared* nodes -- those computed from no input such as masks and rope tables,
and integer arithmetic over inputs and them (index math) -- are left out, so that layer 0, where
hash-consing puts them, looks like the others) and verifies it exactly: nodes agree position by
position (op, argument, dtype, shape, views) and each operand is the same block-local node,
shared node or *boundary* slot (outside values numbered by first use).
:func:`split_graph` cuts the graph into a prelude, one block template and an epilogue (each
rebuilding the shared nodes it reads); the compile pipeline (``lightspeed.pipeline.compile_rolled``)
compiles each and the backend composes them (``Backend.compose_rolled``).  Costs: no fusion across
a layer boundary; one template call per block.  See docs/architecture.md, "Compile-time rolling".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .graph import Graph, GraphTensor, Node

__all__ = ["RollPlan", "RollPart", "find_repeated_blocks", "split_graph"]


@dataclass(frozen=True)
class RollPlan:
    """A verified run of isomorphic blocks.  Node ids are the original graph's; ``blocks[i][j]``
    is the node at offset ``j`` of block ``i``."""

    period: int  # sequence nodes per block (compute and Output nodes)
    blocks: tuple[tuple[int, ...], ...]
    boundary: tuple[tuple[int, ...], ...]  # per block: the outside nodes it reads, by first use
    exported: tuple[int, ...]  # offsets read after their block (by a later block, the epilogue or an output)
    prelude: tuple[int, ...]  # sequence nodes before the run
    epilogue: tuple[int, ...]  # sequence nodes after it
    shared: frozenset[int]  # input-free nodes and index math: rebuilt in every part that reads them

    @property
    def count(self) -> int:
        return len(self.blocks)

    def describe(self) -> str:
        return (f"{self.count} blocks of {self.period} nodes, {len(self.boundary[0])} boundary input(s), "
                f"{len(self.exported)} exported value(s); prelude {len(self.prelude)} node(s), "
                f"epilogue {len(self.epilogue)} node(s)")


# ---------------------------------------------------------------------------------- detection
def _sequence(graph: Graph) -> tuple[list[int], set[int]]:
    """(the sequence, the shared node ids), both over the reachable graph."""
    shared: set[int] = set()
    seq: list[int] = []
    nodes = graph.nodes
    for nid in graph.reachable():
        name = nodes[nid].op.name
        if name == "Input":
            continue
        if name != "Output":
            # Constant and Iota, what is computed from them only, and integer math over them and inputs
            # (a paged step's page lookups: each layer's kernels compute them, no materialised index)
            index = nodes[nid].dtype.is_int
            if all(src in shared or (index and nodes[src].op.name == "Input") for src, _ in nodes[nid].inputs):
                shared.add(nid)
                continue
        seq.append(nid)
    return seq, shared


def _erased_arg(n: Node) -> Any:
    return None if n.op.name == "Output" else n.arg  # output names differ per layer ("new.3.k")


def _describe(nodes: list[Node], seq: list[int], pos: dict[int, int], shared: set[int]
              ) -> tuple[np.ndarray, np.ndarray]:
    """(an exact local descriptor per sequence node as an int: op, argument, dtype, shape, the
    views it reads through and which shared nodes it reads; the last reader's position per
    sequence node, or -1).  Views and descriptors are interned by equality, so equal ints mean
    equal nodes up to where their non-shared operands come from."""
    ids: dict[tuple, int] = {}
    views: dict[Any, int] = {}
    by_id: dict[int, int] = {}  # a tracker object read by several nodes is compared once
    desc = np.empty(len(seq), dtype=np.int64)
    last = [-1] * len(seq)
    for i, nid in enumerate(seq):
        n = nodes[nid]
        ins = []
        for src, st in n.inputs:
            v = by_id.get(id(st))
            if v is None:
                v = by_id[id(st)] = views.setdefault(st, len(views))
            ins.append((v, src if src in shared else -1))
            p = pos.get(src)
            if p is not None:
                last[p] = i
        desc[i] = ids.setdefault((n.op.name, _erased_arg(n), n.dtype, n.shape, tuple(ins)), len(ids))
    return desc, np.array(last, dtype=np.int64)


def _period_bounds(sig: np.ndarray, min_period: int) -> list[tuple[int, int]]:
    """(bound on the whole periods a P-periodic stretch covers, P) for every period P that could
    repeat twice, largest bound first.  A stretch with r positions where ``sig[k] == sig[k + P]``
    covers (r + P) // P periods and r is at most the number of such positions: one vectorised
    comparison per period orders and prunes the periods before any stretch is looked for."""
    out = []
    for p in range(max(1, min_period), len(sig) // 2 + 1):
        matches = int(np.count_nonzero(sig[:-p] == sig[p:]))
        if matches >= p:
            out.append(((matches + p) // p * p, p))
    out.sort(key=lambda bp: (-bp[0], bp[1]))
    return out


def _stretch(sig: np.ndarray, p: int) -> tuple[int, int] | None:
    """(start, end) of the longest P-periodic stretch ``sig[start:end]`` if it holds two periods."""
    eq = sig[:-p] == sig[p:]
    d = np.diff(eq.astype(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
    k = int(np.argmax(ends - starts))
    return (int(starts[k]), int(ends[k]) + p) if ends[k] - starts[k] >= p else None


def _choose(plans: list[RollPlan]) -> RollPlan | None:
    """The plan with the smallest period among those covering at least half of the most any
    covers.  Coverage alone would take a period of two layers and a half over one layer when a
    differing layer sits at a cut; a much larger coverage (a period of 6 layers in a 5:1 local /
    global attention stack, against 5 local layers) still wins."""
    if not plans:
        return None
    top = max(p.count * p.period for p in plans)
    return min((p for p in plans if 2 * p.count * p.period >= top), key=lambda p: (p.period, -p.count))


def _crossings(last: np.ndarray) -> np.ndarray:
    """Per cut c in 0..L: how many sequence values are made before position c and read at or after it."""
    diff = np.zeros(len(last) + 2, dtype=np.int64)
    read = np.flatnonzero(last >= 0)
    np.add.at(diff, read + 1, 1)
    np.add.at(diff, last[read] + 1, -1)
    return np.cumsum(diff)[: len(last) + 1]


def _block_key(nodes: list[Node], members: Sequence[int], desc: np.ndarray, shared: set[int]
               ) -> tuple[tuple, tuple[int, ...]]:
    """(exact isomorphism key, the boundary nodes in first-use order) of one block: the members'
    descriptors, then for each operand its block-local offset or its boundary slot, then the
    slots' shapes and dtypes (the template's Inputs)."""
    local = {nid: j for j, nid in enumerate(members)}
    boundary: dict[int, int] = {}
    slots: list[tuple] = []
    refs = []
    for nid in members:
        for src, _ in nodes[nid].inputs:
            j = local.get(src)
            if j is not None:
                refs.append(j)
            elif src not in shared:  # shared operands are in the descriptor already
                k = boundary.get(src)
                if k is None:
                    k = boundary[src] = len(boundary)
                    slots.append((nodes[src].shape, nodes[src].dtype))
                refs.append(-1 - k)
    return (desc.tobytes(), tuple(refs), tuple(slots)), tuple(boundary)


def find_repeated_blocks(graph: Graph, min_nodes: int = 4, max_checks: int = 8) -> RollPlan | None:
    """The longest verified run of at least two isomorphic blocks of at least ``min_nodes``
    compute nodes each, or None.

    1. An exact descriptor per sequence node (everything but where its operands come from) and,
       for every period P, the longest stretch with ``desc[k] == desc[k + P]``.  The wiring is
       left out on purpose: layer 0 reads the model input where layer 1 reads layer 0's output,
       and they must still look alike.
    2. Where blocks start: a stretch fixes the period, not the phase.  The phases whose cuts carry
       the fewest computed values (a layer boundary carries one: the hidden state) are tried.
    3. Exact keys (wiring included) of every block at that phase; the longest run of equal keys
       is a candidate plan.  Periods are checked best bound first (at most ``max_checks``) while
       they could still change the choice made by :func:`_choose`."""
    nodes = graph.nodes
    seq, shared = _sequence(graph)
    if len(seq) < 2 * max(1, min_nodes):
        return None
    pos = {nid: i for i, nid in enumerate(seq)}
    desc, last = _describe(nodes, seq, pos, shared)
    cross = _crossings(last)
    plans: list[RollPlan] = []
    checks = 0
    for bound, p in _period_bounds(desc, min_nodes):
        chosen = _choose(plans)
        if chosen is not None:
            top = max(q.count * q.period for q in plans)
            if 2 * bound < top:
                break  # neither this period nor any later one can cover half of the best
            if p > chosen.period and bound <= 2 * chosen.count * chosen.period:
                continue  # larger and cannot cover twice as much: never chosen (skips multiples of P)
        stretch = _stretch(desc, p)
        if stretch is None:
            continue
        if checks == max_checks:
            break
        checks += 1
        plan = _verify(nodes, seq, shared, desc, last, cross, min_nodes, p, *stretch)
        if plan is not None:
            plans.append(plan)
    return _choose(plans)


def _verify(nodes: list[Node], seq: list[int], shared: set[int], desc: np.ndarray, last: np.ndarray,
            cross: np.ndarray, min_nodes: int, period: int, start: int, end: int) -> RollPlan | None:
    """Steps 2 and 3 of :func:`find_repeated_blocks` for one stretch.  Phases are checked from
    the fewest crossing values up and the one with the most equal blocks wins: several phases
    can tie (a layer's start and the point after its attention residual both carry one value;
    in a chain of ops every cut carries one), and a layer that differs breaks one block at the
    right phase but two at a phase halfway through the layers.  Each check is O(L), so a long
    sequence gets fewer of them."""
    def phase_cost(shift: int) -> float:
        a = start + shift
        cuts = np.arange(a % period, len(seq) + 1, period)
        cuts = cuts[(cuts >= a) & (cuts <= end)]
        return float(cross[cuts].mean()) if len(cuts) else np.inf

    shifts = sorted((s for s in range(-period + 1, period) if start + s >= 0),
                    key=lambda s: (phase_cost(s), abs(s), s > 0))
    # equal keys imply equal descriptors, so a run of equal blocks lies in a periodic stretch of
    # ``desc``, and this stretch is the longest: once a phase reaches it, no other does better
    most = (end - start) // period
    best: tuple[int, int, list[int], list] | None = None  # blocks, first block index, offsets, keys
    for s in shifts[:max(4, 40_000 // len(seq))]:
        offsets = list(range((start + s) % period, len(seq) - period + 1, period))
        keys = [_block_key(nodes, seq[b:b + period], desc[b:b + period], shared) for b in offsets]
        lo = 0
        for i in range(1, len(keys) + 1):
            if i == len(keys) or keys[i][0] != keys[lo][0]:
                if best is None or i - lo > best[0]:
                    best = (i - lo, lo, offsets, keys)
                lo = i
        if best is not None and best[0] == most:
            break
    if best is None or best[0] < 2:
        return None
    n, lo, offsets, keys = best
    a = offsets[lo]
    if sum(1 for nid in seq[a:a + period] if nodes[nid].op.name != "Output") < min_nodes:
        return None
    exported = sorted({j for i in range(n) for j in range(period) if last[a + i * period + j] >= a + (i + 1) * period})
    return RollPlan(period=period, blocks=tuple(tuple(seq[b:b + period]) for b in offsets[lo:lo + n]),
                    boundary=tuple(keys[lo + i][1] for i in range(n)), exported=tuple(exported),
                    prelude=tuple(seq[:a]), epilogue=tuple(seq[a + n * period:]), shared=frozenset(shared))


# ---------------------------------------------------------------------------------- parts
@dataclass
class RollPart:
    """A part graph and how it connects to the original graph."""

    role: str  # prelude | template | epilogue
    graph: Graph
    inputs: dict[str, int]  # part input name -> original node whose value it takes
    exports: dict[str, int]  # part output name -> original node whose value it gives
    finals: dict[str, str]  # part output name -> original graph output name


def _build_part(graph: Graph, members: Sequence[int], shared: frozenset[int], exported: Sequence[int],
                boundary_name: Callable[[int, int], str], export_name: Callable[[int], str],
                output_name: Callable[[int], str], role: str) -> RollPart:
    """A new Graph holding ``members`` (sequence nodes of ``graph``, in order), the shared nodes
    they read, and an Input per outside value they read (the producer's full shape and dtype,
    read through the original views).  Built with ``add_node``, so every rule is checked again."""
    nodes = graph.nodes
    part = Graph()
    tens: dict[int, GraphTensor] = {}
    inputs: dict[str, int] = {}
    finals: dict[str, str] = {}
    need: set[int] = set()  # the shared closure the members read, rebuilt first (ids are topological)
    stack = [src for nid in members for src, _ in nodes[nid].inputs if src in shared]
    while stack:
        s = stack.pop()
        if s not in need:
            need.add(s)
            stack.extend(src for src, _ in nodes[s].inputs if src in shared)

    def operand(src: int, st) -> GraphTensor:
        t = tens.get(src)
        if t is None and _dequantised(nodes[src], nodes):  # read the blocks here: never a boundary value
            (q, qst), = nodes[src].inputs
            t = tens[src] = part.add_node(nodes[src].op, [operand(q, qst)], nodes[src].arg)
        elif t is None:  # an outside value, first use
            name = boundary_name(src, len(inputs))
            inputs[name] = src
            t = tens[src] = part.input(name, nodes[src].shape, nodes[src].dtype)
        return t.with_view(st)

    for nid in [*sorted(need), *members]:
        n = nodes[nid]
        ops = [operand(src, st) for src, st in n.inputs]
        if n.op.name == "Output":
            name = output_name(nid)
            # an output written into an input stays so when that input is one of this part's
            alias = graph.output_aliases.get(n.arg)
            src = graph.inputs.get(alias) if alias is not None else None
            part_in = next((k for k, v in inputs.items() if v == src), None) if src is not None else None
            part.output(name, ops[0], aliases=part_in)
            finals[name] = n.arg
        else:
            tens[nid] = part.add_node(n.op, ops, n.arg)
    exports = {}
    for nid in exported:
        name = export_name(nid)
        part.output(name, tens[nid])
        exports[name] = nid
    return RollPart(role, part, inputs, exports, finals)


def _dequantised(n: Node, nodes: list[Node]) -> bool:
    """A Cast of a block-dtype input (weights stored as GGML blocks): each part reads the blocks."""
    return n.op.name == "Cast" and nodes[n.inputs[0][0]].dtype.block is not None


def split_graph(graph: Graph, plan: RollPlan) -> list[RollPart]:
    """The prelude (if any), the template (block 0) and the epilogue (if any), in run order."""
    nodes = graph.nodes
    # names of values crossing outer parts: original input names, else a prefix no user name has
    taken = set(graph.inputs) | set(graph.outputs)
    prefix = "%"
    while any(name.startswith(prefix) for name in taken):
        prefix += "%"

    # names of outer parts are structural too (slot numbers, not node ids), so an epilogue that
    # reads the last layer's output compiles to the same text at any depth
    def outer_in(src: int, k: int) -> str:
        n = nodes[src]
        return n.arg.name if n.op.name == "Input" else f"{prefix}{k}"

    def outer_out(nid: int) -> str:
        return nodes[nid].arg

    later_readers: dict[int, int] = {}  # node -> last sequence position reading it
    order = [*plan.prelude, *(nid for b in plan.blocks for nid in b), *plan.epilogue]
    for i, nid in enumerate(order):
        for src, _ in nodes[nid].inputs:
            later_readers[src] = i
    parts = []
    if plan.prelude:
        end = len(plan.prelude)
        exported = [nid for nid in plan.prelude if later_readers.get(nid, -1) >= end
                    and not _dequantised(nodes[nid], nodes)]
        slot = {nid: j for j, nid in enumerate(exported)}
        parts.append(_build_part(graph, plan.prelude, plan.shared, exported, outer_in,
                                 lambda nid: f"{prefix}x{slot[nid]}", outer_out, "prelude"))
    block0 = plan.blocks[0]
    offset = {nid: j for j, nid in enumerate(block0)}
    # the template's names depend only on its structure, so the same layer compiles to the same
    # graph text (and hits the on-disk cache) whatever the model's depth or input names
    parts.append(_build_part(graph, block0, plan.shared, [block0[j] for j in plan.exported],
                             lambda _src, k: f"b{k}", lambda nid: f"e{offset[nid]}",
                             lambda nid: f"o{offset[nid]}", "template"))
    if plan.epilogue:
        parts.append(_build_part(graph, plan.epilogue, plan.shared, [], outer_in,
                                 lambda nid: f"{prefix}x{nid}", outer_out, "epilogue"))
    return parts
