#!/usr/bin/env bash
# Install the gateway with the embedded stack into .venv and run it: a local tritonserver serving
# the shipped tiny model, and the gateway on http://127.0.0.1:8000. Extra arguments go to the CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh local,speed
exec .venv/bin/triton-openai-gateway --embedded "$@"
