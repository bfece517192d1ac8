"""Symbolic integer expressions for dims, strides and index arithmetic.

An :class:`Expr` is an immutable, hash-consed tree.  Every constructor goes through a smart
constructor that canonicalises (sums of products with integer coefficients, sorted operands,
constants folded, floor-div/mod pulled apart where the algebra allows), so two expressions that
are equal by those rules are the *same object* and compare equal in O(1).

Variables are non-negative integers: dim symbols (``"s"``, ``"batch"``) are sizes, and the index
variable ``z`` (``Expr.index_var``) is an element index.  Range analysis uses that assumption
(and that a dim symbol used as a divisor is at least 1) to drop provably redundant ``//`` and ``%``.

Semantics follow Python integers: ``//`` floors, ``%`` has the divisor's sign, comparisons yield
0 or 1.  ``evaluate`` works on ints and, vectorised, on numpy integer arrays.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Union

import numpy as np

from .errors import GraphError, OperandError

__all__ = ["Expr", "ExprLike", "sym", "const", "as_expr", "smin", "smax", "INDEX_VAR", "compile_exprs"]

ExprLike = Union["Expr", int, str]

INDEX_VAR = "z"

# op codes (ordering used in canonical sorting)
_CONST, _VAR, _ADD, _MUL, _FLOORDIV, _MOD, _MIN, _MAX, _LT = range(9)
_OPNAMES = {_CONST: "const", _VAR: "var", _ADD: "add", _MUL: "mul", _FLOORDIV: "floordiv",
            _MOD: "mod", _MIN: "min", _MAX: "max", _LT: "lt"}

_INTERN: dict[tuple, Expr] = {}


class Expr:
    """A canonical symbolic integer expression (see module docstring)."""

    __slots__ = ("op", "args", "_hash", "_key", "_range", "_fn", "_vars", "__weakref__")

    op: int
    args: tuple

    def __new__(cls, *_a, **_k):  # pragma: no cover - construction only via _make
        raise TypeError("use lightspeed.sym / lightspeed.const or arithmetic to build expressions")

    # ------------------------------------------------------------------ construction
    @staticmethod
    def _make(op: int, args: tuple) -> Expr:
        key = (op, args)
        e = _INTERN.get(key)
        if e is None:
            e = object.__new__(Expr)
            e.op, e.args = op, args
            e._hash = hash(key)
            e._key = None
            e._range = None
            e._fn = None
            e._vars = None
            _INTERN[key] = e
        return e

    # ------------------------------------------------------------------ identity
    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Expr):
            return self is other
        if isinstance(other, (int, np.integer)) and not isinstance(other, bool):
            return self.op == _CONST and self.args[0] == int(other)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        r = self.__eq__(other)
        return r if r is NotImplemented else not r

    def __reduce__(self):
        return (_rebuild, (self.op, self.args))

    @property
    def sort_key(self) -> str:
        if self._key is None:  # "<op>:<repr>"; _fmt reuses the cached repr of sub-expressions
            self._key = f"{self.op}:{_fmt_body(self)}"
        return self._key

    # ------------------------------------------------------------------ inspection
    @property
    def is_const(self) -> bool:
        return self.op == _CONST

    @property
    def value(self) -> int:
        """The integer value of a constant expression (raises if symbolic)."""
        if self.op != _CONST:
            raise ValueError(f"expression {self} is symbolic, not a constant")
        return self.args[0]

    @property
    def name(self) -> str:
        if self.op != _VAR:
            raise ValueError(f"expression {self} is not a variable")
        return self.args[0]

    @property
    def kind(self) -> str:
        return _OPNAMES[self.op]

    def free_vars(self) -> frozenset[str]:
        if self._vars is None:  # a constant's args are ints: no variables
            self._vars = (frozenset((self.args[0],)) if self.op == _VAR else
                          frozenset().union(*(a.free_vars() for a in self.args if isinstance(a, Expr))))
        return self._vars

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __bool__(self) -> bool:
        raise OperandError(f"the truth value of symbolic expression {self} is ambiguous; "
                           "compare with == or use .is_const/.value")

    # ------------------------------------------------------------------ range analysis
    def bounds(self) -> tuple[int | None, int | None]:
        """Inclusive (lo, hi) bounds; None means unbounded.  Variables are >= 0."""
        if self._range is None:
            self._range = _compute_range(self)
        return self._range

    # ------------------------------------------------------------------ arithmetic
    def __add__(self, o: ExprLike) -> Expr:
        return _add([self, as_expr(o)])

    def __radd__(self, o: ExprLike) -> Expr:
        return _add([as_expr(o), self])

    def __sub__(self, o: ExprLike) -> Expr:
        return _add([self, _mul([const(-1), as_expr(o)])])

    def __rsub__(self, o: ExprLike) -> Expr:
        return _add([as_expr(o), _mul([const(-1), self])])

    def __neg__(self) -> Expr:
        return _mul([const(-1), self])

    def __mul__(self, o: ExprLike) -> Expr:
        return _mul([self, as_expr(o)])

    def __rmul__(self, o: ExprLike) -> Expr:
        return _mul([as_expr(o), self])

    def __floordiv__(self, o: ExprLike) -> Expr:
        return _floordiv(self, as_expr(o))

    def __rfloordiv__(self, o: ExprLike) -> Expr:
        return _floordiv(as_expr(o), self)

    def __mod__(self, o: ExprLike) -> Expr:
        return _mod(self, as_expr(o))

    def __rmod__(self, o: ExprLike) -> Expr:
        return _mod(as_expr(o), self)

    def ceildiv(self, o: ExprLike) -> Expr:
        """Ceiling division, written as ``(a + b - 1) // b`` (valid for b >= 1)."""
        o = as_expr(o)
        return _floordiv(self + o - 1, o)

    # comparisons build 0/1 expressions; ``==`` stays structural equality.
    def lt(self, o: ExprLike) -> Expr:
        return _lt(self, as_expr(o))

    def le(self, o: ExprLike) -> Expr:
        return _lt(self, as_expr(o) + 1)

    def gt(self, o: ExprLike) -> Expr:
        return _lt(as_expr(o), self)

    def ge(self, o: ExprLike) -> Expr:
        return _lt(as_expr(o), self + 1)

    def eq(self, o: ExprLike) -> Expr:
        o = as_expr(o)
        return self.le(o) * o.le(self)

    def ne(self, o: ExprLike) -> Expr:
        return 1 - self.eq(o)

    # ------------------------------------------------------------------ substitution / evaluation
    def with_args(self, args: Sequence[Expr]) -> Expr:
        """This operation over other operands (re-canonicalised); a constant or variable is itself."""
        return self if self.op in (_CONST, _VAR) else _REBUILD[self.op](list(args))

    def substitute(self, mapping: Mapping[str, ExprLike]) -> Expr:
        """Replace variables by expressions (or ints); the result is re-canonicalised."""
        if not mapping or not (self.free_vars() & mapping.keys()):
            return self
        m = {k: as_expr(v) for k, v in mapping.items()}
        cache: dict[Expr, Expr] = {}

        def go(e: Expr) -> Expr:
            if not (e.free_vars() & m.keys()):
                return e
            r = cache.get(e)
            if r is None:
                r = cache[e] = m[e.args[0]] if e.op == _VAR else e.with_args([go(a) for a in e.args])
            return r

        return go(self)

    def evaluate(self, env: Mapping[str, int | np.ndarray] | None = None):
        """Evaluate with variables bound in ``env``; numpy arrays evaluate element-wise."""
        if self._fn is None:
            self._fn = _compile(self)
        try:
            return self._fn(env or {})
        except KeyError as e:
            raise KeyError(f"expression {self} needs a value for dim {e.args[0]!r}") from None

    # ------------------------------------------------------------------ printing
    def __repr__(self) -> str:
        return _fmt(self, 0)

    __str__ = __repr__

    def to_python(self) -> str:
        """Python source evaluating this expression (variables read from ``env``)."""
        return _py(self)


def _rebuild(op: int, args: tuple) -> Expr:
    return _REBUILD[op](list(args)) if op not in (_CONST, _VAR) else Expr._make(op, args)


# ====================================================================== smart constructors
def const(v: int) -> Expr:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise OperandError(f"symbolic constant must be an int, got {v!r}")
    return Expr._make(_CONST, (int(v),))


def sym(name: str) -> Expr:
    """A dim symbol (or the index variable ``z``)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise GraphError(f"invalid symbol name {name!r}: must be a Python identifier")
    return Expr._make(_VAR, (name,))


def as_expr(v: ExprLike) -> Expr:
    """Coerce an int, a symbol name or a small arithmetic string (``"s*2+1"``) to an Expr."""
    if isinstance(v, Expr):
        return v
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return const(int(v))
    if isinstance(v, str):
        if v.isidentifier():
            return sym(v)
        return parse(v)
    raise OperandError(f"cannot use {v!r} ({type(v).__name__}) as a dimension/expression")


def parse(text: str) -> Expr:
    """Parse a small arithmetic expression over ints and symbols (``+ - * // %``, min, max)."""
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise GraphError(f"cannot parse dimension expression {text!r}: {e.msg}") from None

    def go(n: ast.AST) -> Expr:
        if isinstance(n, ast.Constant) and isinstance(n.value, int) and not isinstance(n.value, bool):
            return const(n.value)
        if isinstance(n, ast.Name):
            return sym(n.id)
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -go(n.operand)
        if isinstance(n, ast.BinOp):
            ops = {ast.Add: Expr.__add__, ast.Sub: Expr.__sub__, ast.Mult: Expr.__mul__,
                   ast.FloorDiv: Expr.__floordiv__, ast.Mod: Expr.__mod__}
            f = ops.get(type(n.op))
            if f is not None:
                return f(go(n.left), go(n.right))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("min", "max"):
            args = [go(a) for a in n.args]
            return smin(*args) if n.func.id == "min" else smax(*args)
        raise GraphError(f"unsupported syntax in dimension expression {text!r}")

    return go(tree)


def smin(*xs: ExprLike) -> Expr:
    return _minmax(_MIN, [as_expr(x) for x in xs])


def smax(*xs: ExprLike) -> Expr:
    return _minmax(_MAX, [as_expr(x) for x in xs])


def _split_term(t: Expr) -> tuple[int, Expr | None]:
    """term -> (coefficient, monomial); monomial None for constants."""
    if t.op == _CONST:
        return t.args[0], None
    if t.op == _MUL and t.args[0].op == _CONST:
        rest = t.args[1:]
        return t.args[0].args[0], rest[0] if len(rest) == 1 else Expr._make(_MUL, rest)
    return 1, t


def _term(coef: int, mono: Expr | None) -> Expr:
    if mono is None or coef == 0:
        return const(coef)
    if coef == 1:
        return mono
    factors = mono.args if mono.op == _MUL else (mono,)
    return Expr._make(_MUL, (const(coef),) + tuple(factors))


def _add(xs: list[Expr]) -> Expr:
    coefs: dict[Expr, int] = {}
    c = 0
    stack = list(xs)
    while stack:
        x = stack.pop()
        if x.op == _ADD:
            stack.extend(x.args)
            continue
        k, mono = _split_term(x)
        if mono is None:
            c += k
        else:
            coefs[mono] = coefs.get(mono, 0) + k
    # division identity: k*c*(x // c) + k*(x % c) == k*x  (exact for integers, c a constant)
    for mono in [m for m in coefs if m.op == _MOD and m.args[1].op == _CONST]:
        k = coefs.get(mono, 0)
        x, cc = mono.args
        q = Expr._make(_FLOORDIV, (x, cc))
        if k and coefs.get(q, 0) == k * cc.args[0]:
            del coefs[mono], coefs[q]
            for t in (x.args if x.op == _ADD else (x,)):
                tk, tm = _split_term(t)
                if tm is None:
                    c += k * tk
                else:
                    coefs[tm] = coefs.get(tm, 0) + k * tk
    terms = [_term(k, m) for m, k in coefs.items() if k != 0]
    terms.sort(key=lambda t: _split_term(t)[1].sort_key)
    if c != 0:
        terms.append(const(c))
    if not terms:
        return const(0)
    if len(terms) == 1:
        return terms[0]
    return Expr._make(_ADD, tuple(terms))


def _mul(xs: list[Expr]) -> Expr:
    c = 1
    factors: list[Expr] = []
    sums: list[Expr] = []
    stack = list(xs)
    while stack:
        x = stack.pop()
        if x.op == _CONST:
            c *= x.args[0]
        elif x.op == _MUL:
            stack.extend(x.args)
        elif x.op == _ADD:
            sums.append(x)
        else:
            factors.append(x)
    if c == 0:
        return const(0)
    if sums:  # distribute: canonical polynomial form
        acc: list[Expr] = [_mul([const(c)] + factors)]
        for s in sums:
            acc = [_mul([a, t]) for a in acc for t in s.args]
        return _add(acc)
    if not factors:
        return const(c)
    factors.sort(key=lambda f: f.sort_key)
    mono = factors[0] if len(factors) == 1 else Expr._make(_MUL, tuple(factors))
    return _term(c, mono)


def _positive(e: Expr) -> bool:
    """True when e is provably >= 1 (symbols used as divisors are sizes >= 1)."""
    if e.op == _VAR:
        return True
    lo, _ = e.bounds()
    if lo is not None and lo >= 1:
        return True
    if e.op == _MUL:
        return all(_positive(a) for a in e.args)
    return False


def divides(d: Expr, t: Expr) -> Expr | None:
    """If term t == d * q exactly (as polynomials), return q."""
    if d.op == _CONST:
        dv = d.args[0]
        k, mono = _split_term(t)
        if k % dv == 0:
            return _term(k // dv, mono)
        return None
    # symbolic divisor: d = kd * mono_d; t must contain all of mono_d's factors
    kd, md = _split_term(d)
    k, mt = _split_term(t)
    if mt is None or md is None or k % kd:
        return None
    tf = list(mt.args if mt.op == _MUL else (mt,))
    for f in (md.args if md.op == _MUL else (md,)):
        if f in tf:
            tf.remove(f)
        else:
            return None
    return _mul([const(k // kd)] + tf)


def _floordiv(a: Expr, b: Expr) -> Expr:
    if b.op == _CONST:
        bv = b.args[0]
        if bv == 0:
            raise ZeroDivisionError(f"symbolic floor-division of {a} by zero")
        if bv == 1:
            return a
        if a.op == _CONST:
            return const(a.args[0] // bv)
        if bv < 0:
            return _floordiv(-a, const(-bv))
    elif a.op == _CONST and b.op == _CONST:
        return const(a.args[0] // b.args[0])
    if a == b and _positive(b):
        return const(1)
    if _positive(b):
        # (b*q + r) // b == q + r // b  (exact for any integers)
        terms = a.args if a.op == _ADD else (a,)
        quot, rest = [], []
        for t in terms:
            q = divides(b, t)
            (quot.append(q) if q is not None else rest.append(t))
        if quot:
            return _add(quot + [_floordiv(_add(rest), b)])
        lo, hi = a.bounds()
        blo = max(b.bounds()[0] or 0, 1)  # _positive(b): b >= 1 even for a bare symbol
        if lo is not None and lo >= 0 and hi is not None and hi < blo:
            return const(0)
        # (x // c1) // c2 == x // (c1*c2) for positive divisors
        if a.op == _FLOORDIV and _positive(a.args[1]):
            return _floordiv(a.args[0], _mul([a.args[1], b]))
    return Expr._make(_FLOORDIV, (a, b))


def _mod(a: Expr, b: Expr) -> Expr:
    if b.op == _CONST:
        bv = b.args[0]
        if bv == 0:
            raise ZeroDivisionError(f"symbolic modulo of {a} by zero")
        if bv == 1 or bv == -1:
            return const(0)
        if a.op == _CONST:
            return const(a.args[0] % bv)
    if a == b and _positive(b):
        return const(0)
    if _positive(b):
        terms = a.args if a.op == _ADD else (a,)
        rest = [t for t in terms if divides(b, t) is None]
        if len(rest) != len(terms):
            return _mod(_add(rest), b)
        lo, hi = a.bounds()
        blo = max(b.bounds()[0] or 0, 1)  # _positive(b): b >= 1 even for a bare symbol
        if lo is not None and lo >= 0 and hi is not None and hi < blo:
            return a
        # (x % c1) % c2 == x % c2 when c2 divides c1
        if a.op == _MOD and divides(b, a.args[1]) is not None:
            return _mod(a.args[0], b)
    return Expr._make(_MOD, (a, b))


def _minmax(op: int, xs: list[Expr]) -> Expr:
    if not xs:
        raise ValueError("min/max of no expressions")
    flat: list[Expr] = []
    for x in xs:
        flat.extend(x.args if x.op == op else (x,))
    consts = [x.args[0] for x in flat if x.op == _CONST]
    rest = sorted(set(x for x in flat if x.op != _CONST), key=lambda e: e.sort_key)
    pick = min if op == _MIN else max
    if consts:
        rest.append(const(pick(consts)))
    # drop operands that range analysis proves dominated by an operand still kept (two provably
    # equal operands dominate each other: only one of them may go)
    keep: list[Expr] = list(rest)
    for x in rest:
        for y in keep:
            if y is x:
                continue
            d = (y - x) if op == _MIN else (x - y)
            _, hi = d.bounds()
            if hi is not None and hi <= 0:  # y <= x (min) / y >= x (max): x is redundant
                keep.remove(x)
                break
    if len(keep) == 1:
        return keep[0]
    return Expr._make(op, tuple(keep))


def _lt(a: Expr, b: Expr) -> Expr:
    d = a - b
    lo, hi = d.bounds()
    if hi is not None and hi < 0:
        return const(1)
    if lo is not None and lo >= 0:
        return const(0)
    # canonical sides: positive terms (plus a positive constant) on the left, the rest on the right
    terms = d.args if d.op == _ADD else (d,)
    lhs, rhs, c = [], [], 0
    for t in terms:
        k, mono = _split_term(t)
        if mono is None:
            c = k
        elif k > 0:
            lhs.append(t)
        else:
            rhs.append(_term(-k, mono))
    if c > 0:
        lhs.append(const(c))
    elif c < 0:
        rhs.append(const(-c))
    return Expr._make(_LT, (_add(lhs), _add(rhs)))


_REBUILD: dict[int, Callable[[list[Expr]], Expr]] = {
    _ADD: _add,
    _MUL: _mul,
    _FLOORDIV: lambda a: _floordiv(a[0], a[1]),
    _MOD: lambda a: _mod(a[0], a[1]),
    _MIN: lambda a: _minmax(_MIN, a),
    _MAX: lambda a: _minmax(_MAX, a),
    _LT: lambda a: _lt(a[0], a[1]),
}


# ====================================================================== range analysis
def _rmul(a: tuple, b: tuple) -> tuple:
    lo1, hi1 = a
    lo2, hi2 = b
    if lo1 is not None and lo2 is not None and lo1 >= 0 and lo2 >= 0:
        hi = None if hi1 is None or hi2 is None else hi1 * hi2
        if (hi1 == 0) or (hi2 == 0):
            hi = 0
        return lo1 * lo2, hi
    if None in (lo1, hi1, lo2, hi2):
        if lo2 is not None and lo2 == hi2:  # multiply by a constant
            k = lo2
            if k >= 0:
                return (None if lo1 is None else lo1 * k, None if hi1 is None else hi1 * k)
            return (None if hi1 is None else hi1 * k, None if lo1 is None else lo1 * k)
        if lo1 is not None and lo1 == hi1:
            return _rmul(b, a)
        return None, None
    ps = [lo1 * lo2, lo1 * hi2, hi1 * lo2, hi1 * hi2]
    return min(ps), max(ps)


def _compute_range(e: Expr) -> tuple[int | None, int | None]:
    op = e.op
    if op == _CONST:
        return e.args[0], e.args[0]
    if op == _VAR:
        return 0, None
    if op == _ADD:
        lo, hi = 0, 0
        for a in e.args:
            alo, ahi = a.bounds()
            lo = None if lo is None or alo is None else lo + alo
            hi = None if hi is None or ahi is None else hi + ahi
        return lo, hi
    if op == _MUL:
        r = (1, 1)
        for a in e.args:
            r = _rmul(r, a.bounds())
        return r
    if op == _FLOORDIV:
        (alo, ahi), (blo, bhi) = e.args[0].bounds(), e.args[1].bounds()
        if blo is not None and blo >= 1:
            lo = None if alo is None else (alo // blo if alo >= 0 else alo)
            hi = None if ahi is None else (ahi // blo if ahi >= 0 else (-1 if bhi is None else ahi // bhi))
            if alo is not None and alo >= 0:
                lo = 0 if bhi is None else alo // bhi
            return lo, hi
        return None, None
    if op == _MOD:
        blo, bhi = e.args[1].bounds()
        alo, ahi = e.args[0].bounds()
        if blo is not None and blo >= 1:
            hi = None if bhi is None else bhi - 1
            if alo is not None and alo >= 0 and ahi is not None:
                hi = ahi if hi is None else min(hi, ahi)
            return 0, hi
        return None, None
    if op in (_MIN, _MAX):
        rs = [a.bounds() for a in e.args]
        los, his = [r[0] for r in rs], [r[1] for r in rs]
        if op == _MIN:
            lo = None if None in los else min(los)
            hi = min((h for h in his if h is not None), default=None)
        else:
            lo = max((lo_ for lo_ in los if lo_ is not None), default=None)
            hi = None if None in his else max(his)
        return lo, hi
    if op == _LT:
        return 0, 1
    raise AssertionError(op)


# ====================================================================== printing / codegen
_PREC = {_ADD: 1, _MUL: 2, _FLOORDIV: 2, _MOD: 2}


def _fmt(e: Expr, parent: int) -> str:
    """``e`` printed inside a parent of precedence ``parent``; the bare text is cached in sort_key."""
    s = e.sort_key[2:]  # op codes are single digits: "<op>:<text>"
    op = e.op
    if op == _CONST:
        return f"({s})" if e.args[0] < 0 and parent > 1 else s
    if op in _PREC:
        return f"({s})" if _PREC[op] < parent or (parent == 3 and _PREC[op] <= 2) else s
    return s


def _fmt_body(e: Expr) -> str:
    op = e.op
    if op == _CONST:
        return str(e.args[0])
    if op == _VAR:
        return e.args[0]
    if op == _ADD:
        parts = []
        for i, t in enumerate(e.args):
            k, mono = _split_term(t)
            if i and k < 0:
                parts.append(" - " + _fmt(_term(-k, mono), 1))
            else:
                parts.append((" + " if i else "") + _fmt(t, 1))
        return "".join(parts)
    if op == _MUL:
        if e.args[0] == -1 and len(e.args) == 2:
            return "-" + _fmt(e.args[1], 3)
        return "*".join(_fmt(a, 3) if a.op in (_FLOORDIV, _MOD) else _fmt(a, 2) for a in e.args)
    if op == _FLOORDIV:
        return f"{_fmt(e.args[0], 2)} // {_fmt(e.args[1], 3)}"
    if op == _MOD:
        return f"{_fmt(e.args[0], 2)} % {_fmt(e.args[1], 3)}"
    if op in (_MIN, _MAX):
        return f"{_OPNAMES[op]}({', '.join(_fmt(a, 0) for a in e.args)})"
    if op == _LT:
        return f"({_fmt(e.args[0], 0)} < {_fmt(e.args[1], 0)})"
    raise AssertionError(op)  # pragma: no cover


def _py(e: Expr) -> str:
    op = e.op
    if op == _CONST:
        return f"({e.args[0]})"
    if op == _VAR:
        return f"env[{e.args[0]!r}]"
    if op in _PY_INFIX:  # floor division and modulo have two operands
        return "(" + _PY_INFIX[op].join(_py(a) for a in e.args) + ")"
    if op in _PY_CALL:
        return _PY_CALL[op] + "(" + ", ".join(_py(a) for a in e.args) + ")"
    raise AssertionError(op)


_PY_INFIX = {_ADD: " + ", _MUL: " * ", _FLOORDIV: " // ", _MOD: " % "}
_PY_CALL = {_MIN: "_min", _MAX: "_max", _LT: "_lt"}


def _vmin(*xs):
    r = xs[0]
    for x in xs[1:]:
        r = np.minimum(r, x) if isinstance(r, np.ndarray) or isinstance(x, np.ndarray) else min(r, x)
    return r


def _vmax(*xs):
    r = xs[0]
    for x in xs[1:]:
        r = np.maximum(r, x) if isinstance(r, np.ndarray) or isinstance(x, np.ndarray) else max(r, x)
    return r


def _vlt(a, b):
    r = a < b
    return r.astype(np.int64) if isinstance(r, np.ndarray) else int(r)


def _compile(e: Expr) -> Callable:
    """Straight-line code with one temporary per distinct sub-expression (the DAG is shared) and
    n-ary sums/products split into short chains, so deep or wide expressions never hit the Python
    parser's nesting or the compiler's recursion limits."""
    names: dict[Expr, str] = {}
    lines: list[str] = []
    stack: list[tuple[Expr, bool]] = [(e, False)]
    while stack:
        n, ready = stack.pop()
        if n in names:
            continue
        if n.op == _CONST:
            names[n] = f"({n.args[0]})"
            continue
        if n.op == _VAR:
            names[n] = f"env[{n.args[0]!r}]"
            continue
        if not ready:
            stack.append((n, True))
            stack.extend((a, False) for a in n.args if a not in names)
            continue
        a = [names[x] for x in n.args]
        t = f"t{len(names)}"
        if n.op in (_ADD, _MUL):
            sep = " + " if n.op == _ADD else " * "
            for k in range(0, len(a), 32):
                lines.append(f"    {t} = " + sep.join(([t] if k else []) + a[k:k + 32]))
        elif n.op in (_FLOORDIV, _MOD):
            lines.append(f"    {t} = {a[0]} {'//' if n.op == _FLOORDIV else '%'} {a[1]}")
        else:
            fn = {_MIN: "_min", _MAX: "_max", _LT: "_lt"}[n.op]
            lines.append(f"    {t} = {fn}({', '.join(a)})")
        names[n] = t
    src = "def _f(env):\n" + "".join(ln + "\n" for ln in lines) + f"    return {names[e]}\n"
    ns = {"_min": _vmin, "_max": _vmax, "_lt": _vlt}
    exec(src, ns)  # noqa: S102 - generated from our own tree
    return ns["_f"]


def compile_exprs(exprs: Iterable[ExprLike]) -> Callable[[Mapping[str, int]], tuple[int, ...]]:
    """One function giving the values of several expressions for given dims: what a kernel calls
    at run time (dims are run-time arguments; nothing is re-prepared when they change)."""
    es = [as_expr(e) for e in exprs]
    if all(e.is_const for e in es):
        vals = tuple(e.value for e in es)
        return lambda env: vals
    src = "def _f(env):\n    return (" + "".join(f"{_py(e)}, " for e in es) + ")\n"
    ns = {"_min": _vmin, "_max": _vmax, "_lt": _vlt}
    exec(src, ns)  # noqa: S102 - generated from our own expressions
    return ns["_f"]


def prod(xs: Iterable[ExprLike]) -> Expr:
    """Symbolic product of dims (1 for an empty list)."""
    return _mul([as_expr(x) for x in xs] or [const(1)])


def gcd_const(e: Expr) -> int:
    """Largest positive integer that provably divides e (0 for the constant 0)."""
    if e.op == _CONST:
        return abs(e.args[0])
    if e.op == _ADD:
        g = 0
        for t in e.args:
            g = math.gcd(g, gcd_const(t))
        return g
    k, _ = _split_term(e)
    return abs(k)


def is_expr_like(v: object) -> bool:
    return isinstance(v, (Expr, str)) or (isinstance(v, (int, np.integer)) and not isinstance(v, bool))
