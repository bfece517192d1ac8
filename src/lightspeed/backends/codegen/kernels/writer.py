"""The statements of one kernel and its function: the writer every kernel family renders with.

*The calling convention.*  A kernel takes the program's **table** ``T`` (an array of 64-bit
words: dim values and buffer addresses, filled by the runtime before each run) and one ``int``
per dim it reads and per buffer it touches, giving that item's slot in ``T``::

    k_<hash>(const long long* T, int dim_0, ..., int buf_out, int buf_in_0, ...)

so a captured CUDA graph stays valid when dims change or a call passes other input buffers: only
the table's contents change.

*Work.*  A kernel's work items (an expression of the dims) are distributed by its kind
(:data:`KINDS`): the ``cuda`` dialect runs them in a grid-stride loop (so the grid may be sized
once, at the dims' upper bounds) with one thread, one warp or one block per item, the ``c``
dialect in a plain loop or a division-free loop nest split over OpenMP threads.  The kind fixes
the kernel's :class:`~.spec.LaunchShape` (:func:`launch_shape`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass

from ....dtypes import DType
from ....errors import LightspeedError
from ....shape import ShapeTracker, View, contiguous_strides, unflatten_index
from ....symbolic import INDEX_VAR, Expr, const, sym
from .spec import KernelSpec, LaunchShape, grid_stride
from .types import int_literal

__all__ = ["Writer", "Point", "finish", "launch_shape", "loop_axes", "weight_prefetch", "index_at", "flat_of",
           "index_in", "split_products", "block_sums", "pairwise", "batch_offsets", "vector_dot", "KINDS", "WARP",
           "THREADS", "TILE_N", "TILE_K", "SPLIT_WARPS"]

WARP = 32
THREADS = 256  # threads per block of the grid-stride kinds
TILE_N, TILE_K = 32, 8  # matmul_tile: outputs per block row, k slices per block
# matmul_split: warps sharing one output's k, by the length of its weight row (split_warps):
# fewer warps a block give more blocks resident and more loads in flight per thread.  Measured on
# an H100 (twentieth session), one warp count for every product: the 1B step 1.288 / 1.258 /
# 1.280 ms with 8 / 4 / 2 warps, the 8B's 6.186 / 6.152 / 6.002 (ncu had put the 1B's q/k
# products at 21% of DRAM bandwidth with 3 blocks of 8 warps a multiprocessor).
# LIGHTSPEED_CUDA_SPLIT_WARPS=N: N warps for every product (an A/B switch)
_SPLIT_WARPS = os.environ.get("LIGHTSPEED_CUDA_SPLIT_WARPS", "auto").strip()
if _SPLIT_WARPS not in ("auto", "1", "2", "4", "8"):
    raise LightspeedError(f"LIGHTSPEED_CUDA_SPLIT_WARPS must be auto, 1, 2, 4 or 8, got {_SPLIT_WARPS!r}")
SPLIT_WARPS = 8  # the most warps a split product's block has (shared partials are sized by it)
# a weight product of fewer outputs than this runs a block per output (kind ``matmul_split``) rather
# than a warp: 2048 warps (the 1B's o, down and q) are ~16 a multiprocessor, too few loads in
# flight (the 1B's down product reached 59% of the copy bandwidth, its 8192-output gated one 85%;
# H100, fifteenth session); LIGHTSPEED_CUDA_SPLIT=0 keeps a warp per output, =N splits products
# of fewer than N outputs (A/B switches: the 8B's gated product, 14336 outputs, is not split)
_SPLIT = os.environ.get("LIGHTSPEED_CUDA_SPLIT", "1").strip()
if not _SPLIT.isdigit():
    raise LightspeedError(f"LIGHTSPEED_CUDA_SPLIT must be 0, 1 or a number of outputs, got {_SPLIT!r}")
SPLIT_BELOW = 8192 if _SPLIT == "1" else int(_SPLIT)
# ... and rows of at least this many bytes: one 16-byte load per thread of the block (shorter rows
# leave lanes idle; with k = 1024 bf16 the Qwen3-0.6B step went 1.33 -> 1.49 ms)
SPLIT_MIN_ROW_BYTES = WARP * 8 * 16


def _thread_loop(n: str) -> list[str]:
    return ["const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;",
            "const long long stride = (long long)gridDim.x * blockDim.x;",
            f"for (long long _ls_item = first; _ls_item < {n}; _ls_item += stride) {{"]


# items an element-wise thread takes per trip of its loop, unrolled (``LIGHTSPEED_CUDA_UNROLL``;
# 1: one).  One item a trip left ~8 KiB of loads in flight per multiprocessor (2048 threads x a
# bf16 pair): a prompt's SiLU-mul over 512 x 8192 (the grid capped at 16 blocks a multiprocessor,
# 8 items a thread) ran at 1.6 TB/s, 15 us a layer on an H100 (twenty-second session), which
# Little's law gives for ~1 MB in flight at ~0.8 us latency.
# (1 until measured on a GPU: the next session's scripts/gpu_next.sh has the A/B)
UNROLL = max(1, int(os.environ.get("LIGHTSPEED_CUDA_UNROLL", "1")))


def _unrolled_thread_loop(n: str) -> list[str]:
    """The thread loop, UNROLL items a trip (each at its own stride: a warp's loads stay
    contiguous), so that a thread's loads of several items are in flight at once."""
    if UNROLL == 1:
        return _thread_loop(n)
    return ["const long long first = blockIdx.x * (long long)blockDim.x + threadIdx.x;",
            "const long long stride = (long long)gridDim.x * blockDim.x;",
            f"for (long long _ls_base = first; _ls_base < {n}; _ls_base += {UNROLL} * stride) {{",
            "  #pragma unroll",
            f"  for (int _ls_u = 0; _ls_u < {UNROLL}; _ls_u++) {{",
            "  const long long _ls_item = _ls_base + _ls_u * stride;",
            f"  if (_ls_item < {n}) {{"]


def _warp_loop(n: str) -> list[str]:
    return [f"const int lane = threadIdx.x & {WARP - 1};",
            f"const long long first = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / {WARP};",
            f"const long long stride = ((long long)gridDim.x * blockDim.x) / {WARP};",
            f"for (long long _ls_item = first; _ls_item < {n}; _ls_item += stride) {{"]


def _block_loop(n: str) -> list[str]:
    return ["const int lane = threadIdx.x, slice = threadIdx.y;",
            f"for (long long _ls_item = blockIdx.x; _ls_item < {n}; _ls_item += gridDim.x) {{"]


def _cluster_loop(n: str) -> list[str]:  # every block of a cluster on the same item
    return ["const int lane = threadIdx.x, slice = threadIdx.y;",
            "const unsigned int _ls_crank = ls_cluster_rank(), _ls_csize = ls_cluster_size();",
            f"for (long long _ls_item = blockIdx.x / _ls_csize; _ls_item < {n}; _ls_item += gridDim.x / _ls_csize) {{"]


_CUDA_LOOPS: dict[str, Callable[[str], list[str]]] = {"thread": _thread_loop, "warp": _warp_loop,
                                                      "block": _block_loop, "cluster": _cluster_loop,
                                                      "threads_unrolled": _unrolled_thread_loop}
CLUSTER = 8  # blocks per cluster of the cluster kinds (sm_90's portable maximum)
# kind -> (the cuda loop: one thread, warp or block per item; items per block; the block)
_CUDA_WORK: dict[str, tuple[str, int, tuple[int, int, int]]] = {
    # (the grid as for one item a thread: a kernel of fewer items than the capped grid's threads
    # keeps every multiprocessor busy; a larger one's threads take UNROLL items a trip)
    "elementwise": ("threads_unrolled", THREADS, (THREADS, 1, 1)),
    "scatter": ("thread", THREADS, (THREADS, 1, 1)),
    "warp": ("warp", THREADS // WARP, (THREADS, 1, 1)),  # region reductions split over a warp's lanes
    "matmul_dot": ("warp", THREADS // WARP, (THREADS, 1, 1)),  # a dot product's k over a warp's lanes
    # a dot product's k over a block's SPLIT_WARPS warps (few long products: the decode's o, down, q)
    "matmul_split": ("block", 1, (WARP, SPLIT_WARPS, 1)),
    "matmul_tile": ("block", 1, (TILE_N, TILE_K, 1)),  # 32 outputs of a row, k over 8 thread rows
    "attention": ("block", 1, (WARP, 8, 1)),  # a query row per block, its keys over 8 warps (kernels/attention.py)
    "row": ("block", 1, (WARP, 8, 1)),  # a row per block of 8 warps (kernels/norm.py)
    "attention_cluster": ("cluster", 1, (WARP, 8, 1)),  # a query row per cluster of CLUSTER blocks
    "row_cluster": ("cluster", 1, (WARP, 8, 1)),  # a long reduction per cluster of CLUSTER blocks (region.py)
    "matmul_mma": ("block", 1, (128, 1, 1)),  # a 64 x 64 tile of C per block of 4 warps (kernels/matmul_mma.py)
    "matmul_mma_large": ("block", 1, (256, 1, 1)),  # a 128-row tile of C per block of 8 warps (the same)
    # a prompt's attention tile per cluster of 2 blocks of 4 warps, each taking every other key
    # tile (kernels/attention_mma.py, LIGHTSPEED_CUDA_ATTENTION_SPLIT)
    "matmul_mma_pair": ("cluster", 1, (128, 1, 1)),
}
# blocks per cluster where a cluster kind's is not CLUSTER
CLUSTER_BLOCKS = {"matmul_mma_pair": 2}
KINDS = (*_CUDA_WORK, "matmul_rows")  # matmul_rows: the c dialect's row items (kernels/matmul_rows.py)


def launch_shape(kind: str, items: Expr, warps: int = 0) -> LaunchShape:
    """The launch shape of a grid-stride kernel of ``kind`` over ``items`` work items (a c-dialect
    only kind gets one block: the host executor runs the items itself); ``warps``: a
    ``matmul_split`` block's own warp count."""
    if kind not in KINDS:
        raise LightspeedError(f"kernel renderer: unknown work kind {kind!r} (known: {', '.join(KINDS)})")
    work = _CUDA_WORK.get(kind)
    if work is None:
        return LaunchShape(kind, (const(1), const(1), const(1)))
    loop, per_block, block = work
    if kind == "matmul_split" and warps:
        block = (WARP, warps, 1)
    if loop == "cluster":  # a cluster per item: the grid counts clusters' blocks
        shape = grid_stride(kind, items, per_block, block)
        size = CLUSTER_BLOCKS.get(kind, CLUSTER)
        return LaunchShape(kind, (shape.grid[0] * size, shape.grid[1], shape.grid[2]), block,
                           cluster=(size, 1, 1), capped=True)
    return grid_stride(kind, items, per_block, block)


class Scope:
    def __init__(self, parent: Scope | None):
        self.parent = parent
        self.lines: list[str] = []
        self.memo: dict = {}

    def find(self, key):
        s = self
        while s is not None:
            if key in s.memo:
                return s.memo[key]
            s = s.parent
        return None


class Writer:
    """Statements of one kernel: dims read from the table, integer expressions with shared
    temporaries (dims-only ones hoisted into the prologue), and the region's value tree."""

    def __init__(self, dialect: str):
        self.dialect = dialect
        self.dims: list[str] = []
        self.prologue = Scope(None)
        self.scope = self.prologue
        self.index_vars: set[str] = set()
        # index variables holding data (a gather's index): any value, so no plain division by
        # the gathered tensor's dims (which may be zero while there is work)
        self.data_vars: set[str] = set()
        self.n = 0

    def tmp(self, prefix: str = "t") -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def push(self) -> Scope:
        self.scope = Scope(self.scope)
        return self.scope

    def pop(self) -> list[str]:
        s = self.scope
        self.scope = s.parent
        return s.lines

    def line(self, text: str) -> None:
        self.scope.lines.append(text)

    def dim(self, name: str) -> str:
        if name not in self.dims:
            self.dims.append(name)
        return f"D{self.dims.index(name)}"

    # integer expressions ------------------------------------------------
    def expr(self, e: Expr) -> str:
        kind = e.kind
        if kind == "const":
            return int_literal(e.value)
        if kind == "var":
            return e.name if e.name in self.index_vars else self.dim(e.name)
        hit = self.scope.find(e)
        if hit is not None:
            return hit
        target = self.scope
        if not (e.free_vars() & self.index_vars):  # depends on dims only: compute once, up front
            target = self.prologue
        saved, self.scope = self.scope, target
        a = [self.expr(x) for x in e.args]
        self.scope = saved
        if kind in ("floordiv", "mod"):
            (alo, _), (blo, _) = e.args[0].bounds(), e.args[1].bounds()
            # inside the work loop a divisor built from dims is >= 1 (a zero dim means no work at
            # all); a dims-only expression runs up front, maybe with a zero dim: the safe helper
            if target is not self.prologue and not (e.free_vars() & self.data_vars):
                plain = nonneg(e.args[0]) and nonneg(e.args[1])
            else:
                plain = alo is not None and alo >= 0 and blo is not None and blo >= 1
            if plain:
                text = f"{a[0]} {'/' if kind == 'floordiv' else '%'} {a[1]}"
            else:
                text = f"{'ls_fdiv' if kind == 'floordiv' else 'ls_fmod'}({a[0]}, {a[1]})"
        elif kind in ("min", "max"):
            fn = "ls_" + kind
            text = a[0]
            for x in a[1:]:
                text = f"{fn}({text}, {x})"
        elif kind == "lt":
            text = f"(long long)({a[0]} < {a[1]})"
        elif kind in ("add", "mul"):
            text = (" + " if kind == "add" else " * ").join(a)
        else:
            raise LightspeedError(f"kernel renderer: unknown expression kind {kind!r}")
        name = self.tmp("i")
        target.lines.append(f"const long long {name} = {text};")
        target.memo[e] = name
        return name


@dataclass(frozen=True)
class Point:
    """Where a region value is computed: the flat row-major index ``flat`` into ``shape`` and, when
    the kernel's loops provide them (the c dialect's loop nests), the per-axis indexes ``coords``.
    A view whose shape is ``shape`` is then indexed from the coordinates directly: no division or
    modulo of the flat index per element (64-bit divisions cost tens of cycles on a CPU)."""

    key: str  # names the point in the writer's memo
    flat: Expr
    shape: tuple[Expr, ...] = ()
    coords: tuple[Expr, ...] | None = None

    @staticmethod
    def flat_var(name: str) -> Point:
        return Point(name, sym(name))


def index_at(st: ShapeTracker, coords: tuple[Expr, ...]) -> tuple[Expr, Expr]:
    """(physical index, validity) of the element at per-axis ``coords`` of ``st``'s last view.
    Where a view only permutes or broadcasts the axes of the view under it, that view's
    coordinates are taken over directly instead of unflattened from the index: unflattening
    divides by the inner extents, a run-time 64-bit division per element when one is a dim (a
    decode step's mask read per key through [s, p + s])."""
    idx, valid = st.views[-1].index_and_valid(coords)
    outer, at = st.views[-1], tuple(coords)
    for v in reversed(st.views[:-1]):
        direct = _axis_map(outer, at, v.shape)
        idx, vv = v.index_and_valid(direct if direct is not None else unflatten_index(idx, v.shape))
        valid = valid * vv
        outer, at = v, direct
    return idx, valid


def _axis_map(outer: View, coords: tuple[Expr, ...] | None, inner: tuple[Expr, ...]) -> tuple[Expr, ...] | None:
    """The coordinates in ``inner`` (a row-major shape) of the element an unmasked, offset-free view
    ``outer`` reads at ``coords``, when each inner axis is read by exactly one outer axis of the
    same extent with the inner axis' row-major stride and every other outer axis has stride 0 or
    extent 1 (a permutation or broadcast of ``inner``'s axes); else None."""
    if coords is None or outer.mask is not None or outer.offset != 0:
        return None
    strides = contiguous_strides(tuple(inner))
    out: list[Expr | None] = [const(0) if d == 1 else None for d in inner]
    for c, d, st in zip(coords, outer.shape, outer.strides):
        if st == 0 or d == 1:
            continue
        j = next((j for j in range(len(inner)) if out[j] is None and inner[j] == d and strides[j] == st), None)
        if j is None:
            return None
        out[j] = c
    return None if any(c is None for c in out) else tuple(out)


def flat_of(coords: list[Expr], shape: tuple[Expr, ...]) -> Expr:
    out: Expr = const(0)
    for c, s in zip(coords, contiguous_strides(tuple(shape))):
        out = out + c * s
    return out


def nonneg(e: Expr) -> bool:
    """Whether ``e`` is >= 0 for any non-negative values of its variables (dims and indexes)."""
    kind = e.kind
    if kind == "const":
        return e.value >= 0
    if kind in ("var", "lt"):
        return True
    return all(nonneg(a) for a in e.args)


def index_in(e: Expr, at: str | Expr) -> Expr:
    return e.substitute({INDEX_VAR: sym(at) if isinstance(at, str) else at}) if INDEX_VAR in e.free_vars() else e



def c_nest(n: str, work: str, axes: list[tuple[str, str]], threshold: int, extra: list[str]
           ) -> tuple[list[str], list[str], str]:
    """The c dialect's work loop over ``axes`` ((coordinate name, extent), outermost first; their
    product is ``n``): each thread takes a contiguous range of items, unflattens its first item
    once, then walks rows of the innermost axis with an odometer, so coordinates cost no division
    per item.  The body sees ``_ls_item`` (the flat index) and every coordinate.  Returns (opening
    lines, closing lines, indent of the body)."""
    names = [a for a, _ in axes]
    ext = [e for _, e in axes]
    last, elast = names[-1], ext[-1]
    open_ = [f"#pragma omp parallel if ({work} >= {threshold})", "{", *extra,
             f"  long long _ls_lo = 0, _ls_hi = {n};",
             "  #ifdef _OPENMP",
             "  { const long long nt = omp_get_num_threads(), t = omp_get_thread_num();",
             f"    const long long per = {n} / nt, more = {n} % nt;",
             "    _ls_lo = per * t + (t < more ? t : more); _ls_hi = _ls_lo + per + (t < more); }",
             "  #endif",
             "  if (_ls_lo < _ls_hi) {",
             "  long long _ls_rest = _ls_lo;",
             f"  long long _ls_cl = _ls_rest % {elast}; _ls_rest /= {elast};"]
    for name, e in zip(reversed(names[:-1]), reversed(ext[:-1])):
        open_.append(f"  long long {name} = _ls_rest % {e}; _ls_rest /= {e};")
    open_ += ["  for (long long _ls_base = _ls_lo; _ls_base < _ls_hi; ) {",
              f"    const long long _ls_run = ls_min(_ls_hi - _ls_base, {elast} - _ls_cl);",
              "    for (long long _ls_j = 0; _ls_j < _ls_run; _ls_j++) {",
              "      const long long _ls_item = _ls_base + _ls_j;",
              f"      const long long {last} = _ls_cl + _ls_j;"]
    close = ["    }", "    _ls_base += _ls_run; _ls_cl = 0;"]
    if len(names) > 1:  # the odometer's carry, built outermost first (the outermost never wraps)
        carry = ""
        for name, e in zip(names[:-1], ext[:-1]):
            carry = f"if (++{name} == {e}) {{ {name} = 0; {carry} }}" if carry else f"++{name};"
        close.append("    " + carry)
    close += ["  }", "  }", "}"]
    return open_, close, "      "


def finish(w: Writer, dialect: str, mode: str, buffers: list[tuple[str, str, bool, str | int]], count: Expr,
           body: list[str], label: str, axes: list[tuple[str, Expr]] | None = None,
           item_cost: Expr | int = 1, setup: list[str] | None = None,
           early: list[str] | None = None, preludes: tuple[str, ...] = (),
           before_wait: list[str] | None = None, warps: int = 0, min_blocks: int = 0) -> KernelSpec:
    """Wrap a work-item body into a kernel function of the dialect.  ``buffers``: (param name,
    storage type, written, what it is: "out" or the op's operand index).  ``axes``: the c dialect
    walks the items as this loop nest ((coordinate name, extent), product ``count``); it splits
    the items over the cores when ``count * item_cost`` (multiply-adds, say) is worth a fork.
    ``setup``: c dialect lines each thread runs once before its items (with ``axes``).  ``early``:
    lines run before the items (a run-time alternative that returns when it applies).  ``mode``:
    the work distribution (:data:`KINDS`), which fixes the cuda loop and the launch shape.
    ``preludes``: the prelude parts the body calls beyond the dialect's own.  ``before_wait``
    (cuda): lines run before the wait on the previous kernel (programmatic dependent launch):
    they may read the table and the dims-only prologue, and must not read what a kernel writes
    (:func:`weight_prefetch`: the predecessor still runs).  ``warps``: a ``matmul_split``
    block's warps (:func:`split_products`; default SPLIT_WARPS).  ``min_blocks`` (cuda): blocks a
    multiprocessor must hold at once (``__launch_bounds__``' second argument: ptxas keeps the
    registers a thread uses within the share that leaves, spilling if it must)."""
    launch = launch_shape(mode, count, warps)
    n = w.expr(count)  # into the prologue
    work = w.expr(count * item_cost) if dialect == "c" else n
    nest = [(name, w.expr(e)) for name, e in axes] if axes and dialect == "c" else None
    dims = list(w.dims)
    # cuda: the programmatic-dependent-launch wait comes first (prelude/cuda.cuh, LS_KERNEL_BEGIN)
    early_wait = dialect == "cuda" and not before_wait
    head = ["LS_KERNEL_BEGIN();"] if early_wait else []
    head += [f"const long long D{i} = T[dim_{i}];" for i in range(len(dims))]
    for name, ctype, written, _ in buffers:
        const_ = "" if written else "const "
        head.append(f"{const_}{ctype}* LS_RESTRICT {name} = ({const_}{ctype}*)T[buf_{name}];")
    prologue = list(w.prologue.lines)
    if dialect == "cuda" and before_wait:  # the table is written before the graph runs: read it early
        prologue += [*before_wait, "LS_KERNEL_BEGIN();"]
    params = ["const long long* LS_RESTRICT T", *(f"int dim_{i}" for i in range(len(dims))),
              *(f"int buf_{name}" for name, _, _, _ in buffers)]
    ind = "    "
    close, inner = [ind + "}"], ind + "  "
    if dialect == "cuda":
        loop = _CUDA_LOOPS[_CUDA_WORK[mode][0]](n)
        depth = sum(ln.count("{") - ln.count("}") for ln in loop)  # loops nested (an unrolled trip's: 3)
        close, inner = [ind + "  " * k + "}" for k in reversed(range(depth))], ind + "  " * depth
        bounds = f"{launch.threads}, {min_blocks}" if min_blocks else "256"
        sig = f'extern "C" __global__ void __launch_bounds__({bounds}) KNAME({", ".join(params)})'
    else:
        # items split over the cores (OpenMP) when there is enough work: a matmul item is a whole
        # dot product, an element-wise one a few operations
        threshold = 32768
        lanes = ["const int lane = 0, slice = 0; (void)lane; (void)slice;"] if mode.startswith("matmul") else []
        if setup and not nest:
            raise LightspeedError("kernel renderer: per-thread setup needs a loop nest")
        if nest:
            opening, closing, body_ind = c_nest(n, work, nest, threshold, ["  " + x for x in lanes] + (setup or []))
            loop, close, inner = opening, [ind + x for x in closing], ind + body_ind
        else:
            loop = lanes + [f"#pragma omp parallel for schedule(static) if ({work} >= {threshold})",
                            f"for (long long _ls_item = 0; _ls_item < {n}; _ls_item++) {{"]
        sig = f"void KNAME({', '.join(params)})"
    lines = [sig + " {", *(ind + ln for ln in head), *(ind + ln for ln in prologue),
             *(ind + ln for ln in early or []), *(ind + ln for ln in loop), *(inner + ln for ln in body), *close, "}"]
    text = "\n".join(lines) + "\n"
    digest = hashlib.sha256(f"{dialect}\n{mode}\n{text}".encode()).hexdigest()[:16]
    name = f"ls_{label}_{digest}"
    return KernelSpec(name, text.replace("KNAME", name), tuple(dims), tuple(b[3] for b in buffers),
                      launch, count, tuple(preludes))


# a product prefetches its weights only when they fit a third of the L2 (50 MB on the H100, 60 on
# the H200) with room to spare: a larger matrix's early lines would be evicted before they are read
PREFETCH_MAX_BYTES = 16 << 20
# LIGHTSPEED_CUDA_PREFETCH=0 renders the products without their prefetch (an A/B switch)
PREFETCH = os.environ.get("LIGHTSPEED_CUDA_PREFETCH", "1") != "0"
# LIGHTSPEED_CUDA_WEIGHT_LOADS=stream: a weight product reads its weight rows with streaming loads
# (read-only, no L1 line, 256-byte L2 fetches: cuda.cuh's ls_ldw) instead of plain 16-byte loads
STREAM_WEIGHTS = os.environ.get("LIGHTSPEED_CUDA_WEIGHT_LOADS", "plain").strip() == "stream"


def weight16(ptr: str) -> str:
    """The cuda dialect's 16-byte load of a weight row's chunk at ``ptr`` (a ``uint4``)."""
    return f"ls_ldw({ptr})" if STREAM_WEIGHTS else f"*(const uint4*)({ptr})"


def pairwise(terms: list[str], combine) -> str:
    """``terms`` (a power of two of them) combined as a balanced tree, neighbours first."""
    while len(terms) > 1:
        terms = [combine(terms[k], terms[k + 1]) for k in range(0, len(terms), 2)]
    return terms[0]


def batch_offsets(w: Writer, batch: list, a_strides: list, b_strides: list, rest: str = "rest") -> None:
    """Lines adding to ``oa`` and ``ob`` (declared by the caller) the offsets of the batch index
    held in ``rest``, unflattened over the ``batch`` dims (last fastest) with each operand's strides."""
    for size, sa, sb in reversed(list(zip(batch, a_strides, b_strides))):
        s = w.expr(size)
        w.line(f"{{ const long long q = {rest} % {s}; {rest} /= {s}; "
               f"oa += q * {w.expr(sa)}; ob += q * {w.expr(sb)}; }}")


def vector_dot(w: Writer, indent: str, first: str, step: int, width: int, dot: str, kk: str) -> None:
    """cuda: ``acc`` += the 16-byte dots of rows ``ra`` and ``rb`` (both contiguous along k, aligned),
    thread ``first`` of ``step`` taking every step-th chunk of ``width`` elements, several loads in
    flight (k = 2048 bf16 over a warp: all 8)."""
    w.line(f"{indent}#pragma unroll 8")
    w.line(f"{indent}for (long long l = {first} * {width}; l < {kk}; l += {step * width})")
    w.line(f"{indent}  acc += {dot}(*(const uint4*)(ra + l), {weight16('rb + l')});")


def split_products(dialect: str, n: Expr, k: Expr, itemsize: int) -> int:
    """The warps of the block per output of a weight product [m, n] over k (rows contiguous along
    k, of ``itemsize``-byte elements) that runs kind ``matmul_split``, 0 for none: cuda, few
    static outputs, long rows.  A choice by n and k only, so every row count gets the same sums
    (batch invariance).  4 warps for rows under 8 KiB (2 16-byte loads a thread at 4 KiB), 2
    for longer ones (4 or more a thread)."""
    if not (dialect == "cuda" and n.is_const and n.value < SPLIT_BELOW and k.is_const
            and k.value * itemsize >= SPLIT_MIN_ROW_BYTES):
        return 0
    if _SPLIT_WARPS != "auto":
        return int(_SPLIT_WARPS)
    return 4 if k.value * itemsize < 8192 else 2


def block_sums(w: Writer, sums: list[str], warps: int = SPLIT_WARPS) -> None:
    """The float sums ``sums`` of a ``matmul_split`` block of ``warps`` warps (each already summed
    over its warp's lanes) summed over the block's warps through shared memory, in a fixed order:
    afterwards every thread holds the totals."""
    n = len(sums)
    w.line(f"__shared__ float _ls_bsum[{n}][{warps}];")
    w.line("if (lane == 0) { " + " ".join(f"_ls_bsum[{q}][slice] = {v};" for q, v in enumerate(sums)) + " }")
    w.line("__syncthreads();")
    for q, v in enumerate(sums):
        w.line(f"{v} = {pairwise([f'_ls_bsum[{q}][{s}]' for s in range(warps)], lambda x, y: f'({x} + {y})')};")
    w.line("__syncthreads();  // the partials are read before the next item writes them")


def weight_prefetch(w: Writer, dialect: str, m: Expr, n: Expr, k: Expr,
                    weights: list[tuple[str, DType, Expr, Expr]], split: int = 0) -> list[str] | None:
    """Lines (``finish``'s ``before_wait``) prefetching into L2, before the wait on the previous
    kernel, the weight rows of this warp's first output of a warp-per-output product [m, n] over
    k (``split``: this block's of that many warps, a block per output): ``weights`` are (buffer, dtype, offset, stride
    between rows; rows contiguous along k).
    Weights are never written by a step, so their lines stream in while the predecessor finishes
    (its tail and this kernel's ramp overlap).  None where nothing is prefetched: the c dialect,
    ``LIGHTSPEED_CUDA_PREFETCH=0``, weights larger than PREFETCH_MAX_BYTES (or of symbolic size)."""
    size = n * k * sum(d.itemsize for _, d, _, _ in weights)
    if dialect != "cuda" or not PREFETCH or not (size.is_const and size.value <= PREFETCH_MAX_BYTES):
        return None
    kk = w.expr(k)
    if split:  # a block per output, its threads over the row
        first, lanes, step = "blockIdx.x", f"(threadIdx.y * {WARP} + threadIdx.x)", WARP * split * 128
    else:
        first = f"(blockIdx.x * (long long)blockDim.x + threadIdx.x) / {WARP}"
        lanes, step = f"(threadIdx.x & {WARP - 1})", WARP * 128
    lines = [f"const long long _ls_pfw = {first};",
             f"if (_ls_pfw < {w.expr(m * n)}) {{",
             f"  const long long _ls_pfj = _ls_pfw % {w.expr(n)};"]
    for buf, _, offset, stride in weights:
        lines += [f"  {{ const char* _ls_pf = (const char*)({buf} + {w.expr(offset)} + _ls_pfj * {w.expr(stride)});",
                  f"    const long long _ls_pfn = {kk} * (long long)sizeof(*{buf});",
                  f"    for (long long _ls_o = {lanes} * 128; _ls_o < _ls_pfn; _ls_o += {step})",
                  "      asm volatile(\"prefetch.global.L2 [%0];\" :: \"l\"(_ls_pf + _ls_o)); }"]
    lines.append("}")
    return lines


def loop_axes(shape, prefix: str) -> tuple[list[tuple[str, Expr]], list[Expr]]:
    """A c-dialect loop nest over ``shape``: (the loop axes, named ``prefix`` + axis number, and
    each axis's coordinate); size-1 axes are no loop (coordinate 0).  An empty shape is one item."""
    axes, coords = [], []
    for k, d in enumerate(shape):
        if d == 1:
            coords.append(const(0))
        else:
            axes.append((f"{prefix}{k}", d))
            coords.append(sym(f"{prefix}{k}"))
    return axes, coords

