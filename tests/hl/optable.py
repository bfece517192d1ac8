"""The declarative op table that drives the high-level op tests (in the spirit of PyTorch's OpInfo).

An :class:`OpCase` names a registered high-level op, how to call it in lightspeed and in PyTorch,
and a list of :class:`Sample` inputs.  :func:`run_sample` builds a graph, runs it on a backend
(the reference runtime by default) for every dim binding and every input layout, and compares
with PyTorch eager, computed in float64 where ``ref_f64`` is set.

Layouts: ``contiguous`` feeds inputs as declared; ``permuted`` declares each float input of rank
>= 2 with its dims reversed and permutes it back inside the graph; ``sliced`` declares the last
dim doubled and takes every second element; so every op also reads non-contiguous views.

Cases live in ``cases_*.py`` files beside this one, each exporting ``CASES``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import lightspeed as ls
from lightspeed.dtypes import DType

TORCH_DTYPES = {
    "float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}

# default tolerances by dtype: (rtol, atol)
TOLERANCES = {
    "float64": (1e-10, 1e-12),
    "float32": (1e-5, 1e-6),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}


@dataclass
class T:
    """An input of a sample: shape (ints and symbol names), dtype (None = the case's dtype), and
    how to draw values: 'normal', 'positive', 'uniform', 'int', 'bool', 'index:N' (ints in
    [0, N)), or a callable (rng, shape, np_dtype) -> array."""

    shape: Sequence[int | str]
    dtype: DType | None = None
    gen: str | Callable = "normal"
    noncontig: bool = True


@dataclass
class Sample:
    inputs: Sequence[T | Any]  # T for tensor inputs; anything else is passed as-is (a Python scalar)
    kwargs: dict = field(default_factory=dict)
    dims: Sequence[dict[str, int]] = ({},)  # one run per binding of the sample's symbols
    name: str = ""
    torch_kwargs: dict | None = None  # if the torch call takes different kwargs


@dataclass
class OpCase:
    op: str  # name in lightspeed.hl.HL_OPS
    ls_fn: Callable
    torch_fn: Callable
    samples: Sequence[Sample]
    dtypes: Sequence[DType] = (ls.float32, ls.float64)
    ref_f64: bool = True
    tol: dict[str, tuple[float, float]] = field(default_factory=dict)
    layouts: Sequence[str] = ("contiguous", "permuted", "sliced")
    variant: str = ""  # distinguishes several cases of one op
    xfail: str | None = None  # expected failures are data: the reason

    @property
    def id(self) -> str:
        return self.op + (f"[{self.variant}]" if self.variant else "")


def _concrete(shape: Sequence[int | str], dims: dict[str, int]) -> tuple[int, ...]:
    return tuple(int(ls.symbolic.as_expr(d).evaluate(dims)) for d in shape)


def draw(rng: np.random.Generator, spec: T, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    g = spec.gen
    if callable(g):
        return np.asarray(g(rng, shape, dtype.np)).astype(dtype.np)
    if dtype.is_bool or g == "bool":
        return rng.random(shape) < 0.5
    if isinstance(g, str) and g.startswith("index:"):
        n = int(g.split(":")[1])
        return rng.integers(0, n, size=shape).astype(dtype.np)
    if dtype.is_int or g == "int":
        lo = 0 if dtype.name == "uint8" else -20
        return rng.integers(lo, 20, size=shape).astype(dtype.np)
    if g == "positive":
        return (rng.random(shape) * 2 + 0.1).astype(dtype.np)
    if g == "uniform":
        return (rng.random(shape) * 2 - 1).astype(dtype.np)
    return rng.standard_normal(shape).astype(dtype.np)


def _to_torch(a: np.ndarray) -> torch.Tensor:
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.array(a, copy=True, order="C"))  # keeps 0-d arrays 0-d


def _from_torch(t: Any) -> np.ndarray:
    if isinstance(t, torch.Tensor):
        if t.dtype == torch.bfloat16:
            return t.float().numpy()
        return t.detach().numpy()
    return np.asarray(t)


def _as_list(x: Any) -> list:
    if isinstance(x, (tuple, list)):
        return list(x)
    return [x]


def build_inputs(case: OpCase, sample: Sample, dtype: DType, layout: str, g: ls.Graph):
    """Declare graph inputs for a sample in a layout; returns (graph operands, feeders)."""
    operands, feeders = [], []
    for i, spec in enumerate(sample.inputs):
        if not isinstance(spec, T):
            operands.append(spec)
            feeders.append(None)
            continue
        idt = spec.dtype or dtype
        name = f"in{i}"
        rank = len(spec.shape)
        if layout == "permuted" and spec.noncontig and rank >= 2:
            t = g.input(name, tuple(reversed(spec.shape)), idt).permute(*reversed(range(rank)))
            feeders.append(("permuted", name))
        elif layout == "sliced" and spec.noncontig and rank >= 1:
            shp = list(spec.shape)
            shp[-1] = ls.symbolic.as_expr(shp[-1]) * 2
            t = g.input(name, tuple(shp), idt)[..., ::2]
            feeders.append(("sliced", name))
        else:
            t = g.input(name, tuple(spec.shape), idt)
            feeders.append(("contiguous", name))
        operands.append(t)
    return operands, feeders


def feed(rng, sample: Sample, dtype: DType, feeders, dims: dict[str, int]):
    """Draw logical input arrays and the physical arrays that realise them in each layout."""
    logical, physical = [], {}
    for spec, fd in zip(sample.inputs, feeders):
        if fd is None:
            logical.append(spec)
            continue
        idt = spec.dtype or dtype
        shape = _concrete(spec.shape, dims)
        a = draw(rng, spec, shape, idt)
        logical.append(a)
        how, name = fd
        if how == "permuted":
            physical[name] = np.ascontiguousarray(a.transpose(*reversed(range(a.ndim))))
        elif how == "sliced":
            wide = np.zeros(shape[:-1] + (shape[-1] * 2,), dtype=a.dtype)
            wide[..., ::2] = a
            wide[..., 1::2] = draw(rng, spec, shape, idt)  # garbage the view must skip
            physical[name] = wide
        else:
            physical[name] = a
    return logical, physical


def torch_reference(case: OpCase, sample: Sample, dtype: DType, logical: list) -> list[np.ndarray]:
    args = []
    for spec, a in zip(sample.inputs, logical):
        if isinstance(spec, T):
            t = _to_torch(a)
            if case.ref_f64 and t.is_floating_point():
                t = t.double()
            args.append(t)
        else:
            args.append(a)
    kwargs = sample.kwargs if sample.torch_kwargs is None else sample.torch_kwargs
    out = case.torch_fn(*args, **kwargs)
    return [_from_torch(o) for o in _as_list(out)]


def check_close(ours: np.ndarray, ref: np.ndarray, dtype: DType, case: OpCase, what: str) -> None:
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} != reference {ref.shape}"
    if ours.dtype.kind in "biu" and ref.dtype.kind in "biu":
        np.testing.assert_array_equal(ours, ref, err_msg=what)
        return
    key = dtype.name if dtype.is_float else "float32"
    if ours.dtype.kind == "f" or ours.dtype.name == "bfloat16":
        key = ours.dtype.name if ours.dtype.name in TOLERANCES else key
    rtol, atol = case.tol.get(key, TOLERANCES.get(key, TOLERANCES["float32"]))
    np.testing.assert_allclose(ours.astype(np.float64), ref.astype(np.float64), rtol=rtol, atol=atol,
                               equal_nan=True, err_msg=what)


def run_sample(case: OpCase, sample: Sample, dtype: DType, layout: str, backend: str = "reference",
               seed: int = 0) -> None:
    g = ls.Graph()
    operands, feeders = build_inputs(case, sample, dtype, layout, g)
    result = case.ls_fn(*operands, **sample.kwargs)
    outs = _as_list(result)
    for j, o in enumerate(outs):
        g.output(f"out{j}", o)
    prog = g.compile(backend=backend)
    rng = np.random.default_rng(seed)
    for dims in sample.dims:
        logical, physical = feed(rng, sample, dtype, feeders, dims)
        got = prog(physical, dims=dims or None)
        refs = torch_reference(case, sample, dtype, logical)
        assert len(refs) == len(outs), f"{case.id}: {len(outs)} outputs vs torch's {len(refs)}"
        for j, ref in enumerate(refs):
            what = f"{case.id} {sample.name} dtype={dtype.name} layout={layout} dims={dims} output {j}"
            ours = got[f"out{j}"]
            assert ours.dtype == outs[j].dtype.np, f"{what}: dtype {ours.dtype} vs declared {outs[j].dtype}"
            if ref.dtype == np.bool_ or ours.dtype == np.bool_:
                np.testing.assert_array_equal(ours.astype(bool), ref.astype(bool), err_msg=what)
            else:
                check_close(ours, ref, dtype, case, what)


def all_cases() -> list[OpCase]:
    """Every OpCase from the cases_*.py modules beside this file."""
    import tests.hl as pkg

    cases: list[OpCase] = []
    for m in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if m.name.startswith("cases_"):
            cases.extend(importlib.import_module(f"tests.hl.{m.name}").CASES)
    return cases


def expand(cases: Sequence[OpCase]):
    """(id, case, sample, dtype, layout) rows for pytest parametrisation."""
    rows = []
    for c in cases:
        for si, s in enumerate(c.samples):
            for d in c.dtypes:
                for lay in c.layouts:
                    if lay != "contiguous" and not any(isinstance(x, T) and x.noncontig for x in s.inputs):
                        continue
                    sid = s.name or str(si)
                    rows.append((f"{c.id}-{sid}-{d.name}-{lay}", c, s, d, lay))
    return rows
