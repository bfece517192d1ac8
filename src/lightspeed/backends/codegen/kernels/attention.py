"""The attention family: the ``Attention`` op (``codegen/attention.egg``; semantics in
``codegen/fused.py``) as one kernel in both dialects: for every query row, the scores against all
keys, the base-2 softmax and the weighted sum of the values, in float, with an online softmax (a
running maximum rescales the running sum and the accumulated output), so no score is stored.

cuda (kind ``attention``): one block of 8 warps per query row; warp w takes the keys w, w + 8, ...:
its lanes split the head dim (a dot product, then a warp reduction), each lane keeps the running
output of its columns; the 8 warps' partial results are merged through shared memory.  The keys
of a KV head are read once per query row of its group (the others hit L2).
c: an item per batch index (a KV head) when its query rows are few and static, each key and value
row converted once for all of them (:func:`grouped_attention_kernel`); else a query row per item.

A row's reduction order depends only on the key index, never on the other rows (batch
invariance); a blocked key (the mask's most negative value) contributes an exact 0 once a visible
key was seen, so padding a row's keys with blocked ones leaves its result bit for bit.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable

import numpy as np

from ....dtypes import DType
from ....egraph.llir import LOp
from ....errors import LightspeedError
from ....symbolic import INDEX_VAR, Expr, const, prod, sym
from .region import Region, node_dtype
from .spec import KernelSpec
from .types import load, storage_type, store
from .writer import CLUSTER, WARP, Point, Writer, finish

__all__ = ["attention_kernel", "blocked_value", "RENDERERS", "WARPS"]

WARPS = 8  # warps per query row (cuda); the block is (32, WARPS): lane, slice
GROUP_ROWS = 16  # c: up to this many static query rows of a batch index share one item
PREFETCH_KEYS = 4  # c: a gathered key's and value's rows are prefetched this many keys ahead
KEY_BLOCK = 16  # c, the grouped kernel: keys loaded, scored and softmaxed this many at a time
KEY_GROUP = 4  # c, the grouped kernel: keys whose scores are summed together (prelude ls_scores4)
# c, the grouped kernel: the query rows an item takes where a batch axis shares the keys (a
# prompt's positions: TILE_ROWS // m of them), so that a key row is loaded once for them all; from
# TRANSPOSE_ROWS rows on, a key block is transposed once and each row's scores are one vector over
# its keys (prelude ls_scores_t16x2)
TILE_ROWS = 24
TRANSPOSE_ROWS = 8
NINF = "(-ls_inf())"
# a query row's keys split over a thread-block cluster (sm_90, kind ``attention_cluster``: CLUSTER
# blocks per row, merged through distributed shared memory): -24% on the 1B decode step at 512
# keys, +1.3% at 32 (H100, fourteenth session); LIGHTSPEED_ATTENTION_CLUSTER=0: one block per row
CLUSTERED = os.environ.get("LIGHTSPEED_ATTENTION_CLUSTER", "1") == "1"


def blocked_value(d: DType) -> str:
    """The float a key's mask value must not exceed to count as blocked for skipping it: the
    lowest value of a float32 or bfloat16 mask (any score plus it is so far below a row's maximum
    that its weight is exactly 0 in float32); for other mask dtypes -inf only."""
    if d.name not in ("float32", "bfloat16"):
        return NINF  # float16's lowest (-65504) plus a score is not far enough below a maximum
    npd = d.np
    info = np.finfo(npd) if npd.kind == "f" else importlib.import_module("ml_dtypes").finfo(npd)
    return f"(float)({float(info.min)!r})"


def _static(e: Expr, what: str) -> int:
    if e.free_vars():
        raise LightspeedError(f"attention kernel: the {what} must be static, got {e}")
    return int(e.value)


def batch_offsets(w: Writer, a: dict, batch: list[Expr], tile: tuple[int, int] | None = None) -> list[str]:
    """Unflatten the batch index ``_ls_rest`` into coordinates (named ``_ls_b<axis>``, returned)
    and start the queries', keys' and values' offsets ``_ls_oq``, ``_ls_ok``, ``_ls_ov`` there.
    ``tile`` (axis, t): that axis counts tiles of t indexes, its coordinate the tile's first index."""
    oq, ok_, ov = (w.expr(a[f]) for f in ("q_offset", "k_offset", "v_offset"))
    w.line(f"long long _ls_oq = {oq}, _ls_ok = {ok_}, _ls_ov = {ov};")
    names = [f"_ls_b{x}" for x in range(len(batch))]
    for x in reversed(range(len(batch))):
        t = tile[1] if tile is not None and tile[0] == x else 1
        size = w.expr((batch[x] + (t - 1)) // t if t > 1 else batch[x])
        first = f"(_ls_rest % {size}) * {t}" if t > 1 else f"_ls_rest % {size}"
        w.line(f"const long long {names[x]} = {first}; _ls_rest /= {size};")
        w.line(f"_ls_oq += {names[x]} * {w.expr(a['q_batch_strides'][x])}; "
               f"_ls_ok += {names[x]} * {w.expr(a['k_batch_strides'][x])}; "
               f"_ls_ov += {names[x]} * {w.expr(a['v_batch_strides'][x])};")
    w.index_vars |= set(names)
    return names


def nested(w: Writer, indent: str, make) -> str:
    """``make()``'s value, its statements written in their own scope (so its loads are not reused
    outside it) and indented by ``indent`` where the writer is now."""
    w.push()
    value = make()
    inner = w.pop()
    w.scope.lines.extend(indent + ln for ln in inner)
    return value


class Operand:
    """How the kernel reads keys or values: their body (``k_body``/``v_body``) is one leaf whose
    view is its buffer's own row-major layout -- a pointer, read at the flat index (a KV cache) --
    or anything else, computed per element where it is read (a paged step's gather: each row's
    keys read through its page table, never copied)."""

    def __init__(self, w: Writer, region: Region, body: tuple, in_dtypes: list[DType], var: str,
                 numel: Expr | None = None):
        self.w, self.region, self.var = w, region, var
        # the flat index is below numel: a quotient by it is 0 (a batch axis of one, a view's
        # outer coordinate), which the kernel then never divides out
        self.body = below(body, numel) if numel is not None else body
        leaf = body[1] if body[0] == "leaf" else None
        self.ptr = f"in{leaf}" if leaf is not None and region.views[leaf].is_contiguous else None
        self.dtype = in_dtypes[leaf] if leaf is not None else node_dtype(body, in_dtypes)
        w.index_vars.add(var)

    def run_leaves(self) -> tuple[int, int] | None:
        """(index leaf, data leaf) when the body gathers a contiguous buffer through a contiguous
        integer index buffer (a paged step's keys: each position's row through its page table)."""
        body, views = self.body, self.region.views
        if body[0] == "gather" and body[1][0] == "leaf":
            ix, data = body[1][1], body[2]
            if views[ix].is_contiguous and views[data].is_contiguous and not self.region.leaf_dtypes[ix].is_float:
                return ix, data
        return None

    def inline_run(self) -> tuple[tuple, int, list[Expr]] | None:
        """(the index tree, the data leaf, the divisors) when the body gathers a contiguous buffer
        through an index the kernel computes (a paged step's page-table arithmetic, recomputed
        where it is read: rolling._sequence) whose value rises by exactly one with the flat index
        inside any run of elements that keeps every divisor's quotient (``z // D``, ``z % D``);
        the run's index is then its first element's plus the offset (see :func:`run_slope`)."""
        body, views = self.body, self.region.views
        if body[0] != "gather" or body[1][0] == "leaf" or not views[body[2]].is_contiguous:
            return None
        divisors: list[Expr] = []
        if tree_slope(body[1], views, divisors) != 1:
            return None
        return body[1], body[2], divisors

    def fill(self, dest: str, count: int, base: str, unit: bool, ahead: tuple[str, str] | None = None,
             checked: str | None = None, export: str | None = None) -> None:
        """``dest[c] = `` the element at flat index ``base + c`` (``unit``: consecutive elements;
        else ``use`` is called by the caller) for c < ``count``, as floats (c dialect).  A body that
        gathers through an index buffer (:meth:`run_leaves`) first checks that the ``count``
        indexes are one run inside the data, then copies the run (vector loads); otherwise element
        by element.  ``export``: an ``int`` the check's result is also stored in; ``checked``: the
        one an earlier fill exported for the same indexes at the same ``base`` (the values read
        through the keys' index buffer): the run is not checked again, only its first index read."""
        w = self.w
        inline = self.inline_run() if unit else None
        if inline is not None:
            self._fill_inline(dest, count, base, *inline, ahead, checked, export)
            return
        run = self.run_leaves() if unit else None
        if run is None:
            self.use(f"for (int c = 0; c < {count}; c++)", f"{base} + c", lambda v: f"{dest}[c] = {v};")
            return
        ix, data = run
        size = w.expr(prod(self.region.views[data].shape))
        names = self.region.names
        w.line("  {")
        w.line(f"    const {storage_type(self.region.leaf_dtypes[ix])}* _ls_ix = {names[ix]} + ({base});")
        w.line("    const long long _ls_r0 = (long long)_ls_ix[0];")
        if checked is not None:
            w.line(f"    int _ls_one = {checked};")
        else:
            w.line(f"    int _ls_one = _ls_r0 >= 0 && _ls_r0 <= {size} - {count};")
            w.line(f"    for (int c = 0; c < {count}; c++) _ls_one &= (long long)_ls_ix[c] == _ls_r0 + c;")
            if export is not None:
                w.line(f"    {export} = _ls_one;")
        if ahead is not None:  # (condition, index offset): a later key's row, fetched while this one is used
            cond, off = ahead
            w.line(f"    if ({cond}) {{")
            w.line(f"      const long long _ls_pf = (long long)_ls_ix[{off}];")
            w.line(f"      if (_ls_pf >= 0 && _ls_pf <= {size} - {count})")
            w.line(f"        for (int c = 0; c < {count}; c += 16) __builtin_prefetch({names[data]} + _ls_pf + c);")
            w.line("    }")
        self._copy_run(dest, count, base, data)

    def _copy_run(self, dest: str, count: int, base: str, data: int) -> None:
        """The end of a fill: where ``_ls_one`` holds, the run of ``count`` elements of the data
        leaf from ``_ls_r0`` copied into ``dest``; else element by element through the body."""
        w = self.w
        src = load(self.region.leaf_dtypes[data], f"{self.region.names[data]}[_ls_r0 + c]")
        w.line("    if (_ls_one) {")
        w.line(f"      for (int c = 0; c < {count}; c++) {dest}[c] = (float){src};")
        w.line("    } else {")
        w.push()
        self.use(f"for (int c = 0; c < {count}; c++)", f"{base} + c", lambda v: f"{dest}[c] = {v};")
        w.scope.parent.lines.extend("    " + ln for ln in w.pop())
        w.line("    }")
        w.line("  }")

    def _fill_inline(self, dest: str, count: int, base: str, tree: tuple, data: int, divisors: list[Expr],
                     ahead: tuple[str, str] | None = None, checked: str | None = None,
                     export: str | None = None) -> None:
        """:meth:`fill` of an :meth:`inline_run` body: where the run of ``count`` elements from
        ``base`` keeps every divisor's quotient, its index is computed once (at ``base``) and
        the run copied; else element by element.  ``ahead`` (condition, flat offset): a later
        run's index computed the same way, its elements prefetched.  ``export``: a name prefix
        the run's check, index and the later run's are stored under (``<p>`` and ``<p>_r0``,
        ``<p>_a``, ``<p>_ar0``, declared by the caller); ``checked``: the prefix an earlier fill
        of the same index at the same base exported (a paged step's values, read through the
        keys' page table): nothing is computed again."""
        w = self.w
        size = w.expr(prod(self.region.views[data].shape))
        divs = list(dict.fromkeys(w.expr(d) for d in divisors))

        def start(b: str, indent: str, ok: str, r0: str) -> None:  # ok, r0: the run's check and index
            w.index_vars.add(b)
            conds = [f"{b} % {d} + {count} <= {d}" for d in divs]
            w.line(f"{indent}int {ok} = {' && '.join(conds) if conds else '1'};")
            w.line(f"{indent}long long {r0} = 0;")
            w.line(f"{indent}if ({ok}) {{")
            w.push()
            value = self.region.value(tree, b)
            w.scope.parent.lines.extend(indent + "  " + ln for ln in w.pop())
            w.line(f"{indent}  {r0} = (long long){value};")
            w.line(f"{indent}  {ok} = {r0} >= 0 && {r0} <= {size} - {count};")
            w.line(f"{indent}}}")

        b = f"{self.var}b"
        w.line("  {")
        w.line(f"    const long long {b} = {base};")
        if checked is not None:
            w.line(f"    int _ls_one = {checked};")
            w.line(f"    const long long _ls_r0 = {checked}_r0;")
        else:
            start(b, "    ", "_ls_one", "_ls_r0")
        if export is not None:
            w.line(f"    {export} = _ls_one; {export}_r0 = _ls_r0; {export}_a = 0;")
        if ahead is not None:  # (condition, flat offset): a later run fetched while this one is used
            cond, off = ahead
            w.line(f"    if ({cond}) {{")
            if checked is not None:
                w.line(f"      const int _ls_aok = {checked}_a;")
                w.line(f"      const long long _ls_ar0 = {checked}_ar0;")
            else:
                w.line(f"      const long long {b}a = {b} + {off};")
                start(f"{b}a", "      ", "_ls_aok", "_ls_ar0")
                if export is not None:
                    w.line(f"      {export}_a = _ls_aok; {export}_ar0 = _ls_ar0;")
            w.line("      if (_ls_aok)")
            w.line(f"        for (int c = 0; c < {count}; c += 16) "
                   f"__builtin_prefetch({self.region.names[data]} + _ls_ar0 + c);")
            w.line("    }")
        self._copy_run(dest, count, base, data)

    def use(self, head: str, flat: str, statement: Callable[[str], str]) -> None:
        """``head {`` (a loop or a guard, inside the key loop), the element at flat index ``flat``
        as a float, ``statement`` of it, ``}``."""
        self.w.line(f"  {head} {{")
        if self.ptr is not None:
            value = f"(float){load(self.dtype, f'{self.ptr}[{flat}]')}"
        else:
            self.w.line(f"    const long long {self.var} = {flat};")
            value = f"(float){nested(self.w, '    ', lambda: self.region.value(self.body, self.var))}"
        self.w.line(f"    {statement(value)}")
        self.w.line("  }")


def _below_expr(e: Expr, n: Expr) -> Expr:
    """``e`` with ``z // n`` as 0 and ``z % n`` as ``z`` (z < n)."""
    if e.kind in ("var", "const") or INDEX_VAR not in e.free_vars():
        return e
    if e.kind in ("floordiv", "mod") and e.args[0].kind == "var" and e.args[1] == n:
        return const(0) if e.kind == "floordiv" else e.args[0]
    return e.with_args([_below_expr(x, n) for x in e.args])


def below(node: tuple, n: Expr) -> tuple:
    """A region tree evaluated at flat indexes below ``n``: its iotas' ``z // n`` are 0 and
    ``z % n`` is z (leaves keep their views)."""
    if node[0] == "iota":
        return ("iota", _below_expr(node[1], n), *node[2:])
    if node[0] in ("leaf", "const") or not isinstance(node, tuple):
        return node
    return tuple(below(x, n) if isinstance(x, tuple) else x for x in node)


def run_slope(e: Expr, divisors: list[Expr]) -> int | None:
    """How much the integer expression ``e`` of the flat index ``z`` rises per element inside a
    run of consecutive z that keeps the quotient of z by every divisor appended to ``divisors``
    (the run check a kernel makes at run time): 0 for what stays (constants, dims, ``z // D``),
    1 for ``z`` and ``z % D``, sums and constant multiples of those; None where it cannot say
    (``z`` inside anything else: a quotient of ``z + 1``, a product of two z terms, ...)."""
    kind = e.kind
    if INDEX_VAR not in e.free_vars():
        return 0
    if kind == "var":
        return 1
    if kind in ("floordiv", "mod"):
        a, d = e.args
        if a.kind != "var" or INDEX_VAR in d.free_vars():
            return None
        divisors.append(d)
        return 0 if kind == "floordiv" else 1
    if kind == "add":
        parts = [run_slope(x, divisors) for x in e.args]
        return None if None in parts else sum(parts)
    if kind == "mul":  # a product of what stays is what stays; one moving factor times constants
        slopes = [run_slope(x, divisors) for x in e.args]
        if None in slopes:
            return None
        moving = [k for k, sl in enumerate(slopes) if sl]
        if not moving:
            return 0
        others = [x for k, x in enumerate(e.args) if k != moving[0]]
        if len(moving) > 1 or not all(x.kind == "const" for x in others):
            return None
        factor = 1
        for x in others:
            factor *= int(x.value)
        return slopes[moving[0]] * factor
    return None


def tree_slope(node: tuple, views: list, divisors: list[Expr]) -> int | None:
    """:func:`run_slope` of a region tree's integer value (iotas, leaves read at positions that
    stay within the run, sums, products with a side that stays and is an iota constant or a
    literal, casts): None where it cannot say."""
    tag = node[0]
    if tag == "iota":
        return run_slope(node[1], divisors)
    if tag == "const":
        return 0
    if tag == "leaf":
        st = views[node[1]]
        return 0 if run_slope(st.index_expr(), divisors) == 0 and run_slope(st.valid_expr(), divisors) == 0 else None
    if tag == "Cast":
        return tree_slope(node[2], views, divisors)
    if tag == "Add":
        parts = [tree_slope(x, views, divisors) for x in node[1:]]
        return None if None in parts else sum(parts)
    if tag == "Mul":
        x, y = node[1:]
        sx, sy = tree_slope(x, views, divisors), tree_slope(y, views, divisors)
        if sx is None or sy is None:
            return None
        if sx == 0 and sy == 0:
            return 0
        if sx != 0 and sy != 0:
            return None  # both move
        factor = _literal_int(x if sx == 0 else y)
        return None if factor is None else factor * (sy if sx == 0 else sx)
    return None


def _literal_int(node: tuple) -> int | None:
    """The integer a tree node always is (a constant, or an iota of a constant expression)."""
    if node[0] == "const" and isinstance(node[1], (int, np.integer)):
        return int(node[1])
    if node[0] == "iota" and node[1].is_const:
        return int(node[1].value)
    return None


def online_step(w: Writer, region: Region, at: Point | str, indent: str, mx: str, total: str,
                mask: str | None = None) -> None:
    """One key of a row: the mask (operand 0, read at ``at``: the key's flat index ``_ls_z``; or
    ``mask``, read before) added to its score ``_ls_x``, then the online softmax step on the row's
    running maximum ``mx`` and sum ``total``: a new maximum rescales what was summed (``_ls_sc``,
    exactly 1 when it stays) and the key gets the weight ``_ls_p`` (0 for a blocked key at -inf)."""
    if mask is None:
        mask = nested(w, indent, lambda: region.leaf(0, at))
    w.line(f"{indent}_ls_x += (float){mask};")
    w.line(f"{indent}const float _ls_om = {mx}, _ls_nm = _ls_x > _ls_om ? _ls_x : _ls_om;")
    w.line(f"{indent}const float _ls_sc = _ls_nm == _ls_om ? 1.0f : ls_exp2f(_ls_om - _ls_nm);")
    w.line(f"{indent}const float _ls_p = _ls_x == {NINF} ? 0.0f : ls_exp2f(_ls_x - _ls_nm);")
    w.line(f"{indent}{total} = {total} * _ls_sc + _ls_p;")
    w.line(f"{indent}{mx} = _ls_nm;")


def attention_kernel(dialect: str, op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    m = op.args["m"]
    if dialect == "c" and not m.free_vars() and int(m.value) <= GROUP_ROWS:
        return grouped_attention_kernel(op, in_dtypes)
    a = op.args
    w = Writer(dialect)
    batch = list(a["batch"])
    m, n = a["m"], a["n"]
    hk, hv = _static(a["k"], "key head dim"), _static(a["dv"], "value head dim")
    w.index_vars |= {"_ls_item", "_ls_l", "_ls_z"}
    mm, nn = w.expr(m), w.expr(n)
    w.push()
    # the row: _ls_item = (batch index, i); batch coordinates for the operands' offsets and the mask
    w.line(f"const long long _ls_mi = _ls_item % {mm};")
    w.line(f"long long _ls_rest = _ls_item / {mm};")
    names = batch_offsets(w, a, batch)
    w.index_vars.add("_ls_mi")
    coords = [sym(x) for x in names] + [sym("_ls_mi"), sym("_ls_l")]
    qsm, qsk, ksk, ksn, vsn, vsj = (w.expr(a[f]) for f in ("q_stride_m", "q_stride_k", "k_stride_k", "k_stride_n",
                                                            "v_stride_n", "v_stride_j"))
    w.line(f"_ls_oq += _ls_mi * {qsm};")
    # operand 0 is the mask; the bodies' leaves (queries, keys, values) operands 1, 2, ...
    views = [a["mask_view"], *op.leaf_views]
    region = Region(w, views, list(in_dtypes), False, names=[f"in{k}" for k in range(len(in_dtypes))])
    keys = Operand(w, region, a["k_body"], in_dtypes, "_ls_kz", prod(a["k_shape"]))
    values = Operand(w, region, a["v_body"], in_dtypes, "_ls_vz", prod(a["v_shape"]))
    w.index_vars.add("_ls_qz")

    def query(c: str) -> str:  # the query element c of this row, as the body computes it
        w.line(f"const long long _ls_qz = _ls_oq + ({c}) * {qsk};")
        return region.value(a["q_body"], "_ls_qz")

    shape = (*batch, m, n)
    mask_view = a["mask_view"]
    flat = sym("_ls_z")
    at = Point("_ls_z", flat, tuple(shape), tuple(coords)) if tuple(mask_view.shape) == shape else "_ls_z"
    if dialect == "cuda":
        qpl, vpl = -(-hk // WARP), -(-hv // WARP)  # head-dim elements per lane
        w.line(f"float _ls_q[{qpl}];")
        for t in range(qpl):
            c = f"lane + {t * WARP}"
            w.line(f"_ls_q[{t}] = 0.0f;")
            w.line(f"if ({c} < {hk}) {{")
            qv = nested(w, "  ", lambda c=c: query(c))
            w.line(f"  _ls_q[{t}] = (float){qv};")
            w.line("}")
        w.line(f"float _ls_mx = {NINF}, _ls_sum = 0.0f, _ls_acc[{vpl}];")
        w.line(f"for (int t = 0; t < {vpl}; t++) _ls_acc[t] = 0.0f;")
        # unrolled so that the loads of several keys are in flight at once (the online softmax
        # is the only dependence between keys)
        w.line("#pragma unroll 4")
        if CLUSTERED:
            w.line(f"for (long long _ls_l = _ls_crank * {WARPS} + slice; _ls_l < {nn}; "
                   f"_ls_l += {WARPS} * _ls_csize) {{")
        else:
            w.line(f"for (long long _ls_l = slice; _ls_l < {nn}; _ls_l += {WARPS}) {{")
        w.line("  float _ls_x = 0.0f;")
        for t in range(qpl):
            c = f"lane + {t * WARP}"
            keys.use(f"if ({c} < {hk})", f"_ls_ok + ({c}) * {ksk} + _ls_l * {ksn}",
                     lambda k, t=t: f"_ls_x += _ls_q[{t}] * {k};")
        w.line(f"  for (int o = {WARP // 2}; o > 0; o >>= 1) _ls_x += __shfl_xor_sync(0xffffffffu, _ls_x, o);")
    else:
        w.line(f"float _ls_mx = {NINF}, _ls_sum = 0.0f, _ls_acc[{hv}], _ls_q[{hk}];")
        w.line(f"for (int t = 0; t < {hv}; t++) _ls_acc[t] = 0.0f;")
        w.line(f"for (int c = 0; c < {hk}; c++) {{")
        qv = nested(w, "  ", lambda: query("c"))
        w.line(f"  _ls_q[c] = (float){qv};")
        w.line("}")
        w.line(f"for (long long _ls_l = 0; _ls_l < {nn}; _ls_l++) {{")
        w.line("  float _ls_x = 0.0f;")
        keys.use(f"for (int c = 0; c < {hk}; c++)", f"_ls_ok + c * {ksk} + _ls_l * {ksn}",
                 lambda k: f"_ls_x += _ls_q[c] * {k};")
    w.line(f"  const long long _ls_z = _ls_item * {nn} + _ls_l;")
    online_step(w, region, at, "  ", "_ls_mx", "_ls_sum")
    if dialect == "cuda":
        for t in range(vpl):
            j = f"lane + {t * WARP}"
            values.use(f"if ({j} < {hv})", f"_ls_ov + _ls_l * {vsn} + ({j}) * {vsj}",
                       lambda v, t=t: f"_ls_acc[{t}] = _ls_acc[{t}] * _ls_sc + _ls_p * {v};")
        w.line("}")
        # merge the warps' partial results
        w.line(f"__shared__ float _ls_smx[{WARPS}], _ls_ssum[{WARPS}], _ls_sacc[{WARPS}][{vpl * WARP}];")
        if CLUSTERED:
            w.line(f"__shared__ float _ls_bm, _ls_bs, _ls_bacc[{vpl * WARP}];")
        w.line("if (lane == 0) { _ls_smx[slice] = _ls_mx; _ls_ssum[slice] = _ls_sum; }")
        w.line(f"for (int t = 0; t < {vpl}; t++) _ls_sacc[slice][lane + t * {WARP}] = _ls_acc[t];")
        w.line("__syncthreads();")
        w.line("if (slice == 0) {")
        w.line(f"  float _ls_M = {NINF}, _ls_S = 0.0f, _ls_wt[{WARPS}];")
        w.line(f"  for (int u = 0; u < {WARPS}; u++) _ls_M = _ls_smx[u] > _ls_M ? _ls_smx[u] : _ls_M;")
        w.line(f"  for (int u = 0; u < {WARPS}; u++) {{ _ls_wt[u] = _ls_smx[u] == {NINF} ? 0.0f : "
               f"ls_exp2f(_ls_smx[u] - _ls_M); _ls_S += _ls_ssum[u] * _ls_wt[u]; }}")
        if CLUSTERED:  # this block's merged partial, then rank 0 merges the cluster's
            w.line(f"  for (int t = 0; t < {vpl}; t++) {{")
            w.line(f"    const int j = lane + t * {WARP};")
            w.line("    float o = 0.0f;")
            w.line(f"    for (int u = 0; u < {WARPS}; u++) o += _ls_sacc[u][j] * _ls_wt[u];")
            w.line("    _ls_bacc[j] = o;")
            w.line("  }")
            w.line("  if (lane == 0) { _ls_bm = _ls_M; _ls_bs = _ls_S; }")
            w.line("}")
            # rank 0 gathers the blocks' partials, warp u reading block u's (all of a warp's
            # remote loads issued before any is used: one round trip per block, in parallel,
            # where one warp reading them one after another waited ~56 round trips), then
            # merges them in rank order in its own shared memory after the other blocks may go
            w.line(f"__shared__ float _ls_rm[{CLUSTER}], _ls_rs[{CLUSTER}], _ls_racc[{CLUSTER}][{vpl * WARP}];")
            w.line("ls_cluster_sync();")
            w.line("if (_ls_crank == 0) {")
            w.line(f"  for (unsigned int u = slice; u < _ls_csize; u += {WARPS}) {{")
            w.line(f"    float _ls_ra[{vpl}];")
            w.line(f"    for (int t = 0; t < {vpl}; t++) _ls_ra[t] = ls_cluster_ld(_ls_bacc + lane + t * {WARP}, u);")
            w.line("    const float _ls_um = ls_cluster_ld(&_ls_bm, u), _ls_us = ls_cluster_ld(&_ls_bs, u);")
            w.line(f"    for (int t = 0; t < {vpl}; t++) _ls_racc[u][lane + t * {WARP}] = _ls_ra[t];")
            w.line("    if (lane == 0) { _ls_rm[u] = _ls_um; _ls_rs[u] = _ls_us; }")
            w.line("  }")
            w.line("}")
            w.line("ls_cluster_sync();  // the other blocks' shared memory is read: they may finish")
            w.line("if (_ls_crank == 0) {")
            w.line("  __syncthreads();")
            w.line("  if (slice == 0) {")
            w.line(f"    float _ls_M = {NINF}, _ls_S = 0.0f;")
            w.line("    for (unsigned int u = 0; u < _ls_csize; u++) _ls_M = _ls_rm[u] > _ls_M ? _ls_rm[u] : _ls_M;")
            w.line(f"    for (unsigned int u = 0; u < _ls_csize; u++) if (_ls_rm[u] != {NINF}) "
                   "_ls_S += _ls_rs[u] * ls_exp2f(_ls_rm[u] - _ls_M);")
            w.line(f"    for (int t = 0; t < {vpl}; t++) {{")
            w.line(f"      const int j = lane + t * {WARP};")
            w.line(f"      if (j < {hv}) {{")
            w.line("        float o = 0.0f;")
            w.line(f"        for (unsigned int u = 0; u < _ls_csize; u++) if (_ls_rm[u] != {NINF}) "
                   "o += _ls_racc[u][j] * ls_exp2f(_ls_rm[u] - _ls_M);")
            w.line(f"        out[_ls_item * {hv} + j] = {store(op.dtype, 'o / _ls_S')};")
            w.line("      }")
            w.line("    }")
            w.line("  }")
            w.line("  __syncthreads();  // the gathered partials are read before the next item writes them")
            w.line("}")
        else:
            w.line(f"  for (int t = 0; t < {vpl}; t++) {{")
            w.line(f"    const int j = lane + t * {WARP};")
            w.line(f"    if (j < {hv}) {{")
            w.line("      float o = 0.0f;")
            w.line(f"      for (int u = 0; u < {WARPS}; u++) o += _ls_sacc[u][j] * _ls_wt[u];")
            w.line(f"      out[_ls_item * {hv} + j] = {store(op.dtype, 'o / _ls_S')};")
            w.line("    }")
            w.line("  }")
            w.line("}")
            w.line("__syncthreads();")
    else:
        values.use(f"for (int j = 0; j < {hv}; j++)", f"_ls_ov + _ls_l * {vsn} + j * {vsj}",
                   lambda v: f"_ls_acc[j] = _ls_acc[j] * _ls_sc + _ls_p * {v};")
        w.line("}")
        w.line(f"for (int j = 0; j < {hv}; j++) out[_ls_item * {hv} + j] = {store(op.dtype, '_ls_acc[j] / _ls_sum')};")
    body = w.pop()
    bufs = [("out", storage_type(op.dtype), True, "out")] + [
        (f"in{k}", storage_type(d), False, k) for k, d in enumerate(in_dtypes)]
    count = prod(batch) * m if batch else m
    kind = "attention_cluster" if CLUSTERED and dialect == "cuda" else "attention"
    return finish(w, dialect, kind, bufs, count, body, "attention", item_cost=n * (hk + hv) + const(1))


def grouped_attention_kernel(op: LOp, in_dtypes: list[DType]) -> KernelSpec:
    """The c dialect's kernel when the query rows of one batch index are few and static (a KV
    head's query group, m <= GROUP_ROWS): an item per batch index walks the keys once, each key's
    and value's row converted once and used by every query row of the group.  Where a batch axis
    reads the same keys and values at every index of it (a prompt's positions: :func:`_shared_axis`),
    an item takes :data:`TILE_ROWS` // m consecutive indexes of it, so a key is loaded once for
    those rows too, and the block's scores are then a vector over its keys (the block transposed:
    prelude ``ls_scores_t16x2``).  Each row's sums are in one order whatever the item holds (the rows
    never depend on each other, on the batch or on the tiling)."""
    a = op.args
    w = Writer("c")
    batch = list(a["batch"])
    m, n = int(a["m"].value), a["n"]
    hk, hv = _static(a["k"], "key head dim"), _static(a["dv"], "value head dim")
    w.index_vars |= {"_ls_item", "_ls_l", "_ls_z", "_ls_mi", "_ls_qz", "_ls_r", "_ls_t", "_ls_bp"}
    nn = w.expr(n)
    pa = _shared_axis(a, batch)
    tile = max(1, TILE_ROWS // m) if pa is not None else 1  # positions (indexes of axis pa) an item takes
    rows = tile * m  # query rows an item holds at most
    w.push()
    # the item: the batch index with axis pa in tiles of `tile` (its first index of pa in _ls_b<pa>,
    # _ls_np of the tile's indexes valid)
    ext = list(batch)
    if tile > 1:
        ext[pa] = (batch[pa] + (tile - 1)) // tile
    w.line("long long _ls_rest = _ls_item;")
    names = batch_offsets(w, a, batch, (pa, tile) if tile > 1 else None)
    # the flat batch index of the item's first row, and the rows between two indexes of axis pa
    flat = " + ".join(f"{names[x]} * {w.expr(prod(batch[x + 1:]))}" for x in range(len(batch))) or "0"
    w.line(f"const long long _ls_bf = {flat};")
    if tile > 1:
        w.line(f"const long long _ls_np = {w.expr(batch[pa])} - {names[pa]} < {tile} ? "
               f"{w.expr(batch[pa])} - {names[pa]} : {tile};")
        w.line(f"const long long _ls_pstride = {w.expr(prod(batch[pa + 1:]))};")
        qsp = w.expr(a["q_batch_strides"][pa])
    else:
        w.line("const long long _ls_np = 1, _ls_pstride = 0;")
        qsp = "0"
    w.line(f"const int _ls_nr = (int)_ls_np * {m};  /* the item's rows: (index of axis pa, query row) */")
    # a row's coordinates: _ls_t (its index of axis pa past the item's first), _ls_mi (its query row)
    row_coords = (f"const int _ls_t = _ls_r / {m}, _ls_mi = _ls_r % {m};"
                  f" const long long _ls_bp = {names[pa] if pa is not None else '0'} + _ls_t;"
                  " (void)_ls_bp;")
    qsm, qsk, ksk, ksn, vsn, vsj = (w.expr(a[f]) for f in ("q_stride_m", "q_stride_k", "k_stride_k", "k_stride_n",
                                                            "v_stride_n", "v_stride_j"))
    views = [a["mask_view"], *op.leaf_views]  # the mask, then the bodies' leaves
    region = Region(w, views, list(in_dtypes), False, names=[f"in{k}" for k in range(len(in_dtypes))])
    keys = Operand(w, region, a["k_body"], in_dtypes, "_ls_kz", prod(a["k_shape"]))
    values = Operand(w, region, a["v_body"], in_dtypes, "_ls_vz", prod(a["v_shape"]))
    shape = (*batch, a["m"], n)
    coords = tuple(sym("_ls_bp") if x == pa else sym(names[x]) for x in range(len(batch))) \
        + (sym("_ls_mi"), sym("_ls_l"))
    at = Point("_ls_z", sym("_ls_z"), tuple(shape), coords) if tuple(a["mask_view"].shape) == shape else "_ls_z"
    hk8 = -(-hk // 8) * 8  # the rows padded to whole 8-lane vectors (zeros)
    w.line(f"float _ls_q[{rows}][{hk8}], _ls_mx[{rows}], _ls_sum[{rows}], _ls_acc[{rows}][{hv}];")
    w.line(f"int _ls_open[{rows}];  /* the row has seen a key it does not block */")
    w.line("for (int _ls_r = 0; _ls_r < _ls_nr; _ls_r++) {")
    w.line(f"  {row_coords}")
    w.line(f"  _ls_mx[_ls_r] = {NINF}; _ls_sum[_ls_r] = 0.0f; _ls_open[_ls_r] = 0;")
    w.line(f"  for (int j = 0; j < {hv}; j++) _ls_acc[_ls_r][j] = 0.0f;")
    w.line(f"  for (int c = {hk}; c < {hk8}; c++) _ls_q[_ls_r][c] = 0.0f;")
    w.line(f"  for (int c = 0; c < {hk}; c++) {{")

    def query() -> str:
        w.line(f"const long long _ls_qz = _ls_oq + _ls_t * {qsp} + _ls_mi * {qsm} + c * {qsk};")
        return region.value(a["q_body"], "_ls_qz")
    qv = nested(w, "    ", query)
    w.line(f"    _ls_q[_ls_r][c] = (float){qv};")
    w.line("  }")
    w.line("}")
    kb = KEY_BLOCK
    transposed = rows >= TRANSPOSE_ROWS
    w.index_vars |= {"_ls_l0", "_ls_b"}
    w.line(f"float _ls_kb[{kb}][{hk8}], _ls_vb[{kb}][{hv}];")
    if transposed:
        w.line(f"float _ls_kt[{hk8}][{kb}];  /* the block's keys transposed: a key a lane */")
    # zeros: the padding past hk, and the rows of keys a block skips (scored with the others, then dropped)
    w.line(f"for (int _ls_b = 0; _ls_b < {kb}; _ls_b++) for (int c = 0; c < {hk8}; c++) _ls_kb[_ls_b][c] = 0.0f;")
    w.line(f"float _ls_spare[{hv}] = {{0}};  /* an odd row count's partner in the weighted values (weights 0) */")
    # keys in blocks of KEY_BLOCK (from key 0, whatever the batch: a row's sums in one order): the
    # block's rows loaded, then per query row its scores, one rescale of the running sums by the
    # block's maximum, the block's weights (a vector of exp2) and their weighted values
    w.line(f"for (long long _ls_l0 = 0; _ls_l0 < {nn}; _ls_l0 += {kb}) {{")
    w.line(f"  float _ls_mk[{rows}][{kb}]; int _ls_kept[{kb}], _ls_any = 0;")
    # the rows' mask values of the block's keys first, a row at a time (a run of keys: vector
    # loads where the mask is laid out so): a key that every row blocks after that row saw a key it
    # does not block (a prompt's future keys) is skipped without being loaded.  Exact: blocked
    # means the mask's dtype's lowest value (-3.4e38 for float32 and bfloat16; the models' masks),
    # so the online step would give it the weight 0 and the scale 1 (its score far below the row's
    # maximum); a row that has seen no open key yet keeps every key (its result stays what it was
    # when all its keys are blocked)
    low = blocked_value(in_dtypes[0])
    w.line(f"  const int _ls_nb = {nn} - _ls_l0 < {kb} ? (int)({nn} - _ls_l0) : {kb};  /* the block's keys */")
    w.line("  int _ls_allopen = 1;")
    w.line("  for (int _ls_r = 0; _ls_r < _ls_nr; _ls_r++) {")
    w.line(f"    {row_coords}")
    w.line("    _ls_allopen &= _ls_open[_ls_r];")
    w.line(f"    const long long _ls_zr = ((_ls_bf + _ls_t * _ls_pstride) * {m} + _ls_mi) * {nn} + _ls_l0;")
    w.line("    for (int _ls_b = 0; _ls_b < _ls_nb; _ls_b++) {")
    w.line("      const long long _ls_l = _ls_l0 + _ls_b, _ls_z = _ls_zr + _ls_b;")
    mval = nested(w, "      ", lambda: region.leaf(0, at))
    w.line(f"      _ls_mk[_ls_r][_ls_b] = (float){mval};")
    w.line("    }")
    w.line(f"    for (int _ls_b = _ls_nb; _ls_b < {kb}; _ls_b++) _ls_mk[_ls_r][_ls_b] = {low};  /* past the keys */")
    w.line("  }")
    w.line(f"  for (int _ls_b = 0; _ls_b < {kb}; _ls_b++) _ls_kept[_ls_b] = 0;")
    w.line("  if (_ls_allopen) {  /* every row has seen an open key: a key is kept where a row opens it */")
    w.line("    for (int _ls_r = 0; _ls_r < _ls_nr; _ls_r++)")
    w.line(f"      for (int _ls_b = 0; _ls_b < {kb}; _ls_b++) _ls_kept[_ls_b] |= _ls_mk[_ls_r][_ls_b] > {low};")
    w.line("  } else {  /* each row's keys in order: a row that has seen no open key keeps them */")
    w.line("    for (int _ls_r = 0; _ls_r < _ls_nr; _ls_r++)")
    w.line("      for (int _ls_b = 0; _ls_b < _ls_nb; _ls_b++) {")
    w.line(f"        const int _ls_blocked = _ls_mk[_ls_r][_ls_b] <= {low};")
    w.line("        _ls_kept[_ls_b] |= !_ls_blocked || !_ls_open[_ls_r];")
    w.line("        _ls_open[_ls_r] |= !_ls_blocked;")
    w.line("      }")
    w.line("  }")
    w.line(f"  for (int _ls_b = 0; _ls_b < {kb}; _ls_b++) _ls_any |= _ls_kept[_ls_b];")
    w.line("  if (!_ls_any) continue;  /* a block every row skips: nothing loaded */")
    w.line(f"  for (int _ls_b = 0; _ls_b < {kb}; _ls_b++) {{")
    w.line("  const long long _ls_l = _ls_l0 + _ls_b;")
    # a skipped key's value row is zeros (its weight is 0; an unset row could hold a NaN)
    w.line(f"  if (!_ls_kept[_ls_b]) {{ for (int j = 0; j < {hv}; j++) _ls_vb[_ls_b][j] = 0.0f; continue; }}")
    ahead_k = (f"_ls_l + {PREFETCH_KEYS} < {nn}", f"{PREFETCH_KEYS} * {ksn}")
    ahead_v = (f"_ls_l + {PREFETCH_KEYS} < {nn}", f"{PREFETCH_KEYS} * {vsn}")
    # the values gathered through the keys' index at the same offsets (a paged step's two pools,
    # one page table): the keys' check of the run, and their run's index, hold for them -- the same
    # index buffer (a materialised index), or the same index tree over the same leaves (computed)
    same_rows = (a["k_stride_k"] == 1 and a["v_stride_j"] == 1 and hk == hv and a["k_offset"] == a["v_offset"]
                 and a["k_stride_n"] == a["v_stride_n"] and tuple(a["k_batch_strides"]) == tuple(a["v_batch_strides"]))

    def canonical(tree: tuple) -> tuple:  # leaves as (the value read, its view): equal trees read alike
        if tree[0] == "leaf":
            return ("leaf", op.inputs[tree[1]], region.views[tree[1]])
        return tuple(canonical(x) if isinstance(x, tuple) else x for x in tree)

    def same_index(kx, vx, index) -> bool:  # the (index, data leaf) pairs read one index, equal pools
        return (kx is not None and vx is not None and canonical(index(kx)) == canonical(index(vx))
                and prod(region.views[kx[1]].shape) == prod(region.views[vx[1]].shape))

    shared = same_rows and (same_index(keys.run_leaves(), values.run_leaves(), lambda r: ("leaf", r[0]))
                            or same_index(keys.inline_run(), values.inline_run(), lambda r: r[0]))
    if shared:
        w.line("  int _ls_krun = 0, _ls_krun_a = 0; long long _ls_krun_r0 = 0, _ls_krun_ar0 = 0;")
        w.line("  (void)_ls_krun_a; (void)_ls_krun_r0; (void)_ls_krun_ar0;")
    if a["k_stride_k"] == 1:
        keys.fill("_ls_kb[_ls_b]", hk, f"_ls_ok + _ls_l * {ksn}", True, ahead_k, export="_ls_krun" if shared else None)
    else:
        keys.use(f"for (int c = 0; c < {hk}; c++)", f"_ls_ok + _ls_l * {ksn} + c * {ksk}",
                 lambda k: f"_ls_kb[_ls_b][c] = {k};")
    if a["v_stride_j"] == 1:
        values.fill("_ls_vb[_ls_b]", hv, f"_ls_ov + _ls_l * {vsn}", True, ahead_v, "_ls_krun" if shared else None)
    else:
        values.use(f"for (int j = 0; j < {hv}; j++)", f"_ls_ov + _ls_l * {vsn} + j * {vsj}",
                   lambda v: f"_ls_vb[_ls_b][j] = {v};")
    w.line("  }")
    if transposed:
        w.line(f"  for (int c = 0; c < {hk8}; c++) for (int _ls_b = 0; _ls_b < {kb}; _ls_b++) "
               "_ls_kt[c][_ls_b] = _ls_kb[_ls_b][c];")
    w.line(f"  float _ls_pr[{rows + 1}][{kb}], _ls_scr[{rows + 1}];  /* the rows' weights and rescales (+ a spare) */")
    # each key's score as 8 partial sums over the 8-element chunks of the head, in order, then
    # ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)): the same sums for every row, batch and tiling
    w.line(f"  float _ls_xr[{rows + 1}][{kb}];  /* the rows' scores */")
    if transposed:  # a vector over the block's keys (8 of them, one a partial sum), two rows at a time
        w.line("  for (int _ls_r = 0; _ls_r < _ls_nr; _ls_r += 2)")
        w.line(f"    ls_scores_t{kb}x2(_ls_q[_ls_r], _ls_q[_ls_r + 1 < _ls_nr ? _ls_r + 1 : _ls_r], &_ls_kt[0][0], "
               f"{hk8}, _ls_xr[_ls_r], _ls_xr[_ls_r + 1]);")
    w.line("  for (int _ls_r = 0; _ls_r < _ls_nr; _ls_r++) {")
    w.line("    float* _ls_x = _ls_xr[_ls_r];")
    w.line("    float* _ls_p = _ls_pr[_ls_r];")
    if not transposed:  # KEY_GROUP keys' sums at a time: their chains in flight together
        w.line(f"    for (int _ls_b = 0; _ls_b < {kb}; _ls_b += {KEY_GROUP})")
        w.line(f"      ls_scores{KEY_GROUP}(_ls_q[_ls_r], &_ls_kb[_ls_b][0], {hk8}, {hk8}, _ls_x + _ls_b);")
    # plus the mask; a skipped key's -inf (a vector select), the block's maximum as a tree
    w.line(f"    for (int _ls_b = 0; _ls_b < {kb}; _ls_b++) "
           f"_ls_x[_ls_b] = _ls_kept[_ls_b] ? _ls_x[_ls_b] + _ls_mk[_ls_r][_ls_b] : {NINF};")
    w.line(f"    const float _ls_bm = ls_max{kb}(_ls_x);")
    # the online softmax step once per block: a new maximum rescales what was summed (exactly 1
    # when it stays), each key gets its weight (0 for a skipped key or a score of -inf)
    w.line("    const float _ls_om = _ls_mx[_ls_r], _ls_nm = _ls_bm > _ls_om ? _ls_bm : _ls_om;")
    w.line("    const float _ls_sc = _ls_nm == _ls_om ? 1.0f : ls_exp2f(_ls_om - _ls_nm);")
    w.line(f"    for (int _ls_b = 0; _ls_b < {kb}; _ls_b++) "
           f"_ls_p[_ls_b] = _ls_x[_ls_b] == {NINF} ? 0.0f : ls_exp2f(_ls_x[_ls_b] - _ls_nm);")
    w.line(f"    const float _ls_ps = ls_sum{kb}(_ls_p);  /* a tree: (b + (b + 8)), then 4 apart, ... */")
    w.line("    _ls_sum[_ls_r] = _ls_sum[_ls_r] * _ls_sc + _ls_ps;")
    w.line("    _ls_mx[_ls_r] = _ls_nm;")
    w.line("    _ls_scr[_ls_r] = _ls_sc;")
    w.line("  }")
    # the weighted values, two rows at a time (their sums independent chains in flight together):
    # acc * scale, then + p[b] * v[b] for the block's keys in order (fused)
    w.line("  for (int _ls_r = 0; _ls_r < _ls_nr; _ls_r += 2) {")
    w.line("    const int _ls_two = _ls_r + 1 < _ls_nr;")
    w.line(f"    if (!_ls_two) {{ _ls_scr[_ls_r + 1] = 0.0f; for (int _ls_b = 0; _ls_b < {kb}; _ls_b++) "
           "_ls_pr[_ls_r + 1][_ls_b] = 0.0f; }")
    w.line(f"    ls_pv{kb}x2(_ls_acc[_ls_r], _ls_two ? _ls_acc[_ls_r + 1] : _ls_spare, _ls_pr[_ls_r], "
           f"_ls_pr[_ls_r + 1], _ls_scr[_ls_r], _ls_scr[_ls_r + 1], &_ls_vb[0][0], {hv});")
    w.line("  }")
    w.line("}")
    w.line("for (int _ls_r = 0; _ls_r < _ls_nr; _ls_r++) {")
    w.line(f"  {row_coords}")
    w.line(f"  for (int j = 0; j < {hv}; j++) out[((_ls_bf + _ls_t * _ls_pstride) * {m} + _ls_mi) * {hv} + j] = "
           f"{store(op.dtype, '_ls_acc[_ls_r][j] / _ls_sum[_ls_r]')};")
    w.line("}")
    body = w.pop()
    bufs = [("out", storage_type(op.dtype), True, "out")] + [
        (f"in{k}", storage_type(d), False, k) for k, d in enumerate(in_dtypes)]
    count = prod(ext) if ext else const(1)
    return finish(w, "c", "attention", bufs, count, body, "attention",
                  item_cost=n * rows * (hk + hv) + const(1))


def _shared_axis(a: dict, batch: list[Expr]) -> int | None:
    """A batch axis whose every index reads the same keys and values (their strides along it 0: a
    prompt's positions, each attending to the same cache) and that has more than one index (or a
    symbolic count), the outermost such; None when there is none."""
    for x, size in enumerate(batch):
        if a["k_batch_strides"][x] == 0 and a["v_batch_strides"][x] == 0 and (size.free_vars() or int(size.value) > 1):
            return x
    return None


def _attention(op: LOp, in_dtypes: list[DType], dialect: str) -> list[KernelSpec]:
    return [attention_kernel(dialect, op, in_dtypes)]


RENDERERS = {"Attention": _attention}
