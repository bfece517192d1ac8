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

from pathlib import Path

import numpy as np

from ..errors import LightspeedError

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


_PCM, _IEEE_FLOAT, _EXTENSIBLE = 0x0001, 0x0003, 0xFFFE


def _wav_chunks(path: Path, data: bytes) -> tuple[bytes, bytes]:
    """The ``fmt `` and ``data`` chunks of a RIFF/WAVE file (other chunks skipped; sizes bounded)."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise AudioError(f"{path}: not a WAV file (no RIFF/WAVE header); use PCM or IEEE-float WAV")
    fmt = body = None
    pos = 12
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], int.from_bytes(data[pos + 4:pos + 8], "little")
        start = pos + 8
        if cid == b"data":
            # a streamed WAV may declare a larger (or 0xFFFFFFFF) size: read what is there, as wave does
            body = data[start:min(start + size, len(data))]
        elif cid == b"fmt ":
            if start + size > len(data):
                raise AudioError(f"{path}: truncated WAV file (the fmt chunk runs past the end)")
            fmt = data[start:start + size]
        pos = start + size + (size & 1)  # chunks are padded to an even size
        if fmt is not None and body is not None:
            break
    if fmt is None or len(fmt) < 16:
        raise AudioError(f"{path}: WAV file without a valid fmt chunk")
    if body is None:
        raise AudioError(f"{path}: WAV file without a data chunk")
    return fmt, body


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """(samples as float32, shape (frames, channels); sample rate) of a WAV file: integer PCM of 8, 16, 24 or
    32 bits (scaled to [-1, 1)) or IEEE float of 32 or 64 bits (as stored), plain or WAVE_FORMAT_EXTENSIBLE.

    The RIFF chunks are parsed here: the stdlib's ``wave`` reads integer PCM only."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise AudioError(f"{path}: cannot read: {e}") from None
    fmt, raw = _wav_chunks(path, data)
    tag, channels = int.from_bytes(fmt[0:2], "little"), int.from_bytes(fmt[2:4], "little")
    rate, bits = int.from_bytes(fmt[4:8], "little"), int.from_bytes(fmt[14:16], "little")
    if tag == _EXTENSIBLE:
        if len(fmt) < 26:
            raise AudioError(f"{path}: WAVE_FORMAT_EXTENSIBLE without its sub-format")
        tag = int.from_bytes(fmt[24:26], "little")  # the first two bytes of the sub-format GUID
    if channels < 1 or rate < 1 or bits % 8 or not bits:
        raise AudioError(f"{path}: invalid WAV format ({channels} channels, {rate} Hz, {bits} bits)")
    width = bits // 8
    n = len(raw) // (width * channels)
    raw = raw[:n * width * channels]  # a truncated last frame is dropped, as wave's own readers do
    if tag == _IEEE_FLOAT:
        if width not in (4, 8):
            raise AudioError(f"{path}: unsupported float sample width of {width} bytes (32 and 64 bits are)")
        x = np.frombuffer(raw, "<f4" if width == 4 else "<f8").astype(np.float32)
        if not np.isfinite(x).all():  # NaN or inf would poison every mel frame of the window
            raise AudioError(f"{path}: the float samples include NaN or infinity")
    elif tag != _PCM:
        raise AudioError(f"{path}: WAV encoding {tag:#06x} is not supported (integer PCM and IEEE float are); "
                         f"convert it to 16-bit PCM")
    elif width == 1:  # 8-bit WAV is unsigned with a 128 offset
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
