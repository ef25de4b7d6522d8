"""The one settings object.

Every knob of the gateway lives here, read from environment variables with the ``GATEWAY_`` prefix
(and, for the CLI, from flags that mirror the field names: ``triton_url`` is ``--triton-url``).
Nothing else in the package reads the environment, so a test or an embedding application can build
a ``Settings`` by hand and know it sees everything.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from gateway.reasoning.registry import REASONING_PARSERS
from gateway.store.location import default_store_url, parse_store_url
from gateway.tools.registry import PARSERS

ENV_PREFIX = "GATEWAY_"

DNS_SCHEME = "dns:///"
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    """One entry of ``triton_url``."""

    host: str
    port: int
    resolve: bool
    """A ``dns:///`` entry: every address of ``host`` is a replica, followed over time."""
    metrics_port: int | None = None
    """Triton's metrics port on each of the entry's hosts (``triton_metrics``); None: not read."""

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def parse_metrics_ports(value: str) -> tuple[int | None, ...]:
    """``triton_metrics``' entries: a port, or ``off`` (None). Raises ``ValueError`` naming the bad one."""
    ports: list[int | None] = []
    for raw in value.split(","):
        entry = raw.strip().lower()
        if entry == "off":
            ports.append(None)
        elif entry.isdigit() and 0 < int(entry) < 65536:
            ports.append(int(entry))
        else:
            raise ValueError(f"each triton_metrics entry must be a port or off, got {raw.strip()!r}")
    return tuple(ports)


def parse_endpoints(value: str) -> tuple[EndpointSpec, ...]:
    """Raises ``ValueError`` naming the bad entry (settings turn it into a start-up error)."""
    specs: list[EndpointSpec] = []
    for raw in value.split(","):
        entry = raw.strip()
        if not entry:
            continue
        resolve = entry.startswith(DNS_SCHEME)
        target = entry[len(DNS_SCHEME) :] if resolve else entry
        match = _HOST_PORT.match(target)
        if match is None or not 0 < int(match[2]) < 65536:
            raise ValueError(
                f"each triton_url entry must be host:port or dns:///host:port (IPv6 as [addr]:port), got {entry!r}"
            )
        spec = EndpointSpec(match[1], int(match[2]), resolve)
        if spec not in specs:
            specs.append(spec)
    if not specs:
        raise ValueError("triton_url names no endpoint")
    return tuple(specs)


def default_hub_cache(environ: Mapping[str, str]) -> Path:
    """Where ``huggingface_hub`` keeps its cache for this environment: ``HF_HUB_CACHE``, else the
    legacy ``HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``, else
    ``${XDG_CACHE_HOME:-~/.cache}/huggingface/hub`` (the order of ``huggingface_hub.constants``)."""

    def expand(value: str) -> str:
        return os.path.expandvars(os.path.expanduser(value))

    home = expand(environ.get("HF_HOME") or os.path.join(environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface"))
    hub = environ.get("HF_HUB_CACHE") or environ.get("HUGGINGFACE_HUB_CACHE") or os.path.join(home, "hub")
    return Path(expand(hub))


def default_otlp_traces_endpoint(environ: Mapping[str, str]) -> str | None:
    """Where the OpenTelemetry SDK would export traces by its own variables, if they say so."""
    return environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None


class ModelLimits(BaseModel):
    """Per-model overrides of the admission and ``max_tokens`` limits (unset: the global value),
    and of what the gateway assumes the model's backend can take."""

    model_config = ConfigDict(extra="forbid")

    max_concurrent_requests: int | None = Field(default=None, ge=0)
    max_queue_size: int | None = Field(default=None, ge=0)
    max_tokens_limit: int | None = Field(default=None, ge=1)
    logit_bias: bool | None = None
    """Whether the model can take ``logit_bias`` (false: 400 naming the field). Unset: not when
    Triton's config says ``backend: "vllm"`` (that backend hands vLLM the JSON's string keys), yes
    otherwise. Set false for a copy of the vLLM backend's ``model.py`` run as ``backend: "python"``."""


_NO_OVERRIDE = ModelLimits()
"""A model without overrides: every limit is the global one (read, never changed)."""


class ModelFiles(BaseModel):
    """Per-model overrides of what the model repository says (unset: what ``model.json`` names)."""

    model_config = ConfigDict(extra="forbid")

    tokenizer: str | None = None
    """A Hugging Face tokenizer folder (relative to the gateway's working directory) or a hub id
    in ``hf_hub_cache``: the tokenizer and chat template the gateway uses for this model."""
    chat_template: Path | None = None
    """A Jinja chat template file; replaces the tokenizer's own template."""
    max_model_len: int | None = Field(default=None, ge=1)
    """The model's context length, when ``model.json`` does not say it."""
    tool_call_parser: str | None = None
    """The tool-call format the model emits, by vLLM's ``--tool-call-parser`` name (``hermes``,
    ``llama3_json``, ``mistral``, ``pythonic``, ``qwen3_coder``, ``glm45``, ``deepseek_v3``,
    ``deepseek_v31``, ``deepseek_v32``, ``kimi_k2``, ``openai``). Unset: detected from the chat
    template's own markers; none found means ``tool_choice: "auto"`` gets a 400 for this model
    (forced tool choices still work)."""
    reasoning_parser: str | None = None
    """How the model writes its reasoning (``deepseek_r1``, ``deepseek_v3``, ``qwen3``,
    ``mistral``, ``granite``, ``openai``: vLLM's ``--reasoning-parser`` names). Unset: detected
    from the chat template; ``""`` turns a detected one off."""
    structured_outputs_after_reasoning: bool = False
    """The backend's structured outputs start after the reasoning (a vLLM engine configured with
    a reasoning parser for structured outputs). False: constrained output is the answer from
    its first token, and such requests are not split."""
    exclude_tools_when_tool_choice_none: bool = False
    """Whether ``tool_choice: "none"`` leaves the tools out of the prompt. False, as vLLM's
    default: the model still sees what it could call, but nothing it says is parsed as a call."""
    vision: bool | None = None
    """Whether the model takes images (``image_url`` parts, sent as Triton's ``image`` input).
    Unset: when Triton's config for the model declares an ``image`` input and its ``model.json``
    agrees (``limit_mm_per_prompt``'s ``image`` count, else a ``vision_config`` in the weights'
    ``config.json``; neither found: the input alone)."""
    image_placeholder: str = "<image>"
    """What stands for each image in the prompt when the chat template takes text content: the
    model's own image token (``<image>`` for LLaVA; what vLLM's model class calls its placeholder),
    put in front of the message's text once per image, as vLLM's server does. ``""``: none (a
    model whose processor places the image itself, as BLIP-2's)."""
    chat_template_content_format: Literal["auto", "string", "openai"] = "auto"
    """How a message with images reaches the chat template (vLLM's names): ``openai``, a list of
    parts (``{"type": "text", ...}``, ``{"type": "image"}``) for templates that loop over content;
    ``string``, the text with ``image_placeholder`` where each image was. ``auto``: ``openai`` when
    the template loops over a message's content, else ``string``."""
    runner: Literal["generate", "pooling"] | None = None
    """What the model runs, by vLLM's ``--runner`` names: ``pooling`` serves ``/v1/embeddings``
    (its Triton config must declare the ``embedding_request`` input), ``generate`` does not. Unset:
    ``model.json``'s ``runner`` (or ``convert: "embed"``), else a model declaring
    ``embedding_request`` but no ``text_input`` embeds."""
    matryoshka_dimensions: list[int] | None = None
    """The output sizes ``dimensions`` may ask of this embedding model (vLLM's
    ``matryoshka_dimensions``). Unset: ``model.json``'s ``hf_overrides`` say; none there means
    ``dimensions`` is refused with 400."""

    layout: Literal["vllm", "ensemble", "bls", "tensorrt_llm", "llmapi"] | None = None
    """Which tensor contract the model speaks (docs/DEPLOY.md has the TensorRT-LLM layouts).
    Unset: told by its declared inputs and parameters (``backend/contracts/__init__.py``)."""
    kv_cache_block_tokens: int | None = Field(default=None, ge=1)
    """A TensorRT-LLM engine's KV-cache block size (``tokens_per_block``): reused blocks become
    ``usage.prompt_tokens_details.cached_tokens``. Unset: read from the engine's ``config.json``
    (``build_config.plugin_config.tokens_per_block``, in the ``tensorrt_llm`` model's
    ``gpt_model_path``) where the gateway can read it; else no cached tokens are reported."""
    trtllm_route: Literal["auto", "model", "tokens"] = "auto"
    """How a TensorRT-LLM ``ensemble`` or ``bls`` model is driven. ``tokens``: through its
    ``tensorrt_llm`` step, tokenized and detokenized by the gateway with the tokenizer its
    preprocessing step names (exact text, counts and stop strings for every tokenizer);
    ``model``: through the model itself (its streamed text is each response decoded alone:
    SentencePiece tokenizers lose spaces there). ``auto``: ``tokens`` where the step is served
    and the tokenizer readable here, else ``model``."""

    @field_validator("tool_call_parser")
    @classmethod
    def _known_parser(cls, value: str | None) -> str | None:
        choices = sorted(name for name, spec in PARSERS.items() if not spec.forced)
        if value is not None and value not in choices:
            raise ValueError(f"unknown tool_call_parser {value!r}; one of {', '.join(choices)}")
        return value

    @field_validator("reasoning_parser")
    @classmethod
    def _known_reasoning_parser(cls, value: str | None) -> str | None:
        if value and value not in REASONING_PARSERS:
            raise ValueError(f"unknown reasoning_parser {value!r}; one of {', '.join(sorted(REASONING_PARSERS))}")
        return value

    @field_validator("chat_template")
    @classmethod
    def _template_is_a_file(cls, value: Path | None) -> Path | None:
        """Fail at start: a template that cannot be read would otherwise mean 400s on every chat."""
        if value is not None and not value.is_file():
            raise ValueError(f"chat_template {value} is not a readable file")
        return value


MIB = 1024 * 1024


def body_bytes_for_image(image_bytes: int) -> int:
    """The body a request needs to carry one image of ``image_bytes`` as a base64 data URL: its
    base64 text (4 characters per 3 bytes) and 1 MiB for the rest of the request, rounded up to
    a whole MiB; never under 8 MiB."""
    needed = -(-image_bytes // 3) * 4 + MIB
    return max(8 * MIB, -(-needed // MIB) * MIB)


class Settings(BaseSettings):
    """Gateway configuration. Field docstrings are the configuration reference (see README)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="ignore",
        validate_default=True,
        populate_by_name=True,
        use_attribute_docstrings=True,
    )

    host: str = "127.0.0.1"
    """Address the HTTP server binds to. Use 0.0.0.0 in a container."""

    port: int = Field(default=8000, ge=0, le=65535)
    """HTTP port of the gateway."""

    triton_url: str = "localhost:8001"
    """Triton's gRPC endpoints, comma-separated: ``host:port`` is one Triton replica;
    ``dns:///host:port`` is every address the name resolves to, re-resolved every
    ``triton_resolve_interval`` (a Kubernetes headless Service). Several replicas are routed
    across by ``routing_policy`` (docs/DEPLOY.md). Ignored in embedded mode (the launcher picks a
    port)."""

    triton_resolve_interval: float = Field(default=5.0, gt=0.0)
    """Seconds between DNS lookups of ``dns:///`` entries of ``triton_url``: how soon a new Triton
    pod gets traffic (a pod that leaves stops getting it at the lookup after it left)."""

    routing_policy: Literal["affinity", "prefix", "least_loaded", "round_robin"] = "affinity"
    """How a request picks among several Triton replicas. ``affinity``: a session key
    (``X-Session-Id`` header, else ``prompt_cache_key``, else ``user``, else the Responses
    conversation of ``previous_response_id``) keeps a conversation on one replica, where its KV
    cache is; else the prompt goes where its longest prefix was sent before; else to the least
    busy replica. ``prefix``: the prefix,
    else the least busy. ``least_loaded``: fewest requests in flight. ``round_robin``: in turn.
    Session keys use consistent hashing (every gateway process agrees); both keyed routes respect
    a load bound (``routing_load_factor``)."""

    routing_prefix_chars: int = Field(default=16384, ge=256)
    """How much of the rendered prompt the prefix route looks at, in characters (about a quarter as
    many tokens): in 256-character blocks, a prompt goes to the replica where the longest run of
    its leading blocks was sent before. Longer tells more conversations apart behind a long
    shared system prompt and costs more hashing per request (about 0.2 µs per block)."""

    routing_load_factor: float = Field(default=1.25, ge=1.0)
    """Bounded load: a replica takes a keyed request only while its load (in-flight requests
    weighed with the engine's, ``triton_metrics``) is under this factor times the average
    (counting the new request), or under 8 (a session) or 4 (a prefix);
    beyond it the key spills to its next choice, so one hot conversation or system prompt cannot
    overload one Triton."""

    triton_metrics: str = "8002"
    """Where each replica reports its engine's load: Triton's metrics port on the replica's host,
    comma-separated, one per ``triton_url`` entry in order (or one for every entry), or ``off``.
    Read every ``engine_load_interval``: Triton's pending requests, and the backend's running and
    waiting requests and KV-cache use where it exports them (the vLLM backend with
    ``REPORT_CUSTOM_METRICS``, TensorRT-LLM, tiny-llm). Routing counts them beside the gateway's
    own in-flight requests, so the work of other gateway pods and a replica's full cache weigh.
    In embedded mode the launcher's port is used."""

    engine_load_interval: float = Field(default=1.0, gt=0.0)
    """Seconds between reads of each replica's metrics. A replica whose metrics answered before
    but not for three intervals is scored busier than its own count says, not trusted (metrics
    that never answered leave it scored by its own count)."""

    migration_limit: int = Field(default=3, ge=0)
    """How many times one stream may move to another replica when its replica fails mid-stream
    (killed, drained past its grace, its connection lost): the request is sent there as a
    continuation of what it has generated, and the client's stream goes on with no token lost
    or repeated (docs/DEPLOY.md, "Stream migration"). 0: never; such a stream ends with an error
    event. Only streams that have sent tokens move; one that fails before its first token is
    retried once on another replica, whatever this says."""

    embedded: bool = False
    """Start a local tritonserver (from the nvidia-pytriton wheel) against ``model_repository``
    and serve it. Needs the ``local`` extra."""

    model_repository: Annotated[list[Path], NoDecode] = Field(default_factory=list)
    """Triton model repositories on a filesystem the gateway can read (several separated by
    commas, as Triton takes several). Used to find each model's tokenizer/chat template
    (``<model>/1/model.json`` → ``"model"``), context length and LoRA adapters
    (``<model>/1/multi_lora.json``). Embedded mode defaults it to the shipped tiny model."""

    triton_start_timeout: float = Field(default=600.0, gt=0.0)
    """Embedded mode: seconds to wait for tritonserver to be ready before giving up. A real model
    takes minutes to load (weights read, an engine built), more on a busy machine; a line every
    15 s says how long it has been waiting."""

    triton_auto_complete_config: bool = True
    """Embedded mode: let Triton complete each model's ``config.pbtxt`` (Triton's default), so a
    repository built for NVIDIA's vLLM container, whose config names no inputs or outputs, loads
    unchanged. ``--no-triton-auto-complete-config`` passes ``--disable-auto-complete-config``."""

    triton_working_dir: Path | None = None
    """tritonserver's working directory. Triton's vLLM backend hands ``model.json``'s paths to vLLM
    unchanged, so a relative ``"model"``/``"tokenizer"`` is relative to it; the gateway looks there
    first, then in the hub cache, then beside ``model.json`` (how the shipped reference model reads
    it). Embedded mode starts Triton in this directory (default: the gateway's own)."""

    hf_hub_cache: Path | None = Field(default_factory=lambda: default_hub_cache(os.environ))
    """The Hugging Face hub cache where a hub id in ``model.json`` (``"model": "org/name"``) is
    looked up, offline, as vLLM loads it (``refs/<revision>`` → ``snapshots/<commit>``; honours
    ``"revision"``/``"tokenizer_revision"``). Default: where ``huggingface_hub`` puts it
    (``HF_HUB_CACHE``, else ``HF_HOME``/hub, else ``~/.cache/huggingface/hub``). With a remote
    Triton, mount Triton's cache here."""

    model_files: dict[str, ModelFiles] = Field(default_factory=dict)
    """Per-model tokenizer, chat template and context length, a JSON object keyed by Triton model
    name, for what the repository cannot tell, e.g. ``{"my-model": {"tokenizer": "/weights/tok",
    "chat_template": "/etc/gateway/chat.jinja", "max_model_len": 4096}}``. Each key wins over
    ``model.json``; works for models in no readable repository too."""

    triton_log_file: Path | None = None
    """Embedded mode: where tritonserver's log goes (default: a temporary file, path logged)."""

    lora_separator: str = ":"
    """LoRA adapters are served as model ids ``<base><separator><adapter>``."""

    model_refresh_interval: float = Field(default=10.0, ge=0.0)
    """Seconds between refreshes of the model list from Triton (0: refresh on every lookup)."""

    ready_check_interval: float = Field(default=10.0, ge=0.0)
    """Seconds without a readiness check (``/health/ready``, which Kubernetes probes) after which
    the gateway runs one itself, so that ``gateway_ready`` stays true on a gateway nothing probes
    (0: only the probes' checks, and the gauge is 0 until the first)."""

    default_max_tokens: int = Field(default=1024, ge=1)
    """``max_tokens`` when the request sets none and the model's context length or tokenizer is
    unknown (otherwise the default is all the room the context leaves after the prompt)."""

    completions_default_max_tokens: int = Field(default=16, ge=0)
    """``max_tokens`` of a legacy ``/v1/completions`` request that sets none: 16, OpenAI's and
    vLLM's default there, which clients written against either expect. 0: as chat, all the room
    the context leaves."""

    sse_ping_interval: float = Field(default=15.0, gt=0.0)
    """Seconds between SSE comment pings (``: ping``) that keep idle streams alive through proxies."""

    stream_coalesce_interval: float = Field(default=0.0, ge=0.0, le=1.0)
    """Seconds. A stream whose chunks come closer together than this (a fast model, a firehose) has
    them written at most once per interval, grouped into one write; a stream with slower tokens
    (most models: 5-50 ms apart) is written chunk by chunk at once, as with 0. Each chunk waits at
    most this long; what it saves is a socket write and a wake-up per token (docs/PERFORMANCE.md
    has the trade measured). 0 (default): every chunk is written as soon as it is made."""

    first_response_wait: float = Field(default=2.0, ge=0.0)
    """Streaming: how long to wait for the backend's first response before sending headers. An
    error within this window gets a real HTTP status; after it, an SSE error event."""

    request_timeout: float | None = Field(default=None, gt=0.0)
    """Upper bound in seconds for one request end to end; the Triton call is cancelled when it passes."""

    max_concurrent_requests: int = Field(default=256, ge=0)
    """Per model: requests sent to Triton at once (0: no limit). Others wait in the queue."""

    max_queue_size: int = Field(default=1024, ge=0)
    """Per model: requests that may wait for a slot; beyond it, 429 with Retry-After at once."""

    queue_timeout: float = Field(default=30.0, gt=0.0)
    """Seconds a request may wait for a slot before it gets 429 with Retry-After."""

    scheduling: Literal["fair", "fifo"] = "fair"
    """Who goes next when a model's slots are full, inside a priority band (bands always go most
    urgent first: the request's ``priority``, lower first). ``fair``: weighted fair share of
    tokens between API keys (the key file's ``weight``; requests without a named key share one
    share); ``fifo``: arrival order. docs/OPERATIONS.md says what each band does under load."""

    scheduling_headroom: float = Field(default=0.1, ge=0.0, le=1.0)
    """Per model, slots above ``max_concurrent_requests`` (this fraction of it, rounded up) that
    only a request of a key holding less than its weighted share of the slots, or of a band more
    urgent than one running, may take: such requests are admitted at once under another key's
    flood instead of waiting for its streams to end. One key alone never exceeds the limit.
    ``fair`` scheduling only; 0: none."""

    shed_priority: int = 1
    """Requests of this priority or a larger one (less urgent; ``sheddable`` is 1) are refused
    at once with 429 and ``Retry-After`` when every slot of the model is busy, never queued. A
    number above every priority in use (2147483647) sheds nothing."""

    shed_share: float = Field(default=0.25, ge=0.0, le=1.0)
    """The most of a model's slots (this fraction, rounded down, one at least) requests of a shed
    priority (``shed_priority`` and less urgent: batch lines, background responses, sheddable
    requests) hold while a more urgent request runs. With nothing more urgent running they take
    every free slot: a batch fills an idle model and leaves a busy one mostly to interactive
    requests, which every sequence it adds would slow. 1: every free slot always."""

    band_queue_sizes: dict[int, int] = Field(default_factory=dict)
    """A cap on the waiting requests of each listed priority, per model, e.g. ``{"0": 256}``
    (``max_queue_size`` still caps them all). A full queue gives the place of the newest waiter
    of the key holding the most waiters (per weight) to a request of a key holding fewer."""

    model_limits: dict[str, ModelLimits] = Field(default_factory=dict)
    """Per-model overrides, a JSON object keyed by Triton model name, e.g.
    ``{"llama": {"max_concurrent_requests": 64, "max_queue_size": 256, "max_tokens_limit": 4096}}``;
    also ``logit_bias`` (true/false) where the model's Triton backend says nothing reliable."""

    workers: int = Field(default=1, ge=1)
    """Gateway processes serving one port (one core each; docs/PERFORMANCE.md says how many).
    The admission limits above are for the whole gateway: each worker gets its share
    (``max_concurrent_requests`` 256 over 2 workers is 128 each). Metrics on ``/metrics`` add up
    all workers; SIGTERM drains every worker. Embedded mode still starts one Triton."""

    shutdown_grace_period: float = Field(default=30.0, ge=0.0)
    """On SIGTERM: seconds in-flight requests get to finish (new ones get 503) before they are
    cancelled with an error event."""

    api_keys: str | None = None
    """Comma-separated API keys; when any key is configured (here, in ``api_key_file`` or
    ``api_key_policy_file``), every path requires ``Authorization: Bearer <key>`` (or
    ``x-api-key: <key>``, as Anthropic's SDKs send it): the API, ``/tokenize``, ``/detokenize``,
    ``/docs``, ``/redoc``, ``/openapi.json``, ``/metrics`` (unless ``metrics_require_auth`` is
    false or ``metrics_port`` is set) and unknown paths alike. Only ``/health``, ``/health/live``
    and ``/health/ready`` answer without one, and then name no model."""

    api_key_file: Path | None = None
    """File with one API key per line (blank lines and ``#`` comments ignored)."""

    api_key_policy_file: Path | None = None
    """The key file (TOML, docs/OPERATIONS.md): hashed keys, each with a ``name``, the ``models``
    it may use and its limits (``rpm``, ``tpm``, ``max_concurrent``). Read again when it changes
    (``api_key_reload_interval``) and on SIGHUP; a file that does not parse keeps the keys
    already loaded. Works beside ``api_keys``/``api_key_file``, whose keys have no limits."""

    api_key_reload_interval: float = Field(default=2.0, ge=0.0)
    """Seconds between checks of ``api_key_policy_file`` for changes (0: only on SIGHUP)."""

    key_limits_redis_url: str | None = None
    """Redis (``redis://host:6379/0``) where every gateway process counts the key limits
    together, so they hold for all pods. Unset: one process counts alone, and ``--workers``
    count together on this machine (``key_limits_file``). Needs the ``redis`` extra."""

    key_limits_redis_failure: Literal["open", "closed"] = "open"
    """The key limits' store unavailable (Redis unreachable, or the ``key_limits_file`` busy or
    broken): ``open`` lets keyed requests through uncounted (a warning in the log), ``closed``
    answers them 503 ``rate_limiter_unavailable``."""

    key_limits_redis_timeout: float = Field(default=0.25, gt=0.0)
    """Seconds a Redis call (or a wait for the ``key_limits_file``'s lock) may take before the
    store counts as unavailable for that request."""

    key_limits_lease_ttl: float = Field(default=30.0, ge=1.0)
    """Seconds a request's ``max_concurrent`` slot lives in Redis or the ``key_limits_file``
    without renewal; each process renews its requests' slots every third of it, so a gateway
    (or worker) killed with requests in flight gives their slots back within this many seconds."""

    key_limits_file: Path | None = None
    """SQLite file where the workers of one gateway count key limits together (no Redis). Set by
    ``--workers`` itself, in its temporary directory; set it to share counts between gateways
    on one machine."""

    reasoning_secret: str | None = None
    """Secret(s) sealing the reasoning clients carry between turns (Responses'
    ``encrypted_content``, Messages' thinking ``signature``), comma-separated for rotation: the
    first seals, every one opens. Unset: a random one per start (``--workers`` share it), so a
    blob sealed before a restart or by another pod no longer opens; set it where pods share
    conversations."""

    metrics_enabled: bool = True
    """Serve Prometheus metrics on ``/metrics``."""

    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    """Serve ``/metrics`` on this port of its own (on ``host``), without an API key, and not on
    ``port``: Prometheus scrapes it while clients, who reach ``port``, never see the metrics
    (which name models and key names). Unset: ``/metrics`` is on ``port``."""

    metrics_require_auth: bool = True
    """On a gateway with API keys, ``/metrics`` on ``port`` requires one too (the metrics name
    models and key names); false opens it to scrapers that send none. Without keys it is open."""

    cors_origins: list[str] = Field(default_factory=list)
    """Browser origins allowed by CORS (JSON list, ``["*"]`` for any); empty: CORS off."""

    max_body_bytes: int = Field(default=0, ge=0)
    """Largest request body accepted, in bytes; larger bodies get 413. 0 (default): what a request
    with one image of ``image_max_bytes`` as a base64 data URL needs (4/3 of it) and 1 MiB for the
    rest, at least 8 MiB (15 MiB with the default image cap). Set, at least 1024: an image in a
    data URL can then be at most about 3/4 of it, whatever ``image_max_bytes`` says."""

    max_messages: int = Field(default=512, ge=1)
    """Most messages in one chat request."""

    allow_request_chat_template: bool = False
    """Let a chat request bring its own Jinja ``chat_template`` (a vLLM extra). Off by default: a
    template is code the gateway runs for the client (sandboxed, but its cost is the client's to
    choose); off, such a request gets 400 naming ``chat_template``."""

    max_images_per_request: int = Field(default=8, ge=0)
    """Most images in one chat or Responses request (0: images are refused)."""

    image_max_bytes: int = Field(default=10 * 1024 * 1024, ge=1)
    """Largest image, in bytes once decoded from its data URL or fetched."""

    image_max_pixels: int = Field(default=4096 * 4096, ge=1)
    """Most pixels (width × height) in one image, read from its header before its pixels are
    decoded, so a small file declaring a huge canvas (a decompression bomb) costs nothing."""

    image_formats: Annotated[list[str], NoDecode] = Field(default_factory=lambda: ["PNG", "JPEG", "WEBP", "GIF"])
    """Image formats accepted, told by the file's header (Pillow's names, comma-separated)."""

    image_fetch_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Hosts an ``http(s)`` image URL may name, comma-separated (``*.example.com``: its
    subdomains). Empty (default): image URLs are refused and only ``data:`` URLs are taken."""

    image_fetch_allow_private: bool = False
    """Let image fetches reach private, loopback and link-local addresses (an allowed host's name
    is resolved and each address checked; the connection goes to the checked address)."""

    image_fetch_timeout: float = Field(default=10.0, gt=0.0)
    """Seconds one image fetch may take in all: the wait for a slot, redirects, the body."""

    image_fetch_max_redirects: int = Field(default=3, ge=0)
    """Redirects an image fetch follows, each target checked like the first URL."""

    image_fetch_concurrency: int = Field(default=8, ge=1)
    """Image fetches running at once per gateway process; others wait (within the timeout)."""

    max_prompt_chars: int = Field(default=1_000_000, ge=1)
    """Longest prompt (rendered chat or legacy prompt), in characters."""

    tokenizer_threads: int = Field(default=2, ge=1)
    """Threads that count long prompts' tokens off the event loop (the Rust tokenizer releases the
    GIL), so a large prompt never stalls other streams. Prompts are counted only when the count can
    change the request: no ``max_tokens``, or a prompt that may not fit the context."""

    token_count_cache_mb: float = Field(default=64.0, ge=0.0)
    """Memory for cached token counts of the text between special tokens (a shared system prompt,
    the earlier turns of a conversation), so a prompt that must be counted costs only its new text
    (0: off)."""

    max_n: int = Field(default=16, ge=1)
    """Largest ``n`` (choices per prompt) accepted."""

    max_embedding_inputs: int = Field(default=2048, ge=1)
    """Most inputs in one ``/v1/embeddings`` request (OpenAI's own cap is 2048); each is one
    Triton call, all sent at once."""

    max_tokens_limit: int | None = Field(default=None, ge=1)
    """Cap on ``max_tokens`` for every model: larger requests get 400, the default is clamped."""

    responses_store_enabled: bool = True
    """Keep what ``/v1/responses`` answers (requests with ``store``, true by default) so that
    ``previous_response_id``, ``GET`` and ``DELETE /v1/responses/{id}`` find it. False: nothing is
    written or read, and those find nothing."""

    responses_store: str = Field(default_factory=lambda: default_store_url(os.environ))
    """Where stored responses live, a URL: ``sqlite:///relative.db`` or ``sqlite:////absolute.db``
    (a file on this machine; default ``$XDG_STATE_HOME/triton-openai-gateway/responses.db``, that
    is ``~/.local/state/...``), or ``postgresql://user:password@host:5432/db`` (libpq's URL; the
    ``postgres`` extra), one database that every replica shares."""

    responses_store_ttl: float = Field(default=30 * 24 * 3600.0, gt=0.0)
    """Seconds a stored response lives after it was created (default 30 days, as OpenAI keeps
    them); once past, reads no longer see it, and it is deleted with the next batch."""

    responses_store_max: int = Field(default=10_000, ge=1)
    """Most responses stored, all API keys together; the oldest are deleted first, in batches
    every ``max // 64`` puts (so up to that many more may be there between two batches)."""

    jobs_priority: int = 1
    """The priority band of work no client waits on: batch lines and background responses.
    At or above ``shed_priority`` (the default: both are 1) it runs only while a slot of its
    model is free, and waits (never fails) while interactive requests hold them all."""

    batch_runner: bool = True
    """Whether this gateway runs batch lines. Every gateway takes uploads and answers the Batch
    API; with several on one PostgreSQL store, those with the runner on share every batch's lines."""

    batch_concurrency: int = Field(default=16, ge=1)
    """Batch lines this gateway runs at once, every batch together."""

    batch_max_concurrency: int = Field(default=8, ge=1)
    """Lines of one batch in flight at once, all gateways on the store together (a batch may
    ask for fewer with the ``max_concurrency`` extension field)."""

    batch_lease_seconds: float = Field(default=30.0, gt=0.0)
    """How long a gateway holds work it runs in the store: a batch line before another may take
    it, a background response before a read elsewhere calls it failed. Renewed every third of it
    while the work runs, so only a gateway that died (or lost the store) loses its lines, which
    another then runs, and its background responses, which are then stored ``failed``."""

    batch_poll_interval: float = Field(default=1.0, gt=0.0)
    """Seconds an idle runner waits before it looks for batch lines again."""

    batch_line_attempts: int = Field(default=5, ge=1)
    """Times a batch line is tried when its answer is a transient failure (a 5xx, a 429 other than
    the wait for a free slot or for the key's limits, which count none), 2, 10, 30 and then 60 s
    apart: a replica restart costs a batch nothing. The last answer goes to the error file."""

    batch_max_file_bytes: int = Field(default=200 * 2**20, ge=1)
    """The largest file ``POST /v1/files`` takes (OpenAI's limit for batch input: 200 MB)."""

    batch_max_lines: int = Field(default=50_000, ge=1)
    """The most requests one batch input file may hold (OpenAI's limit: 50,000)."""

    jobs_retention: float = Field(default=30 * 24 * 3600.0, gt=0.0)
    """Seconds uploaded files, batches and their output files are kept (a file's own
    ``expires_after`` may shorten it); then they are deleted with their lines."""

    log_requests: bool = False
    """Log one JSON line per request (ids, model, status, tokens, timings; never text)."""

    triton_ssl: bool = False
    """Use TLS for the gRPC connections to Triton."""

    triton_ssl_root_certs: Path | None = None
    """PEM file of CA certificates to verify Triton (default: the system's)."""

    triton_ssl_client_cert: Path | None = None
    """PEM client certificate for mutual TLS."""

    triton_ssl_client_key: Path | None = None
    """PEM private key of the client certificate."""

    triton_transport: Literal["h2", "aio"] = "h2"
    """What carries the token streams to Triton: ``h2``, the gateway's own HTTP/2 connection read
    by the event loop (the fast one), or ``aio``, ``grpc.aio`` (the conservative fallback, on the
    control calls' channel). Switch to ``aio`` behind a proxy or mesh that ``h2`` does not get
    along with, or to debug (docs/OPERATIONS.md)."""

    grpc_keepalive_ms: int = Field(default=30_000, ge=1000)
    """Keepalive ping interval to Triton (the gRPC channel and the streaming connection), so a dead
    peer fails its calls instead of hanging them."""

    grpc_keepalive_timeout_ms: int = Field(default=10_000, ge=100)
    """How long a keepalive ping may go unanswered before the connection counts as dead."""

    grpc_max_message_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    """Largest gRPC message accepted from Triton; a larger one fails its request with a clear error
    instead of buffering without bound."""

    log_level: Literal["debug", "info", "warning", "error"] = "info"
    """Log level of the gateway's loggers."""

    otlp_traces_endpoint: str | None = Field(default_factory=lambda: default_otlp_traces_endpoint(os.environ))
    """OpenTelemetry traces (as vLLM's ``--otlp-traces-endpoint``): the OTLP/HTTP URL spans are
    exported to, e.g. ``http://localhost:4318/v1/traces`` (a bare ``http://host:4318`` gets
    ``/v1/traces``). Unset: ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else
    ``OTEL_EXPORTER_OTLP_ENDPOINT``; none of them: tracing is off and costs nothing. Needs the
    ``tracing`` extra. The other ``OTEL_*`` variables apply (``OTEL_SERVICE_NAME``,
    ``OTEL_EXPORTER_OTLP_HEADERS``, ``OTEL_TRACES_SAMPLER``...). Embedded mode points Triton's
    own OpenTelemetry tracing at the same URL (docs/OPERATIONS.md)."""

    otlp_trust_trace_context: bool = False
    """On a gateway with API keys, continue a client's ``traceparent`` all the same: its trace id,
    and its sampled flag, which decides sampling under OpenTelemetry's parent-based samplers.
    Off, a keyed request starts a trace of its own, sampled by the gateway's sampler, with a link
    to the client's span. Without keys a client's trace context is always continued."""

    otlp_trace_content: bool = False
    """Record the rendered prompts in the request's span (``gateway.prompts``). Off by default:
    spans carry ids, parameters, token counts and timings, never what users wrote (and never the
    completions' text, which the gateway does not keep once a stream has sent it)."""

    def limits_for(self, model: str) -> tuple[int, int, int | None]:
        """(max_concurrent_requests, max_queue_size, max_tokens_limit) for ``model``."""
        override = self.model_limits.get(model, _NO_OVERRIDE)
        return (
            self.max_concurrent_requests
            if override.max_concurrent_requests is None
            else override.max_concurrent_requests,
            self.max_queue_size if override.max_queue_size is None else override.max_queue_size,
            self.max_tokens_limit if override.max_tokens_limit is None else override.max_tokens_limit,
        )

    def load_api_keys(self) -> frozenset[str]:
        """Every configured key, from ``api_keys`` and ``api_key_file``. Reads the file."""
        keys = {k.strip() for k in (self.api_keys or "").split(",") if k.strip()}
        if self.api_key_file is not None:
            for line in self.api_key_file.read_text(encoding="utf-8").splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    keys.add(line)
        return frozenset(keys)

    @field_validator("model_repository", mode="before")
    @classmethod
    def _split_repositories(cls, value: object) -> object:
        if isinstance(value, (str, Path)):
            return [Path(p.strip()) for p in str(value).split(",") if p.strip()]
        return value

    @field_validator("max_body_bytes")
    @classmethod
    def _body_limit_size(cls, value: int) -> int:
        if 0 < value < 1024:
            raise ValueError("max_body_bytes must be 0 (follow image_max_bytes) or at least 1024")
        return value

    @field_validator("band_queue_sizes")
    @classmethod
    def _band_sizes_whole(cls, value: dict[int, int]) -> dict[int, int]:
        for band, size in value.items():
            if size < 0:
                raise ValueError(f"band_queue_sizes: the size for priority {band} must be >= 0, got {size}")
        return value

    @model_validator(mode="after")
    def _body_limit_follows_the_image_cap(self) -> Settings:
        """``max_body_bytes`` unset: a body large enough for the largest image allowed, so the
        image cap is reachable with a data URL (base64 inflates it by 4/3)."""
        if self.max_body_bytes == 0:
            self.max_body_bytes = body_bytes_for_image(self.image_max_bytes)
        return self

    @field_validator("image_formats", "image_fetch_hosts", mode="before")
    @classmethod
    def _split_names(cls, value: object) -> object:
        if isinstance(value, str) and value.strip().startswith("["):
            return json.loads(value)
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value

    @field_validator("image_formats")
    @classmethod
    def _upper_formats(cls, value: list[str]) -> list[str]:
        return [name.upper() for name in value]

    @field_validator("image_fetch_hosts")
    @classmethod
    def _lower_hosts(cls, value: list[str]) -> list[str]:
        return [name.lower().rstrip(".") for name in value]

    @field_validator("triton_url")
    @classmethod
    def _endpoints(cls, value: str) -> str:
        """Fail at start, not with a 503 on every request: the streaming connection dials
        ``host:port`` itself, so only that and ``dns:///host:port`` are understood."""
        parse_endpoints(value)
        return value

    @field_validator("triton_metrics")
    @classmethod
    def _metrics_ports(cls, value: str) -> str:
        parse_metrics_ports(value)
        return value

    @property
    def triton_endpoints(self) -> tuple[EndpointSpec, ...]:
        """``triton_url``'s entries, each with its metrics port from ``triton_metrics``."""
        specs = parse_endpoints(self.triton_url)
        ports = parse_metrics_ports(self.triton_metrics)
        if len(ports) == 1:
            ports = ports * len(specs)
        if len(ports) != len(specs):
            raise ValueError(
                f"triton_metrics lists {len(ports)} entries for triton_url's {len(specs)}: give one for "
                "every entry, or one for all"
            )
        return tuple(replace(spec, metrics_port=port) for spec, port in zip(specs, ports, strict=True))

    @field_validator("responses_store")
    @classmethod
    def _store_url(cls, value: str) -> str:
        """Fail at start: a URL the store cannot use would otherwise fail the first stored response."""
        parse_store_url(value)
        return value

    @field_validator("lora_separator")
    @classmethod
    def _separator_not_empty(cls, value: str) -> str:
        if not value:
            raise ValueError("lora_separator must not be empty")
        return value
