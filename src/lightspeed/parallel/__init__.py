"""Tensor parallelism: a model's graphs sharded over N ranks, the collectives that join them, and
a launcher (see docs/architecture.md, "Tensor parallel").

- :mod:`.plan`: the sharding plan keyed by module roles, a rank's model and weights;
- :mod:`.collective`: the collective op (all-reduce, all-gather) as a graph boundary, and the
  communicators that run it (torch.distributed gloo on the host, NCCL for device arrays);
- :mod:`.stages`: a sharded graph cut at its collectives, each stage compiled by the normal search;
- :mod:`.launch`: one process per rank; ``tensor_parallel_generator(model, weights, N)`` and
  ``lightspeed run --tp N``.
"""

from __future__ import annotations

from .collective import (
           Collective,
           CollectiveError,
           Communicator,
           SingleRank,
           TorchCommunicator,
           all_gather,
           all_reduce,
           collectives_of,
)
from .launch import Rank, TensorParallelGroup, compile_shard, tensor_parallel_generator
from .plan import DECODER_PLAN, ShardedModel, check_tp, shard_model, tp_families, vocab_sizes
from .stages import StagedProgram, compile_staged, split_stages

__all__ = ["Collective", "CollectiveError", "Communicator", "SingleRank", "TorchCommunicator", "all_reduce",
           "all_gather", "collectives_of", "Rank", "TensorParallelGroup", "compile_shard",
           "tensor_parallel_generator", "DECODER_PLAN", "tp_families", "ShardedModel", "check_tp", "shard_model",
           "vocab_sizes", "StagedProgram", "compile_staged", "split_stages"]
