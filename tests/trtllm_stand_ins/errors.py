"""The error texts of the TensorRT-LLM models, in one place (contract §2.7).

Where an error is raised decides its text, as in the C++ backend: a request that cannot be
converted (a bad flag, a sampling value out of range) fails with the exception's own text; a check
the executor makes later (the LoRA cache, the beam width, a guide that does not compile) fails with
"Executor failed process requestId N due to the following error: ...", N being the executor's own
request id (counted per instance from 1), not Triton's. Range checks read like TLLM_CHECK's
assertion failures and name the field. The texts marked "stand-in" in the README are this
project's wording where the upstream text is not known. Pure.
"""

from __future__ import annotations

STREAMING_NOT_DECOUPLED = "Streaming is only supported if model is deployed using decoupled mode."
"""The C++ backend's answer to ``streaming=true`` on a model that is not decoupled."""
BATCH_NOT_DECOUPLED = (
    "A request with more than one sequence (batch size > 1 or num_return_sequences > 1) is only supported "
    "if model is deployed using decoupled mode."
)
CANCEL_NEEDS_ID = "A request id must be provided for request cancellation"


class ConversionError(ValueError):
    """Raised while the Triton request is converted; its text is the whole error message."""


class ExecutorError(ValueError):
    """An executor check failed; ``executor_message`` adds the request id prefix."""


def assertion_failed(what: str) -> str:
    """A TLLM_CHECK-style failure text."""
    return f"[TensorRT-LLM][ERROR] Assertion failed: {what}"


def executor_message(request_id: int, reason: str) -> str:
    return f"Executor failed process requestId {request_id} due to the following error: {reason}"


def llmapi_message(reason: str) -> str:
    return f"Error generating request: {reason}"
