#!/usr/bin/env bash
# Install everything the test suite needs into .venv and run it: unit tests, integration tests
# against a real tritonserver, chart tests. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
if ! .venv/bin/python -m pip install --disable-pip-version-check -e '.[local,test,speed]' > .venv/install.log 2>&1; then
    grep -v "^WARNING: Location" .venv/install.log >&2
    echo "install failed (full log: .venv/install.log)" >&2
    exit 1
fi
exec .venv/bin/python -m pytest "$@"
