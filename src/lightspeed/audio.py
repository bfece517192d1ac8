"""Audio input for speech models: WAV reading and Whisper's log-mel spectrogram, in numpy.

The spectrogram follows OpenAI Whisper (and Hugging Face's ``WhisperFeatureExtractor``): the
16 kHz signal is zero-padded (or cut) to 30 s, a centred STFT with a periodic Hann window of 400
samples and hop 160 (reflect-padded ends), power spectrum, an 80-band Slaney mel filterbank
(0-8 kHz, Slaney-normalised, as librosa's ``mel(htk=False, norm='slaney')``), ``log10`` of
``max(power, 1e-10)``, the last frame dropped (3000 frames for 30 s), values clamped to at most 8
below the maximum, then ``(x + 4) / 4``.  Everything is computed in float64 and returned as
float32, so it agrees with HF's (float64) implementation to float32 rounding.
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from .errors import LightspeedError

__all__ = ["SAMPLE_RATE", "N_FFT", "HOP_LENGTH", "CHUNK_SECONDS", "N_SAMPLES", "N_FRAMES", "AudioError",
           "read_wav", "load_audio", "resample", "mel_filters", "log_mel_spectrogram", "hz_to_mel", "mel_to_hz"]

SAMPLE_RATE = 16_000
N_FFT = 400
HOP_LENGTH = 160
CHUNK_SECONDS = 30
N_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE  # 480000 samples in one Whisper window
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 mel frames in one window


class AudioError(LightspeedError, ValueError):
    """An audio file cannot be read (format, encoding) or audio has the wrong shape."""


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """(samples as float32 in [-1, 1), shape (frames, channels); sample rate) of a PCM WAV file."""
    path = Path(path)
    try:
        with wave.open(str(path), "rb") as w:
            channels, width, rate, frames = w.getnchannels(), w.getsampwidth(), w.getframerate(), w.getnframes()
            raw = w.readframes(frames)
    except (wave.Error, EOFError) as e:  # e.g. IEEE-float WAVs: the stdlib reads integer PCM only
        raise AudioError(f"{path}: not a PCM WAV file the stdlib can read ({e}); convert it to 16-bit PCM") from None
    except OSError as e:
        raise AudioError(f"{path}: cannot read: {e}") from None
    n = len(raw) // (width * channels)
    raw = raw[:n * width * channels]  # a truncated last frame is dropped, as wave's own readers do
    if width == 1:  # 8-bit WAV is unsigned with a 128 offset
        x = (np.frombuffer(raw, np.uint8).astype(np.float32) - 128.0) / 128.0
    elif width == 2:
        x = np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
    elif width == 3:  # 24-bit: widen each little-endian triple to int32 (sign from the top byte)
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        x = (np.where(v >= 1 << 23, v - (1 << 24), v)).astype(np.float32) / float(1 << 23)
    elif width == 4:
        x = (np.frombuffer(raw, "<i4").astype(np.float64) / 2147483648.0).astype(np.float32)
    else:
        raise AudioError(f"{path}: unsupported sample width of {width} bytes")
    return x.reshape(n, channels), rate


def resample(x: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    """Band-limited resampling of a 1-D signal by zero-padding/truncating its spectrum (FFT method).

    Simple and alias-free (content above the new Nyquist frequency is cut exactly), but it treats
    the signal as periodic, so the first and last few milliseconds can ring slightly; for speech
    recognition that is harmless.  Polyphase filters (soxr, ffmpeg) are better for long audio."""
    if rate_in == rate_out or x.size == 0:
        return x.astype(np.float32)
    n_out = int(round(x.shape[0] * rate_out / rate_in))
    spec = np.fft.rfft(x.astype(np.float64))
    keep = n_out // 2 + 1
    out_spec = np.zeros(keep, dtype=np.complex128)
    m = min(keep, spec.shape[0])
    out_spec[:m] = spec[:m]
    if n_out < x.shape[0] and n_out % 2 == 0:  # the new Nyquist bin is real in a real signal's spectrum
        out_spec[-1] = out_spec[-1].real
    y = np.fft.irfft(out_spec, n=n_out) * (n_out / x.shape[0])
    return y.astype(np.float32)


def load_audio(path: str | Path, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Mono float32 samples of a WAV file at ``sample_rate`` (channels averaged, resampled if needed)."""
    x, rate = read_wav(path)
    mono = x.mean(axis=1) if x.shape[1] > 1 else x[:, 0]
    return resample(mono, rate, sample_rate)


def hz_to_mel(f: np.ndarray | float) -> np.ndarray:
    """Slaney's mel scale (librosa ``htk=False``): linear below 1 kHz, logarithmic above."""
    f = np.asarray(f, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, min_log_hz) / min_log_hz) / logstep, f / f_sp)


def mel_to_hz(m: np.ndarray | float) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


def mel_filters(n_mels: int = 80, n_fft: int = N_FFT, sample_rate: int = SAMPLE_RATE,
                f_min: float = 0.0, f_max: float | None = None) -> np.ndarray:
    """Slaney-style triangular mel filterbank, shape (n_mels, 1 + n_fft // 2), float64.

    Band edges are ``n_mels + 2`` points equally spaced on the Slaney mel scale; each triangle is
    scaled by ``2 / (right edge - left edge)`` in Hz so every filter has the same area."""
    f_max = sample_rate / 2 if f_max is None else f_max
    fft_freqs = np.linspace(0.0, sample_rate / 2, 1 + n_fft // 2)
    edges = mel_to_hz(np.linspace(hz_to_mel(f_min), hz_to_mel(f_max), n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    return weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]


def log_mel_spectrogram(audio: np.ndarray, n_mels: int = 80, n_samples: int = N_SAMPLES) -> np.ndarray:
    """Whisper's input features, shape (n_mels, n_samples // 160) float32 (see the module docstring).

    ``audio`` is mono 16 kHz; it is zero-padded or cut to ``n_samples`` (30 s) first, as Whisper's
    encoder takes exactly one 30 s window."""
    audio = np.asarray(audio)
    if audio.ndim != 1:
        raise AudioError(f"log_mel_spectrogram: expected mono audio of shape (samples,), got {audio.shape}")
    x = np.zeros(n_samples, dtype=np.float64)
    m = min(n_samples, audio.shape[0])
    x[:m] = audio[:m]
    pad = N_FFT // 2
    x = np.pad(x, pad, mode="reflect")  # centred frames, as torch.stft(center=True)
    n_frames = 1 + (x.shape[0] - N_FFT) // HOP_LENGTH
    frames = np.lib.stride_tricks.as_strided(x, (n_frames, N_FFT), (x.strides[0] * HOP_LENGTH, x.strides[0]))
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann, as torch.hann_window
    power = np.abs(np.fft.rfft(frames * window, axis=-1)) ** 2  # (frames, 1 + n_fft // 2)
    mel = mel_filters(n_mels) @ power.T  # (n_mels, frames)
    log_spec = np.log10(np.maximum(mel, 1e-10))[:, :-1]  # Whisper drops the last (centre-padded) frame
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)
