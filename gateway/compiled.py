"""The per-token modules compiled to C by mypyc, and the guard that keeps a stale build out.

Every token passes through the same dozen modules: the HTTP/2 frames and the call's messages,
the vLLM reading, assembly, the generation loop, the SSE encoding. At one stream every token is a
wake-up of its own, and in CPython that path cost ~6 µs of bytecode per token in one process
(`bench/hotpath.py`), a third of the gateway's user CPU per token. mypyc compiles these modules
as they are, from their type hints, into one C extension (``scripts/compile.py``; the install
does it when a C compiler is there): ~3 µs. Nothing else changes; the Python sources stay the
truth, and the gateway runs them as they are when nothing was compiled.

An extension module next to its source takes precedence on import, so a source edited after the
build would silently run as its old compiled self. ``guard`` (run by ``gateway/__init__``, before
any of them is imported) compares every compiled module's source with the hash the build recorded
(``_compiled.json``); if one differs, one extension is missing, or the build compiled another list
of modules, all of them are imported from their sources instead: the modules call into each
other's compiled classes directly, so a mix of old and new would not hold together. ``STATE``
says which it was (the startup log shows it).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

COMPILED_MODULES = (
    "gateway.backend.transport.base",
    "gateway.backend.transport.h2conn",
    "gateway.backend.transport.h2call",
    "gateway.backend.transport.aio",
    "gateway.backend.contracts.tensors",
    "gateway.backend.contracts.vllm",
    "gateway.backend.stream_messages",
    "gateway.core.assemble",
    "gateway.core.generate",
    "gateway.openai.encode",
    "gateway.http.streaming",
    "gateway.core.outcome",
    "gateway.metrics",
)
"""What ``scripts/compile.py`` compiles: the per-token path (``aio``: its call is a ``BatchedCall``,
and a compiled class cannot be subclassed by an interpreted one; ``outcome`` and ``metrics``: the
inter-token gap each batch records). Not ``http.sse``: its body writer is a coroutine defined in a
method, which compiled has no ``__qualname__`` (its unit tests failed on asyncio asking for it)."""

GROUP = "gateway._native"
"""The shared library every compiled module links to: ``gateway/_native__mypyc*.so``."""
SHARED_LIBRARY = GROUP.rpartition(".")[2] + "__mypyc"
"""Its file name in the package, before the extension suffix (mypyc's ``<group>__mypyc``)."""

PACKAGE_DIR = Path(__file__).resolve().parent
STAMP = PACKAGE_DIR / "_compiled.json"
"""Written by the build: the SHA-256 of each compiled module's source and the extension suffix."""

STATE = "interpreted"
"""``compiled``, ``interpreted`` (nothing was built), or ``interpreted (stale build: <why>)``."""


def source_path(module: str) -> Path:
    return PACKAGE_DIR.parent / (module.replace(".", "/") + ".py")


def source_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def extension_path(module: str, suffix: str) -> Path:
    return source_path(module).with_suffix(suffix)


_built: frozenset[str] = frozenset()
"""The modules the build on disk says it compiled (they may differ from ``COMPILED_MODULES``)."""


def _stale_reason() -> str | None:
    """Why the build on disk cannot be used, or None when it can (or when there is none)."""
    global _built
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    if not STAMP.exists() and not any(extension_path(m, suffix).exists() for m in COMPILED_MODULES):
        return None
    try:
        stamp = json.loads(STAMP.read_text())
        hashes: dict[str, str] = stamp["sources"]
        _built = frozenset(hashes)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "no readable record of the build (scripts/compile.py writes gateway/_compiled.json)"
    if _built != frozenset(COMPILED_MODULES):
        return "it compiled another list of modules"
    if stamp.get("suffix") != suffix:
        return f"built for {stamp.get('suffix')}, this interpreter loads {suffix}"
    if not (PACKAGE_DIR / (SHARED_LIBRARY + suffix)).exists():
        return f"its shared library {GROUP}__mypyc is missing"
    for module in COMPILED_MODULES:
        if not extension_path(module, suffix).exists():
            return f"{module} has no extension"
        if hashes.get(module) != source_hash(source_path(module)):
            return f"{module} changed since the build"
    return None


class _SourcesFirst:
    """A meta path finder that imports the compiled modules from their ``.py`` files."""

    @staticmethod
    def find_spec(name: str, path: Sequence[str] | None = None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name not in COMPILED_MODULES and name not in _built:
            return None
        return importlib.util.spec_from_file_location(name, source_path(name))


def guard() -> None:
    """Decide ``STATE``; on a stale build, import the compiled modules from their sources."""
    global STATE
    reason = _stale_reason()
    if reason is None:  # no build at all, or one whose record (hence every extension) checked out
        STATE = "compiled" if STAMP.exists() else "interpreted"
        return
    STATE = f"interpreted (stale build: {reason}; run scripts/compile.py)"
    if not any(isinstance(finder, _SourcesFirst) for finder in sys.meta_path):
        sys.meta_path.insert(0, _SourcesFirst())


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from its extension (what the tests check after a build)."""
    return str(getattr(module, "__file__", "")).endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
