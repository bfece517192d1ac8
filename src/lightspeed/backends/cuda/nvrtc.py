"""Compiling generated CUDA C to a cubin with NVRTC (``cuda.bindings.nvrtc``).

NVRTC needs no GPU: CI compiles every kernel its graphs generate for ``sm_90`` on a CPU machine.
Compiled cubins are kept in memory and on disk (the compile cache, :mod:`lightspeed.cache`),
keyed by the source's hash, the target architecture, the NVRTC version and the options.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading

from ... import cache
from ...errors import LightspeedError

__all__ = ["compile_cubin", "compile_many", "compile_ptx", "nvrtc_version", "NvrtcError", "OPTIONS"]

# no fast math: the kernels' float results must match the reference to ~1e-6
OPTIONS = ("-std=c++17", "--device-as-default-execution-space")


class NvrtcError(LightspeedError):
    """NVRTC is missing or rejected a generated kernel (a code generation bug)."""


_memory: dict[str, bytes] = {}
_lock = threading.Lock()


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:
        raise NvrtcError(f"NVRTC is not installed: pip install 'lightspeed[cuda]' ({e})") from None
    return nvrtc


def nvrtc_version() -> str:
    nv = _nvrtc()
    try:
        err, major, minor = nv.nvrtcVersion()
    except RuntimeError as e:  # the bindings found no libnvrtc
        raise NvrtcError(f"NVRTC library not found ({e}); pip install nvidia-cuda-nvrtc") from None
    return f"{major}.{minor}"


def _check(nv, result, what: str, prog=None):
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != nv.nvrtcResult.NVRTC_SUCCESS:
        log = ""
        if prog is not None:
            _, n = nv.nvrtcGetProgramLogSize(prog)
            buf = b" " * n
            nv.nvrtcGetProgramLog(prog, buf)
            log = buf.decode(errors="replace").strip()
        raise NvrtcError(f"NVRTC {what} failed: {err}\n{log}")
    return rest[0] if len(rest) == 1 else tuple(rest)


def compile_cubin(source: str, arch: str = "sm_90") -> bytes:
    """The cubin of ``source`` for ``arch`` (cached in memory and on disk)."""
    version = nvrtc_version()
    key = cache.digest("cubin", version, arch, OPTIONS, hashlib.sha256(source.encode()).hexdigest())
    hit = _memory.get(key)
    if hit is not None:
        return hit
    entry = cache.load(f"cubin-{key}")
    if isinstance(entry, dict) and isinstance(entry.get("cubin"), str):
        image = base64.b64decode(entry["cubin"])
    else:
        image = _compile(source, arch)
        cache.store(f"cubin-{key}", {"cubin": base64.b64encode(image).decode()})
    with _lock:
        _memory[key] = image
    return image


def compile_many(sources: list[str], arch: str = "sm_90") -> list[bytes]:
    """Cubins of several sources, compiled in parallel threads (NVRTC is thread-safe and most of
    a compile is spent outside the interpreter)."""
    todo = list(dict.fromkeys(sources))
    if len(todo) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(len(todo), os.cpu_count() or 1)) as pool:
            done = dict(zip(todo, pool.map(lambda src: compile_cubin(src, arch), todo)))
    else:
        done = {src: compile_cubin(src, arch) for src in todo}
    return [done[src] for src in sources]


def compile_ptx(source: str, arch: str = "compute_90") -> str:
    """PTX of ``source`` (front end and NVVM only, no ptxas: what CI uses to check that every
    generated kernel compiles, at a third of a cubin's cost); not cached."""
    nvrtc_version()
    return _compile(source, arch, "PTX").decode(errors="replace")


def _compile(source: str, arch: str, product: str = "CUBIN") -> bytes:
    """``product`` ("CUBIN" or "PTX") of ``source`` for ``arch``."""
    nv = _nvrtc()
    prog = _check(nv, nv.nvrtcCreateProgram(source.encode(), b"lightspeed.cu", 0, [], []), "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in OPTIONS)]
        _check(nv, nv.nvrtcCompileProgram(prog, len(opts), opts), "compile", prog)
        size = _check(nv, getattr(nv, f"nvrtcGet{product}Size")(prog), f"nvrtcGet{product}Size")
        out = b" " * size
        _check(nv, getattr(nv, f"nvrtcGet{product}")(prog, out), f"nvrtcGet{product}")
        return out
    finally:
        nv.nvrtcDestroyProgram(prog)
