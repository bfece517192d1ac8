"""Profiling-guided search over the programs an e-graph holds, in three phases.

1. :func:`saturate`: encode the graph, run the backend's rulesets (capped), serialise and index
   the e-graph (or load it from the cache).
2. :func:`candidates`: the programs to try, a function of the e-graph, the options and the seed
   only: the primitive-only default, the greedy one, the fused one, then random draws and
   mutations of the fused one (so the *list* is reproducible; only the choice depends on times).
3. :func:`measure`: lower a candidate, run it once on representative inputs (made once per shape
   in a :func:`session`, only when something is measured) and time it through ``backend.time``;
   one far slower than the best gets a single timed run; the fastest few are re-timed interleaved.

Decisions are cached by the e-graph's key, the device identity and the backend's code hash; a
cached decision measures and generates nothing.  Crashing candidates are rejected, not fatal.
``LIGHTSPEED_LOG=search`` prints the report, ``LIGHTSPEED_LOG=egraph`` the per-rule statistics.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import itertools
import math
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import cache
from . import dtypes as dt
from .egraph import SCHEMA, Candidate, EGraphIndex, EGraphRunner, SerializedEGraph, encode_graph, rules_producing
from .egraph.decl import GENERIC_OPS
from .egraph.extract import ENode
from .egraph.llir import LProgram, decode_program
from .egraph.runner import EGGLOG_VERSION
from .errors import LightspeedError
from .graph import Graph
from .primitives import PRIMITIVES
from .program import BucketedProgram, CandidateResult, Program, SearchReport

__all__ = ["SearchOptions", "SearchReport", "search_program", "compile_searched", "BucketedProgram",
           "session", "progress"]


@dataclass
class SearchOptions:
    """``budget``: candidates to measure (the default candidate included); ``seed``: makes the
    draws reproducible; ``dims``: representative dim values for profiling (unbound symbols get
    ``default_dim``); ``repeats``: timed runs per candidate (the minimum counts); ``iterations``:
    cap on rule applications per ruleset."""

    budget: int = 8
    seed: int = 0
    dims: Mapping[str, int] | None = None
    default_dim: int = 16
    repeats: int = 3
    iterations: int = 8
    max_enodes: int = 500_000  # stop growing the e-graph past this many rows
    mutation_rate: float = 0.3
    # what the search is doing, to a session's ``say`` or stderr (None: only on a terminal)
    progress: bool | None = None
    # per symbol, inclusive (lo, hi) ranges: one program is searched per bucket (combination)
    dim_buckets: Mapping[str, Sequence[tuple[int, int]]] | None = None
    # stop drawing candidates after this many seconds of search (the default, greedy and fused
    # candidates are always measured); None: only ``budget`` limits the search
    time_budget: float | None = None
    # candidates whose intermediates need more bytes than this at the profiling dims are rejected
    # without running (a broadcast product of a large matmul can need gigabytes)
    max_memory: int = 1 << 30
    # compile a run of repeated layers once (lightspeed.rolling): saturation stops growing with depth
    roll: bool = True
    # time candidates with the inputs of static shape resident (a model's weights, which its caller
    # persists): what they alone decide (stacked weights) is then computed once, not per call
    static_resident: bool = False


# bumped when the way decisions are made changes, so cached decisions of an older search are not
# reused; the decision key also hashes this module's source, so any change here invalidates them
SEARCH_VERSION = 4
CUTOFF = 3.0  # a candidate whose first timed run is this many times the best so far gets no more runs
TIE = 1.05  # re-timed finalists this close to the fastest are a tie
# ... and one at most half as many bytes (a float copy of GGUF blocks not made) within this much
LEAN_TIE = 1.25
_SEARCH_SOURCE = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


# a host backend's decision measured while other processes kept more than this share of the CPUs
# busy is used but not cached (a compile beside another job once cached an 8x slower program);
# $LIGHTSPEED_SEARCH_CONTENDED overrides it (1.0: always cache)
CONTENDED = 0.15


def contended_limit() -> float:
    try:
        return float(os.environ.get("LIGHTSPEED_SEARCH_CONTENDED", CONTENDED))
    except ValueError:
        return CONTENDED


def _cpu_ticks() -> tuple[float, float] | None:
    """(busy seconds of every CPU, CPU seconds of this process and its children) now, or None
    where /proc/stat is not readable (the check is then skipped)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    # user, nice, system, irq, softirq: the CPUs' work (not idle, iowait, nor a hypervisor's steal,
    # which is no process here and would keep a busy host's every decision out of the cache)
    busy = sum(fields[i] for i in (0, 1, 2, 5, 6) if i < len(fields))
    t = os.times()  # this process's threads and its finished children (the C compiler of the kernels)
    return busy / hz, t.user + t.system + t.children_user + t.children_system


PROBE_MIN_SECONDS = 0.5  # shorter searches are not judged: the kernel counts CPU time in 10 ms ticks


def others_busy(before: tuple[float, float] | None, after: tuple[float, float] | None, wall: float) -> float:
    """The share of the machine's CPUs other processes kept busy between two :func:`_cpu_ticks`
    over ``wall`` seconds (0 where unknown or too short to tell)."""
    if before is None or after is None or wall < PROBE_MIN_SECONDS:
        return 0.0
    others = (after[0] - before[0]) - (after[1] - before[1])
    return min(1.0, max(0.0, others / (wall * (os.cpu_count() or 1))))


def _log(kind: str) -> bool:
    return kind in os.environ.get("LIGHTSPEED_LOG", "").split(",")


_REPRESENTATIVE: dict[tuple, np.ndarray] = {}  # (shape, dtype, seed) -> array, LRU, for profiling only
_REPRESENTATIVE_BYTES = 2 << 30
# a candidate needing over 16x the intermediates of one that ran (and 32 MiB) is not run: it cannot
# win, and it would set the compile's peak memory (the primitive-only head: vocabulary x hidden)
BLOATED_RATIO, BLOATED_FLOOR = 16, 32 << 20
_POOL = 1 << 20  # larger float inputs repeat a pool of this many normals (drawing 10^8 takes seconds)
_LOCAL = threading.local()  # depth: sessions open; say: where progress goes


@contextlib.contextmanager
def session(say: Callable[[str], None] | None = None) -> Iterator[None]:
    """Searches inside share representative inputs (prelude and epilogue, prefill and decode read one
    embedding), freed when the outermost session ends; with ``say``, their progress goes to it."""
    depth, prev = getattr(_LOCAL, "depth", 0), getattr(_LOCAL, "say", None)
    _LOCAL.depth, _LOCAL.say = depth + 1, say or prev
    try:
        yield
    finally:
        _LOCAL.depth, _LOCAL.say = depth, prev
        if depth == 0:
            _REPRESENTATIVE.clear()


def progress(opts: SearchOptions, msg: str) -> None:
    """To the session's ``say``, else to stderr if ``opts.progress`` (None: a terminal) or LIGHTSPEED_LOG=search."""
    say = getattr(_LOCAL, "say", None)
    if opts.progress is not False and say is not None:
        say(msg)
    elif say is None and (opts.progress or _log("search") or (opts.progress is None and sys.stderr.isatty())):
        print(f"[search] {msg}", file=sys.stderr, flush=True)


def _representative(shape: tuple[int, ...], dtype: Any, seed: int) -> np.ndarray:
    """Standard normal floats (a seeded pool repeated over larger arrays), zeros for ints and
    bools (valid indexes for every gather); once per (shape, dtype, seed) in a session."""
    key = (shape, dtype.name, seed)
    hit = _REPRESENTATIVE.pop(key, None)
    if hit is None:
        if dtype.block:  # random blocks, finite scales
            hit = importlib.import_module(dt.BLOCK_CODEC).random_quant(dtype.name, shape, seed)
        elif dtype.is_float:
            n = math.prod(shape)
            pool = np.random.default_rng([seed, *shape]).standard_normal(min(n, _POOL), np.float32).astype(dtype.np)
            hit = np.empty(n, dtype.np)  # one write pass (np.resize makes a concatenated copy first)
            if n:
                k = n // pool.size * pool.size
                hit[:k].reshape(-1, pool.size)[:] = pool
                hit[k:] = pool[:n - k]
            hit = hit.reshape(shape)
        else:
            hit = np.zeros(shape, dtype=dtype.np)
        while _REPRESENTATIVE and sum(a.nbytes for a in _REPRESENTATIVE.values()) + hit.nbytes > _REPRESENTATIVE_BYTES:
            _REPRESENTATIVE.pop(next(iter(_REPRESENTATIVE)))  # least recently used first
    _REPRESENTATIVE[key] = hit  # (re)inserted last: most recently used
    return hit


def representative_inputs(graph: Graph, dims: Mapping[str, int], seed: int) -> dict[str, np.ndarray]:
    out = {}
    for name, nid in graph.inputs.items():
        arg = graph.nodes[nid].arg
        shape = tuple(int(d.evaluate(dims)) for d in arg.shape)
        a = _representative(shape, arg.dtype, seed)
        # inputs written in place (aliased by an output) get their own copy: candidates write them
        out[name] = a.copy() if name in graph.output_aliases.values() else a
    return out


# ---------------------------------------------------------------------- phase 1: saturate
@dataclass
class Saturated:
    """A saturated e-graph and what extraction needs."""

    enc: Any  # EncodedGraph
    ser: SerializedEGraph
    index: EGraphIndex
    decls: dict[str, Any]  # constructor -> OpDecl, what the backend can run
    key: str  # cache key of the e-graph (graph text, rules, schedule, egglog)


def saturate(graph: Graph, backend: Any, opts: SearchOptions, rep: SearchReport, use_cache: bool = True) -> Saturated:
    """Encode ``graph``, run the backend's rulesets (capped by ``opts``) or load the saturated
    e-graph from the cache, and index it."""
    t0 = time.perf_counter()
    enc = encode_graph(graph)
    decls = backend.declarations()
    rules = backend.rules_text()
    rep.produced_by = rules_producing(rules, set(decls) - set(PRIMITIVES))
    rep.phases["encode"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    schedule = f"{backend.rulesets} iterations={opts.iterations} max_enodes={opts.max_enodes}"
    key = cache.digest(SCHEMA, rules, schedule, enc.program, EGGLOG_VERSION)
    cached = cache.load(f"egraph-{key}", validate=cache.check_egraph) if use_cache else None
    if cached is not None:
        ser = SerializedEGraph(cached["nodes"], cached["class_data"], cached["root_eclasses"])
        rep.rule_matches = cached["rule_matches"]
        rep.egraph_cached = True
    else:
        progress(opts, f"saturating the e-graph of {len(enc.node_globals)} nodes")
        runner = EGraphRunner()
        runner.run(SCHEMA, name="schema.egg")
        runner.run(rules, name=f"{backend.name} rules")
        runner.run(enc.program, name="graph")
        for rs in backend.rulesets:
            t_rs = time.perf_counter()
            its, why = runner.run_ruleset(rs, opts.iterations, opts.max_enodes)
            rep.rulesets[rs] = (time.perf_counter() - t_rs, its, why)
        rep.phases["saturate"] = time.perf_counter() - t0
        rep.rule_matches = dict(runner.stats.rule_matches)
        t0 = time.perf_counter()
        ser = runner.serialize("$root")
        cache.store(f"egraph-{key}", {"nodes": ser.nodes, "class_data": ser.class_data,
                                       "root_eclasses": ser.root_eclasses, "rule_matches": rep.rule_matches})
        if _log("egraph"):
            for rs, (sec, its, why) in rep.rulesets.items():
                print(f"ruleset {rs}: {sec * 1e3:.1f} ms, {its} iteration(s), stopped: {why}", file=sys.stderr)
            print(runner.stats.format(), file=sys.stderr)
    index = EGraphIndex(ser, set(decls))
    # every report has the same phases; a cached e-graph's read, check and index is its "saturate"
    rep.phases["saturate" if rep.egraph_cached else "serialize"] = time.perf_counter() - t0
    rep.phases.setdefault("serialize", 0.0)
    rep.egraph_nodes = len(ser.nodes)
    if _log("egraph"):
        print(f"e-graph: {rep.egraph_nodes} e-nodes, {len(index.classes)} e-classes"
              + (" (from the on-disk cache)" if rep.egraph_cached else ""), file=sys.stderr)
    return Saturated(enc, ser, index, decls, key)


# ---------------------------------------------------------------------- phase 2: candidates
_GENERIC = {d.name for d in GENERIC_OPS}


def _prefer_primitives(cid, nodes):
    prims = [n for n in nodes if n.op in PRIMITIVES]
    return prims[0] if prims else nodes[0]


def _prefer_backend(index: EGraphIndex, absorb: bool, avoid: frozenset[str] = frozenset(),
                    prefer: frozenset[str] = frozenset(), library: frozenset[str] = frozenset(),
                    library_first: bool = False):
    """Every backend op the rules offered, one region per op.  Among a class's backend ops of one
    rank, ``absorb`` takes the one reading the earliest values (the smallest height of its
    children: a product that normalises its A itself, from x, over the product of the normed
    rows), else the one reading the latest (the ops it could absorb stay ops of their own): the
    greedy and fused candidates differ there, so the search measures both.  Ops named in
    ``avoid`` come last (the few-rows candidate: no tensor-core tiles), in ``prefer`` first (the
    others: the tiles where offered, beside an op of the same rank such as Attention); among ops of
    one rank, those in ``library`` (vendor library calls for many rows) first with
    ``library_first``, else last."""
    levels = index._levels

    def height(n: ENode) -> int:
        h = max((levels.get(c, 1 << 30) for c in n.children), default=0)
        return h if absorb else -h

    def pick(cid, nodes):
        computed = [n for n in nodes if n.op in ("SConst", "SIota")]  # a constant or iota leaf made in place
        if computed:
            return computed[0]
        leaf = [n for n in nodes if n.op == "SLeaf"]
        if leaf:
            return leaf[0]
        # a library op (Matmul, ...) before a region: a region over a broadcast product (a reduction
        # region of Mul) is offered for every matmul-shaped SumReduce, and materialises the product;
        # a backend's own op (BlockMatmul, LtMatmul) before the generic one it specialises
        ops = sorted((n for n in nodes if n.op not in PRIMITIVES),
                     key=lambda n: (n.op in avoid, n.op not in prefer, (n.op in library) != library_first,
                                    n.op == "Fused", n.op in _GENERIC, height(n)))
        if library_first and ops and ops[0].op in prefer and ops[0].op not in library:
            # a many-rows kernel with no library op beside it (a prompt's gate and up products as one
            # tile kernel): the region over library products computes the same from them
            via = next((n for n in ops if n.op == "Fused" and _reads_library(index, n, library)), None)
            if via is not None:
                return via
        if library_first and ops and ops[0].op not in prefer | library | {"Fused"}:
            # a warp kernel computing a product (a prompt's v product into the cache: every row
            # re-reads the weight) where another op reads a library op of the same operands: that one
            mine = {c for c in ops[0].children if index.sort_of.get(c) == "IR"}
            ops = [n for n in ops[1:] + list(nodes) if any(c not in mine and any(
                m.op in library and mine & set(m.children) for m in index.classes.get(c, ()))
                for c in n.children)] or ops
        return ops[0] if ops else nodes[0]
    return pick


def _reads_library(index: EGraphIndex, region: ENode, library: frozenset[str]) -> bool:
    """Whether a ``Fused`` node's element-wise body reads (an ``SLeaf`` of) a class that holds an op
    in ``library``: not through a reduction (attention's softmax and weighted sum reach the
    projections only through reductions, and stay one kernel)."""
    seen: set[str] = set()
    todo = [c for c in region.children if index.sort_of.get(c) == "Scalar"]
    while todo:
        cid = todo.pop()
        if cid in seen:
            continue
        seen.add(cid)
        for n in index.classes.get(cid, ()):
            if n.op == "SLeaf":
                if any(m.op in library for m in index.classes.get(n.children[0], ())):
                    return True
            elif n.op not in ("SSumReduce", "SMaxReduce"):
                todo.extend(c for c in n.children if index.sort_of.get(c) == "Scalar")
    return False


def _stacked_slice(index: EGraphIndex, cid: str, node: ENode) -> str | None:
    """The ``Matmul`` class whose column slice ``node`` computes ``Matmul`` class ``cid`` as (a
    region whose body is one ``SLeaf`` of it: codegen/stacked.egg), or None."""
    if node.op != "Fused":
        return None
    return next((m.children[0] for c in node.children if index.sort_of.get(c) == "Scalar"
                 for m in index.classes.get(c, ()) if m.op == "SLeaf" and m.children[0] != cid
                 and any(k.op == "Matmul" for k in index.classes.get(m.children[0], ()))), None)


def _prefer_stacked(index: EGraphIndex, base, least: int = 2, alone: bool = False):
    """``base``, but products take slices of stacks of ``least`` products or more, each whole or not
    at all, the most classes first (q+k+v before a pair; ties one way); a region leaf reads no other
    stack (``pick.unused``); ``alone``: no stack with a product in a larger one (gate + up, not q+k)."""
    offered: dict[str, dict[str, ENode]] = {}  # stack -> {product class: its slice}
    for cid, nodes in index.classes.items():
        for n in nodes if any(m.op == "Matmul" for m in nodes) else ():
            if (whole := _stacked_slice(index, cid, n)) is not None:
                offered.setdefault(whole, {})[cid] = n
    taken: dict[str, ENode] = {}
    inner = set().union(*(s.keys() for s in offered.values() if len(s) > least)) if alone else set()
    for whole in sorted(offered, key=lambda w: (-len(offered[w]), w)):
        if len(offered[whole]) >= least and not offered[whole].keys() & (taken.keys() | inner):
            taken.update(offered[whole])
    used = {w for w, slices in offered.items() if all(taken.get(c) is n for c, n in slices.items())}

    def pick(cid, nodes):
        keep = [n for n in nodes if not (n.op == "SLeaf" and n.children[0] in pick.unused)]
        return taken[cid] if cid in taken else base(cid, keep or nodes)
    pick.unused = set(offered) - used
    return pick


def _integer(index: EGraphIndex, cid: str) -> bool:
    """Whether IR e-class ``cid`` holds integers (its `dtype` analysis names an int dtype)."""
    dtype = index.dtype_of.get(cid)
    return dtype is not None and any(n.op in ("I32", "I64") for n in index.classes.get(dtype, ()))


def _fuse_single_use(first: Candidate, backend_pick, avoid: frozenset[str] | set[str] = frozenset(),
                     views: bool = False):
    """Regions grown over producers that have one reader in ``first`` (no recomputation), or that
    compute integers (index arithmetic: recomputed by every reader); with ``views``, over regions
    that only read a product through a view, for any readers (stacked products' slices, which were
    copies).  A region leaf reads no class in ``avoid`` where another form exists."""
    uses: dict[str, int] = {}
    for n in first.choice.values():
        for c in set(n.children):
            uses[c] = uses.get(c, 0) + 1

    def view_of(cid: str, ch: dict = first.choice) -> bool:  # a region whose body is one leaf of a product
        region = ch[cid] if getattr(ch.get(cid), "op", None) == "Fused" else None
        bodies = [ch[c] for c in getattr(region, "children", ()) if getattr(ch.get(c), "op", None) == "SLeaf"]
        return any(getattr(ch.get(b.children[0]), "op", "Fused") != "Fused" for b in bodies)

    def pick(cid, nodes):
        computed = next((n for n in nodes if n.op in ("SConst", "SIota")), None)
        if computed is not None:
            return computed
        leaves = [n for n in nodes if n.op == "SLeaf"]
        leaf = next((n for n in leaves if n.children[0] not in avoid), next(iter(leaves), None))
        if leaf is not None:
            inline = sorted((n for n in nodes if n.op == "SInline"), key=lambda n: any(
                m.op == "SLeaf" and m.children[0] in avoid for m in first.index.classes.get(n.children[0], ())))
            # the leaf's producer (children[0]) is read only here and is a region in ``first``
            # (not a library op such as Matmul, whose region form would materialise a broadcast
            # product): compute it inline
            producer = first.choice.get(leaf.children[0])
            single = uses.get(leaf.children[0], 0) <= 1 and uses.get(cid, 0) <= 1
            region = producer is None or producer.op == "Fused"
            # integer regions (index arithmetic) are cheaper to recompute than to store and load
            single = single or _integer(first.index, leaf.children[0]) or (views and view_of(leaf.children[0]))
            return inline[0] if inline and single and region else leaf
        return backend_pick(cid, nodes)
    return pick


def candidates(index: EGraphIndex, opts: SearchOptions, many_rows: frozenset[str] = frozenset(),
               library: frozenset[str] = frozenset()) -> Iterator[tuple[str, Candidate]]:
    """The candidates to measure, in order, as a function of the e-graph, the options and the seed
    alone (never of measured times, so a search is reproducible): the primitive-only default, the
    greedy one (every backend op), where the e-graph holds ops named in ``many_rows``
    (tensor-core tiles) the fused one without them (``few-rows``: the greedy and fused ones take
    the tiles wherever offered, which a decode row runs far slower than the warp kernels), the
    fused one (regions over single-reader producers; where the e-graph holds stacked products,
    ``stacked`` before it: the greedy one taking them), then alternately random draws and mutations of the
    fused one (a fraction of its real choices flipped).  Where the e-graph holds many-rows ops in
    ``library`` (cuBLASLt for a prompt's products), the greedy candidate takes them (and, where a
    tile kernel has no library op beside it, the region over library products) with its regions
    grown as the fused one's; the fused candidate keeps the tiles.  Duplicates are skipped; at most
    ``opts.budget`` are yielded (and the stacked candidates where offered)."""
    rng = random.Random(opts.seed)
    seen: set[tuple] = set()
    default = Candidate.build(index, _prefer_primitives)
    greedy = Candidate.build(index, _prefer_backend(index, absorb=False, prefer=many_rows))
    fused = Candidate.build(index, _fuse_single_use(greedy, _prefer_backend(index, absorb=True, prefer=many_rows,
                                                                            library=library)))
    fixed = [("default", default), ("greedy", greedy), ("fused", fused)]
    if library and any(n.op in library for nodes in index.classes.values() for n in nodes):
        # the library's many-rows ops (cuBLASLt for a prompt's products) as the greedy candidate, regions
        # grown as the fused one's (it keeps the tiles, few-rows the warp kernels): a budget of 3 times them
        pick = _prefer_backend(index, absorb=False, prefer=many_rows, library=library, library_first=True)
        fixed[1] = ("greedy", Candidate.build(index, _fuse_single_use(Candidate.build(index, pick), pick)))
    stacks = 0  # products over stacked weights (codegen/stacked.egg): the greedy candidate taking every stack
    # (no other does: a slice's region looks no cheaper than its product), only q+k+v, only gate+up; beside the budget
    if any(_stacked_slice(index, c, n) is not None for c, nodes in index.classes.items() for n in nodes):
        base = _prefer_backend(index, absorb=False, prefer=many_rows, library=library, library_first=bool(library))
        for origin, least, alone in (("stacked", 2, False), ("stacked-qkv", 3, False), ("stacked-glu", 2, True)):
            stack = _prefer_stacked(index, base, least, alone)
            cand = Candidate.build(index, _fuse_single_use(Candidate.build(index, stack), stack, stack.unused, True))
            if all(cand.key() != c.key() for _, c in fixed[2:2 + stacks]):
                fixed.insert(2 + stacks, (origin, cand))
                stacks += 1
    if many_rows and any(n.op in many_rows for n in fused.choice.values()):
        # third, before the fused one (which mixes norm-absorbing products with tiles, rarely the fastest)
        few = Candidate.build(index, _prefer_backend(index, absorb=False, avoid=many_rows))
        fixed.insert(2, ("few-rows", Candidate.build(
            index, _fuse_single_use(few, _prefer_backend(index, absorb=True, avoid=many_rows)))))
    open_ = sorted(c for c in fused.choice if len(index.ir_nodes(c)) > 1)
    budget = max(1, opts.budget) + stacks
    for k in range(4 * budget + 3):
        if len(seen) >= budget:
            break
        if k < len(fixed):
            origin, cand = fixed[k]
        elif k % 2 == 1 and open_:
            flips = set(rng.sample(open_, max(1, round(len(open_) * opts.mutation_rate))))
            base = {c: n for c, n in fused.choice.items() if c not in flips}

            def other(cid, nodes, prev=fused.choice):
                return rng.choice([n for n in nodes if n is not prev.get(cid)] or nodes)
            origin, cand = "mutation", Candidate.build(index, other, base)
        else:
            origin, cand = "random", Candidate.random(index, rng)
        key = cand.key()
        if key not in seen:
            seen.add(key)
            yield origin, cand


# ---------------------------------------------------------------------- phase 3: measure
@dataclass
class _Measured:
    seconds: float
    index: int
    lprog: LProgram
    cand: Candidate
    prog: Program
    need: int  # bytes of intermediates at the profiling dims
    recomputed: bool = False  # cheap values recomputed for late readers (LProgram.rematerialized)


def measure(graph: Graph, backend: Any, lprog: LProgram, inputs: Mapping[str, Any], dims: Mapping[str, int],
            repeats: int, cutoff: float | None = None, static_resident: bool = False) -> tuple[Program, float]:
    """Lower ``lprog``, run it once (checking the output shapes) and time it through the backend:
    one run, then ``repeats - 1`` more unless it took over ``cutoff`` s (it cannot win: kept as is).
    ``static_resident``: timed with the static-shaped inputs persisted (returned: the program itself)."""
    compiled = prog = backend.lower(graph, lprog)
    fixed = {k for k, nid in graph.inputs.items() if static_resident and k in inputs
             and not any(d.free_vars() for d in graph.nodes[nid].shape)}
    if fixed:
        prog = prog.persist({k: inputs[k] for k in fixed})
        inputs = {k: v for k, v in inputs.items() if k not in fixed}
    out = prog(inputs, dims=dims)
    for name, nid in graph.outputs.items():
        want = tuple(int(d.evaluate(dims)) for d in graph.nodes[nid].shape)
        if tuple(out[name].shape) != want:
            raise LightspeedError(f"output {name!r} has shape {tuple(out[name].shape)}, expected {want}")
    sec = backend.time(prog, inputs, dims, 1)
    if repeats > 1 and (cutoff is None or sec <= cutoff):
        sec = min(sec, backend.time(prog, inputs, dims, repeats - 1))
    return compiled, sec



def search_program(graph: Graph, backend: Any, opts: SearchOptions, use_cache: bool = True
                   ) -> tuple[LProgram, SearchReport]:
    """Saturate, then take the cached decision or measure the candidates and keep the fastest.
    A cached entry that passes its checks but still cannot be used (it fails to index, extract or
    decode) is discarded and everything is recomputed: a bad entry is never fatal."""
    rep = SearchReport()
    try:
        return _search(graph, backend, opts, rep, use_cache)
    except (LightspeedError, KeyError, IndexError, ValueError, TypeError, AttributeError) as e:
        if not (rep.egraph_cached or rep.decision_cached):
            raise
        cache.report("search", f"a cached entry could not be used ({type(e).__name__}: {e}); recomputing")
    return search_program(graph, backend, opts, use_cache=False)


def _search(graph: Graph, backend: Any, opts: SearchOptions, rep: SearchReport, use_cache: bool
            ) -> tuple[LProgram, SearchReport]:
    sat = saturate(graph, backend, opts, rep, use_cache)
    dims = {s: int(opts.dims[s]) if opts.dims and s in opts.dims else opts.default_dim for s in graph.symbols()}
    rep.profile_dims = dims
    # a decision is the device's and the backend code's: a changed kernel or rule never reuses it
    decision_key = cache.digest(SEARCH_VERSION, _SEARCH_SOURCE, sat.key, backend.device(), backend.code_hash(),
                                repr(sorted(dims.items())), opts.seed, opts.budget, opts.repeats, opts.mutation_rate,
                                opts.time_budget, opts.max_memory, opts.static_resident)
    decided = cache.load(f"search-{decision_key}", validate=cache.decision_validator(sat.ser.nodes)) \
        if use_cache else None
    by_id = {n.id: n for nodes in sat.index.classes.values() for n in nodes} if decided else {}
    if decided and all(nid in by_id for nid in decided["choice"].values()):  # only the choice is decoded
        rep.decision_cached = True
        t0 = time.perf_counter()
        cand = Candidate(sat.index, {c: by_id[nid] for c, nid in decided["choice"].items()})
        rep.program = decode_program(cand, sat.ser, sat.enc.constants, sat.decls)
        if decided.get("recomputed"):  # the winner recomputed cheap values to fit max_memory
            rep.program = rep.program.rematerialized()
        rep.phases["extract"], rep.phases["profile"] = time.perf_counter() - t0, 0.0
        rep.candidates = [CandidateResult(**c) for c in decided["candidates"]]
        rep.winner, rep.decision_cached, rep.program_text = decided["winner"], True, str(rep.program)
        return rep.program, rep

    t_extract = t_profile = 0.0
    t_start = time.perf_counter()
    ticks = _cpu_ticks() if not getattr(backend, "device_memory", False) else None  # host timings only
    inputs: dict[str, Any] | None = None  # made on the device once, when the first candidate runs
    best: _Measured | None = None
    finalists: list[_Measured] = []
    first_error: Exception | None = None
    leanest: int | None = None  # the fewest intermediate bytes of a candidate that ran
    # resident inputs' values are made once, not counted as intermediates (stacked weights)
    static = frozenset(k for k, nid in graph.inputs.items() if opts.static_resident
                       and not any(d.free_vars() for d in graph.nodes[nid].shape))
    many_rows = frozenset(name for name, d in sat.decls.items() if getattr(d, "many_rows", False))
    library = frozenset(name for name, d in sat.decls.items() if getattr(d, "library", False))
    # the default measured after greedy and fused: it is cut short
    listed = candidates(sat.index, opts, many_rows, library)
    head = list(enumerate(itertools.islice(listed, 3)))
    stream = itertools.chain(head[1:], head[:1], enumerate(listed, start=len(head)))
    n_measured = 0
    while True:
        if opts.time_budget is not None and n_measured >= 3 and time.perf_counter() - t_start > opts.time_budget:
            break
        t0 = time.perf_counter()
        nxt = next(stream, None)
        if nxt is None:
            break
        n_measured += 1
        i, (origin, cand) = nxt
        progress(opts, f"candidate {n_measured}/{opts.budget} ({origin})"
                 + (f"; best {best.seconds * 1e3:.3f} ms" if best else ""))
        try:
            lprog = decode_program(cand, sat.ser, sat.enc.constants, sat.decls)
        except LightspeedError as e:
            rep.candidates.append(CandidateResult(i, origin, {}, None, f"decode: {e}"))
            t_extract += time.perf_counter() - t0
            continue
        t_extract += time.perf_counter() - t0
        t0 = time.perf_counter()
        ops = lprog.count()
        need = lprog.peak_bytes(dims, static) + lprog.dequantised_bytes(dims)
        recomputed = False
        if need > opts.max_memory:  # recompute cheap values for their late readers: does it fit then?
            lean = lprog.rematerialized()
            if lean is not lprog:
                lean_need = lean.peak_bytes(dims, static) + lean.dequantised_bytes(dims)
                if lean_need <= opts.max_memory:
                    lprog, need, recomputed, ops = lean, lean_need, True, lean.count()
        if need > opts.max_memory:
            why = (f"needs {need / 2**20:.0f} MiB of intermediates at dims {dims} "
                   f"(max_memory {opts.max_memory / 2**20:.0f} MiB)")
            rep.candidates.append(CandidateResult(i, origin, ops, None, why))
            continue
        if leanest is not None and need > max(BLOATED_FLOOR, BLOATED_RATIO * leanest):  # (a broadcast product)
            why = f"needs {need / 2**20:.0f} MiB of intermediates, over {BLOATED_RATIO}x a measured candidate's"
            rep.candidates.append(CandidateResult(i, origin, ops, None, why))
            continue
        if inputs is None:
            inputs = {k: backend.to_device(v) for k, v in representative_inputs(graph, dims, opts.seed).items()}
        try:
            cutoff = CUTOFF * best.seconds if best is not None else None
            prog, sec = measure(graph, backend, lprog, inputs, dims, opts.repeats, cutoff, opts.static_resident)
            rep.candidates.append(CandidateResult(i, origin + ("+recompute" if recomputed else ""), ops, sec))
            m = _Measured(sec, i, lprog, cand, prog, need, recomputed)
            leanest = need if leanest is None else min(leanest, need)
            finalists = sorted([*finalists, m], key=lambda f: f.seconds)[:3]  # only these keep their programs
            if best is None or sec < best.seconds:
                best = m
        except Exception as e:  # a crashing candidate is rejected, not fatal
            first_error = first_error or e
            rep.candidates.append(CandidateResult(i, origin, ops, None, f"{type(e).__name__}: {e}"))
        t_profile += time.perf_counter() - t0
    rep.candidates.sort(key=lambda c: c.index)
    finalists = [f for f in finalists if f.seconds <= CUTOFF * finalists[0].seconds]  # could still win
    if len(finalists) > 1:
        # a load spike during one candidate's runs can crown the wrong one (and the decision is
        # cached): re-time the three fastest in interleaved rounds and keep the best of all rounds
        t0 = time.perf_counter()
        progress(opts, f"re-timing the {len(finalists)} fastest")
        again = {f.index: f.seconds for f in finalists}
        for _ in range(max(2, opts.repeats)):
            for f in finalists:
                again[f.index] = min(again[f.index], backend.time(f.prog, inputs, dims, 1))
        # within TIE of the fastest is a tie, won by the fewest intermediate bytes: noise must not
        # crown a broadcast product over the Matmul that block kernels (native) read
        fastest = min(again.values())
        tied = [f for f in finalists if again[f.index] <= TIE * fastest]
        lean = [f for f in finalists if again[f.index] <= LEAN_TIE * fastest
                and 2 * f.need <= min(t.need for t in tied)]
        best = min(lean or tied, key=lambda f: (f.need, again[f.index], f.index))
        for c in rep.candidates:
            if c.index in again:
                c.seconds = again[c.index]
        t_profile += time.perf_counter() - t0
    rep.phases["extract"] = t_extract
    rep.phases["profile"] = t_profile
    if best is None:
        why = first_error or next((c.error for c in rep.candidates if c.error), "none ran")
        raise LightspeedError(f"search: every candidate failed; first error: {why}")
    rep.winner = best.index
    rep.program_text = str(best.lprog)
    rep.program = best.lprog
    rep.contention = others_busy(ticks, _cpu_ticks() if ticks is not None else None, time.perf_counter() - t_start)
    limit = contended_limit()
    if limit >= 1.0 or rep.contention <= limit:
        cache.store(f"search-{decision_key}", {"choice": {c: n.id for c, n in best.cand.choice.items()},
                                                "winner": rep.winner, "recomputed": best.recomputed,
                                                "candidates": [dataclasses.asdict(c) for c in rep.candidates]})
    else:
        msg = (f"other processes kept {rep.contention:.0%} of the CPUs busy while the candidates ran: "
               "the decision is used, not cached (the next compile measures again)")
        progress(opts, msg)
        if _log("search") or _log("cache"):
            print(f"[search] {msg}", file=sys.stderr)
    if _log("search"):
        print(rep.format(), file=sys.stderr)
    return best.lprog, rep


def _lower(graph: Graph, backend: Any, lprog: LProgram, rep: SearchReport) -> Program:
    t0 = time.perf_counter()
    prog = backend.lower(graph, lprog, rep)
    rep.lower = time.perf_counter() - t0
    return prog


@session()  # the buckets share profiling inputs
def compile_searched(graph: Graph, backend: Any, opts: SearchOptions) -> Program:
    """Search once, or once per dim bucket (profiling each bucket at a value inside it)."""
    if not opts.dim_buckets:
        lprog, rep = search_program(graph, backend, opts)
        try:
            return _lower(graph, backend, lprog, rep)
        except Exception as e:
            if not (rep.egraph_cached or rep.decision_cached):
                raise
            # a program from cached entries that does not lower: the entries were bad, recompute
            cache.report("search", f"a cached program could not be lowered ({type(e).__name__}: {e}); recomputing")
            lprog, rep = search_program(graph, backend, opts, use_cache=False)
            return _lower(graph, backend, lprog, rep)
    unknown = set(opts.dim_buckets) - graph.symbols()
    if unknown:
        raise LightspeedError(f"dim_buckets name dims {sorted(unknown)} that the graph does not use")
    names = sorted(opts.dim_buckets)
    for n in names:
        for lo, hi in opts.dim_buckets[n]:
            if not 0 <= lo <= hi:
                raise LightspeedError(f"dim bucket {(lo, hi)} for {n!r} must satisfy 0 <= lo <= hi")
    buckets = []
    for combo in itertools.product(*(opts.dim_buckets[n] for n in names)):
        ranges = dict(zip(names, combo))
        dims = dict(opts.dims or {})
        for n, (lo, hi) in ranges.items():
            dims[n] = min(hi, max(lo, opts.default_dim))
        sub = dataclasses.replace(opts, dims=dims, dim_buckets=None)
        lprog, rep = search_program(graph, backend, sub)
        buckets.append((ranges, _lower(graph, backend, lprog, rep)))
    return BucketedProgram(graph, buckets)
