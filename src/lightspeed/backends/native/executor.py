"""The host executor: the ``c`` dialect of the kernel renderer compiled by the system C compiler
and called through ``ctypes``.

It runs the same kernel programs as the GPU (same table, same launch list, same arena plan), one
work item after another, so the whole generated-kernel path (index arithmetic, validity, region
bodies, numerics, the runtime's planning and aliasing) is tested on machines without a GPU.
Compiled libraries are cached in the compile cache directory, keyed by the source's hash, the
compiler, its flags and the CPU; the compiler is the system's (``$CC``, cc, gcc, clang) or, where
there is none, the ``ziglang`` wheel's ``zig cc``; without any, :func:`available` is False.

Kernels are cached one by one, not only as modules: a kernel's name is the hash of its text, and
an index beside the libraries records which library holds each kernel compiled on this machine
(per compiler, flags and CPU).  A program compiles only the kernels no library holds yet (the
search's candidates share most of theirs, prefill and decode many, a rolled model's stitched
program all of them) into one module, and its launch list into a small runner that calls the
kernels through a table of function addresses (no prelude to parse: it compiles in ~0.1 s).
Cold compiles are dominated by the C compiler, so this is most of their time.

*Trust.*  A library is code this process runs, so the folder is held to the main cache's rule (a
directory of this user nobody else can write into; else a fresh private one is used), and a
library is loaded only if it is a regular file of this user whose bytes hash to the value
recorded beside it (``k<key>.sha256``) when this user compiled it; anything else (a planted or
damaged file with the predictable name) is compiled again and replaced.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ... import cache
from ...errors import IndexOutOfRange, LightspeedError
from ..codegen.kernels import KernelSpec, module_source
from ..codegen.kernels.source import prelude_digest
from ..codegen.program import Executor, Launch

__all__ = ["HostExecutor", "compiler", "available"]

PROGRAM = "__program__"  # the handle of the function that runs a program's whole launch list
PROGRAM_TIMED = "__program_timed__"  # ... and of its twin that times each kernel (LIGHTSPEED_TRACE)
# -march=native: kernels are compiled on the machine that runs them (the cache key names its CPU);
# no -ffast-math: float results must match the reference's rounding.  -fno-math-errno: sqrtf and the
# like need not set errno (nothing reads it), so loops calling them vectorise (an AdamW update
# region did not); their results are the same.  -fopenmp where the compiler has OpenMP (gcc, most
# clangs); without it the kernels run on the calling thread.
FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-fno-strict-aliasing", "-fwrapv", "-fno-math-errno",
         "-std=gnu11")


def _cpu_id() -> str:
    """The CPU's model and feature flags (a kernel built with -march=native runs only on such a CPU)."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))][:2]
        return "".join(lines)
    except OSError:
        import platform

        return platform.processor() or platform.machine()


def compiler() -> list[str] | None:
    """The C compiler's command: ``$CC``, else cc/gcc/clang on the PATH, else the ``ziglang``
    package's ``zig cc`` (``pip install ziglang``: a compiler any machine with pip can have)."""
    cc = os.environ.get("CC")
    if cc and shutil.which(cc):
        return [cc]
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return [name]
    import importlib.util

    if importlib.util.find_spec("ziglang") is not None:
        return [sys.executable, "-m", "ziglang", "cc"]
    return None


def available() -> bool:
    return compiler() is not None


_openmp: dict[str, bool] = {}


def flags(cc: list[str]) -> list[str]:
    """The flags kernels are built with by ``cc``: :data:`FLAGS`, and -fopenmp when ``cc`` builds
    and links an OpenMP program (probed once per compiler)."""
    key = " ".join(cc)
    if key not in _openmp:
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "omp.c"
            src.write_text("#include <omp.h>\nint ls_threads(void) { return omp_get_max_threads(); }\n")
            res = subprocess.run([*cc, *FLAGS, "-fopenmp", "-o", str(Path(tmp) / "omp.so"), str(src)],
                                 capture_output=True, text=True)
            _openmp[key] = res.returncode == 0
    return [*FLAGS, "-fopenmp"] if _openmp[key] else list(FLAGS)


_libs: dict[str, tuple[ctypes.CDLL, Path]] = {}  # source key -> the library and its file
_lock = threading.Lock()
# kernel name -> its function, per build configuration (compiler, flags, CPU)
_kernels: dict[tuple[str, str], Any] = {}


def _config() -> tuple[list[str], list[str], str]:
    """The compiler, its flags and a tag naming the configuration (the CPU included)."""
    cc = compiler()
    if cc is None:
        raise LightspeedError("no C compiler found (set $CC, install gcc or clang, or pip install ziglang)")
    cflags = flags(cc)
    # the preludes' digest: kernels are found again by name (the hash of their own text only)
    config = [*cc, *cflags, _cpu_id(), prelude_digest("c")]
    return cc, cflags, hashlib.sha256("\n".join(config).encode()).hexdigest()[:16]


_stand_ins: dict[str, Path] = {}  # a folder refused this process -> the private one used instead


def _folder() -> Path:
    """Where compiled libraries (and the kernel index) are kept: the cache's ``native`` folder, or
    ``$TMPDIR/lightspeed-<uid>`` with the cache off, held to the main cache's rule (a directory
    this user owns that nobody else can write into); one that breaks it (planted in a shared
    /tmp, say) is never read: this process uses a fresh private folder instead."""
    root = cache.cache_dir()
    folder = Path(root) / "native" if root is not None else Path(tempfile.gettempdir()) / f"lightspeed-{os.getuid()}"
    why = cache.unsafe_dir(folder, create=True)
    if why is None:
        return folder
    with _lock:
        stand_in = _stand_ins.get(str(folder))
        if stand_in is None:
            cache.report(str(folder), f"native kernel folder {why}; using a private temporary one")
            stand_in = _stand_ins[str(folder)] = Path(tempfile.mkdtemp(prefix="lightspeed-native-"))
    return stand_in


def _own_file(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a regular file (not a link) of this user that nobody else
    can write, else None."""
    try:
        return cache.read_file(path, own=True)
    except (cache.CacheEntryError, OSError):
        return None


def _hash_file(lib_file: Path) -> Path:
    return lib_file.with_suffix(".sha256")


def _trusted(lib_file: Path) -> bool:
    """Whether ``lib_file`` is a library this process's user compiled: its bytes hash to what was
    recorded beside it when it was written (:func:`_write_library`), both files ours and private."""
    data, recorded = _own_file(lib_file), _own_file(_hash_file(lib_file))
    return data is not None and recorded is not None and hashlib.sha256(data).hexdigest() == recorded.decode().strip()


def _write_atomically(folder: Path, target: Path, data: bytes) -> None:
    fd, tmpname = tempfile.mkstemp(dir=folder, suffix=".tmp")  # mode 0600, a fresh name
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmpname, target)


def _write_library(folder: Path, target: Path, data: bytes) -> None:
    """``data`` as library ``target`` and its hash beside it (what :func:`_trusted` checks)."""
    _write_atomically(folder, target, data)
    _write_atomically(folder, _hash_file(target), hashlib.sha256(data).hexdigest().encode())


def _build(source: str) -> tuple[ctypes.CDLL, Path]:
    """The library of ``source`` (compiled, or loaded from the cache) and its file.  Threads may
    build different sources at once (the compiler runs outside the lock); two building the same
    one both write a valid file, the last replacing the first."""
    cc, cflags, tag = _config()
    key = hashlib.sha256(f"{tag}\n{source}".encode()).hexdigest()[:24]
    with _lock:
        hit = _libs.get(key)
    if hit is not None:
        return hit
    folder = _folder()
    target = folder / f"k{key}.so"
    hit = _load_trusted(target)
    if hit is not None:
        return hit
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.c"
        src.write_text(source)
        out = Path(tmp) / "k.so"
        res = subprocess.run([*cc, *cflags, "-o", str(out), str(src), "-lm"], capture_output=True, text=True)
        if res.returncode != 0:
            raise LightspeedError(f"C compiler failed on a generated kernel:\n{res.stderr[-4000:]}")
        _write_library(folder, target, out.read_bytes())
    hit = _load_trusted(target)
    if hit is None:  # replaced between the write and the load: nothing but this user can do that
        raise LightspeedError(f"the native kernel library {target} changed while it was being loaded")
    return hit


def _load_trusted(lib_file: Path) -> tuple[ctypes.CDLL, Path] | None:
    """The library in ``lib_file`` (``k<key>.so``), loaded once per process, and only if it is
    :func:`_trusted`; None otherwise (the caller compiles it again)."""
    key = lib_file.stem[1:]
    with _lock:
        hit = _libs.get(key)
        if hit is None:
            if not _trusted(lib_file):
                return None
            hit = _libs[key] = (ctypes.CDLL(str(lib_file)), lib_file)
    return hit


def _indexed(folder: Path, tag: str, name: str) -> Any:
    """Kernel ``name`` from the library the on-disk index names for it, or None."""
    try:
        entry = (folder / f"index-{tag}" / name).read_text().strip()
    except OSError:
        return None
    if not re.fullmatch(r"k[0-9a-f]{24}\.so", entry):  # a library of this folder
        return None
    try:
        hit = _load_trusted(folder / entry)
    except OSError:
        return None
    return getattr(hit[0], name, None) if hit is not None else None


def _record(folder: Path, tag: str, names: list[str], lib_file: Path) -> None:
    index = folder / f"index-{tag}"
    try:
        index.mkdir(exist_ok=True, mode=0o700)
        for name in names:
            _write_atomically(index, index / name, lib_file.name.encode())
    except OSError:  # a read-only cache: the kernels are compiled again next time
        pass


def kernel_functions(specs: list[KernelSpec]) -> dict[str, Any]:
    """The compiled function of each distinct kernel of ``specs``: found in this process, in a
    library the on-disk index names, or compiled (all the missing ones in one module)."""
    _, _, tag = _config()
    folder = _folder()
    found: dict[str, Any] = {}
    missing: dict[str, KernelSpec] = {}
    for s in specs:
        if s.name in found or s.name in missing:
            continue
        fn = _kernels.get((tag, s.name)) or _indexed(folder, tag, s.name)
        if fn is None:
            missing[s.name] = s
        else:
            found[s.name] = _kernels[(tag, s.name)] = fn
    if missing:
        parts = _modules([missing[k] for k in sorted(missing)])
        with ThreadPoolExecutor(len(parts)) as pool:  # one compiler process per module
            built = list(pool.map(lambda part: _build(module_source(part, "c")), parts))
        for part, (lib, lib_file) in zip(parts, built):
            for spec in part:
                found[spec.name] = _kernels[(tag, spec.name)] = getattr(lib, spec.name)
            _record(folder, tag, [spec.name for spec in part], lib_file)
    return found


# kernels to compile per module before they are split over several compiler processes
PARALLEL_KERNELS = 12


def _modules(specs: list[KernelSpec]) -> list[list[KernelSpec]]:
    """``specs`` split into modules compiled side by side, one per core (at most 4), each of at
    least :data:`PARALLEL_KERNELS` kernels, balanced by source length (deterministically)."""
    n = max(1, min(os.cpu_count() or 1, 4, len(specs) // PARALLEL_KERNELS))
    parts: list[list[KernelSpec]] = [[] for _ in range(n)]
    sizes = [0] * n
    for spec in sorted(specs, key=lambda s: (-len(s.source), s.name)):
        k = sizes.index(min(sizes))
        parts[k].append(spec)
        sizes[k] += len(spec.source)
    return [sorted(p, key=lambda s: s.name) for p in parts if p]


def _runner(launches: list[Launch]) -> tuple[str, str, list[str]]:
    """C source of one function running ``launches`` in order, each kernel called through a table
    of function addresses (``K``, in the order of the returned names); and the function's name.
    Beside it, ``<name>_timed`` does the same and writes the monotonic clock before the first
    kernel and after each one into ``S`` (``LIGHTSPEED_TRACE``: each kernel timed where it runs,
    not through a Python call per kernel, whose own cost had doubled a short kernel's time)."""
    slot: dict[str, int] = {}
    calls = []
    for launch in launches:
        k = slot.setdefault(launch.spec.name, len(slot))
        params = ", ".join(["const long long*"] + ["int"] * len(launch.args))
        calls.append(f"  ((void (*)({params}))K[{k}])(T, {', '.join(map(str, launch.args))});\n")
    text = "".join(calls)
    name = f"ls_program_{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    timed = "".join(f"{c}  ls_now(S + {i + 1});\n" for i, c in enumerate(calls))
    source = ("#include <time.h>\n"
              "static void ls_now(double* s) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); "
              "*s = t.tv_sec + 1e-9 * t.tv_nsec; }\n"
              f"void {name}(void* const* K, const long long* T) {{\n{text}}}\n"
              f"void {name}_timed(void* const* K, const long long* T, double* S) {{\n  ls_now(S);\n{timed}}}\n")
    return name, source, list(slot)


class _State:
    """A thread's run state: the arena, the table of dims and addresses the kernels read (T), and
    before it, at T[-1], the address of the call's error word (``ls_oob`` sets it)."""

    def __init__(self, nbytes: int, slots: int):
        self.arena = np.empty(nbytes, np.uint8)
        self.arena_address = self.arena.ctypes.data
        self.words = np.zeros(slots + 1, np.int64)
        self.table = self.words[1:]
        self.table_address = self.table.ctypes.data
        self.error = np.zeros(1, np.int64)
        self.words[0] = self.error.ctypes.data

    def check(self) -> None:
        if self.error[0]:
            self.error[0] = 0
            raise IndexOutOfRange("Gather: an index is out of range for its data (an embedding id past the "
                                  "table, an index past the rows it selects)")


class HostExecutor(Executor):
    """Kernels compiled for this CPU, run on the calling thread; arrays are numpy arrays.

    Each thread that runs kernels gets its own OpenMP team (libgomp keeps it for the thread's
    life); with two such teams on a 2-core machine the workers stop spinning between parallel
    regions and a decode step of hundreds of short regions ran 3.5x slower.  A process that steps
    a model on a worker thread (``lightspeed serve``) compiles it on that thread too.  (Handing
    every call to one kernel thread cost 56-85 us per call on the 2-core VM.)"""

    name = "host"
    dialect = "c"

    def compile(self, specs: list[KernelSpec], launches: list[Launch] | None = None) -> dict[str, Any]:
        """The kernels and, when the launch list is given, one C function running them all in
        order (a call costs one ctypes transition, not one per kernel)."""
        if not specs:
            return {}
        functions = kernel_functions(specs)
        handles: dict[str, Any] = {}
        for s in specs:
            if s.name not in handles:
                fn = functions[s.name]
                fn.restype = None
                fn.argtypes = [ctypes.c_void_p] + [ctypes.c_int] * (len(s.dims) + len(s.buffers))
                handles[s.name] = fn
        if launches:
            name, source, order = _runner(launches)
            lib = _build(source)[0]
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = None, [ctypes.c_void_p, ctypes.c_void_p]
            table = (ctypes.c_void_p * len(order))(*(ctypes.cast(functions[k], ctypes.c_void_p).value for k in order))
            handles[PROGRAM] = functools.partial(fn, table)  # (the partial keeps the table alive)
            timed = getattr(lib, f"{name}_timed")
            timed.restype, timed.argtypes = None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
            handles[PROGRAM_TIMED] = functools.partial(timed, table)
        return handles

    def empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        return np.empty(shape, dtype)

    def upload(self, host: np.ndarray, wait: bool = True) -> np.ndarray:
        return np.ascontiguousarray(host)

    def address(self, array: Any) -> int:
        if not (isinstance(array, np.ndarray) and array.flags.c_contiguous):
            what = "a non-contiguous view" if isinstance(array, np.ndarray) else type(array).__name__
            raise LightspeedError(f"host kernels need C-contiguous numpy arrays, got {what}")
        return array.ctypes.data

    def owns(self, array: Any) -> bool:
        return isinstance(array, np.ndarray) and array.flags.c_contiguous and array.flags.writeable

    def span(self, first: Any, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        base = first
        while isinstance(getattr(base, "base", None), np.ndarray):
            base = base.base  # the array that owns the memory
        if not isinstance(first, np.ndarray) or not base.flags.c_contiguous:
            return None
        offset = first.ctypes.data - base.ctypes.data
        if offset < 0 or offset + math.prod(shape) * np.dtype(dtype).itemsize > base.nbytes:
            return None
        return np.ndarray(shape, dtype, buffer=base, offset=offset)

    def new_state(self, nbytes: int, slots: int) -> _State:
        return _State(nbytes, slots)

    def run(self, state: _State, launches: list[Launch], handles: dict[str, Any], bounds: Mapping[str, int]) -> None:
        program = handles.get(PROGRAM)
        if program is not None:
            program(state.table_address)
        else:
            t = state.table_address
            for launch in launches:
                handles[launch.spec.name](t, *launch.args)
        state.check()

    def run_traced(self, state: _State, launches: list[Launch], handles: dict[str, Any], bounds: Mapping[str, int]
                   ) -> list[tuple[Launch, float, float]]:
        timed = handles.get(PROGRAM_TIMED)
        if timed is not None:  # the clock read in C around each kernel (CLOCK_MONOTONIC: perf_counter's)
            stamps = np.zeros(len(launches) + 1, np.float64)
            timed(state.table_address, stamps.ctypes.data)
            state.check()
            return [(launch, float(stamps[i]), float(stamps[i + 1] - stamps[i])) for i, launch in enumerate(launches)]
        out, t = [], state.table_address
        for launch in launches:
            start = time.perf_counter()
            handles[launch.spec.name](t, *launch.args)
            out.append((launch, start, time.perf_counter() - start))
        state.check()
        return out
