"""The native backend's own contract, beyond the conformance suite: what a generated kernel does
where the reference raises (an index outside the gathered tensor reads 0), never a crash of the
process (the C dialect divides with plain C division only where a zero divisor means no work)."""

from __future__ import annotations

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.backends import get_backend

NATIVE = get_backend("native")
pytestmark = pytest.mark.skipif(not NATIVE.available(), reason="no C compiler")


def test_gather_outside_the_tensor_raises_even_from_an_empty_one():
    """An index outside the data raises IndexOutOfRange after the call (as cpu and the reference
    do; it had read 0), also from an empty tensor, where no kernel may divide by its zero dim."""
    from lightspeed.errors import IndexOutOfRange

    g = ls.Graph()
    d, i = g.input("d", ("n", 4)), g.input("i", (3,), ls.int64)
    g.output("y", ls.index_select(d, 0, i))
    prog = g.compile(NATIVE, search=ls.SearchOptions(budget=2, seed=0, progress=False, dims={"n": 5}))
    data = np.arange(20, dtype=np.float32).reshape(5, 4)
    np.testing.assert_array_equal(prog(d=data, i=np.array([4, 0, 2]))["y"], data[[4, 0, 2]])
    with pytest.raises(IndexOutOfRange):
        prog(d=data, i=np.array([4, 7, -1]))
    # a permuted, empty tensor with work to do: no kernel may divide by its zero dim (in C a plain
    # division by zero kills the process)
    g = ls.Graph()
    d, i = g.input("d", ("n", 3)), g.input("i", (2,), ls.int64)
    g.output("y", ls.index_select(d.transpose(0, 1), 1, i))
    prog = g.compile(NATIVE, search=ls.SearchOptions(budget=2, seed=0, progress=False, dims={"n": 5}))
    data = np.arange(15, dtype=np.float32).reshape(5, 3)
    np.testing.assert_array_equal(prog(d=data, i=np.array([4, 1]))["y"], data.T[:, [4, 1]])
    with pytest.raises(IndexOutOfRange):
        prog(d=np.zeros((0, 3), np.float32), i=np.array([0, 1]))
    np.testing.assert_array_equal(prog(d=data, i=np.array([0, 2]))["y"], data.T[:, [0, 2]])


def test_a_program_runs_as_one_c_call():
    from lightspeed.backends.native.executor import PROGRAM

    g = ls.Graph()
    x = g.input("x", ("s", 8))
    g.output("y", (x * 2.0).softmax(-1))
    prog = g.compile(NATIVE, search=ls.SearchOptions(budget=2, seed=0, progress=False))
    assert PROGRAM in prog.handles and len(prog.launches) >= 2
    xs = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)
    want = g.compile(backend="reference")(x=xs)["y"]
    np.testing.assert_allclose(prog(x=xs)["y"], want, rtol=1e-6, atol=1e-7)


def test_loop_nests_index_without_division_and_split_rows_across_threads():
    """Region kernels of the c dialect walk their output as a loop nest: a view's index comes from
    the coordinates (no 64-bit division or modulo per element, which cost ~20 ns each on the
    decode step's attention regions), and the threads' ranges start in the middle of rows."""
    g = ls.Graph()
    x = g.input("x", (3, "p", 7))
    y = g.input("y", (7, "p", 1))
    # permuted and broadcast views, a reduction over the middle axis, shapes that do not divide
    # into the two threads' halves evenly
    g.output("z", (x.permute(2, 1, 0) * 2.0 + y).exp().sum(1, keepdim=True) + x.permute(2, 1, 0).amax(1, keepdim=True))
    prog = g.compile(NATIVE, search=ls.SearchOptions(budget=2, seed=0, progress=False, dims={"p": 5000}))
    for spec in prog.kernels:
        if spec.launch.kind == "elementwise":
            inner = spec.source.split("_ls_j++) {", 1)[1]
            assert "/" not in inner and "%" not in inner and "ls_fdiv" not in inner, spec.source
    rng = np.random.default_rng(0)
    ref = g.compile(backend="reference")
    for p in (1, 4999, 5000):
        xs = rng.standard_normal((3, p, 7)).astype(np.float32)
        ys = rng.standard_normal((7, p, 1)).astype(np.float32) * 0.1
        np.testing.assert_allclose(prog(x=xs, y=ys, dims={"p": p})["z"], ref(x=xs, y=ys, dims={"p": p})["z"],
                                   rtol=2e-5, atol=1e-6)


def test_the_zig_compiler_stands_in_when_the_system_has_none(monkeypatch, tmp_path):
    """No $CC and no cc/gcc/clang on the PATH: the ``ziglang`` wheel's ``zig cc`` builds the kernels
    (without OpenMP there: one thread), and the program computes what numpy does."""
    pytest.importorskip("ziglang")
    import shutil

    from lightspeed.backends.native import executor as host

    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    cc = host.compiler()
    assert cc is not None and cc[1:] == ["-m", "ziglang", "cc"] and NATIVE.available()
    g = ls.Graph()
    x, w = g.input("x", ("s", 64)), g.input("w", (64, 32))
    g.output("y", (x @ w).relu().softmax(-1))
    prog = g.compile(NATIVE, search=ls.SearchOptions(budget=1, seed=0, progress=False))
    rng = np.random.default_rng(0)
    xs, ws = rng.standard_normal((3, 64)).astype(np.float32), rng.standard_normal((64, 32)).astype(np.float32)
    z = np.maximum(xs.astype(np.float64) @ ws, 0)
    want = np.exp(z - z.max(-1, keepdims=True))
    want /= want.sum(-1, keepdims=True)
    np.testing.assert_allclose(prog(x=xs, w=ws)["y"], want, rtol=1e-5, atol=1e-6)
    assert any(" ".join(cc) in key for key in host._openmp)  # its OpenMP support was probed


def test_no_compiler_at_all_means_native_is_unavailable(monkeypatch):
    import importlib.util
    import shutil

    from lightspeed.backends.native import executor as host

    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert host.compiler() is None and not NATIVE.available()


def test_decode_attention_kernels_stream_the_cache_and_split_long_reductions():
    """Decode attention over a position-major cache (p, heads, d): the score product walks the
    cached keys in memory order (positions outermost), weights @ V splits its long reduction into
    fixed chunks (a run-time branch: at short p the row items run), and the softmax's exp2 and
    reductions are the vectorisable forms; every cache length gives the reference's values."""
    g = ls.Graph()
    q, r = g.input("q", (3, 3, 64)), g.input("r", (3, 3, 64))  # (kv head, group, d)
    k, v = g.input("k", ("p", 3, 64)), g.input("v", ("p", 3, 64))
    w = ((q @ k.permute(1, 2, 0)) * 0.125).softmax(-1)
    g.output("y", w @ v.permute(1, 0, 2) + r)
    # the greedy candidate's kernels (the search's pick between it and the primitive-only default
    # is a timing: under load the default can win)
    from lightspeed.egraph.llir import decode_program
    from lightspeed.search import candidates
    from tests.backends.harness import saturate

    _, enc, index, ser = saturate(NATIVE, g)
    greedy = dict(candidates(index, ls.SearchOptions(budget=3, seed=0)))["greedy"]
    prog = NATIVE.lower(g, decode_program(greedy, ser, enc.constants, NATIVE.declarations()))
    sources = "\n".join(spec.source for spec in prog.kernels)
    assert "_ls_part[" in sources and "ls_exp2f(" in sources
    ref = g.compile(backend="reference")
    rng = np.random.default_rng(0)
    for p in (1, 7, 255, 256, 1025):
        ins = {n: rng.standard_normal(s, dtype=np.float32) for n, s in
               (("q", (3, 3, 64)), ("r", (3, 3, 64)), ("k", (p, 3, 64)), ("v", (p, 3, 64)))}
        np.testing.assert_allclose(prog(**ins)["y"], ref(**ins)["y"], rtol=1e-5, atol=1e-6, err_msg=f"p={p}")


def test_exp2_and_reductions_keep_their_special_values():
    """The c dialect's exp2 (a polynomial the compiler vectorises) is within 1 ulp of the exact
    value (float64's, rounded) and
    keeps infinities, NaN, overflow and subnormal results; the 8-lane max and sum reductions
    give numpy's results at every length, NaN winning a max."""
    g = ls.Graph()
    x = g.input("x", ("n",))
    g.output("e", ls.exp2(x))
    prog = g.compile(NATIVE, search=ls.SearchOptions(budget=1, seed=0, progress=False))
    special = np.array([-np.inf, np.inf, np.nan, 128.0, 127.99, -149.5, -126.3, -150.0, -151.0, 0.0, -0.0, 1e-30],
                       np.float32)
    xs = np.concatenate([special, np.random.default_rng(1).uniform(-140, 127, 4096).astype(np.float32)])
    with np.errstate(over="ignore"):
        got, want = prog(x=xs)["e"], np.exp2(xs.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    ulps = np.abs(got[ok].view(np.int32).astype(np.int64) - want[ok].view(np.int32).astype(np.int64))
    assert ulps.max() <= 1, (xs[ok][ulps.argmax()], got[ok][ulps.argmax()], want[ok][ulps.argmax()])
    g = ls.Graph()
    x = g.input("x", (3, "n"))
    g.output("m", x.amax(-1))
    g.output("s", x.sum(-1))
    prog = g.compile(NATIVE, search=ls.SearchOptions(budget=1, seed=0, progress=False))
    rng = np.random.default_rng(2)
    for n in (1, 7, 8, 9, 17, 100):
        xs = rng.standard_normal((3, n)).astype(np.float32)
        xs[1, n // 2] = np.nan
        xs[2, n - 1] = np.inf
        out = prog(x=xs)
        np.testing.assert_array_equal(out["m"], xs.max(-1))
        np.testing.assert_allclose(out["s"], xs.astype(np.float64).sum(-1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("k", [7, 40, 64, 100])  # the 32-wide, 8-wide and scalar parts of the dot
def test_half_precision_dots_widen_eight_at_a_time(dtype, k):
    """Matmul dots on 16-bit float rows load 8 elements as 8 floats (F16C or shifts), accumulate
    in float and round once: within the dtype's rounding of the float64 product of the same
    (rounded) inputs."""
    from tests.backends.test_native_blocks import _matmul_program

    d = getattr(ls, dtype)
    g = ls.Graph()
    x, w = g.input("x", ("s", k), d), g.input("w", (24, k), d)
    g.output("y", x @ w.transpose(0, 1))
    prog = _matmul_program(g, side=1, block=False)
    assert any(f"ls_ld8_{'bf16' if dtype == 'bfloat16' else 'f16'}(" in s.source for s in prog.kernels)
    rng = np.random.default_rng(k)
    xs, ws = (rng.standard_normal(shape).astype(d.np) for shape in ((3, k), (24, k)))
    got = np.asarray(prog(x=xs, w=ws)["y"], np.float64)
    want = xs.astype(np.float64) @ ws.astype(np.float64).T
    tol = 8e-3 if dtype == "bfloat16" else 1e-3
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())


def _compile_spy(tmp_path, monkeypatch) -> list[str]:
    """A private cache folder, native's in-process tables cleared, and the list every C source
    the compiler is given from now on is appended to."""
    from pathlib import Path

    from lightspeed.backends.native import executor as host

    monkeypatch.setenv("LIGHTSPEED_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(host, "_kernels", {})
    monkeypatch.setattr(host, "_libs", {})
    compiled: list[str] = []  # every C source the compiler was given
    real = host.subprocess.run

    def spy(cmd, *args, **kwargs):
        if str(cmd[-2]).endswith("k.c"):
            compiled.append(Path(cmd[-2]).read_text())
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(host.subprocess, "run", spy)
    return compiled


def test_kernels_are_compiled_once_and_found_again_by_name(tmp_path, monkeypatch):
    """A kernel (named by the hash of its text) is compiled once per machine: a second program
    compiles only the kernels no library holds yet, and a fresh process (the in-process tables
    cleared) finds every kernel through the on-disk index and compiles nothing; results match the
    reference throughout."""

    from lightspeed.backends.native import executor as host

    compiled = _compile_spy(tmp_path, monkeypatch)  # every C source the compiler was given

    def graph(extra: bool) -> ls.Graph:
        g = ls.Graph()
        x, w = g.input("x", ("s", 64)), g.input("w", (64, 32))
        y = (x @ w).relu() * 0.5
        g.output("y", y)
        if extra:
            g.output("z", (y.exp() + 1.0).sum(-1))
        return g

    rng = np.random.default_rng(3)
    inputs = {"x": rng.standard_normal((5, 64)).astype(np.float32),
              "w": rng.standard_normal((64, 32)).astype(np.float32)}
    opts = ls.SearchOptions(budget=1, seed=0, progress=False)

    def check(g: ls.Graph, prog) -> None:
        want = g.compile(backend="reference")(inputs)
        got = prog(inputs)
        for k, v in want.items():
            np.testing.assert_allclose(got[k], v, rtol=1e-5, atol=1e-5 * np.abs(v).max())

    first = graph(False).compile(backend="native", search=opts)
    check(graph(False), first)
    names = {s.name for s in first.kernels}
    assert any(n in src for src in compiled for n in names), "the first program compiles its kernels"
    compiled.clear()
    second = graph(True).compile(backend="native", search=opts)
    check(graph(True), second)
    assert names < {s.name for s in second.kernels}
    # only the new kernels (and the runner) were compiled: none of the first program's kernels again
    assert not [n for src in compiled for n in names if f"void {n}(" in src]
    assert any("#include" in src for src in compiled), "the new kernels were compiled"
    # a new process: nothing compiled, every kernel found through the index on disk
    monkeypatch.setattr(host, "_kernels", {})
    monkeypatch.setattr(host, "_libs", {})
    compiled.clear()
    again = graph(True).compile(backend="native", search=opts)
    check(graph(True), again)
    assert compiled == []
    # an index entry naming anything but a library of the cache folder is ignored: compiled again
    victim = sorted(names)[0]
    (entry,) = tmp_path.glob(f"native/index-*/{victim}")
    entry.write_text("../elsewhere/k0123456789abcdef01234567.so")
    monkeypatch.setattr(host, "_kernels", {})
    monkeypatch.setattr(host, "_libs", {})
    again = graph(True).compile(backend="native", search=opts)
    check(graph(True), again)
    assert [src for src in compiled if f"void {victim}(" in src]


def test_a_changed_prelude_compiles_the_kernels_again(tmp_path, monkeypatch):
    """Kernels are found again by name, and a name hashes only the kernel's own text: a prelude
    function changed (a new lightspeed, say) must not leave the old compiled code running -- the
    index is keyed on the preludes' digest too (a stale q16 dot kept its old reductions once)."""

    from lightspeed.backends.codegen.kernels import source
    from lightspeed.backends.native import executor as host

    compiled = _compile_spy(tmp_path, monkeypatch)
    g = ls.Graph()
    x = g.input("x", ("s", 16))
    g.output("y", (x * 3.0).exp().sum(-1))
    xs = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    opts = ls.SearchOptions(budget=1, seed=0, progress=False)
    want = g.compile(backend="reference")({"x": xs})["y"]
    first = g.compile(backend="native", search=opts)
    np.testing.assert_allclose(first({"x": xs})["y"], want, rtol=1e-5)
    names = {s.name for s in first.kernels}
    monkeypatch.setattr(host, "_kernels", {})
    monkeypatch.setattr(host, "_libs", {})
    compiled.clear()
    g.compile(backend="native", search=opts)
    assert compiled == [], "the same preludes: every kernel found through the index"
    read = source._read
    monkeypatch.setattr(source, "_read", lambda name: read(name) + ("\n/* changed */\n" if name == "c.h" else ""))
    monkeypatch.setattr(host, "_kernels", {})
    monkeypatch.setattr(host, "_libs", {})
    again = g.compile(backend="native", search=opts)
    np.testing.assert_allclose(again({"x": xs})["y"], want, rtol=1e-5)
    assert all(any(f"void {n}(" in src and "/* changed */" in src for src in compiled) for n in names)


def test_repeated_calls_reuse_addresses_only_of_the_same_arrays():
    """A repeated call writes the table entries only of inputs that are not the arrays of the last
    call (a decode step passes the same weights and caches every time); a new array, a resident
    input overridden and then restored, a dtype changed in place and an in-place input made
    read-only are all seen, and an array cannot be moved in place while remembered."""
    g = ls.Graph()
    x, w, c = g.input("x", ("s", 4)), g.input("w", (4, 4)), g.input("c", ("n", 4))
    g.output("y", x @ w + c.sum(0))
    prog = g.compile(NATIVE, search=ls.SearchOptions(budget=2, seed=0, progress=False))
    rng = np.random.default_rng(0)
    xa, wa = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 4)).astype(np.float32)
    ca = rng.standard_normal((2, 4)).astype(np.float32)

    def want(x, w, c):
        return x @ w + c.sum(0)

    np.testing.assert_allclose(prog(x=xa, w=wa, c=ca)["y"], want(xa, wa, ca), rtol=1e-5)
    wa[:] = 1.0  # same array, new values: read again
    np.testing.assert_allclose(prog(x=xa, w=wa, c=ca)["y"], want(xa, wa, ca), rtol=1e-5)
    c2 = ca.copy() + 1  # a new array for c
    np.testing.assert_allclose(prog(x=xa, w=wa, c=c2)["y"], want(xa, wa, c2), rtol=1e-5)
    with pytest.raises(ValueError):  # numpy never moves an array another object refers to weakly
        c2.resize((64, 4), refcheck=False)
    with pytest.raises(ls.InputError, match="dtype"):
        bad = xa.copy()
        prog(x=bad, w=wa, c=ca)
        bad.dtype = np.int32  # same shape, same memory, another dtype
        prog(x=bad, w=wa, c=ca)
    held = prog.persist(w=wa)
    np.testing.assert_allclose(held(x=xa, c=ca)["y"], want(xa, wa, ca), rtol=1e-5)
    other = np.eye(4, dtype=np.float32)
    np.testing.assert_allclose(held(x=xa, w=other, c=ca)["y"], want(xa, other, ca), rtol=1e-5)
    np.testing.assert_allclose(held(x=xa, c=ca)["y"], want(xa, wa, ca), rtol=1e-5)  # the resident one again
    # an input written in place: made read-only after a call, it is refused on the next
    g = ls.Graph()
    c, r = g.input("c", (6, 2)), g.input("r", ("s", 2))
    g.output("c", ls.slice_scatter(c, r, 0, "p"), aliases="c")
    prog = g.compile(NATIVE, search=ls.SearchOptions(budget=2, seed=0, progress=False, dims={"s": 2, "p": 1}))
    cache, rows = np.zeros((6, 2), np.float32), np.ones((2, 2), np.float32)
    prog(c=cache, r=rows, dims={"p": 1})
    np.testing.assert_array_equal(cache[1:3], rows)
    cache.flags.writeable = False
    with pytest.raises(ls.InputError, match="written in place"):
        prog(c=cache, r=rows, dims={"p": 3})


def _fma_chain(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b as one float32 fused multiply-add per term, in k order from 0 (a float32 product is
    exact in float64, and the sum is rounded once to float32 after it)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    acc = np.zeros(a.shape[:-1] + (b.shape[-1],), np.float32)
    for l in range(a.shape[-1]):
        acc = (a64[..., :, l:l + 1] * b64[..., l:l + 1, :] + acc).astype(np.float32)
    return acc


@pytest.mark.parametrize("layout", ["rows", "rows-a-transposed", "packed", "packed-a-transposed"])
@pytest.mark.parametrize("m,n,k,batch", [(37, 93, 33, ()), (8, 64, 64, (3,)), (33, 130, 17, (2,)), (64, 256, 100, ())])
def test_float32_products_run_register_tiles_with_the_scalar_loops_sums(layout, m, n, k, batch):
    """float32 products whose B rows are contiguous along n run 4 rows x 64 columns in vector
    registers (``ls_mm_tile``); those whose B is contiguous along k (``dY @ W.T``, ``q @ k.T``)
    with fixed rows first copy 64 columns of B into a panel.  Both give each output the
    scalar loop's sum (one fma per term, in k order) bit for bit, whatever the tails of m and n."""
    from lightspeed.egraph.llir import decode_program
    from lightspeed.search import candidates
    from tests.backends.harness import saturate

    g = ls.Graph()
    a_t, packed = layout.endswith("a-transposed"), layout.startswith("packed")
    a = g.input("a", (*batch, k, m) if a_t else (*batch, m, k))
    b = g.input("b", (*batch, n, k) if packed else (*batch, k, n))
    g.output("y", (a.transpose(-1, -2) if a_t else a) @ (b.transpose(-1, -2) if packed else b))
    _, enc, index, ser = saturate(NATIVE, g)
    greedy = dict(candidates(index, ls.SearchOptions(budget=3, seed=0)))["greedy"]
    prog = NATIVE.lower(g, decode_program(greedy, ser, enc.constants, NATIVE.declarations()))
    sources = "\n".join(spec.source for spec in prog.kernels)
    assert "ls_mm_tile(4" in sources and ("_ls_pk[" in sources) == packed
    rng = np.random.default_rng(m + n + k)
    xa = rng.standard_normal((*batch, k, m) if a_t else (*batch, m, k)).astype(np.float32)
    xb = rng.standard_normal((*batch, n, k) if packed else (*batch, k, n)).astype(np.float32)
    want = _fma_chain(np.swapaxes(xa, -1, -2) if a_t else xa, np.swapaxes(xb, -1, -2) if packed else xb)
    np.testing.assert_array_equal(prog(a=xa, b=xb)["y"], want)


def test_a_row_tile_gives_each_row_the_same_sums_whatever_the_row_count():
    """Batch invariance of the tiled row kernel: with a symbolic row count, a row's outputs are
    the same bit for bit whether it runs alone, in a full tile of 4 or in a tail."""
    g = ls.Graph()
    x, w = g.input("x", ("s", 96)), g.input("w", (96, 80))
    g.output("y", x @ w)
    from lightspeed.egraph.llir import decode_program
    from lightspeed.search import candidates
    from tests.backends.harness import saturate

    _, enc, index, ser = saturate(NATIVE, g)
    greedy = dict(candidates(index, ls.SearchOptions(budget=3, seed=0)))["greedy"]
    prog = NATIVE.lower(g, decode_program(greedy, ser, enc.constants, NATIVE.declarations()))
    assert "ls_mm_tile(4" in "\n".join(spec.source for spec in prog.kernels)
    rng = np.random.default_rng(5)
    xs, ws = rng.standard_normal((11, 96)).astype(np.float32), rng.standard_normal((96, 80)).astype(np.float32)
    full = prog(x=xs, w=ws)["y"]
    for s in (1, 3, 4, 5, 9):
        np.testing.assert_array_equal(prog(x=xs[:s], w=ws)["y"], full[:s], err_msg=f"s={s}")
    np.testing.assert_array_equal(full, _fma_chain(xs, ws))


def test_sums_over_rows_put_the_columns_side_by_side():
    """A reduction whose data are contiguous along an output axis but not along the reduced ones
    (a bias's gradient: a sum over rows per column; a norm weight's: a product summed over rows,
    also when the reduced axis is last in a permuted view; two nested sums) runs with the loops
    exchanged (items of 32 columns, ``_ls_cq``): numpy's values, NaN winning a max, every
    column count (tails), a symbolic row count."""
    g = ls.Graph()
    x, y = g.input("x", ("n", 32, 70)), g.input("y", ("n", 32, 70))
    g.output("bias", x.sum((0, 1)))
    g.output("weight", (x.permute(2, 0, 1) * y.permute(2, 0, 1)).reshape(70, -1).sum(-1))
    g.output("max", x.amax(1))
    from lightspeed.egraph.llir import decode_program
    from lightspeed.search import candidates
    from tests.backends.harness import saturate

    _, enc, index, ser = saturate(NATIVE, g)
    greedy = dict(candidates(index, ls.SearchOptions(budget=3, seed=0)))["greedy"]
    prog = NATIVE.lower(g, decode_program(greedy, ser, enc.constants, NATIVE.declarations()))
    assert sum("_ls_cq" in spec.source for spec in prog.kernels) >= 3
    rng = np.random.default_rng(3)
    for n in (1, 3):
        xs, ys = rng.standard_normal((2, n, 32, 70)).astype(np.float32)
        xs[0, 5, 9] = np.nan
        out = prog(x=xs, y=ys)
        x64, y64 = xs.astype(np.float64), ys.astype(np.float64)
        np.testing.assert_allclose(out["bias"], x64.sum((0, 1)), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out["weight"], (x64 * y64).sum((0, 1)), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(out["max"], xs.max(1))
        assert np.isnan(out["max"][0, 9]) and np.isnan(out["bias"][9])


def _lowered_with(g: ls.Graph, kind: str):
    """``g`` lowered on native from the first of the search's fixed candidates (default, greedy,
    fused) that computes an op ``kind``, and that op's c kernel text."""
    from lightspeed.backends.codegen.kernels import render
    from lightspeed.egraph.llir import decode_program
    from lightspeed.search import candidates
    from tests.backends.harness import saturate

    _, enc, index, ser = saturate(NATIVE, g)
    progs = [decode_program(c, ser, enc.constants, NATIVE.declarations())
             for _, c in candidates(index, ls.SearchOptions(budget=3, seed=0))]
    lp = next(p for p in progs if any(o.op == kind for o in p.ops))
    op = next(o for o in lp.ops if o.op == kind)
    return NATIVE.lower(g, lp), render(op, [lp.ops[i].dtype for i in op.inputs], "c")[0].source


@pytest.mark.parametrize("n,k,add,dtype", [(7, 75, False, "float32"), (10, 64, True, "float32"),
                                           (1, 40, False, "float32"), (9, 80, True, "bfloat16")])
def test_paired_weight_products_match_float64_and_do_not_depend_on_the_rows_beside(n, k, add, dtype):
    """``x @ W.T`` (+ R) of symbolic rows runs as column pairs (kernels/matmul.py
    ``paired_dot_kernel``): an odd column count's last pair holds one column, k leaves 32s, 8s and
    single terms; each row's outputs equal the float64 product within float32 rounding, and are bit
    for bit the same whether the row is computed alone or among others (batch invariance)."""
    dt = getattr(ls, dtype)
    g = ls.Graph()
    y = g.input("x", ("s", k), dt) @ g.input("w", (n, k), dt).transpose(0, 1)
    if add:
        y = y + g.input("r", ("s", n), dt)
    g.output("y", y)
    prog, source = _lowered_with(g, "MatmulAdd" if add else "Matmul")
    assert "_ls_two" in source
    rng = np.random.default_rng(n * k)
    x = rng.standard_normal((5, k)).astype(dt.np)
    w = rng.standard_normal((n, k)).astype(dt.np)
    r = rng.standard_normal((5, n)).astype(dt.np)
    ins = {"x": x, "w": w, **({"r": r} if add else {})}
    got = np.asarray(prog(ins)["y"])
    want = x.astype(np.float64) @ w.T.astype(np.float64) + (r.astype(np.float64) if add else 0)
    tol = 1e-5 if dtype == "float32" else 1e-2  # bfloat16: the result rounded to 8 bits
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * np.abs(want).max())
    for i in range(5):  # row i alone
        alone = {"x": x[i:i + 1], "w": w, **({"r": r[i:i + 1]} if add else {})}
        assert np.array_equal(np.asarray(prog(alone)["y"])[0], got[i]), i


@pytest.mark.parametrize("n", [7, 10])
def test_paired_norm_products_match_float64_and_do_not_depend_on_the_rows_beside(n):
    """RMSNorm(x) @ W.T as one NormMatmul (kernels/norm.py): in c an item is a column pair of one
    row, the row's squares summed once for both; an odd column count's last pair holds one column.
    Equal to the float64 result within float32 rounding, each row bit for bit the same alone."""
    k = 72
    g = ls.Graph()
    x = g.input("x", ("s", k))
    g.output("y", ls.rms_norm(x, k, g.input("nw", (k,)), 1e-5) @ g.input("w", (n, k)).transpose(0, 1))
    prog, source = _lowered_with(g, "NormMatmul")
    assert "_ls_two" in source
    rng = np.random.default_rng(n)
    xs = rng.standard_normal((5, k)).astype(np.float32)
    nw = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    got = np.asarray(prog({"x": xs, "nw": nw, "w": w})["y"])
    x64 = xs.astype(np.float64)
    want = (x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-5) * nw) @ w.T.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    for i in range(5):
        alone = np.asarray(prog({"x": xs[i:i + 1], "nw": nw, "w": w})["y"])[0]
        assert np.array_equal(alone, got[i]), i


# the gated products' two gates: (nn.mlp's chain, the op it becomes, the float64 activation)
GATES = {"silu": ("silu_mul", "MatmulGLU", lambda v: v / (1 + np.exp(-v))),
         "gelu_tanh": ("gelu_tanh_mul", "MatmulGeGLU",
                       lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3))))}


@pytest.mark.parametrize("gate_name", sorted(GATES))
@pytest.mark.parametrize("k,dtype", [(72, "float32"), (88, "bfloat16")])
def test_paired_gated_products_match_float64_and_do_not_depend_on_the_rows_beside(k, dtype, gate_name):
    """silu(x @ G.T) * (x @ U.T) as one MatmulGLU, gelu_tanh(...) * (...) as one MatmulGeGLU: in c
    an item is two rows of one column (a lone row runs the same code); equal to the float64 result
    within the dtype's rounding, each row bit for bit the same computed alone."""
    from lightspeed.nn import mlp

    chain, kind, act = GATES[gate_name]
    n, dt = 9, getattr(ls, dtype)
    g = ls.Graph()
    x = g.input("x", ("s", k), dt)
    gate, up = (x @ g.input(name, (n, k), dt).transpose(0, 1) for name in ("wg", "wu"))
    g.output("y", getattr(mlp, chain)(gate, up))
    prog, source = _lowered_with(g, kind)
    assert "_ls_i0 + 1 <" in source
    rng = np.random.default_rng(k)
    xs, wg, wu = (rng.standard_normal(sh).astype(dt.np) for sh in ((5, k), (n, k), (n, k)))
    got = np.asarray(prog({"x": xs, "wg": wg, "wu": wu})["y"]).astype(np.float64)
    x64 = xs.astype(np.float64)
    gate, up = x64 @ wg.astype(np.float64).T, x64 @ wu.astype(np.float64).T
    want = act(gate) * up
    tol = 1e-5 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    for i in range(5):
        alone = np.asarray(prog({"x": xs[i:i + 1], "wg": wg, "wu": wu})["y"])[0]
        assert np.array_equal(alone.astype(np.float64), got[i]), i


@pytest.mark.parametrize("gate_name", sorted(GATES))
def test_norm_gated_products_walk_columns_outermost_and_do_not_depend_on_the_rows_beside(gate_name):
    """silu(norm(x) @ G.T) * (norm(x) @ U.T) as one NormMatmulGLU (gelu_tanh's: NormMatmulGeGLU):
    in c a loop nest over (column, row), rows innermost, so a column's two weight rows are read
    once for every row of x (item by item in row order each prompt row streamed the whole weight
    matrices again); equal to the float64 result within float32 rounding, each row bit for bit the
    same computed alone."""
    from lightspeed.nn import mlp

    chain, kind, act = GATES[gate_name]
    n, k = 9, 72
    g = ls.Graph()
    x = g.input("x", ("s", k))
    h = ls.rms_norm(x, k, g.input("nw", (k,)), 1e-5)
    gate, up = (h @ g.input(name, (n, k)).transpose(0, 1) for name in ("wg", "wu"))
    g.output("y", getattr(mlp, chain)(gate, up))
    prog, source = _lowered_with(g, "Norm" + kind)
    assert "const long long _ls_mi = _ls_cl + _ls_j;" in source  # the rows: the nest's innermost axis
    rng = np.random.default_rng(3)
    xs, wg, wu = (rng.standard_normal(sh).astype(np.float32) for sh in ((5, k), (n, k), (n, k)))
    nw = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32)
    got = np.asarray(prog({"x": xs, "nw": nw, "wg": wg, "wu": wu})["y"]).astype(np.float64)
    x64 = xs.astype(np.float64)
    h64 = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True) + 1e-5) * nw
    gate, up = h64 @ wg.astype(np.float64).T, h64 @ wu.astype(np.float64).T
    want = act(gate) * up
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    for i in range(5):
        alone = np.asarray(prog({"x": xs[i:i + 1], "nw": nw, "wg": wg, "wu": wu})["y"])[0]
        assert np.array_equal(alone.astype(np.float64), got[i]), i


def test_a_persisted_program_computes_what_its_resident_inputs_alone_decide_once(monkeypatch):
    """What depends only on resident inputs (here 2w + 1 before the product; Gemma's norms'
    1 + w) is computed at the persisted program's first call and kept: later calls launch the
    rest and give the same results; a call passing another w runs the whole program for it;
    the program it was persisted from is unchanged."""
    g = ls.Graph()
    x, w = g.input("x", ("s", 8)), g.input("w", (8, 8))
    g.output("y", (x @ (w * 2.0 + 1.0)).relu())
    prog = g.compile(backend="native")
    rng = np.random.default_rng(0)
    wv, w2 = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)
    want = lambda xv, wv: np.maximum(xv.astype(np.float64) @ (2.0 * wv + 1.0), 0.0)  # noqa: E731
    compiles = []
    build = type(prog.executor).compile
    monkeypatch.setattr(type(prog.executor), "compile",
                        lambda self, *a, **k: compiles.append(1) or build(self, *a, **k))
    bound = prog.persist(w=wv)
    # computed when persisted (the weights' upload), so the first call compiles nothing: the
    # hoisted launches' kernels once waited for the C compiler in a compiling run's first token
    assert bound._hoisted and compiles
    compiles.clear()
    for s in (3, 5):
        xv = rng.standard_normal((s, 8)).astype(np.float32)
        np.testing.assert_allclose(bound(x=xv)["y"], want(xv, wv), rtol=1e-5, atol=1e-5)
    hoisted = bound._hoisted
    assert hoisted and bound._hoisted_from == {"w"} and not compiles
    assert len(bound.launches) < len(prog.launches) and prog._hoisted is None  # the compiled one untouched
    ran = []
    run = type(bound.executor).run
    monkeypatch.setattr(type(bound.executor), "run", lambda self, st, launches, *a: ran.append(len(launches))
                        or run(self, st, launches, *a))
    xv = rng.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(bound(x=xv)["y"], want(xv, wv), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bound(x=xv, w=w2)["y"], want(xv, w2), rtol=1e-5, atol=1e-5)  # another w
    np.testing.assert_allclose(bound(x=xv)["y"], want(xv, wv), rtol=1e-5, atol=1e-5)
    assert ran == [len(bound.launches), len(prog.launches), len(bound.launches)] and bound._hoisted is hoisted


def test_a_buckets_calls_visit_only_the_arrays_that_are_not_the_resident_ones(monkeypatch):
    """A bucket's program is called by its BucketedProgram, which binds the inputs itself: its
    calls look at the arrays other than the resident ones (they looked at all ~150 of a 1B's
    weights every call, twenty-third session), and a resident input passed as another array is
    written for that call and written back at the next -- the results equal the float64 product
    each time."""
    from lightspeed.backends.codegen import program as kp
    from lightspeed.program import BucketedProgram

    g = ls.Graph()
    x, w, v = g.input("x", ("s", 8)), g.input("w", (8, 8)), g.input("v", (8, 8))
    g.output("y", (x @ w) @ v)
    prog = BucketedProgram(g, [({"s": (1, 4)}, g.compile(backend="native")),
                               ({"s": (5, 64)}, g.compile(backend="native"))])
    rng = np.random.default_rng(0)
    wv, vv, w2 = (rng.standard_normal((8, 8)).astype(np.float32) for _ in range(3))
    bound = prog.persist(w=wv, v=vv)
    looked = []
    recall = kp.recall
    monkeypatch.setattr(kp, "recall", lambda memo, key, a: looked.append(key) or recall(memo, key, a))
    want = lambda xv, wv: xv.astype(np.float64) @ wv @ vv  # noqa: E731
    # (rows, the w passed or None, whether v and w are looked at: a bucket's first call, all)
    calls = ((3, None, True, True), (3, None, False, False), (6, None, True, True), (6, w2, False, True),
             (6, None, False, True), (2, w2, False, True), (2, None, False, True), (2, None, False, False))
    for s, wa, v_seen, w_seen in calls:
        xv = rng.standard_normal((s, 8)).astype(np.float32)
        looked.clear()
        got = bound(x=xv) if wa is None else bound(x=xv, w=wa)
        np.testing.assert_allclose(got["y"], want(xv, wv if wa is None else wa), rtol=1e-4, atol=1e-4)
        assert ("v" in looked, "w" in looked, "x" in looked) == (v_seen, w_seen, True), (s, looked)
    # the bucket is handed the names this call was given (its loops visit those, not every
    # resident array: ~150 of a 1B's weights, three times a call on cuda, twenty-fourth session)
    handed = []
    execute = kp.KernelProgram.execute
    monkeypatch.setattr(kp.KernelProgram, "execute", lambda self, arrays, dims, out=None: handed.append(
        self._local.__dict__.get("given", (None,))[0]) or execute(self, arrays, dims, out))
    bound(x=rng.standard_normal((6, 8)).astype(np.float32))
    assert handed == [{"x"}]
