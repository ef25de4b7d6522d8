"""Engine load: what is read from Triton's metrics text, the HTTP read of a real local server,
and the router's score of a replica."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator

import pytest

from gateway.backend.replicas.engine_load import (
    EngineLoad,
    EngineLoadReader,
    parse_engine_load,
    replica_load,
    total_load,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# What Triton 2.51 prints for the reference model (copied from its metrics port, the
# counters and CPU gauges trimmed), with the vLLM-named gauges tiny-llm exports as custom metrics.
TRITON_TINY_LLM = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="tiny-llm",version="1"} 41
# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="tiny-llm",reason="OTHER",version="1"} 0
nv_inference_request_failure{model="tiny-llm",reason="BACKEND",version="1"} 0
nv_inference_request_failure{model="tiny-llm",reason="CANCELED",version="1"} 2
nv_inference_request_failure{model="tiny-llm",reason="REJECTED",version="1"} 0
# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in microseconds (includes cached requests)
# TYPE nv_inference_queue_duration_us counter
nv_inference_queue_duration_us{model="tiny-llm",version="1"} 5120
# HELP tiny_llm_requests_total Requests received by tiny-llm (valid or not)
# TYPE tiny_llm_requests_total counter
tiny_llm_requests_total{model="tiny-llm",version="1"} 48
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="tiny-llm",version="1"} 2
nv_inference_pending_request_count{model="tiny-llm-embed",version="1"} 0
# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]
# TYPE nv_cpu_utilization gauge
nv_cpu_utilization 0.3125
# HELP tiny_llm_requests_in_flight Requests queued or generating inside tiny-llm
# TYPE tiny_llm_requests_in_flight gauge
tiny_llm_requests_in_flight{model="tiny-llm",version="1"} 7
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model="tiny-llm",version="1"} 4
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model="tiny-llm",version="1"} 3
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model="tiny-llm",version="1"} 0.25
"""

# The TensorRT-LLM backend's gauges as its Triton metrics section shows them (the Triton user
# guide, tensorrtllm_backend/README.html#triton-metrics): labels sorted, as Triton prints them.
TRITON_TRTLLM = """\
# HELP nv_trt_llm_request_metrics TRT LLM request metrics
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="waiting",version="1"} 1
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="context",version="1"} 1
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="scheduled",version="1"} 5
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="max",version="1"} 512
nv_trt_llm_request_metrics{model="tensorrt_llm",request_type="active",version="1"} 6
# HELP nv_trt_llm_runtime_memory_metrics TRT LLM runtime memory metrics
# TYPE nv_trt_llm_runtime_memory_metrics gauge
nv_trt_llm_runtime_memory_metrics{memory_type="gpu",model="tensorrt_llm",version="1"} 1610236
# HELP nv_trt_llm_kv_cache_block_metrics TRT LLM KV cache block metrics
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="tensorrt_llm",version="1"} 0.4875
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="tensorrt_llm",version="1"} 64
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="tensorrt_llm",version="1"} 3042
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="free",model="tensorrt_llm",version="1"} 3198
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="tensorrt_llm",version="1"} 6240
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="ensemble",version="1"} 0
nv_inference_pending_request_count{model="tensorrt_llm",version="1"} 2
"""


# -- parsing ---------------------------------------------------------------------------------


def test_triton_text_of_the_reference_model_adds_triton_queue_to_the_engine_queue() -> None:
    loads = parse_engine_load(TRITON_TINY_LLM)
    assert loads == {
        "tiny-llm": EngineLoad(running=4.0, waiting=5.0, kv_usage=0.25),
        "tiny-llm-embed": EngineLoad(running=0.0, waiting=0.0, kv_usage=None),  # Triton's pending alone
    }


def test_tensorrt_llm_active_runs_waiting_queues_and_the_fraction_is_its_cache() -> None:
    loads = parse_engine_load(TRITON_TRTLLM)
    assert loads["tensorrt_llm"] == EngineLoad(running=6.0, waiting=3.0, kv_usage=0.4875)
    assert loads["ensemble"] == EngineLoad(running=0.0, waiting=0.0, kv_usage=None)


def test_tensorrt_llm_without_a_fraction_reads_used_over_max_blocks_and_queued_as_waiting() -> None:
    older = "\n".join(
        line for line in TRITON_TRTLLM.splitlines() if '"fraction"' not in line and '"waiting"' not in line
    )
    older += '\nnv_trt_llm_request_metrics{model="tensorrt_llm",request_type="queued",version="1"} 4\n'
    assert parse_engine_load(older)["tensorrt_llm"] == EngineLoad(running=6.0, waiting=6.0, kv_usage=3042 / 6240)


def test_versions_of_one_model_add_up_and_the_fullest_cache_stands_for_them() -> None:
    text = """\
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="m",version="1"} 1
nv_inference_pending_request_count{model="m",version="2"} 2
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model="m",version="1"} 3
vllm:num_requests_running{model="m",version="2"} 5
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model="m",version="1"} 0.5
vllm:gpu_cache_usage_perc{model="m",version="2"} 0.75
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="t",version="1"} 10
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="t",version="1"} 100
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used",model="t",version="2"} 90
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="t",version="2"} 100
"""
    loads = parse_engine_load(text)
    assert loads["m"] == EngineLoad(running=8.0, waiting=3.0, kv_usage=0.75)
    assert loads["t"] == EngineLoad(running=0.0, waiting=0.0, kv_usage=0.9)


def test_vllm_servers_model_name_label_is_read_too() -> None:
    text = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 10.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
"""
    assert parse_engine_load(text) == {"meta-llama/Llama-3.1-8B-Instruct": EngineLoad(22.0, 1.0, None)}


def test_metrics_that_name_no_load_give_no_entry_and_odd_values_never_make_a_nan_score() -> None:
    assert parse_engine_load("") == {}
    assert parse_engine_load('# TYPE nv_cpu_utilization gauge\nnv_cpu_utilization 0.5\nother{model="m"} 3\n') == {}
    odd = 'vllm:num_requests_running{model="m"} NaN\nvllm:num_requests_waiting{model="m"} -1\n'
    odd += 'vllm:kv_cache_usage_perc{model="m"} 1.5\nvllm:num_requests_running{model=""} 9\n'
    assert parse_engine_load(odd) == {"m": EngineLoad(running=0.0, waiting=0.0, kv_usage=1.0)}


@pytest.mark.parametrize("text", ["<html><body>Not Found</body></html>", "404 page not found", '{"error": "no"}', "ok"])
def test_text_that_is_not_metrics_raises_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_engine_load(text)


def test_a_replicas_total_adds_requests_and_keeps_the_fullest_cache() -> None:
    loads = {"a": EngineLoad(2.0, 1.0, 0.25), "b": EngineLoad(3.0, 0.0, None), "c": EngineLoad(0.0, 4.0, 0.5)}
    assert total_load(loads) == EngineLoad(5.0, 5.0, 0.5)
    assert total_load({"b": EngineLoad(3.0, 0.0, None)}) == EngineLoad(3.0, 0.0, None)
    assert total_load({}) == EngineLoad(0.0, 0.0, None)


# -- reading a real server -------------------------------------------------------------------


class _Metrics(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps the connection, as Triton's metrics server does

    def do_GET(self) -> None:
        status, body = {
            "/metrics": (200, TRITON_TINY_LLM),
            "/broken": (500, "Internal Server Error"),
            "/html": (200, "<html><body>Triton?</body></html>"),
        }.get(self.path, (404, "not found"))
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def metrics_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metrics)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def _refused_port() -> int:
    """A port nothing listens on: bound, never listened on, and closed."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_reader_reads_a_metrics_answer_and_none_for_every_kind_of_no_answer(metrics_server: str) -> None:
    reader = EngineLoadReader(timeout=2.0)
    try:
        loads = await reader.read(metrics_server + "/metrics")
        assert loads is not None and loads["tiny-llm"] == EngineLoad(4.0, 5.0, 0.25)
        assert await reader.read(metrics_server + "/metrics") == loads  # the kept connection, again
        assert await reader.read(metrics_server + "/broken") is None  # a 500
        assert await reader.read(metrics_server + "/gone") is None  # a 404
        assert await reader.read(metrics_server + "/html") is None  # 200, but not metrics text
        assert await reader.read(f"http://127.0.0.1:{_refused_port()}/metrics") is None  # refused
    finally:
        await reader.aclose()


async def test_reader_gives_up_on_a_server_that_never_answers() -> None:
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        reader = EngineLoadReader(timeout=0.2)
        try:
            assert await reader.read(f"http://127.0.0.1:{silent.getsockname()[1]}/metrics") is None
        finally:
            await reader.aclose()


# -- the score -------------------------------------------------------------------------------


def test_without_engine_load_the_score_is_the_gateways_own_count() -> None:
    assert replica_load(0, None, True) == 0.0
    assert replica_load(3, None, True) == 3.0


def test_the_score_takes_the_larger_of_the_two_views_and_weighs_a_queue_double() -> None:
    # Another pod's requests: the engine runs 5, this gateway has 1 there.
    assert replica_load(1, EngineLoad(running=5.0, waiting=0.0, kv_usage=None), True) == 5.0
    # Just placed here, not yet in the engine's numbers (read up to an interval ago).
    assert replica_load(4, EngineLoad(running=1.0, waiting=0.0, kv_usage=None), True) == 4.0
    # A queue: the engine is full, each queued request counts twice.
    assert replica_load(0, EngineLoad(running=4.0, waiting=2.0, kv_usage=None), True) == 8.0


def test_a_fuller_cache_scales_the_score_and_an_idle_replica_stays_at_zero() -> None:
    assert replica_load(0, EngineLoad(running=4.0, waiting=0.0, kv_usage=0.5), True) == 6.0
    assert replica_load(0, EngineLoad(running=4.0, waiting=0.0, kv_usage=0.0), True) == 4.0
    assert replica_load(0, EngineLoad(running=0.0, waiting=0.0, kv_usage=0.9), True) == 0.0
    assert replica_load(0, EngineLoad(running=2.0, waiting=1.0, kv_usage=1.0), True) == 8.0


def test_an_untrusted_replica_scores_as_if_twice_as_busy_plus_one() -> None:
    assert replica_load(0, None, False) == 1.0
    assert replica_load(3, None, False) == 7.0
    assert replica_load(0, EngineLoad(running=4.0, waiting=2.0, kv_usage=0.5), False) == 2 * 12.0 + 1
    # Idle but untrusted loses to a trusted replica with less than one request more.
    assert replica_load(0, None, False) > replica_load(0, EngineLoad(0.5, 0.0, None), True)
