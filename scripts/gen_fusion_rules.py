"""Rewrite the GENERATED sections of rules/schema.egg (the `Scalar` datatype) and rules/fusion.egg
(the one-op region rules) from the fusion language's table in lightspeed/egraph/decl.py.

    python scripts/gen_fusion_rules.py          # rewrite the stale sections
    python scripts/gen_fusion_rules.py --check  # exit 1 if a section is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from lightspeed.egraph.decl import fusion_rules_text, scalar_datatype_text  # noqa: E402

_BEGIN = "; ---- BEGIN GENERATED from lightspeed/egraph/decl.py (regenerate()); do not edit\n"
_END = "; ---- END GENERATED\n"



def _splice(text: str, generated: str, where: str) -> str:
    if text.count(_BEGIN) != 1 or text.count(_END) != 1:
        raise ValueError(f"{where}: expected one GENERATED section")
    head, rest = text.split(_BEGIN)
    _, tail = rest.split(_END)
    return head + _BEGIN + generated + _END + tail


def regenerate(write: bool = True) -> list[str]:
    """Rewrite the GENERATED sections of rules/schema.egg and rules/fusion.egg from the tables
    above; returns the files that were stale."""
    rules = ROOT / "src" / "lightspeed" / "egraph" / "rules"
    stale = []
    for name, gen in (("schema.egg", scalar_datatype_text), ("fusion.egg", fusion_rules_text)):
        f = rules / name
        old = f.read_text()
        new = _splice(old, gen(), str(f))
        if new != old:
            stale.append(str(f))
            if write:
                f.write_text(new)
    return stale


if __name__ == "__main__":
    stale = regenerate(write="--check" not in sys.argv)
    for f in stale:
        print(("stale: " if "--check" in sys.argv else "rewrote ") + f)
    raise SystemExit(1 if stale and "--check" in sys.argv else 0)
