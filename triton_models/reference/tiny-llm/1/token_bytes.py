"""Map token ids to the raw bytes they stand for, through the byte-level BPE alphabet.

Why: streaming sends each token's raw bytes, not decoded text, because a byte-level token may hold
only part of a multi-byte UTF-8 character; decoding per token would turn it into U+FFFD and lose it.
Byte-level BPE writes every byte as one printable unicode character (the GPT-2 scheme: printable
Latin-1 bytes stand for themselves, the other 68 bytes are shifted to code points 256 and up); this
module inverts that table. Added (special) tokens are not byte-encoded: their bytes are their UTF-8
content.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache


@lru_cache(maxsize=1)
def byte_alphabet() -> dict[int, str]:
    """byte value -> the character byte-level BPE uses for it."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    mapping = {byte: chr(byte) for byte in printable}
    shifted = 0
    for byte in range(256):
        if byte not in mapping:
            mapping[byte] = chr(256 + shifted)
            shifted += 1
    return mapping


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """The inverse of :func:`byte_alphabet`."""
    return {char: byte for byte, char in byte_alphabet().items()}


def token_to_bytes(token: str) -> bytes:
    """Bytes of one byte-level token string (e.g. ``'Ġcaf' -> b' caf'``)."""
    decoder = byte_decoder()
    try:
        return bytes(decoder[char] for char in token)
    except KeyError as exc:
        raise ValueError(f"token {token!r} is not in the byte-level alphabet") from exc


def build_token_bytes(vocab: Mapping[str, int], added_tokens: Iterable[str], vocab_size: int) -> list[bytes]:
    """A list indexed by token id: the raw bytes of every token of the vocabulary.

    ``vocab`` is the tokenizer's full token -> id map, ``added_tokens`` the contents of its added
    (special) tokens. Ids the tokenizer does not use (if the model's vocabulary is larger) map to b"".
    """
    added = set(added_tokens)
    table = [b""] * vocab_size
    for token, token_id in vocab.items():
        if token_id < vocab_size:
            table[token_id] = token.encode("utf-8") if token in added else token_to_bytes(token)
    return table
