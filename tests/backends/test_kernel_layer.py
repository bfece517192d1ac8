"""The kernel layer's contracts (backends/codegen/kernels, lowering.py): launch shapes as
functions of the dims, the op-to-family registry, a backend's op table, and a kernel with its own
launch shape (dynamic shared memory past the 48 KiB opt-in, a thread-block cluster) lowered
through an op table, compiled by NVRTC here and run on the GPU where there is one."""

from __future__ import annotations

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends import get_backend
from lightspeed.backends.codegen.kernels import KERNELS, KernelSpec, LaunchShape, render
from lightspeed.backends.codegen.kernels.spec import BLOCKS_PER_SM, grid_stride
from lightspeed.backends.codegen.lowering import Lowered, OpTable, generated
from lightspeed.primitives import PRIMITIVES
from lightspeed.symbolic import const, sym


def test_grid_stride_launch_is_capped_and_sized_at_the_bounds():
    shape = grid_stride("elementwise", sym("s") * 4, 256, (256, 1, 1))
    assert shape.grid_at({"s": 1}, 132) == (1, 1, 1)  # never an empty grid
    assert shape.grid_at({"s": 640}, 132) == (10, 1, 1)
    assert shape.grid_at({"s": 10 ** 6}, 132) == (132 * BLOCKS_PER_SM, 1, 1)  # the loop covers the rest
    assert shape.threads == 256


def test_an_explicit_grid_rounds_up_to_whole_clusters():
    shape = LaunchShape("rows", (sym("s"), sym("h") * 2, const(1)), (128, 1, 1), shared_bytes=1 << 16,
                        cluster=(2, 1, 1))
    assert shape.grid_at({"s": 5, "h": 3}, 132) == (6, 6, 1)  # x to a multiple of the cluster, not capped
    assert shape.grid_at({"s": 0, "h": 0}, 132) == (2, 1, 1)


def test_every_computing_primitive_has_a_kernel_family():
    computing = {n for n in PRIMITIVES if n not in ("Input", "Constant")}
    missing = computing - set(KERNELS)
    assert not missing, missing
    assert {"Fused", "ScatterInPlace", "Matmul", "MatmulAdd"} <= set(KERNELS)


def test_an_op_table_names_an_op_it_cannot_lower():
    g = ls.Graph()
    g.output("y", g.input("x", (4,)).exp2())
    lprog = _lprog(get_backend("native"), g)
    op = next(o for o in lprog.ops if o.op not in ("Input", "Output"))
    table = OpTable()
    table.entries.pop(op.op)
    with pytest.raises(ls.LightspeedError, match=f"no lowering for {op.op}"):
        table.lower(op, [lprog.ops[j].dtype for j in op.inputs], "c")
    with pytest.raises(ls.LightspeedError, match="no kernel for Nope"):
        render(type(op)("Nope", {}, (), op.shape, op.dtype), [], "c")


def test_an_entry_overrides_the_generated_kernels_of_an_op():
    """A backend's entry replaces the family's kernels for that op: here the native backend's
    Exp2 lowered through a wrapper that counts calls (the generated kernels still run)."""
    calls = []

    def counted(op, in_dtypes, dialect):
        calls.append(op.op)
        return generated(op, in_dtypes, dialect)

    native = get_backend("native")
    if not native.available():
        pytest.skip("no C compiler")
    g = ls.Graph()
    x = g.input("x", (8,))
    g.output("y", x.exp2())
    lprog = _lprog(native, g)
    from lightspeed.backends.codegen.program import KernelProgram

    prog = KernelProgram(g, lprog, native.executor, backend_name="native",
                         table=native.op_table.extended({"Exp2": counted}))
    xs = np.linspace(-3, 3, 8, dtype=np.float32)
    np.testing.assert_allclose(prog(x=xs)["y"], np.exp2(xs), rtol=1e-6)
    assert calls == ["Exp2"]


# a kernel of its own launch shape: one block per row (a grid of the dims), the row staged in
# 64 KiB of dynamic shared memory (past the 48 KiB a kernel gets without opting in), blocks in
# clusters of two; each row's sum is written only if the cluster really has two blocks
COLS = 16384
ROW_SUM = r"""
extern "C" __global__ void __launch_bounds__(256) KNAME(const long long* T, int dim_0, int buf_out, int buf_in0) {
  LS_KERNEL_BEGIN();  // first: wait for the kernel before this one (prelude/cuda.cuh)
  extern __shared__ float row[];
  const long long rows = T[dim_0];
  const float* in = (const float*)T[buf_in0];
  float* out = (float*)T[buf_out];
  unsigned int ranks;
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(ranks));
  const long long r = blockIdx.x;
  if (r >= rows) return;
  for (int c = threadIdx.x; c < COLS; c += blockDim.x) row[c] = in[r * COLS + c];
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int c = 0; c < COLS; c++) s += row[c];
    out[r] = ranks == 2u ? s : -1.0f;
  }
}
""".replace("COLS", str(COLS))


def _row_sum(op, in_dtypes, dialect):
    assert dialect == "cuda"
    rows = op.shape[0]
    launch = LaunchShape("row_sum", (rows, const(1), const(1)), (256, 1, 1), shared_bytes=COLS * 4,
                         cluster=(2, 1, 1))
    dim = next(iter(rows.free_vars()))
    name = "ls_test_row_sum"
    return Lowered([KernelSpec(name, ROW_SUM.replace("KNAME", name), (dim,), ("out", 0), launch, rows)])


def _row_sum_graph():
    g = ls.Graph()
    g.output("y", g.input("x", ("s", COLS)).sum(-1))
    return g


def test_a_kernel_with_its_own_launch_shape_compiles_for_sm90():
    nvrtc = pytest.importorskip("lightspeed.backends.cuda.nvrtc")
    try:
        nvrtc.nvrtc_version()
    except Exception as e:  # noqa: BLE001 - no NVRTC here
        pytest.skip(f"NVRTC unavailable: {e}")
    from lightspeed.backends.codegen.kernels import module_source

    spec = _row_sum(_reduce_op(_lprog(get_backend("cuda"), _row_sum_graph())), [ls.float32], "cuda")
    image = nvrtc.compile_many([module_source(spec.specs, "cuda")], "sm_90")[0]
    assert len(image) > 1000


def test_a_kernel_with_its_own_launch_shape_runs_on_the_gpu():
    """Grid from the dims (5 rows: 6 blocks, whole clusters), 64 KiB of dynamic shared memory, a
    cluster of two, through the op table, the program and one captured graph."""
    cuda = get_backend("cuda")
    if not cuda.available():
        pytest.skip("no CUDA GPU here")
    from lightspeed.backends.cuda import CudaProgram

    g = _row_sum_graph()
    lprog = _lprog(cuda, g)
    reduce = _reduce_op(lprog).op
    prog = CudaProgram(g, lprog, cuda.executor, backend_name="cuda", table=cuda.op_table.extended({reduce: _row_sum}))
    assert [launch.spec.launch.kind for launch in prog.launches].count("row_sum") == 1
    rng = np.random.default_rng(0)
    for s in (5, 2, 7):
        x = rng.standard_normal((s, COLS)).astype(np.float32)
        y = prog(x=x)["y"]
        np.testing.assert_allclose(y.reshape(s), x.astype(np.float64).sum(-1), rtol=1e-4, atol=1e-3)


def _reduce_op(lprog):
    return next(o for o in lprog.ops if o.op == "SumReduce")


def _lprog(backend, g):
    """The default (primitive-only) candidate of ``g`` on ``backend`` as an LLIR program."""
    from lightspeed.egraph import Candidate
    from lightspeed.egraph.llir import decode_program
    from tests.backends.harness import saturate

    _, enc, index, ser = saturate(backend, g)
    return decode_program(Candidate.default(index), ser, enc.constants, backend.declarations())


def _trackers():
    """Two-view trackers (a view over a view) whose outer view permutes or broadcasts the inner
    view's axes -- a decode step's mask [s, p + s] read per key as [s, 2, 2, p + s] -- and ones
    whose outer view merges or splits axes (the coordinates must be unflattened)."""
    from lightspeed.shape import ShapeTracker
    s, p = sym("s"), sym("p")
    mask = ShapeTracker.contiguous((s, s)).pad(((0, 0), (p, 0)))  # [s, p + s], keys before p open
    yield mask.reshape((s, 1, 1, p + s)).expand((s, 2, 2, p + s))
    yield mask.permute((1, 0)).reshape((p + s, 1, s)).expand((p + s, 3, s))
    yield ShapeTracker.contiguous((s, 4)).pad(((0, 0), (1, 1))).reshape((s, 2, 3))  # split: unflatten
    yield ShapeTracker.contiguous((s, 4)).pad(((0, 0), (1, 1))).reshape((s * 6,))  # merge: unflatten


@pytest.mark.parametrize("k", range(4))
def test_index_at_equals_the_trackers_own_index(k):
    """``index_at`` (per-axis coordinates, taken over directly where a view only permutes or
    broadcasts the one under it) gives the index and validity the tracker's flat-index expressions
    give, at every element for several dim values."""
    import itertools

    from lightspeed.backends.codegen.kernels.writer import index_at
    from lightspeed.symbolic import INDEX_VAR
    st = list(_trackers())[k]
    assert len(st.views) == 2
    names = [f"c{i}" for i in range(len(st.shape))]
    idx, valid = index_at(st, tuple(sym(n) for n in names))
    for s, p in ((1, 0), (3, 2), (4, 5)):
        env = {"s": s, "p": p}
        shape = [int(d.evaluate(env)) for d in st.shape]
        for flat, at in enumerate(itertools.product(*(range(d) for d in shape))):
            e = {**env, **dict(zip(names, at)), INDEX_VAR: flat}
            want_valid = int(st.valid_expr().evaluate(e))
            assert int(valid.evaluate(e)) == want_valid, (k, env, at)
            if want_valid:
                assert int(idx.evaluate(e)) == int(st.index_expr().evaluate(e)), (k, env, at)


def test_index_at_takes_a_broadcast_views_coordinates_without_dividing():
    from lightspeed.backends.codegen.kernels.writer import index_at
    st = next(_trackers())
    idx, valid = index_at(st, tuple(sym(n) for n in ("b", "h", "g", "l")))
    text = f"{idx} {valid}"
    assert "//" not in text and "%" not in text, text


@pytest.mark.skipif(not get_backend("native").available(), reason="no C compiler")
def test_an_output_is_written_by_its_producer_not_copied():
    """An output laid out as its value (a generated kernel's own buffer) is written by that
    kernel into the output's array, read there by the value's other readers, and copied by no
    Output kernel; a second output of the same value, and one read through a view, are copies.
    Values equal numpy's at two row counts, into fresh arrays and into ``out=`` ones."""
    g = ls.Graph()
    x = g.input("x", ("s", 8))
    y = (x * 2.0).exp()
    g.output("y", y)
    g.output("again", y)
    g.output("total", (y + 1.0).sum(-1))
    g.output("t", y.transpose(0, 1))
    prog = g.compile(backend="native", search=ls.SearchOptions(budget=1, seed=0))
    ops = prog.lprog.ops
    copied = {ops[i].args["name"] for launch in prog.launches for i in (launch.merged or (launch.op,))
              if ops[i].op == "Output"}
    assert {ops[o].args["name"] for o in prog.direct} == {"y", "total"}
    assert copied == {"again", "t"}
    rng = np.random.default_rng(0)
    for rows in (3, 5):
        a = rng.standard_normal((rows, 8)).astype(np.float32)
        want = np.exp(a * 2)
        for out in (None, {"y": np.empty((rows, 8), np.float32), "total": np.empty(rows, np.float32)}):
            got = prog({"x": a}, out=out)
            np.testing.assert_allclose(got["y"], want, rtol=1e-6)
            np.testing.assert_array_equal(got["again"], got["y"])
            np.testing.assert_allclose(got["total"], (want + 1).sum(-1), rtol=1e-5)
            np.testing.assert_array_equal(got["t"], np.asarray(got["y"]).T)
            if out is not None:
                assert got["y"] is out["y"] and got["total"] is out["total"]
