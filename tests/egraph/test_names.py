"""Input, output and dim names reach egglog as string literals: quotes, backslashes, parentheses and
egglog syntax in a name must neither break the e-graph text nor change the name."""

from __future__ import annotations

import json

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.egraph.encode import egg_string, encode_graph
from lightspeed.egraph.runner import EGraphRunner
from lightspeed.errors import UnsupportedError

ODD = ['a"b', "x) (union", "back\\slash", '\\"', "semi;colon", "new\nline", "tab\there", "ünï€ 😀",
       '") (let $root (Input', ""]


@pytest.mark.parametrize("name", ODD)
def test_literal_round_trips_through_egglog(name):
    r = EGraphRunner()
    r.run(f"(datatype E (V String))\n(let $root (V {egg_string(name)}))", name="names")
    ser = r.serialize("$root")
    (node,) = [n for n in ser.nodes.values() if n["op"] != "V"]
    assert json.loads(node["op"]) == name


def _graph(names: tuple[str, str], out: str, dim: str) -> ls.Graph:
    g = ls.Graph()
    a = g.input(names[0], (dim, 8))
    b = g.input(names[1], (8, 4))
    g.output(out, (a @ b).relu() + 1.0)
    return g


@pytest.mark.parametrize("names, out", [(('a"b', "x) (union"), 'y"\\)'),
                                        (("tab\there", "ünï€"), "new\nline")])
def test_odd_names_compile_on_cpu_and_match_the_reference(names, out, tmp_path, monkeypatch):
    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    g = _graph(names, out, "s")
    rng = np.random.default_rng(7)
    feeds = {names[0]: rng.standard_normal((3, 8)).astype(np.float32),
             names[1]: rng.standard_normal((8, 4)).astype(np.float32)}
    want = g.compile(backend="reference")(feeds)[out]
    prog = g.compile(backend="cpu", search=ls.SearchOptions(budget=2, seed=0, roll=False, progress=False))
    got = prog(feeds)
    assert list(got) == [out]
    np.testing.assert_allclose(got[out], want, rtol=1e-6, atol=1e-6)


def test_names_are_not_egglog_syntax_in_the_encoded_program():
    g = _graph(('a"b', "x) (union"), "y", "s")
    text = encode_graph(g).program
    assert '(Input "a\\"b" ' in text and '(Input "x) (union" ' in text


def test_unrepresentable_characters_are_refused_by_name():
    for bad in ("a\x01b", "cr\r", "e\u0301", "zero\u200bwidth"):
        with pytest.raises(UnsupportedError, match=r"character \d+ \(U\+[0-9A-F]{4}\) cannot be written"):
            egg_string(bad)
    g = _graph(("ok", "bell\x07"), "y", "s")
    with pytest.raises(UnsupportedError, match=r"'bell\\x07'"):
        g.compile(backend="cpu", search=ls.SearchOptions(budget=1, roll=False, progress=False))
    # the reference interpreter never writes egglog text: any name works there
    g.compile(backend="reference")
