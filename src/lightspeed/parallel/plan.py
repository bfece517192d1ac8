"""Tensor-parallel sharding of a decoder model: a plan keyed by module roles, a rank's model and
its weights.

The plan (:data:`DECODER_PLAN`, in the spirit of torch's ``parallelize_module`` plans) maps module
paths -- the HF ``state_dict`` prefixes the ``nn`` modules carry -- to a style:

- ``colwise``: q/k/v, gate/up; the weight's output rows are split, so each rank computes its own
  heads / its slice of the intermediate activations.  No communication.
- ``rowwise``: o_proj, down_proj; the weight's input columns are split, each rank's product is a
  partial sum, and :func:`~lightspeed.parallel.collective.all_reduce` adds them (a bias is added
  once, after the sum).
- ``experts``: a Qwen3-MoE expert stack; every expert's intermediate dim is split (gate/up rows,
  down columns: colwise then rowwise inside each expert) and the experts' sum is all-reduced.  The
  router sees the same (replicated) activations on every rank, so it stays replicated and every
  rank routes every token identically.
- ``vocab``: the output head; rank r holds a slice of the vocabulary's rows (lengths differ by at
  most one when the ranks do not divide the vocabulary) and the logits are all-gathered along the
  vocabulary axis.  A tied head (SmolLM2, Qwen3) reads its slice of the embedding's rows.

The **embedding lookup is replicated**: each rank holds the whole table and looks its tokens up
locally.  A step reads only ``s`` rows of it, so splitting it would save memory, not time, and
would cost a masked lookup plus an all-reduce of the hidden states per step; a tied head reads a
row slice of the same replicated table, so its per-token read is divided all the same.

Attention heads follow their projections: the rank's model is the same class built from a
config with ``num_heads / N`` and ``num_kv_heads / N`` (so GQA groups stay whole on one rank:
query head h reads KV head ``h // group``, and a rank's query heads are exactly the groups of its
KV heads) and ``intermediate_size / N``; its KV cache is ``[M, n_kv / N, head_dim]``.
"""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..graph import GraphTensor
from ..models import family as registry
from ..nn import Builder, Embedding, Linear, Module
from ..nn.moe import Experts
from .collective import all_gather, all_reduce

__all__ = ["DECODER_PLAN", "tp_families", "TP_BACKENDS", "backend_refusal", "ShardedModel", "shard_model",
           "check_tp", "vocab_sizes", "RowParallelLinear", "VocabParallelHead", "VocabParallelEmbedding",
           "ReducedExperts"]

DECODER_PLAN: dict[str, str] = {
    "model.layers.*.self_attn.q_proj": "colwise",
    "model.layers.*.self_attn.k_proj": "colwise",
    "model.layers.*.self_attn.v_proj": "colwise",
    "model.layers.*.self_attn.o_proj": "rowwise",
    "model.layers.*.mlp.gate_proj": "colwise",
    "model.layers.*.mlp.up_proj": "colwise",
    "model.layers.*.mlp.down_proj": "rowwise",
    "model.layers.*.mlp.experts": "experts",
    "model.embed_tokens": "vocab",
    "lm_head": "vocab",
}
# backends whose stages have run sharded (host arrays, fresh outputs); cuda's NCCL path is written
# (collective.TorchCommunicator) but has not run on a multi-GPU host, so it is not offered yet
TP_BACKENDS = ("cpu", "reference")


def tp_families() -> tuple[str, ...]:
    """The families whose structure the plan covers (``Family.tensor_parallel``; Gemma 4's per-layer
    inputs, k = v attention and mixed head dims are not planned), in registry order."""
    return tuple(name for name, fam in registry.families().items() if fam.tensor_parallel)


def backend_refusal(backend: str) -> str | None:
    """Why tensor parallel does not run on ``backend`` (None: it does)."""
    if backend in TP_BACKENDS:
        return None
    return (f"tensor parallel runs on the {' and '.join(TP_BACKENDS)} backends, not {backend} (GPU collectives "
            "are written for NCCL but untested: they need a host with several GPUs)")


def vocab_sizes(vocab: int, world: int) -> tuple[int, ...]:
    """Each rank's number of vocabulary rows: as equal as possible, the first ranks one more."""
    return tuple(vocab // world + (r < vocab % world) for r in range(world))


class RowParallelLinear(Linear):
    """A Linear whose ``in_features`` is this rank's slice: partial products, all-reduced."""

    def forward(self, b: Builder, x: GraphTensor) -> GraphTensor:
        w = b.param(self.pname("weight"), (self.out_features, self.in_features))
        out = all_reduce(b, x @ w.transpose(0, 1))
        if self.bias:  # the full bias, added once after the sum
            out = out + b.param(self.pname("bias"), (self.out_features,))
        return out


class VocabParallelHead(Linear):
    """The output head over this rank's vocabulary rows, gathered along the vocabulary axis."""

    def __init__(self, prefix: str, hidden: int, sizes: tuple[int, ...], rank: int, bias: bool = False) -> None:
        super().__init__(prefix, hidden, sizes[rank], bias)
        self.sizes = sizes

    def forward(self, b: Builder, x: GraphTensor) -> GraphTensor:
        return all_gather(b, super().forward(b, x), -1, self.sizes)


class VocabParallelEmbedding(Embedding):
    """A replicated embedding (the lookup is local) whose tied head reads this rank's rows."""

    def __init__(self, base: Embedding, sizes: tuple[int, ...], rank: int) -> None:
        super().__init__(base.prefix, base.num_embeddings, base.dim, base.scale)
        self.sizes, self.start = sizes, sum(sizes[:rank])
        self.size = sizes[rank]

    def attend(self, b: Builder, x: GraphTensor) -> GraphTensor:
        w = self.weight(b).narrow(0, self.start, self.size)
        return all_gather(b, x @ w.transpose(0, 1), -1, self.sizes)


class ReducedExperts(Experts):
    """Experts whose intermediate dim is this rank's slice: their (partial) sum is all-reduced."""

    def forward(self, b: Builder, x: GraphTensor, weights: GraphTensor, indices: GraphTensor,
                mode: str = "gather") -> GraphTensor:
        return all_reduce(b, super().forward(b, x, weights, indices, mode))


def check_tp(model: Any, world: int) -> None:
    """Raise (naming what) unless ``model`` can be split over ``world`` ranks."""
    from ..models.base import DecoderLM

    if not isinstance(world, int) or world < 1:
        raise ValueError(f"tensor parallel: the number of ranks must be an int >= 1, got {world!r}")
    family = getattr(model, "family", type(model).__name__)
    if not isinstance(model, DecoderLM) or family not in tp_families():
        raise UnsupportedError(f"tensor parallel supports the {', '.join(tp_families())} families, not {family}")
    if world == 1:
        return
    if model.dtype.np.kind == "V":  # gloo sums numpy dtypes; bfloat16 would need its own path
        raise UnsupportedError(f"tensor parallel on the host runs float32/float16 models, not {model.dtype.name}")
    c = model.config
    dims = {"attention heads (num_attention_heads)": c.num_heads,
            "KV heads (num_key_value_heads)": c.num_kv_heads}
    sparse = set(getattr(c, "sparse_layers", ()))
    if len(sparse) < c.num_layers:  # some layer has the dense MLP
        dims["the MLP width (intermediate_size)"] = c.intermediate_size
    if sparse:
        dims["the experts' width (moe_intermediate_size)"] = c.moe_intermediate_size
    bad = [f"{what} = {n}" for what, n in dims.items() if n % world]
    if bad:
        raise ShapeError(f"tensor parallel over {world} ranks: {world} must divide " + ", ".join(bad)
                         + f" ({family}: {', '.join(f'{w} = {n}' for w, n in dims.items())})")
    if c.vocab_size < world:
        raise ShapeError(f"tensor parallel over {world} ranks: the vocabulary ({c.vocab_size}) is smaller")


def _walk(module: Module) -> list[tuple[Module, str, Module]]:
    """(parent, attribute, child) for every module below ``module`` (list attributes: 'name.i')."""
    out = []
    for name, v in vars(module).items():
        kids = [(name, v)] if isinstance(v, Module) else \
            [(f"{name}.{i}", m) for i, m in enumerate(v) if isinstance(m, Module)] if isinstance(v, list) else []
        for attr, child in kids:
            out.append((module, attr, child))
            out.extend(_walk(child))
    return out


def _set(parent: Module, attr: str, child: Module) -> None:
    name, _, index = attr.partition(".")
    if index:
        getattr(parent, name)[int(index)] = child
    else:
        setattr(parent, name, child)


@dataclass
class ShardedModel:
    """Rank ``rank`` of ``world``: ``model`` (same class, per-rank config, collectives in its
    graphs) and ``slicers`` (parameter name -> the function cutting this rank's piece out of the
    full tensor; parameters not named are replicated)."""

    full: Any
    model: Any
    world: int
    rank: int
    slicers: dict[str, Callable[[np.ndarray], np.ndarray]]

    def shard_weights(self, weights: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """This rank's weights from the full (checked) ones; contiguous copies of the slices."""
        full = self.full.check_weights(weights)
        out = {}
        for name in self.model.param_shapes():
            cut = self.slicers.get(name)
            # np.asarray: weights held as GGML blocks (weights.quant) are sliced as their values
            out[name] = np.ascontiguousarray(cut(np.asarray(full[name]))) if cut else full[name]
        return out


def shard_model(model: Any, world: int, rank: int, plan: Mapping[str, str] = DECODER_PLAN) -> ShardedModel:
    """Rank ``rank``'s share of ``model`` under ``plan`` (module docstring)."""
    check_tp(model, world)
    if not 0 <= rank < world:
        raise ValueError(f"tensor parallel: rank {rank} is outside [0, {world})")
    c = model.config
    over = dict(num_heads=c.num_heads // world, num_kv_heads=c.num_kv_heads // world,
                intermediate_size=c.intermediate_size // world)
    if hasattr(c, "moe_intermediate_size"):
        over["moe_intermediate_size"] = c.moe_intermediate_size // world
    part = type(model)(dataclasses.replace(copy.deepcopy(c), **over), model.dtype)
    sizes = vocab_sizes(c.vocab_size, world)
    slicers: dict[str, Callable[[np.ndarray], np.ndarray]] = {}

    def rows(n: int) -> Callable[[np.ndarray], np.ndarray]:  # rank's n-row block of the leading axis
        return lambda a: a[rank * n:(rank + 1) * n]

    for parent, attr, mod in _walk(part):
        style = next((s for pat, s in plan.items() if fnmatch.fnmatchcase(mod.prefix, pat)), None)
        if style == "colwise":
            n = mod.out_features
            slicers[mod.pname("weight")] = rows(n)
            if mod.bias:
                slicers[mod.pname("bias")] = rows(n)
        elif style == "rowwise":
            n = mod.in_features
            _set(parent, attr, RowParallelLinear(mod.prefix, n, mod.out_features, mod.bias))
            slicers[mod.pname("weight")] = lambda a, n=n: a[:, rank * n:(rank + 1) * n]
        elif style == "experts" and isinstance(mod, Experts):
            n, full_i = mod.intermediate, mod.intermediate * world
            moved = ReducedExperts(mod.prefix, mod.hidden, n, mod.num_experts, mod.activation)
            _set(parent, attr, moved)
            # gate rows [0, I), up rows [I, 2I): this rank's block of each, one after the other
            slicers[mod.pname("gate_up_proj")] = lambda a, n=n, i=full_i: np.concatenate(
                [a[:, rank * n:(rank + 1) * n], a[:, i + rank * n:i + (rank + 1) * n]], axis=1)
            slicers[mod.pname("down_proj")] = lambda a, n=n: a[:, :, rank * n:(rank + 1) * n]
        elif style == "vocab" and isinstance(mod, Embedding):
            _set(parent, attr, VocabParallelEmbedding(mod, sizes, rank))  # replicated table
        elif style == "vocab" and isinstance(mod, Linear):
            _set(parent, attr, VocabParallelHead(mod.prefix, mod.in_features, sizes, rank, mod.bias))
            start, n = sum(sizes[:rank]), sizes[rank]
            slicers[mod.pname("weight")] = lambda a, s=start, n=n: a[s:s + n]
            if mod.bias:
                slicers[mod.pname("bias")] = lambda a, s=start, n=n: a[s:s + n]
        elif style is not None:
            raise UnsupportedError(f"tensor parallel plan: style {style!r} does not apply to {mod!r}")
    return ShardedModel(model, part, world, rank, slicers)
