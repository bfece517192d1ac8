"""Bad inputs to the indexing, sorting and scan ops raise ShapeError/DTypeError/UnsupportedError
at graph-build time, with a message that names the op."""

from __future__ import annotations

import pytest

import lightspeed as ls


@pytest.fixture
def g():
    return ls.Graph()


def _t(g, name, shape, dtype=ls.float32):
    return g.input(name, shape, dtype)


# (op name, builder(graph) -> None, expected exception)
def _cases():
    f, i64, i32 = ls.float32, ls.int64, ls.int32
    return [
        # wrong index dtype
        ("gather", lambda g: ls.gather(_t(g, "x", (3, 4)), 1, _t(g, "i", (3, 2), f)), ls.DTypeError),
        ("gather_elements", lambda g: ls.gather_elements(_t(g, "x", (3, 4)), _t(g, "i", (3, 2), ls.bool_)),
         ls.DTypeError),
        ("take_along_dim", lambda g: ls.take_along_dim(_t(g, "x", (3, 4)), _t(g, "i", (3, 2)), 1), ls.DTypeError),
        ("embedding", lambda g: ls.embedding(_t(g, "i", (5,), f), _t(g, "w", (10, 4))), ls.DTypeError),
        ("scatter", lambda g: ls.scatter(_t(g, "x", (3, 4)), 1, _t(g, "i", (3, 2)), _t(g, "s", (3, 2))),
         ls.DTypeError),
        ("scatter_elements", lambda g: ls.scatter_elements(_t(g, "x", (3, 4)), _t(g, "i", (3, 2)),
                                                           _t(g, "s", (3, 2))), ls.DTypeError),
        ("scatter_add", lambda g: ls.scatter_add(_t(g, "x", (3, 4)), 1, _t(g, "i", (3, 2)), _t(g, "s", (3, 2))),
         ls.DTypeError),
        ("index_copy", lambda g: ls.index_copy(_t(g, "x", (3, 4)), 0, _t(g, "i", (2,)), _t(g, "s", (2, 4))),
         ls.DTypeError),
        ("one_hot", lambda g: ls.one_hot(_t(g, "i", (3,)), 4), ls.DTypeError),
        # src / source dtype differs from the input's
        ("scatter", lambda g: ls.scatter(_t(g, "x", (3, 4)), 1, _t(g, "i", (3, 2), i64), _t(g, "s", (3, 2), i32)),
         ls.DTypeError),
        ("scatter_add", lambda g: ls.scatter_add(_t(g, "x", (3, 4)), 1, _t(g, "i", (3, 2), i64),
                                                 _t(g, "s", (3, 2), ls.float64)), ls.DTypeError),
        ("index_copy", lambda g: ls.index_copy(_t(g, "x", (3, 4)), 0, _t(g, "i", (2,), i64),
                                               _t(g, "s", (2, 4), i64)), ls.DTypeError),
        ("scatter_add", lambda g: ls.scatter_add(_t(g, "x", (3,), ls.bool_), 0, _t(g, "i", (2,), i64),
                                                 _t(g, "s", (2,), ls.bool_)), ls.DTypeError),
        # mismatched shapes
        ("gather", lambda g: ls.gather(_t(g, "x", (3, 4)), 1, _t(g, "i", (3, 2, 1), i64)), ls.ShapeError),
        ("gather", lambda g: ls.gather(_t(g, "x", (3, 4)), 1, _t(g, "i", (5, 2), i64)), ls.ShapeError),
        ("gather", lambda g: ls.gather(_t(g, "x", ("s", 4)), 1, _t(g, "i", ("t", 2), i64)), ls.ShapeError),
        ("gather_elements", lambda g: ls.gather_elements(_t(g, "x", (3, 4)), _t(g, "i", (3, 6), i64), 0),
         ls.ShapeError),
        ("take_along_dim", lambda g: ls.take_along_dim(_t(g, "x", (3, 4)), _t(g, "i", (2,), i64), 1),
         ls.ShapeError),
        ("take_along_dim", lambda g: ls.take_along_dim(_t(g, "x", (3, 4)), _t(g, "i", (2, 2), i64), 1),
         ls.ShapeError),
        ("embedding", lambda g: ls.embedding(_t(g, "i", (5,), i64), _t(g, "w", (10,))), ls.ShapeError),
        ("scatter", lambda g: ls.scatter(_t(g, "x", (3, 4)), 1, _t(g, "i", (3, 2), i64), _t(g, "s", (3, 1))),
         ls.ShapeError),
        ("scatter", lambda g: ls.scatter(_t(g, "x", (3, 4)), 1, _t(g, "i", (4, 2), i64), _t(g, "s", (4, 2))),
         ls.ShapeError),
        ("scatter_elements", lambda g: ls.scatter_elements(_t(g, "x", (3, 4)), _t(g, "i", (3, 2), i64),
                                                           _t(g, "s", (3, 3)), 1), ls.ShapeError),
        ("scatter_add", lambda g: ls.scatter_add(_t(g, "x", (3, 4)), 0, _t(g, "i", (3, 5), i64),
                                                 _t(g, "s", (3, 5))), ls.ShapeError),
        ("index_copy", lambda g: ls.index_copy(_t(g, "x", (3, 4)), 0, _t(g, "i", (2, 1), i64),
                                               _t(g, "s", (2, 4))), ls.ShapeError),
        ("index_copy", lambda g: ls.index_copy(_t(g, "x", (3, 4)), 0, _t(g, "i", (2,), i64),
                                               _t(g, "s", (3, 4))), ls.ShapeError),
        ("topk", lambda g: ls.topk(_t(g, "x", (3, 4)), 5), ls.ShapeError),
        ("topk", lambda g: ls.topk(_t(g, "x", (3, "s")), 2), ls.ShapeError),
        ("tril", lambda g: ls.tril(_t(g, "x", (4,))), ls.ShapeError),
        ("triu", lambda g: ls.triu(_t(g, "x", ())), ls.ShapeError),
        ("one_hot", lambda g: ls.one_hot(_t(g, "i", (3,), i64), 0), ls.ShapeError),
        # out-of-range dims
        ("gather", lambda g: ls.gather(_t(g, "x", (3, 4)), 2, _t(g, "i", (3, 2), i64)), ls.ShapeError),
        ("gather_elements", lambda g: ls.gather_elements(_t(g, "x", (3, 4)), _t(g, "i", (3, 2), i64), -3),
         ls.ShapeError),
        ("take_along_dim", lambda g: ls.take_along_dim(_t(g, "x", (3, 4)), _t(g, "i", (3, 2), i64), 5),
         ls.ShapeError),
        ("scatter", lambda g: ls.scatter(_t(g, "x", (3, 4)), -3, _t(g, "i", (3, 2), i64), 1.0), ls.ShapeError),
        ("scatter_elements", lambda g: ls.scatter_elements(_t(g, "x", (3, 4)), _t(g, "i", (3, 2), i64),
                                                           _t(g, "s", (3, 2)), 2), ls.ShapeError),
        ("scatter_add", lambda g: ls.scatter_add(_t(g, "x", (3, 4)), 2, _t(g, "i", (3, 2), i64),
                                                 _t(g, "s", (3, 2))), ls.ShapeError),
        ("index_copy", lambda g: ls.index_copy(_t(g, "x", (3, 4)), 2, _t(g, "i", (2,), i64),
                                               _t(g, "s", (3, 2))), ls.ShapeError),
        ("index_select", lambda g: ls.index_select(_t(g, "x", (3, 4)), 2, _t(g, "i", (2,), i64)), ls.ShapeError),
        ("sort", lambda g: ls.sort(_t(g, "x", (3, 4)), 2), ls.ShapeError),
        ("argsort", lambda g: ls.argsort(_t(g, "x", (3, 4)), -3), ls.ShapeError),
        ("topk", lambda g: ls.topk(_t(g, "x", (3, 4)), 2, dim=2), ls.ShapeError),
        ("cumsum", lambda g: ls.cumsum(_t(g, "x", (3, 4)), 2), ls.ShapeError),
        ("cumprod", lambda g: ls.cumprod(_t(g, "x", (3, 4)), -3), ls.ShapeError),
        ("cummax", lambda g: ls.cummax(_t(g, "x", (3, 4)), 2), ls.ShapeError),
        ("cummin", lambda g: ls.cummin(_t(g, "x", ()), 1), ls.ShapeError),
        # unsupported, with a clear message
        ("embedding", lambda g: ls.embedding(_t(g, "i", (5,), i64), _t(g, "w", (10, 4)), max_norm=1.0),
         ls.UnsupportedError),
        ("one_hot", lambda g: ls.one_hot(_t(g, "i", (3,), i64)), ls.UnsupportedError),
        ("scatter", lambda g: ls.scatter(_t(g, "x", (3, 4)), 1, _t(g, "i", (3, 2), i64), 1.0, reduce="multiply"),
         ls.UnsupportedError),
        ("cumprod", lambda g: ls.cumprod(_t(g, "x", ("s",), i32), 0), ls.UnsupportedError),
        # storage-only dtypes
        ("sort", lambda g: ls.sort(_t(g, "x", (4,), ls.float8_e4m3)), ls.DTypeError),
        ("cumsum", lambda g: ls.cumsum(_t(g, "x", (4,), ls.float8_e5m2), 0), ls.DTypeError),
    ]


CASES = _cases()


@pytest.mark.parametrize("op,build,exc", CASES, ids=[f"{c[0]}-{k}" for k, c in enumerate(CASES)])
def test_bad_input_raises_naming_the_op(g, op, build, exc):
    with pytest.raises(exc) as info:
        build(g)
    assert op in str(info.value), f"message does not name {op!r}: {info.value}"


def test_messages_name_operand_shapes_and_dtypes(g):
    with pytest.raises(ls.DTypeError, match=r"gather: index must have an integer dtype, got float32.*float32\[3, 4\]"):
        ls.gather(_t(g, "x", (3, 4)), 1, _t(g, "i", (3, 2)))
    with pytest.raises(ls.ShapeError, match=r"gather: index \(5, 2\) is larger than input \(3, 4\) in dim 0"):
        ls.gather(_t(g, "y", (3, 4)), 1, _t(g, "j", (5, 2), ls.int64))
    with pytest.raises(ls.DTypeError, match=r"scatter: src must have the input's dtype, got input float32 and src "
                                            r"int32"):
        ls.scatter(_t(g, "z", (3, 4)), 1, _t(g, "k", (3, 2), ls.int64), _t(g, "s", (3, 2), ls.int32))


def test_error_cases_cover_every_new_op():
    ops = {c[0] for c in CASES}
    want = {"gather", "gather_elements", "take_along_dim", "embedding", "scatter", "scatter_elements",
            "scatter_add", "index_copy", "one_hot", "index_select", "sort", "argsort", "topk", "cumsum",
            "cumprod", "cummax", "cummin", "tril", "triu"}
    assert want <= ops, sorted(want - ops)
