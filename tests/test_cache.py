"""The on-disk compile cache: bad entries (wrong shape, tampered, truncated, planted links) are discarded
and recompiled into a correct program; entries are private files written atomically."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

import lightspeed as ls
from lightspeed import cache
from lightspeed.weights import cache_dir as weights_dir

OPTS = ls.SearchOptions(budget=3, seed=5, dims={"s": 4}, roll=False, progress=False)


def _graph() -> ls.Graph:
    g = ls.Graph()
    x, w1, w2 = g.input("x", ("s", 16)), g.input("w1", (16, 24)), g.input("w2", (24, 8))
    g.output("y", ((x @ w1).silu() @ w2).softmax(-1))
    return g


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {"x": rng.standard_normal((5, 16)).astype(np.float32),
            "w1": rng.standard_normal((16, 24)).astype(np.float32),
            "w2": rng.standard_normal((24, 8)).astype(np.float32)}


def _compile_and_check(g: ls.Graph) -> ls.Program:
    """Compile on the cpu backend and compare against the reference interpreter."""
    prog = g.compile(backend="cpu", search=OPTS)
    want = g.compile(backend="reference")(**_inputs())["y"]
    np.testing.assert_allclose(prog(**_inputs())["y"], want, rtol=1e-5, atol=1e-6)
    return prog


def _entries(d: Path) -> tuple[Path, Path]:
    (eg,) = d.glob("egraph-*.json")
    (dec,) = d.glob("search-*.json")
    return eg, dec


@pytest.fixture
def cdir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "cache"  # not created: the first store makes it
    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(d))
    monkeypatch.delenv("LIGHTSPEED_CACHE", raising=False)
    monkeypatch.setenv("LIGHTSPEED_LOG", "cache")
    cache._reported.clear()
    return d


def _payload(path: Path):
    header, payload = path.read_bytes().split(b"\n", 1)
    assert json.loads(header)["format"] == cache.FORMAT
    return json.loads(payload)


def test_second_compile_uses_both_entries(cdir):
    g = _graph()
    first = _compile_and_check(g).search_report
    second = _compile_and_check(g).search_report
    assert not first.egraph_cached and not first.decision_cached
    assert second.egraph_cached and second.decision_cached
    assert second.program_text == first.program_text


def test_wrong_shape_entries_are_recompiled(cdir, capsys):
    g = _graph()
    _compile_and_check(g)
    eg, dec = _entries(cdir)
    good_eg, good_dec = _payload(eg), _payload(dec)
    # checksums are right, structures are not: the validators must catch them
    bad_eg = dict(good_eg, nodes=list(good_eg["nodes"]))
    eg.write_bytes(cache._encode(eg.stem, bad_eg))
    prog = _compile_and_check(g)
    assert not prog.search_report.egraph_cached
    assert _payload(eg) == good_eg  # rewritten

    cid, nid = next(iter(good_dec["choice"].items()))
    bad_dec = dict(good_dec, choice=dict(good_dec["choice"], **{cid: "function-9999-NoSuchNode"}))
    dec.write_bytes(cache._encode(dec.stem, bad_dec))
    prog = _compile_and_check(g)
    assert prog.search_report.egraph_cached and not prog.search_report.decision_cached
    err = capsys.readouterr().err
    assert f"{eg.stem}: discarded (nodes is not a non-empty object of node ids); recomputing" in err
    assert f"{dec.stem}: discarded (choice {cid!r} -> 'function-9999-NoSuchNode': no such node" in err


@pytest.mark.parametrize("mutate", [
    lambda d: dict(d, nodes={k: dict(n, children=["nowhere"]) for k, n in d["nodes"].items()}),
    lambda d: dict(d, root_eclasses=[]),
    lambda d: dict(d, class_data={k: {"type": 3} for k in d["class_data"]}),
    lambda d: {k: v for k, v in d.items() if k != "rule_matches"},
    lambda d: dict(d, rule_matches={"r": "many"}),
    lambda d: [d],
])
def test_egraph_validator_rejects_wrong_shapes(cdir, mutate):
    g = _graph()
    _compile_and_check(g)
    eg, _ = _entries(cdir)
    good = _payload(eg)
    cache.check_egraph(good)
    with pytest.raises(cache.CacheEntryError):
        cache.check_egraph(mutate(good))


def test_decision_validator_rejects_wrong_shapes(cdir):
    g = _graph()
    _compile_and_check(g)
    eg, dec = _entries(cdir)
    nodes, good = _payload(eg)["nodes"], _payload(dec)
    check = cache.decision_validator(nodes)
    check(good)
    cid, nid = next(iter(good["choice"].items()))
    other = next(k for k, n in nodes.items() if n["eclass"] != cid)
    cand = good["candidates"][0]
    for bad in [dict(good, choice={**good["choice"], cid: other}),        # node of another e-class
                dict(good, choice={**good["choice"], cid: 7}),            # not a node id
                dict(good, winner=len(good["candidates"]) + 5),           # not a candidate
                dict(good, winner=True),
                dict(good, candidates=[{**cand, "ops": {"Add": "x"}}]),
                dict(good, candidates=[{**cand, "surprise": 1}]),
                {k: v for k, v in good.items() if k != "choice"}]:
        with pytest.raises(cache.CacheEntryError):
            check(bad)


def test_tampered_decision_fails_the_checksum_and_is_recompiled(cdir, capsys):
    g = _graph()
    first = _compile_and_check(g).search_report
    _, dec = _entries(cdir)
    raw = dec.read_bytes()
    op = next(iter(first.candidates[first.winner].ops))  # an op name, stored as a JSON key
    tampered = raw.replace(f'"{op}"'.encode(), f'"{op}X"'.encode(), 1)
    assert tampered != raw
    dec.write_bytes(tampered)
    prog = _compile_and_check(g)
    assert prog.search_report.egraph_cached and not prog.search_report.decision_cached
    assert all(f"{op}X" not in c.ops for c in prog.search_report.candidates)
    assert "checksum mismatch" in capsys.readouterr().err
    assert dec.read_bytes() != tampered


def test_truncated_entries_are_recompiled(cdir):
    g = _graph()
    _compile_and_check(g)
    eg, dec = _entries(cdir)
    for path in (eg, dec):
        raw = path.read_bytes()
        path.write_bytes(raw[: len(raw) // 2])
    prog = _compile_and_check(g)
    assert not prog.search_report.egraph_cached and not prog.search_report.decision_cached
    cache.check_egraph(_payload(eg))  # rewritten whole


def test_old_format_and_garbage_are_discarded(cdir):
    g = _graph()
    _compile_and_check(g)
    eg, dec = _entries(cdir)
    eg.write_text(json.dumps(_payload(eg)))  # the pre-checksum layout: bare JSON
    dec.write_bytes(b"\xff\xfe\x00garbage\n\x00")
    prog = _compile_and_check(g)
    assert not prog.search_report.egraph_cached and not prog.search_report.decision_cached


def test_discards_are_reported_once_per_entry(cdir, capsys):
    cdir.mkdir(mode=0o700)
    (cdir / "search-0123.json").write_text("{broken")
    assert cache.load("search-0123") is None
    assert cache.load("search-0123") is None
    err = capsys.readouterr().err
    assert err.count("search-0123") == 1


def test_silent_without_the_log_switch(cdir, capsys, monkeypatch):
    monkeypatch.setenv("LIGHTSPEED_LOG", "search")
    cdir.mkdir(mode=0o700)
    (cdir / "search-0123.json").write_text("{broken")
    assert cache.load("search-0123") is None
    assert capsys.readouterr().err == ""


def test_planted_symlinks_are_not_followed(cdir, tmp_path):
    g = _graph()
    _compile_and_check(g)
    eg, dec = _entries(cdir)
    victims = {}
    for path in (eg, dec):
        # the victim holds a valid entry: following the link would make the compile report it cached
        victim = tmp_path / f"victim-{path.stem}"
        victim.write_bytes(path.read_bytes())
        victims[path] = victim.read_bytes()
        path.unlink()
        path.symlink_to(victim)
        # and the temporary names older versions used (".<name>.<pid>.tmp") point at the victim too
        (cdir / f".{path.stem}.{os.getpid()}.tmp").symlink_to(victim)
    prog = _compile_and_check(g)
    assert not prog.search_report.egraph_cached and not prog.search_report.decision_cached
    for path, content in victims.items():
        assert (tmp_path / f"victim-{path.stem}").read_bytes() == content
        assert not path.is_symlink() and path.is_file()  # the link itself was replaced
    assert _compile_and_check(g).search_report.decision_cached


def test_permissions_are_private(cdir):
    old = os.umask(0o022)
    try:
        g = _graph()
        _compile_and_check(g)
    finally:
        os.umask(old)
    assert stat.S_IMODE(cdir.stat().st_mode) == 0o700
    files = list(cdir.iterdir())
    assert len(files) == 2  # no temporary files left behind
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600


def test_directory_writable_by_others_is_not_used(cdir, capsys):
    cdir.mkdir()
    cdir.chmod(0o777)
    g = _graph()
    _compile_and_check(g)
    prog = _compile_and_check(g)
    assert not prog.search_report.egraph_cached and not list(cdir.iterdir())
    assert "writable by other users; not used" in capsys.readouterr().err


def test_entry_names_cannot_leave_the_directory(cdir):
    for name in ("../x", "a/b", ".hidden", ""):
        with pytest.raises(ValueError):
            cache.store(name, {})


def test_roots(monkeypatch, tmp_path):
    monkeypatch.delenv("LIGHTSPEED_CACHE", raising=False)
    monkeypatch.delenv("LIGHTSPEED_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("LIGHTSPEED_CACHE_DIR", raising=False)
    assert cache.cache_dir() == tmp_path / "home" / ".cache" / "lightspeed"
    assert weights_dir("llama") == tmp_path / "home" / ".cache" / "lightspeed" / "models" / "llama"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert cache.root() == tmp_path / "home" / ".cache" / "lightspeed"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.cache_dir() == tmp_path / "xdg" / "lightspeed"
    assert weights_dir() == tmp_path / "xdg" / "lightspeed" / "models"
    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine"
    assert weights_dir() == tmp_path / "xdg" / "lightspeed" / "models"  # weights do not move with it
    monkeypatch.setenv("LIGHTSPEED_CACHE", "0")
    assert cache.cache_dir() is None and cache.load("search-00") is None
    cache.store("search-00", {"a": 1})
    assert not (tmp_path / "mine").exists()


def _other_graph() -> ls.Graph:
    g = ls.Graph()
    x, w1, w2 = g.input("x", ("s", 16)), g.input("w1", (16, 24)), g.input("w2", (24, 8))
    g.output("y", ((x @ w1).relu() @ w2).exp2().sum(-1, keepdim=True) * 0 + ((x @ w1) @ w2))
    return g


def _copy_as(src: Path, dest: Path) -> None:
    """``src``'s bytes under ``dest``'s name: an intact entry of another key (checksum right)."""
    dest.write_bytes(src.read_bytes())


@pytest.mark.parametrize("which", ["egraph", "decision", "both"])
def test_an_intact_entry_of_another_graph_under_this_key_is_recomputed(cdir, tmp_path, which):
    """Fault injection: the entries of another graph (intact, checksums right) copied over this
    graph's; the compile must discard them (each entry names its own key) and give the right
    program, never a crash or a wrong result."""
    other = tmp_path / "other"
    os.environ["LIGHTSPEED_CACHE_DIR"] = str(other)
    ls.Graph.compile(_other_graph(), backend="cpu", search=OPTS)
    os.environ["LIGHTSPEED_CACHE_DIR"] = str(cdir)
    g = _graph()
    _compile_and_check(g)
    eg, dec = _entries(cdir)
    oeg, odec = _entries(other)
    if which in ("egraph", "both"):
        _copy_as(oeg, eg)
    if which in ("decision", "both"):
        _copy_as(odec, dec)
    prog = _compile_and_check(g)
    rep = prog.search_report
    assert rep.egraph_cached == (which == "decision") and not (which != "egraph" and rep.decision_cached)


def test_a_decision_that_cannot_be_decoded_is_recomputed(cdir, monkeypatch):
    """Fault injection past the validators: a cached decision whose program fails to decode (here
    the decoder raises, as a node of the wrong kind did with an IndexError) is discarded and the
    search runs again; the program is right and the next compile uses the fresh entry."""
    g = _graph()
    _compile_and_check(g)
    from lightspeed import search

    real, calls = search.decode_program, []

    def broken_once(*a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise IndexError("list index out of range")
        return real(*a, **k)

    monkeypatch.setattr(search, "decode_program", broken_once)
    prog = _compile_and_check(g)
    assert not prog.search_report.decision_cached and len(calls) > 1
    monkeypatch.setattr(search, "decode_program", real)
    assert _compile_and_check(g).search_report.decision_cached


def test_a_cached_program_that_does_not_lower_is_recomputed(cdir, monkeypatch):
    g = _graph()
    _compile_and_check(g)
    from lightspeed.backends import get_backend

    cpu = get_backend("cpu")
    real, calls = type(cpu).lower, []

    def lower_fails_once(self, *a, **k):
        calls.append(1)
        if len(calls) == 1:
            raise KeyError("an op the cached program names")
        return real(self, *a, **k)

    monkeypatch.setattr(type(cpu), "lower", lower_fails_once)
    prog = _compile_and_check(g)
    assert len(calls) >= 2 and not prog.search_report.decision_cached  # (the search lowers its candidates)
