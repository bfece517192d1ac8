"""The harness of the ATen op suite (in the spirit of PyTorch's OpInfo): samples per row of
``lightspeed.torch.ATEN_TABLE``, each compiled through the backend's FX compiler and compared with
eager PyTorch.

A sample is the op's arguments, with :class:`TT` specs where tensors go (also inside lists, e.g.
``cat``'s and ``index``'s).  :func:`run_sample` builds the one-node ATen FX graph (placeholders carry
the inputs as ``meta['val']``, as AOTAutograd's do), compiles it with
``lightspeed.torch.compile_fx`` for the reference runtime and compares every output with eager
PyTorch: the dtype with the float32 run, the values with a float64 run where ``f64`` is set.  Every
sample runs twice: with contiguous inputs and with non-contiguous ones (permuted, or strided for 1-D),
holding the same values.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.fx as fx

from lightspeed.torch import Options, compile_fx


@dataclass
class TT:
    """A tensor argument: shape, dtype and how to draw values ('normal', 'positive', 'uniform',
    'int', 'nzint' (non-zero ints), 'bool', 'index:N', 'special' (with inf/nan), 'half' (multiples of
    0.5) or a callable (generator, shape) -> tensor); ``nc`` allows the non-contiguous layout."""

    shape: Sequence[int]
    dtype: torch.dtype = torch.float32
    gen: str | Callable = "normal"
    nc: bool = True


@dataclass
class Sample:
    args: Sequence[Any]
    kwargs: dict = field(default_factory=dict)
    name: str = ""
    f64: bool = True  # compare float outputs with a float64 eager run
    tol: tuple[float, float] = (1e-5, 1e-5)
    outputs: Sequence[int] | None = None  # which outputs of a multi-output op to compare (default: all)
    check: str = "values"  # or "meta": shape and dtype only (uninitialised memory)


def draw(spec: TT, g: torch.Generator) -> torch.Tensor:
    shape, d = tuple(spec.shape), spec.dtype
    gen = spec.gen
    if callable(gen):
        return gen(g, shape).to(d)
    if d == torch.bool or gen == "bool":
        return torch.rand(shape, generator=g) < 0.5
    if isinstance(gen, str) and gen.startswith("index:"):
        return torch.randint(0, int(gen.split(":")[1]), shape, generator=g).to(d)
    if gen == "nzint":
        v = torch.randint(1, 9, shape, generator=g)
        return (v * (torch.randint(0, 2, shape, generator=g) * 2 - 1)).to(d)
    if not d.is_floating_point or gen == "int":
        return torch.randint(-9, 10, shape, generator=g).to(d)
    if gen == "positive":
        return (torch.rand(shape, generator=g) * 2 + 0.1).to(d)
    if gen == "uniform":
        return (torch.rand(shape, generator=g) * 2 - 1).to(d)
    if gen == "half":
        return (torch.randint(-8, 9, shape, generator=g) * 0.5).to(d)
    if gen == "special":
        v = torch.randn(shape, generator=g).flatten()
        v[::5] = float("nan")
        v[1::7] = float("inf")
        v[2::7] = float("-inf")
        return v.reshape(shape).to(d)
    return torch.randn(shape, generator=g).to(d)


def noncontiguous(t: torch.Tensor) -> torch.Tensor:
    """The same values in a non-contiguous layout."""
    if t.dim() >= 2:
        rev = list(reversed(range(t.dim())))
        return t.permute(rev).contiguous().permute(rev)
    if t.dim() == 1:
        wide = torch.zeros(t.shape[0] * 2, dtype=t.dtype)
        wide[::2] = t
        return wide[::2]
    return t


def _materialise(args: Any, g: torch.Generator, layout: str, tensors: list[torch.Tensor]) -> Any:
    if isinstance(args, TT):
        t = draw(args, g)
        if layout == "noncontig" and args.nc:
            t = noncontiguous(t)
        tensors.append(t)
        return ("__tensor__", len(tensors) - 1)
    if isinstance(args, (list, tuple)):
        return type(args)(_materialise(a, g, layout, tensors) for a in args)
    if isinstance(args, dict):
        return {k: _materialise(v, g, layout, tensors) for k, v in args.items()}
    return args


def _fill(template: Any, values: Sequence[Any]) -> Any:
    if isinstance(template, tuple) and len(template) == 2 and template[0] == "__tensor__":
        return values[template[1]]
    if isinstance(template, (list, tuple)):
        return type(template)(_fill(a, values) for a in template)
    if isinstance(template, dict):
        return {k: _fill(v, values) for k, v in template.items()}
    return template


def op_of(name: str) -> Any:
    ns, pkt, ov = name.split(".")
    if ns == "transformers":  # custom ops registered by transformers' MoE integration
        import transformers.integrations.moe  # noqa: F401
    return getattr(getattr(getattr(torch.ops, ns), pkt), ov)


def build_graph(op: Any, args_t: Any, kwargs_t: Any, tensors: list[torch.Tensor], result: Any,
                outputs: Sequence[int] | None) -> fx.GraphModule:
    g = fx.Graph()
    phs = []
    for i, t in enumerate(tensors):
        p = g.placeholder(f"in{i}")
        p.meta["val"] = t
        phs.append(p)
    node = g.call_function(op, tuple(_fill(args_t, phs)), _fill(kwargs_t, phs))
    node.meta["val"] = result
    if isinstance(result, (tuple, list)):
        outs = []
        for i in outputs if outputs is not None else range(len(result)):
            item = g.call_function(operator.getitem, (node, i))
            item.meta["val"] = result[i]
            outs.append(item)
        g.output(tuple(outs))
    else:
        g.output((node,))
    return fx.GraphModule(torch.nn.Module(), g)


def _as_list(r: Any, outputs: Sequence[int] | None) -> list:
    if isinstance(r, (tuple, list)):
        return [r[i] for i in (outputs if outputs is not None else range(len(r)))]
    return [r]


def _f64(t: Any) -> Any:
    return t.double() if isinstance(t, torch.Tensor) and t.dtype == torch.float32 else t


def run_sample(name: str, sample: Sample, target: str = "reference") -> None:
    op = op_of(name)
    for layout in ("contiguous", "noncontig"):
        g = torch.Generator().manual_seed(0)
        tensors: list[torch.Tensor] = []
        args_t = _materialise(list(sample.args), g, layout, tensors)
        kwargs_t = _materialise(dict(sample.kwargs), g, layout, tensors)
        if layout == "noncontig" and all(t.is_contiguous() for t in tensors):
            continue  # nothing non-contiguous to try
        eager = op(*_fill(args_t, tensors), **_fill(kwargs_t, tensors))
        gm = build_graph(op, args_t, kwargs_t, tensors, eager, sample.outputs)
        compiled = compile_fx(gm, tensors, Options(target=target, budget=2))
        got = list(compiled(*tensors))
        want = _as_list(eager, sample.outputs)
        ref = want
        if sample.f64 and any(t.dtype == torch.float32 for t in tensors):
            t64 = [_f64(t) for t in tensors]
            ref = _as_list(op(*_fill(args_t, t64), **_fill(kwargs_t, t64)), sample.outputs)
        assert len(got) == len(want), f"{name}: {len(got)} outputs, eager has {len(want)}"
        for j, (o, w, r) in enumerate(zip(got, want, ref)):
            what = f"{name} [{sample.name or 'sample'}] {layout} output {j}"
            if not isinstance(w, torch.Tensor):
                assert o == w, f"{what}: {o!r} != eager {w!r}"
                continue
            assert isinstance(o, torch.Tensor), f"{what}: got {type(o).__name__}, not a tensor"
            assert o.dtype == w.dtype, f"{what}: dtype {o.dtype} != eager {w.dtype}"
            assert tuple(o.shape) == tuple(w.shape), f"{what}: shape {tuple(o.shape)} != eager {tuple(w.shape)}"
            if sample.check == "meta":
                continue
            if not w.dtype.is_floating_point:
                np.testing.assert_array_equal(o.numpy(), w.numpy(), err_msg=what)
                continue
            rtol, atol = sample.tol
            np.testing.assert_allclose(o.double().numpy(), r.double().numpy(), rtol=rtol, atol=atol, equal_nan=True,
                                       err_msg=what)
