"""The native backend's kernel cache runs no code but its own user's: a library planted under the
predictable name (without the hash recorded when this user compiled it, or with a wrong one) is
compiled again, never loaded; a folder of another user, or one others can write into, is not
used at all.  And search decisions are keyed by the block kernels' activation mode."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends import get_backend
from lightspeed.backends.native import executor

NATIVE = get_backend("native")
pytestmark = pytest.mark.skipif(not NATIVE.available(), reason="no C compiler")
OPTS = ls.SearchOptions(budget=1, seed=0, progress=False)

# a library whose loading is visible: its constructor writes the file named by $LS_PLANTED_MARK
PLANTED = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void planted(void) {
  const char* p = getenv("LS_PLANTED_MARK");
  if (p) { FILE* f = fopen(p, "w"); if (f) { fputs("loaded", f); fclose(f); } }
}
"""


def _graph() -> ls.Graph:
    g = ls.Graph()
    x = g.input("x", ("s", 16))
    g.output("y", (x * 2.0).exp2().sum(-1))
    return g


def _check(prog) -> None:
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    np.testing.assert_allclose(prog(x=x)["y"], np.exp2(x.astype(np.float64) * 2).sum(-1), rtol=1e-5)


def _fresh_process(monkeypatch) -> None:
    """Forget the libraries and kernels this process loaded (as a new process would)."""
    monkeypatch.setattr(executor, "_libs", {})
    monkeypatch.setattr(executor, "_kernels", {})
    monkeypatch.setattr(executor, "_stand_ins", {})


# the victim: a new process compiling the graph against the same cache (the dynamic loader of
# this process would hand back the libraries it already mapped, whatever the file holds now)
VICTIM = """
import numpy as np, lightspeed as ls
g = ls.Graph()
x = g.input("x", ("s", 16))
g.output("y", (x * 2.0).exp2().sum(-1))
prog = g.compile("native", search=ls.SearchOptions(budget=1, seed=0, progress=False))
x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
np.testing.assert_allclose(prog(x=x)["y"], np.exp2(x.astype(np.float64) * 2).sum(-1), rtol=1e-5)
print("ok")
"""


def _victim(env: dict) -> None:
    import sys

    res = subprocess.run([sys.executable, "-c", VICTIM], env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]


def _plant_over_every_library(folder, tmp_path, monkeypatch, hash_too: bool) -> object:
    """Replace every compiled library in ``folder`` by one that announces it was loaded; with
    ``hash_too``, the recorded hash stays the old (now wrong) one; else it is deleted."""
    src = tmp_path / "planted.c"
    src.write_text(PLANTED)
    planted = tmp_path / "planted.so"
    subprocess.run([*executor.compiler(), "-shared", "-fPIC", "-o", str(planted), str(src)], check=True)
    libs = sorted(folder.glob("k*.so"))
    assert libs
    for lib in libs:  # a new file under the old name, as another user planting it would make
        fresh = lib.with_suffix(".new")
        fresh.write_bytes(planted.read_bytes())
        os.replace(fresh, lib)
        if not hash_too:
            lib.with_suffix(".sha256").unlink()
    mark = tmp_path / "mark"
    monkeypatch.setenv("LS_PLANTED_MARK", str(mark))
    return mark


@pytest.mark.parametrize("hash_too", [False, True], ids=["no-recorded-hash", "wrong-hash"])
def test_a_planted_library_is_never_loaded(tmp_path, monkeypatch, hash_too):
    cache = tmp_path / "cache"
    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(cache))
    _fresh_process(monkeypatch)
    _check(_graph().compile(NATIVE, search=OPTS))
    mark = _plant_over_every_library(cache / "native", tmp_path, monkeypatch, hash_too)
    _victim({"LIGHTSPEED_CACHE_DIR": str(cache)})  # the kernels compiled again and right
    assert not mark.exists(), "a planted library was loaded"
    for lib in (cache / "native").glob("k*.so"):  # and replaced by this user's, with their hashes
        assert executor._trusted(lib)


def test_a_folder_others_can_write_into_is_not_used(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    folder = cache / "native"
    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(cache))
    _fresh_process(monkeypatch)
    _check(_graph().compile(NATIVE, search=OPTS))
    # a planted library WITH a matching hash, in a folder anyone may write into
    mark = _plant_over_every_library(folder, tmp_path, monkeypatch, hash_too=True)
    import hashlib

    for lib in folder.glob("k*.so"):
        lib.with_suffix(".sha256").write_text(hashlib.sha256(lib.read_bytes()).hexdigest())
    os.chmod(folder, 0o777)
    _victim({"LIGHTSPEED_CACHE_DIR": str(cache)})
    assert not mark.exists(), "a library of a world-writable folder was loaded"
    _fresh_process(monkeypatch)
    assert executor._folder() != folder


@pytest.mark.skipif(not hasattr(os, "getuid") or os.getuid() != 0, reason="needs root to give a folder away")
def test_a_folder_of_another_user_is_not_used(tmp_path, monkeypatch):
    folder = tmp_path / "lightspeed-shared"
    folder.mkdir(mode=0o700)
    os.chown(folder, 65534, 65534)
    monkeypatch.setenv("LIGHTSPEED_CACHE", "0")
    monkeypatch.setattr(executor.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(executor.os, "getuid", lambda: 0)
    os.rename(folder, tmp_path / "lightspeed-0")
    _fresh_process(monkeypatch)
    assert executor._folder() != tmp_path / "lightspeed-0"
    _check(_graph().compile(NATIVE, search=OPTS))


def test_decisions_are_keyed_by_the_activation_mode(monkeypatch):
    keys = {}
    for mode in ("q16", "q8", "float"):
        monkeypatch.setenv("LIGHTSPEED_NATIVE_ACTIVATIONS", mode)
        keys[mode] = NATIVE.code_hash()
    assert len(set(keys.values())) == 3, keys
    monkeypatch.setenv("LIGHTSPEED_NATIVE_ACTIVATIONS", "q16")
    assert NATIVE.code_hash() == keys["q16"]
