"""Block kernels in the e-graph: matmuls and gathers that read weights stored as GGML blocks.

A graph declares a GGUF file's quantised matrix as an input of a block dtype
(``lightspeed.BLOCK_DTYPES``) and casts it to float32 where it is used (``nn.Builder`` does this
for a model's weights).  ``blocks.egg`` (ruleset ``blocks``) offers, beside the Cast and the float
kernel, ops that read the blocks themselves (:data:`BLOCK_OPS`); the search measures both.  A
backend whose kernels read blocks (the c dialect: ``native``) declares these ops and rules, and
adds :data:`BLOCK_LOWERINGS` and :func:`place_blocks` to its op table (``lowering.py``).

At run time a block input's value is its blocks (:class:`BlockValue`: the packed layout the
kernels read, Q5_0 widened to the Q8_0 blocks of its values) and, only when a launch reads the
input as floats (the Cast alternative), its float32 values, made once per value.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from ... import dtypes as dt
from ...dtypes import DType
from ...egraph.decl import MATMUL, MATMUL_ADD, PRIMITIVE_OPS, OpDecl
from ...egraph.llir import LOp
from ...errors import LightspeedError
from .kernels.block_matmul import (
    BLOCK_ACTIVATIONS,
    KERNEL_QTYPE,
    block_gather_ok,
    block_matmul_ok,
    render_block_gather,
    render_block_matmul,
    render_block_matmul_cuda,
)
from .lowering import VALUES, FormedValue, Lowered, generated

__all__ = ["BLOCK_MATMUL", "BLOCK_MATMUL_ADD", "BLOCK_GATHER", "BLOCK_OPS", "BLOCK_LOWERINGS", "RULE_FILE",
           "NORM_LOWERINGS", "NORM_RULE_FILE", "BlockValue", "PACKED", "block_activations", "place_blocks"]

# the generic op's fields; the block-dtype operand (a, b or data) is an Input of a block dtype
BLOCK_MATMUL = OpDecl("BlockMatmul", MATMUL.fields, "Matmul with A or B a block-dtype Input, dequantised in registers")
BLOCK_MATMUL_ADD = OpDecl("BlockMatmulAdd", MATMUL_ADD.fields, "MatmulAdd with A or B a block-dtype Input")
BLOCK_GATHER = OpDecl("BlockGather", PRIMITIVE_OPS["Gather"].fields, "Gather of rows of a block-dtype Input")
BLOCK_OPS = (BLOCK_MATMUL, BLOCK_MATMUL_ADD, BLOCK_GATHER)
GENERIC_OP = {"BlockMatmul": "Matmul", "BlockMatmulAdd": "MatmulAdd", "BlockGather": "Gather"}
RULE_FILE = Path(__file__).with_name("blocks.egg")


def block_activations() -> str:
    """How block matmuls treat a decode step's activation row (``LIGHTSPEED_NATIVE_ACTIVATIONS``):
    ``q16`` (the default: 16-bit integers per block of 32, dotted in integers), ``q8`` (8-bit ones,
    as llama.cpp) or ``float`` (exact: the float32 weights' result up to summation order).
    docs/kernels.md states each one's tolerance."""
    value = os.environ.get("LIGHTSPEED_NATIVE_ACTIVATIONS", "q16").strip().lower() or "q16"
    if value not in BLOCK_ACTIVATIONS:
        raise LightspeedError(f"LIGHTSPEED_NATIVE_ACTIVATIONS must be one of {', '.join(BLOCK_ACTIVATIONS)}, "
                              f"got {value!r}")
    return value


PACKED = "packed"  # the form of a block input its block kernels read (BlockValue)


def _block_op(op: LOp, in_dtypes: list[DType], dialect: str) -> Lowered:
    """A :data:`BLOCK_OPS` op: its block kernel reading the packed blocks of its block operand
    (the c dialect; on cuda the matmuls whose weights are B and the gathers), else its generic op over
    the operand's float32 values."""
    side = next(i for i, d in enumerate(in_dtypes) if d.block)
    generic = dataclasses.replace(op, op=GENERIC_OP[op.op])
    floats = [dt.float32 if d.block else d for d in in_dtypes]
    qtype = KERNEL_QTYPE.get(in_dtypes[side].name, in_dtypes[side].name)
    spec = None
    if op.op == "BlockGather":
        spec = render_block_gather(generic, floats, qtype, dialect) if block_gather_ok(generic, floats) else None
    elif dialect == "c":
        spec = (render_block_matmul(generic, floats, qtype, block_activations(), side)
                if block_matmul_ok(generic, floats, side) else None)
    elif dialect == "cuda" and side == 1 and block_matmul_ok(generic, floats, 1):
        spec = render_block_matmul_cuda(generic, floats, qtype)
    if spec is None:
        return generated(generic, floats, dialect)
    return Lowered([spec], {side: PACKED})


def _cast_of_blocks(op: LOp, in_dtypes: list[DType], dialect: str) -> Lowered:
    """A Cast reads a block input's float32 values (block dtypes are cast from only)."""
    return generated(op, [dt.float32 if d.block else d for d in in_dtypes], dialect)


def place_blocks(value: Any, executor: Any) -> BlockValue | None:
    """A weight held as blocks (a ``QuantTensor``) as a :class:`BlockValue` on ``executor``; one
    placed there already as it is (a model's programs share their resident weights)."""
    if isinstance(value, BlockValue) and value.executor is executor:
        return value
    return BlockValue(value, executor) if hasattr(value, "qtype") else None


# the op-table entries of a backend whose kernels read blocks (codegen/lowering.py)
BLOCK_LOWERINGS = {"BlockMatmul": _block_op, "BlockMatmulAdd": _block_op, "BlockGather": _block_op,
                   "Cast": _cast_of_blocks}


def _norm_product_of_blocks(op: LOp, in_dtypes: list[DType], dialect: str) -> Lowered:
    """A norm product (NormMatmul, NormMatmulGLU, NormMatmulGeGLU, NormMatmulScatter) whose weights are block Inputs
    (block_norms.egg): its kernel reads their packed blocks; with float weights, the usual kernel."""
    lowered = generated(op, in_dtypes, dialect)
    return Lowered(lowered.specs, {i: PACKED for i, d in enumerate(in_dtypes) if d.block})


# the cuda backend's norm products over blocks: their rules (ruleset ``block_norms``, run after
# ``norms`` and ``products``, before ``fusion``) and lowerings
NORM_RULE_FILE = Path(__file__).with_name("block_norms.egg")
NORM_LOWERINGS = {name: _norm_product_of_blocks
                  for name in ("NormMatmul", "NormMatmulGLU", "NormMatmulGeGLU", "NormMatmulScatter")}


class BlockValue(FormedValue):
    """A block input's value on an executor: ``packed`` (the blocks the kernels read, uploaded
    once: the form :data:`PACKED`) and :meth:`dense` (its float32 values, uploaded on first use:
    the form ``values``)."""

    def __init__(self, value: Any, executor: Any) -> None:
        self.value, self.executor = value, executor
        blocks = value.blocks
        self.packed = executor.upload(blocks.widened().packed if blocks.qtype in KERNEL_QTYPE else blocks.packed)
        self._dense = None

    def dense(self) -> Any:
        if self._dense is None:
            self._dense = self.executor.upload(np.ascontiguousarray(np.asarray(self.value), np.float32))
        return self._dense

    # checked as the QuantTensor it holds when another program is persisted with it
    qtype = property(lambda self: self.value.qtype)
    shape = property(lambda self: self.value.shape)
    ndim = property(lambda self: len(self.value.shape))

    def form(self, name: str) -> Any:
        if name == PACKED:
            return self.packed
        if name == VALUES:
            return self.dense()
        raise LightspeedError(f"a block input has no form {name!r} (it has {PACKED!r} and {VALUES!r})")
