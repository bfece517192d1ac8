"""``ls.grad`` against ``torch.autograd`` in float64: every op of the op table with float inputs and
float outputs, in every input layout (contiguous, permuted, sliced: gradients carried back through
views), on the reference runtime; a loss that weighs every output element differently."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import lightspeed as ls
from lightspeed.autograd import NOT_DIFFERENTIABLE, VJPS, grad
from lightspeed.primitives import COMPUTE_PRIMITIVES
from tests.hl.optable import T, all_cases, build_inputs, feed

F64 = ls.float64
ROWS = [(f"{c.id}-{layout}", c, layout) for c in all_cases() if F64 in c.dtypes and not c.xfail
        for layout in c.layouts]
# ops computed by an approximation (erf: Abramowitz & Stegun 7.1.26, max error 1.5e-7; gelu through
# it): the gradient is the approximation's, ~5e-6 from the exact derivative torch takes
APPROXIMATE = {"erf": (1e-5, 1e-5), "gelu": (1e-5, 1e-5)}
# inputs torch refuses to differentiate (batch_norm's running statistics), by op
NO_GRAD_INPUTS = {"batch_norm": {1, 2}}


def test_every_primitive_has_a_vjp_or_is_declared_not_differentiable():
    missing = [p for p in COMPUTE_PRIMITIVES if p not in VJPS and p not in NOT_DIFFERENTIABLE]
    assert not missing, f"primitives without a vector-Jacobian product: {missing}"


CPU_ROWS = [r for r in ROWS if r[2] == "contiguous"]


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_gradients_match_torch_autograd(row):
    check_gradients(*row[1:], "reference")


@pytest.mark.parametrize("row", CPU_ROWS, ids=[r[0] for r in CPU_ROWS])
def test_gradients_on_the_cpu_backend(row):
    """The backward graphs searched and run by the cpu backend (fused regions, matmuls)."""
    check_gradients(*row[1:], "cpu")


@pytest.mark.slow
@pytest.mark.parametrize("row", CPU_ROWS, ids=[r[0] for r in CPU_ROWS])
def test_gradients_on_the_native_backend(row):
    from lightspeed.backends import get_backend

    if not get_backend("native").available():
        pytest.skip("no C compiler")
    check_gradients(*row[1:], "native")


def test_grad_checks_its_arguments():
    g = ls.Graph()
    x = g.input("x", (3,))
    i = g.input("i", (3,), ls.int64)
    with pytest.raises(ls.InputError, match="one element"):
        grad(x * 2.0, [x])
    with pytest.raises(ls.InputError, match="sequence"):
        grad((x * x).sum(), x)
    with pytest.raises(ls.InputError, match="int64"):
        grad((x * x).sum(), [i])
    other = ls.Graph().input("y", (3,))
    with pytest.raises(ls.InputError, match="another graph"):
        grad((x * x).sum(), [other])


def test_a_tensor_the_loss_does_not_read_gets_zeros_and_symbolic_dims_stay():
    g = ls.Graph()
    x, y = g.input("x", ("n", 4)), g.input("y", (2,))
    dx, dy = ls.grad((x * x).sum(), [x, y])
    assert tuple(map(str, dx.shape)) == ("n", "4")
    g.output("dx", dx)
    g.output("dy", dy)
    prog = g.compile(backend="reference")
    for n in (1, 5):
        a = np.arange(4 * n, dtype=np.float32).reshape(n, 4)
        out = prog(x=a, y=np.ones(2, np.float32))
        np.testing.assert_allclose(out["dx"], 2 * a)
        np.testing.assert_array_equal(out["dy"], np.zeros(2, np.float32))


def check_gradients(case, layout, backend):
    sample = case.samples[0]
    dims = sample.dims[0]
    g = ls.Graph()
    operands, feeders = build_inputs(case, sample, F64, layout, g)
    outs = case.ls_fn(*operands, **sample.kwargs)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    floats = [o for o in outs if isinstance(o, ls.GraphTensor) and o.dtype.is_float]
    wrt = [(k, o) for k, (o, spec) in enumerate(zip(operands, sample.inputs))
           if isinstance(spec, T) and isinstance(o, ls.GraphTensor) and o.dtype.is_float
           and k not in NO_GRAD_INPUTS.get(case.op, ())]
    if not floats or not wrt:
        pytest.skip("no float input or no float output: nothing to differentiate")
    weights = [g.input(f"w{j}", o.shape, F64) for j, o in enumerate(floats)]
    loss = None
    for o, w in zip(floats, weights):
        term = (o * w).sum()
        loss = term if loss is None else loss + term
    grads = grad(loss, [o for _, o in wrt])
    for k, d in zip((k for k, _ in wrt), grads):
        g.output(f"d{k}", d)
    prog = g.compile(backend=backend) if backend == "reference" else g.compile(
        backend, search=ls.SearchOptions(budget=2, seed=0, progress=False))
    rng = np.random.default_rng(0)
    logical, physical = feed(rng, sample, F64, feeders, dims)
    wv = {f"w{j}": rng.standard_normal(tuple(int(d.evaluate(dims)) for d in o.shape)) for j, o in enumerate(floats)}
    got = prog({**physical, **wv}, dims=dims or None)
    # torch: the same loss, float64, on the logical inputs
    args, leaves = [], {}
    for k, (spec, a) in enumerate(zip(sample.inputs, logical)):
        if isinstance(spec, T) and np.asarray(a).dtype.kind == "f" and k not in NO_GRAD_INPUTS.get(case.op, ()):
            t = torch.tensor(np.asarray(a, np.float64), requires_grad=True)
            leaves[k] = t
            args.append(t)
        elif isinstance(spec, T):
            args.append(torch.from_numpy(np.asarray(a)))
        else:
            args.append(a)
    kwargs = sample.kwargs if sample.torch_kwargs is None else sample.torch_kwargs
    tout = case.torch_fn(*args, **kwargs)
    touts = [o for o in (list(tout) if isinstance(tout, (tuple, list)) else [tout])
             if isinstance(o, torch.Tensor) and o.is_floating_point()]
    tloss = sum((o * torch.from_numpy(wv[f"w{j}"])).sum() for j, o in enumerate(touts))
    if not isinstance(tloss, torch.Tensor) or not tloss.requires_grad:
        pytest.skip("torch gives this op no gradient")
    tgrads = torch.autograd.grad(tloss, [leaves[k] for k, _ in wrt], allow_unused=True)
    for (k, _), tg in zip(wrt, tgrads):
        want = np.zeros(leaves[k].shape) if tg is None else tg.numpy()
        rtol, atol = APPROXIMATE.get(case.op, (1e-6, 1e-9))
        np.testing.assert_allclose(np.asarray(got[f"d{k}"]), want, rtol=rtol, atol=atol,
                                   err_msg=f"{case.id} {layout}: d input {k}")
