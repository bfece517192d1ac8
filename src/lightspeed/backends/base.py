"""The backend interface: everything the core asks of a backend, in one place.

A backend declares

* ``name`` and :meth:`Backend.device` (an identity string that enters cache keys: a decision
  measured on one device is not reused on another);
* ``ops``: its own IR constructors as :class:`~lightspeed.egraph.decl.OpDecl` rows (named, typed
  fields; the egglog ``constructor`` lines are generated from them);
* ``rule_files`` (its ``.egg`` files) and ``rulesets`` (the full saturation schedule, generic
  rulesets included, in order);
* ``fuse_dtypes``: the dtypes its fused region kernels compute exactly like the reference (the
  ``fuse_dtype`` facts ``rules/fusion.egg`` reads; empty = no regions);
* ``matmul_dtypes``: the dtypes whose generic ``Matmul`` (``rules/linalg.egg``) it computes exactly
  like the reference's Mul + SumReduce, up to summation order (the ``matmul_dtype`` facts; empty =
  no Matmul); a backend that runs ``Matmul`` itself lists it in ``ops``;
* ``fused_kernel_dtypes``: the dtypes whose fused kernels (``backends/codegen/fused.py``: attention,
  gated products, norms, products and regions written into a scatter's destination) it runs,
  keeping in float what the chain they replace rounds to the dtype (the ``fused_kernel_dtype``
  facts their rules read; the backend declares the ops and rule files);
* ``block_dtypes``: the GGML block dtypes (``dtypes.BLOCK_DTYPES``) whose matrices its kernels
  read as blocks (its rules offer them beside the dequantising Cast; models declare such weights
  with their block dtype only for these);
* :meth:`Backend.lower` (an LLIR program -> a callable :class:`~lightspeed.program.Program`),
  :meth:`Backend.to_device` (a host array -> the backend's array type), :meth:`Backend.time`
  (seconds of one call: cpu wall clock, GPU events) and :meth:`Backend.compose_rolled` (how a
  program of repeated blocks runs: cpu a loop, a GPU backend one graph); a backend that is not
  searched (``searched = False``, the reference) implements :meth:`Backend.lower_graph` instead.

The compile pipeline (:func:`lightspeed.pipeline.compile`: rolling, the search, lowering) calls
these; a backend never imports the pipeline, the search or rolling.  :meth:`Backend.rules_text`
is the one function that assembles a backend's rule text, and :meth:`Backend.code_hash` hashes
the backend's code and rule files (a changed kernel never reuses a stale cached decision).  A new
backend subclasses :class:`Backend` and calls ``lightspeed.backends.registry.register_backend``;
see docs/architecture.md for the checklist.
"""

from __future__ import annotations

import hashlib
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..dtypes import DType
from ..egraph.decl import FUSED, LINALG_OPS, PRIMITIVE_OPS, SCATTER_IN_PLACE, OpDecl, constructors_text
from ..egraph.encode import DTYPE_CTOR, GENERIC_RULES
from ..egraph.llir import LProgram
from ..graph import Graph
from ..program import Program

__all__ = ["Backend", "GENERIC_RULE_FILES"]

GENERIC_RULE_FILES: tuple[Path, ...] = tuple(f for f, _ in GENERIC_RULES)


class Backend:
    """Base class of every backend; see the module docstring for the contract."""

    name: str = "abstract"
    ops: tuple[OpDecl, ...] = ()
    rule_files: tuple[Path, ...] = ()
    rulesets: tuple[str, ...] = ()
    fuse_dtypes: tuple[DType, ...] = ()
    matmul_dtypes: tuple[DType, ...] = ()
    fused_kernel_dtypes: tuple[DType, ...] = ()
    block_dtypes: tuple[DType, ...] = ()
    # False for a backend that runs HLIR as it is (the reference): no e-graph search
    searched: bool = True
    # True when its programs' outputs live in device memory (copying one to the host is a
    # transfer): a greedy decode step then fetches the program's own argmax, not the logits
    device_memory: bool = False
    # True when its GatherMatmul runs each chosen row's picks together, grouped by the row (native's
    # kernel; cuda's tensor-core GatherMatmulMma): a mixture-of-experts prompt is then built
    # gathered (models/generate.py's "auto"), dense elsewhere
    groups_gathered_rows: bool = False

    # ------------------------------------------------------------------ identity
    def available(self) -> bool:
        """Whether this machine has the backend's device and libraries (tests skip it otherwise)."""
        return True

    def device(self) -> str:
        """Which device programs run on (enters the search-decision cache key)."""
        return f"{self.name}:{platform.machine()}:{platform.system()}"

    def code_hash(self) -> str:
        """A hash of the backend's Python package and rule files, and of the generic rule files."""
        h = getattr(self, "_code_hash", None)
        if h is None:
            digest = hashlib.sha256()
            mod = sys.modules[type(self).__module__]
            root = Path(mod.__file__).parent if mod.__file__.endswith("__init__.py") else Path(mod.__file__)
            files = sorted(root.rglob("*.py")) + sorted(root.rglob("*.egg")) if root.is_dir() else [root]
            for f in [*files, *self.rule_files, *GENERIC_RULE_FILES, Path(__file__)]:
                digest.update(f.name.encode())
                digest.update(f.read_bytes())
            h = self._code_hash = digest.hexdigest()[:16]
        return h

    # ------------------------------------------------------------------ e-graph side
    def declarations(self) -> dict[str, OpDecl]:
        """Every constructor this backend can run: the primitives, regions (if it fuses) and its own."""
        out = dict(PRIMITIVE_OPS)
        if self.fuse_dtypes:
            out[FUSED.name] = FUSED
        if "inplace" in self.rulesets:
            out[SCATTER_IN_PLACE.name] = SCATTER_IN_PLACE
        if self.matmul_dtypes:
            out.update((d.name, d) for d in LINALG_OPS)
        for d in self.ops:
            out[d.name] = d
        return out

    def rules_text(self) -> str:
        """The one place a backend's rule text is assembled: its own constructors (generated; the
        generic ones come with the schema), its ``fuse_dtype`` facts, the generic rule files, then
        its own, then its ``matmul_dtype`` facts (a relation ``rules/linalg.egg`` declares)."""
        facts = "".join(f"(fuse_dtype ({DTYPE_CTOR[d]}))\n" for d in self.fuse_dtypes)
        files = [*GENERIC_RULE_FILES, *self.rule_files]
        return "\n".join([constructors_text(self.ops) if self.ops else "", facts, *(f.read_text() for f in files),
                          "".join(f"(matmul_dtype ({DTYPE_CTOR[d]}))\n" for d in self.matmul_dtypes),
                          "".join(f"(fused_kernel_dtype ({DTYPE_CTOR[d]}))\n" for d in self.fused_kernel_dtypes)])

    # ------------------------------------------------------------------ running
    def lower(self, graph: Graph, lprog: LProgram, report: Any = None) -> Program:
        raise NotImplementedError(f"backend {self.name} cannot lower LLIR programs")

    def lower_graph(self, graph: Graph) -> Program:
        """HLIR as it is -> a callable Program, for a backend with ``searched = False``."""
        raise NotImplementedError(f"backend {self.name} cannot run HLIR without a search")

    def to_device(self, array: np.ndarray) -> Any:
        """A host array as this backend's array type (cpu: the array itself)."""
        return array

    def write_rows(self, dest: Any, start: int, rows: np.ndarray) -> None:
        """``dest[start:start + len(rows)] = rows`` for an array of this backend (a KV cache)."""
        dest[start:start + len(rows)] = rows

    def collective(self, comm: Any, spec: Any, array: Any) -> Any:
        """A tensor-parallel collective (``lightspeed.parallel``: all-reduce, all-gather) of one of
        this backend's arrays across ``comm``'s ranks.  The communicator runs host arrays through
        gloo and device arrays (``ptr``/``shape``/``dtype``) through NCCL; a backend overrides this
        to run it its own way (on its stream, inside its captured graph)."""
        return comm.run(spec, array)

    def sampler(self) -> Any | None:
        """This backend's token sampler, or None (the host samples in numpy): an object whose
        ``sample(logits, params)`` takes rows of logits [rows, V] as this backend holds them
        (a program's output) and ``params`` [rows, 4] float64 on the host (temperature > 0,
        top_k (0: none), top_p (1: none), the uniform draw u) and returns a
        :class:`~lightspeed.program.Pending` whose ``value("ids")`` is the rows' token ids
        [rows] int64 where the backend holds them (a next step's input, no round trip) and
        ``result()["ids"]`` on the host; the tokens are the host sampler's for the same u
        (``codegen/kernels/sample.py``)."""
        return None

    def time(self, prog: Program, inputs: Mapping[str, Any], dims: Mapping[str, int], repeats: int) -> float:
        """Seconds of one call of ``prog`` (the minimum of ``repeats``), measured the way this
        device should be: wall clock here, device events on a GPU backend."""
        best = float("inf")
        for _ in range(max(1, repeats)):
            t = time.perf_counter()
            prog(inputs, dims=dims)
            best = min(best, time.perf_counter() - t)
        return best

    def compose_rolled(self, graph: Graph, plan: Any, parts: Sequence[tuple[Any, Program]],
                       roll_seconds: float) -> Program:
        """A program running ``parts`` (prelude, a block template once per block, epilogue):
        by default a host loop over the blocks."""
        from .rolled import BlockLoopProgram

        return BlockLoopProgram(graph, plan, parts, roll_seconds)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
