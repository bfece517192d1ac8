"""The region family: fused element-wise trees with reductions (``Fused``), and the single
primitives that are one-op regions (element-wise ops, Cast, SumReduce/MaxReduce, Iota, the
Output copy, Gather).

A region computes bfloat16/float16 in float and rounds once when it stores (the reference
rounds after every primitive: a fused low-precision region is at least as accurate, within the
dtype's tolerance); a single primitive rounds exactly like the reference.  Reductions accumulate
float16/bfloat16 in float, like the reference; their summation order differs from numpy's
pairwise sums (float32 results agree to ~1e-6 relative): the c dialect keeps 8 interleaved
partial sums, the cuda dialect splits a top-level reduction over a warp's lanes (kind ``warp``), or over a
block of 8 warps when few items each reduce a long row (kind ``row``), or over a thread-block
cluster of such blocks (sm_90, kind ``row_cluster``: the argmax over a 128k vocabulary, which one
block walked at one multiprocessor's bandwidth, 17 + 30 us of the 1B decode step on an H100).
An index outside a gathered tensor reads 0 and sets the call's error word (``ls_oob``): the native
executor raises IndexOutOfRange after the call, as the reference does; the cuda executor copies
the word back behind the run and raises where the host next waits for the device.  Every load
goes through its view's index expression and is guarded by the view's validity expression.
"""

from __future__ import annotations

import os

from .... import dtypes as dt
from ....dtypes import DType
from ....egraph.llir import LOp, RegionSpace
from ....errors import LightspeedError
from ....primitives import PRIMITIVES
from ....shape import ShapeTracker
from ....symbolic import Expr, const, gcd_const, prod, sym
from .spec import KernelSpec
from .types import cast, compute_type, half_of, literal, load, min_value, storage_type, store, store_pair
from .writer import CLUSTER, WARP, Point, Writer, finish, flat_of, index_at, index_in, loop_axes, pairwise

__all__ = ["Region", "region_kernel", "RENDERERS", "node_dtype", "combine"]


def node_dtype(node: tuple, leaf_dtypes: list[DType]) -> DType:
    tag = node[0]
    if tag == "leaf":
        return leaf_dtypes[node[1]]
    if tag in ("const", "iota"):
        return node[2]
    if tag == "Cast":
        return node[1]
    if tag == "LessThan":
        return dt.bool_
    if tag == "gather":
        return leaf_dtypes[node[2]]
    if tag in ("SumReduce", "MaxReduce"):
        return node_dtype(node[3], leaf_dtypes)
    return node_dtype(node[1], leaf_dtypes)


FLOAT_FN = {"Log2": "log2", "Exp2": "exp2", "Sin": "sin", "Sqrt": "sqrt"}


def apply(tag: str, args: list[str], d: DType) -> str:
    """An element-wise primitive on compute values of dtype ``d`` (operand dtype)."""
    ct = compute_type(d)
    single = ct == "float"
    if tag == "Exp2" and single:
        return f"ls_exp2f({args[0]})"  # the prelude's: libm's in cuda, a vectorisable one in c
    if tag in FLOAT_FN:
        return f"{FLOAT_FN[tag]}{'f' if single else ''}({args[0]})"
    if tag == "Recip":
        return f"({'1.0f' if single else '1.0'} / {args[0]})"
    a, b = args if len(args) == 2 else (args[0], None)
    if tag == "LessThan":
        return f"(int)({a} < {b})"
    if d.is_bool:
        return f"(int)({a} {'||' if tag == 'Add' else '&&'} {b})" if tag in ("Add", "Mul") else bad(tag, d)
    if tag in ("Add", "Mul"):
        sym_ = "+" if tag == "Add" else "*"
        if d.is_float:
            return f"({a} {sym_} {b})"
        unsigned = {"int": "unsigned int", "long long": "unsigned long long"}.get(ct, ct)
        return f"(({ct})(({unsigned}){a} {sym_} ({unsigned}){b}))"
    if tag == "Mod":
        if d.is_float:
            return f"fmod{'f' if single else ''}({a}, {b})"
        if d.is_signed:
            return f"(({b}) == 0 || ({b}) == -1 ? ({ct})0 : ({ct})(({a}) % ({b})))"
        return f"(({b}) == 0 ? ({ct})0 : ({ct})(({a}) % ({b})))"
    return bad(tag, d)


def bad(tag: str, d: DType) -> str:
    raise LightspeedError(f"kernel renderer: {tag} is not defined for {d.name}")


class Region:
    """Renders a region tree (the fusion language of ``egraph.llir``) into statements."""

    def __init__(self, w: Writer, views: list[ShapeTracker], leaf_dtypes: list[DType], cooperative: bool,
                 names: list[str] | None = None):
        self.w = w
        self.names = names or [f"in{k}" for k in range(len(views))]  # each leaf's buffer parameter
        self.views = views
        self.leaf_dtypes = leaf_dtypes
        self.cooperative = cooperative  # top-level reductions split across a warp's lanes
        self.block = False  # ... or across a block's BLOCK_WARPS warps (kind ``row``)
        self.cluster = False  # ... and across a cluster's blocks (kind ``row_cluster``)
        self.depth = 0  # reductions entered
        # gathered leaves held as packed GGML blocks (c dialect): leaf -> (block type code, columns)
        self.block_data: dict[int, tuple[int, int]] = {}

    def leaf(self, k: int, at: Point | str) -> str:
        pt = Point.flat_var(at) if isinstance(at, str) else at
        key = ("leaf", k, pt.key)
        hit = self.w.scope.find(key)
        if hit is not None:
            return hit
        st = self.views[k]
        if st.is_contiguous:  # a row-major prefix: element z is at z (no unflatten and re-flatten)
            idx, valid = self.w.expr(pt.flat), const(1)
        elif pt.coords is not None and tuple(st.shape) == pt.shape:
            index, valid = index_at(st, pt.coords)
            idx = self.w.expr(index)
        else:
            idx = self.w.expr(index_in(st.index_expr(), pt.flat))
            valid = index_in(st.valid_expr(), pt.flat)
        d = self.leaf_dtypes[k]
        ref = f"{self.names[k]}[{idx}]"
        v = self.w.tmp("v")
        if valid == 1:
            text = load(d, ref)
        elif valid == 0:
            text = f"(({compute_type(d)})0)"
        else:
            text = f"({self.w.expr(valid)} ? {load(d, ref)} : ({compute_type(d)})0)"
        self.w.line(f"const {compute_type(d)} {v} = {text};")
        self.w.scope.memo[key] = v
        return v

    def value(self, node: tuple, at: Point | str) -> str:
        pt = Point.flat_var(at) if isinstance(at, str) else at
        tag = node[0]
        if tag == "leaf":
            return self.leaf(node[1], pt)
        if tag == "const":
            return literal(node[1], node[2])
        if tag == "iota":
            v = self.w.expr(index_in(node[1], pt.flat))
            return cast(v, dt.int64, node[2])
        if tag == "gather":  # out[z] = data[data_view(idx[z])]; an index outside data: see the module doc
            idx = self.value(node[1], pt)
            k = node[2]
            st = self.views[k]
            iv = self.w.tmp("_ls_g")
            self.w.line(f"const long long {iv} = (long long){idx};")
            self.w.index_vars.add(iv)
            self.w.data_vars.add(iv)
            n = self.w.expr(prod(st.shape))
            at = self.w.expr(index_in(st.index_expr(), iv))
            valid = index_in(st.valid_expr(), iv)
            inside = f"{iv} >= 0 && {iv} < {n}"
            ok = inside + ("" if valid == 1 else f" && {self.w.expr(valid)}")
            d = self.leaf_dtypes[k]
            v = self.w.tmp("v")
            self.w.line(f"{compute_type(d)} {v} = ({compute_type(d)})0;")
            if k in self.block_data:  # element at of a [rows, cols] matrix held as blocks
                code, cols = self.block_data[k]
                load_text = (f"ls_blk_at((const unsigned char*){self.names[k]}, {cols // 32}, {code}, "
                             f"({at}) / {cols}, ({at}) % {cols})")
            else:
                load_text = load(d, f"{self.names[k]}[{at}]")
            # an index outside the data reads 0 and sets the run's error word (ls_oob): the call
            # raises IndexOutOfRange (on cuda where the host next waits for the device)
            self.w.line(f"if ({ok}) {v} = {load_text}; else if (!({inside})) ls_oob(T);")
            return v
        if tag == "Cast":
            src = self.value(node[2], pt)
            return self._bind(cast(src, node_dtype(node[2], self.leaf_dtypes), node[1]), node[1])
        if tag in ("SumReduce", "MaxReduce"):
            return self.reduce(node, pt)
        d = node_dtype(node[1], self.leaf_dtypes)
        args = [self.value(c, pt) for c in node[1:]]
        out = dt.bool_ if tag == "LessThan" else d
        return self._bind(apply(tag, args, d), out)

    def _bind(self, text: str, d: DType) -> str:
        v = self.w.tmp("v")
        self.w.line(f"const {compute_type(d)} {v} = {text};")
        return v

    def reduce(self, node: tuple, pt: Point) -> str:
        tag, axis, space, child = node
        assert isinstance(space, RegionSpace)
        shape = space.shape
        d = node_dtype(child, self.leaf_dtypes)
        ct = compute_type(d)
        w = self.w
        size = w.expr(shape[axis])
        post = w.expr(prod(shape[axis + 1:]))
        acc = w.tmp("acc")
        init = "(" + ct + ")0" if tag == "SumReduce" else min_value(d)
        w.line(f"{ct} {acc} = {init};")
        lanes = self.cooperative and self.depth == 0 and w.dialect == "cuda"
        r = w.tmp("_ls_r")
        start, step = ("lane", WARP) if lanes else ("0", 1)
        if lanes and self.block:  # over the block's 8 warps
            start, step = f"(slice * {WARP} + lane)", WARP * BLOCK_WARPS
        if lanes and self.cluster:  # over the cluster's blocks' warps
            start, step = f"((_ls_crank * {BLOCK_WARPS} + slice) * {WARP} + lane)", f"{WARP * BLOCK_WARPS} * _ls_csize"
        if w.dialect == "c" and d.is_float:
            # 8 interleaved partial results (the compiler keeps them in one vector register; one
            # chain of dependent adds waits on each add's latency), then the rest, then the 8
            part, q = w.tmp("part"), w.tmp("_ls_q")
            w.line(f"{ct} {part}[8]; for (int {q} = 0; {q} < 8; {q}++) {part}[{q}] = {init};")
            w.line(f"long long {r} = 0;")
            w.line(f"for (; {r} + 8 <= {size}; {r} += 8) {{")
            w.line(f"  for (int {q} = 0; {q} < 8; {q}++) {{")
            rx = w.tmp("_ls_r")
            w.index_vars.add(rx)
            self._reduce_step(tag, d, axis, shape, size, post, child, pt, f"{part}[{q}]",
                              f"const long long {rx} = {r} + {q};", rx, "    ")
            w.line("  }")
            w.line("}")
            w.line(f"for (; {r} < {size}; {r}++) {{")
            self._reduce_step(tag, d, axis, shape, size, post, child, pt, acc, None, r, "  ")
            w.line("}")
            tree = pairwise([f"{part}[{k}]" for k in range(8)], lambda x, y: combine(tag, d, x, y))
            w.line(f"{acc} = {combine(tag, d, acc, tree)};")
            return acc
        if lanes:
            # unrolled, a thread's loads go out together instead of each after the last one's
            # combine (the same combines in the same order): a cluster's argmax over 128k logits,
            # 63 elements a thread, took 16.6 us of the 1B decode step (H100, twentieth session)
            w.line("#pragma unroll 4")
        w.line(f"for (long long {r} = {start}; {r} < {size}; {r} += {step}) {{")
        self._reduce_step(tag, d, axis, shape, size, post, child, pt, acc, None, r, "  ")
        w.line("}")
        if lanes:
            w.line(f"for (int o = {WARP // 2}; o > 0; o >>= 1) {{ {ct} other = __shfl_xor_sync(0xffffffffu, {acc}, o);"
                   f" {acc} = {combine(tag, d, acc, 'other')}; }}")
        if lanes and self.block:  # the warps' results through shared memory, in a fixed order
            part = w.tmp("_ls_part")
            w.line(f"__shared__ {ct} {part}[{BLOCK_WARPS}];")
            w.line(f"if (lane == 0) {part}[slice] = {acc};")
            w.line("__syncthreads();")
            tree = pairwise([f"{part}[{k}]" for k in range(BLOCK_WARPS)], lambda x, y: combine(tag, d, x, y))
            w.line(f"{acc} = {tree};")
            w.line("__syncthreads();")
        if lanes and self.cluster:  # the blocks' results through distributed shared memory, in rank order
            part, u = w.tmp("_ls_cpart"), w.tmp("_ls_u")
            w.line(f"__shared__ {ct} {part};")
            w.line(f"if (lane == 0 && slice == 0) {part} = {acc};")
            w.line("ls_cluster_sync();")
            # every block's partial loaded before any is combined: the remote loads overlap (one
            # after another, each waited for by its combine, they cost a round trip each)
            got = w.tmp("_ls_cv")
            w.line(f"{ct} {got}[{CLUSTER}];")
            w.line("#pragma unroll")
            w.line(f"for (unsigned int {u} = 0; {u} < {CLUSTER}; {u}++) "
                   f"if ({u} < _ls_csize) {got}[{u}] = ls_cluster_ld(&{part}, {u});")
            w.line(f"{acc} = {got}[0];")
            w.line("#pragma unroll")
            w.line(f"for (unsigned int {u} = 1; {u} < {CLUSTER}; {u}++) "
                   f"if ({u} < _ls_csize) {{ const {ct} other = {got}[{u}]; "
                   f"{acc} = {combine(tag, d, acc, 'other')}; }}")
            w.line("ls_cluster_sync();  // every block has read the others' partials before any moves on")
        return acc

    def _reduce_step(self, tag: str, d: DType, axis: int, shape, size: str, post: str, child: tuple, pt: Point,
                     acc: str, head: str | None, r: str, indent: str) -> None:
        """One element of a reduction (the body of its loop, at reduced coordinate ``r``):
        the child's value combined into ``acc``."""
        w = self.w
        w.push()
        if head:
            w.line(head)
        zc = w.tmp("_ls_zc")
        coords = reduced_coords(pt, shape, axis, r)
        if coords is not None:  # the child's coordinates: the parent's with the reduced axis running
            w.index_vars.add(r)
            at = Point(zc, flat_of(coords, shape), tuple(shape), tuple(coords))
        else:
            w.index_vars.add(zc)
            zvar = w.expr(pt.flat)
            w.line(f"const long long {zc} = ({zvar} / {post}) * {size} * {post} + {r} * {post} + {zvar} % {post};")
            at = Point.flat_var(zc)
        self.depth += 1
        v = self.value(child, at)
        self.depth -= 1
        w.line(f"{acc} = {combine(tag, d, acc, v)};")
        body = w.pop()
        w.scope.lines.extend(indent + ln for ln in body)


def reduced_coords(pt: Point, shape: tuple[Expr, ...], axis: int, r: str) -> list[Expr] | None:
    """The coordinates in a reduction's space ``shape`` of element ``r`` along ``axis`` of the
    parent point, when the parent has coordinates in that space reduced (axis kept as 1 or dropped)."""
    if pt.coords is None:
        return None
    shape = tuple(shape)
    if pt.shape == shape[:axis] + (const(1),) + shape[axis + 1:]:
        return [*pt.coords[:axis], sym(r), *pt.coords[axis + 1:]]
    if pt.shape == shape[:axis] + shape[axis + 1:]:
        return [*pt.coords[:axis], sym(r), *pt.coords[axis:]]
    return None


def combine(tag: str, d: DType, acc: str, v: str) -> str:
    ct = compute_type(d)
    if tag == "SumReduce":
        if d.is_float:
            return f"{acc} + {v}"
        unsigned = {"int": "unsigned int", "long long": "unsigned long long"}.get(ct, ct)
        return f"({ct})(({unsigned}){acc} + ({unsigned}){v})"
    if d.is_float:
        return f"{'ls_dmaxn' if ct == 'double' else 'ls_fmaxn'}({acc}, {v})"
    return f"({acc} > {v} ? {acc} : {v})"


def has_top_reduction(node: tuple) -> bool:
    return bool(top_reductions(node))


def top_reductions(node: tuple) -> list[tuple]:
    """The reductions not inside another reduction."""
    if not isinstance(node, tuple) or not node or node[0] in ("leaf", "const", "iota"):
        return []
    if node[0] in ("SumReduce", "MaxReduce"):
        return [node]
    return [r for c in node[1:] if isinstance(c, tuple) for r in top_reductions(c)]


def top_reduction_sizes(node: tuple) -> list[Expr]:
    """The lengths of the reductions not inside another reduction."""
    return [space.shape[axis] for _, axis, space, _ in top_reductions(node)]


BLOCK_WARPS = 8  # warps of a block-reduction item (kind ``row``)
BLOCK_ITEMS = 1024  # at most this many items (static) ...
BLOCK_REDUCTION = 2048  # ... each reducing at least this many elements (static): a block per item


CLUSTER_ITEMS = 16  # at most this many items (static) ...
CLUSTER_REDUCTION = 16384  # ... each reducing at least this many elements: a cluster of blocks per item
# LIGHTSPEED_CUDA_CLUSTER_ROWS=0: a block per item at most (an A/B switch)
CLUSTER_ROWS = os.environ.get("LIGHTSPEED_CUDA_CLUSTER_ROWS", "1") != "0"
_CLUSTER_TYPES = ("float", "double", "int", "unsigned int", "long long")  # ls_cluster_ld's


def wants_cluster(tree: tuple, items: Expr, leaf_dtypes: list[DType]) -> bool:
    """Whether a region's top-level reductions run over a thread-block cluster per item: very few
    items, very long reductions of a type distributed shared memory is read in."""
    if not CLUSTER_ROWS or (items.is_const and items.value > CLUSTER_ITEMS):
        return False  # a run-time count (a batch's logit rows) is a few rows too: see wants_block
    reds = top_reductions(tree)
    return bool(reds) and all(
        space.shape[axis].is_const and space.shape[axis].value >= CLUSTER_REDUCTION
        and compute_type(node_dtype(child, leaf_dtypes)) in _CLUSTER_TYPES for _, axis, space, child in reds)


def wants_block(tree: tuple, items: Expr) -> bool:
    """Whether a region's top-level reductions run over a block per item rather than a warp: few
    items, long reductions (the argmax over a vocabulary: one warp would walk 128k logits alone).
    A run-time item count takes a block per item when every reduction is very long
    (CLUSTER_REDUCTION): a paged batch's argmax over its logit rows, one warp per row, took a
    millisecond of a 1B step."""
    sizes = top_reduction_sizes(tree)
    if not sizes or not all(n.is_const for n in sizes):
        return False
    if not items.is_const:
        return all(n.value >= CLUSTER_REDUCTION for n in sizes)
    return items.value <= BLOCK_ITEMS and all(n.value >= BLOCK_REDUCTION for n in sizes)


def store_with_addend(w, view: ShapeTracker, dtype: DType, head: str, flat: str, value, at=None) -> tuple:
    """A product's store with its addend (MatmulAdd's R, operand 2, buffer ``in2``):
    ``head { _ls_oz = flat; out[_ls_oz] = value(r); }``, ``r`` R's element read through ``view``
    at ``_ls_oz`` (or at the point ``at``, the element's coordinates).  Returns R's buffer."""
    region = Region(w, [view], [dtype], False, names=["in2"])
    w.index_vars.add("_ls_oz")
    w.line(f"{head} {{")
    w.line(f"  const long long _ls_oz = {flat};")
    w.push()
    r = region.leaf(0, at if at is not None else "_ls_oz")
    inner = w.pop()
    w.scope.lines.extend("  " + ln for ln in inner)
    w.line(f"  out[_ls_oz] = {value(r)};")
    w.line("}")
    return ("in2", storage_type(dtype), False, 2)


def region_kernel(dialect: str, tree: tuple, views: list[ShapeTracker], leaf_dtypes: list[DType],
                  out_dtype: DType, shape, label: str, operands: list[int] | None = None,
                  block_data: dict[int, tuple[int, int]] | None = None) -> KernelSpec:
    """A kernel computing ``tree`` at every element of ``shape`` into a row-major ``out``; leaf k
    reads the op's operand ``operands[k]`` (default k); ``block_data``: gathered leaves held as
    packed blocks (see :func:`.block_matmul.render_block_gather`)."""
    plan = _column_plan(tree, tuple(shape), views, leaf_dtypes) if dialect == "c" else None
    if plan is not None:
        return column_kernel(tree, plan, views, leaf_dtypes, out_dtype, tuple(shape), label, operands)
    w = Writer(dialect)
    cooperative = has_top_reduction(tree)
    mode = "warp" if cooperative and dialect == "cuda" else "elementwise"
    if mode == "warp" and wants_block(tree, prod(shape)):
        mode = "row_cluster" if wants_cluster(tree, prod(shape), leaf_dtypes) else "row"
    vector = _vector_leaves(dialect, mode, tree, views, leaf_dtypes, out_dtype, tuple(shape))
    if vector:
        return _vector_region_kernel(tree, views, leaf_dtypes, out_dtype, prod(shape), label, operands, vector,
                                     block_data)
    w.index_vars.add("_ls_item")
    w.push()
    region = Region(w, views, leaf_dtypes, cooperative)
    region.block = mode in ("row", "row_cluster")
    region.cluster = mode == "row_cluster"
    region.block_data = dict(block_data or {})
    shape = tuple(shape)
    axes = None
    at = Point.flat_var("_ls_item")
    if dialect == "c":
        axes, coords = loop_axes(shape, "_ls_c")
        w.index_vars |= {name for name, _ in axes}
        if axes:
            at = Point("_ls_item", sym("_ls_item"), shape, tuple(coords))
    v = region.value(tree, at)
    store_line = f"out[_ls_item] = {store(out_dtype, v)};"
    w.line({"warp": f"if (lane == 0) {store_line}", "row": f"if (lane == 0 && slice == 0) {store_line}",
            "row_cluster": f"if (lane == 0 && slice == 0 && _ls_crank == 0) {store_line}"}.get(mode, store_line))
    body = w.pop()
    return finish(w, dialect, mode, _buffers(out_dtype, leaf_dtypes, operands), prod(shape), body, label, axes,
                  preludes=("ggml_blocks",) if block_data else ())


VECTOR = 8  # elements of a 16-byte load of a 16-bit float: a vector item of an element-wise kernel
# element-wise cuda kernels of 8-element items, on unless LIGHTSPEED_CUDA_VECTOR=0 (twenty-fourth
# session, H100: their GPU tests pass; a 1B 512-token prefill's kernels 3.21 -> 3.10 ms)
VECTORS = os.environ.get("LIGHTSPEED_CUDA_VECTOR", "1") != "0"


def _vector_leaves(dialect: str, mode: str, tree: tuple, views: list[ShapeTracker], leaf_dtypes: list[DType],
                   out_dtype: DType, shape: tuple) -> list[int]:
    """The leaves an element-wise cuda kernel reads 8 at a time (16-byte loads), when it takes
    vector items: a 16-bit float result whose element count is a multiple of 8 at every dim value,
    read from at least one contiguous leaf of the result's shape and a 16-bit float dtype (those
    leaves: element z of the result reads element z of each); else [].  One
    element an item, a prompt's SiLU·mul over 512 x 8192 bf16 ran at 1.6 TB/s on an H100: 4 bytes
    of loads in flight per thread (twenty-second session)."""
    if not VECTORS or dialect != "cuda" or mode != "elementwise" or out_dtype.name not in ("bfloat16", "float16"):
        return []
    if gcd_const(prod(shape)) % VECTOR:
        return []
    read: set[int] = set()  # the leaves the tree reads at the element itself (not a gather's data)

    def walk(node) -> None:
        if isinstance(node, tuple) and node:
            if node[0] == "leaf":
                read.add(node[1])
            else:
                for c in node[1:]:
                    walk(c)
    walk(tree)
    return [k for k in sorted(read) if views[k].is_contiguous and tuple(views[k].shape) == shape
            and leaf_dtypes[k].name in ("bfloat16", "float16")]


def _vector_region_kernel(tree: tuple, views: list[ShapeTracker], leaf_dtypes: list[DType], out_dtype: DType,
                          n: Expr, label: str, operands: list[int] | None, vector: list[int],
                          block_data: dict[int, tuple[int, int]] | None) -> KernelSpec:
    """:func:`region_kernel`'s element-wise kernel over items of 8 consecutive elements: the
    ``vector`` leaves read by one 16-byte load each and the 8 results stored by one, where the
    buffers are 16-byte aligned (checked at run time: a view made by a caller may not be); else
    the 8 elements one by one.  Other leaves (broadcast weights, gathers) are read per element."""
    w = Writer("cuda")
    points = [Point.flat_var(f"_ls_e{e}") for e in range(VECTOR)]
    w.index_vars |= {"_ls_item", "_ls_z0", *(p.key for p in points)}
    w.push()
    region = Region(w, views, leaf_dtypes, False)
    region.block_data = dict(block_data or {})
    w.line(f"const long long _ls_z0 = _ls_item * {VECTOR};")
    for e, p in enumerate(points):
        w.line(f"const long long {p.key} = _ls_z0 + {e};")
    names = ["out", *(region.names[k] for k in vector)]
    aligned = " | ".join(f"(unsigned long long){x}" for x in names)

    w.line(f"if ((({aligned}) & 15) == 0) {{")
    w.push()
    for k in vector:  # element e of leaf k: half e % 2 of the load's 32-bit word e / 2
        w.line(f"const uint4 _ls_q{k} = *(const uint4*)({region.names[k]} + _ls_z0);")
        for e, p in enumerate(points):
            v = w.tmp("v")
            w.line(f"const float {v} = {load(leaf_dtypes[k], half_of(f'_ls_q{k}', e))};")
            w.scope.memo[("leaf", k, p.key)] = v
    values = [region.value(tree, p) for p in points]
    words = ", ".join(store_pair(out_dtype, values[2 * i], values[2 * i + 1]) for i in range(VECTOR // 2))
    w.line(f"*(uint4*)(out + _ls_z0) = make_uint4({words});")
    inner = w.pop()
    w.scope.lines.extend("  " + ln for ln in inner)
    w.line("} else {")
    w.push()
    for p in points:
        w.line(f"out[{p.key}] = {store(out_dtype, region.value(tree, p))};")
    inner = w.pop()
    w.scope.lines.extend("  " + ln for ln in inner)
    w.line("}")
    body = w.pop()
    return finish(w, "cuda", "elementwise", _buffers(out_dtype, leaf_dtypes, operands), n // VECTOR, body, label,
                  preludes=("ggml_blocks",) if block_data else ())


def _buffers(out_dtype: DType, leaf_dtypes: list[DType], operands: list[int] | None) -> list[tuple]:
    """A region kernel's buffers: ``out``, then leaf k as ``in<k>`` reading operand ``operands[k]``."""
    operands = operands if operands is not None else list(range(len(leaf_dtypes)))
    return [("out", storage_type(out_dtype), True, "out")] + [(f"in{k}", storage_type(d), False, operands[k])
                                                             for k, d in enumerate(leaf_dtypes)]


COLUMNS = 32  # consecutive outputs a column-reduction item accumulates side by side
_VEC = "_ls_vq"  # the vector coordinate while a column reduction is planned


def _column_plan(tree: tuple, shape: tuple, views: list[ShapeTracker], leaf_dtypes: list[DType]):
    """For a c-dialect region that is a float reduction (or reductions of one kind nested, such
    as a sum over two axes) whose data are contiguous along an output axis but not along the
    reduced ones (a bias's or a norm weight's gradient: sums over rows per column): (the output
    axis to put side by side, the nested (axis, space) levels, the innermost child), else None.
    Such items would walk their data at a stride, one load per cache line."""
    if tree[0] not in ("SumReduce", "MaxReduce") or not shape or not any(
            not (n.is_const and n.value == 1) for n in shape):
        return None
    tag = tree[0]
    vo = max(k for k, n in enumerate(shape) if not (n.is_const and n.value == 1))
    if shape[vo].is_const and shape[vo].value < 8:
        return None
    coords: list[Expr] = [sym(_VEC) if k == vo else sym(f"_ls_o{k}") for k in range(len(shape))]
    pt_shape, levels, node = tuple(shape), [], tree
    while node[0] == tag:
        _, axis, space, child = node
        sshape = tuple(space.shape)
        pt = Point("_ls_plan", const(0), pt_shape, tuple(coords))
        nxt = reduced_coords(pt, sshape, axis, f"_ls_red{len(levels)}")
        if nxt is None:
            return None
        levels.append((axis, sshape))
        coords, pt_shape, node = nxt, sshape, child
    if not node_dtype(node, leaf_dtypes).is_float:
        return None
    vpos = [k for k, c in enumerate(coords) if c == sym(_VEC)]
    inner = [k for k, c in enumerate(coords) if c == sym(f"_ls_red{len(levels) - 1}")]
    if len(vpos) != 1 or len(inner) != 1:
        return None
    leaves = [st.views[-1] for st in views if len(st.views) == 1 and tuple(st.shape) == pt_shape]
    if not any(v.strides[vpos[0]] == 1 for v in leaves) or any(v.strides[inner[0]] == 1 for v in leaves):
        return None
    return vo, levels, node


def column_kernel(tree: tuple, plan, views: list[ShapeTracker], leaf_dtypes: list[DType], out_dtype: DType,
                  shape: tuple, label: str, operands: list[int] | None) -> KernelSpec:
    """A reduction whose data run along an output axis (:func:`_column_plan`) with the loops
    exchanged: an item is COLUMNS consecutive outputs along that axis, the reductions run
    outermost and the outputs side by side inside them (contiguous loads the compiler
    vectorises), each output's value one chain over the reduced elements in order."""
    vo, levels, child = plan
    tag = tree[0]
    w = Writer("c")
    w.index_vars.add("_ls_item")
    w.push()
    region = Region(w, views, leaf_dtypes, False)
    d = node_dtype(child, leaf_dtypes)
    ct = compute_type(d)
    width = shape[vo]
    axes, coords = loop_axes(tuple(1 if k == vo else n for k, n in enumerate(shape)), "_ls_c")
    chunks = (width + (COLUMNS - 1)) // COLUMNS
    axes.append(("_ls_cq", chunks))
    w.index_vars |= {name for name, _ in axes} | {"_ls_q0", "_ls_qq", "_ls_qn"}
    ww = w.expr(width)
    w.line(f"const long long _ls_q0 = _ls_cq * {COLUMNS};")
    w.line(f"const long long _ls_qn = {ww} - _ls_q0 < {COLUMNS} ? {ww} - _ls_q0 : {COLUMNS};")
    init = "(" + ct + ")0" if tag == "SumReduce" else min_value(d)
    w.line(f"{ct} acc[{COLUMNS}]; for (int _ls_qq = 0; _ls_qq < {COLUMNS}; _ls_qq++) acc[_ls_qq] = {init};")
    out_coords = [sym("_ls_q0") + sym("_ls_qq") if k == vo else c for k, c in enumerate(coords)]
    pt = Point("_ls_oz", flat_of(out_coords, shape), tuple(shape), tuple(out_coords))
    depth = 0
    for axis, sshape in levels:  # the reduced coordinates, outermost level first
        r = w.tmp("_ls_r")
        w.index_vars.add(r)
        w.line(f"{'  ' * depth}for (long long {r} = 0; {r} < {w.expr(sshape[axis])}; {r}++) {{")
        nxt = reduced_coords(pt, sshape, axis, r)
        pt = Point(w.tmp("_ls_zc"), flat_of(nxt, sshape), sshape, tuple(nxt))
        depth += 1
    w.line(f"{'  ' * depth}for (long long _ls_qq = 0; _ls_qq < _ls_qn; _ls_qq++) {{")
    w.push()
    v = region.value(child, pt)
    w.line(f"acc[_ls_qq] = {combine(tag, d, 'acc[_ls_qq]', v)};")
    w.scope.parent.lines.extend("  " * (depth + 1) + ln for ln in w.pop())
    for k in range(depth, -1, -1):
        w.line(f"{'  ' * k}}}")
    w.line("for (long long _ls_qq = 0; _ls_qq < _ls_qn; _ls_qq++) {")
    w.push()
    oz = w.expr(flat_of(out_coords, shape))
    w.line(f"out[{oz}] = {store(out_dtype, 'acc[_ls_qq]')};")
    w.scope.parent.lines.extend("  " + ln for ln in w.pop())
    w.line("}")
    body = w.pop()
    reduced = prod([sshape[axis] for axis, sshape in levels])
    return finish(w, "c", "elementwise", _buffers(out_dtype, leaf_dtypes, operands), prod(shape) // width * chunks,
                  body, label, axes, item_cost=reduced * COLUMNS)


# ---------------------------------------------------------------------------- per op
def _fused(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [region_kernel(dialect, op.args["body"], op.operand_views(), in_dtypes, op.dtype, op.shape, "fused")]


def _elementwise(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    tree = (op.op, *(("leaf", k) for k in range(len(op.inputs))))
    return [region_kernel(dialect, tree, op.operand_views(), in_dtypes, op.dtype, op.shape, op.op.lower())]


def _cast_op(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [region_kernel(dialect, ("Cast", op.args["to"], ("leaf", 0)), op.operand_views(), in_dtypes,
                          op.dtype, op.shape, "cast")]


def _reduce_op(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    view = op.args["x_view"]
    tree = (op.op, op.args["axis"], RegionSpace(tuple(view.shape)), ("leaf", 0))
    return [region_kernel(dialect, tree, [view], in_dtypes, op.dtype, op.shape, op.op.lower())]


def _iota(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [region_kernel(dialect, ("iota", op.args["expr"], op.args["dtype"]), [], [], op.dtype,
                          op.args["shape"], "iota")]


def _output(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [region_kernel(dialect, ("leaf", 0), [op.args["x_view"]], in_dtypes, op.dtype, op.shape, "output")]


def _gather(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    tree = ("gather", ("leaf", 0), 1)
    return [region_kernel(dialect, tree, [op.args["indexes_view"], op.args["data_view"]], in_dtypes,
                          op.dtype, op.shape, "gather")]


_ELEMENTWISE = tuple(n for n, p in PRIMITIVES.items() if p.category in ("unary", "binary"))
RENDERERS = {"Fused": _fused, **{name: _elementwise for name in _ELEMENTWISE}, "Cast": _cast_op,
             "SumReduce": _reduce_op, "MaxReduce": _reduce_op, "Iota": _iota, "Output": _output, "Gather": _gather}
