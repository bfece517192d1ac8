"""Every rule file runs its self-checks (tests/egraph/checks/<stem>.egg): positive `(check ...)`s
and negative `(fail (check ...))`s, after the schema and the rule file itself.  Every rule file
must have a check file, and every rule a `:name`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lightspeed.backends.codegen.fused import FUSED_KERNEL_OPS
from lightspeed.backends.codegen.fused import RULE_FILES as FUSED_RULE_FILES
from lightspeed.backends.cpu import OPS as CPU_OPS
from lightspeed.backends.cpu import RULE_FILES as CPU_RULE_FILES
from lightspeed.backends.cuda.cublaslt import LT_OPS
from lightspeed.backends.cuda.cublaslt import RULE_FILE as CUBLASLT_RULE_FILE
from lightspeed.egraph import SCHEMA, EGraphRunner
from lightspeed.egraph.decl import constructors_text
from lightspeed.egraph.encode import GENERIC_RULES

CHECKS = Path(__file__).parent / "checks"
RULE_FILES = [f for f, _ in GENERIC_RULES] + list(CPU_RULE_FILES) + [CUBLASLT_RULE_FILE] + list(FUSED_RULE_FILES)


@pytest.mark.parametrize("rule_file", RULE_FILES, ids=[f.stem for f in RULE_FILES])
def test_rule_file_self_checks(rule_file: Path):
    check = CHECKS / f"{rule_file.stem}.egg"
    assert check.exists(), f"{rule_file.name} has no self-check file {check}"
    r = EGraphRunner()
    r.run(SCHEMA, name="schema.egg")
    r.run(constructors_text(CPU_OPS), name="cpu constructors")
    r.run(constructors_text(LT_OPS), name="cuda constructors")
    r.run(constructors_text(FUSED_KERNEL_OPS), name="fused kernel constructors")
    r.run(rule_file.read_text(), name=rule_file.name)
    r.run(check.read_text(), name=check.name)


@pytest.mark.parametrize("rule_file", RULE_FILES, ids=[f.stem for f in RULE_FILES])
def test_every_rule_is_named(rule_file: Path):
    text = rule_file.read_text()
    blocks = re.split(r"^\((?:rule|rewrite|birewrite)\b", text, flags=re.M)[1:]
    assert blocks, f"{rule_file.name} has no rules"
    for b in blocks:
        assert ":name" in b.split("\n(")[0] or ":name" in b, f"unnamed rule in {rule_file.name}: {b[:80]!r}"
