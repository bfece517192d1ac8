"""The reference runtime: torch inputs, fresh outputs, views read through ``read_view``, liveness."""

from __future__ import annotations

import tracemalloc

import ml_dtypes
import numpy as np
import pytest
import torch

import lightspeed as ls
from lightspeed.backends.numpy_views import read_view
from lightspeed.backends.reference import ReferenceProgram
from lightspeed.shape import ShapeTracker

F8 = ml_dtypes.float8_e4m3fn

BF16 = np.dtype(ml_dtypes.bfloat16)


def _bf16_bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(BF16)


# ---------------------------------------------------------------------------- torch inputs
def test_torch_tensor_inputs():
    g = ls.Graph()
    x = g.input("x", ("n", 3))
    i = g.input("i", ("n", 3), ls.int64)
    b = g.input("b", (3,), ls.bfloat16)
    f8 = g.input("f8", (3,), ls.float8_e4m3)
    g.output("y", x * 2 + i.to(ls.float32))
    g.output("b", b * 2)
    g.output("f8", f8.to(ls.float32))
    prog = g.compile(backend="reference")
    torch.manual_seed(0)
    xt = torch.randn(4, 3, requires_grad=True)  # detached by the runtime
    it = torch.arange(12).reshape(3, 4).T  # a non-contiguous tensor
    bt = torch.tensor([1.5, -2.25, 3.0e5], dtype=torch.bfloat16)
    f8t = torch.tensor([0.5, -448.0, 3.0]).to(torch.float8_e4m3fn)
    out = prog(x=xt, i=it, b=bt, f8=f8t)
    assert all(isinstance(v, torch.Tensor) for v in out.values())  # outputs come back as the caller's kind
    expect = (xt.detach() * 2 + it.float()).numpy()
    np.testing.assert_allclose(out["y"].numpy(), expect, rtol=1e-6)
    assert out["b"].dtype == torch.bfloat16
    assert torch.equal(out["b"], bt * 2)
    np.testing.assert_array_equal(out["f8"].numpy(), f8t.float().numpy())
    # numpy inputs give numpy outputs, with the same values
    out_np = prog(x=xt.detach().numpy(), i=it.numpy(), b=_bf16_bits(bt), f8=f8t.float().numpy().astype(F8))
    assert out_np["b"].dtype == BF16
    np.testing.assert_array_equal(out_np["b"], _bf16_bits(bt * 2))
    for k in out:
        np.testing.assert_array_equal(out_np[k].astype(np.float64), out[k].float().numpy().astype(np.float64))


def test_torch_input_of_the_wrong_dtype_is_refused():
    g = ls.Graph()
    g.output("o", g.input("b", (2,), ls.bfloat16))
    with pytest.raises(ls.InputError, match="bfloat16.*float16"):
        g.compile(backend="reference")(b=torch.zeros(2, dtype=torch.float16))


# ---------------------------------------------------------------------------- fresh outputs
def test_outputs_are_fresh_arrays():
    g = ls.Graph()
    x = g.input("x", (2, 3))
    g.output("same", x)  # an output that is the input itself
    g.output("view", x.permute(1, 0))  # an output that is a view of the input
    g.output("y", x.sqrt())
    g.output("y2", x.sqrt())  # the same node under two names
    prog = g.compile(backend="reference")
    xv = np.arange(6, dtype=np.float32).reshape(2, 3)
    keep = xv.copy()
    out1 = prog(x=xv)
    assert not np.shares_memory(out1["same"], xv) and not np.shares_memory(out1["view"], xv)
    assert not np.shares_memory(out1["y"], out1["y2"])
    np.testing.assert_array_equal(out1["view"], keep.T)
    for a in out1.values():
        assert a.flags.writeable and a.flags.c_contiguous
        a[...] = -1  # mutate every output
    np.testing.assert_array_equal(xv, keep)  # the input is untouched
    out2 = prog(x=xv)  # and a second call is unaffected
    np.testing.assert_array_equal(out2["same"], keep)
    np.testing.assert_array_equal(out2["view"], keep.T)
    np.testing.assert_array_equal(out2["y"], np.sqrt(keep))
    np.testing.assert_array_equal(out2["y2"], np.sqrt(keep))
    # mutating the input after a call does not change earlier outputs
    xv[...] = 100
    np.testing.assert_array_equal(out2["same"], keep)


# ---------------------------------------------------------------------------- views
def _buf(shape):
    return np.arange(int(np.prod(shape)), dtype=np.int64) * 10 + 1


def test_read_view_basic_movements():
    base = _buf((3, 4))
    a = base.reshape(3, 4)
    st = ShapeTracker.contiguous((3, 4))
    cases = [
        (st.permute((1, 0)), a.T),
        (st.slice([(1, 3, 1), (0, 4, 2)]), a[1:3, 0:4:2]),
        (st.slice([(0, 3, 2), (1, 4, 3)]), a[0:3:2, 1:4:3]),
        (st.pad([(1, 0), (2, 1)]), np.pad(a, [(1, 0), (2, 1)])),
        (st.flip([0]), a[::-1]),
        (st.flip([0, 1]), a[::-1, ::-1]),
        (st.pad([(1, 2), (0, 1)]).flip([0]), np.pad(a, [(1, 2), (0, 1)])[::-1]),
        (st.pad([(2, 2), (2, 2)]).slice([(1, 6, 2), (3, 7, 1)]), np.pad(a, 2)[1:6:2, 3:7]),
        (st.permute((1, 0)).reshape((2, 6)), a.T.reshape(2, 6)),  # needs a second view
        (st.reshape((3, 1, 4)).expand((3, 5, 4)), np.broadcast_to(a[:, None], (3, 5, 4))),
        (st.unfold(1, 2, 1), torch.from_numpy(a).unfold(1, 2, 1).numpy()),
        (st.flip([1]).unfold(1, 3, 1), torch.from_numpy(a[:, ::-1].copy()).unfold(1, 3, 1).numpy()),
    ]
    for k, (view, expect) in enumerate(cases):
        assert not view.is_contiguous, k
        got = read_view(base, view, {})
        assert got.shape == expect.shape, k
        np.testing.assert_array_equal(got, expect, err_msg=f"case {k}: {view}")


def test_read_view_symbolic_shapes():
    st = ShapeTracker.contiguous(("n", 4))
    views = {
        "permute": (st.permute((1, 0)), lambda a: a.T),
        "slice": (st.slice([(1, "n", 1), (1, 3, 1)]), lambda a: a[1:, 1:3]),
        "pad": (st.pad([(0, 1), (1, 1)]), lambda a: np.pad(a, [(0, 1), (1, 1)])),
        "flip": (st.flip([0]), lambda a: a[::-1]),
        "pad+flip": (st.pad([(2, 0), (0, 0)]).flip([0]), lambda a: np.pad(a, [(2, 0), (0, 0)])[::-1]),
    }
    for n in (1, 3, 6):
        base = _buf((n, 4))
        for name, (view, fn) in views.items():
            np.testing.assert_array_equal(read_view(base, view, {"n": n}), fn(base.reshape(n, 4)), err_msg=name)


def _random_chain(rng, shape):
    """A random sequence of movements applied to a ShapeTracker and to a numpy array in lockstep."""
    arr = _buf(shape).reshape(shape)
    base = arr.reshape(-1)
    st = ShapeTracker.contiguous(shape)
    for _ in range(rng.integers(1, 6)):
        nd = arr.ndim
        kind = rng.choice(["permute", "slice", "pad", "flip", "reshape", "expand"])
        if kind == "permute":
            order = tuple(int(i) for i in rng.permutation(nd))
            st, arr = st.permute(order), arr.transpose(order)
        elif kind == "slice":
            bounds = []
            for d in arr.shape:
                lo = int(rng.integers(0, d + 1))
                hi = int(rng.integers(lo, d + 1))
                bounds.append((lo, hi, int(rng.integers(1, 4))))
            st = st.slice(bounds)
            arr = arr[tuple(slice(lo, hi, s) for lo, hi, s in bounds)]
        elif kind == "pad":
            pads = [(int(rng.integers(0, 3)), int(rng.integers(0, 3))) for _ in range(nd)]
            st, arr = st.pad(pads), np.pad(arr, pads)
        elif kind == "flip":
            axes = [k for k in range(nd) if rng.random() < 0.5]
            st, arr = st.flip(axes), np.flip(arr, axes) if axes else arr
        elif kind == "reshape":
            n = arr.size
            if n == 0 or n > 400:
                continue
            divs = [d for d in range(1, n + 1) if n % d == 0]
            d0 = int(rng.choice(divs))
            new = (d0, n // d0) if rng.random() < 0.7 else (n,)
            st, arr = st.reshape(new), arr.reshape(new)
        else:  # expand a size-1 axis, inserting one if there is none
            if 1 not in arr.shape:
                new = (1, *arr.shape)
                st, arr = st.reshape(new), arr.reshape(new)
            k = arr.shape.index(1)
            new = arr.shape[:k] + (int(rng.integers(1, 4)),) + arr.shape[k + 1:]
            st, arr = st.expand(new), np.broadcast_to(arr, new)
    return base, st, arr


def test_read_view_random_movement_chains():
    rng = np.random.default_rng(1234)
    for trial in range(300):
        shape = tuple(int(d) for d in rng.integers(1, 5, rng.integers(1, 4)))
        base, st, expect = _random_chain(rng, shape)
        got = read_view(base, st, {})
        assert got.shape == expect.shape, (trial, st)
        np.testing.assert_array_equal(got, expect, err_msg=f"trial {trial}: {st}")


def test_views_end_to_end_through_ops():
    g = ls.Graph()
    x = g.input("x", ("n", 5))
    g.output("permute", x.permute(1, 0).exp2())
    g.output("slice", x[1:, ::2] * 3)
    g.output("pad", ls.pad(x, (2, 1, 1, 0)) + 1)
    g.output("flip", x.flip(0).flip(1).sqrt())
    g.output("combo", ls.pad(x.permute(1, 0)[1:4], (1, 1)).flip(1).reshape(-1) * 1)
    prog = g.compile(backend="reference")
    for n in (2, 4):
        xv = np.arange(n * 5, dtype=np.float32).reshape(n, 5) / 4
        xt = torch.from_numpy(xv)
        out = prog(x=xv)
        np.testing.assert_allclose(out["permute"], np.exp2(xv.T), rtol=1e-6)
        np.testing.assert_array_equal(out["slice"], xv[1:, ::2] * 3)
        np.testing.assert_array_equal(out["pad"], torch.nn.functional.pad(xt, (2, 1, 1, 0)).numpy() + 1)
        np.testing.assert_allclose(out["flip"], np.sqrt(xv[::-1, ::-1]), rtol=1e-6)
        combo = torch.nn.functional.pad(xt.T[1:4], (1, 1)).flip(1).reshape(-1)
        np.testing.assert_array_equal(out["combo"], combo.numpy())


def test_zero_size_views():
    # regression: a masked view with a constant 0 dim used to build `z % 0` and crash
    g = ls.Graph()
    x = g.input("x", (3, 1, 4))
    g.output("o", ls.pad(x[1:1, 1:1], (0, 1)).sqrt())
    g.output("p", x[2:2].permute(2, 0, 1).flip(0) * 2)
    out = g.compile(backend="reference")(x=np.ones((3, 1, 4), np.float32))
    assert out["o"].shape == (0, 0, 5) and out["p"].shape == (4, 0, 1)
    st = ShapeTracker.contiguous((3, 1, 4)).slice([(1, 1, 1), (1, 1, 1), (0, 4, 1)]).pad([(0, 0), (0, 0), (0, 1)])
    assert read_view(_buf((3, 1, 4)), st, {}).shape == (0, 0, 5)


# ---------------------------------------------------------------------------- liveness
def _chain_graph(depth: int, n: int):
    g = ls.Graph()
    x = g.input("x", (n,))
    h = x
    for _ in range(depth):
        h = g.add_node("Sin", [h])
    g.output("y", h)
    return g


def _check_plan(prog: ReferenceProgram) -> None:
    g = prog.graph
    pos = {nid: k for k, nid in enumerate(prog.order)}
    freed = [src for srcs in prog.free_after.values() for src in srcs]
    assert len(freed) == len(set(freed)), "a value is freed twice"
    non_outputs = {i for i in prog.order if g.nodes[i].op.name != "Output"}
    assert set(freed) == non_outputs  # every intermediate (and input) is freed, outputs are returned
    for at, srcs in prog.free_after.items():
        for src in srcs:
            consumers = [i for i in prog.order if any(s == src for s, _ in g.nodes[i].inputs)]
            assert pos[at] == max(pos[c] for c in consumers), (src, at)  # freed right after the last use
            assert pos[src] < pos[at]


def test_liveness_plan_frees_every_non_output_node():
    g = ls.Graph()
    x = g.input("x", ("b", 8))
    w = g.input("w", (8, 8))
    h = x
    for _ in range(4):
        h = h + ls.rms_norm(h @ w, 8).silu()  # x/h live across a whole block (residual)
    g.output("h", h)
    g.output("first", x.sum(-1))  # x is also used at the very end
    prog = g.compile(backend="reference")
    _check_plan(prog)
    _check_plan(_chain_graph(5, 4).compile(backend="reference"))
    x_node = g.inputs["x"]
    last = max(i for i in prog.order if any(s == x_node for s, _ in g.nodes[i].inputs))
    assert x_node in prog.free_after[last]
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((3, 8)).astype(np.float32)
    wv = (rng.standard_normal((8, 8)) / 3).astype(np.float32)
    out = prog(x=xv, w=wv)
    ref = torch.from_numpy(xv).double()
    for _ in range(4):
        ref = ref + torch.nn.functional.silu(torch.nn.functional.rms_norm(ref @ torch.from_numpy(wv).double(), (8,)))
    np.testing.assert_allclose(out["h"], ref.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out["first"], xv.sum(-1), rtol=1e-5)


def _peak_bytes(prog, **inputs) -> tuple[int, dict]:
    prog(**inputs)  # warm up (imports, index caches)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        out = prog(**inputs)
        return tracemalloc.get_traced_memory()[1], out
    finally:
        tracemalloc.stop()


def test_memory_is_freed_after_last_use():
    depth, n = 24, 1 << 20  # 24 intermediates of 4 MiB each
    xv = np.full(n, 0.5, np.float32)
    peak, out = _peak_bytes(_chain_graph(depth, n).compile(backend="reference"), x=xv)
    expect = np.full(n, 0.5, np.float64)
    for _ in range(depth):
        expect = np.sin(expect.astype(np.float32)).astype(np.float64)
    np.testing.assert_allclose(out["y"], expect, rtol=1e-6)
    # holding every intermediate would need ~24 * 4 MiB; freeing keeps a handful alive
    assert peak < 6 * 4 * n, f"peak {peak / 2**20:.1f} MiB"
    # control: the same program with its liveness plan emptied does hold everything
    leaky = _chain_graph(depth, n).compile(backend="reference")
    leaky.free_after = {}
    leaky_peak, _ = _peak_bytes(leaky, x=xv)
    assert leaky_peak > depth * 4 * n * 0.9, f"control peak {leaky_peak / 2**20:.1f} MiB"
