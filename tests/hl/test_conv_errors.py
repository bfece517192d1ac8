"""Bad inputs to convolution, pooling, interpolation and group/batch norm raise ShapeError,
DTypeError or UnsupportedError at graph-build time, with a message that names the op (and, for
shape errors, the operands' shapes)."""

from __future__ import annotations

import pytest

import lightspeed as ls


def _t(g, name, shape, dtype=ls.float32):
    return g.input(name, shape, dtype)


def _x(g, shape, dtype=ls.float32):
    return _t(g, "x", shape, dtype)


def _w(g, shape, dtype=ls.float32):
    return _t(g, "w", shape, dtype)


S, D, U = ls.ShapeError, ls.DTypeError, ls.UnsupportedError

# (op, builder(graph), expected exception, substrings the message must contain besides the op name)
CASES = [
    # conv: channel mismatch, groups, kernel larger than the padded input, wrong ranks
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 3, 5, 5)), _w(g, (4, 2, 3, 3))), S, ["(1, 3, 5, 5)", "(4, 2, 3, 3)"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 4, 5, 5)), _w(g, (6, 1, 3, 3)), groups=3), S, ["groups=3"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 4, 5, 5)), _w(g, (5, 2, 3, 3)), groups=2), S, ["divisible"]),
    ("conv1d", lambda g: ls.conv1d(_x(g, (1, 6, 5)), _w(g, (6, 2, 3)), groups=4), S, ["(1, 6, 5)"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 2, 3, 3)), _w(g, (1, 2, 5, 5))), S, ["(1, 2, 3, 3)", "larger"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 2, 3, 3)), _w(g, (1, 2, 3, 3)), dilation=2), S, ["(5, 5)"]),
    ("conv1d", lambda g: ls.conv1d(_x(g, (1, 2, 3)), _w(g, (1, 2, 2)), padding=1, dilation=5), S, ["larger"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (3, 5)), _w(g, (4, 3, 3, 3))), S, ["(3, 5)"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 2, 1, 3, 5)), _w(g, (4, 2, 3, 3))), S, ["(1, 2, 1, 3, 5)"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 3, 5, 5)), _w(g, (4, 3, 3))), S, ["(4, 3, 3)"]),
    ("conv1d", lambda g: ls.conv1d(_x(g, (1, 3, 5, 5)), _w(g, (4, 3, 3))), S, ["(1, 3, 5, 5)"]),
    ("conv3d", lambda g: ls.conv3d(_x(g, (1, 3, 5, 5)), _w(g, (4, 3, 3, 3, 3))), S, ["(1, 3, 5, 5)"]),
    # conv: bias, stride, padding, dilation, groups arguments
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 3, 5, 5)), _w(g, (4, 3, 3, 3)), _t(g, "b", (3,))), S, ["(3,)"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 3, 5, 5)), _w(g, (4, 3, 3, 3)), stride=0), S, ["stride"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 3, 5, 5)), _w(g, (4, 3, 3, 3)), stride=(1, 2, 1)), S, ["stride"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 3, 5, 5)), _w(g, (4, 3, 3, 3)), padding=-1), S, ["padding"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 3, 5, 5)), _w(g, (4, 3, 3, 3)), padding="full"), S, ["padding"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 3, 5, 5)), _w(g, (4, 3, 3, 3)), padding="same", stride=2), S,
     ["strided"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 3, 5, 5)), _w(g, (4, 3, 3, 3)), dilation=0), S, ["dilation"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 3, 5, 5)), _w(g, (4, 3, 3, 3)), groups=0), S, ["groups"]),
    # conv: dtypes, symbolic kernel
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 3, 5, 5)), _w(g, (4, 3, 3, 3), ls.float64)), D, ["float64"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 3, 5, 5), ls.int32), _w(g, (4, 3, 3, 3), ls.int32)), D, ["int32"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 3, 5, 5)), _w(g, (4, 3, 3, 3)), _t(g, "b", (4,), ls.float64)), D,
     ["float64"]),
    ("conv2d", lambda g: ls.conv2d(_x(g, (1, 3, 5, 5)), _w(g, (4, 3, "k", 3))), U, ["kernel"]),
    # pooling
    ("max_pool2d", lambda g: ls.max_pool2d(_x(g, (1, 3, 5, 5)), 3, padding=2), S, ["padding"]),
    ("max_pool2d", lambda g: ls.max_pool2d(_x(g, (1, 3, 5, 5)), 6), S, ["(1, 3, 5, 5)"]),
    ("max_pool2d", lambda g: ls.max_pool2d(_x(g, (5, 5)), 2), S, ["(5, 5)"]),
    ("max_pool2d", lambda g: ls.max_pool2d(_x(g, (1, 3, 5, 5)), (2, 2, 2)), S, ["kernel_size"]),
    ("max_pool2d", lambda g: ls.max_pool2d(_x(g, (1, 3, 5, 5)), 2, stride=0), S, ["stride"]),
    ("max_pool2d", lambda g: ls.max_pool2d(_x(g, (1, 3, 5, 5)), 2, return_indices=True), U, ["return_indices"]),
    ("max_pool1d", lambda g: ls.max_pool1d(_x(g, (1, 3, 5, 5)), 2), S, ["(1, 3, 5, 5)"]),
    ("max_pool2d", lambda g: ls.max_pool2d(_x(g, (1, 3, 5, 5), ls.bool_), 2), D, ["bool"]),
    ("avg_pool2d", lambda g: ls.avg_pool2d(_x(g, (1, 3, 5, 5), ls.int32), 2), D, ["int32"]),
    ("avg_pool2d", lambda g: ls.avg_pool2d(_x(g, (1, 3, 5, 5)), 2, divisor_override=0), S, ["divisor_override"]),
    ("avg_pool2d", lambda g: ls.avg_pool2d(_x(g, (1, 3, 2, 2)), 3), S, ["(1, 3, 2, 2)", "too small"]),
    ("avg_pool1d", lambda g: ls.avg_pool1d(_x(g, (4,)), 2), S, ["(4,)"]),
    # interpolate
    ("interpolate", lambda g: ls.interpolate(_x(g, (1, 3, 5, 5)), scale_factor=2, mode="bilinear"), U, ["bilinear"]),
    ("interpolate", lambda g: ls.interpolate(_x(g, (5, 5)), scale_factor=2), S, ["(5, 5)"]),
    ("interpolate", lambda g: ls.interpolate(_x(g, (1, 3, 5, 5)), size=4, scale_factor=2), S, ["size"]),
    ("interpolate", lambda g: ls.interpolate(_x(g, (1, 3, 5, 5))), S, ["size"]),
    ("interpolate", lambda g: ls.interpolate(_x(g, (1, 3, 5, 5)), size=(4, 4, 4)), S, ["(1, 3, 5, 5)"]),
    ("interpolate", lambda g: ls.interpolate(_x(g, (1, 3, 5, 5)), scale_factor=(2, 2, 2)), S, ["(1, 3, 5, 5)"]),
    ("interpolate", lambda g: ls.interpolate(_x(g, (1, 3, 5, 5)), scale_factor=-1.0), S, ["scale_factor"]),
    ("interpolate", lambda g: ls.interpolate(_x(g, (1, 3, 5, 5)), scale_factor=0.1), S, ["size"]),
    ("interpolate", lambda g: ls.interpolate(_x(g, (1, 3, "h")), scale_factor=0.3), U, ["h"]),
    ("interpolate", lambda g: ls.interpolate(_x(g, (1, 3, 5)), size=4, align_corners=True), S, ["align_corners"]),
    # group_norm / batch_norm
    ("group_norm", lambda g: ls.group_norm(_x(g, (2, 6, 4)), 4), S, ["(2, 6, 4)", "num_groups"]),
    ("group_norm", lambda g: ls.group_norm(_x(g, (2, 6, 4)), 0), S, ["num_groups"]),
    ("group_norm", lambda g: ls.group_norm(_x(g, (6,)), 2), S, ["(6,)"]),
    ("group_norm", lambda g: ls.group_norm(_x(g, (2, 6, 4)), 3, _w(g, (4,))), S, ["(4,)", "(2, 6, 4)"]),
    ("group_norm", lambda g: ls.group_norm(_x(g, (2, 6, 4), ls.int32), 3), D, ["int32"]),
    ("group_norm", lambda g: ls.group_norm(_x(g, (2, "c", 4)), 3), U, ["c"]),
    # num_groups given as a dim object: a symbolic one cannot be used, a non-integer is refused
    ("group_norm", lambda g: (lambda x: ls.group_norm(x, x.shape[2]))(_x(g, (2, 6, "s"))), U, ["num_groups", "s"]),
    ("group_norm", lambda g: ls.group_norm(_x(g, (2, 6, 4)), 2.0), S, ["num_groups", "2.0"]),
    ("batch_norm", lambda g: ls.batch_norm(_x(g, (2, 3, 4)), _t(g, "m", (3,)), _t(g, "v", (3,)), training=True), U,
     ["training"]),
    ("batch_norm", lambda g: ls.batch_norm(_x(g, (2, 3, 4)), _t(g, "m", (4,)), _t(g, "v", (3,))), S,
     ["(4,)", "(2, 3, 4)"]),
    ("batch_norm", lambda g: ls.batch_norm(_x(g, (2, 3, 4)), None, None), U, ["running_mean"]),
    ("batch_norm", lambda g: ls.batch_norm(_x(g, (3,)), _t(g, "m", (3,)), _t(g, "v", (3,))), S, ["(3,)"]),
    ("batch_norm", lambda g: ls.batch_norm(_x(g, (2, 3), ls.int64), _t(g, "m", (3,)), _t(g, "v", (3,))), D,
     ["int64"]),
]


@pytest.mark.parametrize("op,build,exc,needles", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_raises(op, build, exc, needles):
    with pytest.raises(exc) as info:
        build(ls.Graph())
    msg = str(info.value)
    assert op in msg, f"message does not name {op!r}: {msg}"
    for n in needles:
        assert n in msg, f"message lacks {n!r}: {msg}"


def test_errors_are_lightspeed_errors():
    for _, build, exc, _ in CASES:
        assert issubclass(exc, ls.LightspeedError)
        with pytest.raises(ls.LightspeedError):
            build(ls.Graph())


def test_symbolic_spatial_dims_build():
    """Spatial and batch dims may be symbolic for every op (shape errors are then runtime's)."""
    g = ls.Graph()
    x = g.input("x", ("n", 4, "h", "w"))
    w = g.input("w", (8, 2, 3, 3))
    y = ls.conv2d(x, w, groups=2, stride=2, padding=1)
    assert y.shape[1] == 8 and not y.shape[2].is_const
    for out in (ls.max_pool2d(y, 2, ceil_mode=True), ls.avg_pool2d(y, 3, 2, 1, ceil_mode=True),
                ls.interpolate(y, scale_factor=2), ls.group_norm(y, 4)):
        assert out.shape[:2] == y.shape[:2]
