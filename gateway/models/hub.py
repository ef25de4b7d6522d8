"""Hugging Face hub ids in the local hub cache, found the way ``huggingface_hub`` finds them offline.

``model.json`` may name a hub id instead of a folder (``"model": "facebook/opt-125m"``, the vLLM
backend's own sample). vLLM then loads the tokenizer through ``huggingface_hub``, which keeps every
download in a cache laid out as::

    <cache>/models--<org>--<name>/refs/<revision>          the commit a branch or tag points at
    <cache>/models--<org>--<name>/snapshots/<commit>/...   the files of that commit (symlinks to blobs)

The layout is documented and stable (huggingface_hub's "Manage the cache" guide), so it is read
here directly rather than through ``huggingface_hub``, which is not a runtime dependency; a unit
test checks this against ``huggingface_hub.try_to_load_from_cache`` where it is installed. The
gateway never downloads: when Triton has loaded the model, vLLM has already put the files in the
cache that both share.
"""

from __future__ import annotations

import re
from pathlib import Path

_REPO_ID = re.compile(r"^(?:[\w.-]+/)?[\w.-]+$")


def is_repo_id(value: str) -> bool:
    """``name`` or ``org/name`` as the hub accepts them (no ``--`` or ``..``, no leading or
    trailing ``-``/``.`` in a part): anything else is only ever a path."""
    if not _REPO_ID.match(value) or "--" in value or ".." in value or len(value) > 96:
        return False
    return all(part and part[0] not in "-." and part[-1] not in "-." for part in value.split("/"))


def snapshot_dir(cache: Path, repo_id: str, revision: str | None = None) -> Path | None:
    """The cached snapshot of ``repo_id`` at ``revision`` (a branch, tag or commit; default
    ``main``), or None if the cache does not hold it. A branch or tag is followed through
    ``refs/``; a commit names its snapshot directly, as in ``try_to_load_from_cache``."""
    if not is_repo_id(repo_id):
        return None
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    revision = revision or "main"
    ref = repo / "refs" / revision
    if ".." not in Path(revision).parts and ref.is_file():
        try:
            revision = ref.read_text(encoding="utf-8").strip()
        except OSError:
            return None
    if not revision or "/" in revision or revision.startswith("."):
        return None  # not a snapshot name (and never a way out of the cache)
    snapshot = repo / "snapshots" / revision
    return snapshot if snapshot.is_dir() else None
