"""The GPU host's file ferry (``scripts/gpu_files.sh``): weight files split into one call's load
per folder here, gathered and joined on the host call by call, each join checked by sha256."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_files.sh"
MB = 1 << 20

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("bash", "split", "sha256sum")),
                                reason="needs bash, split and sha256sum")


def _run(cwd: Path, *args: str, **env: str) -> str:
    out = subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, env={**os.environ, **env}, check=True,
                         capture_output=True, text=True)
    return out.stdout


def _files(tmp_path: Path) -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    sizes = {"a.gguf": int(2.5 * MB), "b.tar": 300_000, "c.gguf": int(1.2 * MB)}
    made = {}
    for name, size in sizes.items():
        made[name] = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        (tmp_path / name).write_bytes(made[name])
    return made


def _pack(tmp_path: Path) -> tuple[Path, dict[str, bytes], list[Path]]:
    made = _files(tmp_path)
    here = tmp_path / "here"
    here.mkdir()
    _run(here, "pack", *(f"{n}={tmp_path / n}" for n in made),
         GPU_FILES_PART_MB="1", GPU_FILES_CALL_MB="2", GPU_FILES_FIRST_MB="1")
    calls = sorted((here / ".wparts").iterdir(), key=lambda p: int(p.name[1:]))
    return here, made, calls


def test_packed_folders_fit_their_call_and_keep_the_files_order(tmp_path):
    _, made, calls = _pack(tmp_path)
    loads = [sum(p.stat().st_size for p in c.iterdir() if p.suffix[1:].isdigit()) for c in calls]
    assert loads[0] <= 1 * MB and all(load <= 2 * MB for load in loads)
    order = [p.name.rsplit(".", 1)[0] for c in calls for p in sorted(c.iterdir()) if p.suffix[1:].isdigit()]
    assert order == sorted(order, key=list(made).index)  # a.gguf's parts first: its runs come first
    for c in calls:  # every folder can check any joined file
        assert {p.name for p in c.iterdir() if not p.suffix[1:].isdigit()} == {
            f"{n}.{ext}" for n in made for ext in ("sha256", "count")}


def test_calls_gather_the_parts_and_join_each_file_once_complete(tmp_path):
    here, made, calls = _pack(tmp_path)
    host = tmp_path / "host"
    seen = []
    for i, folder in enumerate(calls):  # each call carries one folder (the host keeps what came before)
        checkout = tmp_path / f"call{i}"
        shutil.copytree(folder, checkout / ".wparts" / folder.name)
        seen.append(_run(checkout, GPU_FILES_DIR=str(host)))
    assert "file a.gguf: 1 of 3 parts" in seen[0]
    assert any("file a.gguf: ready (joined, sha256 checked)" in out for out in seen)
    assert all(f"file {n}: ready" in seen[-1] for n in made)
    for name, data in made.items():
        assert (host / "wfiles" / name).read_bytes() == data


def test_a_corrupted_part_is_never_joined(tmp_path):
    here, made, calls = _pack(tmp_path)
    part = next(p for c in calls for p in c.iterdir() if p.name == "b.tar.00")
    part.write_bytes(b"x" + part.read_bytes()[1:])
    out = _run(here, GPU_FILES_DIR=str(tmp_path / "host"))
    assert "file b.tar: parts joined to a wrong sha256" in out
    assert not (tmp_path / "host" / "wfiles" / "b.tar").exists()
    assert (tmp_path / "host" / "wfiles" / "a.gguf").read_bytes() == made["a.gguf"]
