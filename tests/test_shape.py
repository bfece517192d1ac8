"""Property-based and unit tests for ``lightspeed.shape`` (View / ShapeTracker).

The central property: a random sequence of movement ops applied to a :class:`ShapeTracker` over a
contiguous buffer reads exactly what numpy's own views read when the same ops are applied to the
buffer (``transpose``, ``broadcast_to``, ``reshape``, slicing, ``np.pad`` with zeros, ``np.flip``,
``sliding_window_view``).  The tracker is checked two ways after every op: by evaluating
``index_expr()`` / ``valid_expr()`` over ``z = arange(numel)`` (valid positions must address the
buffer in bounds; invalid ones read 0) and through the reference runtime's ``read_view``.

The buffer holds ``1..n`` so a zero can only come from padding.

The symbolic variant builds the tracker once over shapes with dim symbols (``s``, ``t``) and then
compares against numpy for several bindings; op parameters are drawn so that they are valid for
every binding.

Hypothesis runs derandomised (reproducible) with small shapes.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from numpy.lib.stride_tricks import sliding_window_view

from lightspeed.backends.numpy_views import read_view
from lightspeed.shape import ShapeTracker, View
from lightspeed.symbolic import INDEX_VAR, as_expr, const, prod, sym

MAX_NUMEL = 256

SETTINGS = settings(max_examples=300, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ====================================================================== helpers
def ev(x, env) -> int:
    return int(as_expr(x).evaluate(env))


def conc(shape, env) -> tuple[int, ...]:
    return tuple(ev(d, env) for d in shape)


def numel(shape, env) -> int:
    return int(np.prod(conc(shape, env), dtype=np.int64))


def apply_st(st: ShapeTracker, op) -> ShapeTracker:
    kind = op[0]
    if kind == "permute":
        return st.permute(op[1])
    if kind == "expand":
        return st.expand(op[1])
    if kind == "reshape":
        return st.reshape(op[1])
    if kind == "slice":
        return st.slice(op[1])
    if kind == "pad":
        return st.pad(op[1])
    if kind == "flip":
        return st.flip(op[1])
    if kind == "unfold":
        return st.unfold(*op[1:])
    raise AssertionError(kind)


def apply_np(arr: np.ndarray, op, env) -> np.ndarray:
    """The same op with numpy's own (strided) views."""
    kind = op[0]
    if kind == "permute":
        return np.transpose(arr, op[1])
    if kind == "expand":
        return np.broadcast_to(arr, conc(op[1], env))
    if kind == "reshape":
        return arr.reshape(conc(op[1], env))
    if kind == "slice":
        return arr[tuple(slice(ev(a, env), ev(b, env), c) for a, b, c in op[1])]
    if kind == "pad":
        return np.pad(arr, [(ev(a, env), ev(b, env)) for a, b in op[1]])
    if kind == "flip":
        return np.flip(arr, tuple(op[1]))
    if kind == "unfold":
        _, axis, size, step = op
        w = sliding_window_view(arr, size, axis=axis)
        return w[(slice(None),) * axis + (slice(None, None, step),)]
    raise AssertionError(kind)


def read_by_exprs(buf: np.ndarray, st: ShapeTracker, env) -> np.ndarray:
    shape = conc(st.shape, env)
    n = int(np.prod(shape, dtype=np.int64))
    z = np.arange(n, dtype=np.int64)
    genv = {**env, INDEX_VAR: z}
    idx = np.broadcast_to(np.asarray(st.index_expr().evaluate(genv), dtype=np.int64), (n,))
    valid = np.broadcast_to(np.asarray(st.valid_expr().evaluate(genv)), (n,))
    assert set(np.unique(valid)) <= {0, 1}, "valid_expr must be 0/1"
    valid = valid.astype(bool)
    sel = idx[valid]
    assert sel.size == 0 or (sel.min() >= 0 and sel.max() < buf.size), f"out-of-bounds read: {st}"
    out = np.zeros(n, dtype=buf.dtype)
    out[valid] = buf[sel]
    return out.reshape(shape)


def check(st: ShapeTracker, shape0, ops, env):
    """Tracker (after ``ops``) vs numpy, for one binding of the dim symbols."""
    buf = np.arange(1, numel(shape0, env) + 1, dtype=np.int64)
    want = buf.reshape(conc(shape0, env))
    for op in ops:
        want = apply_np(want, op, env)
    assert conc(st.shape, env) == want.shape, (ops, env)
    got = read_by_exprs(buf, st, env)
    np.testing.assert_array_equal(got, want, err_msg=f"index/valid exprs: ops={ops} env={env} st={st}")
    got = read_view(buf, st, env)
    np.testing.assert_array_equal(got, want, err_msg=f"read_view: ops={ops} env={env} st={st}")
    if st.is_contiguous:  # row-major from offset 0, no mask: exactly a prefix of the buffer
        np.testing.assert_array_equal(want.reshape(-1), buf[:want.size])


# ====================================================================== drawing random ops
def _valid_everywhere(shape, envs) -> bool:
    return all(0 < numel(shape, env) <= MAX_NUMEL for env in envs)


def _divisors(n: int) -> list[int]:
    return [f for f in range(2, n) if n % f == 0]


def draw_reshape(data, shape, envs):
    shape = list(shape)
    choices = ["merge", "split", "insert1"]
    if any(d == 1 for d in shape):
        choices.append("remove1")
    if all(d.is_const for d in shape):
        choices.append("random")
    how = data.draw(hs.sampled_from(choices))
    if how == "merge":
        if len(shape) < 2:
            return None
        k = data.draw(hs.integers(0, len(shape) - 2))
        n = k + data.draw(hs.integers(2, min(3, len(shape) - k)))
        return shape[:k] + [prod(shape[k:n])] + shape[n:]
    if how == "split":
        k = data.draw(hs.integers(0, len(shape) - 1))
        d = shape[k]
        if d.is_const:
            fs = _divisors(d.value)
            if not fs:
                return None
            f = data.draw(hs.sampled_from(fs))
            return shape[:k] + [const(f), const(d.value // f)] + shape[k + 1:]
        if d.kind == "mul":  # e.g. 3*s -> (3, s) or (s, 3); s*t -> (s, t)
            parts = list(d.args)
            cut = data.draw(hs.integers(1, len(parts) - 1))
            a, b = prod(parts[:cut]), prod(parts[cut:])
            if data.draw(hs.booleans()):
                a, b = b, a
            return shape[:k] + [a, b] + shape[k + 1:]
        return None
    if how == "insert1":
        if len(shape) >= 5:
            return None
        k = data.draw(hs.integers(0, len(shape)))
        return shape[:k] + [const(1)] + shape[k:]
    if how == "remove1":
        ones = [k for k, d in enumerate(shape) if d == 1]
        k = data.draw(hs.sampled_from(ones))
        return shape[:k] + shape[k + 1:]
    # random refactorisation of the (constant) element count
    n = int(np.prod([d.value for d in shape]))
    dims = []
    while n > 1 and len(dims) < 4:
        f = data.draw(hs.sampled_from([n] + _divisors(n)))
        dims.append(f)
        n //= f
    if n > 1:
        dims.append(n)
    dims = [const(d) for d in dims] or [const(1)]
    if data.draw(hs.booleans()):
        dims.insert(data.draw(hs.integers(0, len(dims))), const(1))
    return dims


def draw_op(data, shape, envs, syms):
    """A random movement op valid for every binding in ``envs`` (or None to skip)."""
    nd = len(shape)
    if nd == 0:  # a scalar view: only a reshape back to rank >= 1 applies
        return ("reshape", (const(1),) * data.draw(hs.integers(0, 2)))
    kind = data.draw(hs.sampled_from(["permute", "expand", "reshape", "reshape", "slice", "slice", "pad", "flip",
                                      "unfold"]))
    if kind == "permute":
        return ("permute", tuple(data.draw(hs.permutations(range(nd)))))
    if kind == "expand":
        ones = [k for k, d in enumerate(shape) if d == 1]
        if not ones:
            return None
        new = list(shape)
        for k in ones:
            if data.draw(hs.booleans()):
                new[k] = data.draw(hs.sampled_from([const(2), const(3)] + [sym(s) for s in syms]))
        return ("expand", tuple(new))
    if kind == "reshape":
        new = draw_reshape(data, shape, envs)
        return None if new is None else ("reshape", tuple(new))
    if kind == "slice":
        bounds = []
        for d in shape:
            if not data.draw(hs.booleans()):
                bounds.append((const(0), d, 1))
                continue
            start = const(data.draw(hs.integers(0, 2)))
            stop = data.draw(hs.sampled_from([d, d - 1, d - 2, start + 1, start + 2]))
            step = data.draw(hs.integers(1, 3))
            if not all(0 <= ev(start, e) < ev(stop, e) <= ev(d, e) for e in envs):
                return None
            bounds.append((start, stop, step))
        return ("slice", bounds)
    if kind == "pad":
        amounts = hs.one_of(hs.integers(0, 2).map(const), hs.sampled_from([sym(s) for s in syms] or [const(1)]))
        return ("pad", [(data.draw(amounts), data.draw(amounts)) if data.draw(hs.booleans()) else (const(0), const(0))
                        for _ in shape])
    if kind == "flip":  # distinct axes, some written negative
        axes = data.draw(hs.lists(hs.integers(0, nd - 1), unique=True, max_size=nd))
        return ("flip", [k - nd if data.draw(hs.booleans()) else k for k in axes])
    # unfold
    axis = data.draw(hs.integers(0, nd - 1))
    smallest = min(ev(shape[axis], e) for e in envs)
    if smallest < 1:
        return None
    size = data.draw(hs.integers(1, min(smallest, 4)))
    step = data.draw(hs.integers(1, 3))
    return ("unfold", axis, size, step)


def run_random_sequence(data, shape0, envs, syms, max_ops=8, prefix=()):
    st = ShapeTracker.contiguous(shape0)
    shape0 = st.shape
    ops = []
    for op in prefix:
        st, ops = apply_st(st, op), ops + [op]
    for env in envs:
        check(st, shape0, ops, env)
    for _ in range(data.draw(hs.integers(2, max_ops))):
        op = draw_op(data, st.shape, envs, syms)
        if op is None:
            continue
        new = apply_st(st, op)
        if not _valid_everywhere(new.shape, envs):
            continue
        st, ops = new, ops + [op]
        for env in envs:
            check(st, shape0, ops, env)
    return st, ops


# ====================================================================== properties
concrete_shapes = hs.lists(hs.integers(1, 5), min_size=1, max_size=4).filter(lambda s: int(np.prod(s)) <= 120)


@SETTINGS
@given(concrete_shapes, hs.data())
def test_random_movement_sequences_match_numpy(shape0, data):
    run_random_sequence(data, shape0, [{}], [])


@SETTINGS
@given(concrete_shapes.filter(lambda s: sum(d > 1 for d in s) >= 2), hs.data())
def test_random_sequences_over_stacked_views(shape0, data):
    """Start from views that cannot be expressed with one set of strides (a transposed merge, a
    padded reshape), so the random ops act on a stack of two or more views."""
    n = len(shape0)
    order = tuple(reversed(range(n)))
    merged = (int(np.prod(shape0)),)
    prefix = [("permute", order), ("reshape", merged)]
    if data.draw(hs.booleans()):
        prefix += [("pad", [(1, 2)]), ("reshape", (merged[0] + 3, 1))]
    if data.draw(hs.booleans()):  # a second push: split again, transpose, merge
        m = merged[0] + (3 if len(prefix) > 2 else 0)
        fs = _divisors(m)
        if fs:
            f = data.draw(hs.sampled_from(fs))
            prefix += [("reshape", (f, m // f)), ("permute", (1, 0)), ("reshape", (m,))]
    st, _ = run_random_sequence(data, shape0, [{}], [], max_ops=6, prefix=prefix)
    assert len(st.views) >= 2


SYMBOLIC_SHAPES = [("s",), ("s", 3), (2, "s"), ("s", "t"), (2, "s", 3), ("s", 1, "t"), ("s*2", 3), ("s", "s")]
BINDINGS = [{"s": 1, "t": 2}, {"s": 2, "t": 3}, {"s": 3, "t": 1}, {"s": 5, "t": 2}]


@SETTINGS
@given(hs.sampled_from(SYMBOLIC_SHAPES), hs.data())
def test_symbolic_movement_sequences_match_numpy(shape0, data):
    """One tracker over symbolic dims, checked against numpy under several bindings."""
    run_random_sequence(data, shape0, BINDINGS, ["s", "t"], max_ops=6)


@settings(max_examples=60, derandomize=True, deadline=None, database=None)
@given(hs.sampled_from(SYMBOLIC_SHAPES), hs.data())
def test_symbolic_tracker_substituted_equals_concrete_binding(shape0, data):
    """Substituting a binding into the symbolic index/valid expressions gives expressions that
    evaluate like the symbolic ones (the tracker's expressions are closed over its dims)."""
    st, ops = run_random_sequence(data, shape0, BINDINGS, ["s", "t"], max_ops=4)
    for env in BINDINGS:
        n = numel(st.shape, env)
        z = np.arange(n)
        for e in (st.index_expr(), st.valid_expr()):
            assert e.free_vars() <= {"s", "t", INDEX_VAR}
            sub = e.substitute(env)
            assert sub.free_vars() <= {INDEX_VAR}
            a = np.broadcast_to(np.asarray(sub.evaluate({INDEX_VAR: z})), (n,))
            b = np.broadcast_to(np.asarray(e.evaluate({**env, INDEX_VAR: z})), (n,))
            if e is st.index_expr():  # only valid positions matter for the index
                v = np.broadcast_to(np.asarray(st.valid_expr().evaluate({**env, INDEX_VAR: z})), (n,)).astype(bool)
                a, b = a[v], b[v]
            np.testing.assert_array_equal(a, b)


@settings(max_examples=200, derandomize=True, deadline=None, database=None)
@given(hs.sampled_from(SYMBOLIC_SHAPES + [(3,), (2, 3), (1, 4)]), hs.data())
def test_broadcast_of_padded_single_elements(shape0, data):
    """pad -> slice single elements (real data or padding, at constant or symbolic positions) ->
    expand those size-1 axes -> more ops: broadcasting a masked size-1 axis."""
    envs = BINDINGS
    st = ShapeTracker.contiguous(shape0)
    shape0 = st.shape
    amounts = hs.sampled_from([const(0), const(1), const(2), sym("s")])
    ops = [("pad", [(data.draw(amounts), data.draw(amounts)) for _ in shape0])]
    st = apply_st(st, ops[0])
    bounds = []
    for d in st.shape:
        if data.draw(hs.booleans()):
            bounds.append((const(0), d, 1))
            continue
        # one element, counted from the front or from the back
        c = data.draw(hs.integers(0, 2))
        start = const(c) if data.draw(hs.booleans()) else d - 1 - c
        if not all(0 <= ev(start, e) < ev(d, e) for e in envs):
            start = const(0)
        bounds.append((start, start + 1, 1))
    ops.append(("slice", bounds))
    st = apply_st(st, ops[-1])
    new = tuple(data.draw(hs.sampled_from([const(2), const(3), sym("t")])) if d == 1 else d for d in st.shape)
    ops.append(("expand", new))
    st = apply_st(st, ops[-1])
    for env in envs:
        check(st, shape0, ops, env)
    for _ in range(data.draw(hs.integers(0, 3))):
        op = draw_op(data, st.shape, envs, ["s", "t"])
        if op is None or not _valid_everywhere(apply_st(st, op).shape, envs):
            continue
        st, ops = apply_st(st, op), ops + [op]
        for env in envs:
            check(st, shape0, ops, env)


def test_regression_expand_of_symbolically_masked_size1_axis():
    """A size-1 axis sliced out of a padded symbolic axis has a mask like (0, min(s, 1)); expand
    used to treat any mask other than the literal (0, 1) as 'masked out' and read zeros."""
    st = ShapeTracker.contiguous(("s",)).pad([(1, 1)]).slice([(1, 2, 1)])
    e = st.expand((4,))
    for s in (1, 2, 3):
        buf = np.arange(1, s + 1)
        np.testing.assert_array_equal(read_view(buf, e, {"s": s}), [1, 1, 1, 1])
        check(e, (sym("s"),), [("pad", [(1, 1)]), ("slice", [(0 + 1, 2, 1)]), ("expand", (4,))], {"s": s})
    # the padding element itself stays zero when broadcast
    z = ShapeTracker.contiguous(("s",)).pad([(1, 1)]).slice([("s+1", "s+2", 1)]).expand((3,))
    for s in (1, 2, 3):
        np.testing.assert_array_equal(read_view(np.arange(1, s + 1), z, {"s": s}), [0, 0, 0])


# ====================================================================== unit tests
def test_contiguity_detection():
    st = ShapeTracker.contiguous((2, 3, 4))
    assert st.is_contiguous and len(st.views) == 1
    assert st.view.strides == (const(12), const(4), const(1))
    assert not st.permute((1, 0, 2)).is_contiguous
    assert st.permute((1, 0, 2)).permute((1, 0, 2)).is_contiguous
    assert st.slice([(0, 1, 1), (0, 3, 1), (0, 4, 1)]).is_contiguous  # a prefix
    assert not st.slice([(1, 2, 1), (0, 3, 1), (0, 4, 1)]).is_contiguous  # offset
    assert not st.slice([(0, 2, 1), (0, 3, 1), (0, 2, 1)]).is_contiguous
    assert not st.pad([(0, 0), (0, 0), (0, 1)]).is_contiguous
    assert not st.flip([2]).is_contiguous
    assert st.flip([2]).flip([2]).is_contiguous
    assert ShapeTracker.contiguous((1, 3)).is_contiguous
    assert not ShapeTracker.contiguous((1, 3)).expand((2, 3)).is_contiguous
    assert ShapeTracker.contiguous(("s", 3)).is_contiguous
    assert not ShapeTracker.contiguous(("s", 3)).permute((1, 0)).is_contiguous
    assert View.contiguous((2, 1, 3)).strides == (const(3), const(0), const(1))
    assert View.contiguous((2, 1, 3)).is_contiguous


def test_reshape_of_contiguous_stays_one_view():
    st = ShapeTracker.contiguous((2, 3, 4)).reshape((6, 4)).reshape((4, 6)).reshape((24,)).reshape((2, 12))
    assert len(st.views) == 1 and st.is_contiguous
    st = ShapeTracker.contiguous(("s", 3)).reshape(("s*3",)).reshape(("s", 3))
    assert len(st.views) == 1 and st.is_contiguous
    st = ShapeTracker.contiguous((4, 3))
    assert st.reshape((4, 3)) is st


def test_reshape_of_strided_views_without_new_view():
    # splitting / merging axes that stay adjacent in memory needs no new view
    st = ShapeTracker.contiguous((4, 6)).permute((1, 0)).reshape((2, 3, 4))
    assert len(st.views) == 1
    assert st.view.strides == (const(3), const(1), const(6))
    st = ShapeTracker.contiguous((4, 6)).slice([(0, 4, 2), (0, 6, 1)]).reshape((2, 2, 3))
    assert len(st.views) == 1
    st = ShapeTracker.contiguous(("s", 6)).permute((1, 0)).reshape((2, 3, "s"))
    assert len(st.views) == 1
    for s in (1, 2, 4):
        check(st, (sym("s"), const(6)), [("permute", (1, 0)), ("reshape", (2, 3, sym("s")))], {"s": s})
    # symbolic groups: (2, s) merge into 2*s and split back, under a transpose
    ops = [("permute", (2, 0, 1)), ("reshape", (4, sym("s") * 2)), ("reshape", (4, 2, sym("s")))]
    st = ShapeTracker.contiguous((2, "s", 4))
    for k, op in enumerate(ops):
        st = apply_st(st, op)
        assert len(st.views) == 1
        for s in (1, 2, 3):
            check(st, (const(2), sym("s"), const(4)), ops[:k + 1], {"s": s})


def test_reshape_of_transposed_view_pushes_a_view():
    st = ShapeTracker.contiguous((2, 3)).permute((1, 0))
    r = st.reshape((6,))
    assert len(r.views) == 2
    assert r.views[0] == st.view
    assert r.views[1] == View.contiguous((6,))
    check(r, (2, 3), [("permute", (1, 0)), ("reshape", (6,))], {})
    # a padded (masked) view also pushes a view on reshape
    p = ShapeTracker.contiguous((2, 3)).pad([(1, 0), (0, 1)]).reshape((12,))
    assert len(p.views) == 2
    check(p, (2, 3), [("pad", [(1, 0), (0, 1)]), ("reshape", (12,))], {})


def test_merging_broadcast_axes():
    st = ShapeTracker.contiguous((1, 1)).expand((2, 3)).reshape((6,))
    assert len(st.views) == 1 and st.view.strides == (const(0),)
    st = ShapeTracker.contiguous((2, 1)).expand((2, 3))
    assert st.view.strides == (const(1), const(0))
    assert len(st.reshape((2, 3, 1)).views) == 1
    assert len(st.reshape((1, 2, 1, 3)).views) == 1
    assert len(st.reshape((6,)).views) == 2  # (1, 0) strides cannot merge
    check(st.reshape((6,)), (2, 1), [("expand", (2, 3)), ("reshape", (6,))], {})
    st = ShapeTracker.contiguous((1, 1)).expand(("s", "t")).reshape(("s*t",))
    assert len(st.views) == 1 and st.view.strides == (const(0),)


def test_errors():
    st = ShapeTracker.contiguous((2, 3))
    with pytest.raises(ValueError):
        st.reshape((4,))
    with pytest.raises(ValueError):
        st.reshape((2, 2))
    with pytest.raises(ValueError):
        ShapeTracker.contiguous(("s", 3)).reshape(("s", 2))
    for bad in ((0, 0), (0,), (0, 2), (1, 2, 0), (-1, 0)):
        with pytest.raises(ValueError):
            st.permute(bad)
    with pytest.raises(ValueError):
        st.expand((4, 3))  # only size-1 axes expand
    with pytest.raises(ValueError):
        st.expand((2, 3, 1))
    with pytest.raises(ValueError):
        st.slice([(0, 2, 0), (0, 3, 1)])


def test_regression_rank_and_axis_validation():
    """slice/pad with fewer per-axis entries used to silently drop axes (pad even produced a view
    whose shape and strides had different ranks); flip with a repeated axis built a wrong view
    (both flips computed from the original stride) instead of raising like numpy/torch."""
    st = ShapeTracker.contiguous((2, 3))
    with pytest.raises(ValueError):
        st.slice([(0, 1, 1)])
    with pytest.raises(ValueError):
        st.slice([(0, 1, 1), (0, 3, 1), (0, 1, 1)])
    with pytest.raises(ValueError):
        st.pad([(1, 1)])
    with pytest.raises(ValueError):
        st.pad([(0, 0), (0, 0), (0, 0)])
    for bad in ([0, 0], [1, -1], [2], [-3], [0, 1, 0]):
        with pytest.raises(ValueError):
            st.flip(bad)
    # negative axes are fine and mean the same as numpy's
    for axes in ([-1], [-2], [0, -1]):
        check(st.flip(axes), (2, 3), [("flip", axes)], {})
    assert st.flip([-1]) == st.flip([1])
    assert st.flip([]) == st


def test_index_and_valid_expressions_are_readable():
    st = ShapeTracker.contiguous((2, 3)).permute((1, 0))
    z = sym(INDEX_VAR)
    assert st.index_expr() is (z // 2) + (z % 2) * 3
    assert st.valid_expr() is const(1)
    p = ShapeTracker.contiguous((4,)).pad([(1, 2)])
    assert p.index_expr() is z - 1
    assert p.valid_expr().evaluate({INDEX_VAR: np.arange(7)}).tolist() == [0, 1, 1, 1, 1, 0, 0]
    idx = ShapeTracker.contiguous((4, 5)).index_expr()
    assert idx.evaluate({INDEX_VAR: np.arange(20)}).tolist() == list(range(20))


def test_unfold_like_torch():
    torch = pytest.importorskip("torch")
    x = torch.arange(1, 2 * 9 * 3 + 1).reshape(2, 9, 3)
    for size, step in ((1, 1), (3, 2), (4, 4), (9, 1), (2, 5)):
        st = ShapeTracker.contiguous((2, 9, 3)).unfold(1, size, step)
        got = read_view(np.arange(1, 55), st, {})
        np.testing.assert_array_equal(got, x.unfold(1, size, step).numpy())
    # unfold of a padded view (pushes a view first)
    st = ShapeTracker.contiguous((2, 9, 3)).pad([(0, 0), (1, 1), (0, 0)]).unfold(1, 3, 2)
    want = torch.nn.functional.pad(x, (0, 0, 1, 1)).unfold(1, 3, 2).numpy()
    np.testing.assert_array_equal(read_view(np.arange(1, 55), st, {}), want)
