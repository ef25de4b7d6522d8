"""What the gateway serves: Triton's ready models, their LoRA adapters and chat templates.

The list of models comes from Triton (repository index, refreshed on an interval), so a model
loaded or unloaded there shows up here without a restart. What Triton cannot tell us (which
tokenizer and chat template a model uses, which LoRA adapters it was loaded with, its context
length) is read from the model repository's own files (``files.py``), or from the per-model
``model_files`` setting, which wins.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.backend.contracts import TRTLLM_LAYOUTS, Contract
from gateway.backend.contracts.vllm import EMBEDDING_REQUEST, TEXT_INPUT, VLLM
from gateway.backend.types import Backend, BackendModel, ModelInterface
from gateway.config import ModelFiles
from gateway.errors import GatewayError
from gateway.models.files import (
    LocalModelFiles,
    ModelFileSources,
    load_tokenizer,
    read_local_model_files,
    resolve_tokenizer,
)
from gateway.models.templates import ChatTemplate
from gateway.models.tokens import CountCache, PromptTokenizer, TokenCounter
from gateway.models.trtllm import TokenRoute, describe_layout
from gateway.reasoning.registry import detect_reasoning_parser
from gateway.tools.registry import detect_parser

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServedModel:
    """A base model as the gateway serves it."""

    name: str
    adapters: tuple[str, ...] = ()
    template: ChatTemplate | None = None
    max_model_len: int | None = None
    """The context length: ``model_files``' ``max_model_len``, else ``model.json``'s, else a
    TensorRT-LLM engine's ``max_seq_len``, else what vLLM derives from the weights' ``config.json``
    (``models/context_length.py``). None: unknown (no prompt is refused for its length)."""
    tokenizer: Any = None
    """A ``tokenizers.Tokenizer`` for counting prompt tokens, when the model's files have one."""
    prompt_tokenizer: PromptTokenizer | None = None
    """The tokenizer as planning counts with it (``models/tokens.py``): a length bound that lets it
    skip counting, and cached counts of what prompts repeat. None: count whole prompts."""
    inputs: frozenset[str] = frozenset()
    """The input tensors Triton says the model takes (they pick the backend contract)."""
    backend: str = ""
    """Triton's ``backend`` (else ``platform``) in the model's config: ``vllm``, ``python``, ``ensemble``."""
    tool_parser: str | None = None
    """The tool-call format the model emits (``gateway.tools``): the ``model_files`` setting, else
    detected from the chat template's markers; None: no ``tool_choice: "auto"`` for it."""
    exclude_tools_when_none: bool = False
    """``tool_choice: "none"`` leaves the tools out of the prompt (``model_files``)."""
    reasoning_parser: str | None = None
    """How the model writes its reasoning (``gateway.reasoning``): the ``model_files`` setting,
    else detected from the chat template; None: the output is all answer."""
    structured_outputs_after_reasoning: bool = False
    """The backend applies structured outputs after the reasoning (``model_files``)."""
    vision: bool = False
    """The model takes images (``_vision``): ``model_files``' ``vision``, else the weights'
    ``config.json`` (a ``vision_config``) with an ``image`` input, else that input alone."""
    image_placeholder: str = "<image>"
    """What stands for an image in a text prompt (``model_files``)."""
    image_parts: bool = False
    """Messages with images reach the chat template as lists of parts (``{"type": "image"}``),
    not as text with ``image_placeholder`` (``model_files``' ``chat_template_content_format``,
    else whether the template loops over content)."""
    embeds: bool = False
    """Serves ``/v1/embeddings`` (``embeds_by``): takes ``embedding_request`` and runs pooling."""
    matryoshka_dimensions: tuple[int, ...] | None = None
    """The sizes ``dimensions`` may ask for (``()``: any); None: ``dimensions`` is refused."""
    layout: str | None = None
    """The tensor contract it speaks (``backend/contracts``): ``vllm``, ``ensemble``, ``bls``,
    ``tensorrt_llm`` or ``llmapi``; None for a model the fake backends of tests describe."""
    contract: Contract = VLLM
    route: TokenRoute | None = None
    """Set when requests go to a ``tensorrt_llm`` model as token ids (``models/trtllm.py``)."""
    text_exact: bool = True
    """Whether its streamed text is exact (false: each response decoded alone, by the model)."""
    priority_levels: int = 0
    """The priority levels of Triton's queue for the model its requests run on (its token
    route's step, else itself): where > 0, a request's band goes with it as Triton's
    ``priority`` (``plan.priority.triton_priority``)."""
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def trtllm(self) -> bool:
        """A TensorRT-LLM model, of any layout."""
        return self.layout in TRTLLM_LAYOUTS

    @property
    def runs_contract(self) -> Contract:
        """The contract requests for it run under: its token route's, else its own."""
        return self.route.contract if self.route is not None else self.contract

    @property
    def reports_prompt_tokens(self) -> bool:
        """Whether the backend's answers count the prompt (else planning counts it)."""
        return self.route is not None or self.contract.reports_prompt_tokens

    @property
    def enforces_guides(self) -> bool:
        """Whether a JSON schema (a forced tool call, ``response_format``) is enforced: always on
        the vLLM contract; on TensorRT-LLM where the model that runs it declares the guided
        decoding inputs and its engine has a ``guided_decoding_backend``."""
        return self.accepts("guided_decoding_guide_type") and bool(getattr(self.runs_contract, "guided", True))

    def accepts(self, name: str) -> bool:
        """Whether the model that runs its requests declares input ``name`` (a TensorRT-LLM
        model's guided decoding, LoRA); the vLLM contract takes everything in its JSON."""
        if not self.trtllm:
            return True
        interface: ModelInterface | None = getattr(self.runs_contract, "interface", None)
        return interface is not None and name in interface.inputs


def _vision(override: ModelFiles | None, weights: bool | None, inputs: frozenset[str]) -> bool:
    """``model_files``' ``vision`` wins; else the weights' config says (Triton's vLLM backend
    declares ``image`` on text-only models too); else an ``image`` input in Triton's config."""
    if override is not None and override.vision is not None:
        return override.vision
    if weights is not None:
        return weights and "image" in inputs
    return "image" in inputs


def _priority_levels(runs_on: str, interfaces: Mapping[str, ModelInterface]) -> int:
    interface = interfaces.get(runs_on)
    return interface.priority_levels if interface is not None else 0


def _image_parts(override: ModelFiles | None, template: ChatTemplate | None) -> bool:
    content_format = override.chat_template_content_format if override is not None else "auto"
    if content_format == "auto":
        return template is not None and template.loops_over_content
    return content_format == "openai"


def embeds_by(inputs: frozenset[str], setting: str | None, model_json: str | None) -> bool:
    """Whether a model serves embeddings. Triton's vLLM backend declares ``embedding_request`` on
    every model, generating or not, so the tensor alone does not say: the ``model_files``
    setting's ``runner`` wins, then ``model.json``'s (what vLLM was told to run), and a model
    with ``embedding_request`` but no ``text_input`` (an embedding-only model) embeds."""
    if EMBEDDING_REQUEST not in inputs:
        return False
    runner = setting or model_json
    if runner is not None:
        return runner == "pooling"
    return TEXT_INPUT not in inputs


class ModelCatalog:
    """A snapshot of served models, refreshed from the backend every ``refresh_interval``.

    A stale snapshot is refreshed in the background while requests keep using it, so no request
    waits for Triton's repository index (and the gRPC calls per model) on its own path; only an
    empty snapshot (start-up, or Triton never seen) is refreshed in line.
    """

    def __init__(
        self,
        backend: Backend,
        repositories: list[Path],
        refresh_interval: float = 10.0,
        *,
        sources: ModelFileSources | None = None,
        overrides: Mapping[str, ModelFiles] | None = None,
        tokenizer_threads: int = 1,
        token_count_cache_bytes: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock``: what staleness is measured with (tests pass one they move by hand)."""
        self._backend = backend
        self._clock = clock
        self.counter = TokenCounter(tokenizer_threads)
        """Runs prompt counts, off the event loop when they are long."""
        self._count_cache = CountCache(token_count_cache_bytes) if token_count_cache_bytes else None
        self._repositories = repositories
        self._refresh_interval = refresh_interval
        self._sources = sources or ModelFileSources()
        self._overrides = dict(overrides or {})
        self._models: dict[str, ServedModel] = {}
        self._refreshed_at = float("-inf")
        self._lock = asyncio.Lock()
        self._templates: dict[tuple[Path | None, Path | None], ChatTemplate | None] = {}
        self._unresolved: set[tuple[str, str]] = set()
        self._announced: set[tuple[str, str, str | None]] = set()
        self._tokenizers: dict[Path, tuple[Any, PromptTokenizer | None]] = {}
        self._background: asyncio.Task[None] | None = None

    def adapter_count(self, name: str) -> int:
        """Adapters of a model in the current snapshot (no refresh: called at scrape time)."""
        model = self._models.get(name)
        return len(model.adapters) if model is not None else 0

    def _stale(self) -> bool:
        return self._clock() - self._refreshed_at >= self._refresh_interval

    async def models(self) -> dict[str, ServedModel]:
        """The current snapshot. Raises (503) if it is empty and Triton cannot be reached."""
        if not self._stale():
            return self._models
        if not self._models or self._refresh_interval == 0:
            async with self._lock:
                if self._stale():
                    await self.refresh()
            return self._models
        if self._background is None or self._background.done():
            self._background = asyncio.ensure_future(self._refresh_quietly())
        return self._models

    async def _refresh_quietly(self) -> None:
        async with self._lock:
            if not self._stale():
                return
            try:
                await self.refresh()
            except GatewayError as exc:  # requests keep the last snapshot; Triton's errors reach them
                logger.warning("model list refresh failed: %s", exc.message)
                self._refreshed_at = self._clock()  # retry after an interval, not on every request

    async def refresh(self) -> None:
        backend_models = await self._backend.list_models()
        interfaces = {m.name: m.interface for m in backend_models if m.interface is not None}
        models = {m.name: self._describe(m, self._models.get(m.name), interfaces) for m in backend_models}
        self._models = models
        self._refreshed_at = self._clock()

    def _describe(
        self, model: BackendModel, previous: ServedModel | None, interfaces: Mapping[str, ModelInterface]
    ) -> ServedModel:
        files = LocalModelFiles()
        for repository in self._repositories:  # Triton serves a name from one repository only
            files = read_local_model_files(repository, model.name, self._sources)
            if files != LocalModelFiles():
                break
        tokenizer_dir, template_file, max_model_len = files.tokenizer_dir, None, files.max_model_len
        override = self._overrides.get(model.name)
        if override is not None:
            if override.tokenizer:
                # The gateway's own setting: a relative path is relative to the gateway, not Triton.
                here = ModelFileSources(working_dir=Path.cwd(), hub_cache=self._sources.hub_cache)
                tokenizer_dir = resolve_tokenizer(override.tokenizer, None, here)
                self._warn_unresolved(model.name, override.tokenizer, tokenizer_dir, "the model_files setting")
            template_file = override.chat_template
            max_model_len = override.max_model_len or max_model_len
        if files.tokenizer_ref and (override is None or not override.tokenizer):
            self._warn_unresolved(model.name, files.tokenizer_ref, tokenizer_dir, "model.json")
        served = describe_layout(
            model.name,
            model.interface,
            interfaces,
            override,
            self._sources,
            files.adapter_dirs,
            lambda directory: self._tokenizer(directory)[0],
        )
        if tokenizer_dir is None:
            tokenizer_dir = served.tokenizer_dir
        max_model_len = max_model_len or served.max_model_len or files.derived_max_model_len
        self._check_length(model.name, files)
        template = self._template(tokenizer_dir, template_file) if tokenizer_dir or template_file else None
        tool_parser = self._tool_parser(model.name, override, template)
        reasoning_parser = self._reasoning_parser(model.name, override, template)
        tokenizer, prompt_tokenizer = self._tokenizer(tokenizer_dir) if tokenizer_dir else (None, None)
        return ServedModel(
            name=model.name,
            adapters=files.adapters,
            template=template,
            max_model_len=max_model_len,
            tokenizer=tokenizer,
            prompt_tokenizer=prompt_tokenizer,
            inputs=model.inputs,
            backend=model.platform,
            tool_parser=tool_parser,
            exclude_tools_when_none=override is not None and override.exclude_tools_when_tool_choice_none,
            reasoning_parser=reasoning_parser,
            structured_outputs_after_reasoning=override is not None and override.structured_outputs_after_reasoning,
            vision=_vision(override, files.vision, model.inputs),
            image_placeholder=override.image_placeholder if override is not None else "<image>",
            image_parts=_image_parts(override, template),
            embeds=embeds_by(model.inputs, override.runner if override is not None else None, files.runner),
            matryoshka_dimensions=(
                tuple(override.matryoshka_dimensions)
                if override is not None and override.matryoshka_dimensions is not None
                else files.matryoshka_dimensions
            ),
            layout=served.layout,
            contract=served.contract,
            route=served.route,
            text_exact=served.text_exact,
            priority_levels=_priority_levels(served.route.step if served.route is not None else model.name, interfaces),
            created=previous.created if previous else int(time.time()),
        )

    def _tool_parser(self, name: str, override: ModelFiles | None, template: ChatTemplate | None) -> str | None:
        """The setting wins; else the template's markers decide. Said once per model and parser."""
        parser: str | None
        if override is not None and override.tool_call_parser:
            parser, how = override.tool_call_parser, "set by model_files"
        else:
            parser = detect_parser(template.source) if template is not None else None
            how = "detected from its chat template"
        if (name, "tools", parser) not in self._announced:
            self._announced.add((name, "tools", parser))
            if parser is None:
                logger.info("model %s: no tool-call parser (tool_choice 'auto' is refused; set model_files)", name)
            else:
                logger.info("model %s: tool-call parser %s (%s)", name, parser, how)
        return parser

    def _reasoning_parser(self, name: str, override: ModelFiles | None, template: ChatTemplate | None) -> str | None:
        """As ``_tool_parser``: the setting (``""``: none) wins, else the template's markers."""
        parser: str | None
        if override is not None and override.reasoning_parser is not None:
            parser, how = override.reasoning_parser or None, "set by model_files"
        else:
            parser = detect_reasoning_parser(template.source) if template is not None else None
            how = "detected from its chat template"
        if (name, "reasoning", parser) not in self._announced:
            self._announced.add((name, "reasoning", parser))
            if parser is not None:
                logger.info("model %s: reasoning parser %s (%s)", name, parser, how)
        return parser

    def _check_length(self, name: str, files: LocalModelFiles) -> None:
        """Warn once per model and numbers when ``model.json``'s ``max_model_len`` is above the
        length the weights allow. vLLM refuses to start with it unless
        ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is set; a model Triton serves did start, so the gateway
        takes the configured number (the engine runs with it) and does not refuse the model."""
        given, derived = files.max_model_len, files.derived_max_model_len
        if given is None or derived is None or given <= derived:
            return
        key = (name, "max_model_len", f"{given}>{derived}")
        if key in self._announced:
            return
        self._announced.add(key)
        logger.warning(
            "model %s: model.json's max_model_len %d is above the %d its weights' config.json allows "
            "(vLLM starts with it only under VLLM_ALLOW_LONG_MAX_MODEL_LEN); the gateway uses %d",
            name,
            given,
            derived,
            given,
        )

    def _warn_unresolved(self, name: str, ref: str, found: Path | None, where: str) -> None:
        """Say once per model and name why the model has no tokenizer here (and, without a template
        from ``model_files``, no chat template: a 400 on every chat request)."""
        if found is not None or (name, ref) in self._unresolved:
            return
        self._unresolved.add((name, ref))
        logger.warning(
            "model %s: %s names the tokenizer %r, found neither as a folder (Triton's working directory %s, "
            "or beside model.json) nor as a hub id in the cache %s; no tokenizer or chat template from it "
            "(set GATEWAY_TRITON_WORKING_DIR, GATEWAY_HF_HUB_CACHE or GATEWAY_MODEL_FILES)",
            name,
            where,
            ref,
            self._sources.working_dir or "unknown",
            self._sources.hub_cache,
        )

    def _tokenizer(self, directory: Path) -> tuple[Any, PromptTokenizer | None]:
        if directory not in self._tokenizers:
            tokenizer = load_tokenizer(directory)
            prompt_tokenizer = PromptTokenizer(tokenizer, self._count_cache) if tokenizer is not None else None
            if prompt_tokenizer is not None and prompt_tokenizer.bound is None:
                logger.info("tokenizer %s: every prompt is counted (no length bound for its shape)", directory)
            self._tokenizers[directory] = (tokenizer, prompt_tokenizer)
        return self._tokenizers[directory]

    def close(self) -> None:
        """Stop the counting threads (the app's shutdown)."""
        self.counter.close()

    def _template(self, directory: Path | None, template_file: Path | None) -> ChatTemplate | None:
        key = (directory, template_file)
        if key not in self._templates:
            self._templates[key] = ChatTemplate.from_directory(directory, template_file)
        return self._templates[key]
