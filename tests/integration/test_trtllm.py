"""TensorRT-LLM, every layout NVIDIA ships, through the gateway over real HTTP against a real
Triton serving faithful stand-ins (``tests/triton_models_trtllm``: the reference's tensors,
types, dims and behaviours, real tokens from tiny-llm's weights, a SentencePiece-style tokenizer
so that lost spaces show).

The oracle for every text is the stand-in's own tokens, read from its ``tensorrt_llm`` model
directly over gRPC (greedy: ``top_k`` 1) and decoded in one go with the tokenizer. Two gateways
run: one as deployed by default (ensembles and BLS driven through their ``tensorrt_llm`` step
with the gateway's tokenizer), and one told to use each model's own text (``trtllm_route:
model``), as a gateway that cannot read the tokenizer would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from tokenizers import Tokenizer
from tritonclient.grpc import InferenceServerClient, InferInput, InferRequestedOutput

from gateway.triton_launcher import TritonServer
from tests.integration.conftest import GatewayProcess, read_metric, start_gateway, stop_gateway, wait_for
from tests.integration.trtllm_stack import TOKENIZER_DIR, start_trtllm_triton

PROMPT = "the gateway streams tokens from triton"
TEXT_ROUTE = ("ensemble", "ensemble_nd", "tensorrt_llm_bls", "tensorrt_llm_bls_acc")
"""Models the second gateway drives through their own text."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TritonServer, Path]]:
    folder = tmp_path_factory.mktemp("trtllm")
    server = start_trtllm_triton(folder, folder / "tritonserver.log")
    yield server, folder / "trtllm_repository"
    server.stop()


def _gateway(stack: tuple[TritonServer, Path], log: Path, env: dict[str, str] | None = None) -> GatewayProcess:
    server, repository = stack
    return start_gateway(server.grpc_url, log, "--model-repository", str(repository), env=env)


@pytest.fixture(scope="module")
def tokens_gateway(
    stack: tuple[TritonServer, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    files = {name: {"kv_cache_block_tokens": 4} for name in ("ensemble", "tensorrt_llm")}  # the stand-in's blocks
    env = {"GATEWAY_MODEL_FILES": json.dumps(files)}
    process = _gateway(stack, tmp_path_factory.mktemp("gw-tokens") / "gateway.log", env)
    yield process
    stop_gateway(process)


@pytest.fixture(scope="module")
def text_gateway(
    stack: tuple[TritonServer, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    files: dict[str, dict[str, Any]] = {name: {"trtllm_route": "model"} for name in TEXT_ROUTE}
    files["ensemble"]["kv_cache_block_tokens"] = 4
    env = {"GATEWAY_MODEL_FILES": json.dumps(files)}
    process = _gateway(stack, tmp_path_factory.mktemp("gw-text") / "gateway.log", env)
    yield process
    stop_gateway(process)


def _sdk(gateway: GatewayProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))


@pytest.fixture(scope="module")
def oracle(stack: tuple[TritonServer, Path], tokenizer: Tokenizer) -> Any:
    """prompt, max_tokens, adapter-free → the ids the stand-in generates greedily for it."""
    server, _ = stack
    client = InferenceServerClient(server.grpc_url)
    cache: dict[tuple[str, int], list[int]] = {}

    def generate(prompt: str, max_tokens: int) -> list[int]:
        key = (prompt, max_tokens)
        if key not in cache:
            ids = tokenizer.encode(prompt, add_special_tokens=True).ids
            tensors = []
            for name, value, datatype in (
                ("input_ids", np.array([ids], dtype=np.int32), "INT32"),
                ("input_lengths", np.array([[len(ids)]], dtype=np.int32), "INT32"),
                ("request_output_len", np.array([[max_tokens]], dtype=np.int32), "INT32"),
                ("end_id", np.array([[2]], dtype=np.int32), "INT32"),
                ("pad_id", np.array([[0]], dtype=np.int32), "INT32"),
                ("runtime_top_k", np.array([[1]], dtype=np.int32), "INT32"),
                ("exclude_input_in_output", np.array([[True]], dtype=bool), "BOOL"),
            ):
                tensor = InferInput(name, list(value.shape), datatype)
                tensor.set_data_from_numpy(value)
                tensors.append(tensor)
            outputs = [InferRequestedOutput("output_ids"), InferRequestedOutput("sequence_length")]
            result = client.infer("tensorrt_llm_nd", tensors, outputs=outputs)
            length = int(result.as_numpy("sequence_length").reshape(-1)[0])
            cache[key] = [int(i) for i in result.as_numpy("output_ids").reshape(-1)[:length]]
        return cache[key]

    yield generate
    client.close()


def following(tokenizer: Tokenizer, prompt: str, ids: list[int]) -> str:
    """The generated ids' text as it follows the prompt (a SentencePiece piece's leading space
    kept): the whole sequence decoded at once, minus the prompt's part."""
    prompt_ids = tokenizer.encode(prompt, add_special_tokens=True).ids
    whole = tokenizer.decode(prompt_ids + ids, skip_special_tokens=True)
    return whole[len(tokenizer.decode(prompt_ids, skip_special_tokens=True)) :]


def alone(tokenizer: Tokenizer, ids: list[int]) -> str:
    """The generated ids decoded in one go on their own (what TensorRT-LLM's postprocessing gives
    for a whole answer)."""
    return tokenizer.decode(ids, skip_special_tokens=True)


def _complete(sdk: openai.OpenAI, model: str, stream: bool, max_tokens: int = 12, **extra: Any) -> tuple[str, Any, Any]:
    body: dict[str, Any] = {"top_k": 1, **extra.pop("extra_body", {})}
    if not stream:
        reply = sdk.completions.create(model=model, prompt=PROMPT, max_tokens=max_tokens, extra_body=body, **extra)
        return reply.choices[0].text, reply.choices[0].finish_reason, reply.usage
    chunks = list(
        sdk.completions.create(
            model=model,
            prompt=PROMPT,
            max_tokens=max_tokens,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=body,
            **extra,
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finishes) == 1
    return text, finishes[0], chunks[-1].usage


COUNTED = ("llmapi", "ensemble_v05")
"""Layouts that report no token counts (the LLM-API model; ensembles before 2025-06)."""
TOKEN_ROUTED = ("ensemble", "ensemble_nd", "tensorrt_llm_bls", "tensorrt_llm_bls_acc", "tensorrt_llm")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("model", TOKEN_ROUTED)
def test_token_route_text_and_usage_are_exact_on_every_layout_that_has_a_tensorrt_llm_step(
    tokens_gateway: GatewayProcess, oracle: Any, tokenizer: Tokenizer, model: str, stream: bool
) -> None:
    ids = oracle(PROMPT, 12)
    with _sdk(tokens_gateway) as sdk:
        text, finish, usage = _complete(sdk, model, stream)
    assert text == following(tokenizer, PROMPT, ids)
    assert " " in text.strip()  # SentencePiece spaces between pieces survived
    assert usage.completion_tokens == len(ids)
    assert usage.prompt_tokens == len(tokenizer.encode(PROMPT, add_special_tokens=True).ids)
    assert finish == ("length" if len(ids) == 12 else "stop")


@pytest.mark.parametrize(
    ("model", "stream"),
    [
        ("ensemble", False),
        ("ensemble_nd", False),
        ("ensemble_nd", True),
        ("tensorrt_llm_bls", False),
        ("tensorrt_llm_bls_acc", False),
        ("tensorrt_llm_bls_acc", True),
        ("llmapi", False),
        ("llmapi", True),
        ("ensemble_v05", False),
    ],
)
def test_own_text_layouts_give_the_tokens_decoded_in_one_go_with_exact_usage(
    text_gateway: GatewayProcess, oracle: Any, tokenizer: Tokenizer, model: str, stream: bool
) -> None:
    ids = oracle(PROMPT, 12)
    with _sdk(text_gateway) as sdk:
        text, finish, usage = _complete(sdk, model, stream)
    expected = following(tokenizer, PROMPT, ids) if model == "ensemble_v05" else alone(tokenizer, ids)
    assert text == expected
    assert finish == ("length" if len(ids) == 12 else "stop")
    prompt_ids = tokenizer.encode(PROMPT, add_special_tokens=True).ids
    if model in COUNTED:  # no token counts from the model: the gateway counts with its tokenizer
        assert usage.completion_tokens == len(tokenizer.encode(text, add_special_tokens=False).ids)
        assert usage.prompt_tokens == len(prompt_ids)
    else:
        assert usage.completion_tokens == len(ids) and usage.prompt_tokens == len(prompt_ids)


def test_models_say_which_layout_runs_where_and_whether_streamed_text_is_exact(
    tokens_gateway: GatewayProcess, text_gateway: GatewayProcess
) -> None:
    def triton(gateway: GatewayProcess) -> dict[str, Any]:
        listing = httpx.get(gateway.url + "/v1/models", timeout=10).json()["data"]
        return {m["id"]: m["triton"] for m in listing if m.get("triton")}

    routed, own = triton(tokens_gateway), triton(text_gateway)
    assert routed["ensemble"] == {"layout": "ensemble", "runs_on": "tensorrt_llm", "streamed_text_exact": True}
    assert routed["tensorrt_llm_bls"]["layout"] == "bls" and routed["tensorrt_llm_bls"]["runs_on"] == "tensorrt_llm"
    assert routed["llmapi"]["layout"] == "llmapi" and routed["tensorrt_llm"]["layout"] == "tensorrt_llm"
    assert own["ensemble"] == {"layout": "ensemble", "runs_on": "ensemble", "streamed_text_exact": False}
    assert own["tensorrt_llm_bls"]["streamed_text_exact"] is False
    assert own["tensorrt_llm_bls_acc"]["streamed_text_exact"] is True
    assert own["ensemble_nd"]["streamed_text_exact"] is True  # it does not stream at all


def test_a_streamed_ensemble_through_its_own_text_loses_what_the_token_route_keeps(
    tokens_gateway: GatewayProcess, text_gateway: GatewayProcess, oracle: Any, tokenizer: Tokenizer
) -> None:
    # The upstream defect the token route exists for, shown on the stand-in: each response is
    # decoded alone, so the SentencePiece spaces between responses are gone.
    ids = oracle(PROMPT, 12)
    with _sdk(text_gateway) as sdk:
        lossy, _, _ = _complete(sdk, "ensemble", True)
    with _sdk(tokens_gateway) as sdk:
        exact, _, _ = _complete(sdk, "ensemble", True)
    assert exact == following(tokenizer, PROMPT, ids)
    assert lossy != exact and lossy.count(" ") < exact.strip().count(" ")


@pytest.mark.parametrize("model", ["ensemble", "ensemble_nd", "tensorrt_llm_bls_acc", "llmapi"])
def test_chat_works_on_each_layout_with_the_tokenizers_template(text_gateway: GatewayProcess, model: str) -> None:
    with _sdk(text_gateway) as sdk:
        reply = sdk.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4, extra_body={"top_k": 1}
        )
    assert reply.choices[0].finish_reason in ("length", "stop")
    if model not in COUNTED:
        assert 0 < reply.usage.completion_tokens <= 4


@pytest.mark.parametrize("gateway_kind", ["tokens", "text"])
def test_response_format_json_schema_is_enforced_through_guided_decoding(
    tokens_gateway: GatewayProcess, text_gateway: GatewayProcess, gateway_kind: str
) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo"]}, "sunny": {"type": "boolean"}},
        "required": ["city", "sunny"],
        "additionalProperties": False,
    }
    gateway = tokens_gateway if gateway_kind == "tokens" else text_gateway
    with _sdk(gateway) as sdk:
        for seed in range(3):
            reply = sdk.chat.completions.create(
                model="ensemble",
                messages=[{"role": "user", "content": "weather?"}],
                max_tokens=40,
                seed=seed,
                temperature=1.0,
                response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}},
            )
            value = json.loads(reply.choices[0].message.content or "")
            assert value["city"] in ("Paris", "Tokyo") and isinstance(value["sunny"], bool)


def test_a_forced_tool_call_is_enforced_on_a_tensorrt_llm_model(tokens_gateway: GatewayProcess) -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": ["Paris", "Tokyo"]}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
    with _sdk(tokens_gateway) as sdk:
        reply = sdk.chat.completions.create(
            model="ensemble",
            messages=[{"role": "user", "content": "weather?"}],
            tools=[tool],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=30,
        )
    call = reply.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] in ("Paris", "Tokyo")


@pytest.mark.parametrize("gateway_kind", ["tokens", "text"])
def test_lora_adapters_change_the_output_and_survive_the_engines_cache_evicting_them(
    tokens_gateway: GatewayProcess, text_gateway: GatewayProcess, gateway_kind: str
) -> None:
    # The stand-in's LoRA cache holds one task: every switch evicts the other adapter, and the
    # gateway must send its weights again when the engine says it lost them.
    gateway = tokens_gateway if gateway_kind == "tokens" else text_gateway
    with _sdk(gateway) as sdk:

        def text(model: str) -> str:
            return _complete(sdk, model, False, max_tokens=10)[0]

        base, alpha, beta = text("ensemble"), text("ensemble:alpha"), text("ensemble:beta")
        assert len({base, alpha, beta}) == 3
        assert text("ensemble:alpha") == alpha and text("ensemble:beta") == beta and text("ensemble:alpha") == alpha


def test_n_choices_stop_strings_and_top_k_minus_one(
    tokens_gateway: GatewayProcess, oracle: Any, tokenizer: Tokenizer
) -> None:
    ids = oracle(PROMPT, 12)
    expected = following(tokenizer, PROMPT, ids)
    with _sdk(tokens_gateway) as sdk:
        reply = sdk.completions.create(model="ensemble", prompt=PROMPT, max_tokens=12, n=2, extra_body={"top_k": 1})
        assert [c.text for c in reply.choices] == [expected, expected]
        stop = expected.strip().split(" ")[1]
        stopped = sdk.completions.create(
            model="ensemble", prompt=PROMPT, max_tokens=12, stop=[stop], extra_body={"top_k": 1}
        )
        assert stopped.choices[0].text == expected[: expected.index(stop)]
        assert stopped.choices[0].finish_reason == "stop"
        sampled = sdk.completions.create(
            model="ensemble", prompt=PROMPT, max_tokens=6, seed=3, temperature=1.0, extra_body={"top_k": -1}
        )
        assert sampled.usage.completion_tokens <= 6


@pytest.mark.parametrize(
    ("model", "extra", "param"),
    [
        ("ensemble", {"logprobs": 2}, "logprobs"),
        ("ensemble", {"extra_body": {"min_p": 0.1}}, "min_p"),
        ("ensemble", {"logit_bias": {"5": 1}}, "logit_bias"),
        ("llmapi", {"extra_body": {"structured_outputs": {"regex": "[ab]+"}}}, "response_format"),
        ("ensemble_v05", {"extra_body": {"structured_outputs": {"regex": "[ab]+"}}}, "response_format"),
        ("llmapi", {"model": "llmapi"}, None),
    ],
)
def test_what_a_layout_cannot_take_is_a_400_naming_the_field_and_the_layout(
    text_gateway: GatewayProcess, model: str, extra: dict[str, Any], param: str | None
) -> None:
    extra.pop("model", None)
    with _sdk(text_gateway) as sdk:
        if param is None:  # a control: the same call without the field works
            assert sdk.completions.create(model=model, prompt="hi", max_tokens=2).choices
            return
        with pytest.raises(openai.BadRequestError) as info:
            sdk.completions.create(model=model, prompt="hi", max_tokens=2, **extra)
    body = info.value.body
    assert body["param"] == param  # type: ignore[index]
    assert "TensorRT-LLM" in body["message"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("gateway_kind", "model"),
    [("tokens", "ensemble"), ("text", "ensemble"), ("text", "tensorrt_llm_bls_acc"), ("text", "llmapi")],
)
def test_a_client_that_leaves_mid_stream_leaves_nothing_running_in_triton(
    stack: tuple[TritonServer, Path],
    tokens_gateway: GatewayProcess,
    text_gateway: GatewayProcess,
    gateway_kind: str,
    model: str,
) -> None:
    server, _ = stack
    gateway = tokens_gateway if gateway_kind == "tokens" else text_gateway
    cancelled = read_metric(server.metrics_url, "trtllm_stand_in_requests_cancelled_total", 0.0)
    body = {"model": model, "prompt": PROMPT, "max_tokens": 2000, "stream": True, "top_k": 1}
    with httpx.stream("POST", gateway.url + "/v1/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: {"):
                break
    assert wait_for(
        lambda: read_metric(server.metrics_url, "trtllm_stand_in_requests_cancelled_total", 0.0) > cancelled, timeout=10
    )

    def tokens() -> float:
        return read_metric(server.metrics_url, "trtllm_stand_in_tokens_generated_total", 0.0)

    settled = tokens()
    time.sleep(0.5)
    assert tokens() == settled  # nothing generates any more


def test_the_pre_2023_11_ensemble_with_uint32_fields_streams_too(text_gateway: GatewayProcess) -> None:
    with _sdk(text_gateway) as sdk:
        text, finish, usage = _complete(sdk, "ensemble_v05", True, max_tokens=5)
    assert finish in ("length", "stop") and text  # its streamed text is each response decoded alone
    assert usage.completion_tokens == len(
        Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json")).encode(text, add_special_tokens=False).ids
    )


def test_an_ensemble_stream_is_read_by_the_shortcut_as_protobuf_reads_it(stack: tuple[TritonServer, Path]) -> None:
    # A real ensemble's responses, as the per-token reader reads them, equal protobuf's reading of
    # the same bytes. Triton writes an ensemble's four response parameters (sequence_id,
    # sequence_start, sequence_end, triton_final_response) in an order that changes from one
    # response to the next, so the reader's shortcut (a learned head of identical bytes) rarely
    # applies: they go through protobuf.
    import asyncio

    from tritonclient.grpc.service_pb2 import ModelInferRequest

    from gateway.backend.contracts import build_contract
    from gateway.backend.triton import contract_reader
    from gateway.backend.types import GenerationRequest
    from tests.integration.test_stream_messages import _read_again, _stream

    server, _ = stack
    with InferenceServerClient(server.grpc_url) as control:
        config = control.get_model_config("ensemble").config
        configs = {name: control.get_model_config(name).config for name in config_steps(config)}
    from gateway.backend.contracts.interface import read_interface

    interface = read_interface(config, configs)
    contract = build_contract("ensemble", interface, step=read_interface(configs["tensorrt_llm"]))
    request = GenerationRequest("shortcut-e", "ensemble", PROMPT, {"max_tokens": 24, "top_k": 1}, contract=contract)
    infer = ModelInferRequest.FromString(contract.encode(request))
    messages, chunks, error = asyncio.run(_stream(server, infer, contract_reader(contract, request)))
    assert error is None and len(messages) >= 10  # several tokens a response: fewer than 24
    assert sum(c.num_output_tokens[0] for c in chunks if c.num_output_tokens) == 24
    assert _read_again(messages, chunks, lambda: contract_reader(contract, request)) <= len(messages) - 2


def config_steps(config: Any) -> list[str]:
    return [step.model_name for step in config.ensemble_scheduling.step]


@pytest.mark.parametrize("model", ["ensemble", "tensorrt_llm"])
def test_the_sampled_tokens_logprobs_come_from_the_token_route_and_alternatives_are_refused(
    tokens_gateway: GatewayProcess, tokenizer: Tokenizer, model: str
) -> None:
    with _sdk(tokens_gateway) as sdk:
        for stream in (False, True):
            reply = sdk.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=6,
                logprobs=True,
                top_logprobs=0,
                extra_body={"top_k": 1},
                stream=stream,
                **({"stream_options": {"include_usage": True}} if stream else {}),
            )
            if stream:
                chunks = list(reply)
                content = [
                    t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content
                ]
                completion = chunks[-1].usage.completion_tokens
            else:
                content, completion = reply.choices[0].logprobs.content, reply.usage.completion_tokens
            assert len(content) == completion > 0
            assert all(t.logprob <= 0.0 and t.top_logprobs == [] for t in content)
        with pytest.raises(openai.BadRequestError) as info:
            sdk.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=2, logprobs=True, top_logprobs=2
            )
    assert info.value.body["param"] == "logprobs"  # type: ignore[index]


@pytest.mark.parametrize(
    ("gateway_kind", "model"), [("tokens", "ensemble"), ("tokens", "tensorrt_llm"), ("text", "ensemble")]
)
def test_reused_kv_blocks_are_reported_as_cached_prompt_tokens(
    tokens_gateway: GatewayProcess, text_gateway: GatewayProcess, gateway_kind: str, model: str
) -> None:
    gateway = tokens_gateway if gateway_kind == "tokens" else text_gateway
    prompt = f"{model} on {gateway_kind}: a prompt only this test sends, long enough for a few blocks"
    with _sdk(gateway) as sdk:
        first = sdk.completions.create(model=model, prompt=prompt, max_tokens=2, extra_body={"top_k": 1}).usage
        again = sdk.completions.create(model=model, prompt=prompt, max_tokens=2, extra_body={"top_k": 1}).usage
    assert first.prompt_tokens_details.cached_tokens == 0
    cached = again.prompt_tokens_details.cached_tokens
    assert 0 < cached <= again.prompt_tokens and cached % 4 == 0


@pytest.mark.parametrize(("gateway_kind", "model"), [("tokens", "ensemble"), ("text", "ensemble")])
def test_bad_words_keep_a_word_of_the_greedy_answer_out(
    tokens_gateway: GatewayProcess, text_gateway: GatewayProcess, gateway_kind: str, model: str
) -> None:
    gateway = tokens_gateway if gateway_kind == "tokens" else text_gateway
    with _sdk(gateway) as sdk:
        plain = _complete(sdk, model, False, max_tokens=12)[0]
        word = max((w for w in plain.split() if w.isalpha()), key=len)
        banned = _complete(sdk, model, False, max_tokens=12, extra_body={"bad_words": [word]})[0]
    assert word in plain and word not in banned
