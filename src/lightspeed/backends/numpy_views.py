"""Reading a node's buffer through a view, in numpy: the one view library of the host backends.

A value lives in a flat row-major buffer; an op reads it through a :class:`ShapeTracker`.  Two
entry points:

* :func:`read_view` (``buf, view, dims``): evaluates the view for given dims (vectorised index
  and validity expressions for stacked views, cached per view and dim values).  The reference
  runtime uses it.
* :func:`make_reader` (``view``) -> ``reader(buf, dims)``: prepared once per view, takes the dims
  at run time.  The view's numbers (shape, strides, offset, box) are compiled into one function of
  the dims, or fixed when the view has no symbols, so a changed dim re-prepares nothing.  Readers
  are a row-major prefix, a strided numpy view (zero and negative strides allowed, bounds-checked),
  a box copy into a zero array for a single masked view (padding, concatenation), or an index
  gather for stacked views.  A reader's result is consumed by its op at once and never kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ..shape import ShapeTracker
from ..symbolic import INDEX_VAR, compile_exprs

__all__ = ["Reader", "make_reader", "read_view", "strided_array", "view_symbols"]

Reader = Callable[[np.ndarray, Mapping[str, int]], np.ndarray]

_VARS: dict[ShapeTracker, tuple[str, ...]] = {}


def view_symbols(st: ShapeTracker) -> tuple[str, ...]:
    """The dims a view's numbers depend on (sorted)."""
    names = _VARS.get(st)
    if names is None:
        acc: set[str] = set()
        for v in st.views:
            for e in (*v.shape, *v.strides, v.offset):
                acc |= e.free_vars()
            for lo, hi in v.mask or ():
                acc |= lo.free_vars() | hi.free_vars()
        names = _VARS[st] = tuple(sorted(acc - {INDEX_VAR}))
    return names


def strided_array(buf: np.ndarray, offset: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """A read-only numpy view of ``buf``'s flat elements ``offset + sum(i_k * strides[k])``,
    bounds-checked (element strides, may be negative or zero)."""
    if 0 in shape:
        return np.zeros(shape, dtype=buf.dtype)
    lo = hi = offset
    for n, s in zip(shape, strides):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    if lo < 0 or hi >= buf.size:
        raise IndexError(f"strided read [{lo}, {hi}] outside a buffer of {buf.size} elements")
    if not buf.flags.c_contiguous:
        buf = np.ascontiguousarray(buf)
    item = buf.itemsize
    # the ndarray constructor is ~10x cheaper than np.lib.stride_tricks.as_strided per call
    out = np.ndarray(shape, dtype=buf.dtype, buffer=buf, offset=offset * item, strides=tuple(s * item for s in strides))
    out.flags.writeable = False
    return out


# ---------------------------------------------------------------------- evaluated per dims
_INDEX_CACHE: dict[tuple, tuple[np.ndarray, np.ndarray | None]] = {}
_INDEX_CACHE_MAX = 4096


def _view_indexes(st: ShapeTracker, env: Mapping[str, int], shape: tuple[int, ...]):
    key = (st, tuple(env[n] for n in view_symbols(st)))
    hit = _INDEX_CACHE.get(key)
    if hit is not None:
        return hit
    n = int(np.prod(shape, dtype=np.int64))
    z = np.arange(n, dtype=np.int64)
    genv = {**env, INDEX_VAR: z}
    idx = np.broadcast_to(np.asarray(st.index_expr().evaluate(genv), dtype=np.int64), (n,))
    valid_e = st.valid_expr()
    valid = None
    if not (valid_e.is_const and valid_e.value == 1):
        valid = np.broadcast_to(np.asarray(valid_e.evaluate(genv)).astype(bool), (n,))
        if valid.all():
            valid = None
    if len(_INDEX_CACHE) >= _INDEX_CACHE_MAX:
        _INDEX_CACHE.clear()
    _INDEX_CACHE[key] = (idx, valid)
    return idx, valid


def _gather(flat: np.ndarray, st: ShapeTracker, env: Mapping[str, int], shape: tuple[int, ...]) -> np.ndarray:
    idx, valid = _view_indexes(st, env, shape)
    if valid is None:
        if idx.size and (idx.min() < 0 or idx.max() >= flat.size):
            raise IndexError(f"view reads out of bounds: {st} over {flat.size} elements")
        return flat[idx].reshape(shape)
    out = np.zeros(idx.shape, dtype=flat.dtype)
    if flat.size:
        sel = idx[valid]
        if sel.size and (sel.min() < 0 or sel.max() >= flat.size):
            raise IndexError(f"view reads out of bounds: {st} over {flat.size} elements")
        out[valid] = flat[sel]
    return out.reshape(shape)


def read_view(buf: np.ndarray, st: ShapeTracker, env: Mapping[str, int]) -> np.ndarray:
    """The array a view of ``buf`` (a node's contiguous result) shows."""
    return make_reader(st)(buf, env)


# ---------------------------------------------------------------------- prepared readers
_READERS: dict[ShapeTracker, Reader] = {}


def make_reader(st: ShapeTracker) -> Reader:
    """A function ``(buf, dims) -> array`` giving what ``st`` shows of a node's flat buffer
    (memoised per view: readers hold no per-call state, so they are shared and thread-safe)."""
    r = _READERS.get(st)
    if r is None:
        if len(_READERS) > 65536:
            _READERS.clear()
        r = _READERS[st] = _build_reader(st)
    return r


def _build_reader(st: ShapeTracker) -> Reader:
    shape_of = compile_exprs(st.shape)
    if st.is_contiguous:  # row-major from offset 0: a prefix (all of it unless sliced)
        def contig(buf: np.ndarray, dims: Mapping[str, int]) -> np.ndarray:
            shape = shape_of(dims)
            if buf.shape == shape:
                return buf
            n = 1
            for d in shape:
                n *= d
            return buf.reshape(-1)[:n].reshape(shape)
        return contig
    if len(st.views) == 1:
        v = st.view
        nums = compile_exprs((*v.shape, *v.strides, v.offset))
        rank = len(v.shape)
        if v.mask is None:
            # the same buffer read with the same numbers gives the same view: arena slots and
            # resident weights are the same arrays on every call, so their views are kept (the
            # entry holds the buffer itself, so its identity cannot be reused while kept)
            recent: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

            def strided(buf: np.ndarray, dims: Mapping[str, int]) -> np.ndarray:
                x = nums(dims)
                key = (id(buf), x)
                hit = recent.get(key)
                if hit is not None and hit[0] is buf:
                    return hit[1]
                view = strided_array(buf.reshape(-1), x[-1], x[:rank], x[rank:2 * rank])
                if len(recent) >= 8:
                    recent.clear()
                recent[key] = (buf, view)
                return view
            return strided
        box = compile_exprs([e for lo_hi in v.mask for e in lo_hi])

        def masked(buf: np.ndarray, dims: Mapping[str, int]) -> np.ndarray:
            # zeros outside the box [lo, hi) of a strided view; only the box is read
            x, b = nums(dims), box(dims)
            shape, strides, offset = x[:rank], x[rank:2 * rank], x[-1]
            out = np.zeros(shape, dtype=buf.dtype)
            los = [min(n, max(0, b[2 * k])) for k, n in enumerate(shape)]
            his = [min(n, max(lo, b[2 * k + 1])) for k, (n, lo) in enumerate(zip(shape, los))]
            inner = tuple(h - lo for lo, h in zip(los, his))
            if 0 not in inner:
                start = offset + sum(lo * s for lo, s in zip(los, strides))
                box_of_out = tuple(slice(lo, h) for lo, h in zip(los, his))
                out[box_of_out] = strided_array(buf.reshape(-1), start, inner, strides)
            return out
        return masked

    def gathered(buf: np.ndarray, dims: Mapping[str, int]) -> np.ndarray:  # stacked views: an index gather
        return _gather(buf.reshape(-1), st, dims, shape_of(dims))
    return gathered
