"""Generated docs and lint stay current."""

from __future__ import annotations

import re
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
    r = subprocess.run([ruff, "check", "src", "tests", "scripts", "benchmarks", "examples"], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_readme_tour_runs(capsys):
    import re

    code = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)[0]
    ns: dict = {}
    exec(compile(code, "README.md", "exec"), ns)  # noqa: S102 - our own README
    assert ns["out"]["y"].shape == (3, 8)
    assert "search report" in capsys.readouterr().out


# a file path in backticks: folders and a name with a known extension (``kernels/writer.py``,
# ``docs/kernels.md``, ``backends/codegen/blocks.egg``); a trailing ``:name`` is a symbol in it
_DOC_PATH = re.compile(r"`([\w./-]+\.(?:py|md|egg|sh|h|cuh|toml|json))(?::\w+)?`")
# paths a doc names that are not files of the repository (made at run time, or of other projects)
_NOT_OURS = ("model.bin", "tokenizer.json", "config.json", "generation_config.json", "tokenizer_config.json",
             "model.safetensors.index.json", "gpu_decode.json", "gpu_gemv.json", "ab_trees.json",
             "ctranslate2/specs/model_spec.py")


def test_every_path_a_doc_names_exists():
    """Each file a markdown page names in backticks is a file of the
    repository (matched by its trailing path: ``codegen/blocks.py`` is
    ``src/lightspeed/backends/codegen/blocks.py``), so a moved or deleted file cannot leave a
    stale reference behind."""
    files = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
             if p.is_file() and not any(part.startswith(".") for part in p.relative_to(ROOT).parts)]
    bad = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for m in _DOC_PATH.finditer(doc.read_text()):
            path = m.group(1).lstrip("./")
            if path in _NOT_OURS or path.split("/")[-1] in _NOT_OURS or path.startswith(("~", "$")):
                continue
            if not any(f == path or f.endswith("/" + path) for f in files):
                bad.append(f"{doc.name}: {path}")
    assert not bad, "docs name files that do not exist:\n" + "\n".join(sorted(set(bad)))


def test_every_environment_setting_is_documented():
    """Each LIGHTSPEED_* variable the package reads is a row of docs/environment.md, and the
    page names none it no longer reads."""
    used = set()
    for path in (ROOT / "src" / "lightspeed").rglob("*.py"):
        used |= set(re.findall(r"\bLIGHTSPEED_[A-Z0-9_]+", path.read_text()))
    rows = set(re.findall(r"^\| `(LIGHTSPEED_[A-Z0-9_]+)`", (ROOT / "docs" / "environment.md").read_text(), re.M))
    assert used - rows == set(), f"read but not documented in docs/environment.md: {sorted(used - rows)}"
    assert rows - used == set(), f"documented but never read: {sorted(rows - used)}"
