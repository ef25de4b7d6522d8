"""The key file: hashed keys, each with a name, the models it may use and its limits. Pure.

TOML, edited by hand::

    [[key]]
    name = "search-team"            # metrics, logs and the Responses store show this, never the key
    sha256 = ["9f86d0...", "..."]   # one hash or several (a rotation: old and new both work)
    models = ["tiny-llm"]           # omitted: every model; others are 404 as if they did not exist
    rpm = 60                        # requests per minute (omitted or 0: no limit)
    tpm = 20000                     # prompt + completion tokens per minute
    max_concurrent = 4              # requests in flight at once
    weight = 2                      # share of a busy model against other keys (default 1)
    priority = "standard"           # the default band: a number (vLLM's, lower first) or a name
    top_priority = "critical"       # the most urgent band it may ask for (default: its priority)

``python -m gateway.keys.hash`` prints the sha256 of a key read from stdin.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.priorities import STANDARD, parse_band

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_FIELDS = {"name", "sha256", "models", "rpm", "tpm", "max_concurrent", "weight", "priority", "top_priority"}


def hash_key(key: bytes | str) -> str:
    """The sha256 hex digest the key file stores for ``key``."""
    return hashlib.sha256(key.encode() if isinstance(key, str) else key).hexdigest()


@dataclass(frozen=True, slots=True)
class KeyPolicy:
    """What one key may do. A flat key (``api_keys``, ``api_key_file``) has no name, every model
    and no limits."""

    name: str | None = None
    models: frozenset[str] | None = None
    """None: every model."""
    rpm: int = 0
    tpm: int = 0
    max_concurrent: int = 0
    weight: float = 1.0
    """Its share of a busy model's tokens against the other keys waiting (``core.schedule``)."""
    priority: int = STANDARD
    """The band its requests run in when they ask for none."""
    top_priority: int | None = None
    """The most urgent band (the lowest number) it may ask for; asking more urgent runs at this.
    None: its own ``priority`` (a key cannot raise its band unless the file says so). A flat key
    (no name) is not held to it: it may ask any band, as a request to a gateway without keys
    may (``plan/priority.py``)."""

    def band(self, asked: int | None) -> int:
        """The band a request of this key runs in, having asked for ``asked`` (None: nothing)."""
        if asked is None:
            return self.priority
        top = self.priority if self.top_priority is None else self.top_priority
        return max(asked, top)

    @property
    def limited(self) -> bool:
        return bool(self.name) and (self.rpm > 0 or self.tpm > 0 or self.max_concurrent > 0)

    def allows(self, model_id: str, base: str) -> bool:
        """An entry names a model id exactly, or a base model with all its LoRA adapters."""
        models = self.models
        return models is None or model_id in models or base in models


FLAT = KeyPolicy()


class KeyFileError(ValueError):
    """The key file cannot be used; the message says where and why."""


def _count(entry: Mapping[str, object], field: str, where: str) -> int:
    value = entry.get(field, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise KeyFileError(f"{where}: {field} must be a whole number >= 0, got {value!r}")
    return value


def _band(entry: Mapping[str, object], field: str, where: str, default: int) -> int:
    if field not in entry:
        return default
    try:
        return parse_band(entry[field])
    except ValueError as exc:
        raise KeyFileError(f"{where}: {field}: {exc}") from None


def parse_key_file(text: str) -> dict[str, KeyPolicy]:
    """The policies of a key file's text, by sha256 hex. Raises ``KeyFileError``."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise KeyFileError(f"not valid TOML: {exc}") from None
    unknown = set(data) - {"key"}
    if unknown:
        raise KeyFileError(f"unknown top-level entries {sorted(unknown)}; keys are [[key]] tables")
    entries = data.get("key", [])
    if not isinstance(entries, list):
        raise KeyFileError("keys are [[key]] tables")
    table: dict[str, KeyPolicy] = {}
    names: dict[str, KeyPolicy] = {}
    for number, entry in enumerate(entries, 1):
        where = f"key #{number}"
        extra = set(entry) - _FIELDS
        if extra:
            raise KeyFileError(f"{where}: unknown fields {sorted(extra)}")
        name = entry.get("name")
        if not isinstance(name, str) or not name.strip():
            raise KeyFileError(f"{where}: a name is required")
        where = f"key {name!r}"
        hashes = entry.get("sha256")
        hashes = [hashes] if isinstance(hashes, str) else hashes
        if not isinstance(hashes, list) or not hashes:
            raise KeyFileError(f"{where}: sha256 must be a hex digest or a list of them")
        models = entry.get("models")
        if models is not None and (not isinstance(models, list) or not all(isinstance(m, str) for m in models)):
            raise KeyFileError(f"{where}: models must be a list of model ids")
        weight = entry.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight <= 1_000_000:
            raise KeyFileError(f"{where}: weight must be a number > 0 (and at most 1000000), got {weight!r}")
        priority = _band(entry, "priority", where, STANDARD)
        top = _band(entry, "top_priority", where, priority) if "top_priority" in entry else None
        if top is not None and top > priority:
            raise KeyFileError(
                f"{where}: top_priority {top} is less urgent than its own priority {priority} (lower runs first)"
            )
        policy = KeyPolicy(
            name=name,
            weight=float(weight),
            priority=priority,
            top_priority=top,
            models=None if models is None else frozenset(models),
            rpm=_count(entry, "rpm", where),
            tpm=_count(entry, "tpm", where),
            max_concurrent=_count(entry, "max_concurrent", where),
        )
        if name in names:
            raise KeyFileError(f"{where}: the name is used twice (list several hashes under one name instead)")
        names[name] = policy
        for digest in hashes:
            if not isinstance(digest, str) or not _HEX64.match(digest.lower()):
                raise KeyFileError(f"{where}: {digest!r} is not a sha256 hex digest (64 hex characters)")
            if digest.lower() in table:
                raise KeyFileError(f"{where}: a hash is listed twice")
            table[digest.lower()] = policy
    return table


class KeyRing:
    """Every key the gateway accepts: the flat keys (no policy) and the key file's, which
    ``reload`` reads again when the file changed. A file that does not parse keeps the keys
    already loaded (``reload`` raises; the caller logs why)."""

    def __init__(self, flat: Iterable[str], path: Path | None) -> None:
        self._flat = {hash_key(key): FLAT for key in flat}
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._policies: dict[str, KeyPolicy] = {}
        if path is not None:
            self.reload(force=True)

    def lookup(self, presented: bytes) -> KeyPolicy | None:
        """The policy of a presented key, None if it is not one. A dict lookup by the key's hash:
        what an attacker can time is the hash, which tells nothing about any key."""
        return self.lookup_digest(hash_key(presented))

    def lookup_digest(self, digest: str) -> KeyPolicy | None:
        """``lookup`` by the key's ``hash_key``, for a caller that keeps the digest."""
        return self._policies.get(digest) or self._flat.get(digest)

    def lookup_owner(self, owner: str) -> KeyPolicy | None:
        """The policy of whoever a stored owner names (``key:<name>`` for a named key, else a
        key's digest), for work that runs after its request (batch lines): None when that key is
        gone from the ring."""
        if owner.startswith("key:"):
            name = owner[4:]
            return next((policy for policy in self._policies.values() if policy.name == name), None)
        return self.lookup_digest(owner)

    def __len__(self) -> int:
        return len(self._flat) + len(self._policies)

    @property
    def keyed(self) -> bool:
        """Whether the gateway has API keys: any key, or a key file (which may list none yet)."""
        return bool(len(self)) or self.path is not None

    def _file_stamp(self) -> tuple[int, int, int]:
        assert self.path is not None
        stat = self.path.stat()
        return (stat.st_mtime_ns, stat.st_size, stat.st_ino)

    def reload(self, *, force: bool = False) -> bool:
        """Read the key file again if it changed (or ``force``). True when a new policy is in
        place. Raises ``OSError`` or ``KeyFileError``, keeping the old policy."""
        if self.path is None:
            return False
        stamp = self._file_stamp()
        if not force and stamp == self._stamp:
            return False
        self._stamp = stamp  # a bad file is reported once, not at every check
        self._policies = parse_key_file(self.path.read_text(encoding="utf-8"))
        return True
