"""What ptxas gave each kernel of a cubin: registers a thread and bytes of local-memory frame
(spilled registers and arrays indexed at run time), read from the cubin's ELF sections without a
GPU or the CUDA toolkit's ``cuobjdump`` -- so a kernel's occupancy can be checked where it is
written (NVRTC compiles cubins on the CPU machine).

The cubin keeps them in its ``.nv.info`` section as attribute entries (format byte, attribute
byte, then a 16-bit size and the data for the sized format): ``EIATTR_REGCOUNT`` (0x2f) and
``EIATTR_FRAME_SIZE`` (0x11), each as (symbol index, value) in 32-bit words; the symbol's name
comes from ``.symtab`` and its string table.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["KernelResources", "kernel_resources"]

_REGCOUNT, _FRAME_SIZE = 0x2F, 0x11
_SIZED, _HALF = 4, 3  # attribute formats: a 16-bit size then data; a 16-bit value


@dataclass(frozen=True)
class KernelResources:
    registers: int  # a thread's
    frame_bytes: int  # a thread's local-memory frame: 0 means no spills and no local arrays

    def blocks_per_sm(self, threads: int, sm_registers: int = 65536) -> int:
        """Blocks of ``threads`` the registers let a multiprocessor hold (65536 a multiprocessor on
        sm_80 and sm_90; allocated in units of 256 a warp)."""
        per_warp = -(-max(self.registers, 1) * 32 // 256) * 256
        return sm_registers // (per_warp * -(-threads // 32))


def _sections(image: bytes) -> dict[str, tuple[int, int, int]]:
    """Section name -> (offset, size, link) of an ELF64 little-endian image."""
    if image[:4] != b"\x7fELF" or image[4] != 2:
        raise ValueError("not a 64-bit ELF image (a cubin)")
    shoff, = struct.unpack_from("<Q", image, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", image, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", image, shoff + i * shentsize) for i in range(shnum)]
    names_at = heads[shstrndx][4]
    out = {}
    for name, _, _, _, off, size, link, _, _, _ in heads:
        out[_string(image, names_at + name)] = (off, size, heads[link][4] if link < shnum else 0)
    return out


def _string(image: bytes, at: int) -> str:
    return image[at:image.index(b"\0", at)].decode()


def kernel_resources(image: bytes) -> dict[str, KernelResources]:
    """Each kernel's :class:`KernelResources`, by its symbol name, from a cubin."""
    sections = _sections(image)
    if ".nv.info" not in sections or ".symtab" not in sections:
        raise ValueError("a cubin without .nv.info or .symtab")
    sym_off, sym_size, strings = sections[".symtab"]
    names = [_string(image, strings + struct.unpack_from("<I", image, sym_off + 24 * i)[0])
             for i in range(sym_size // 24)]
    values: dict[int, dict[int, int]] = {}
    off, size, _ = sections[".nv.info"]
    p = off
    while p < off + size:
        fmt, attr = image[p], image[p + 1]
        if fmt == _SIZED:
            n, = struct.unpack_from("<H", image, p + 2)
            if attr in (_REGCOUNT, _FRAME_SIZE) and n == 8:
                sym, value = struct.unpack_from("<II", image, p + 4)
                values.setdefault(sym, {})[attr] = value
            p += 4 + n
        else:
            p += 4 if fmt == _HALF else 2
    return {names[sym]: KernelResources(v.get(_REGCOUNT, 0), v.get(_FRAME_SIZE, 0)) for sym, v in values.items()
            if _REGCOUNT in v}
