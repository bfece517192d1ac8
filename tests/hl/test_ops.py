"""Every high-level op against PyTorch eager, driven by the op table (tests/hl/cases_*.py)."""

from __future__ import annotations

import pytest

from lightspeed.hl import HL_OPS
from tests.hl.optable import all_cases, expand, run_sample

CASES = all_cases()
ROWS = expand(CASES)

# Ops that are registered but intentionally covered elsewhere (data, with the reason).
NOT_IN_TABLE: dict[str, str] = {
    "arange": "takes the Graph and numbers, no tensor inputs: tests/hl/test_arange.py",
}


@pytest.mark.parametrize("case,sample,dtype,layout", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_op_matches_torch(case, sample, dtype, layout):
    if case.xfail:
        pytest.xfail(case.xfail)
    run_sample(case, sample, dtype, layout)


def test_every_op_has_cases():
    covered = {c.op for c in CASES}
    unknown = covered - set(HL_OPS)
    assert not unknown, f"cases name unregistered ops: {sorted(unknown)}"
    missing = sorted(set(HL_OPS) - covered - set(NOT_IN_TABLE))
    assert not missing, f"high-level ops without test cases: {missing}"
