"""Views: how an op reads its input without copying it.

A :class:`View` maps a multi-dimensional logical index ``(i0, .., in)`` to a flat physical offset
``offset + sum(i_k * strides[k])``; an optional ``mask`` of per-axis half-open ranges ``[lo, hi)``
marks where the view reads real data (outside it reads zero: that is how ``pad`` works).
Everything is a symbolic :class:`~lightspeed.symbolic.Expr`.

A :class:`ShapeTracker` is a stack of views.  The last view is what the consumer sees; each view
addresses the *logical flat index space* of the view below it, and the first addresses the
physical buffer.  Movement ops (permute, expand, slice, pad, flip, unfold) rewrite the last view;
a reshape that the last view cannot express with strides (e.g. merging permuted axes) pushes a
new contiguous view on top, so any sequence of movements stays copy-free.

``index_expr()`` / ``valid_expr()`` give the physical offset and the in-bounds predicate as
functions of the flat logical index ``z``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

from .symbolic import INDEX_VAR, Expr, ExprLike, as_expr, const, prod, smax, smin, sym

__all__ = ["View", "ShapeTracker", "contiguous_strides"]

Shape = tuple[Expr, ...]


@lru_cache(maxsize=8192)  # interned Exprs: a model asks for the same few shapes thousands of times
def contiguous_strides(shape: Shape) -> Shape:
    out: list[Expr] = []
    acc = const(1)
    for d in reversed(shape):
        out.append(acc if d != 1 else const(0))
        acc = acc * d
    return tuple(reversed(out))


@dataclass(frozen=True)
class View:
    shape: Shape
    strides: Shape
    offset: Expr = const(0)
    mask: tuple[tuple[Expr, Expr], ...] | None = None

    @staticmethod
    def contiguous(shape: Sequence[ExprLike]) -> View:
        shape = tuple(as_expr(d) for d in shape)
        return View(shape, contiguous_strides(shape))

    @cached_property
    def is_contiguous(self) -> bool:
        return (self.mask is None and self.offset == 0
                and all(s == c or d == 1 for s, c, d in
                        zip(self.strides, contiguous_strides(self.shape), self.shape)))

    def index_and_valid(self, idxs: Sequence[Expr]) -> tuple[Expr, Expr]:
        index = self.offset
        for i, st in zip(idxs, self.strides):
            index = index + i * st
        valid = const(1)
        if self.mask is not None:
            for i, (lo, hi), d in zip(idxs, self.mask, self.shape):
                if lo != 0:
                    valid = valid * i.ge(lo)
                if hi != d:
                    valid = valid * i.lt(hi)
        return index, valid


def unflatten_index(z: Expr, shape: Shape) -> list[Expr]:
    """Per-axis indexes of flat index z in a row-major shape."""
    if any(d == 0 for d in shape):
        # an empty index space: no index is ever read (and `% 0` would not be defined)
        return [const(0)] * len(shape)
    idxs: list[Expr] = []
    acc = const(1)
    for k in range(len(shape) - 1, -1, -1):
        d = shape[k]
        if d == 1:
            idxs.append(const(0))
            continue
        i = z // acc
        if k != 0:
            i = i % d
        idxs.append(i)
        acc = acc * d
    return idxs[::-1]


class ShapeTracker:
    """A stack of :class:`View`; immutable."""

    __slots__ = ("views", "__dict__")

    def __init__(self, views: tuple[View, ...]):
        self.views = views

    @staticmethod
    def contiguous(shape: Sequence[ExprLike]) -> ShapeTracker:
        return ShapeTracker((View.contiguous(shape),))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShapeTracker) and self.views == other.views

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:  # trackers key caches on hot paths: hash the views once
        return hash(self.views)

    def __repr__(self) -> str:
        return f"ShapeTracker({self.views})"

    # ------------------------------------------------------------------ properties
    @property
    def view(self) -> View:
        return self.views[-1]

    @property
    def shape(self) -> Shape:
        return self.views[-1].shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> Expr:
        return prod(self.shape)

    @property
    def is_contiguous(self) -> bool:
        """Row-major strides from offset 0 and no mask: reads a prefix of the buffer in order
        (the whole buffer unless the view was sliced down along its first axis)."""
        return len(self.views) == 1 and self.views[0].is_contiguous

    def describe(self) -> str:
        """Short human-readable form used by graph dumps."""
        if self.is_contiguous:
            return ""
        parts = []
        for v in self.views:
            s = f"shape={_fmt_shape(v.shape)} strides={_fmt_shape(v.strides)}"
            if v.offset != 0:
                s += f" offset={v.offset}"
            if v.mask is not None:
                s += " mask=" + ",".join(f"[{lo},{hi})" for lo, hi in v.mask)
            parts.append(s)
        return " | ".join(parts)

    # ------------------------------------------------------------------ index expressions
    @cached_property
    def _exprs(self) -> tuple[Expr, Expr]:
        z = sym(INDEX_VAR)
        index, valid = z, const(1)
        for v in reversed(self.views):
            idx, vv = v.index_and_valid(unflatten_index(index, v.shape))
            valid = valid * vv
            index = idx
        return index, valid

    def index_expr(self) -> Expr:
        """Physical flat offset read for logical flat index ``z``."""
        return self._exprs[0]

    def valid_expr(self) -> Expr:
        """1 where logical flat index ``z`` reads real data, 0 where it reads padding."""
        return self._exprs[1]

    # ------------------------------------------------------------------ movement ops
    def _replace_last(self, v: View) -> ShapeTracker:
        return ShapeTracker(self.views[:-1] + (v,))

    def _push_identity(self) -> ShapeTracker:
        return ShapeTracker(self.views + (View.contiguous(self.shape),))

    def permute(self, order: Sequence[int]) -> ShapeTracker:
        v = self.view
        if sorted(order) != list(range(len(v.shape))):
            raise ValueError(f"permute order {tuple(order)} is not a permutation of {len(v.shape)} axes")
        mask = None if v.mask is None else tuple(v.mask[i] for i in order)
        return self._replace_last(View(tuple(v.shape[i] for i in order),
                                       tuple(v.strides[i] for i in order), v.offset, mask))

    def expand(self, new_shape: Sequence[ExprLike]) -> ShapeTracker:
        """Broadcast size-1 axes to ``new_shape`` (same rank) with stride 0."""
        v = self.view
        new_shape = tuple(as_expr(d) for d in new_shape)
        if len(new_shape) != len(v.shape):
            raise ValueError(f"expand: rank mismatch {len(v.shape)} vs {len(new_shape)}")
        strides, mask = list(v.strides), None if v.mask is None else list(v.mask)
        for k, (old, new) in enumerate(zip(v.shape, new_shape)):
            if old == new:
                continue
            if old != 1:
                raise ValueError(f"expand: axis {k} has size {old}, only size-1 axes can expand to {new}")
            strides[k] = const(0)
            if mask is not None:
                lo, hi = mask[k]
                # a masked-out size-1 axis stays masked-out everywhere; a size-1 axis has
                # 0 <= lo <= hi <= 1, so scaling covers masks that are only symbolically 0/1
                mask[k] = (const(0), new) if (lo == 0 and hi == 1) else (lo * new, hi * new)
        return self._replace_last(View(new_shape, tuple(strides), v.offset,
                                       None if mask is None else tuple(mask)))

    def reshape(self, new_shape: Sequence[ExprLike]) -> ShapeTracker:
        new_shape = tuple(as_expr(d) for d in new_shape)
        v = self.view
        if prod(v.shape) != prod(new_shape):
            raise ValueError(f"reshape: cannot view shape {_fmt_shape(v.shape)} as {_fmt_shape(new_shape)} "
                             f"({prod(v.shape)} elements vs {prod(new_shape)})")
        if v.shape == new_shape:
            return self
        if v.is_contiguous:
            return self._replace_last(View(new_shape, contiguous_strides(new_shape), v.offset))
        if v.mask is None:
            strides = _reshape_strides(v.shape, v.strides, new_shape)
            if strides is not None:
                return self._replace_last(View(new_shape, strides, v.offset))
        return ShapeTracker(self.views + (View.contiguous(new_shape),))

    def slice(self, bounds: Sequence[tuple[ExprLike, ExprLike, int]]) -> ShapeTracker:
        """Per-axis (start, stop, step) with step >= 1 and 0 <= start <= stop; the axis keeps
        ceildiv(stop - start, step) elements, and the last one read must be inside the axis (stop may
        pass the size by less than a step, as hl slicing passes start + length * step)."""
        v = self.view
        if len(bounds) != len(v.shape):  # zip would silently drop the remaining axes
            raise ValueError(f"slice: {len(bounds)} bounds for a rank-{len(v.shape)} view")
        shape, strides, mask = [], [], []
        offset = v.offset
        for k, (start, stop, step) in enumerate(bounds):
            start, stop = as_expr(start), as_expr(stop)
            if step < 1:
                raise ValueError(f"slice step must be >= 1, got {step} (use flip for reversal)")
            n = (stop - start).ceildiv(step) if step != 1 else stop - start
            offset = offset + start * v.strides[k]
            shape.append(n)
            strides.append(v.strides[k] * step)
            if v.mask is not None:
                lo, hi = v.mask[k]
                # j valid iff lo <= start + j*step < hi
                nlo = smax(0, (lo - start).ceildiv(step)) if lo != 0 else const(0)
                nhi = smin(n, smax(0, (hi - start).ceildiv(step)))
                mask.append((smin(nlo, nhi), nhi))
        return self._replace_last(View(tuple(shape), tuple(strides), offset,
                                       None if v.mask is None else tuple(mask)))

    def pad(self, pads: Sequence[tuple[ExprLike, ExprLike]]) -> ShapeTracker:
        """Per-axis (before, after) zero padding, both >= 0."""
        v = self.view
        if len(pads) != len(v.shape):  # a short list would leave shape and strides of different ranks
            raise ValueError(f"pad: {len(pads)} (before, after) pairs for a rank-{len(v.shape)} view")
        old_mask = v.mask or tuple((const(0), d) for d in v.shape)
        shape, mask = [], []
        offset = v.offset
        for k, (before, after) in enumerate(pads):
            before, after = as_expr(before), as_expr(after)
            shape.append(v.shape[k] + before + after)
            offset = offset - before * v.strides[k]
            lo, hi = old_mask[k]
            mask.append((lo + before, hi + before))
        return self._replace_last(View(tuple(shape), v.strides, offset, tuple(mask)))

    def flip(self, axes: Sequence[int]) -> ShapeTracker:
        v = self.view
        nd = len(v.shape)
        # a repeated axis used to be flipped "twice" from the same original stride (a wrong view)
        if any(not -nd <= k < nd for k in axes) or len({k % nd for k in axes}) != len(axes):
            raise ValueError(f"flip axes {tuple(axes)} must be distinct axes of a rank-{nd} view")
        strides, offset = list(v.strides), v.offset
        mask = None if v.mask is None else list(v.mask)
        for k in axes:
            offset = offset + (v.shape[k] - 1) * v.strides[k]
            strides[k] = -v.strides[k]
            if mask is not None:
                lo, hi = mask[k]
                mask[k] = (v.shape[k] - hi, v.shape[k] - lo)
        return self._replace_last(View(v.shape, tuple(strides), offset, None if mask is None else tuple(mask)))

    def unfold(self, axis: int, size: int, step: int) -> ShapeTracker:
        """torch.Tensor.unfold: windows of ``size`` every ``step`` along ``axis``, as a new last axis."""
        st = self if self.view.mask is None else self._push_identity()
        v = st.view
        n = v.shape[axis]
        count = (n - size) // step + 1
        shape = v.shape[:axis] + (count,) + v.shape[axis + 1:] + (as_expr(size),)
        strides = v.strides[:axis] + (v.strides[axis] * step,) + v.strides[axis + 1:] + (v.strides[axis],)
        return st._replace_last(View(shape, strides, v.offset))


def _reshape_strides(old_shape: Shape, old_strides: Shape, new_shape: Shape) -> Shape | None:
    """Strides for ``new_shape`` over the same memory as a strided (unmasked) view, or None."""
    old = [(d, s) for d, s in zip(old_shape, old_strides) if d != 1]
    new_idx = [k for k, d in enumerate(new_shape) if d != 1]
    new_dims = [new_shape[k] for k in new_idx]
    out = [const(0)] * len(new_shape)
    i = j = 0
    while i < len(old) or j < len(new_dims):
        if i >= len(old) or j >= len(new_dims):
            return None
        # grow a group of old axes and new axes with equal products
        gi, gj = [i], [j]
        po, pn = old[i][0], new_dims[j]
        i += 1
        j += 1
        for _ in range(64):
            if po == pn:
                break
            # constants: grow the smaller side; symbolic: the side provably dividing the other
            fixed = po.is_const and pn.is_const
            if (po.value < pn.value) if fixed else _divides_expr(po, pn):
                if i >= len(old):
                    return None
                po, i = po * old[i][0], i + 1
                gi.append(i - 1)
            elif (fixed or _divides_expr(pn, po)) and j < len(new_dims):
                pn, j = pn * new_dims[j], j + 1
                gj.append(j - 1)
            else:
                return None
        else:
            return None
        # the old group must be mergeable: stride[a] == stride[a+1] * dim[a+1]
        for a, b in zip(gi, gi[1:]):
            if old[a][1] != old[b][1] * old[b][0]:
                return None
        acc = old[gi[-1]][1]
        for jj in reversed(gj):
            out[new_idx[jj]] = acc
            acc = acc * new_dims[jj]
    return tuple(out)


def _divides_expr(a: Expr, b: Expr) -> bool:
    """Symbolic 'a divides b' (exact polynomial division)."""
    from .symbolic import divides  # local: private helper
    return divides(a, b) is not None and a != b


def _fmt_shape(shape: Sequence[Expr]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
