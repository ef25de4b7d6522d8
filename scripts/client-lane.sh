#!/usr/bin/env bash
# The client lane: each agent framework's default path, through the real library, against the
# gateway's embedded default (tiny-llm on a local tritonserver): the Vercel AI SDK (Node), the
# OpenAI Agents SDK, LangChain, instructor and LlamaIndex, and the coding agents Claude Code and
# the Codex CLI (npm, run non-interactively) (tests/client_lane, docs/CLIENT_LANE.md).
#
# Installs the Python clients into their own venv (.venv-clients, from the lock
# tests/client_lane/requirements.txt; rebuilt when the lock changes) with uv when it can
# (scripts/installer.sh), else pip, and the Node clients with `npm ci` (tests/client_lane/node,
# from its package-lock.json); then runs pytest on tests/client_lane from that venv. The gateway
# itself runs from the main .venv (scripts/install.sh), started once by the lane's conftest. Extra
# arguments go to pytest.
#
# Where an install step fails (no network, a package missing, no Node.js 20), the lane prints
# `SKIPPED client lane: <why>` and exits 0, so the rest of ./scripts/test.sh still counts;
# GATEWAY_REQUIRE_PEERS=1 (set by .ci/run) makes that a failure.
#
#   bash scripts/client-lane.sh                     # install if needed, run the lane
#   bash scripts/client-lane.sh -k langchain -x     # any pytest arguments
#   CLIENT_LANE_INSTALL_ONLY=1 bash scripts/client-lane.sh
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-clients
LOG="$VENV/install.log"
LOCK=tests/client_lane/requirements.txt
NODE_DIR=tests/client_lane/node

skip() {
    if [ "${GATEWAY_REQUIRE_PEERS:-}" = 1 ]; then
        echo "FAILED client lane: $1, and GATEWAY_REQUIRE_PEERS=1 requires the lane" >&2
        exit 1
    fi
    echo "SKIPPED client lane: $1 (GATEWAY_REQUIRE_PEERS=1 makes this a failure)"
    exit 0
}

PYTHON=${CLIENT_LANE_PYTHON:-$(command -v python3.11 || command -v python3 || true)}
if [ -z "$PYTHON" ] || ! "$PYTHON" -c 'import sys, venv; sys.exit(sys.version_info < (3, 11))' 2> /dev/null; then
    skip "no Python 3.11 or newer with venv for $VENV (CLIENT_LANE_PYTHON picks one)"
fi
if ! command -v node > /dev/null 2>&1 || ! command -v npm > /dev/null 2>&1; then
    skip "Node.js and npm are not on PATH (the Vercel AI SDK needs Node.js 20 or newer)"
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
    skip "Node.js $(node -v) is older than 20, which the Vercel AI SDK needs"
fi

# shellcheck source=scripts/installer.sh
. scripts/installer.sh

# The venv is stamped with its lock; another lock (or a failed install, which leaves no stamp)
# rebuilds it from nothing.
stamp=$(sha256sum "$LOCK" | cut -d' ' -f1)
if [ ! -f "$VENV/.lock-sha256" ] || [ "$(cat "$VENV/.lock-sha256")" != "$stamp" ]; then
    start=$SECONDS
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    echo '*' > "$VENV/.gitignore"
    installer_for "$VENV"
    echo "client lane: installing the Python clients into $VENV with $INSTALLER (log: $LOG)"
    if ! "${INSTALL[@]}" -r "$LOCK" > "$LOG" 2>&1; then
        tail -n 30 "$LOG" >&2
        rm -rf "$VENV"
        skip "installing $LOCK with $INSTALLER failed (the log's end is above)"
    fi
    echo "$stamp" > "$VENV/.lock-sha256"
    echo "client lane: Python clients installed in $((SECONDS - start)) s"
fi

# npm ci wipes node_modules and installs the lock; skipped when node_modules holds this lock already.
if ! cmp -s "$NODE_DIR/package-lock.json" "$NODE_DIR/node_modules/.client-lane-lock.json"; then
    start=$SECONDS
    mkdir -p "$VENV"
    if ! (cd "$NODE_DIR" && npm ci --no-audit --no-fund) > "$VENV/npm.log" 2>&1; then
        tail -n 30 "$VENV/npm.log" >&2
        skip "npm ci in $NODE_DIR failed (the log's end is above)"
    fi
    cp "$NODE_DIR/package-lock.json" "$NODE_DIR/node_modules/.client-lane-lock.json"
    echo "client lane: Node clients installed in $((SECONDS - start)) s"
fi

if [ -n "${CLIENT_LANE_INSTALL_ONLY:-}" ]; then
    exit 0
fi

# The gateway runs from the main venv (the lane's venv holds only clients).
GATEWAY_PYTHON=${CLIENT_LANE_GATEWAY_PYTHON:-.venv/bin/python}
if ! "$GATEWAY_PYTHON" -c 'import gateway, pytriton' > /dev/null 2>&1; then
    echo "FAILED client lane: $GATEWAY_PYTHON cannot import the gateway with its local extra: run scripts/install.sh local first" >&2
    exit 1
fi

CLIENT_LANE=1 CLIENT_LANE_GATEWAY_PYTHON=$GATEWAY_PYTHON exec "$VENV/bin/python" -m pytest \
    -c tests/client_lane/pytest.ini tests/client_lane "$@"
