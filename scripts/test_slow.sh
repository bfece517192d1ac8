#!/usr/bin/env bash
# Run the tests marked slow (excluded from the default run and from CI).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m pytest -m slow "$@"
