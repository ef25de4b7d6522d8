"""Images in chat messages: found, refused or loaded, before the prompt is rendered.

An ``image_url`` part holds a ``data:`` URL (always taken) or an ``http(s)`` URL (fetched only
where the operator allows it: ``gateway.images.fetch``). Every image is decoded and checked
(``gateway.images.check``) off the event loop, and each refusal is a 400 naming its part
(``messages.1.content.0``). What comes out is the images' files in base64, in the order the
prompt refers to them: the backend contract sends them as Triton's ``image`` input.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Mapping
from typing import Any

from gateway.config import Settings
from gateway.errors import InvalidRequestError
from gateway.images.check import ImageRules, check_image
from gateway.images.fetch import ImageFetcher
from gateway.models.catalog import ServedModel
from gateway.plan.requests import ChatCompletionRequest, OtherContentPart

IMAGE_PART = "image_url"


def image_url_of(part: OtherContentPart) -> Any:
    """The URL of an ``image_url`` part: OpenAI's ``{"url": ...}``, or a bare string as some
    clients send it."""
    value = getattr(part, IMAGE_PART, None)
    return value.get("url") if isinstance(value, Mapping) else value


def find_images(body: ChatCompletionRequest) -> list[tuple[str, OtherContentPart]]:
    """Every image part with its param name, in message order."""
    found = []
    for index, message in enumerate(body.messages):
        if isinstance(message.content, list):
            for position, part in enumerate(message.content):
                if isinstance(part, OtherContentPart) and part.type == IMAGE_PART:
                    found.append((f"messages.{index}.content.{position}", part))
    return found


def image_parts(
    body: ChatCompletionRequest, model: ServedModel, settings: Settings
) -> list[tuple[str, OtherContentPart]]:
    """The request's image parts (where each is, the part), refused where the model takes no
    images or more than allowed: the checks that need no image read, which counting makes too."""
    found = find_images(body)
    if not found:
        return found
    if not model.vision or model.trtllm:  # no TensorRT-LLM contract here carries images
        raise InvalidRequestError(
            f"the model '{model.name}' does not take images (no 'image' input in its Triton config; "
            "model_files' vision setting)",
            param=found[0][0],
        )
    if len(found) > settings.max_images_per_request:
        raise InvalidRequestError(
            f"at most {settings.max_images_per_request} images are allowed in one request",
            param=found[settings.max_images_per_request][0],
        )
    return found


async def load_images(
    found: list[tuple[str, OtherContentPart]], settings: Settings, fetcher: ImageFetcher | None
) -> tuple[str, ...]:
    """The image parts ``image_parts`` found, as base64 files, each checked; () when there are none.
    They load at once; the first to fail is the answer, and the others are cancelled and waited
    for, so no fetch outlives the request (a check already on a thread finishes there, unread)."""
    if not found:
        return ()
    rules = ImageRules(frozenset(settings.image_formats), settings.image_max_bytes, settings.image_max_pixels)
    tasks = [asyncio.ensure_future(_load(image_url_of(part), param, rules, fetcher)) for param, part in found]
    try:
        return tuple(await asyncio.gather(*tasks))
    except BaseException:  # the first refusal (or the request's cancellation) ends every other load
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _load(url: Any, param: str, rules: ImageRules, fetcher: ImageFetcher | None) -> str:
    if not isinstance(url, str) or not url:
        raise InvalidRequestError("an image_url part needs an 'image_url' object with a 'url' string", param=param)
    if url[:5].lower() == "data:":
        return await asyncio.to_thread(_data_url_image, url, rules, param)
    if fetcher is None:
        raise InvalidRequestError(
            "image URLs are not fetched by this gateway (setting image_fetch_hosts); send the image as a data: URL",
            param=param,
        )
    data = await fetcher.fetch(url, param)
    await asyncio.to_thread(check_image, data, rules, param)
    return base64.b64encode(data).decode("ascii")


def _data_url_image(url: str, rules: ImageRules, param: str) -> str:
    """A ``data:[<type>];base64,<data>`` URL's image, checked; its base64 text as sent (once
    validated, it is what Triton decodes: no second encoding)."""
    head, comma, payload = url.partition(",")
    if not comma or not head.lower().endswith(";base64"):
        raise InvalidRequestError("an image data: URL must be base64 ('data:image/png;base64,...')", param=param)
    text = "".join(payload.split())
    if len(text) * 3 // 4 > rules.max_bytes + 2:
        raise InvalidRequestError(
            f"the image is about {len(text) * 3 // 4} bytes; at most {rules.max_bytes} are allowed", param=param
        )
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequestError("the image data: URL is not valid base64", param=param) from None
    check_image(data, rules, param)
    return text
