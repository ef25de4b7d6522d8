"""Test-only decoupled model: a vLLM-style prefix (KV) cache, without the model (format: ../../README.md).

Why: the benchmark and tests of replica routing need a backend whose cost and state depend on
where a prompt was seen before, as vLLM's do. Each request's prompt is looked up in this
instance's block cache (``prefix_blocks.py``); the uncached characters are charged a prefill delay
(one prefill at a time per instance, as a GPU's compute-bound prefill), then ``max_tokens`` tiny
tokens stream like the firehose's. The prompt and what was generated enter the cache before the
final response, so a conversation's next turn finds both. Metrics count prompt and hit
characters; one log line per request names the Triton request id and the prompt's session marker
so tests can tell which replica served which session.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

import numpy as np  # noqa: E402
import triton_python_backend_utils as pb_utils  # noqa: E402
from prefix_blocks import Lookup, PrefixCache, session_of  # noqa: E402

TOKEN = "tok "
DEFAULT_MAX_TOKENS = 16  # vLLM's default
CANCEL_CHECK_EVERY = 8
_POLL = 0.01  # seconds between cancellation checks while waiting
RETURN_FLAGS = (
    "return_finish_reason",
    "return_num_input_tokens",
    "return_num_output_tokens",
    "return_logprobs",
    "return_cumulative_logprob",
)
PARAMETERS = {"cache_blocks": 4096, "block_chars": 16, "prefill_us_per_char": 0.0}


def _first(request: Any, name: str) -> Any:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return None
    values = tensor.as_numpy().reshape(-1)
    return values[0] if values.size else None


def _parameters(model_config: dict[str, Any]) -> dict[str, float]:
    """The ``parameters`` of config.pbtxt over the defaults; a bad value fails the load, not a request."""
    given = model_config.get("parameters") or {}
    values: dict[str, float] = dict(PARAMETERS)
    for name, default in PARAMETERS.items():
        if name not in given:
            continue
        raw = given[name].get("string_value", "")
        value = type(default)(raw)
        if value < 0 or (isinstance(default, int) and value < 1):
            raise ValueError(f"prefix_cache: parameter {name} out of range: {raw!r}")
        values[name] = value
    unknown = set(given) - set(PARAMETERS)
    if unknown:
        raise ValueError(f"prefix_cache: unknown parameters {sorted(unknown)}; known: {sorted(PARAMETERS)}")
    return values


def _sampling(raw: bytes | None) -> tuple[int, int]:
    """(max_tokens, n) from sampling_parameters; other keys are accepted and ignored."""
    data = json.loads(raw) if raw else {}
    if not isinstance(data, dict):
        raise ValueError("sampling_parameters must be a JSON object")
    max_tokens = data.get("max_tokens") or DEFAULT_MAX_TOKENS
    n = data.get("n") or 1
    if not isinstance(max_tokens, int) or max_tokens < 1 or not isinstance(n, int) or n < 1:
        raise ValueError("'max_tokens' and 'n' must be positive integers")
    return max_tokens, n


def _outputs(text: str, n: int, tokens: int, final: bool, prompt_tokens: int, flags: dict[str, bool]) -> list[Any]:
    tensors = [pb_utils.Tensor("text_output", np.array([text.encode()] * n, dtype=np.object_))]
    if flags["return_finish_reason"]:
        reason = "length" if final else "None"
        tensors.append(pb_utils.Tensor("finish_reason", np.array([reason] * n, dtype=np.object_)))
    if flags["return_num_input_tokens"]:
        tensors.append(pb_utils.Tensor("num_input_tokens", np.array([prompt_tokens], dtype=np.uint32)))
    if flags["return_num_output_tokens"]:
        tensors.append(pb_utils.Tensor("num_output_tokens", np.array([tokens] * n, dtype=np.uint32)))
    if flags["return_logprobs"]:
        tensors.append(pb_utils.Tensor("logprobs", np.array(["null"] * n, dtype=np.object_)))
    if flags["return_cumulative_logprob"]:
        tensors.append(pb_utils.Tensor("cumulative_logprob", np.zeros(n, dtype=np.float32)))
    return tensors


class _Metrics:
    def __init__(self, labels: dict[str, str]) -> None:
        self._lock = threading.Lock()
        counter = pb_utils.MetricFamily.COUNTER
        kinds = {
            "prefix_cache_requests_total": "Requests received",
            "prefix_cache_prompt_chars_total": "Prompt characters received",
            "prefix_cache_hit_chars_total": "Prompt characters found in the prefix cache",
            "prefix_cache_hit_requests_total": "Requests whose cached prefix was not empty",
        }
        self._families = [pb_utils.MetricFamily(name=n, description=d, kind=counter) for n, d in kinds.items()]
        self.requests, self.prompt_chars, self.hit_chars, self.hit_requests = (
            family.Metric(labels=labels) for family in self._families
        )

    def record(self, lookup: Lookup) -> None:
        with self._lock:
            self.requests.increment(1.0)
            self.prompt_chars.increment(float(lookup.prompt_chars))
            self.hit_chars.increment(float(lookup.cached_chars))
            if lookup.cached_chars:
                self.hit_requests.increment(1.0)


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        params = _parameters(json.loads(args["model_config"]))
        self._cache = PrefixCache(int(params["cache_blocks"]), int(params["block_chars"]))
        self._prefill_s_per_char = params["prefill_us_per_char"] / 1e6
        self._prefill = threading.Lock()
        self._metrics = _Metrics({"model": args["model_name"], "version": args["model_version"]})
        self._logger = pb_utils.Logger

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:
                max_tokens, n = _sampling(_first(request, "sampling_parameters"))
            except (ValueError, json.JSONDecodeError) as exc:
                error = pb_utils.TritonError(f"prefix_cache: {exc}", pb_utils.TritonError.INVALID_ARG)
                sender.send(
                    pb_utils.InferenceResponse(output_tensors=[], error=error),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
                continue
            prompt = (_first(request, "text_input") or b"").decode("utf-8", errors="replace")
            lookup = self._cache.admit(prompt)
            self._metrics.record(lookup)
            self._logger.log_info(
                f"prefix_cache request id={request.request_id() or '-'} session={session_of(prompt) or '-'} "
                f"cached_chars={lookup.cached_chars} prompt_chars={lookup.prompt_chars}"
            )
            flags = {name: bool(_first(request, name)) for name in RETURN_FLAGS}
            stream = bool(_first(request, "stream"))
            args = (sender, prompt, lookup, stream, max_tokens, n, flags)
            threading.Thread(target=self._run, args=args, daemon=True).start()
        return None

    def _run(
        self, sender: Any, prompt: str, lookup: Lookup, stream: bool, max_tokens: int, n: int, flags: dict[str, bool]
    ) -> None:
        if not self._prefill_for(sender, lookup.uncached_chars * self._prefill_s_per_char):
            return self._cancel(sender)
        final_flag = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        if not stream:
            self._cache.insert(prompt + TOKEN * max_tokens)
            tensors = _outputs(TOKEN * max_tokens, n, max_tokens, True, lookup.prompt_chars, flags)
            sender.send(pb_utils.InferenceResponse(output_tensors=tensors), flags=final_flag)
            return None
        for index in range(max_tokens):
            if index % CANCEL_CHECK_EVERY == 0 and sender.is_cancelled():
                return self._cancel(sender)
            final = index == max_tokens - 1
            if final:  # before the client can send its next turn
                self._cache.insert(prompt + TOKEN * max_tokens)
            tensors = _outputs(TOKEN, n, 1, final, lookup.prompt_chars, flags)
            sender.send(pb_utils.InferenceResponse(output_tensors=tensors), flags=final_flag if final else 0)
        return None

    def _prefill_for(self, sender: Any, seconds: float) -> bool:
        """Hold this instance's prefill for ``seconds``; False as soon as the request is cancelled."""
        if seconds <= 0:
            return not sender.is_cancelled()
        while not self._prefill.acquire(timeout=_POLL):
            if sender.is_cancelled():
                return False
        try:
            deadline = time.monotonic() + seconds
            while (remaining := deadline - time.monotonic()) > 0:
                if sender.is_cancelled():
                    return False
                time.sleep(min(_POLL, remaining))
            return True
        finally:
            self._prefill.release()

    def _cancel(self, sender: Any) -> None:
        """End a cancelled request with the bare FINAL flag (no response)."""
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
