"""Instructions per token and per request, counted by valgrind, for ``micro --instructions``.

Why instructions: CPU time on a shared VM moves ±20 % between runs, and this VM exposes no
hardware counters (``perf stat -e instructions:u`` says ``<not supported>``). Valgrind runs the
program on its own synthetic CPU and counts every guest instruction it executes, whatever else
the machine does, so the same work gives (nearly) the same count run after run.

How: the measuring process (``micro_worker.py``, ``"mode": "instructions"``) runs under
``valgrind --tool=callgrind --instr-atstart=no``: imports and the apps' start-up run
uninstrumented, at a few times native speed. Callgrind's client requests (``callgrind.h``
macros, in a tiny C library built here with the system's compiler and loaded with ctypes) start
instrumentation once the apps serve, zero the counters before each batch of requests and dump
them after it, each dump named ``<feature>|short`` or ``<feature>|long``. Per token:
(long − short) / (requests × (tokens − 1)); per request: short / requests. ``--separate-threads
=yes`` keeps each thread's counts apart and a dump holds the calling thread's, so the figures
are the event loop thread's, as the time figures are.

Under valgrind the app runs ~50× slower, so ``firehose``'s tokens would pile up and be read
several per wake-up, which changes the work per token; the model is ``scripted``, its responses
``delay`` seconds apart, so that every token is its own wake-up.

This module is pure apart from ``build_library`` (a compiler) and ``read_dumps`` (files).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

HEADER = Path("/usr/include/valgrind/callgrind.h")

LIBRARY_SOURCE = """\
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void cg_zero(void) { CALLGRIND_ZERO_STATS; }
void cg_dump(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }
"""
"""Callgrind's client requests are inline machine code in macros, so C is the way to issue them;
outside valgrind each is a few no-op instructions."""

OUT_PREFIX = "callgrind.out"

REPEAT_TOLERANCE = 0.01
"""How far one tree's counts moved between runs when measured (docs/PERFORMANCE.md): a smaller
change is within noise."""


def unavailable() -> str | None:
    """Why instructions cannot be counted here, or None when they can."""
    if shutil.which("valgrind") is None:
        return "valgrind is not installed"
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        return "no C compiler (cc) to build callgrind's client requests"
    if not HEADER.is_file():
        return f"{HEADER} is missing (valgrind's development headers)"
    return None


def build_library(workdir: Path) -> Path:
    """The client-request library, compiled into ``workdir``."""
    source = workdir / "callgrind_requests.c"
    library = workdir / "callgrind_requests.so"
    source.write_text(LIBRARY_SOURCE)
    compiler = shutil.which("cc") or shutil.which("gcc") or "cc"
    subprocess.run(  # noqa: S603 - the system's compiler on our source
        [compiler, "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], check=True, capture_output=True
    )
    return library


def valgrind_command(outdir: Path) -> list[str]:
    """The prefix that runs a process under callgrind, instrumenting nothing until asked."""
    return [
        "valgrind",
        "--quiet",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--separate-threads=yes",
        "--dump-line=no",
        f"--callgrind-out-file={outdir}/{OUT_PREFIX}.%p",
    ]


def parse_dump(text: str) -> tuple[str, int, int] | None:
    """A callgrind output file's (dump name, thread, instructions), or None for a dump that no
    client request named (the one at exit)."""
    name = None
    thread = 1
    for line in text.splitlines():
        if line.startswith("thread: "):
            thread = int(line.removeprefix("thread: "))
        elif line.startswith("desc: Trigger: Client Request: "):
            name = line.removeprefix("desc: Trigger: Client Request: ").strip()
        elif line.startswith("summary: ") and name is not None:
            return name, thread, int(line.removeprefix("summary: "))
    return None


def read_dumps(outdir: Path) -> dict[str, int]:
    """Every named dump in ``outdir``: its instructions (the thread that asked for it)."""
    out: dict[str, int] = {}
    for path in sorted(outdir.glob(f"{OUT_PREFIX}.*")):
        parsed = parse_dump(path.read_text(errors="replace"))
        if parsed is not None:
            name, _, count = parsed
            out[name] = out.get(name, 0) + count
    return out


@dataclass(frozen=True, slots=True)
class Counts:
    """One feature's instructions, event loop thread."""

    per_token: float
    per_request: float


def per_feature(dumps: Mapping[str, int], names: Sequence[str], requests: int, tokens: int) -> dict[str, Counts]:
    """Each feature's counts from its two dumps (``<feature>|short``, ``<feature>|long``), for the
    features whose both dumps are named in ``names`` (the worker lists only checked batches)."""
    out = {}
    for name in dict.fromkeys(n.rsplit("|", 1)[0] for n in names):
        short, long = dumps.get(f"{name}|short"), dumps.get(f"{name}|long")
        if short is None or long is None or f"{name}|short" not in names or f"{name}|long" not in names:
            continue
        out[name] = Counts((long - short) / (requests * (tokens - 1)), short / requests)
    return out
