"""Block kernels in the e-graph: matmuls and gathers that read weights stored as GGML blocks.

A graph declares a GGUF file's quantised matrix as an input of a block dtype
(``lightspeed.BLOCK_DTYPES``) and casts it to float32 where it is used (``nn.Builder`` does this
for a model's weights).  ``blocks.egg`` (ruleset ``blocks``) offers, beside the Cast and the float
kernel, ops that read the blocks themselves (:data:`BLOCK_OPS`); the search measures both.  A
backend whose executor has block kernels (the c dialect: ``native``) declares these ops and rules.

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
from .render import (
    BLOCK_ACTIVATIONS,
    KernelSpec,
    block_gather_ok,
    block_matmul_ok,
    render_block_gather,
    render_block_matmul,
)

__all__ = ["BLOCK_MATMUL", "BLOCK_MATMUL_ADD", "BLOCK_GATHER", "BLOCK_OPS", "RULE_FILE", "BlockValue",
           "block_activations", "block_spec"]

# the generic op's fields; the block-dtype operand (a, b or data) is an Input of a block dtype
BLOCK_MATMUL = OpDecl("BlockMatmul", MATMUL.fields, "Matmul with A or B a block-dtype Input, dequantised in registers")
BLOCK_MATMUL_ADD = OpDecl("BlockMatmulAdd", MATMUL_ADD.fields, "MatmulAdd with A or B a block-dtype Input")
BLOCK_GATHER = OpDecl("BlockGather", PRIMITIVE_OPS["Gather"].fields, "Gather of rows of a block-dtype Input")
BLOCK_OPS = (BLOCK_MATMUL, BLOCK_MATMUL_ADD, BLOCK_GATHER)
GENERIC_OP = {"BlockMatmul": "Matmul", "BlockMatmulAdd": "MatmulAdd", "BlockGather": "Gather"}
RULE_FILE = Path(__file__).with_name("blocks.egg")
# the block type whose kernel reads a block dtype's weights (Q5_0 as the Q8_0 blocks of its values)
KERNEL_QTYPE = {"q5_0": "q8_0"}


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


def block_spec(op: LOp, in_dtypes: list[DType]) -> tuple[LOp, list[DType], KernelSpec | None, int]:
    """``op`` (a :data:`BLOCK_OPS` one) as its generic op over float32 operands, the block kernel
    computing it (None where the kernel cannot: then the generic kernel reads the float32 values)
    and the position of its block operand."""
    side = next(i for i, d in enumerate(in_dtypes) if d.block)
    generic = dataclasses.replace(op, op=GENERIC_OP[op.op])
    floats = [dt.float32 if d.block else d for d in in_dtypes]
    qtype = KERNEL_QTYPE.get(in_dtypes[side].name, in_dtypes[side].name)
    if op.op == "BlockGather":
        spec = render_block_gather(generic, floats, qtype) if block_gather_ok(generic, floats) else None
    else:
        spec = (render_block_matmul(generic, floats, qtype, block_activations(), side)
                if block_matmul_ok(generic, floats, side) else None)
    return generic, floats, spec, side


class BlockValue:
    """A block input's value on an executor: ``packed`` (the blocks the kernels read, uploaded
    once) and :meth:`dense` (its float32 values, uploaded on first use)."""

    def __init__(self, value: Any, executor: Any) -> None:
        self.value, self.executor = value, executor
        blocks = value.blocks
        self.packed = executor.upload(blocks.widened().packed if blocks.qtype in KERNEL_QTYPE else blocks.packed)
        self._dense = None

    def dense(self) -> Any:
        if self._dense is None:
            self._dense = self.executor.upload(np.ascontiguousarray(np.asarray(self.value), np.float32))
        return self._dense
