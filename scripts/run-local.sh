#!/usr/bin/env bash
# Install the gateway with the embedded stack into .venv and run it: a local tritonserver serving
# the shipped tiny model, and the gateway on http://127.0.0.1:8000. Extra arguments go to the CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
if ! .venv/bin/python -m pip install --disable-pip-version-check -e '.[local,speed]' > .venv/install.log 2>&1; then
    grep -v "^WARNING: Location" .venv/install.log >&2
    echo "install failed (full log: .venv/install.log)" >&2
    exit 1
fi
exec .venv/bin/triton-openai-gateway --embedded "$@"
