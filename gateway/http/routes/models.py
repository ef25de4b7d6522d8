"""GET /v1/models and /v1/models/{id}: base models and their LoRA adapters."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gateway.config import Settings
from gateway.errors import ModelNotFoundError
from gateway.http.deps import CatalogDep, SettingsDep
from gateway.http.json_response import JSONBytesResponse
from gateway.models.catalog import ModelCatalog, ServedModel
from gateway.models.resolve import list_model_ids

router = APIRouter()


def _model_object(model_id: str, base: ServedModel, adapter: str | None) -> dict[str, Any]:
    return {
        "id": model_id,
        "object": "model",
        "created": base.created,
        "owned_by": "triton-openai-gateway",
        "root": base.name,
        "parent": base.name if adapter is not None else None,
        "max_model_len": base.max_model_len,
        "tool_call_parser": base.tool_parser,
        "reasoning_parser": base.reasoning_parser,
        "triton": _triton(base),
    }


def _triton(model: ServedModel) -> dict[str, Any] | None:
    """How the gateway drives a TensorRT-LLM model: its layout, the Triton model its requests go
    to, and whether its streamed text is exact (an ensemble's own per-response decoding loses
    SentencePiece spaces: docs/DEPLOY.md, "TensorRT-LLM"). None for other models."""
    if not model.trtllm:
        return None
    return {
        "layout": model.layout,
        "runs_on": model.route.step if model.route is not None else model.name,
        "streamed_text_exact": model.text_exact,
    }


async def _objects(catalog: ModelCatalog, settings: Settings) -> list[dict[str, Any]]:
    models = await catalog.models()
    return [_model_object(*entry) for entry in list_model_ids(models, settings.lora_separator)]


@router.get("/v1/models")
async def list_models(catalog: CatalogDep, settings: SettingsDep) -> JSONBytesResponse:
    return JSONBytesResponse({"object": "list", "data": await _objects(catalog, settings)})


@router.get("/v1/models/{model_id:path}")
async def retrieve_model(model_id: str, catalog: CatalogDep, settings: SettingsDep) -> JSONBytesResponse:
    for item in await _objects(catalog, settings):
        if item["id"] == model_id:
            return JSONBytesResponse(item)
    raise ModelNotFoundError(f"The model '{model_id}' does not exist.", param="model")
