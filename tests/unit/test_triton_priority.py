"""A request's band as Triton's ``priority`` parameter: the mapping to a model's levels, the levels
read from its config, planning putting the level on every backend request, and every contract
sending it (and sending nothing at level 0)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from tritonclient.grpc import service_pb2

from gateway.backend.contracts import build_contract
from gateway.backend.contracts.interface import read_interface
from gateway.backend.contracts.vllm import build_infer_request, infer_request_bytes
from gateway.backend.types import BackendModel, GenerationRequest, ModelInterface, TokenPrompt
from gateway.config import Settings
from gateway.models.catalog import ModelCatalog
from gateway.plan.prepare import RequestContext, prepare_completion
from gateway.plan.priority import triton_priority
from gateway.plan.requests import CompletionRequest
from gateway.priorities import CRITICAL, SHEDDABLE, STANDARD
from tests.fakes import ScriptedBackend
from tests.unit import trtllm_configs as cfg

# The mapping.


@pytest.mark.parametrize(
    ("band", "levels", "level"),
    [
        (CRITICAL, 3, 1),
        (-1000, 3, 1),
        (STANDARD, 3, 0),
        (SHEDDABLE, 3, 3),
        (7, 3, 3),
        (CRITICAL, 1, 1),
        (SHEDDABLE, 1, 1),
        (CRITICAL, 0, 0),
        (SHEDDABLE, 0, 0),
        (STANDARD, 0, 0),
    ],
)
def test_a_band_maps_to_the_first_level_the_default_or_the_last(band: int, levels: int, level: int) -> None:
    assert triton_priority(band, levels) == level


# The levels, from the model's config.


def _levels(text: str, levels: int, default: int) -> str:
    return text.replace(
        "dynamic_batching { default_queue_policy { max_queue_size: 0 } }",
        f"dynamic_batching {{ priority_levels: {levels} default_priority_level: {default} }}",
    )


def test_the_levels_of_the_dynamic_batcher_are_read() -> None:
    interface = read_interface(cfg.parse(_levels(cfg.tensorrt_llm(decoupled=True), 4, 2)))
    assert (interface.priority_levels, interface.default_priority_level) == (4, 2)


def test_a_model_without_levels_has_none() -> None:
    assert read_interface(cfg.parse(cfg.tensorrt_llm(decoupled=True))).priority_levels == 0
    assert read_interface(cfg.parse(cfg.llmapi(decoupled=True))).priority_levels == 0


def test_an_ensemble_has_the_most_levels_of_its_steps() -> None:
    """Triton passes any priority through an ensemble to each step's own queue."""
    configs = cfg.stack()
    configs["tensorrt_llm"] = cfg.parse(_levels(cfg.tensorrt_llm(decoupled=True), 3, 2))
    assert read_interface(configs["ensemble"], configs).priority_levels == 3
    assert read_interface(configs["ensemble"], cfg.stack()).priority_levels == 0


# Planning.


@dataclass
class LevelsBackend(ScriptedBackend):
    """A backend whose one model ``m`` declares ``levels`` priority levels."""

    levels: int = 0

    async def list_models(self) -> list[BackendModel]:
        interface = ModelInterface(decoupled=True, platform="python", priority_levels=self.levels)
        return [BackendModel(name="m", platform="python", interface=interface)]


async def _planned(levels: int, body: dict[str, Any], header: int | None = None) -> tuple[int, list[int]]:
    catalog = ModelCatalog(LevelsBackend(levels=levels), [])  # type: ignore[arg-type]
    try:
        await catalog.refresh()
        request = CompletionRequest.model_validate({"model": "m", "prompt": ["a", "b"], "max_tokens": 2, **body})
        plan = await prepare_completion(request, RequestContext("r", priority=header), catalog, Settings())
    finally:
        catalog.close()
    assert plan.claim is not None
    return plan.claim.band, [r.priority for r in plan.requests]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
@pytest.mark.parametrize(("band", "level"), [(CRITICAL, 1), (STANDARD, 0), (SHEDDABLE, 3), (5, 3)])
async def test_every_backend_request_carries_the_level_of_its_band(band: int, level: int) -> None:
    assert await _planned(3, {"priority": band, "n": 2}) == (band, [level] * 4)


@pytest.mark.anyio
async def test_the_header_s_band_reaches_the_backend_requests_too() -> None:
    assert await _planned(2, {}, header=CRITICAL) == (CRITICAL, [1, 1])
    assert await _planned(2, {"priority": SHEDDABLE}, header=CRITICAL) == (SHEDDABLE, [2, 2]), "the body wins"


@pytest.mark.anyio
async def test_a_model_without_levels_gets_no_priority() -> None:
    assert await _planned(0, {"priority": CRITICAL}) == (CRITICAL, [0, 0])


# The contracts.


def _request(priority: int, **fields: Any) -> GenerationRequest:
    return GenerationRequest("r-1", "m", "hello", {"max_tokens": 4}, priority=priority, **fields)


def _parameters(encoded: bytes) -> dict[str, Any]:
    return dict(service_pb2.ModelInferRequest.FromString(encoded).parameters)


PRIORITY_1 = {"priority": service_pb2.InferParameter(uint64_param=1)}


def test_the_vllm_contract_sends_the_level_with_images_too() -> None:
    image = "iVBORw0KGgo="  # the request's bytes are built by protobuf when it has images
    for request in (_request(1), _request(1, images=(image,))):
        assert _parameters(infer_request_bytes(request)) == PRIORITY_1
        assert infer_request_bytes(request) == build_infer_request(request).SerializeToString()
    assert _parameters(infer_request_bytes(_request(0, images=(image,)))) == {}


def _trtllm_contracts() -> dict[str, Any]:
    stack = cfg.interfaces(cfg.stack())
    bls = read_interface(cfg.parse(cfg.bls(decoupled=False)))
    return {
        "ensemble": build_contract("ensemble", stack["ensemble"], step=stack["tensorrt_llm"]),
        "bls": build_contract("bls", bls),
        "tensorrt_llm": build_contract("tensorrt_llm", stack["tensorrt_llm"]),
        "llmapi": build_contract("llmapi", read_interface(cfg.parse(cfg.llmapi(decoupled=True)))),
    }


@pytest.mark.parametrize("layout", ["ensemble", "bls", "tensorrt_llm", "llmapi"])
def test_every_tensorrt_llm_layout_sends_the_level_and_nothing_at_zero(layout: str) -> None:
    contract = _trtllm_contracts()[layout]
    tokens = TokenPrompt((1, 2, 3), end_id=2, pad_id=0) if layout == "tensorrt_llm" else None
    sent = _parameters(contract.encode(_request(3, tokens=tokens)))
    assert sent.get("priority") == service_pb2.InferParameter(uint64_param=3)
    assert "priority" not in _parameters(contract.encode(_request(0, tokens=tokens)))
