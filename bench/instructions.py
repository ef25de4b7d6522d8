"""Instructions per token of the gateway's own per-token path, counted by valgrind.

On this kind of machine (a shared 2-core VM) CPU time moves 10-20 % from one run to the next, so a
cut of a few per cent on the per-token path cannot be seen in µs. Instructions can: callgrind
counts them the same in every run (±1 %). The path is ``hotpath.py``'s: a real ``GrpcConnection``
fed the bytes of a gRPC response stream, one DATA frame per token, read by the core's
``Generation`` and turned into SSE frames by the edge's ``StreamFrames``. The frames are made
here byte by byte before each request, so no HTTP/2 server runs in the counted process.

The process runs once with 1 request and once with 1 + ``--requests``; the difference divided by
the extra tokens leaves out start-up, imports and the first request's warm-up.
``--against TREE`` counts another tree's ``gateway`` package with the same harness (a ``git
archive`` of an earlier commit, say), so two figures compare code, not machines or hours.

One stream at a time never waits: its token is in before it is asked for. ``--streams N`` opens
N streams and feeds them a token each in turn, one loop callback per token, each stream read by a
task of its own, so every token is a wake-up of its stream's task, as on shared cores.
``--cache`` adds callgrind's simulated data cache misses per token (first and last level).

    .venv/bin/python bench/instructions.py [--against /tmp/old-tree] [--tokens 1000] [--requests 5]
    .venv/bin/python bench/instructions.py --streams 64 --requests 1 --tokens 300 --cache

Needs ``valgrind`` (Debian's package). Instructions are not time: a cache miss costs more than an
add. The µs figures stay in ``hotpath.py`` and ``big_prompts.py``. The child runs on uvloop when
it is installed, as the gateway does.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
END_HEADERS = 0x4
T = TypeVar("T")


def _wire(sid: int, messages: list[bytes], response_headers: bytes, trailers: bytes) -> list[bytes]:
    """One request's response as the server's bytes: one DATA frame per token, the headers with
    the first and the trailers with the last."""
    from gateway.backend.transport.h2conn import DATA, END_STREAM, HEADERS, frame

    wire = [frame(DATA, 0, sid, message) for message in messages]
    wire[0] = frame(HEADERS, END_HEADERS, sid, response_headers) + wire[0]
    wire[-1] += frame(HEADERS, END_HEADERS | END_STREAM, sid, trailers)
    return wire


async def feed_in_turn(pieces: list[T], received: Callable[[T], None]) -> None:
    """Hand ``pieces`` to ``received`` one loop callback each, as the loop's read callback would:
    the task a piece wakes takes its step before the next callback runs. (``await_levels.py``
    feeds its waiting task the same way.)"""
    loop = asyncio.get_running_loop()
    remaining = iter(pieces)
    fed = loop.create_future()

    def feed() -> None:
        piece = next(remaining, None)
        if piece is None:
            fed.set_result(None)
            return
        received(piece)
        loop.call_soon(feed)

    loop.call_soon(feed)
    await fed


async def _stream(requests: int, tokens: int, streams: int) -> None:
    """``requests`` rounds of ``streams`` streams of ``tokens`` tokens through the per-token path
    (the child's work). One stream at a time reads as ``hotpath.py`` does; several are opened
    together and fed a token each in turn, each consumed by a task of its own that runs once per
    token, as the event loop runs the gateway's streams when each token is its own wake-up."""
    import hpack
    from hotpath import _Transport, open_stream, read_stream, service_over, stream_request, token_messages

    from gateway.backend.transport.h2 import GrpcConnection
    from gateway.backend.transport.h2conn import SETTINGS, frame

    transport = _Transport()
    connection = GrpcConnection("bench:1", "http", None)
    connection.connection_made(transport)  # type: ignore[arg-type]
    connection.data_received(frame(SETTINGS, 0, 0))
    service = await service_over(connection)
    body = stream_request(tokens)
    messages = token_messages(tokens)
    # Literal header fields only (no reference to a dynamic table): the same block is valid in
    # every response.
    response_headers = hpack.Encoder().encode([(b":status", b"200"), (b"content-type", b"application/grpc")])
    trailers = hpack.Encoder().encode([(b"grpc-status", b"0")])

    async def consume(stream: Any, first: Any) -> bytes:
        out = [await first]
        async for frame_bytes in stream:
            out.append(frame_bytes)
        return b"".join(out)

    for number in range(requests):
        if streams == 1:
            stream, first = await open_stream(service, body, number)
            wire = _wire(max(connection._calls), messages, response_headers, trailers)
            texts = [await read_stream(connection, stream, first, wire)]
        else:
            opened = []
            for index in range(streams):
                stream, first = await open_stream(service, body, number * streams + index)
                opened.append((max(connection._calls), stream, first))
            wires = [_wire(sid, messages, response_headers, trailers) for sid, _, _ in opened]
            readers = [asyncio.ensure_future(consume(stream, first)) for _, stream, first in opened]
            await feed_in_turn([wire[token] for token in range(tokens) for wire in wires], connection.data_received)
            texts = list(await asyncio.gather(*readers))
        for text in texts:
            assert text.count(b"tok ") == tokens and text.endswith(b"data: [DONE]\n\n"), text[-200:]
        transport.out.clear()


EVENTS = ("Ir", "D1mr", "D1mw", "DLmr", "DLmw")
"""What is counted: instructions, and with ``--cache`` the simulated first-level and last-level
data cache misses (reads, writes)."""


def callgrind(command: list[str], cache: bool = False) -> dict[str, int]:
    """Counts of ``command`` run under callgrind (see ``EVENTS``; without ``cache``,
    instructions only). ``await_levels.py`` counts with it too."""
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={scratch}/out",
                *(["--cache-sim=yes"] if cache else []),
                *command,
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            check=True,
        )
        with open(Path(scratch, "out"), errors="replace") as out:
            events = next((line.split()[1:] for line in out if line.startswith("events:")), None)
    found = re.search(r"Collected : ([\d ]+)", result.stderr)
    if found is None or events is None:
        raise RuntimeError(f"no counts in valgrind's output:\n{result.stderr[-2000:]}")
    counts = dict(zip(events, (int(x) for x in found[1].split()), strict=False))
    return {event: counts[event] for event in EVENTS if event in counts}


def _count(tree: Path, requests: int, tokens: int, streams: int, cache: bool) -> dict[str, int]:
    """Counts of a child process that streams ``requests`` × ``streams`` × ``tokens`` with
    ``tree``'s gateway: instructions, and simulated data cache misses with ``cache``."""
    child = [sys.executable, __file__, "--child", str(tree), str(requests), str(tokens), str(streams)]
    return callgrind(child, cache)


def per_token(
    trees: list[Path], requests: int, tokens: int, jobs: int, streams: int = 1, cache: bool = False
) -> dict[Path, dict[str, float]]:
    """Each tree's counts per token (see ``EVENTS``); the valgrind runs go ``jobs`` at a time."""
    runs = [(tree, count) for tree in trees for count in (1, 1 + requests)]
    with ThreadPoolExecutor(jobs) as pool:
        totals = dict(
            zip(runs, pool.map(lambda run: _count(run[0], run[1], tokens, streams, cache), runs), strict=True)
        )
    extra = requests * streams * tokens
    return {
        tree: {event: (totals[tree, 1 + requests][event] - totals[tree, 1][event]) / extra for event in totals[tree, 1]}
        for tree in trees
    }


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--child":
        tree, requests, tokens, streams = Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
        # The tree's gateway package first: this tree's ``hotpath`` then finds it imported.
        sys.path.insert(0, str(tree))
        import gateway

        assert Path(gateway.__file__).resolve().is_relative_to(tree.resolve()), gateway.__file__
        sys.path.insert(1, str(Path(__file__).resolve().parent))
        try:  # the gateway's loop (uvicorn takes uvloop when it is installed)
            import uvloop
        except ImportError:
            asyncio.run(_stream(requests, tokens, streams))
        else:
            uvloop.run(_stream(requests, tokens, streams))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, help="also count this tree's gateway package")
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--streams", type=int, default=1, help="streams at once, fed a token each in turn")
    parser.add_argument("--cache", action="store_true", help="also simulate the data caches (slower)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="valgrind runs at once")
    args = parser.parse_args()
    trees = [ROOT] + ([args.against.resolve()] if args.against else [])
    counts = per_token(trees, args.requests, args.tokens, args.jobs, args.streams, args.cache)
    for tree, count in counts.items():
        line = f"{tree}: {count['Ir']:,.0f} instructions per token"
        if args.cache:
            line += (
                f"; data cache misses per token: first level {count['D1mr'] + count['D1mw']:,.0f}, "
                f"last level {count['DLmr'] + count['DLmw']:,.1f}"
            )
        print(line)
    if args.against:
        for event in counts[ROOT]:
            if counts[trees[1]][event]:
                print(f"this tree / {args.against}, {event}: {counts[ROOT][event] / counts[trees[1]][event]:.3f}")


if __name__ == "__main__":
    main()
