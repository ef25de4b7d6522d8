"""``--workers 2`` in front of the session's real Triton: both workers serve streaming and
non-streaming requests, a client that leaves cancels its Triton work whichever worker held it,
``/metrics`` adds up both workers whichever one answers the scrape, and SIGTERM drains both.

Which worker answered is read from the gateway's own log: with several workers every line says
``worker=<i> pid=<pid>``, and ``--log-requests`` writes one JSON line per request with its id.
New connections spread over the workers by the kernel's ``SO_REUSEPORT`` hash, so each test opens
one connection per request and sends enough of them that both workers get some (the chance that
24 connections all land on one of two workers is 2^-23)."""

from __future__ import annotations

import json
import re
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import GatewayProcess, read_metric, start_gateway, stop_gateway, wait_for

SCRIPTED = "scripted"
CONNECTIONS = 24
_ACCESS_LINE = re.compile(r"worker=(?P<worker>\d+) pid=(?P<pid>\d+) gateway\.access \[[^\]]*\] (?P<json>\{.*\})$")


def script(responses: int = 3, delay: float = 0.0, hang: float = 0.0) -> str:
    return json.dumps({"responses": [{"utf8": ["tok "], "delay": delay} for _ in range(responses)], "hang": hang})


def start_workers(triton: TritonServer, log: Path, *flags: str) -> GatewayProcess:
    """A gateway with two workers, returned once both serve (readiness is answered by either)."""
    gateway = start_gateway(triton.grpc_url, log, "--workers", "2", "--log-requests", *flags)
    if not wait_for(lambda: gateway.log_text().count("Application startup complete") == 2, timeout=60):
        stop_gateway(gateway)
        raise RuntimeError(f"both workers did not start:\n{gateway.log_text()}")
    return gateway


@pytest.fixture(scope="module")
def workers(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    gateway = start_workers(triton, tmp_path_factory.mktemp("workers") / "gateway.log")
    yield gateway
    stop_gateway(gateway)


def pids_by_request(gateway: GatewayProcess) -> dict[str, int]:
    """Request id → pid of the worker that answered it, from the request log lines."""
    found: dict[str, int] = {}
    for line in gateway.log_text().splitlines():
        match = _ACCESS_LINE.search(line)
        if match:
            found[json.loads(match["json"])["request_id"]] = int(match["pid"])
    return found


def worker_pids(gateway: GatewayProcess) -> set[int]:
    return {int(p) for p in re.findall(r"worker \d+ started \(pid (\d+)\)", gateway.log_text())}


def answered_by(gateway: GatewayProcess, request_ids: list[str]) -> set[int]:
    assert wait_for(lambda: set(request_ids) <= pids_by_request(gateway).keys()), "request lines missing"
    pids = pids_by_request(gateway)
    return {pids[r] for r in request_ids}


def test_non_streaming_requests_are_answered_by_both_workers(workers: GatewayProcess) -> None:
    ids = []
    for _ in range(CONNECTIONS):
        response = httpx.post(workers.url + "/v1/completions", json={"model": SCRIPTED, "prompt": script()}, timeout=30)
        assert response.status_code == 200 and response.json()["choices"][0]["text"] == "tok tok tok "
        ids.append(response.headers["x-request-id"])
    assert answered_by(workers, ids) == worker_pids(workers)
    assert len(worker_pids(workers)) == 2


def test_streams_are_answered_by_both_workers_to_the_last_event(workers: GatewayProcess) -> None:
    ids = []
    for _ in range(CONNECTIONS):
        body = {"model": SCRIPTED, "prompt": script(), "stream": True}
        with httpx.stream("POST", workers.url + "/v1/completions", json=body, timeout=30) as response:
            lines = [line for line in response.iter_lines() if line]
            ids.append(response.headers["x-request-id"])
        texts = [json.loads(line[6:])["choices"][0]["text"] for line in lines if line.startswith("data: {")]
        assert "".join(texts) == "tok tok tok " and lines[-1] == "data: [DONE]"
    assert answered_by(workers, ids) == worker_pids(workers)


def scripted(triton: TritonServer, name: str) -> float:
    return read_metric(triton.metrics_url, name)


def test_clients_leaving_cancel_triton_work_on_both_workers(workers: GatewayProcess, triton: TritonServer) -> None:
    """Half the clients leave before the first token (a long prefill), half mid-stream."""
    before = scripted(triton, "scripted_requests_cancelled_total")
    ids = []
    for i in range(CONNECTIONS // 2):
        if i % 2:
            body = {"model": SCRIPTED, "prompt": script(responses=1, hang=10), "stream": True}
            request_id = f"leave-early-{i}"
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(
                    workers.url + "/v1/completions",
                    json=body,
                    headers={"x-request-id": request_id},
                    timeout=httpx.Timeout(10, read=0.5),
                )
        else:
            body = {"model": SCRIPTED, "prompt": script(responses=200, delay=0.05), "stream": True}
            request_id = f"leave-mid-stream-{i}"
            with httpx.stream(
                "POST", workers.url + "/v1/completions", json=body, headers={"x-request-id": request_id}, timeout=30
            ) as response:
                for line in response.iter_lines():
                    if line.startswith("data: {"):
                        break  # one token arrived; the client walks away
        ids.append(request_id)
    want = before + len(ids)
    assert wait_for(
        lambda: (
            scripted(triton, "scripted_requests_cancelled_total") == want
            and scripted(triton, "scripted_requests_in_flight") == 0
        ),
        timeout=10,
    )
    assert answered_by(workers, ids) == worker_pids(workers)


def _requests_total(url: str) -> float:
    return read_metric(url + "/metrics", "gateway_requests_total")


def test_metrics_add_up_both_workers_whichever_answers(workers: GatewayProcess) -> None:
    before = _requests_total(workers.url)
    ids = []
    for _ in range(CONNECTIONS):
        response = httpx.post(workers.url + "/v1/completions", json={"model": SCRIPTED, "prompt": script(1)})
        ids.append(response.headers["x-request-id"])
    assert len(answered_by(workers, ids)) == 2
    # Every scrape on a new connection (so both workers answer some): each sees all the requests.
    scrapes = {_requests_total(workers.url) for _ in range(8)}
    assert scrapes == {before + CONNECTIONS}


def test_running_gauges_add_up_streams_held_by_both_workers(workers: GatewayProcess) -> None:
    streams = 8
    done = threading.Event()
    ids: list[str] = []

    def hold(i: int) -> None:
        body = {"model": SCRIPTED, "prompt": script(responses=1, delay=0.0, hang=30), "stream": True}
        request_id = f"held-{i}"
        ids.append(request_id)
        try:
            with httpx.stream(
                "POST", workers.url + "/v1/completions", json=body, headers={"x-request-id": request_id}, timeout=60
            ) as response:
                for _ in response.iter_lines():
                    if done.is_set():
                        return
        except httpx.HTTPError:
            pass

    threads = [threading.Thread(target=hold, args=(i,)) for i in range(streams)]
    for thread in threads:
        thread.start()
    try:
        running = 'vllm:num_requests_running{model_name="scripted"} ' + f"{float(streams)}"
        assert wait_for(lambda: running in httpx.get(workers.url + "/metrics").text, timeout=10)
        page = httpx.get(workers.url + "/metrics").text
        assert 'gateway_requests_running{model="scripted"} ' + f"{float(streams)}" in page
        # The replica gauges too: in flight adds up over the workers, in rotation is 1 (any worker's).
        replica = re.search(r'gateway_replica_up\{replica="([^"]+)"\} 1\.0', page)
        assert replica is not None, page
        assert f'gateway_replica_in_flight{{replica="{replica[1]}"}} {float(streams)}' in page
    finally:
        done.set()
        for thread in threads:
            thread.join(timeout=40)
    assert wait_for(
        lambda: 'vllm:num_requests_running{model_name="scripted"} 0.0' in httpx.get(workers.url + "/metrics").text
    )


def test_sigterm_drains_both_workers_and_refuses_new_work(triton: TritonServer, tmp_path: Path) -> None:
    gateway = start_workers(triton, tmp_path / "gateway.log", "--shutdown-grace-period", "15")
    metrics_dir = re.search(r"metrics: (\S+)\)", gateway.log_text())
    assert metrics_dir is not None and Path(metrics_dir[1]).is_dir()
    results: dict[str, list[str]] = {}

    def stream(i: int) -> None:
        request_id = f"drained-{i}"
        body = {"model": SCRIPTED, "prompt": script(responses=80, delay=0.05), "stream": True}
        lines: list[str] = []
        try:
            with httpx.stream(
                "POST", gateway.url + "/v1/completions", json=body, headers={"x-request-id": request_id}, timeout=30
            ) as response:
                lines.extend(line for line in response.iter_lines() if line)
        except httpx.HTTPError as exc:
            lines.append(f"transport error: {exc!r}")
        results[request_id] = lines

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(12)]
    try:
        for thread in threads:
            thread.start()
        assert wait_for(lambda: scripted(triton, "scripted_requests_in_flight") == 12, timeout=10)
        gateway.process.send_signal(signal.SIGTERM)
        assert wait_for(lambda: gateway.log_text().count("draining:") == 2, timeout=5)
        for _ in range(4):  # new connections: both workers refuse
            assert httpx.get(gateway.url + "/health/ready").status_code == 503
            refused = httpx.post(gateway.url + "/v1/completions", json={"model": SCRIPTED, "prompt": script(1)})
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "shutting_down"
        for thread in threads:
            thread.join(timeout=20)
        assert gateway.process.wait(timeout=20) == 0
    finally:
        stop_gateway(gateway)
    assert len(results) == 12
    for request_id, lines in results.items():
        assert lines and lines[-1] == "data: [DONE]", (request_id, lines[-3:])
    assert answered_by(gateway, list(results)) == worker_pids(gateway)
    assert not Path(metrics_dir[1]).exists()


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        try:
            tasks = list(Path(f"/proc/{current}/task").iterdir())
            children = [int(c) for task in tasks for c in (task / "children").read_text().split()]
        except OSError:
            continue  # exited while we looked
        found.extend(children)
        todo.extend(children)
    return found


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_embedded_mode_starts_one_triton_for_both_workers(tmp_path: Path) -> None:
    """The supervisor starts Triton once (the test models: they load in about a second), both
    workers serve from it, and it goes down after they drained."""
    repository = Path(__file__).resolve().parents[1] / "triton_models"
    gateway = start_gateway(
        "localhost:1", tmp_path / "gateway.log", "--embedded", "--model-repository", str(repository), "--workers", "2"
    )
    try:
        assert wait_for(lambda: gateway.log_text().count("Application startup complete") == 2, timeout=60)
        tritons = [p for p in _descendants(gateway.process.pid) if _command(p) == "tritonserver"]
        assert len(tritons) == 1, gateway.log_text()
        for _ in range(CONNECTIONS // 2):
            response = httpx.post(gateway.url + "/v1/completions", json={"model": SCRIPTED, "prompt": script(2)})
            assert response.status_code == 200 and response.json()["choices"][0]["text"] == "tok tok "
        gateway.process.send_signal(signal.SIGTERM)
        assert gateway.process.wait(timeout=30) == 0
        assert wait_for(lambda: not Path(f"/proc/{tritons[0]}").exists(), timeout=10)
    finally:
        stop_gateway(gateway)
