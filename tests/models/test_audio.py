"""Audio input: WAV reading (stdlib-written files of every PCM width), resampling against an analytic
tone, and the Whisper log-mel spectrogram against transformers' WhisperFeatureExtractor (an
independent numpy implementation) on several signals."""

from __future__ import annotations

import re
import struct
import wave

import numpy as np
import pytest

from lightspeed.models.audio import (
    N_FRAMES,
    AudioError,
    hz_to_mel,
    load_audio,
    log_mel_spectrogram,
    mel_filters,
    mel_to_hz,
    read_wav,
    resample,
)


def _signals() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    t = np.arange(16000 * 7) / 16000
    speechy = 0.3 * np.sin(2 * np.pi * (150 + 40 * np.sin(3 * t)) * t) * (1 + np.sin(2 * np.pi * 4 * t))
    long_t = np.arange(16000 * 31) / 16000
    return {
        "tones+noise, 7 s": (speechy + 0.02 * rng.standard_normal(t.size)).astype(np.float32),
        "chirp, 31 s (cut to 30)": (0.5 * np.sin(2 * np.pi * (100 + 100 * long_t) * long_t)).astype(np.float32),
        "noise, 0.3 s": (0.1 * rng.standard_normal(4800)).astype(np.float32),
        "silence": np.zeros(16000, np.float32),
    }


@pytest.mark.parametrize("name", list(_signals()))
def test_log_mel_matches_transformers_feature_extractor(name):
    transformers = pytest.importorskip("transformers")
    audio = _signals()[name]
    fe = transformers.WhisperFeatureExtractor(feature_size=80, sampling_rate=16000)
    want = fe(audio, sampling_rate=16000, return_tensors="np").input_features[0]
    got = log_mel_spectrogram(audio)
    assert got.shape == want.shape == (80, N_FRAMES) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)


def test_mel_filters_match_transformers_and_are_slaney_normalised():
    audio_utils = pytest.importorskip("transformers.audio_utils")
    want = audio_utils.mel_filter_bank(num_frequency_bins=201, num_mel_filters=80, min_frequency=0.0,
                                       max_frequency=8000.0, sampling_rate=16000, norm="slaney",
                                       mel_scale="slaney")
    got = mel_filters(80)
    np.testing.assert_allclose(got, want.T, rtol=1e-10, atol=1e-12)
    # by hand: linear below 1 kHz (200/3 Hz per mel), 27 mels per factor 6.4 above
    assert hz_to_mel(1000.0) == pytest.approx(15.0) and hz_to_mel(6400.0) == pytest.approx(42.0)
    np.testing.assert_allclose(mel_to_hz(hz_to_mel(np.array([0.0, 440.0, 3000.0, 8000.0]))), [0, 440, 3000, 8000])
    # each triangle integrates (trapezoid over its Hz support) to 1: the Slaney area normalisation
    edges = mel_to_hz(np.linspace(0, hz_to_mel(8000.0), 82))
    fine = mel_filters(80, n_fft=32000)  # 0.5 Hz bins
    freqs = np.linspace(0, 8000, fine.shape[1])
    areas = (fine[:, 1:] + fine[:, :-1]).sum(axis=1) / 2 * (freqs[1] - freqs[0])
    np.testing.assert_allclose(areas, 1.0, rtol=2e-3)
    assert np.argmax(fine[40]) == pytest.approx(np.searchsorted(freqs, edges[41]), abs=1)


def _write_wav(path, data: bytes, channels: int, width: int, rate: int) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(data)


@pytest.mark.parametrize("width", [1, 2, 3, 4])
def test_read_wav_every_pcm_width(tmp_path, width):
    rng = np.random.default_rng(width)
    x = rng.uniform(-0.9, 0.9, (50, 2))  # stereo
    bits = 8 * width
    q = np.round(x * 2 ** (bits - 1)).astype(np.int64)
    if width == 1:
        data = (q + 128).astype(np.uint8).tobytes()
    elif width == 3:
        u = q & 0xFFFFFF
        data = np.stack([u & 0xFF, (u >> 8) & 0xFF, (u >> 16) & 0xFF], axis=-1).astype(np.uint8).tobytes()
    else:
        data = q.astype(f"<i{width}").tobytes()
    _write_wav(tmp_path / "a.wav", data, 2, width, 8000)
    got, rate = read_wav(tmp_path / "a.wav")
    assert rate == 8000 and got.shape == (50, 2) and got.dtype == np.float32
    np.testing.assert_allclose(got, q / 2 ** (bits - 1), atol=1e-7)


def test_resample_keeps_a_tone_and_the_duration():
    t_in = np.arange(22050 * 2) / 22050
    x = np.sin(2 * np.pi * 440 * t_in).astype(np.float32)
    y = resample(x, 22050, 16000)
    assert y.shape == (32000,) and y.dtype == np.float32
    want = np.sin(2 * np.pi * 440 * np.arange(32000) / 16000)
    # 2 s of 440 Hz is exactly periodic over the file, so the FFT method is exact up to rounding
    np.testing.assert_allclose(y, want, atol=1e-4)
    # content above the new Nyquist (8 kHz) is removed, not aliased
    hi = np.sin(2 * np.pi * 9000 * t_in)
    assert np.abs(resample(hi, 22050, 16000)).max() < 1e-6
    assert resample(x, 16000, 16000).shape == x.shape


def test_load_audio_downmixes_and_resamples(tmp_path):
    t = np.arange(8000) / 8000
    left, right = 0.5 * np.sin(2 * np.pi * 200 * t), 0.25 * np.sin(2 * np.pi * 200 * t)
    q = np.round(np.stack([left, right], -1) * 32767).astype("<i2")
    _write_wav(tmp_path / "s.wav", q.tobytes(), 2, 2, 8000)
    y = load_audio(tmp_path / "s.wav")
    assert y.shape == (16000,)
    np.testing.assert_allclose(y, 0.375 * np.sin(2 * np.pi * 200 * np.arange(16000) / 16000), atol=2e-4)


def test_bad_inputs_raise_audio_errors(tmp_path):
    (tmp_path / "x.wav").write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    with pytest.raises(AudioError, match="x.wav"):
        read_wav(tmp_path / "x.wav")
    with pytest.raises(AudioError, match="cannot read"):
        read_wav(tmp_path / "missing.wav")
    with pytest.raises(AudioError, match="mono"):
        log_mel_spectrogram(np.zeros((2, 100), np.float32))


# ---------------------------------------------------------------------- float and 8-bit WAV
def _riff(fmt_tag: int, channels: int, bits: int, data: bytes, rate: int = 16_000, extensible: bool = False) -> bytes:
    """A WAV file laid out by hand (RIFF, fmt, an unrelated LIST chunk, data)."""
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", 0xFFFE if extensible else fmt_tag, channels, rate, rate * block, block, bits)
    if extensible:  # cbSize, valid bits, channel mask, sub-format GUID (tag, then the fixed tail)
        fmt += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", fmt_tag) + \
            b"\x00\x00\x00\x00\x10\x00\x80\x00\x00\xaa\x00\x38\x9b\x71"
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"LIST" + struct.pack("<I", 3) + b"abc\x00"
    chunks += b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks


def _signal() -> np.ndarray:
    rng = np.random.default_rng(3)
    return np.clip(0.4 * rng.standard_normal((800, 2)), -0.99, 0.99)


@pytest.mark.parametrize("bits, extensible", [(32, False), (64, False), (32, True)])
def test_float_wav_reads_like_pcm(tmp_path, bits, extensible):
    x = _signal()
    stored = x.astype("<f4" if bits == 32 else "<f8")
    (tmp_path / "f.wav").write_bytes(_riff(3, 2, bits, stored.tobytes(), extensible=extensible))
    got, rate = read_wav(tmp_path / "f.wav")
    assert rate == 16_000 and got.dtype == np.float32 and got.shape == (800, 2)
    np.testing.assert_array_equal(got, stored.astype(np.float32))
    # the same signal as 16-bit PCM, written by the stdlib, reads back within one quantisation step
    with wave.open(str(tmp_path / "p.wav"), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes(np.clip(np.round(x * 32768), -32768, 32767).astype("<i2").tobytes())
    pcm, _ = read_wav(tmp_path / "p.wav")
    np.testing.assert_allclose(got, pcm, atol=0.5 / 32768 + 1e-7)


def test_eight_bit_wav_reads_like_sixteen_bit(tmp_path):
    x = _signal()[:, :1]
    # 8-bit PCM is unsigned with its zero at 128; both scale by 2^(bits-1) as the reader decodes them
    for width, data in ((1, np.clip(np.round(x * 128) + 128, 0, 255).astype(np.uint8).tobytes()),
                        (2, np.clip(np.round(x * 32768), -32768, 32767).astype("<i2").tobytes())):
        with wave.open(str(tmp_path / f"{width}.wav"), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(width)
            w.setframerate(8000)
            w.writeframes(data)
    eight, rate8 = read_wav(tmp_path / "1.wav")
    sixteen, rate16 = read_wav(tmp_path / "2.wav")
    assert rate8 == rate16 == 8000 and eight.shape == sixteen.shape == (800, 1)
    np.testing.assert_allclose(eight, sixteen, atol=0.5 / 128 + 0.5 / 32768)


def test_bad_wavs_are_audio_errors(tmp_path):
    cases = {
        "nan.wav": (_riff(3, 1, 32, np.array([0.1, np.nan], "<f4").tobytes()), "NaN or infinity"),
        "f16.wav": (_riff(3, 1, 16, bytes(8)), "unsupported float sample width of 2 bytes"),
        "alaw.wav": (_riff(6, 1, 8, bytes(8)), "WAV encoding 0x0006 is not supported"),
        "nodata.wav": (_riff(1, 1, 16, b"")[:-8], "without a data chunk"),
        "zero.wav": (_riff(1, 0, 16, bytes(8)), "invalid WAV format (0 channels"),
        "text.wav": (b"hello world, not audio", "not a WAV file"),
    }
    for name, (data, match) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(AudioError, match=re.escape(match)):
            read_wav(tmp_path / name)
