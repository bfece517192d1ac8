"""cuBLASLt matmuls for the ``cuda`` backend: the ``LtMatmul`` / ``LtMatmulAdd`` ops (and their
epilogue and fp8 forms), their plan and their run-time calls.

*The alternative.*  ``cublaslt.egg`` (ruleset ``cublaslt``) unions every generic ``Matmul`` /
``MatmulAdd`` of static m, n, k whose operands and result share one dtype of float32, bfloat16 and
float16 (and, for ``MatmulAdd``, whose addend is read row-major with the result's shape) with an
``LtMatmul`` / ``LtMatmulAdd`` of the same fields: the search measures it against the generated
kernel and keeps the faster.  The rule is a prefilter; :func:`plan_matmul` decides.  An ``LtMatmul``
without a plan (a dynamic stride, batch dims that do not collapse, ...) runs the generated matmul
kernel (the op table's fallback lowers it as ``Matmul``), so the alternative is never wrong, at worst the same.
Epilogues (``LtMatmulBias``: a row bias, optionally ReLU; ``LtMatmulEpi``: ReLU) and fp8
(``LtMatmulFp8``, no rule yet) have no generated kernel: their rules admit only what is planned.

*The plan* (pure Python, no GPU): cuBLASLt is column-major, and a row-major ``C[m, n]`` read
column-major is ``C^T [n, m]`` with leading dimension n; so ``C = A @ B`` runs as
``C^T = B^T A^T``: cuBLASLt's A is our B, its B is our A, its (M, N, K) is our (n, m, k).  Each
operand must be contiguous along one of its two matrix axes (the other axis' stride is the leading
dimension; contiguous along the row axis = a transposed operand), its batch dims must collapse to
one strided batch (a stride per operand, 0 = broadcast), everything static.  Offsets are folded
into the pointers.  ``beta = 1`` with ``C`` = the addend for ``MatmulAdd`` (``D`` = the result).
Compute type ``CUBLAS_COMPUTE_32F``, scale type float32 (no TF32 for float32).

*Running* (:class:`Library`, GPU only; ``nvmath-python``'s low-level ``nvmath.bindings.cublasLt``,
imported on first use): one handle per process, descriptors and layouts per plan, the heuristic's
first algorithm per plan and pointer alignment, all cached per process; a 32 MiB workspace per
thread (one stream per thread).  ``LIGHTSPEED_CUDA_LT_ALGOS=N`` (N > 1) times the heuristic's first N
algorithms of each plan on the device (into a scratch result, so no live buffer is written) and
keeps the fastest, as max-autotune does for its library choice; the pick is kept in the compile
cache per device, library version, plan and alignment, so every later process takes the same
algorithm (the same rounding: a program's results do not change from run to run).  It gave the
1B's 512-token prefill nothing on an H100 (3.243 ms at 8 against 3.213, thirty-first session), so
the first stays the default.  The GPU executor calls it inside its CUDA graph capture; cuBLASLt
bakes the pointers into the graph (kernels read theirs from the table), so the executor captures
again when a library launch's pointers change (``GpuExecutor.captures`` counts it).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...dtypes import DType
from ...egraph.decl import MATMUL, MATMUL_ADD, OpDecl
from ...egraph.llir import LOp
from ...errors import LightspeedError
from ...symbolic import const
from ..codegen.kernels import KernelSpec, LaunchShape

__all__ = ["LT_MATMUL", "LT_MATMUL_ADD", "LT_MATMUL_EPI", "LT_MATMUL_BIAS", "LT_MATMUL_FP8", "LT_MATMUL_ROWS",
           "LT_MATMUL_ADD_ROWS", "LT_OPS", "EPILOGUES",
           "RULE_FILE", "LtLayout", "LtPlan", "LtDimsPlan", "plan_matmul", "plan_dims", "library_spec", "Library",
           "WORKSPACE_BYTES"]

# the same fields as the generic ops (rules/linalg.egg; egraph/decl.py), so the generated matmul
# kernel can always compute them too
LT_MATMUL = OpDecl("LtMatmul", MATMUL.fields, "Matmul through cuBLASLt (cuda backend)")
LT_MATMUL_ADD = OpDecl("LtMatmulAdd", MATMUL_ADD.fields, "MatmulAdd through cuBLASLt, the addend as C (beta = 1)")
# epilogues (cuBLASLt applies them to the float accumulator, then rounds once): `epilogue` names one of
# EPILOGUES; LtMatmulEpi has none with a bias ("relu", "gelu"), LtMatmulBias one with ("bias",
# "relu_bias", "gelu_bias"): bias[j] (a row vector over n, read through bias_view as [m, n] with
# strides (0, 1), offset 0) added to every row.  Only cuBLASLt computes them: without a plan the
# executor refuses the op (the search drops that candidate), so the rules offer them only where a
# plan exists (cublaslt.egg).  "gelu" is cuBLASLt's GELU, the tanh approximation; no rule offers it
# yet (see docs/kernels.md).
LT_MATMUL_EPI = OpDecl("LtMatmulEpi", (*MATMUL.fields, ("epilogue", "str")),
                       "act(A @ B) through cuBLASLt's epilogue (cuda backend): relu or gelu")
LT_MATMUL_BIAS = OpDecl("LtMatmulBias", (*MATMUL.fields, ("bias", "ir"), ("bias_view", "view"), ("epilogue", "str")),
                        "act(A @ B + bias[n]) through cuBLASLt's bias epilogue: bias, relu_bias or gelu_bias")
EPILOGUES = ("default", "relu", "gelu", "bias", "relu_bias", "gelu_bias")
# fp8: C = (a * a_scale) @ (b * b_scale) with a, b float8_e4m3 and a_scale, b_scale float32 scalars
# (one-element device buffers), C bfloat16 or float32; cuBLASLt's A_SCALE_POINTER / B_SCALE_POINTER.
# Hopper's fp8 kernels take only the "TN" layout (cuBLASLt's A transposed, B not: x[m, k] row-major
# @ W[n, k].T, a Linear's weight) with leading dimensions of 16 bytes' multiples.  No rule makes this
# op yet (recognising cast(a) * sa @ cast(b) * sb in the e-graph is not done): it is planned and
# run when an LLIR program holds it (tests/backends/test_cuda_cublaslt.py builds one).
LT_MATMUL_FP8 = OpDecl("LtMatmulFp8", (*MATMUL.fields, ("a_scale", "ir"), ("b_scale", "ir")),
                       "(a * a_scale) @ (b * b_scale), a and b float8_e4m3, per-tensor float32 scales")
# a product whose row count is a dim (a prompt's tokens): planned per call's value (LtDimsPlan); a
# many-rows library op, so a decode step's rows keep the warp kernels (search.candidates)
LT_MATMUL_ROWS = OpDecl("LtMatmulRows", MATMUL.fields, "Matmul through cuBLASLt, m a dim planned per call",
                        many_rows=True, library=True)
LT_MATMUL_ADD_ROWS = OpDecl("LtMatmulAddRows", MATMUL_ADD.fields, "MatmulAdd through cuBLASLt, m a dim planned "
                            "per call", many_rows=True, library=True)
LT_OPS = (LT_MATMUL, LT_MATMUL_ADD, LT_MATMUL_EPI, LT_MATMUL_BIAS, LT_MATMUL_FP8, LT_MATMUL_ROWS, LT_MATMUL_ADD_ROWS)
_EPI_OPS = ("LtMatmulEpi", "LtMatmulBias")
# the plain products (no epilogue, no fp8): the generic ops and their cuBLASLt forms
_PRODUCTS = ("Matmul", "MatmulAdd", "LtMatmul", "LtMatmulAdd", "LtMatmulRows", "LtMatmulAddRows")
_FP8_OUT = ("bfloat16", "float32")
RULE_FILE = Path(__file__).with_name("cublaslt.egg")
WORKSPACE_BYTES = 32 << 20
LIBRARY = "cublaslt"  # KernelSpec.library of a cuBLASLt launch (no source: nothing to compile)

_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class LtLayout:
    """A column-major cuBLASLt matrix layout: rows, cols, leading dimension (elements), the
    operation applied to it (``trans``: it holds the operand transposed), and its batch stride."""

    rows: int
    cols: int
    ld: int
    trans: bool = False
    batch_stride: int = 0


@dataclass(frozen=True)
class LtPlan:
    """One cuBLASLt matmul ``D = op(A) @ op(B) + beta * C`` in cuBLASLt's (column-major) terms:
    ``a`` is the op's operand ``b``, ``b`` is its operand ``a`` (see the module docstring);
    offsets are in elements of the operands the LLIR op names (``a_offset`` of its ``a``)."""

    dtype: str  # of A, B, C and D
    m: int  # cuBLASLt's M = the op's n
    n: int  # cuBLASLt's N = the op's m
    k: int
    batch: int
    a: LtLayout
    b: LtLayout
    d: LtLayout  # C has D's layout (the addend is read row-major with the result's shape)
    a_offset: int  # elements into the op's ``b`` operand (cuBLASLt's A)
    b_offset: int  # elements into the op's ``a`` operand (cuBLASLt's B)
    beta: float  # 1.0 for MatmulAdd (C = the addend), else 0.0
    epilogue: str = "default"  # one of EPILOGUES (cuBLASLt's CUBLASLT_EPILOGUE_*)
    ab_dtype: str = ""  # of A and B when not ``dtype`` ("float8_e4m3": scaled, see LT_MATMUL_FP8)

    @property
    def fp8(self) -> bool:
        return self.ab_dtype == "float8_e4m3"

    @property
    def ab_itemsize(self) -> int:
        """Bytes per element of A and B (the operand offsets are in these)."""
        return 1 if self.fp8 else self.itemsize

    @property
    def bias(self) -> bool:
        """The epilogue adds a bias: a vector over cuBLASLt's M (= the op's n, one per column of
        the row-major result), of the plan's dtype, its pointer set on the descriptor per call."""
        return "bias" in self.epilogue

    @property
    def itemsize(self) -> int:
        return 4 if self.dtype == "float32" else 2

    @property
    def key(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()[:16]


def _ints(exprs, dims: Mapping[str, int] | None = None) -> list[int] | None:
    """The values of expressions, static or at ``dims``; None when one has a symbol ``dims`` lacks."""
    out = []
    for e in exprs:
        if e.free_vars():
            if dims is None or not e.free_vars() <= dims.keys():
                return None
            out.append(int(e.evaluate(dims)))
        elif not e.is_const:
            return None
        else:
            out.append(int(e.value))
    return out


def _layout(rows: int, cols: int, s_row: int, s_col: int) -> LtLayout | None:
    """The logical matrix X[rows, cols] (element (r, c) at r*s_row + c*s_col) as op(L) of a stored
    column-major L: X itself (contiguous down its columns: ld = s_col) or X^T (contiguous along its
    rows: ld = s_row, trans); a stride on a size-1 axis does not matter.  None: neither."""
    if s_row == 1 or rows == 1:
        ld = s_col if cols > 1 else rows
        if ld >= max(1, rows):
            return LtLayout(rows, cols, ld)
    if s_col == 1 or cols == 1:
        ld = s_row if rows > 1 else cols
        if ld >= max(1, cols):
            return LtLayout(cols, rows, ld, trans=True)
    return None


def _batch_stride(batch: list[int], strides: list[int]) -> int | None:
    """One stride s with offset = flat batch index * s, or None: the batch dims (size-1 dims
    dropped) must be row-major nested (s_i = s_{i+1} * batch_{i+1}) or all broadcast (0)."""
    dims = [(b, s) for b, s in zip(batch, strides) if b != 1]
    if not dims or all(s == 0 for _, s in dims):
        return 0
    expect = dims[-1][1]
    for b, s in reversed(dims):
        if s != expect or s < 0:
            return None
        expect = s * b
    return dims[-1][1]


def plan_matmul(op: LOp, in_dtypes: list[DType], dims: Mapping[str, int] | None = None) -> LtPlan | None:
    """The cuBLASLt plan of a ``Matmul`` / ``MatmulAdd`` (or ``LtMatmul`` / ``LtMatmulAdd``) LLIR op
    whose operands have ``in_dtypes`` (its symbolic fields at ``dims``), or None when cuBLASLt cannot
    compute it as it stands."""
    args = op.args
    add = "r_view" in args
    epilogue = args.get("epilogue", "default") if op.op in _EPI_OPS else "default"
    bias = "bias_view" in args
    fp8 = op.op == "LtMatmulFp8"
    if (op.op not in (*_PRODUCTS, "LtMatmulFp8", *_EPI_OPS)
            or len(in_dtypes) != (4 if fp8 else 3 if add or bias else 2) or epilogue not in EPILOGUES
            or bias != ("bias" in epilogue) or (add and bias)):
        return None
    if fp8:  # e4m3 operands, float32 scales, a bfloat16 or float32 result: each stated, none assumed
        if (op.dtype.name not in _FP8_OUT or [d.name for d in in_dtypes]
                != ["float8_e4m3", "float8_e4m3", "float32", "float32"]):
            return None
    # otherwise one dtype everywhere (the seed's miscompile: an F32 C declared over a bf16 buffer)
    elif op.dtype.name not in _DTYPES or any(d != op.dtype for d in in_dtypes):
        return None
    nb = len(args["batch"])
    if len(args["a_batch_strides"]) != nb or len(args["b_batch_strides"]) != nb:
        return None
    v = _ints([*args["batch"], args["m"], args["n"], args["k"], *args["a_batch_strides"], args["a_stride_m"],
               args["a_stride_k"], args["a_offset"], *args["b_batch_strides"], args["b_stride_k"],
               args["b_stride_n"], args["b_offset"]], dims)
    if v is None:
        return None
    batch, (m, n, k) = v[:nb], v[nb:nb + 3]
    a_bs, (sam, sak, a_off) = v[nb + 3:2 * nb + 3], v[2 * nb + 3:2 * nb + 6]
    b_bs, (sbk, sbn, b_off) = v[2 * nb + 6:3 * nb + 6], v[3 * nb + 6:3 * nb + 9]
    count = int(np.prod(batch, dtype=np.int64)) if batch else 1
    if min(m, n, k, count) <= 0 or a_off < 0 or b_off < 0 or count >= 2 ** 31:
        return None
    out_shape = _ints(op.shape, dims)
    if out_shape != [*batch, m, n]:
        return None
    if add:
        r = args["r_view"]
        if not r.is_contiguous or _ints(r.shape, dims) != out_shape:
            return None
    if bias:
        # bias[j] for every row: one view [m, n] with strides (0, 1) at offset 0, no mask (a
        # batched bias is not offered: cuBLASLt's bias would need a batch stride too)
        if nb or not _is_row_bias(args["bias_view"], m, n):
            return None
    sa, sb = _batch_stride(batch, a_bs), _batch_stride(batch, b_bs)
    # cuBLASLt's A is B^T [n, k] of the op's b: (j, l) at j*sbn + l*sbk; its B is A^T [k, m]
    la, lb = _layout(n, k, sbn, sbk), _layout(k, m, sak, sam)
    if sa is None or sb is None or la is None or lb is None:
        return None
    ld = LtLayout(n, m, n, batch_stride=m * n)
    if fp8:
        # TN only: cuBLASLt's A (the op's b) transposed, B (the op's a) not; 16-byte leading
        # dimensions (1-byte operands: multiples of 16 elements), D's too; 16-byte operand offsets
        d_bytes = 4 if op.dtype.name == "float32" else 2
        if (not la.trans or lb.trans or la.ld % 16 or lb.ld % 16 or (n * d_bytes) % 16
                or a_off % 16 or b_off % 16 or sa % 16 or sb % 16):
            return None
        return LtPlan(op.dtype.name, n, m, k, count, LtLayout(la.rows, la.cols, la.ld, la.trans, sb),
                      LtLayout(lb.rows, lb.cols, lb.ld, lb.trans, sa), ld, b_off, a_off, 0.0, "default",
                      "float8_e4m3")
    return LtPlan(op.dtype.name, n, m, k, count, LtLayout(la.rows, la.cols, la.ld, la.trans, sb),
                  LtLayout(lb.rows, lb.cols, lb.ld, lb.trans, sa), ld, b_off, a_off, 1.0 if add else 0.0, epilogue)


class LtDimsPlan:
    """The cuBLASLt call of a matmul whose row count is a dim (a prompt's tokens, ``s``): one
    :class:`LtPlan` per call's values of ``dims`` (:meth:`at`, made on first use and kept), so a
    prefill's products run through the library at every length.  The launch passes the dims'
    table slots before its buffers; the executor captures its graph again for new values."""

    def __init__(self, op: LOp, in_dtypes: list[DType], dims: tuple[str, ...]):
        self.op, self.in_dtypes, self.dims = op, list(in_dtypes), dims
        self.key = hashlib.sha256(repr((op.op, op.args, op.shape, op.dtype.name, [d.name for d in in_dtypes]))
                                  .encode()).hexdigest()[:16]
        self._plans: dict[tuple[int, ...], LtPlan] = {}

    def at(self, values: tuple[int, ...]) -> LtPlan:
        plan = self._plans.get(values)
        if plan is None:
            plan = plan_matmul(self.op, self.in_dtypes, dict(zip(self.dims, values)))
            if plan is None:  # plan_dims checked sample values; a value they missed lands here
                raise LightspeedError(f"{self.op.op}: no cuBLASLt plan at {dict(zip(self.dims, values))}")
            self._plans[values] = plan
        return plan


# the dim values plan_dims tries: one row (a decode-like call), two, a long prompt
_SAMPLE_DIMS = (1, 2, 1000)


def plan_dims(op: LOp, in_dtypes: list[DType]) -> LtDimsPlan | None:
    """An :class:`LtDimsPlan` for a ``Matmul`` / ``MatmulAdd`` (or their Lt forms) whose only
    symbolic fields are its row count ``m`` (and the result's and addend's shapes with it), which
    :func:`plan_matmul` plans at every sampled value; None otherwise (static ops: plan_matmul)."""
    if op.op not in _PRODUCTS:
        return None
    args = op.args
    free = set(args["m"].free_vars())
    if not free:
        return None
    fixed = [*args["batch"], args["n"], args["k"], *args["a_batch_strides"], args["a_stride_m"], args["a_stride_k"],
             args["a_offset"], *args["b_batch_strides"], args["b_stride_k"], args["b_stride_n"], args["b_offset"]]
    shapes = [*op.shape, *(args["r_view"].shape if "r_view" in args else ())]
    if any(e.free_vars() for e in fixed) or not set().union(*(e.free_vars() for e in shapes)) <= free:
        return None
    dims = tuple(sorted(free))
    if any(plan_matmul(op, in_dtypes, dict.fromkeys(dims, v)) is None for v in _SAMPLE_DIMS):
        return None
    return LtDimsPlan(op, in_dtypes, dims)


def _is_row_bias(view, m: int, n: int) -> bool:
    """``view`` reads element (i, j) of an [m, n] result at j: a row vector broadcast over rows."""
    views = getattr(view, "views", None)
    if not views or len(views) != 1:
        return False
    v = views[0]
    if v.mask is not None or _ints(v.shape) != [m, n]:
        return False
    st, off = _ints(v.strides), _ints([v.offset])
    return st is not None and off == [0] and (st[1] == 1 or n == 1) and (st[0] == 0 or m == 1)


def library_spec(plan: LtPlan | LtDimsPlan, add: bool) -> KernelSpec:
    """The launch-list entry of a cuBLASLt call: no source (nothing to compile); the dims of an
    :class:`LtDimsPlan` (none for a static plan), then buffers in the order :meth:`Library.run`
    reads them: result, the op's a, b (and the addend or bias)."""
    fp8, bias = isinstance(plan, LtPlan) and plan.fp8, isinstance(plan, LtPlan) and plan.bias
    bufs = ("out", 0, 1, 2, 3) if fp8 else ("out", 0, 1, 2) if add or bias else ("out", 0, 1)
    dims = plan.dims if isinstance(plan, LtDimsPlan) else ()
    one = const(1)  # the library chooses its own grids: the launch shape is only a name
    return KernelSpec(f"cublaslt_{plan.key}", "", dims, bufs, LaunchShape(LIBRARY, (one, one, one)), const(0),
                      library=LIBRARY)


# ---------------------------------------------------------------------------- the GPU side
def _alignment(ptr: int) -> int:
    """The largest power of two up to 256 that divides ``ptr``."""
    return min(256, ptr & -ptr) if ptr else 256


class Library:
    """cuBLASLt for one process: a handle, prepared plans and chosen algorithms (see the module
    docstring).  Created on first use by the GPU executor; imports nvmath then."""

    def __init__(self) -> None:
        try:
            from nvmath.bindings import cublas, cublasLt
            from nvmath.bindings.cublasLt import MatmulHeuristicResult  # noqa: F401 - checks the bindings
        except ImportError as e:
            raise LightspeedError(f"cuBLASLt matmuls need nvmath-python: pip install nvmath-python ({e})") from None
        import nvmath

        self.lt, self.cublas, self.types = cublasLt, cublas, nvmath.CudaDataType
        self.handle = cublasLt.create()
        self._prepared: dict[LtPlan, tuple] = {}
        self._algos: dict[tuple, Any] = {}
        self._lock = threading.RLock()  # (re-entered: algorithm -> heuristics -> prepare)
        self._call_lock = threading.Lock()  # a bias pointer set on a shared descriptor, then the call
        self._alpha = np.ones(1, np.float32)
        self._betas = {0.0: np.zeros(1, np.float32), 1.0: np.ones(1, np.float32)}

    def _set(self, setter, getter_dtype, obj: int, attr, value) -> None:
        buf = np.asarray([value], dtype=getter_dtype(attr))
        setter(obj, attr, buf.ctypes.data, buf.itemsize)

    def _dtype(self, name: str) -> int:
        return int({"float32": self.types.CUDA_R_32F, "bfloat16": self.types.CUDA_R_16BF,
                    "float16": self.types.CUDA_R_16F, "float8_e4m3": self.types.CUDA_R_8F_E4M3}[name])

    def _layout(self, plan: LtPlan, lay: LtLayout, operand: bool = False) -> int:
        """A layout of the plan's dtype (``operand``: of A and B's dtype)."""
        lt = self.lt
        dtype = plan.ab_dtype if operand and plan.ab_dtype else plan.dtype
        h = lt.matrix_layout_create(self._dtype(dtype), lay.rows, lay.cols, lay.ld)
        if plan.batch > 1:
            attr = lt.MatrixLayoutAttribute
            self._set(lt.matrix_layout_set_attribute, lt.get_matrix_layout_attribute_dtype, h, attr.BATCH_COUNT,
                      plan.batch)
            self._set(lt.matrix_layout_set_attribute, lt.get_matrix_layout_attribute_dtype, h,
                      attr.STRIDED_BATCH_OFFSET, lay.batch_stride)
        return h

    def prepare(self, plan: LtPlan) -> tuple:
        """(matmul descriptor, A, B, D layouts) of ``plan``, made once per process."""
        got = self._prepared.get(plan)
        if got is not None:
            return got
        with self._lock:
            got = self._prepared.get(plan)
            if got is None:
                lt = self.lt
                desc = lt.matmul_desc_create(int(self.cublas.ComputeType.COMPUTE_32F), int(self.types.CUDA_R_32F))
                attr = lt.MatmulDescAttribute
                op = self.cublas.Operation
                for a, trans in ((attr.TRANSA, plan.a.trans), (attr.TRANSB, plan.b.trans)):
                    self._set(lt.matmul_desc_set_attribute, lt.get_matmul_desc_attribute_dtype, desc, a,
                              int(op.T if trans else op.N))
                if plan.epilogue != "default":
                    self._set(lt.matmul_desc_set_attribute, lt.get_matmul_desc_attribute_dtype, desc, attr.EPILOGUE,
                              int(getattr(lt.Epilogue, plan.epilogue.upper())))
                if plan.bias:  # the bias in the result's dtype (cuBLASLt's default for D, set explicitly)
                    self._set(lt.matmul_desc_set_attribute, lt.get_matmul_desc_attribute_dtype, desc,
                              attr.BIAS_DATA_TYPE, self._dtype(plan.dtype))
                got = (desc, self._layout(plan, plan.a, True), self._layout(plan, plan.b, True),
                       self._layout(plan, plan.d))
                self._prepared[plan] = got
        return got

    def algorithm(self, plan: LtPlan, ptrs: tuple[int, int, int, int], stream: Any = None) -> Any:
        """The algorithm for ``plan`` at the alignment of ``ptrs`` (A, B, C, D), once per process:
        the heuristic's first, or with ``LT_ALGOS`` > 1 and a ``stream`` to time them on (outside a
        graph capture) the fastest of its first ``LT_ALGOS``; the returned array's address is what
        ``cublasLtMatmul`` takes."""
        aligns = tuple(_alignment(p) for p in ptrs)
        key = (plan, aligns)
        algo = self._algos.get(key)
        if algo is not None:
            return algo
        count = LT_ALGOS if stream is not None else 1
        with self._lock:
            results, found = self.heuristics(plan, aligns, count)
            if found < 1:
                raise LightspeedError(f"cuBLASLt has no algorithm for {plan}")
            # (a bias or fp8 scale lives on the descriptor, set per call: those plans take the first)
            timed = found > 1 and not plan.bias and not plan.fp8
            pick = self._fastest(plan, aligns, results, found, ptrs, stream) if timed else 0
            algo = (results, results[pick]["algo"])  # the buffer kept alive with the struct taken from it
            self._algos[key] = algo
        return algo

    def heuristics(self, plan: LtPlan, aligns: tuple[int, ...], count: int) -> tuple[Any, int]:
        """cuBLASLt's heuristic for ``plan`` at pointer alignments ``aligns`` (A, B, C, D) within
        the workspace: (its results, best first, and how many of the ``count`` asked it found)."""
        desc, la, lb, ld = self.prepare(plan)
        lt = self.lt
        pref = lt.matmul_preference_create()
        try:
            attr = lt.MatmulPreferenceAttribute
            for a, value in ((attr.MAX_WORKSPACE_BYTES, WORKSPACE_BYTES), (attr.MIN_ALIGNMENT_A_BYTES, aligns[0]),
                             (attr.MIN_ALIGNMENT_B_BYTES, aligns[1]), (attr.MIN_ALIGNMENT_C_BYTES, aligns[2]),
                             (attr.MIN_ALIGNMENT_D_BYTES, aligns[3])):
                self._set(lt.matmul_preference_set_attribute, lt.get_matmul_preference_attribute_dtype, pref, a,
                          value)
            results = lt.MatmulHeuristicResult(count)
            found = np.zeros(1, np.int32)
            lt.matmul_algo_get_heuristic(self.handle, desc, la, lb, ld, ld, pref, count, results.ptr,
                                         found.ctypes.data)
        finally:
            lt.matmul_preference_destroy(pref)
        return results, int(found[0])

    def _fastest(self, plan: LtPlan, aligns: tuple[int, ...], results: Any, found: int,
                 ptrs: tuple[int, int, int, int], stream: Any) -> int:
        """The index of the fastest of the heuristic's ``found`` algorithms: the compile cache's
        pick for this device, library, plan and alignment, else each one timed on ``stream`` with
        the call's operands and a scratch result (C too when beta = 1: its values do not change
        the time), the pick then stored.  An algorithm the library refuses to run is skipped."""
        from ... import cache
        from . import driver

        dev = driver.device()
        version = getattr(self.lt, "get_version", lambda: "?")()
        entry = "ltalgo-" + cache.digest(dev.name, version, repr(plan), aligns, found)

        def valid(data: Any) -> None:
            if not (isinstance(data, dict) and isinstance(data.get("index"), int) and 0 <= data["index"] < found):
                raise cache.CacheEntryError("no algorithm index in range")
        kept = cache.load(entry, valid)
        if kept is not None:
            return int(kept["index"])
        desc, la, lb, ld = self.prepare(plan)  # (made by algorithm(): a dictionary read)
        a, b = ptrs[0], ptrs[1]
        scratch = dev.alloc(plan.batch * plan.m * plan.n * plan.itemsize)
        work = dev.alloc(WORKSPACE_BYTES)
        start, end = dev.event(), dev.event()
        beta = self._betas[plan.beta].ctypes.data
        times: list[float] = []
        for i in range(found):
            algo = results[i]["algo"]

            def launch(algo=algo) -> None:
                self.lt.matmul(self.handle, desc, self._alpha.ctypes.data, a, la, b, lb, beta, scratch.ptr, ld,
                               scratch.ptr, ld, algo.ctypes.data, work.ptr, WORKSPACE_BYTES, int(stream))
            try:
                launch()  # warm-up (and the check that this algorithm runs these operands)
                best = float("inf")
                for _ in range(3):  # the least of three runs of LT_TIMED_RUNS launches each
                    dev.record(start, stream)
                    for _ in range(LT_TIMED_RUNS):
                        launch()
                    dev.record(end, stream)
                    best = min(best, dev.elapsed(start, end))
            except Exception:  # noqa: BLE001 (a refused algorithm is not a candidate)
                dev.sync(stream)
                best = float("inf")
            times.append(best)
        dev.sync(stream)
        for event in (start, end):
            driver.check(driver.bindings().cuEventDestroy(event), "cuEventDestroy")
        pick = int(np.argmin(times)) if min(times) < float("inf") else 0
        cache.store(entry, {"index": pick, "us": [round(t / LT_TIMED_RUNS * 1e6, 2) for t in times]})
        return pick

    @staticmethod
    def _pointers(plan: LtPlan, ptrs: tuple[int, ...]) -> tuple[int, int, int, int]:
        """cuBLASLt's A, B, C, D from the table's addresses of the result, the op's a, b (and
        addend), in :func:`library_spec`'s order: A is the op's b (offsets folded in); C is D
        unless beta = 1 (a bias is no C: :meth:`run` sets it on the descriptor)."""
        out, pa, pb = ptrs[0], ptrs[1], ptrs[2]
        return (pb + plan.a_offset * plan.ab_itemsize, pa + plan.b_offset * plan.ab_itemsize,
                ptrs[3] if plan.beta else out, out)

    def prepare_call(self, plan: LtPlan, ptrs: tuple[int, ...], stream: Any = None) -> None:
        """Make the descriptors and choose the algorithm of a call (host work, kept out of a graph
        capture; with ``LT_ALGOS`` > 1 the candidates are timed on ``stream``)."""
        self.algorithm(plan, self._pointers(plan, ptrs), stream)

    def run(self, plan: LtPlan, ptrs: tuple[int, ...], workspace: int, stream: int) -> None:
        """Enqueue ``plan`` on ``stream`` (``ptrs`` as for :meth:`_pointers`)."""
        a, b, c, d = self._pointers(plan, ptrs)
        desc, la, lb, ld = self.prepare(plan)
        _, algo = self.algorithm(plan, (a, b, c, d))
        if not plan.bias and not plan.fp8:
            self.lt.matmul(self.handle, desc, self._alpha.ctypes.data, a, la, b, lb,
                           self._betas[plan.beta].ctypes.data, c, ld, d, ld, algo.ctypes.data, workspace,
                           WORKSPACE_BYTES, stream)
            return
        # the bias (fp8: scale) pointers live on the (per-plan, shared) descriptor: set, call, one lock;
        # cuBLASLt reads it when the call is enqueued (a captured graph keeps it: the executor
        # captures again when it changes, as for A, B, C, D)
        lt = self.lt
        attr = lt.MatmulDescAttribute
        # fp8: the scale of cuBLASLt's A is the op's b's (ptrs[4]), of its B the op's a's (ptrs[3])
        per_call = (((attr.A_SCALE_POINTER, ptrs[4]), (attr.B_SCALE_POINTER, ptrs[3])) if plan.fp8
                    else ((attr.BIAS_POINTER, ptrs[3]),))
        with self._call_lock:
            for which, ptr in per_call:
                self._set(lt.matmul_desc_set_attribute, lt.get_matmul_desc_attribute_dtype, desc, which, ptr)
            lt.matmul(self.handle, desc, self._alpha.ctypes.data, a, la, b, lb, self._betas[plan.beta].ctypes.data,
                      c, ld, d, ld, algo.ctypes.data, workspace, WORKSPACE_BYTES, stream)


# LIGHTSPEED_CUDA_LT_ALGOS=N: time the heuristic's first N algorithms of each plan and keep the
# fastest (see the module docstring); 1 takes its first, untimed
_ALGOS_SET = os.environ.get("LIGHTSPEED_CUDA_LT_ALGOS", "1")
if not _ALGOS_SET.strip().isdigit() or int(_ALGOS_SET) < 1:
    raise LightspeedError(f"LIGHTSPEED_CUDA_LT_ALGOS must be a count of 1 or more, got {_ALGOS_SET!r}")
LT_ALGOS = int(_ALGOS_SET)
LT_TIMED_RUNS = 5  # launches between a pair of events when timing an algorithm

_library: Library | None = None
_library_lock = threading.Lock()


def library() -> Library:
    """The process's cuBLASLt (created on first use)."""
    global _library
    if _library is None:
        with _library_lock:
            if _library is None:
                _library = Library()
    return _library
