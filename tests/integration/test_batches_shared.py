"""Two gateways on one real PostgreSQL share a batch; one is killed mid-batch (SIGKILL).

The killed gateway's leased lines are run by the other once their leases pass, and the batch
completes with every line exactly once: nothing lost, nothing twice.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import openai

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import MODEL, GatewayProcess, start_gateway, stop_gateway
from tests.postgres import start_postgres, stop_postgres

LINES = 300


def lines_completed(gateway: GatewayProcess) -> float:
    page = httpx.get(gateway.url + "/metrics", timeout=5).text
    for line in page.splitlines():
        if line.startswith('gateway_batch_lines_total{result="completed"}'):
            return float(line.split()[-1])
    return 0.0


def test_a_batch_survives_one_of_its_gateways_killed(triton: TritonServer, tmp_path: Path) -> None:
    server = start_postgres()
    gateways: list[GatewayProcess] = []
    try:
        url = server.url()
        flags = (
            "--responses-store",
            url,
            "--batch-lease-seconds",
            "3",
            "--batch-poll-interval",
            "0.2",
            "--batch-concurrency",
            "4",
            "--batch-max-concurrency",
            "8",
        )
        gateways = [start_gateway(triton.grpc_url, tmp_path / f"gateway-{i}.log", *flags) for i in range(2)]
        first, doomed = gateways
        body = {"model": MODEL, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
        requests = [
            {
                "custom_id": f"line-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {**body, "messages": [{"role": "user", "content": f"count to {i}"}]},
            }
            for i in range(LINES)
        ]
        content = "".join(json.dumps(r) + "\n" for r in requests).encode()
        with openai.OpenAI(base_url=first.url + "/v1", api_key="x", max_retries=0, timeout=30) as sdk:
            upload = sdk.files.create(file=("shared.jsonl", content), purpose="batch")
            batch = sdk.batches.create(
                input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            # both gateways run its lines: the other one found the batch in the shared store
            deadline = time.monotonic() + 60
            while not (lines_completed(first) >= 5 and lines_completed(doomed) >= 5):
                assert time.monotonic() < deadline, "both gateways should be running the batch's lines"
                time.sleep(0.1)
            doomed_done = lines_completed(doomed)
            doomed.process.kill()  # SIGKILL: its leases stay behind in the database
            doomed.process.wait(timeout=10)
            killed_at = sdk.batches.retrieve(batch.id).request_counts
            assert killed_at is not None and killed_at.completed < LINES, "killed mid-batch"

            deadline = time.monotonic() + 180
            while (done := sdk.batches.retrieve(batch.id)).status != "completed":
                assert time.monotonic() < deadline, f"batch stuck: {done.status} {done.request_counts}"
                time.sleep(0.25)
            assert done.request_counts is not None
            assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (
                LINES,
                LINES,
                0,
            )
            assert done.output_file_id is not None and done.error_file_id is None
            output = [json.loads(line) for line in sdk.files.content(done.output_file_id).text.splitlines()]
        ids = [line["custom_id"] for line in output]
        assert len(ids) == LINES and sorted(ids) == sorted(r["custom_id"] for r in requests), "each line exactly once"
        assert all(line["response"]["status_code"] == 200 for line in output)
        assert all(line["response"]["body"]["usage"]["completion_tokens"] == 24 for line in output)
        # the survivor ran all the rest, the killed one's leased lines among them (the slack: lines
        # the killed one finished in the instant between the scrape and the kill)
        assert lines_completed(first) >= LINES - doomed_done - 8
    finally:
        for gateway in gateways:
            stop_gateway(gateway)
        stop_postgres(server)
