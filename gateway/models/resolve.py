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
    """Find the base model and adapter a request names, or raise ``ModelNotFoundError``. A model
    the request's key may not use does not exist for it: the same 404, word for word, as an id
    nothing serves, so a key learns nothing of the models outside its list. Only a base model the
    key may use answers an unknown adapter with its adapters, and names only those the key may
    use."""
    resolved = _resolve(model_id, models, separator)
    if not model_allowed(model_id, resolved.model.name):
        raise not_found(model_id)
    return resolved


def not_found(model_id: str) -> ModelNotFoundError:
    return ModelNotFoundError(f"The model '{model_id}' does not exist.", param="model")


def _resolve(model_id: str, models: Mapping[str, ServedModel], separator: str) -> ResolvedModel:
    if model_id in models:
        return ResolvedModel(models[model_id], None)
    base, sep, adapter = model_id.rpartition(separator)
    if sep and base in models:
        if adapter in models[base].adapters:
            return ResolvedModel(models[base], adapter)
        raise _no_adapter(model_id, models[base], adapter, separator)
    owners = [m for m in models.values() if model_id in m.adapters and model_allowed(model_id, m.name)]
    if len(owners) == 1:
        return ResolvedModel(owners[0], model_id)
    raise not_found(model_id)


def _no_adapter(model_id: str, base: ServedModel, adapter: str, separator: str) -> ModelNotFoundError:
    """An adapter the base does not have: the base and the adapters the key may use, or, when
    the key may use none of them, the 404 of an id nothing serves."""
    visible = [a for a in base.adapters if model_allowed(f"{base.name}{separator}{a}", base.name)]
    if not visible and not model_allowed(base.name, base.name):
        return not_found(model_id)
    return ModelNotFoundError(
        f"The model '{base.name}' has no LoRA adapter '{adapter}'. Adapters: {', '.join(visible) or 'none'}.",
        param="model",
    )


def visible_models(models: Mapping[str, ServedModel]) -> dict[str, ServedModel]:
    """The base models the request's key may use (all of them on a gateway without keys)."""
    return {name: model for name, model in models.items() if model_allowed(name, name)}


def list_model_ids(models: Mapping[str, ServedModel], separator: str) -> list[tuple[str, ServedModel, str | None]]:
    """Every servable id the request's key may use: each base model, then its adapters (id, base,
    adapter)."""
    out: list[tuple[str, ServedModel, str | None]] = []
    for model in models.values():
        out.append((model.name, model, None))
        out.extend((f"{model.name}{separator}{a}", model, a) for a in model.adapters)
    return [entry for entry in out if model_allowed(entry[0], entry[1].name)]
