"""A Responses request's conversation: its ``input`` items, the stored chain before them, and the
chat messages they all become. Pure, apart from reading the store for the chain and for the items
an ``item_reference`` names.

Items are normalized once, when they arrive: every message gets typed content parts (``input_text``
for user, system and developer, ``output_text`` for the assistant), every item an id and a
status. The normalized items are what the store keeps (``input_items``) and what a later
``previous_response_id`` replays, together with the stored response's own ``output`` items, which
have the same shapes. The chat messages are what ``plan/chat.py`` renders, so the prompt is the
one the same conversation sent to ``/v1/chat/completions`` would get: consecutive
``function_call`` items join the assistant message before them as its ``tool_calls``, and a
``function_call_output`` is a ``tool`` message.
"""

from __future__ import annotations

import uuid
from typing import Any

from gateway.errors import InvalidRequestError
from gateway.store.base import ResponseStore, StoredResponse

ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text", "text")
"""Part types read as text whatever the role (OpenAI itself wants ``output_text`` for the
assistant and ``input_text`` for the others; both carry plain text)."""


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def item_id_of(prefix: str, response_id: str, position: str | int) -> str:
    """An item's id, as this gateway issues them: its kind, its response's id and its place there
    (``in<n>`` for the n-th input item that came without an id, the index for an output item).
    A later request that names the item (``item_reference``) finds it through the response its id
    names (``resolve_references``): no index of items in the store."""
    return f"{prefix}_{response_id.removeprefix('resp_')}_{position}"


def response_of_item(item_id: str) -> str | None:
    """The response an item id of ``item_id_of``'s names, None for any other id."""
    parts = item_id.split("_")
    return f"resp_{parts[1]}" if len(parts) == 3 and len(parts[1]) == 32 else None


def normalize_input(value: str | list[dict[str, Any]], response_id: str) -> list[dict[str, Any]]:
    """The request's ``input`` as normalized items (a string is one user message). An
    ``item_reference`` stays a reference until ``resolve_references`` replaces it."""
    if isinstance(value, str):
        return [_message_item(item_id_of("msg", response_id, "in0"), "user", [_text_part("user", value)])]
    if not value:
        raise InvalidRequestError("'input' must not be an empty array", param="input")
    items = [_normalize_item(item, f"input.{index}") for index, item in enumerate(value)]
    for index, item in enumerate(items):
        if not item["id"]:
            item["id"] = item_id_of(_ID_PREFIXES[item["type"]], response_id, f"in{index}")
    return items


_ID_PREFIXES = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}


def _normalize_item(item: dict[str, Any], where: str) -> dict[str, Any]:
    kind = item.get("type")
    if kind is None and "role" in item:
        kind = "message"  # EasyInputMessage: the type is optional
    if kind == "message":
        return _normalize_message(item, where)
    if kind == "function_call":
        call = {
            "id": _optional_id(item, where),
            "type": "function_call",
            "call_id": _string(item, "call_id", where),
            "name": _string(item, "name", where),
            "arguments": _string(item, "arguments", where),
            "status": "completed",
        }
        if item.get("namespace") is not None:  # a function of a namespace tool
            call["namespace"] = _string(item, "namespace", where)
        return call
    if kind == "function_call_output":
        return {
            "id": _optional_id(item, where),
            "type": "function_call_output",
            "call_id": _string(item, "call_id", where),
            "output": _output_text(item.get("output"), f"{where}.output"),
            "status": "completed",
        }
    if kind == "item_reference":
        reference = _string(item, "id", where)
        if not reference:  # names nothing; and an empty id is what gets an id of ours
            raise InvalidRequestError("an item_reference item needs a non-empty 'id'", param=f"{where}.id")
        return {"type": "item_reference", "id": reference}
    if kind == "reasoning":
        reasoning = {
            "id": _optional_id(item, where),
            "type": "reasoning",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": _reasoning_text(item, where)}],
            "status": "completed",
        }
        if item.get("encrypted_content") is not None:  # opened by ``responses.open_sealed``
            reasoning["encrypted_content"] = _string(item, "encrypted_content", where)
        return reasoning
    raise InvalidRequestError(
        f"input items of type {kind!r} are not supported: use message, function_call, function_call_output, "
        "reasoning and item_reference items",
        param=f"{where}.type",
    )


def _reasoning_text(item: dict[str, Any], where: str) -> str:
    """A reasoning item's text: its ``reasoning_text`` parts, else its summary's text parts."""
    for key in ("content", "summary"):
        parts = item.get(key)
        if parts is None:
            continue
        texts = isinstance(parts, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in parts)
        if not texts:
            raise InvalidRequestError(f"{key} must be a list of parts with text", param=f"{where}.{key}")
        if parts:
            return "\n".join(part["text"] for part in parts)
    return ""


def _normalize_message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ROLES:
        raise InvalidRequestError(f"invalid role {role!r}: use one of {', '.join(ROLES)}", param=f"{where}.role")
    content = item.get("content")
    if isinstance(content, str):
        parts = [_text_part(role, content)]
    elif isinstance(content, list):
        parts = [_normalize_part(role, part, f"{where}.content.{index}") for index, part in enumerate(content)]
    else:
        raise InvalidRequestError("a message's content must be a string or a list of parts", param=f"{where}.content")
    return _message_item(_optional_id(item, where), role, parts)


def _normalize_part(role: str, part: Any, where: str) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in TEXT_PARTS:
        text = part.get("text")
        if not isinstance(text, str):
            raise InvalidRequestError("a text part needs a 'text' string", param=f"{where}.text")
        return _text_part(role, text)
    if kind == "refusal" and isinstance(part.get("refusal"), str):
        return {"type": "refusal", "refusal": part["refusal"]}
    if kind == "input_image":
        return _image_part(part, where)
    raise InvalidRequestError(
        f"content parts of type {kind!r} are not supported: send text and images", param=f"{where}.type"
    )


def _image_part(part: dict[str, Any], where: str) -> dict[str, Any]:
    """OpenAI's ``input_image``: an ``image_url`` (a data: or http(s) URL); a ``file_id`` names
    the Files API, which the gateway does not have."""
    url = part.get("image_url")
    if not isinstance(url, str) or not url:
        missing = "file_id images are not supported" if part.get("file_id") else "an input_image needs an 'image_url'"
        raise InvalidRequestError(f"{missing}; send the image as a data: or http(s) URL", param=f"{where}.image_url")
    return {"type": "input_image", "image_url": url, "detail": part.get("detail") or "auto", "file_id": None}


def _text_part(role: str, text: str) -> dict[str, Any]:
    if role == "assistant":
        return {"type": "output_text", "text": text, "annotations": []}
    return {"type": "input_text", "text": text}


def _message_item(item_id: str | None, role: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": item_id, "type": "message", "role": role, "content": parts, "status": "completed"}


def _optional_id(item: dict[str, Any], where: str) -> str | None:
    value = item.get("id")
    if value is not None and not isinstance(value, str):
        raise InvalidRequestError("an item's 'id' must be a string", param=f"{where}.id")
    return value or None


def _string(item: dict[str, Any], name: str, where: str) -> str:
    value = item.get(name)
    if not isinstance(value, str):
        raise InvalidRequestError(f"a {item.get('type')} item needs a '{name}' string", param=f"{where}.{name}")
    return value


def _output_text(value: Any, where: str) -> str:
    """A function call's output: a string, or text parts (joined as message parts are)."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(_normalize_part("user", part, f"{where}.{index}")["text"] for index, part in enumerate(value))
    raise InvalidRequestError("a function_call_output needs an 'output' string or text parts", param=where)


def history_items(chain: list[StoredResponse]) -> list[dict[str, Any]]:
    """``load_chain``'s responses (newest first) as conversation items, oldest first."""
    items: list[dict[str, Any]] = []
    for stored in reversed(chain):
        items.extend(stored.input_items)
        items.extend(stored.response.get("output") or ())
    return items


async def load_chain(
    store: ResponseStore | None, previous_id: str | None, owner: str, max_depth: int
) -> list[StoredResponse]:
    """The stored responses this one continues, newest first (the last is the conversation's root).

    A response missing from the chain (never stored, deleted, expired, another key's) is a 400, as
    OpenAI answers ``previous_response_not_found``: a conversation silently cut short would be
    answered from the wrong context. ``max_depth`` bounds the walk (each response adds at least one
    message, so a longer chain would be refused for its message count anyway).
    """
    if previous_id is None:
        return []
    if store is None:
        raise InvalidRequestError(
            "previous_response_id needs stored responses, and storing responses is turned off on this gateway",
            param="previous_response_id",
        )
    chain: list[StoredResponse] = []
    next_id: str | None = previous_id
    while next_id is not None:
        if len(chain) >= max_depth:
            raise InvalidRequestError(
                f"The conversation chains more than {max_depth} responses; this gateway allows at most {max_depth}.",
                param="previous_response_id",
            )
        stored = await store.get(next_id, owner)
        if stored is None:
            within = "" if next_id == previous_id else f" (earlier in the conversation of '{previous_id}')"
            raise InvalidRequestError(
                f"Previous response with id '{next_id}' not found{within}.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        chain.append(stored)
        next_id = stored.previous_response_id
    return chain


async def resolve_references(
    items: list[dict[str, Any]], history: list[dict[str, Any]], store: ResponseStore | None, owner: str
) -> list[dict[str, Any]]:
    """``items`` with each ``item_reference`` replaced by the item it names: one of the stored
    conversation's (``history``), else one of the response its id names, read for this API key
    (``item_id_of``). An id no stored response of this key holds is a 400 naming it, as is any
    reference with the store turned off."""
    if not any(item["type"] == "item_reference" for item in items):
        return items
    known = {item["id"]: item for item in history}
    resolved = []
    for index, item in enumerate(items):
        if item["type"] == "item_reference":
            item = known.get(item["id"]) or await _stored_item(item["id"], store, owner, f"input.{index}.id")
        resolved.append(item)
    return resolved


async def _stored_item(item_id: str, store: ResponseStore | None, owner: str, where: str) -> dict[str, Any]:
    if store is None:
        raise InvalidRequestError(
            f"input item references need stored responses, and storing responses is turned off on this gateway: "
            f"send the item '{item_id}' itself",
            param=where,
        )
    response_id = response_of_item(item_id)
    stored = await store.get(response_id, owner) if response_id is not None else None
    for candidate in (*stored.input_items, *(stored.response.get("output") or ())) if stored is not None else ():
        if candidate.get("id") == item_id:  # stored input items are already resolved
            return dict(candidate)
    raise InvalidRequestError(f"Item with id '{item_id}' not found.", param=where)


def to_chat_messages(items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """Normalized items → chat messages (see the module's docstring), and for each message the
    position of the item that began it (so an error about a message can name the item)."""
    messages: list[dict[str, Any]] = []
    sources: list[int] = []
    reasoning: str | None = None
    """A reasoning item's text, for the assistant turn that follows it (interleaved thinking)."""
    for position, item in enumerate(items):
        kind = item["type"]
        if kind == "reasoning":
            reasoning = _joined_text(item["content"])
            continue
        if kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
                continue
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        elif kind == "function_call_output":
            message = {"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]}
        else:
            message = {"role": item["role"], "content": _message_content(item["content"])}
        if reasoning is not None and message["role"] == "assistant":
            message["reasoning"], reasoning = reasoning, None
        messages.append(message)
        sources.append(position)
    return messages, sources


def _message_content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """A message's parts as chat content: the joined text, or, with an image among them, chat's
    parts one for one (so a refusal names the item's own part)."""
    if not any(part["type"] == "input_image" for part in parts):
        return _joined_text(parts)
    return [
        {"type": "image_url", "image_url": {"url": part["image_url"]}}
        if part["type"] == "input_image"
        else {"type": "text", "text": part["text"] if "text" in part else part.get("refusal", "")}
        for part in parts
    ]


def _joined_text(parts: list[dict[str, Any]]) -> str:
    """Text parts joined with newlines, as chat joins them (``plan/chat.message_text``)."""
    return "\n".join(part["text"] if "text" in part else part.get("refusal", "") for part in parts)
