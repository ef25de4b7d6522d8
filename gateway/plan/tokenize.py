"""``/tokenize`` and ``/detokenize`` (vLLM's endpoints): a prompt's token ids, and ids back to text.

The ids are the ones a generation sends the backend: ``messages`` go through the chat path's own
stages (``prepare.render_chat``: checks, model, tools as the template sees them, the template), a
``prompt`` is taken as completions take it, and both are encoded by the model's tokenizer, so
``count`` equals the ``usage.prompt_tokens`` of the same chat or completions request.

One departure from vLLM, for that equality: ``add_special_tokens`` for ``messages`` defaults to
what the generation does, and a generation's prompt reaches the backend as text, which Triton's
vLLM backend tokenizes with the tokenizer's special tokens added (vLLM's own chat path leaves them
out, hence its default of false there). For models whose tokenizer adds none (tiny-llm, Qwen)
the two defaults give the same ids; sent explicitly, it is obeyed.

``model`` may be left out when the request's key may use one base model; the 400 that asks for it
names only the models the key may use (``plan.count.default_model``).

A prompt longer than the model's context is tokenized all the same (vLLM does so too): the count
tells the client by how much it is over. ``max_model_len`` is null when the model's files do not
say it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from gateway.config import Settings
from gateway.errors import InvalidRequestError
from gateway.models.catalog import ModelCatalog
from gateway.models.resolve import resolve_model
from gateway.plan.count import check_countable, default_model
from gateway.plan.prepare import render_chat
from gateway.plan.requests import ChatCompletionRequest, ChatMessage
from gateway.plan.tokenize_request import DetokenizeRequest, TokenizeRequest

CHARS_PER_TOKEN = 4
"""About how much text a token decodes to: where decoding moves off the event loop (``TokenCounter.run``)."""


@dataclass(frozen=True, slots=True)
class Tokenized:
    tokens: list[int]
    token_strs: list[str] | None
    """The tokens' vocabulary strings (``return_token_strs``), as ``convert_ids_to_tokens`` gives them."""
    max_model_len: int | None


async def tokenize(body: TokenizeRequest, catalog: ModelCatalog, settings: Settings) -> Tokenized:
    models = await catalog.models()
    model_id = default_model(body.model, models)
    if (body.prompt is None) == (body.messages is None):
        raise InvalidRequestError(
            "Send exactly one of 'prompt' (text, as /v1/completions takes it) and 'messages' (as "
            "/v1/chat/completions takes them).",
            param="messages" if body.messages is not None else "prompt",
        )
    if body.messages == []:
        raise InvalidRequestError("'messages' must not be empty", param="messages")
    if body.messages is not None:
        rendered = await render_chat(to_chat_request(body, model_id, body.messages), catalog, settings)
        model, prompt = rendered.resolved.model, rendered.prompt
    else:
        model, prompt = resolve_model(model_id, models, settings.lora_separator).model, body.prompt or ""
    check_countable(model, prompt, settings)
    add_special_tokens = body.add_special_tokens is not False
    ids = await catalog.counter.run(partial(encode, model.tokenizer, add_special_tokens), prompt, len(prompt))
    strs = [model.tokenizer.id_to_token(i) for i in ids] if body.return_token_strs else None
    return Tokenized(ids, strs, model.max_model_len)


async def detokenize(body: DetokenizeRequest, catalog: ModelCatalog, settings: Settings) -> str:
    """The text of ``tokens``, special tokens included (vLLM decodes them so too)."""
    models = await catalog.models()
    model = resolve_model(default_model(body.model, models), models, settings.lora_separator).model
    check_countable(model, "", settings)
    vocab = model.tokenizer.get_vocab_size()
    for index, token in enumerate(body.tokens):
        if token >= vocab:
            raise InvalidRequestError(f"Token id {token} is out of vocabulary", param=f"tokens.{index}")
    return await catalog.counter.run(partial(decode, model.tokenizer), body.tokens, CHARS_PER_TOKEN * len(body.tokens))


def encode(tokenizer: Any, add_special_tokens: bool, prompt: str) -> list[int]:
    """The prompt's ids, through ``encode_batch_fast`` as counts are made (without the GIL)."""
    ids: list[int] = tokenizer.encode_batch_fast([prompt], add_special_tokens=add_special_tokens)[0].ids
    return ids


def decode(tokenizer: Any, tokens: list[int]) -> str:
    """The ids' text, through ``decode_batch`` (without the GIL, where ``decode`` holds it)."""
    texts: list[str] = tokenizer.decode_batch([tokens], skip_special_tokens=False)
    return texts[0]


def to_chat_request(body: TokenizeRequest, model_id: str, messages: list[ChatMessage]) -> ChatCompletionRequest:
    """The chat request whose prompt is tokenized. ``mm_processor_kwargs`` and ``media_io_kwargs``
    have nothing to act on: image parts are checked as chat checks them, but the tokens an image
    takes are the backend's processor's to decide, and are not counted."""
    return ChatCompletionRequest(
        model=model_id,
        messages=messages,
        add_generation_prompt=body.add_generation_prompt,
        continue_final_message=body.continue_final_message,
        tools=body.tools,
        tool_choice=body.tool_choice,
        chat_template=body.chat_template,
        chat_template_kwargs=body.chat_template_kwargs,
        documents=body.documents,
    )
