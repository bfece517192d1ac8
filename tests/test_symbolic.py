"""Property-based and unit tests for ``lightspeed.symbolic``.

The central property: every expression is built through smart constructors that canonicalise and
simplify, so we generate random expression *trees*, build them as :class:`Expr` and compare
``evaluate`` with a direct Python evaluation of the unsimplified tree.  Any unsound rewrite
(canonicalisation, ``//``/``%`` splitting, range-based elimination of ``//``, ``%``, min/max and
comparisons) shows up as a mismatch.

Assumptions (the module's documented contract), reflected in the generators:

* every variable is a non-negative integer;
* a symbol that may appear as (part of) a divisor is a *size* and is >= 1.  Size symbols are
  ``a``/``b`` (bound to 1..12); index-like symbols ``i``/``j`` (bound to 0..30, including 0) never
  appear in a divisor;
* divisors are non-zero constants (negative ones too: Python floor semantics), size symbols and
  expressions that are provably >= 1 (``a + k``, ``a*b``, ``k*a``, ``max(x, 1)``); ``ceildiv``
  divisors are >= 1.

All hypothesis tests are derandomised so the suite is reproducible.
"""

from __future__ import annotations

import operator
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lightspeed.symbolic import Expr, as_expr, const, gcd_const, is_expr_like, parse, prod, smax, smin, sym

SIZE_SYMS = ("a", "b")  # >= 1, may be used as divisors
IDX_SYMS = ("i", "j")  # >= 0, never divisors
ALL_SYMS = SIZE_SYMS + IDX_SYMS

SETTINGS = settings(max_examples=400, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FAST = settings(max_examples=150, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ====================================================================== random expression trees
# A tree is a nested tuple: ("c", int) | ("s", name) | (op, child, ...).

_CMP = ("lt", "le", "gt", "ge", "eq", "ne")

leaves = st.one_of(
    st.integers(-8, 8).map(lambda v: ("c", v)),
    st.sampled_from(ALL_SYMS).map(lambda n: ("s", n)),
    # bounded atoms exercise the range analysis (finite and negative bounds)
    st.tuples(st.sampled_from(ALL_SYMS), st.integers(2, 5), st.integers(-8, 8)).map(
        lambda t: ("add", ("mod", ("s", t[0]), ("c", t[1])), ("c", t[2]))),
)

size_sym = st.sampled_from(SIZE_SYMS).map(lambda n: ("s", n))

# divisors that need no sub-tree; positive ones are valid for ceildiv too
simple_pos_divisors = st.one_of(
    st.integers(1, 6).map(lambda v: ("c", v)),
    size_sym,
    st.tuples(size_sym, st.integers(0, 3)).map(lambda t: ("add", t[0], ("c", t[1]))),
    st.tuples(size_sym, size_sym).map(lambda t: ("mul", t[0], t[1])),
    st.tuples(st.integers(2, 4), size_sym).map(lambda t: ("mul", ("c", t[0]), t[1])),
)
simple_divisors = st.one_of(simple_pos_divisors, st.integers(-6, -1).map(lambda v: ("c", v)))


# pairs of divisors where one is a multiple of the other (d, k*d) in either order: nested // and %
related_divisors = st.tuples(simple_pos_divisors, st.integers(1, 3), st.booleans()).map(
    lambda t: (t[0], ("mul", ("c", t[1]), t[0])) if t[2] else (("mul", ("c", t[1]), t[0]), t[0]))


def _extend(children):
    pos_div = st.one_of(simple_pos_divisors, children.map(lambda c: ("max", c, ("c", 1))))
    div = st.one_of(simple_divisors, children.map(lambda c: ("max", c, ("c", 1))))
    nested = st.tuples(st.sampled_from(("fdiv", "mod")), st.sampled_from(("fdiv", "mod")), children,
                       related_divisors).map(lambda t: (t[0], (t[1], t[2], t[3][0]), t[3][1]))
    return st.one_of(
        nested,
        st.tuples(st.sampled_from(("add", "sub", "mul")), children, children),
        st.tuples(st.just("neg"), children),
        st.tuples(st.sampled_from(("fdiv", "mod")), children, div),
        st.tuples(st.just("cdiv"), children, pos_div),
        st.tuples(st.sampled_from(("min", "max")), children, children),
        st.tuples(st.sampled_from(("min", "max")), children, children, children),
        st.tuples(st.sampled_from(_CMP), children, children),
    )


trees = st.recursive(leaves, _extend, max_leaves=10)
small_trees = st.recursive(leaves, _extend, max_leaves=4)

# environments: size symbols >= 1, index symbols >= 0 (0 included on purpose)
envs = st.fixed_dictionaries({**{n: st.one_of(st.integers(1, 12), st.integers(13, 5000)) for n in SIZE_SYMS},
                              **{n: st.one_of(st.integers(0, 30), st.integers(31, 5000)) for n in IDX_SYMS}})


def build(t) -> Expr:
    """The tree as an Expr, built through the public operators."""
    k = t[0]
    if k == "c":
        return const(t[1])
    if k == "s":
        return sym(t[1])
    xs = [build(c) for c in t[1:]]
    if k == "add":
        return xs[0] + xs[1]
    if k == "sub":
        return xs[0] - xs[1]
    if k == "mul":
        return xs[0] * xs[1]
    if k == "neg":
        return -xs[0]
    if k == "fdiv":
        return xs[0] // xs[1]
    if k == "mod":
        return xs[0] % xs[1]
    if k == "cdiv":
        return xs[0].ceildiv(xs[1])
    if k == "min":
        return smin(*xs)
    if k == "max":
        return smax(*xs)
    return getattr(xs[0], k)(xs[1])  # lt/le/gt/ge/eq/ne


_PY_CMP = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
           "eq": operator.eq, "ne": operator.ne}


def py_eval(t, env) -> int:
    """Direct Python evaluation of the (unsimplified) tree."""
    k = t[0]
    if k == "c":
        return t[1]
    if k == "s":
        return env[t[1]]
    xs = [py_eval(c, env) for c in t[1:]]
    if k == "add":
        return xs[0] + xs[1]
    if k == "sub":
        return xs[0] - xs[1]
    if k == "mul":
        return xs[0] * xs[1]
    if k == "neg":
        return -xs[0]
    if k == "fdiv":
        return xs[0] // xs[1]
    if k == "mod":
        return xs[0] % xs[1]
    if k == "cdiv":
        return (xs[0] + xs[1] - 1) // xs[1]
    if k == "min":
        return min(xs)
    if k == "max":
        return max(xs)
    return int(_PY_CMP[k](xs[0], xs[1]))


def has_lt(e: Expr) -> bool:
    if e.kind == "lt":
        return True
    return any(has_lt(a) for a in e.args if isinstance(a, Expr))


# ====================================================================== soundness properties
@SETTINGS
@given(trees, st.lists(envs, min_size=1, max_size=4))
def test_evaluate_matches_direct_python(t, env_list):
    e = build(t)
    for env in env_list:
        want = py_eval(t, env)
        got = e.evaluate(env)
        assert isinstance(got, int)
        assert got == want, f"{t} -> {e} at {env}: {got} != {want}"


_PY_HELPERS = {"_min": min, "_max": max, "_lt": lambda a, b: int(a < b)}


@FAST
@given(trees, st.lists(envs, min_size=1, max_size=3))
def test_to_python_source(t, env_list):
    e = build(t)
    src = e.to_python()
    for env in env_list:
        assert eval(src, {**_PY_HELPERS, "env": env}) == py_eval(t, env)


@SETTINGS
@given(trees, st.lists(envs, min_size=1, max_size=4))
def test_bounds_are_sound(t, env_list):
    e = build(t)
    lo, hi = e.bounds()
    assert lo is None or hi is None or lo <= hi
    for env in env_list:
        v = py_eval(t, env)
        assert lo is None or lo <= v, f"{e}: bounds {(lo, hi)} but value {v} at {env}"
        assert hi is None or v <= hi, f"{e}: bounds {(lo, hi)} but value {v} at {env}"


def _all_divisors(children):
    return st.one_of(simple_divisors, children.map(lambda c: ("max", c, ("c", 1))))


@SETTINGS
@given(small_trees, small_trees, st.data())
def test_division_and_comparison_range_analysis(tx, ty, data):
    """Targeted: small operands under //, %, ceildiv, min/max and comparisons, where the range
    analysis decides most simplifications; checks values and bounds."""
    d = data.draw(_all_divisors(small_trees))
    pd = data.draw(st.one_of(simple_pos_divisors, small_trees.map(lambda c: ("max", c, ("c", 1)))))
    cases = [("fdiv", tx, d), ("mod", tx, d), ("cdiv", tx, pd), ("min", tx, ty), ("max", tx, ty),
             ("lt", tx, ty), ("ge", tx, ty), ("eq", tx, ty),
             ("max", ("fdiv", tx, d), ty), ("min", ("mod", tx, d), ty), ("lt", ("fdiv", tx, pd), ty)]
    env_list = data.draw(st.lists(envs, min_size=2, max_size=6))
    for t in cases:
        e = build(t)
        lo, hi = e.bounds()
        for env in env_list:
            v = py_eval(t, env)
            assert e.evaluate(env) == v, (t, e, env)
            assert (lo is None or lo <= v) and (hi is None or v <= hi), (t, e, (lo, hi), env, v)


@SETTINGS
@given(trees, st.integers(0, 2**32 - 1))
def test_vectorised_evaluation_matches_scalar(t, seed):
    e = build(t)
    rng = np.random.default_rng(seed)
    n = 16
    env = {**{s: rng.integers(1, 13, n) for s in SIZE_SYMS}, **{s: rng.integers(0, 31, n) for s in IDX_SYMS}}
    got = np.broadcast_to(np.asarray(e.evaluate(env)), (n,))
    for k in range(n):
        scalar_env = {s: int(v[k]) for s, v in env.items()}
        assert got[k] == py_eval(t, scalar_env) == e.evaluate(scalar_env)
    # a single array variable mixed with plain ints broadcasts too
    mixed = {**{s: int(v[0]) for s, v in env.items()}, "i": env["i"]}
    got = np.broadcast_to(np.asarray(e.evaluate(mixed)), (n,))
    for k in range(n):
        assert got[k] == py_eval(t, {**mixed, "i": int(env["i"][k])})


@SETTINGS
@given(trees, trees, trees)
def test_ring_laws_give_identical_objects(tx, ty, tw):
    x, y, w = build(tx), build(ty), build(tw)
    assert x + y is y + x
    assert x * y is y * x
    assert (x + y) + w is x + (y + w)
    assert (x * y) * w is x * (y * w)
    assert x * (y + w) is x * y + x * w
    assert (x + y) - y is x
    assert x - x is const(0)
    assert x + 0 is x
    assert x * 1 is x
    assert x * 0 is const(0)
    assert (-x).__neg__() is x
    assert smin(x, y) is smin(y, x)
    assert smax(x, y, w) is smax(w, smax(y, x))
    assert x.eq(y) is y.eq(x)
    assert x.ne(y) is y.ne(x)
    assert x.lt(y) is y.gt(x)
    assert x.le(y) is y.ge(x)


@SETTINGS
@given(trees)
def test_canonical_forms_are_fixed_points(t):
    """Rebuilding an expression from its own (canonical) parts gives the same object."""
    e = build(t)
    assert build(t) is e  # hash-consing
    assert pickle.loads(pickle.dumps(e)) is e
    assert e.substitute({}) is e
    assert e.substitute({"unused": 3}) is e
    assert e.substitute({n: sym(n) for n in ALL_SYMS}) is e
    if not has_lt(e):  # the printer writes Python syntax that parse() reads back (comparisons aside)
        assert as_expr(repr(e)) is e, repr(e)


@SETTINGS
@given(trees, st.integers(0, 2**32 - 1))
def test_free_vars(t, seed):
    e = build(t)
    assert e.free_vars() <= set(ALL_SYMS)
    # variables outside free_vars do not influence the value
    rng = np.random.default_rng(seed)
    env = {s: int(rng.integers(1, 13)) for s in ALL_SYMS}
    base = e.evaluate(env)
    for s in set(ALL_SYMS) - e.free_vars():
        assert e.evaluate({**env, s: env[s] + 1}) == base
    if not e.free_vars():
        assert e.is_const and e.evaluate() == e.value == int(e)


# substitutions that respect the assumptions: sizes stay >= 1, indexes stay >= 0
size_subst = st.one_of(
    st.integers(1, 9).map(const),
    st.tuples(st.sampled_from(SIZE_SYMS), st.integers(0, 3)).map(lambda t: sym(t[0]) + t[1]),
    st.tuples(st.sampled_from(SIZE_SYMS), st.sampled_from(SIZE_SYMS)).map(lambda t: sym(t[0]) * sym(t[1])),
    st.sampled_from(SIZE_SYMS).map(lambda n: sym(n) * 3 + 2),
)
idx_subst = st.one_of(
    st.integers(0, 9).map(const),
    st.tuples(st.sampled_from(ALL_SYMS), st.integers(0, 4)).map(lambda t: sym(t[0]) * 2 + t[1]),
    st.tuples(st.sampled_from(IDX_SYMS), st.sampled_from(SIZE_SYMS)).map(lambda t: sym(t[0]) % sym(t[1])),
    st.tuples(st.sampled_from(IDX_SYMS), st.integers(1, 5)).map(lambda t: sym(t[0]) // t[1]),
    trees.map(lambda t: build(t) * build(t)),  # a square is >= 0
)


@SETTINGS
@given(trees, st.dictionaries(st.sampled_from(SIZE_SYMS), size_subst),
       st.dictionaries(st.sampled_from(IDX_SYMS), idx_subst), st.lists(envs, min_size=1, max_size=3))
def test_substitute_then_evaluate(t, sub_sizes, sub_idx, env_list):
    e = build(t)
    mapping = {**sub_sizes, **sub_idx}
    s = e.substitute(mapping)
    for env in env_list:
        ext = dict(env)
        for name, val in mapping.items():
            ext[name] = val.evaluate(env)
        assert s.evaluate(env) == e.evaluate(ext) == py_eval(t, ext), (e, mapping, env)


@FAST
@given(trees, st.integers(1, 7), st.lists(envs, min_size=1, max_size=3))
def test_quotient_remainder_identity(t, k, env_list):
    """x == (x // k) * k + x % k, and the canonical forms agree on it."""
    x = build(t)
    recombined = (x // k) * k + x % k
    for env in env_list:
        assert recombined.evaluate(env) == x.evaluate(env) == py_eval(t, env)
    # (k*x + r) // k == x + r // k and (k*x + r) % k == r % k for a constant k
    for r in range(-k, 2 * k):
        assert (x * k + r) // k is x + r // k
        assert (x * k + r) % k is const(r % k)


@FAST
@given(trees, st.sampled_from(SIZE_SYMS), st.integers(0, 5))
def test_symbolic_quotient_rule(t, d, r):
    """(d*q + r) // d == q + r // d for a size symbol d; exact multiples lose their remainder."""
    q, dv = build(t), sym(d)
    assert (dv * q) // dv is q
    assert (dv * q) % dv is const(0)
    assert (dv * q + r) // dv is q + const(r) // dv
    assert (dv * q + r) % dv is const(r) % dv


# ====================================================================== canonical forms (units)
def test_commutativity_associativity_distribution():
    a, b, c = sym("a"), sym("b"), sym("c")
    assert (a + b) * c is a * c + c * b
    assert a + b + c is c + (b + a)
    assert a * b * c is c * (b * a)
    assert (a + 1) * (a - 1) is a * a - 1
    assert (a + b) * (a + b) is a * a + 2 * a * b + b * b
    assert 2 * (a + 3) is 2 * a + 6
    assert a * 3 - a * 3 is const(0)


def test_constant_folding():
    assert const(2) + 3 is const(5)
    assert const(7) * const(6) is const(42)
    assert const(-7) // 2 is const(-4)
    assert const(-7) % 3 is const(2)
    assert const(7) // -2 is const(-4)
    assert const(7) % -3 is const(-2)
    assert smin(3, 1, 2) is const(1)
    assert smax(3, 1, 2) is const(3)
    assert const(3).lt(4) is const(1) and const(4).lt(4) is const(0)
    assert const(5).eq(5) is const(1) and const(5).ne(5) is const(0)
    assert (sym("a") + 2 - sym("a")).value == 2


def test_simplifications():
    s, t, z = sym("s"), sym("t"), sym("z")
    x = sym("x")
    assert x - x == 0
    assert (s * 4 + 3) // 4 == s
    assert (s * 4 + 3) % 4 == 3
    assert (s * 4 + 3) // 4 is s
    assert (s * 4 + 5) // 4 is s + 1
    assert (s * 8 + t * 4 + 3) // 4 is s * 2 + t
    assert z % 4 % 2 is z % 2
    assert z // 2 // 3 is z // 6
    assert (z % 4) // 4 is const(0)
    assert (z % 4) % 4 is z % 4
    assert z // 1 is z and z % 1 is const(0)
    assert s // s is const(1) and s % s is const(0)
    assert (z * s + t) // s is z + t // s
    assert (z * s) // s is z
    assert (z * s * t) % (s * t) is const(0)
    assert smin(s, s + 1) is s
    assert smax(s, s + 1) is s + 1
    assert smin(s, 0) is const(0)  # s >= 0
    assert smax(z % 4, 3) is const(3)
    assert s.lt(s + 1) is const(1)
    assert s.ge(0) is const(1)
    assert (z % 4).lt(4) is const(1)
    assert s.lt(t) is (s + 2).lt(t + 2)
    assert str((s * 4 + 3) // 4) == "s"


def test_hash_consing():
    a1 = sym("a") * 3 + sym("b") // 2
    a2 = sym("b") // 2 + 3 * sym("a")
    assert a1 is a2
    assert hash(a1) == hash(a2)
    assert sym("a") is sym("a") and const(5) is const(5)
    assert len({a1, a2, sym("a") * 3 + sym("b") // 2}) == 1
    assert const(5) == 5 and sym("a") != 5 and const(5) != 6


def test_ceildiv():
    s = sym("s")
    for n in range(0, 40):
        for d in range(1, 7):
            assert const(n).ceildiv(d) == -(-n // d)
            assert s.ceildiv(d).evaluate({"s": n}) == -(-n // d)
            if n:
                assert const(d).ceildiv(s).evaluate({"s": n}) == -(-d // n)
    assert (s * 4).ceildiv(4) is s
    assert (s * 4 + 1).ceildiv(4) is s + 1


def test_parse():
    s, t = sym("s"), sym("t")
    assert as_expr("s") is s
    assert as_expr("s*2+1") is s * 2 + 1
    assert parse("(s + 3) // 4 - t % 2") is (s + 3) // 4 - t % 2
    assert parse("-s + 2*t") is 2 * t - s
    assert parse("min(s, t, 4)") is smin(s, t, 4)
    assert parse("max(s, 1) * 3") is smax(s, 1) * 3
    assert parse("7") is const(7) and parse("-7") is const(-7)
    assert as_expr(np.int64(3)) is const(3)
    for bad in ("s +", "s / 2", "s ** 2", "f(s)", "s < t", "True", "1.5", "'x'", "s.t", "min()"):
        with pytest.raises(ValueError):
            parse(bad)


def test_pickle_round_trip():
    s, z = sym("s"), sym("z")
    exprs = [const(3), s, (z // 3) % s + smin(s, 4) * z - s.lt(z), smax(z - s, 0) // (s + 1), z % -3]
    for e in exprs:
        assert pickle.loads(pickle.dumps(e)) is e
    assert pickle.loads(pickle.dumps(exprs)) == exprs


def test_repr():
    s, t = sym("s"), sym("t")
    assert repr(s * 2 + 1) == "2*s + 1"
    assert repr(s - t) == "s - t"
    assert repr((s + 1) // t) == "(s + 1) // t"
    assert repr(s.lt(t)) == "(s < t)"
    for e in (s * -2 + t, -(s // t) + 3, (s % 3) * t, smin(s, t - 1) // 2, (s * t) % (t + 1)):
        assert as_expr(repr(e)) is e


def test_helpers():
    s, t = sym("s"), sym("t")
    assert prod([]) is const(1)
    assert prod([2, "s", t, 3]) is 6 * s * t
    assert gcd_const(const(0)) == 0 and gcd_const(const(-6)) == 6
    assert gcd_const(4 * s + 6 * t) == 2
    assert gcd_const(4 * s + 6 * t + 3) == 1
    assert gcd_const(s) == 1
    assert is_expr_like(3) and is_expr_like("s") and is_expr_like(s) and is_expr_like(np.int32(2))
    assert not is_expr_like(True) and not is_expr_like(2.0) and not is_expr_like(None)
    assert (s + t).free_vars() == {"s", "t"} and const(3).free_vars() == frozenset()
    assert s.kind == "var" and (s + 1).kind == "add" and s.lt(t).kind == "lt"
    assert s.name == "s" and const(4).value == 4 and int(const(4)) == 4 and [0, 1, 2][const(2)] == 2


# ====================================================================== no blow-up on big expressions
# CPU time of this process (robust against other processes loading the machine); the bounds are
# generous: the point is catching exponential/quadratic blow-ups, not benchmarking.


def test_big_polynomial_cancels_and_evaluates():
    # (speed is a benchmark's business, not a test's: this checks the 10k-term canonical sum)
    xs = [sym(f"x{k}") for k in range(100)]
    ys = [sym(f"y{k}") for k in range(100)]
    sx = sum(xs[1:], xs[0])
    sy = sum(ys[1:], ys[0])
    p = sx * sy  # 10_000 distinct monomials in one canonical sum
    assert len(p.args) == 10_000
    assert p - sy * sx is const(0)
    env = {**{f"x{k}": k for k in range(100)}, **{f"y{k}": 1 for k in range(100)}}
    assert p.evaluate(env) == sum(range(100)) * 100  # used to hit a RecursionError (one flat 10k-term sum)


def test_deep_layered_construction_stays_small():
    """30 conv/pool-like layers of shape arithmetic, plus flat-index decomposition: linear size."""
    h = sym("h")
    for layer in range(30):
        k, s, p = 3, 1 + layer % 2, 1
        h = (h + 2 * p - k) // s + 1
        h = smax(h, 1)
    z = sym("z")
    idx = const(0)
    acc = const(1)
    for d in [h, sym("c"), 3, sym("w"), 2] * 6:
        idx = idx + (z // acc) % d * acc
        acc = acc * d
    assert len(repr(h)) < 10_000
    env = {"h": 4096, "c": 3, "w": 5, "z": 123456}
    ref_h = 4096
    for layer in range(30):
        ref_h = max((ref_h + 2 - 3) // (1 + layer % 2) + 1, 1)
    assert h.evaluate(env) == ref_h
    idx.evaluate(env)


def test_repeated_substitution():
    e = sym("s")
    for _ in range(200):
        e = e.substitute({"s": sym("s") * 2 + 1}) if e.free_vars() else e
    assert e.evaluate({"s": 0}) == 2**200 - 1


# ====================================================================== errors
def test_errors():
    s = sym("s")
    with pytest.raises(ZeroDivisionError):
        s // 0
    with pytest.raises(ZeroDivisionError):
        s % 0
    with pytest.raises(ZeroDivisionError):
        const(3) // const(0)
    with pytest.raises(ZeroDivisionError):
        s.ceildiv(0)
    with pytest.raises(ZeroDivisionError):
        parse("s // (2 - 2)")
    for bad in (1.5, True, None, 2.0, [1], "1.5"):
        with pytest.raises((TypeError, ValueError)):
            as_expr(bad)
    for bad in (1.5, True, "3", None):
        with pytest.raises(TypeError):
            const(bad)
    with pytest.raises(TypeError):
        s + 1.5
    with pytest.raises(TypeError):
        s * None
    for bad in ("", "1x", "a b", "x-y", 3, None):
        with pytest.raises(ValueError):
            sym(bad)
    with pytest.raises(TypeError):
        bool(s)
    with pytest.raises(TypeError):
        if s.lt(3):
            pass
    with pytest.raises(ValueError):
        _ = s.value
    with pytest.raises(ValueError):
        int(s + 1)
    with pytest.raises(ValueError):
        _ = (s + 1).name
    with pytest.raises(ValueError):
        smin()
    with pytest.raises(KeyError, match="'s'"):
        (s + 1).evaluate({})
    with pytest.raises(TypeError):
        Expr()


def test_regression_floordiv_bounds_negative_numerator():
    """A negative numerator over an unbounded positive divisor tends to -1, not to numerator//1.

    Bounds used to claim ``(t % 3 - 5) // (s + 1) <= -3``, which made ``smax(.., -2)`` fold to -2
    although the value is -1 for large s.
    """
    s, t = sym("s"), sym("t")
    x = (t % 3 - 5) // (s + 1)
    lo, hi = x.bounds()
    assert hi is not None and hi >= -1 and (lo is None or lo <= -5)
    m = smax(x, -2)
    for sv in (0, 1, 3, 100):
        for tv in range(3):
            v = (tv % 3 - 5) // (sv + 1)
            assert x.evaluate({"s": sv, "t": tv}) == v
            assert m.evaluate({"s": sv, "t": tv}) == max(v, -2)
            assert x.lt(-2).evaluate({"s": sv, "t": tv}) == int(v < -2)


def test_regression_deep_and_wide_expressions():
    """evaluate() used to compile one nested Python expression: 40 layers of conv/pool shape
    arithmetic raised SyntaxError (too many nested parentheses), 100 layers a RecursionError while
    printing the sort key, and a 4000-term sum a RecursionError in the compiler."""
    h, ref = sym("h"), 10**60
    for _ in range(150):
        h = smax((h + 2 - 3) // 2 + 1, 1)
        h = (h + 2 * 1 - 3) // 1 + 1
        h = (h - 2) // 2 + 1
        ref = max((ref + 2 - 3) // 2 + 1, 1)
        ref = (ref + 2 * 1 - 3) // 1 + 1
        ref = (ref - 2) // 2 + 1
    assert h.evaluate({"h": 10**60}) == ref
    assert np.array_equal(h.evaluate({"h": np.arange(5000, 5010)}), [h.evaluate({"h": v}) for v in range(5000, 5010)])
    # (the wide case is test_big_polynomial_cancels_and_evaluates)


def test_regression_minmax_of_provably_equal_operands():
    """Two distinct operands that range analysis proves equal dominate each other; min/max used to
    drop both and build an empty max() that failed to evaluate."""
    a = sym("a")
    x = const(-1) // (a + 1)  # always -1 for a >= 0, bounds (-1, -1), but not folded
    assert x.bounds() == (-1, -1)
    for e in (smax(x, -1), smin(x, -1), smax(-1, x), smin(x, const(-1), x)):
        assert e.evaluate({"a": 3}) == -1
    assert smax(x, -1, a).evaluate({"a": 3}) == 3
    assert smin(x, -1, a - 5).evaluate({"a": 9}) == -1
    m = smin(x, -1, a - 5)
    assert pickle.loads(pickle.dumps(m)) is m


def test_with_args_rebuilds_an_operation_over_new_operands():
    a, b = sym("a"), sym("b")
    e = a // 4 + b
    # the same operation over other operands, re-canonicalised
    assert (a // 4).with_args([b, const(2)]) == b // 2
    assert (a * 3).with_args([const(2), const(5)]) == const(10)
    assert e.with_args([const(0), b]) == b
    # a variable or a constant is itself
    assert a.with_args([]) is a and const(7).with_args([]) == const(7)
