"""Horizontal fusion: independent generated kernels of one block shape run as one launch.

A decode layer's q, k and v products read the same normed row and nothing of each other; as
three kernels each pays a launch boundary (the next one's ramp waits for the last one's tail),
and the two small ones (512 outputs on the 1B) leave most multiprocessors idle.  Merged, their
blocks form one grid: blocks ``[0, e0)`` run the first kernel, the next ``e1`` the second, and so
on, each part seeing its own block index and grid size (every generated kernel loops over its
work by block index and grid size, so any extent >= 1 is correct; each is its grid expression at
the call's dims, capped at :data:`PART_BLOCKS`).  The launch grid is the sum of the parts'
extents at the plan's bounds; blocks past the call's extents only wait and return.

Which kernels merge: the cuda dialect's generated kernels of the plain form (one ``__global__``
function of 256 threads whose text the writer made, :func:`merge_key`), no cluster, no dynamic
shared memory, a one-dimensional grid, of a kind with little static shared memory (the parts'
static arrays add up), and which kernels are independent is the program's business
(``codegen/program.py`` orders the ops so that such kernels are adjacent, then merges them).
"""

from __future__ import annotations

import hashlib
import re

from ....symbolic import as_expr, smin
from .spec import KernelSpec, LaunchShape
from .writer import Writer

__all__ = ["merge_key", "merge_kernels", "PART_BLOCKS", "MERGE_KINDS"]

# a part's blocks at most (its loop covers the rest): ~16 per multiprocessor on an H100
PART_BLOCKS = 2048
# kinds whose kernels merge: grid-stride loops with at most a few KiB of static shared memory
MERGE_KINDS = frozenset({"elementwise", "scatter", "warp", "row", "matmul_dot", "matmul_split"})
_SIGNATURE = re.compile(r'extern "C" __global__ void __launch_bounds__\(256\) (\w+)\((.*)\) \{')
_WAIT = "LS_KERNEL_BEGIN();"


def merge_key(spec: KernelSpec) -> tuple | None:
    """What a kernel must share with others to merge with them (its block and whether it waits on
    its predecessor), or None where it cannot merge (see the module docstring)."""
    shape = spec.launch
    if (spec.library is not None or shape.kind not in MERGE_KINDS or shape.cluster != (1, 1, 1)
            or shape.shared_bytes or not (shape.grid[1] == 1 and shape.grid[2] == 1)):
        return None
    first = spec.source.split("\n", 1)[0]
    found = _SIGNATURE.fullmatch(first)
    if found is None or found.group(1) != spec.name or spec.source.count("__global__") != 1:
        return None
    if not as_expr(shape.grid[0]).free_vars() <= set(spec.dims):
        return None  # the wrapper computes each part's extent from the part's own dims
    if any(t in spec.source for t in ("blockIdx.y", "blockIdx.z", "gridDim.y", "gridDim.z")):
        return None
    return (shape.block, _WAIT in spec.source)


def merge_kernels(specs: list[KernelSpec]) -> KernelSpec:
    """One kernel running ``specs`` (each with the same :func:`merge_key`, not None) side by side.
    Its parameters are the table, every part's dims in order, then every part's buffers in order:
    a merged launch's arguments are its parts' dim slots, then their buffer slots."""
    keys = {merge_key(s) for s in specs}
    if len(specs) < 2 or None in keys or len(keys) != 1:
        raise ValueError("merge_kernels: two or more kernels of one merge key are needed")
    ((block, waits),) = keys
    w = Writer("cuda")
    # parts named after the merged kernel too: one module may hold two merged kernels sharing a part
    tag = hashlib.sha256(" ".join(s.name for s in specs).encode()).hexdigest()[:8]
    parts: dict[str, str] = {}
    calls, extents, dim_params, buf_params = [], [], [], []
    for p, spec in enumerate(specs):
        first, rest = spec.source.split("\n", 1)
        params = _SIGNATURE.fullmatch(first).group(2)
        body = rest.replace("blockIdx.x", "_ls_bx").replace("gridDim.x", "_ls_gx")
        part = f"{spec.name}_in_{tag}"
        parts[part] = (f"static __device__ __forceinline__ void {part}({params}, const long long _ls_bx, "
                       f"const long long _ls_gx) {{\n{body}")
        dims = [f"d{p}_{j}" for j in range(len(spec.dims))]
        bufs = [f"b{p}_{j}" for j in range(len(spec.buffers))]
        dim_params += dims
        buf_params += bufs
        # the extent from the part's own dims (the writer's D<i> are the merged kernel's dims,
        # read below from the first part that names each)
        extents.append(w.expr(smin(as_expr(spec.launch.grid[0]), PART_BLOCKS)))
        calls.append((part, [*dims, *bufs], dict(zip(spec.dims, dims))))
    dim_source: dict[str, str] = {}
    for _, _, named in calls:
        for name, param in named.items():
            dim_source.setdefault(name, param)
    lines = [f"const long long D{i} = T[{dim_source[name]}];" for i, name in enumerate(w.dims)]
    lines += w.prologue.lines
    lines.append("long long _ls_b = blockIdx.x;")
    for (part, args, _), e in zip(calls, extents):
        lines.append(f"if (_ls_b < {e}) {{ {part}(T, {', '.join(args)}, _ls_b, {e}); return; }}")
        lines.append(f"_ls_b -= {e};")
    if waits:  # a block with no part still waits on the previous kernel (prelude/cuda.cuh)
        lines.append(_WAIT)
    params = ["const long long* LS_RESTRICT T", *(f"int {d}" for d in dim_params), *(f"int {b}" for b in buf_params)]
    head = f'extern "C" __global__ void __launch_bounds__(256) KNAME({", ".join(params)}) {{'
    text = "\n".join(parts.values()) + "\n" + "\n".join([head, *("    " + ln for ln in lines), "}"]) + "\n"
    name = "ls_merged_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    grid = sum((smin(as_expr(s.launch.grid[0]), PART_BLOCKS) for s in specs), as_expr(0))
    launch = LaunchShape("merged", (grid, as_expr(1), as_expr(1)), block)
    preludes = tuple(sorted({p for s in specs for p in s.preludes}))
    return KernelSpec(name, text.replace("KNAME", name), tuple(d for s in specs for d in s.dims),
                      tuple(b for s in specs for b in s.buffers), launch, specs[0].count, preludes,
                      parts=tuple(specs))
