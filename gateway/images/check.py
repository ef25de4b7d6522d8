"""An image's bytes checked before anything reaches Triton: the format named by the file's own
header against an allowed list (only those formats' readers are tried: a Pillow reader for a format
nobody allowed never sees the bytes), a byte cap, a pixel cap read from the header *before* the pixels
are decoded (a small file can declare a huge canvas: a decompression bomb), then a full decode
so that a truncated or corrupt file is refused here, as a 400 naming its part, and not later as
an engine error. Pure apart from Pillow; CPU-bound, so planning runs it off the event loop.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import lru_cache

from PIL import Image, UnidentifiedImageError

from gateway.errors import InvalidRequestError


@dataclass(frozen=True, slots=True)
class ImageRules:
    """What an image may be (from the settings)."""

    formats: frozenset[str]
    """Pillow format names, upper case (``PNG``, ``JPEG``, ``WEBP``, ``GIF``...)."""
    max_bytes: int
    max_pixels: int


@dataclass(frozen=True, slots=True)
class CheckedImage:
    """An image that passed: its bytes unchanged, and what its header said."""

    data: bytes
    format: str
    width: int
    height: int


@lru_cache(maxsize=8)
def readers(formats: frozenset[str]) -> tuple[str, ...]:
    """The allowed formats Pillow has a reader for, in a fixed order: what ``Image.open`` may try
    (it raises ``KeyError`` for a name it does not know)."""
    Image.init()
    return tuple(sorted(name for name in formats if name in Image.OPEN))


def check_image(data: bytes, rules: ImageRules, param: str) -> CheckedImage:
    """``data`` as an image the rules allow, or an ``InvalidRequestError`` naming ``param``."""
    if len(data) > rules.max_bytes:
        raise InvalidRequestError(f"the image is {len(data)} bytes; at most {rules.max_bytes} are allowed", param=param)
    allowed = readers(rules.formats)
    if not allowed:
        raise InvalidRequestError("no image format this gateway reads is allowed (setting image_formats)", param=param)
    try:
        image = Image.open(io.BytesIO(data), formats=allowed)  # reads the header only
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):  # Pillow's own guard
        raise InvalidRequestError(
            f"the image declares too many pixels; at most {rules.max_pixels} are allowed", param=param
        ) from None
    except (UnidentifiedImageError, OSError, ValueError):
        raise InvalidRequestError(
            f"the content is not an image in a format this gateway takes ({', '.join(allowed)})", param=param
        ) from None
    with image:
        kind = (image.format or "").upper()
        if kind not in rules.formats:  # a reader may name a variant (JPEG's reads MPO files)
            raise InvalidRequestError(
                f"images in {kind or 'this'} format are not allowed; use {', '.join(allowed)}", param=param
            )
        width, height = image.size
        if width * height > rules.max_pixels:
            raise InvalidRequestError(
                f"the image is {width}x{height} pixels; at most {rules.max_pixels} pixels are allowed", param=param
            )
        try:
            image.load()
        except (OSError, ValueError, SyntaxError) as exc:
            raise InvalidRequestError(f"the image cannot be decoded: {exc}", param=param) from None
    return CheckedImage(data, kind, width, height)
