#!/usr/bin/env bash
# Install everything the test suite needs into .venv and run it: unit tests, integration tests
# against a real tritonserver, chart tests. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# The proxy-drain tests run a real nginx (Debian's nginx-light: HTTP/2 and grpc_pass built in).
if ! command -v nginx > /dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
    apt_log=$(mktemp)
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light; } \
        > "$apt_log" 2>&1; then
        cat "$apt_log" >&2
        echo "could not install nginx-light (it needs root and Debian's apt)" >&2
        exit 1
    fi
    rm -f "$apt_log"
fi
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
if ! .venv/bin/python -m pip install --disable-pip-version-check -e '.[local,test,speed]' > .venv/install.log 2>&1; then
    grep -v "^WARNING: Location" .venv/install.log >&2
    echo "install failed (full log: .venv/install.log)" >&2
    exit 1
fi
exec .venv/bin/python -m pytest "$@"
