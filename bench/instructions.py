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

    .venv/bin/python bench/instructions.py [--against /tmp/old-tree] [--tokens 1000] [--requests 5]

Needs ``valgrind`` (Debian's package). Instructions are not time: a cache miss costs more than an
add. The µs figures stay in ``hotpath.py`` and ``big_prompts.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
END_HEADERS = 0x4


async def _stream(requests: int, tokens: int) -> None:
    """``requests`` streams of ``tokens`` tokens through the per-token path (the child's work)."""
    import hpack
    from hotpath import _Transport, open_stream, read_stream, service_over, stream_request, token_messages

    from gateway.backend.transport.h2 import GrpcConnection
    from gateway.backend.transport.h2conn import DATA, END_STREAM, HEADERS, SETTINGS, frame

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
    for number in range(requests):
        stream, first = await open_stream(service, body, number)
        sid = max(connection._calls)
        wire = [frame(DATA, 0, sid, message) for message in messages]
        wire[0] = frame(HEADERS, END_HEADERS, sid, response_headers) + wire[0]
        wire[-1] += frame(HEADERS, END_HEADERS | END_STREAM, sid, trailers)
        text = await read_stream(connection, stream, first, wire)
        assert text.count(b"tok ") == tokens and text.endswith(b"data: [DONE]\n\n"), text[-200:]
        transport.out.clear()


def _count(tree: Path, requests: int, tokens: int) -> int:
    """Instructions of a child process that streams ``requests`` × ``tokens`` with ``tree``'s gateway."""
    with tempfile.TemporaryDirectory() as scratch:
        result = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={scratch}/out",
                sys.executable,
                __file__,
                "--child",
                str(tree),
                str(requests),
                str(tokens),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            check=True,
        )
    found = re.search(r"Collected : (\d+)", result.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{result.stderr[-2000:]}")
    return int(found[1])


def per_token(trees: list[Path], requests: int, tokens: int, jobs: int) -> dict[Path, float]:
    """Each tree's instructions per token; the valgrind runs go ``jobs`` at a time."""
    runs = [(tree, count) for tree in trees for count in (1, 1 + requests)]
    with ThreadPoolExecutor(jobs) as pool:
        totals = dict(zip(runs, pool.map(lambda run: _count(run[0], run[1], tokens), runs), strict=True))
    return {tree: (totals[tree, 1 + requests] - totals[tree, 1]) / (requests * tokens) for tree in trees}


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        tree, requests, tokens = Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
        # The tree's gateway package first: this tree's ``hotpath`` then finds it imported.
        sys.path.insert(0, str(tree))
        import gateway

        assert Path(gateway.__file__).resolve().is_relative_to(tree.resolve()), gateway.__file__
        sys.path.insert(1, str(Path(__file__).resolve().parent))
        asyncio.run(_stream(requests, tokens))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", type=Path, help="also count this tree's gateway package")
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="valgrind runs at once")
    args = parser.parse_args()
    trees = [ROOT] + ([args.against.resolve()] if args.against else [])
    counts = per_token(trees, args.requests, args.tokens, args.jobs)
    for tree, count in counts.items():
        print(f"{tree}: {count:,.0f} instructions per token")
    if args.against:
        print(f"this tree / {args.against}: {counts[ROOT] / counts[trees[1]]:.3f}")


if __name__ == "__main__":
    main()
