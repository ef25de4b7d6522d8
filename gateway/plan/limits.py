"""The gateway's own limits on a request: every 4xx about size or shape that is policy rather
than OpenAI's schema. Pure: the caller passes the configured values."""

from __future__ import annotations

from gateway.errors import InvalidRequestError
from gateway.plan.requests import ChatCompletionRequest, SamplingFields


def check_sampling_limits(body: SamplingFields, *, max_n: int) -> None:
    if body.n > max_n:
        raise InvalidRequestError(f"n is {body.n}; this gateway allows at most {max_n}.", param="n")
    if body.stream_options is not None and not body.stream:
        raise InvalidRequestError("stream_options is only allowed when stream is true", param="stream_options")


def check_chat_limits(body: ChatCompletionRequest, *, max_n: int, max_messages: int) -> None:
    check_sampling_limits(body, max_n=max_n)
    if len(body.messages) > max_messages:
        raise InvalidRequestError(
            f"{len(body.messages)} messages; this gateway allows at most {max_messages}.", param="messages"
        )
    if body.top_logprobs is not None and not body.logprobs:
        raise InvalidRequestError("top_logprobs requires logprobs to be true", param="top_logprobs")
