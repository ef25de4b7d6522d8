#!/bin/sh
# Build the gateway's wheel and install it, with only its runtime dependencies and the "speed"
# (uvloop, httptools), "postgres" (psycopg with its binary libpq, and its pool), "redis" (key
# limits shared by every pod) and "tracing" (the OpenTelemetry SDK and its OTLP/HTTP exporter)
# extras, into a fresh virtual environment: one image serves a SQLite responses store and a
# PostgreSQL one, counts key limits alone or in Redis, and traces when an endpoint is set.
# No torch, no Triton.
#
#   install-gateway.sh SOURCE_DIR VENV_DIR WHEEL_DIR
#
# The Dockerfile's build stage runs exactly this, and so does tests/deploy/test_image_install.py
# (against a real Triton), so what the test proves is what the image contains.
# PYTHON picks the interpreter (default: python3).
set -eu

if [ "$#" -ne 3 ]; then
    echo "usage: $0 SOURCE_DIR VENV_DIR WHEEL_DIR" >&2
    exit 64
fi
source_dir=$1
venv_dir=$2
wheel_dir=$3
python=${PYTHON:-python3}

"$python" -m pip wheel --no-deps --wheel-dir "$wheel_dir" "$source_dir"
"$python" -m venv "$venv_dir"
set -- "$wheel_dir"/triton_openai_gateway-*.whl
if [ "$#" -ne 1 ] || [ ! -f "$1" ]; then
    echo "expected exactly one gateway wheel in $wheel_dir, found: $*" >&2
    exit 1
fi
"$venv_dir/bin/python" -m pip install --disable-pip-version-check "$1[speed,postgres,redis,tracing]"
"$venv_dir/bin/python" -m pip check
