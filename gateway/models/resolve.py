"""Model ids → (base model, LoRA adapter). Pure.

Each adapter is served as its own model id, ``<base><separator><adapter>`` (``tiny-llm:alpha``
with the default separator), the way OpenAI names fine-tunes after their base. The bare adapter
name is accepted too when exactly one base model has an adapter of that name, which is what
clients written for vLLM (where adapters are top-level models) send.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gateway.errors import ModelNotFoundError
from gateway.keys.context import model_allowed
from gateway.models.catalog import ServedModel


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """The base model a request names, and the LoRA adapter (None: the base model itself)."""

    model: ServedModel
    adapter: str | None


def resolve_model(model_id: str, models: Mapping[str, ServedModel], separator: str) -> ResolvedModel:
    """Find the base model and adapter a request names, or raise ``ModelNotFoundError``; a model
    the request's key may not use does not exist for it (the same 404, word for word)."""
    resolved = _resolve(model_id, models, separator)
    if not model_allowed(model_id, resolved.model.name):
        raise ModelNotFoundError(f"The model '{model_id}' does not exist.", param="model")
    return resolved


def _resolve(model_id: str, models: Mapping[str, ServedModel], separator: str) -> ResolvedModel:
    if model_id in models:
        return ResolvedModel(models[model_id], None)
    base, sep, adapter = model_id.rpartition(separator)
    if sep and base in models:
        if adapter in models[base].adapters:
            return ResolvedModel(models[base], adapter)
        raise ModelNotFoundError(
            f"The model '{base}' has no LoRA adapter '{adapter}'. "
            f"Adapters: {', '.join(models[base].adapters) or 'none'}.",
            param="model",
        )
    owners = [m for m in models.values() if model_id in m.adapters]
    if len(owners) == 1:
        return ResolvedModel(owners[0], model_id)
    raise ModelNotFoundError(f"The model '{model_id}' does not exist.", param="model")


def list_model_ids(models: Mapping[str, ServedModel], separator: str) -> list[tuple[str, ServedModel, str | None]]:
    """Every servable id the request's key may use: each base model, then its adapters (id, base,
    adapter)."""
    out: list[tuple[str, ServedModel, str | None]] = []
    for model in models.values():
        out.append((model.name, model, None))
        out.extend((f"{model.name}{separator}{a}", model, a) for a in model.adapters)
    return [entry for entry in out if model_allowed(entry[0], entry[1].name)]
