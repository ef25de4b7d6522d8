"""Reasoning the client carries between turns, sealed so only this gateway can read or change it.

Clients that keep no server state send a reasoning model's thinking back on the next turn in an
opaque field: the Responses API's ``encrypted_content`` (``include: ["reasoning.encrypted_content"]``
with ``store: false``, as the Codex CLI runs) and the Messages API's thinking ``signature`` (Claude
Code, and thinking shown as ``display: "omitted"``, where the text itself is not sent). The seal is
Fernet (AES-128-CBC with HMAC-SHA256, from ``cryptography``): the blob reveals nothing and a
changed byte fails to open, so a client cannot slip text into the model's own past thoughts.

Keys: the gateway's ``reasoning_secret`` setting, comma-separated for rotation (the first seals,
every one opens). Any string works: each is stretched to a Fernet key with SHA-256. Several pods
or restarts must share the secret for a sealed blob to open on another; without one the process
draws a random key (``--workers`` share it), and a blob from elsewhere is then ignored or refused
as the API in question does.
"""

from __future__ import annotations

import base64
import hashlib
import os

import orjson
from cryptography.fernet import Fernet, InvalidToken, MultiFernet

_VERSION = 1


def _fernet(secret: str) -> Fernet:
    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(secret.encode()).digest()))


def random_secret() -> str:
    """A fresh secret for a process (and its workers) that was given none."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


class ReasoningSeal:
    """Seals and opens a model's reasoning text, bound to the model that wrote it."""

    __slots__ = ("_fernet",)

    def __init__(self, secrets: list[str]) -> None:
        if not secrets:
            raise ValueError("a reasoning seal needs at least one secret")
        self._fernet = MultiFernet([_fernet(secret) for secret in secrets])

    @classmethod
    def from_setting(cls, value: str | None) -> ReasoningSeal:
        secrets = [part.strip() for part in (value or "").split(",") if part.strip()]
        return cls(secrets or [random_secret()])

    def seal(self, text: str, model: str) -> str:
        payload = orjson.dumps({"v": _VERSION, "m": model, "t": text})
        return self._fernet.encrypt(payload).decode()

    def open(self, blob: str, model: str) -> str | None:
        """The text sealed in ``blob`` for ``model``; None when the blob is not one of this
        gateway's (another key, another server's signature, altered) or names another model."""
        try:
            payload = orjson.loads(self._fernet.decrypt(blob.encode()))
        except (InvalidToken, ValueError, TypeError):
            return None
        if not isinstance(payload, dict) or payload.get("v") != _VERSION or payload.get("m") != model:
            return None
        text = payload.get("t")
        return text if isinstance(text, str) else None
