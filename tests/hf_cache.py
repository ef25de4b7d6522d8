"""Test helper: a Hugging Face hub cache laid out exactly as ``huggingface_hub`` leaves it after a
download, built from local files (nothing is downloaded in tests)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path


def put_in_hub_cache(cache: Path, repo_id: str, source: Path, ref: str = "main", commit: str | None = None) -> Path:
    """Put ``source``'s files into ``cache`` as revision ``commit`` of ``repo_id``, with ``refs/<ref>``
    pointing at it; returns the snapshot directory.

    Layout (huggingface_hub's cache guide): content-addressed ``blobs/``, ``snapshots/<commit>/``
    holding relative symlinks to them, and ``refs/<ref>`` holding the commit hash (no newline).
    """
    commit = commit or hashlib.sha1(f"{repo_id}@{ref}".encode()).hexdigest()
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.iterdir()):
        if not path.is_file():
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        blob = repo / "blobs" / digest
        if not blob.exists():
            shutil.copyfile(path, blob)
        (snapshot / path.name).symlink_to(Path("..") / ".." / "blobs" / digest)
    (repo / "refs" / ref).write_text(commit)
    return snapshot
