"""The package's shape: no import cycles between modules, no private names imported across
modules, and a core that stays small (graph, shapes, ops, e-graph encoding and search; every
backend, frontend, model family and file format is a package around it)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src" / "lightspeed"
# packages around the core; everything else under src/lightspeed is the core
AROUND = ("hl", "nn", "models", "weights", "torch", "backends", "parallel")
# lines of the core (.py and .egg) on 2026-12-03, before the runtime redesign: it must not grow
CORE_BUDGET = 5083


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


def _imports(mod: str, path: Path, module_level: bool):
    """(target module, imported name) pairs of lightspeed imports; with ``module_level``, only
    those that run at import time (not inside functions or ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    nodes = []
    if module_level:
        for top in tree.body:
            if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(top, ast.If) and "TYPE_CHECKING" in ast.unparse(top.test):
                continue
            nodes.extend(ast.walk(top))
    else:
        nodes = list(ast.walk(tree))
    for n in nodes:
        if isinstance(n, ast.ImportFrom):
            t = _target(mod, n, is_pkg)
            if t.startswith("lightspeed"):
                yield from ((t, a.name) for a in n.names)
        elif isinstance(n, ast.Import):
            yield from ((a.name, "") for a in n.names if a.name.startswith("lightspeed"))


def test_no_import_cycles():
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for t, name in _imports(m, p, module_level=True):
            full = f"{t}.{name}"
            dep = full if full in mods else t if t in mods else None
            # a package importing its own submodules (re-exports) is not a cycle of the design
            if dep is not None and dep != m and not dep.startswith(m + "."):
                edges[m].add(dep)
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(edges[m]):
            if state.get(d) == 1:
                cycle = stack[stack.index(d):] + [d]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(mods):
        if m not in state:
            visit(m)


def test_no_private_names_imported_across_modules():
    bad = []
    for m, p in _modules().items():
        for t, name in _imports(m, p, module_level=False):
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
