"""How a TensorRT-LLM model is served: its layout, its contract, and whether the gateway drives
its ``tensorrt_llm`` step with tokens.

An ensemble or BLS model decodes each streamed response's tokens alone, so SentencePiece
tokenizers (Llama, Mistral, Gemma) lose the spaces between responses and a character split
between two becomes U+FFFD. Where the model's ``tensorrt_llm`` step is served by the same Triton
and the tokenizer its preprocessing step names is readable by the gateway, the gateway sends the
request to that step as token ids and detokenizes incrementally itself (a ``TokenRoute``): the
text is then the whole sequence's, token counts are exact, and stop strings are cut in text
that is right. Where it cannot, the model's own text is used and ``/v1/models`` says its
streamed text may lose spaces (``text_exact``).

Everything a TensorRT-LLM model says about itself is in its Triton config (parameters), so it is
read from the interfaces Triton gave, not from files; only the tokenizer and the LoRA adapters'
weights are files.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.backend.contracts import (
    Contract,
    LoraAdapter,
    build_contract,
    detect_layout,
    llm_step_name,
)
from gateway.backend.contracts.vllm import VLLM
from gateway.backend.types import ModelInterface
from gateway.config import ModelFiles
from gateway.models.files import ModelFileSources, resolve_tokenizer

logger = logging.getLogger(__name__)

_warned: set[str] = set()


def _warn_once(message: str, *args: Any) -> None:
    """A warning said once per process: the catalog describes every model at each refresh."""
    text = message % args
    if text not in _warned:
        _warned.add(text)
        logger.warning("%s", text)


_TOKENIZER_PARAMETERS = ("tokenizer_dir", "tokenizer", "hf_model_dir", "model")
"""Where TensorRT-LLM models name their tokenizer: preprocessing, postprocessing and
``tensorrt_llm`` (guided decoding) say ``tokenizer_dir``; the LLM-API model its ``model``."""


@dataclass(frozen=True, slots=True)
class TokenRoute:
    """Requests for the model go to ``step`` (a ``tensorrt_llm`` model) as token ids."""

    step: str
    contract: Contract
    add_special_tokens: bool
    """The preprocessing step's ``add_special_tokens`` (default true: a BOS is added)."""
    skip_special_tokens: bool
    """The postprocessing step's ``skip_special_tokens`` (default true)."""
    end_id: int
    pad_id: int


@dataclass(frozen=True, slots=True)
class ServedLayout:
    """What the catalog needs to know of a model's layout."""

    layout: str | None
    contract: Contract
    route: TokenRoute | None = None
    tokenizer_dir: Path | None = None
    """The tokenizer the model's own config names (TensorRT-LLM), when found here."""
    text_exact: bool = True
    """Whether streamed text is exact: false for an ensemble or BLS driven through its own
    per-response decoding."""
    max_model_len: int | None = None
    """The engine's ``max_seq_len`` (its ``build_config``), where the gateway can read it."""


def _flag(parameters: Mapping[str, str], name: str, default: bool) -> bool:
    value = parameters.get(name)
    if value is None or not value.strip() or value.startswith("${"):
        return default
    return value.strip().lower() in ("true", "1", "yes")


def _tokenizer_ref(interface: ModelInterface) -> str | None:
    for name in _TOKENIZER_PARAMETERS:
        value = interface.parameters.get(name, "").strip()
        if value and not value.startswith("${"):
            return value
    return None


def engine_build(interface: ModelInterface) -> Mapping[str, Any]:
    """The ``build_config`` of a ``tensorrt_llm`` model's engine (``config.json`` in its
    ``gpt_model_path``), where the gateway can read it; empty otherwise."""
    folder = interface.parameters.get("gpt_model_path", "").strip()
    path = Path(folder) / "config.json"
    if not folder or folder.startswith("${") or not path.is_file():
        return {}
    try:
        build = json.loads(path.read_text(encoding="utf-8")).get("build_config")
    except (ValueError, OSError, AttributeError):
        return {}
    return build if isinstance(build, dict) else {}


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def engine_block_tokens(build: Mapping[str, Any]) -> int | None:
    """The engine's KV block size (``plugin_config.tokens_per_block``)."""
    plugin = build.get("plugin_config")
    return _positive(plugin.get("tokens_per_block")) if isinstance(plugin, dict) else None


def special_ids(directory: Path, tokenizer: Any) -> tuple[int, int] | None:
    """(end id, pad id) as TensorRT-LLM's preprocessing finds them: the eos token's first id,
    the pad token's (the eos token's when there is none)."""
    config: dict[str, Any] = {}
    path = directory / "tokenizer_config.json"
    if path.is_file():
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            config = {}

    def token(key: str) -> int | None:
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if not isinstance(value, str):
            return None
        found = tokenizer.token_to_id(value)
        return int(found) if found is not None else None

    end = token("eos_token")
    if end is None:
        return None
    pad = token("pad_token")
    return end, end if pad is None else pad


def _steps(
    layout: str, interface: ModelInterface, models: Mapping[str, ModelInterface]
) -> tuple[ModelInterface | None, ModelInterface | None]:
    """(preprocessing, postprocessing) of an ensemble or BLS model, where served."""
    if layout == "bls":
        return models.get("preprocessing"), models.get("postprocessing")
    pre = post = None
    for step in interface.steps:
        found = models.get(step)
        if found is None:
            continue
        if "QUERY" in found.inputs:
            pre = found
        elif "TOKENS_BATCH" in found.inputs:
            post = found
    return pre, post


def describe_layout(
    name: str,
    interface: ModelInterface | None,
    models: Mapping[str, ModelInterface],
    override: ModelFiles | None,
    sources: ModelFileSources,
    adapter_dirs: tuple[tuple[str, Path | None], ...],
    tokenizer_for: Any,
) -> ServedLayout:
    """The layout, contract and token route of one model. ``tokenizer_for(dir)`` loads a
    tokenizer (the catalog's cache), ``adapter_dirs`` are its ``multi_lora.json`` entries."""
    if interface is None:
        return ServedLayout(None, VLLM)
    layout = (override.layout if override is not None else None) or detect_layout(interface)
    if layout is None or layout == "vllm":
        return ServedLayout(layout, VLLM)
    adapters = {a: LoraAdapter(task, d) for task, (a, d) in enumerate(adapter_dirs, start=1) if d is not None}
    step_name = llm_step_name(layout, interface, models)
    step = models.get(step_name) if step_name else None
    engine = interface if layout == "tensorrt_llm" else step
    build = engine_build(engine) if engine is not None else {}
    block = (override.kv_cache_block_tokens if override is not None else None) or engine_block_tokens(build)
    contract = build_contract(
        layout, interface, step=step, step_name=step_name, adapters=adapters, kv_block_tokens=block
    )
    pre, post = _steps(layout, interface, models) if layout in ("ensemble", "bls") else (None, None)
    named = pre or (post if post is not None else interface)
    ref = _tokenizer_ref(named) or (_tokenizer_ref(step) if step is not None else None)
    tokenizer_dir = resolve_tokenizer(ref, None, sources) if ref else None
    if ref and tokenizer_dir is None:
        _warn_once("model %s: its config names the tokenizer %r, which the gateway cannot read", name, ref)
    route_setting = override.trtllm_route if override is not None else "auto"
    if override is not None and override.tokenizer:
        tokenizer_dir = resolve_tokenizer(override.tokenizer, None, ModelFileSources(Path.cwd(), sources.hub_cache))
    route = None
    tokens_target = interface if layout == "tensorrt_llm" else step
    if tokens_target is not None and tokenizer_dir is not None and route_setting != "model":
        tokenizer = tokenizer_for(tokenizer_dir)
        ids = special_ids(tokenizer_dir, tokenizer) if tokenizer is not None else None
        if ids is not None:
            target = name if layout == "tensorrt_llm" else str(step_name)
            target_contract = (
                contract
                if layout == "tensorrt_llm"
                else build_contract("tensorrt_llm", tokens_target, adapters=adapters, kv_block_tokens=block)
            )
            route = TokenRoute(
                target,
                target_contract,
                _flag(pre.parameters, "add_special_tokens", True) if pre is not None else True,
                _flag(post.parameters, "skip_special_tokens", True) if post is not None else True,
                *ids,
            )
    if layout == "tensorrt_llm" and route is None:
        _warn_once("model %s (tensorrt_llm) takes token ids, and the gateway has no tokenizer for it", name)
    if route_setting == "tokens" and route is None:
        _warn_once("model %s: trtllm_route is 'tokens', but its tensorrt_llm step or tokenizer is not here", name)
    exact = (
        route is not None
        or not interface.decoupled
        or layout == "llmapi"
        or (layout == "bls" and _flag(interface.parameters, "accumulate_tokens", False))
    )
    return ServedLayout(layout, contract, route, tokenizer_dir, exact, _positive(build.get("max_seq_len")))
