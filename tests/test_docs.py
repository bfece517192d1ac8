"""Generated docs and lint stay current."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ops_doc_is_current():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_ops_doc.py"), "--check"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr


def test_readme_opens_with_two_commands():
    text = (ROOT / "README.md").read_text()
    block = text.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert len(block) == 2
    assert "pip install" in block[0] and "lightspeed" in block[0]
    assert "pytest" in block[1]


@pytest.mark.skipif(shutil.which("ruff") is None and not (Path(sys.executable).parent / "ruff").exists(),
                    reason="ruff not installed")
def test_ruff_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    r = subprocess.run([ruff, "check", "src", "tests", "scripts"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_readme_tour_runs(capsys):
    import re

    code = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[0]
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)  # noqa: S102 - our own README
    assert ns["out"]["y"].shape == (3, 8)
    assert "search report" in capsys.readouterr().out
