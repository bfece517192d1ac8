"""Error paths: an unsupported op names the ATen op and the user's source line; the eager fallback
runs it in PyTorch and says so once; bad options are rejected with the valid ones listed."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

import lightspeed.torch as lst

REF = {"target": "reference"}


def uses_lgamma(x, y):
    a = torch.sin(x) + y
    b = torch.lgamma(a.abs() + 1)  # no lightspeed translation
    return (b * 2 + a).sum(-1), torch.digamma(b + 1)


def _line_of(fn, text: str) -> int:
    src, start = inspect.getsourcelines(fn)
    return start + next(i for i, s in enumerate(src) if text in s)


def test_unsupported_op_names_aten_op_and_source_line():
    x, y = torch.randn(3, 4), torch.randn(4)
    with pytest.raises(Exception) as info:
        torch.compile(uses_lgamma, backend="lightspeed", options=REF)(x, y)
    msg = str(info.value)
    assert "aten.lgamma.default" in msg
    assert f"test_errors.py:{_line_of(uses_lgamma, 'torch.lgamma')}" in msg
    assert "torch.lgamma(a.abs() + 1)" in msg
    assert "fallback" in msg  # says how to get past it


def test_eager_fallback_runs_unsupported_ops_and_warns_once():
    x, y = torch.randn(3, 4), torch.randn(4)
    compiled = torch.compile(uses_lgamma, backend="lightspeed", options={**REF, "fallback": "eager"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            got = compiled(x, y)
    notes = [w for w in caught if issubclass(w.category, lst.FallbackWarning)]
    assert len(notes) == 1, [str(w.message) for w in caught]
    assert "aten.lgamma.default" in str(notes[0].message) and "aten.digamma.default" in str(notes[0].message)
    for g, r in zip(got, uses_lgamma(x, y)):
        torch.testing.assert_close(g, r)
    graph = lst.stats()["graphs"][0]
    assert graph["eager_ops"] == ["aten.lgamma.default", "aten.digamma.default"]
    assert graph["segments"] == 2  # lightspeed before lgamma, lightspeed between lgamma and digamma


def test_unsupported_output_of_a_supported_op():
    def f(x):
        return F.max_pool2d(x, 2, return_indices=True)

    with pytest.raises(Exception, match="max_pool2d_with_indices.*indices"):
        torch.compile(f, backend="lightspeed", options=REF)(torch.randn(1, 1, 4, 4))


def test_fallback_also_covers_unsupported_outputs():
    def f(x):
        v, i = F.max_pool2d(x, 2, return_indices=True)
        return v * 2, i

    x = torch.randn(1, 2, 4, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lst.FallbackWarning)
        v, i = torch.compile(f, backend="lightspeed", options={**REF, "fallback": "eager"})(x)
    rv, ri = f(x)
    torch.testing.assert_close(v, rv)
    torch.testing.assert_close(i, ri)


@pytest.mark.parametrize("options,match", [
    ({"targett": "cpu"}, "unknown option.*targett.*valid options"),
    ({"target": "tpu"}, "target must be one of"),
    ({"fallback": "maybe"}, "fallback must be"),
    ({"budget": 0}, "budget must be a positive int"),
])
def test_bad_options(options, match):
    with pytest.raises(Exception, match=match):
        torch.compile(lambda x: x + 1, backend="lightspeed", options=options)(torch.ones(2))
