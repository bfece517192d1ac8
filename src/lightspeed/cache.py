"""On-disk cache of compilation results (saturated e-graphs, search decisions).

An entry is one file, ``<name>.json``: a header line ``{"format": FORMAT, "sha256": <hex>}`` and then the
payload, JSON, whose bytes the checksum covers. An entry that is missing, truncated, tampered with, of
another format, planted as a symlink or rejected by the caller's validator is discarded and recomputed,
never fatal; with ``LIGHTSPEED_LOG=cache`` each discarded entry is reported once per process.

Writes go to a fresh ``mkstemp`` file (0600) in the cache directory (0700) and are renamed over the
entry with ``os.replace``: a concurrent reader sees the old entry or the new one, never half a file,
and nothing an attacker links into the directory is written through.

What the checksum is not: a signature.  It catches corruption, truncation and an entry copied under
another key; an entry rewritten with a recomputed checksum by someone who can write the private
folder is trusted (a changed e-graph can then give a wrong program).  Only the user (or root) can
write there -- a shared or foreign-owned folder is refused -- and such a writer could as well edit
the installed package, so the cache is exactly as trustworthy as the user's own files; a key kept
beside the entries would not change that.

Root: ``$LIGHTSPEED_CACHE_DIR``, else ``$XDG_CACHE_HOME/lightspeed``, else ``~/.cache/lightspeed``;
``LIGHTSPEED_CACHE=0`` turns the compile cache off. Default model weights live under `root()` too
(see `lightspeed.weights.fetch`)."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["cache_dir", "root", "load", "store", "digest", "unsafe_dir", "report", "read_file", "FORMAT",
           "CacheEntryError", "check_egraph", "decision_validator"]

# bumped when the file layout changes; entries of another format are discarded
FORMAT = 2  # 2: the header names the entry's own key (an entry copied under another key is refused)

# an entry bigger than this is not a cache entry of ours (the largest e-graphs are a few MB)
_MAX_BYTES = 1 << 30

_reported: set[str] = set()
_reported_lock = threading.Lock()


class CacheEntryError(ValueError):
    """A cache entry is unusable (the caller recomputes it)."""


def root() -> Path:
    """lightspeed's per-user cache root: ``$XDG_CACHE_HOME/lightspeed``, else ``~/.cache/lightspeed``."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    # the XDG spec says relative values are invalid and must be ignored
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "lightspeed"
    return Path.home() / ".cache" / "lightspeed"


def cache_dir() -> Path | None:
    """Where saturated e-graphs and search decisions are kept: ``$LIGHTSPEED_CACHE_DIR``, else `root()`;
    None when ``LIGHTSPEED_CACHE=0`` turns the cache off."""
    if os.environ.get("LIGHTSPEED_CACHE", "1") == "0":
        return None
    d = os.environ.get("LIGHTSPEED_CACHE_DIR")
    return Path(d) if d else root()


def digest(*parts: object) -> str:
    """A stable key for `parts` (their `str`s, separated so that ("ab", "c") and ("a", "bc") differ)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(str(p).encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def _logging() -> bool:
    return "cache" in os.environ.get("LIGHTSPEED_LOG", "").split(",")


def report(name: str, why: str) -> None:
    """Tell (``LIGHTSPEED_LOG=cache``) that entry `name` was discarded, once per process per entry."""
    if not _logging():
        return
    with _reported_lock:
        if name in _reported:
            return
        _reported.add(name)
    print(f"lightspeed cache: {name}: {why}", file=sys.stderr)


def _check_name(name: str) -> None:
    # names are built from fixed prefixes and hex digests; anything else could escape the directory
    if not name or "/" in name or "\\" in name or name.startswith(".") or "\0" in name:
        raise ValueError(f"invalid cache entry name {name!r}")


def _encode(name: str, data: Any) -> bytes:
    payload = json.dumps(data, separators=(",", ":")).encode()
    header = json.dumps({"format": FORMAT, "entry": name, "sha256": hashlib.sha256(payload).hexdigest()}).encode()
    return header + b"\n" + payload


def _decode(raw: bytes, name: str) -> Any:
    header_line, sep, payload = raw.partition(b"\n")
    if not sep:
        raise CacheEntryError("no header line (truncated or from an older version)")
    try:
        header = json.loads(header_line)
    except ValueError as e:
        raise CacheEntryError(f"unreadable header: {e}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        got = header.get("format") if isinstance(header, dict) else None
        raise CacheEntryError(f"format {got!r}, expected {FORMAT}")
    if header.get("entry") != name:  # an intact entry of another key (another graph, rules or device)
        raise CacheEntryError(f"the entry of {str(header.get('entry'))[:80]!r}, not of this key")
    want = header.get("sha256")
    if not isinstance(want, str) or hashlib.sha256(payload).hexdigest() != want:
        raise CacheEntryError("checksum mismatch (truncated or modified)")
    try:
        return json.loads(payload)
    except ValueError as e:  # only reachable if the checksum collides or the writer was broken
        raise CacheEntryError(f"unreadable payload: {e}") from None


def read_file(path: Path, own: bool = False) -> bytes | None:
    """The bytes of the regular file `path`, not through a symlink; None when it does not exist.
    With `own`, the file must also be this user's and writable by nobody else (a library that
    will run, say).  Anything else raises CacheEntryError."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CacheEntryError("the entry is a symlink") from None
        raise CacheEntryError(f"cannot open: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CacheEntryError("not a regular file")
        if own and ((hasattr(os, "getuid") and st.st_uid != os.getuid()) or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)):
            raise CacheEntryError("not this user's own file")
        if st.st_size > _MAX_BYTES:
            raise CacheEntryError(f"{st.st_size} bytes, more than any entry")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def unsafe_dir(d: Path, create: bool) -> str | None:
    """Why `d` must not be used (None when it is a directory we own that nobody else can write into);
    with `create`, a missing `d` is made, mode 0700."""
    try:
        if create:
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = d.stat()
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return e.strerror or str(e)
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    # a directory of another user (e.g. planted in a shared /tmp), or one others can write into, could
    # hold crafted entries: the checksum catches accidents, not someone who recomputes it
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return "owned by another user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "writable by other users"
    return None


def load(name: str, validate: Callable[[Any], None] | None = None) -> Any | None:
    """The payload of entry `name`, or None when there is none or it is unusable.

    `validate(payload)` raises (any exception) on a structurally wrong payload; such an entry is discarded
    like a corrupt one. Nothing here raises: the caller recomputes on None."""
    _check_name(name)
    d = cache_dir()
    if d is None:
        return None
    why = unsafe_dir(d, create=False)
    if why is not None:
        if why != "missing":
            report(str(d), f"cache directory {why}; not used")
        return None
    try:
        raw = read_file(d / f"{name}.json")
        if raw is None:
            return None
        data = _decode(raw, name)
        if validate is not None:
            validate(data)
        return data
    except Exception as e:  # noqa: BLE001  (an unusable entry is recomputed, whatever went wrong)
        report(name, f"discarded ({e or type(e).__name__}); recomputing")
        return None


def store(name: str, data: Any) -> None:
    """Write entry `name` atomically; failures are ignored (a read-only home must not stop compilation)."""
    _check_name(name)
    d = cache_dir()
    if d is None:
        return
    why = unsafe_dir(d, create=True)
    if why is not None:
        report(str(d), f"cache directory {why}; not used")
        return
    blob = _encode(name, data)
    try:
        # mkstemp: a fresh name opened O_CREAT|O_EXCL with mode 0600, so a link planted at any
        # predictable name is never written through
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=d)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        # rename replaces a symlink at the entry's name instead of following it
        os.replace(tmp, d / f"{name}.json")
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


# --- validators of the entries the search keeps ---------------------------------------------------------

def _require(cond: bool, what: str) -> None:
    if not cond:
        raise CacheEntryError(what)


def _is_str_dict(x: Any) -> bool:
    return isinstance(x, dict) and all(isinstance(k, str) for k in x)


def check_egraph(data: Any) -> None:
    """Validator of a saturated e-graph entry: ``nodes`` (id -> {op, children, eclass}), ``class_data``
    (class id -> {type}), ``root_eclasses`` (class ids) and ``rule_matches`` (rule -> count), all
    referring to each other consistently."""
    _require(_is_str_dict(data), "not an object")
    for key in ("nodes", "class_data", "root_eclasses", "rule_matches"):
        _require(key in data, f"missing {key!r}")
    nodes, classes, roots, matches = data["nodes"], data["class_data"], data["root_eclasses"], data["rule_matches"]
    _require(_is_str_dict(classes), "class_data is not an object of class ids")
    for cid, c in classes.items():
        _require(_is_str_dict(c) and isinstance(c.get("type"), str), f"class {cid!r} has no type")
    _require(_is_str_dict(nodes) and nodes, "nodes is not a non-empty object of node ids")
    for nid, n in nodes.items():
        _require(_is_str_dict(n), f"node {nid!r} is not an object")
        _require(isinstance(n.get("op"), str), f"node {nid!r}: op is not a string")
        _require(isinstance(n.get("eclass"), str) and n["eclass"] in classes, f"node {nid!r}: unknown eclass")
        ch = n.get("children")
        _require(isinstance(ch, list) and all(isinstance(c, str) and c in nodes for c in ch),
                 f"node {nid!r}: children are not node ids")
    _require(isinstance(roots, list) and roots and all(isinstance(r, str) and r in classes for r in roots),
             "root_eclasses are not class ids")
    _require(_is_str_dict(matches) and all(type(v) is int and v >= 0 for v in matches.values()),
             "rule_matches is not an object of counts")


_CANDIDATE_FIELDS = {"index": (int,), "origin": (str,), "ops": (dict,), "seconds": (float, int, type(None)),
                     "error": (str, type(None))}


def decision_validator(nodes: Mapping[str, Mapping[str, Any]]) -> Callable[[Any], None]:
    """Validator of a search decision against the e-graph it was made on (`nodes`: the serialised
    e-graph's node id -> node): ``choice`` maps e-class ids to ids of nodes of that class,
    ``candidates`` are well-formed results and ``winner`` is one of their indexes."""
    def check(data: Any) -> None:
        _require(_is_str_dict(data), "not an object")
        for key in ("choice", "winner", "candidates"):
            _require(key in data, f"missing {key!r}")
        choice, winner, cands = data["choice"], data["winner"], data["candidates"]
        _require(_is_str_dict(choice) and choice, "choice is not a non-empty object")
        for cid, nid in choice.items():
            node = nodes.get(nid) if isinstance(nid, str) else None
            _require(node is not None, f"choice {cid!r} -> {nid!r}: no such node in the e-graph")
            _require(node.get("eclass") == cid, f"choice {cid!r} -> {nid!r}: the node is of another class")
        _require(isinstance(data.get("recomputed", False), bool), "recomputed is not a boolean")
        _require(isinstance(cands, list) and cands, "candidates is not a non-empty list")
        for c in cands:
            _require(_is_str_dict(c) and set(c) <= set(_CANDIDATE_FIELDS) and
                     all(k in c for k in ("index", "origin", "ops", "seconds")), "malformed candidate")
            for k, types in _CANDIDATE_FIELDS.items():
                _require(k not in c or (isinstance(c[k], types) and not isinstance(c[k], bool)),
                         f"candidate field {k!r} has the wrong type")
            _require(all(isinstance(k, str) and type(v) is int for k, v in c["ops"].items()),
                     "candidate ops are not counts")
        _require(type(winner) is int and any(c["index"] == winner for c in cands), "winner is not a candidate")
    return check
