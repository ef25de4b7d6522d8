"""The Batch API end to end: the openai SDK's ``files`` and ``batches`` → gateway → real Triton.

Each line's answer is compared with what the same request gets from the endpoint itself, so a
batch line is proven to be planned and run as a request is (an error line included: same status,
same body).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import MODEL, GatewayProcess, read_metric, start_gateway, stop_gateway

EMBED = "tiny-llm-embed"


@pytest.fixture(scope="module")
def batch_gateway(triton: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    folder = tmp_path_factory.mktemp("batches")
    process = start_gateway(
        triton.grpc_url,
        folder / "gateway.log",
        "--responses-store",
        f"sqlite:///{folder / 'store.db'}",
        "--batch-poll-interval",
        "0.2",
        "--batch-concurrency",
        "12",
    )
    yield process
    stop_gateway(process)


@pytest.fixture(scope="module")
def sdk(batch_gateway: GatewayProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=batch_gateway.url + "/v1", api_key="unused", max_retries=0, timeout=60) as client:
        yield client


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def chat_line(custom_id: str, text: str, **extra: Any) -> dict[str, Any]:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 4, "temperature": 0}
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": {**body, **extra}}


def embed_line(custom_id: str, text: str) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": "/v1/embeddings", "body": {"model": EMBED, "input": text}}


def wait_final(sdk: openai.OpenAI, batch_id: str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        batch = sdk.batches.retrieve(batch_id)
        if batch.status in ("completed", "expired", "cancelled", "failed"):
            return batch
        time.sleep(0.25)
    raise AssertionError(f"batch {batch_id} still {batch.status} after {timeout} s: {batch.request_counts}")


def read_file(sdk: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in sdk.files.content(file_id).text.splitlines()]


def test_a_thousand_mixed_lines_each_answered_once_as_its_endpoint_answers(
    sdk: openai.OpenAI, batch_gateway: GatewayProcess
) -> None:
    lines = []
    for i in range(1000):
        if i == 500:  # its endpoint answers this with a 400: the error file holds that answer
            lines.append(chat_line("bad-500", "x", temperature=7))
        elif i % 3 == 0:
            lines.append(embed_line(f"embed-{i}", f"document number {i}"))
        else:
            lines.append(chat_line(f"chat-{i}", f"question {i % 7}"))
    upload = sdk.files.create(file=("requests.jsonl", jsonl(lines)), purpose="batch")
    assert upload.purpose == "batch" and upload.bytes == len(jsonl(lines))
    batch = sdk.batches.create(
        input_file_id=upload.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        metadata={"team": "evals"},
    )
    assert batch.status == "in_progress" and batch.metadata == {"team": "evals"}
    assert batch.request_counts is not None and batch.request_counts.total == 1000
    done = wait_final(sdk, batch.id, timeout=240)
    assert done.status == "completed", done
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (999, 1)
    assert done.completed_at is not None and done.finalizing_at is not None and done.in_progress_at is not None

    output = read_file(sdk, done.output_file_id)
    errors = read_file(sdk, done.error_file_id)
    ids = [line["custom_id"] for line in output + errors]
    assert sorted(ids) == sorted(line["custom_id"] for line in lines), "every custom_id exactly once"
    assert [line["custom_id"] for line in errors] == ["bad-500"]

    # the answers are the endpoints' own: compared with the same requests sent directly
    by_id = {line["custom_id"]: line for line in output}
    for sample in ("chat-1", "chat-2", "chat-4", "chat-5"):
        direct = httpx.post(batch_gateway.url + "/v1/chat/completions", json=lines[int(sample[5:])]["body"], timeout=30)
        answer = by_id[sample]["response"]
        assert answer["status_code"] == 200 and by_id[sample]["error"] is None
        assert answer["body"]["object"] == "chat.completion"
        assert answer["body"]["choices"][0]["message"] == direct.json()["choices"][0]["message"]
        assert answer["body"]["usage"] == direct.json()["usage"]
    direct_embedding = sdk.embeddings.create(model=EMBED, input="document number 3").data[0].embedding
    assert by_id["embed-3"]["response"]["body"]["data"][0]["embedding"] == pytest.approx(direct_embedding)
    bad_direct = httpx.post(batch_gateway.url + "/v1/chat/completions", json=lines[500]["body"], timeout=30)
    assert bad_direct.status_code == 400
    assert errors[0]["response"]["status_code"] == 400
    assert errors[0]["response"]["body"] == bad_direct.json()
    assert errors[0]["id"].startswith("batch_req_")

    output_file = sdk.files.retrieve(done.output_file_id)
    assert output_file.purpose == "batch_output"
    page = httpx.get(batch_gateway.url + "/metrics", timeout=5).text
    completed = [line for line in page.splitlines() if line.startswith('gateway_batch_lines_total{result="completed"}')]
    assert completed and float(completed[0].split()[-1]) >= 999


def test_cancel_stops_the_batch_and_keeps_what_ran(sdk: openai.OpenAI, batch_gateway: GatewayProcess) -> None:
    lines = [chat_line(f"long-{i}", "tell me everything", max_tokens=48, ignore_eos=True) for i in range(120)]
    upload = sdk.files.create(file=("long.jsonl", jsonl(lines)), purpose="batch")
    batch = sdk.batches.create(
        input_file_id=upload.id,
        endpoint="/v1/chat/completions",
        completion_window="24h",
        extra_body={"max_concurrency": 2},
    )
    deadline = time.monotonic() + 60
    while sdk.batches.retrieve(batch.id).request_counts.completed < 3:  # type: ignore[union-attr]
        assert time.monotonic() < deadline
        time.sleep(0.1)
    cancelling = sdk.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at is not None
    done = wait_final(sdk, batch.id, timeout=60)
    assert done.status == "cancelled" and done.cancelled_at is not None
    output = read_file(sdk, done.output_file_id)
    errors = read_file(sdk, done.error_file_id)
    assert 3 <= len(output) < 120
    assert all(line["response"]["status_code"] == 200 for line in output)
    assert all(line["error"]["code"] == "batch_cancelled" and line["response"] is None for line in errors)
    assert sorted(line["custom_id"] for line in output + errors) == sorted(line["custom_id"] for line in lines)
    assert done.request_counts is not None and done.request_counts.completed == len(output)
    # nothing of it runs on anymore, here or in Triton
    assert read_metric(batch_gateway.url + "/metrics", "gateway_batch_lines_running") == 0
    assert read_metric(batch_gateway.url + "/metrics", "vllm:num_requests_running", 0) == 0


def test_files_are_listed_retrieved_and_deleted(sdk: openai.OpenAI) -> None:
    upload = sdk.files.create(file=("one.jsonl", jsonl([chat_line("a", "hi")])), purpose="batch")
    assert sdk.files.retrieve(upload.id).filename == "one.jsonl"
    assert upload.id in [f.id for f in sdk.files.list(purpose="batch")]
    assert sdk.files.content(upload.id).text == jsonl([chat_line("a", "hi")]).decode()
    assert sdk.files.delete(upload.id).deleted
    with pytest.raises(openai.NotFoundError):
        sdk.files.retrieve(upload.id)
    listed = sdk.batches.list(limit=2)
    assert len(listed.data) <= 2


def test_bad_uploads_and_batches_are_refused_with_the_reason(sdk: openai.OpenAI, batch_gateway: GatewayProcess) -> None:
    dup = jsonl([chat_line("same", "a"), chat_line("same", "b")])
    with pytest.raises(openai.BadRequestError) as refused:
        sdk.files.create(file=("dup.jsonl", dup), purpose="batch")
    assert "line 2" in str(refused.value) and "custom_id" in str(refused.value)
    streamed = jsonl([chat_line("s", "a", stream=True)])
    with pytest.raises(openai.BadRequestError, match="stream"):
        sdk.files.create(file=("s.jsonl", streamed), purpose="batch")
    with pytest.raises(openai.BadRequestError, match="purpose"):
        sdk.files.create(file=("a.jsonl", jsonl([chat_line("a", "a")])), purpose="fine-tune")
    with pytest.raises(openai.NotFoundError):
        sdk.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions", completion_window="24h")
    good = sdk.files.create(file=("g.jsonl", jsonl([chat_line("g", "a")])), purpose="batch")
    with pytest.raises(openai.BadRequestError, match="completion_window"):
        sdk.batches.create(input_file_id=good.id, endpoint="/v1/chat/completions", completion_window="2d")  # type: ignore[arg-type]
    raw = httpx.post(batch_gateway.url + "/v1/files", json={"purpose": "batch"}, timeout=10)
    assert raw.status_code == 400 and set(raw.json()["error"]) == {"message", "type", "param", "code"}


def test_uploads_over_the_size_cap_are_413(triton: TritonServer, tmp_path: Path) -> None:
    process = start_gateway(
        triton.grpc_url,
        tmp_path / "gateway.log",
        "--responses-store",
        f"sqlite:///{tmp_path / 'store.db'}",
        "--batch-max-file-bytes",
        "2048",
        "--batch-max-lines",
        "3",
    )
    try:
        with openai.OpenAI(base_url=process.url + "/v1", api_key="x", max_retries=0) as client:
            with pytest.raises(openai.APIStatusError) as big:
                client.files.create(file=("big.jsonl", b"x" * 200_000), purpose="batch")
            assert big.value.status_code == 413
            # sent chunked (no Content-Length): counted as the route reads it, refused past the cap
            boundary = "gatewaytestboundary"
            multipart = (
                (
                    f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
                    f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.jsonl"\r\n'
                    "Content-Type: application/jsonl\r\n\r\n"
                ).encode()
                + jsonl([chat_line(str(i), "a" * 100) for i in range(40)])
                + f"\r\n--{boundary}--\r\n".encode()
            )
            chunked = httpx.post(
                process.url + "/v1/files",
                content=iter([multipart[i : i + 1000] for i in range(0, len(multipart), 1000)]),
                headers={"Content-Type": f"multipart/form-data; boundary={boundary}", "Authorization": "Bearer x"},
            )
            assert chunked.status_code == 413 and chunked.json()["error"]["type"] == "invalid_request_error"
            many = jsonl([chat_line(str(i), "a") for i in range(4)])
            with pytest.raises(openai.BadRequestError, match="more than 3"):
                client.files.create(file=("many.jsonl", many), purpose="batch")
    finally:
        stop_gateway(process)


def test_batches_belong_to_their_key_and_spend_its_tokens(triton: TritonServer, tmp_path: Path) -> None:
    from gateway.keys.hash import hash_key

    keys = tmp_path / "keys.toml"
    keys.write_text(
        f'[[key]]\nname = "team-a"\nsha256 = "{hash_key("sk-a")}"\nmodels = ["{MODEL}"]\ntpm = 100000\n\n'
        f'[[key]]\nname = "team-b"\nsha256 = "{hash_key("sk-b")}"\n'
    )
    process = start_gateway(
        triton.grpc_url,
        tmp_path / "gateway.log",
        "--api-key-policy-file",
        str(keys),
        "--responses-store",
        f"sqlite:///{tmp_path / 'store.db'}",
        "--batch-poll-interval",
        "0.2",
    )
    try:
        a = openai.OpenAI(base_url=process.url + "/v1", api_key="sk-a", max_retries=0)
        b = openai.OpenAI(base_url=process.url + "/v1", api_key="sk-b", max_retries=0)
        lines = [chat_line(f"a-{i}", f"hello {i}") for i in range(6)] + [embed_line("not-allowed", "x")]
        upload = a.files.create(file=("a.jsonl", jsonl(lines)), purpose="batch")
        batch = a.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h")
        done = wait_final(a, batch.id, timeout=60)
        assert done.status == "completed"
        output, errors = read_file(a, done.output_file_id), read_file(a, done.error_file_id)
        assert len(output) == 6
        # the line its key may not run is answered as the key's own request would be
        refused = httpx.post(
            process.url + "/v1/embeddings", json=lines[-1]["body"], headers={"Authorization": "Bearer sk-a"}
        )
        assert refused.status_code >= 400
        assert [(e["custom_id"], e["response"]["status_code"]) for e in errors] == [
            ("not-allowed", refused.status_code)
        ]
        assert errors[0]["response"]["body"] == refused.json()
        # its tokens are the key's
        spent = sum(line["response"]["body"]["usage"]["completion_tokens"] for line in output)
        page = httpx.get(process.url + "/metrics", headers={"Authorization": "Bearer sk-a"}).text
        counted = sum(
            float(line.split()[-1])
            for line in page.splitlines()
            if line.startswith("gateway_key_completion_tokens_total{") and 'key="team-a"' in line
        )
        assert counted == spent > 0
        # another key sees none of it
        with pytest.raises(openai.NotFoundError):
            b.batches.retrieve(batch.id)
        with pytest.raises(openai.NotFoundError):
            b.files.content(done.output_file_id)  # type: ignore[arg-type]
        with pytest.raises(openai.NotFoundError):
            b.batches.cancel(batch.id)
        assert [f.id for f in b.files.list()] == [] and b.batches.list().data == []
        a.close()
        b.close()
    finally:
        stop_gateway(process)
