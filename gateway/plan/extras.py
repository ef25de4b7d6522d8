"""vLLM's request extras the gateway cannot honour, refused by name. Pure.

vLLM's server takes many fields beyond OpenAI's. The request models declare every one of them
(``plan/requests.py``) so that none passes as an unknown extra and is dropped without a word: each
is honoured (sampling parameters in ``plan/sampling.py``, template variables in ``plan/chat.py``)
or, when it asks for something neither the gateway nor the backend contract can do, refused here
with a 400 whose ``param`` names it. A field at its default (or at a value that changes nothing)
is never refused: clients that write every key send them.

Why each refusal (docs/API.md has the table):

- ``use_beam_search``: the backends sample; beam search is not part of ``SamplingParams``.
- ``truncate_prompt_tokens``: vLLM cuts the prompt's *tokens*; the contract takes text, and text
  cut back from tokens is not the prompt vLLM would feed.
- ``prompt_logprobs``, ``logprob_token_ids``, ``return_token_ids``: the contract returns no
  prompt logprobs, no chosen tokens' logprobs and no token ids beside the text.
- ``add_special_tokens``: the backend tokenizes the prompt itself; the gateway cannot ask it to
  add or leave out special tokens.
- ``cache_salt``, ``kv_transfer_params``, ``ec_transfer_params``,
  ``repetition_detection``, ``thinking_token_budget``, ``watermarking``, ``stream_interval``:
  engine or scheduler options that ``sampling_parameters`` cannot carry (or carries in a shape the
  backend does not build), so asking for them would change nothing. (``priority`` is honoured:
  the gateway's own scheduler orders by it, ``plan/priority.py``.)
- ``prompt_embeds``: the contract takes text prompts.
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.errors import InvalidRequestError
from gateway.plan.requests import ChatCompletionRequest, CompletionRequest, SamplingFields

_Check = Callable[[SamplingFields], bool]

_REFUSED: tuple[tuple[str, _Check, str], ...] = (
    ("use_beam_search", lambda b: b.use_beam_search, "beam search is not supported by the backend"),
    (
        "truncate_prompt_tokens",
        lambda b: b.truncate_prompt_tokens is not None,
        "prompt truncation is not supported: the backend contract takes the prompt as text",
    ),
    (
        "prompt_logprobs",
        lambda b: b.prompt_logprobs is not None,
        "prompt logprobs are not supported: the backend returns logprobs of generated tokens only",
    ),
    (
        "logprob_token_ids",
        lambda b: bool(b.logprob_token_ids),
        "logprobs of chosen token ids are not supported: the backend returns the top logprobs only",
    ),
    (
        "return_token_ids",
        lambda b: bool(b.return_token_ids),
        "token ids are not returned: the backend contract returns text",
    ),
    (
        "add_special_tokens",
        lambda b: b.add_special_tokens is not None,
        "the backend tokenizes the prompt itself; whether it adds special tokens cannot be chosen per request",
    ),
    ("cache_salt", lambda b: b.cache_salt is not None, "prefix-cache salting is not supported by the backend"),
    ("kv_transfer_params", lambda b: bool(b.kv_transfer_params), "disaggregated serving is not supported"),
    ("ec_transfer_params", lambda b: bool(b.ec_transfer_params), "disaggregated serving is not supported"),
    (
        "repetition_detection",
        lambda b: b.repetition_detection is not None,
        "repetition detection is not supported by the backend",
    ),
    (
        "thinking_token_budget",
        lambda b: b.thinking_token_budget is not None,
        "a thinking token budget is not supported by the backend",
    ),
    ("watermarking", lambda b: bool(b.watermarking), "watermarking is not supported by the backend"),
    ("stream_interval", lambda b: b.stream_interval is not None, "stream intervals are not supported"),
)
_REFUSED_FIELDS = frozenset(name for name, _, _ in _REFUSED)
"""Their names. A field the client did not send is at its default, which none of them refuses, so
a body that sends none of them (most bodies) is not checked one by one."""


def check_extras(body: SamplingFields) -> None:
    """Refuse, by name, the first vLLM extra set to something that cannot be honoured."""
    if not _REFUSED_FIELDS.isdisjoint(body.model_fields_set):
        for name, is_set, reason in _REFUSED:
            if is_set(body):
                raise InvalidRequestError(f"'{name}' is not supported: {reason}.", param=name)
    if isinstance(body, CompletionRequest) and body.prompt_embeds is not None:
        raise InvalidRequestError(
            "'prompt_embeds' are not supported: the backend contract takes text prompts.", param="prompt_embeds"
        )
    if isinstance(body, ChatCompletionRequest):
        check_chat_extras(body)


def check_chat_extras(body: ChatCompletionRequest) -> None:
    """The chat-only extras' own rules (their rendering is ``plan/chat.py``'s)."""
    if body.continue_final_message and body.add_generation_prompt:
        # vLLM and transformers refuse the pair: a continued message takes no new assistant header.
        raise InvalidRequestError(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
            param="continue_final_message",
        )
