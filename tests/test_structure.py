"""The package's shape: no import cycles between modules (every import that can run counts,
function-level ones included), backends that never import the compile pipeline (the core calls
backends, never the reverse), no private names imported across modules, and a core that stays
small (graph, shapes, ops, e-graph encoding, search and the pipeline; every backend, frontend,
model family and file format is a package around it)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src" / "lightspeed"
# packages around the core; everything else under src/lightspeed is the core
AROUND = ("hl", "nn", "models", "weights", "torch", "backends", "parallel", "serve", "autograd")
# lines of the core (.py and .egg) on 2026-12-03, before the runtime redesign: it must not grow;
# + 23 (issue 23): lines moved from backends into the compile pipeline (pipeline.py): base.py's
# Backend.compile (20) and its trace import (1), reference.py's option check (2); + 22: the new
# module's docstring and imports (pipeline.py) and program.py's imports of the report classes
# it now holds for the backends (moved from search.py, so no backend imports the search)
# + 44 (issue 25, hardening II): the program call's checks (mappings of string names, unknown
# dims, size limits before allocation) and the GraphError / OperandError classes
# + 41 (issue 25): cache entries naming their own key, and a bad cached entry recomputed
# whatever stage it fails in (search.py)
# + 4: cache.read_file's `own` check, which the native kernel cache shares instead of its own copy
# + 13: the one float -> int cast rule every backend shares (primitives.float_to_int)
# + 29 (issue 29): the encoder's view facts (`rm_bcast`, `neg_unit_constant`: exact checks on the
# symbolic strides that rules cannot make on expanded polynomials) and the `fused_kernel_dtype`
# relation; the fused kernels' ops and rules themselves live in backends/codegen; + 9: a program
# call's `fetch` (the outputs to return: a greedy decode step on a GPU copies one token id back)
# + 82 (issue 29, eleventh session): `Program.launch` and `Pending` (a call queued without
# waiting: a device's greedy decode steps pipelined, the host never between them), a repeated
# call's check of the arrays it saw last time (weak references: dims bound, nothing else redone),
# and the search's two choices between backend ops of one e-class (fused: the one absorbing the
# most, greedy: the other), so both forms of a layer are measured
# + 21 (issues 24, 27): the fusion language's SGather (a Gather as a region: its table row, its
# schema line and its decoding in llir.py) and the fused candidate's inlining of integer regions
# (search.py), so a paged attention reads through its page tables; `ls.grad`'s name
# + 9 (review): the weak-reference memo (`recall` / `remember`) and the dim binding (`bind_axes`)
# written once in program.py for the call's checks and the kernel runtime's table writes, which had
# each their own copy
# + 173 (twelfth session): activation recomputation as an LLIR pass beside peak_bytes
# (`LProgram.rematerialized`, llir.py) and its use by the search under max_memory, the load probe
# that keeps decisions measured on a busy machine out of the cache (search.py, SearchReport), the
# cache's threat model in its docstring, and the package's lazy names importing a submodule
# directly (``import lightspeed.primitives`` first failed); + 20: a float copy of GGUF blocks counted
# as a candidate's memory (`LProgram.dequantised_bytes`, the search's LEAN_TIE); + 11: the few-rows
# candidate (`OpDecl.many_rows`: a decode row took the prompt's tensor-core tiles, 7x slower), + 4:
# many-rows ops preferred by the greedy and fused candidates over a same-rank op (Attention)
# + 66 (fifteenth session): `Program.zeros` / `Program.rows` (a KV cache made on the device and
# the prefill's keys and values written into its first rows: a 512-token prompt moved 3 x 16 MB
# through the host), and the encoder's `row_gather` fact with its schema line (an index_select of
# a weight's rows, which a kernel backend's GatherMatmul reads in place: a mixture-of-experts
# step's chosen experts were copied, with int64 index arrays of their size)
# + 46 (sixteenth session): `OpDecl.library` and the greedy candidate made of the library's
# many-rows ops (cuBLASLt for a prompt's products, planned per prompt length) with regions grown,
# and the region over library products where a tile kernel has no library op beside it (the gate
# and up products): a 512-token 1B prefill ran its products on generated tiles at ~15% of the
# tensor cores' rate
# + 7 (nineteenth session): the library candidate's in-place scatter of a library product over a
# warp kernel computing the same product (a 512-token prompt's v products as 512 x 512 dots)
# + 25 (twentieth session): a bucketed program persists its buckets with one set of resident
# arrays and hands launch() to the bucket's own (the paged step's few-rows and many-rows programs),
# having checked only the inputs that carry the bucket's dims (the rest once, by the bucket)
# + 9 (twenty-first session): the search times a model's candidates with its static-shaped inputs
# (the weights) persisted, so weights prepared once by a persisted program (stacked) are not charged
# + 38 (twenty-second session): a fixed "stacked" candidate (the greedy one taking the stacked
# products wherever offered): no other fixed candidate took one, so the search never measured them
# + 14 (twenty-third session): the stacked candidate takes each stack whole, the ones serving the
# most products first, its region leaves read no other order's stack, and a product's view-only
# slices are computed inline by their readers (it computed five stacks for two layers, and copied
# every slice)
CORE_BUDGET = (5083 + 23 + 22 + 44 + 41 + 4 + 13 + 29 + 9 + 82 + 21 + 9 + 173 + 20 + 11 + 4 + 66 + 46 + 7 + 25 + 9
               + 38 + 14 + 8 + 4 + 6 + 13 + 8 + 5)
               # + 5: `python -m lightspeed` ends with 130 on Ctrl-C during its import (a traceback before);
               # + 8: a bucket's call hands its given inputs over; + 4: clear (host time);
               # + 6: `resident` (a model's programs share their weights: one device copy, not three);
               # + 13: values made once from resident weights are not intermediates (the stacked candidate);
               # + 8: `weight_stacks` (a stack of weights laid out in its order is read in place)
# a string "lightspeed.module:Name" names a module loaded by name (an entry point)
ENTRY_POINT = re.compile(r"lightspeed(\.\w+)*:\w+")


def _modules() -> dict[str, Path]:
    out = {}
    for p in ROOT.rglob("*.py"):
        parts = list(p.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _target(mod: str, node: ast.ImportFrom, is_pkg: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` (they never run)."""
    return {id(n) for top in ast.walk(tree) if isinstance(top, ast.If) and "TYPE_CHECKING" in ast.unparse(top.test)
            for stmt in top.body for n in ast.walk(stmt)}


def _imports(mod: str, path: Path, run_only: bool = False):
    """(target module, imported name, line) of lightspeed imports anywhere in the file (function
    bodies included); with ``run_only``, not those under ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    skip = _type_checking_only(tree) if run_only else set()
    for n in ast.walk(tree):
        if id(n) in skip:
            continue
        if isinstance(n, ast.ImportFrom):
            t = _target(mod, n, is_pkg)
            if t.startswith("lightspeed"):
                yield from ((t, a.name, n.lineno) for a in n.names)
        elif isinstance(n, ast.Import):
            yield from ((a.name, "", n.lineno) for a in n.names if a.name.startswith("lightspeed"))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and ENTRY_POINT.fullmatch(n.value):
            yield n.value.split(":")[0], "", n.lineno  # "module:Class" (the backend registry's table) loads it


def _import_graph() -> dict[str, dict[str, str]]:
    """module -> {module it imports: where}.  Every import that can run counts, function-level ones
    included, and a package's import of its own submodules too (it runs them).  Imports of the
    root package ``lightspeed`` are left out: it is lazy (PEP 562) and the public namespace above
    everything (``Graph.compile`` reaches the compile pipeline through it)."""
    mods = _modules()
    edges: dict[str, dict[str, str]] = {m: {} for m in mods}
    for m, p in mods.items():
        for t, name, line in _imports(m, p, run_only=True):
            full = f"{t}.{name}"
            dep = full if full in mods else t if t in mods else None
            if dep is None or dep in (m, "lightspeed"):
                continue
            edges[m].setdefault(dep, f"{p.relative_to(ROOT.parent)}:{line}")
    return edges


def _cycles(edges: dict[str, dict[str, str]]) -> list[tuple[list[str], set[str]]]:
    """Per strongly connected component of more than one module (a knot), one shortest cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    comps: list[set[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = {stack.pop()}
            while v not in comp:
                comp.add(stack.pop())
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(edges):
        if v not in index:
            strong(v)
    out = []
    for comp in comps:
        start = min(comp)
        paths, seen = [[start]], {start}
        while paths:  # breadth first inside the component, back to start
            path = paths.pop(0)
            if start in edges[path[-1]] and len(path) > 1:
                out.append(([*path, start], comp))
                break
            for w in sorted(d for d in edges[path[-1]] if d in comp and d not in seen):
                seen.add(w)
                paths.append([*path, w])
    return out


def test_no_import_cycles():
    edges = _import_graph()
    cycles = _cycles(edges)
    assert not cycles, "import cycles (module -> imported module (where)), one per knot of modules:\n" + "\n".join(
        "  " + " -> ".join(f"{b} ({edges[a][b]})" if a else b for a, b in zip([None, *c], c))
        + f"\n    knot: {', '.join(sorted(knot))}" for c, knot in cycles)


def test_backends_never_import_the_compile_pipeline():
    """The core calls backends, never the reverse: no module under backends/ imports the pipeline,
    the search or rolling, not even inside a function, nor the root package (the way to them)."""
    pipeline = ("lightspeed.pipeline", "lightspeed.search", "lightspeed.rolling")
    bad = [f"{m} imports {t}.{name} ({p.relative_to(ROOT.parent)}:{line})" for m, p in _modules().items()
           if m.startswith("lightspeed.backends") for t, name, line in _imports(m, p)
           if (t == "lightspeed" and not name)
           or any(x == q or x.startswith(q + ".") for x in (t, f"{t}.{name}") for q in pipeline)]
    assert not bad, "\n".join(bad)


def test_no_private_names_imported_across_modules():
    bad = []
    for m, p in _modules().items():
        for t, name, _ in _imports(m, p):
            private_module = any(part.startswith("_") for part in t.split(".")[1:])
            if private_module or (name.startswith("_") and not name.startswith("__")):
                bad.append(f"{m} imports {t}.{name}")
    assert not bad, "\n".join(bad)


def test_core_is_no_larger_than_before_the_redesign():
    files = [p for p in ROOT.rglob("*") if p.suffix in (".py", ".egg")
             and p.relative_to(ROOT).parts[0] not in AROUND and p.name != "cli.py"]
    lines = sum(len(p.read_text().splitlines()) for p in files)
    assert lines <= CORE_BUDGET, f"the core has {lines} lines (budget {CORE_BUDGET}): " + ", ".join(
        f"{p.relative_to(ROOT)} {len(p.read_text().splitlines())}" for p in sorted(files))


# flat declarative tables, exempt from the file-length limit (rows, not logic)
TABLES = ("torch/aten.py",)
MAX_LINES = 900


def test_no_source_file_is_over_900_lines():
    long = {str(p.relative_to(ROOT)): n for p in ROOT.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES and str(p.relative_to(ROOT)) not in TABLES}
    assert not long, f"files over {MAX_LINES} lines (split them by concern): {long}"


def test_every_core_module_imports_first_in_a_fresh_interpreter():
    """``import lightspeed.primitives`` (or any core module) as a program's first import works: the
    package's lazy names must not load the op library while that module is half initialised (it
    did for primitives, whose ``from . import dtypes`` asked the package for ``dtypes``)."""
    import subprocess
    import sys

    modules = ["primitives", "graph", "shape", "symbolic", "dtypes", "egraph.llir", "autograd", "search",
               "backends.codegen.kernels"]
    code = "; ".join(["import importlib, subprocess, sys"] + [
        f"subprocess.run([sys.executable, '-c', 'import lightspeed.{m}'], check=True)" for m in modules])
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
