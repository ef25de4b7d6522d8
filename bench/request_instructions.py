"""Instructions per request of the running gateway on a real Triton, counted by valgrind: the
per-request path with nothing left out, and a figure this box's noise cannot move.

At c = 1 the TTFT the gateway adds over the bare relay (``relay_floor.py``) is its per-request
Python, which runs about three times slower after a long stream or a pause than hot
(PERFORMANCE, "Fourteenth session"). ``request_path.py`` times that path in one process with a
backend that answers at once; ``ttft_ab.py`` times it end to end, where the box moves a median by
a fraction of a millisecond from one run to the next. Here each side runs as a real server under
callgrind (uvicorn, the middlewares, planning, the HTTP/2 call to Triton, the first response's
parse, assembly, the SSE bytes), on one Triton, and answers the same requests one at a time over
one keep-alive connection. After ``--warmup`` requests the counters are zeroed, ``--requests``
requests run, and the counts are dumped: the instructions the whole process ran for them (every
thread), divided by their number. The same tree counted within 1-4 % from run to run (a timer or
the catalog's refresh may fall in the window).

``--against TREE`` counts another tree's gateway too (a ``git archive`` of the commit before a
change); ``--relay`` adds the bare relay, which does per request only what any relay must.

    .venv/bin/python bench/request_instructions.py --relay
    .venv/bin/python bench/request_instructions.py --against /tmp/base --endpoints chat

Needs ``valgrind`` (Debian's package). Instructions are not time: a cache miss costs more than an
add, and the path's cold cost on this box is about its footprint. They say what a change cut.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from common import (  # noqa: E402
    REFERENCE_REPOSITORY,
    RELAY_PROGRAM,
    TEST_REPOSITORY,
    Gateway,
    log,
    request_prompt,
    start_gateway,
    start_triton,
)
from ttft_ab import PATHS, Client, between_marks, http_request  # noqa: E402

_SUMMARY = re.compile(rb"^(?:summary|totals): (\d+)", re.MULTILINE)


def callgrind_control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True)  # noqa: S603, S607


def dumped_instructions(directory: Path, stem: str) -> int:
    """The instructions of the newest dump callgrind wrote for ``stem`` (``stem.1``, ``stem.2``,
    ...: one per ``callgrind_control -d``)."""
    dumps = sorted(directory.glob(f"{stem}.[0-9]*"), key=lambda path: int(path.suffix[1:]))
    match = _SUMMARY.search(dumps[-1].read_bytes())
    if match is None:
        raise RuntimeError(f"no instruction count in {dumps[-1]}")
    return int(match.group(1))


async def count(server: Gateway, work: Path, stem: str, args: argparse.Namespace) -> dict[str, float]:
    """Instructions per request, per endpoint, of one server already running under callgrind."""
    prompt = request_prompt(args.prompt_bytes)
    client = Client(*await asyncio.open_connection("127.0.0.1", server.port))
    figures: dict[str, float] = {}
    try:
        for endpoint in args.endpoints.split(","):
            await between_marks(
                client,
                http_request(PATHS[endpoint], prompt, args.tokens),
                warmup=args.warmup,
                requests=args.requests,
                start=lambda: callgrind_control("-z", str(server.pid)),
                end=lambda: callgrind_control("-d", str(server.pid)),
            )
            figures[endpoint] = dumped_instructions(work, stem) / args.requests
    finally:
        client.writer.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--against", type=Path, default=None, help="also count this tree's gateway ('before')")
    parser.add_argument("--gateway-root", type=Path, default=BENCH.parent, help="the tree whose gateway is 'after'")
    parser.add_argument("--relay", action="store_true", help="also count relay_floor.py, the bare relay")
    parser.add_argument("--requests", type=int, default=30, help="counted requests per side and endpoint")
    parser.add_argument("--warmup", type=int, default=10, help="requests per side and endpoint before counting")
    parser.add_argument("--endpoints", default="completions,chat", help="completions and/or chat")
    parser.add_argument("--tokens", type=int, default=1, help="tokens per request")
    parser.add_argument("--prompt-bytes", type=int, default=10000, help="prompt size")
    args = parser.parse_args()
    sides: dict[str, Path | None] = {"after": args.gateway_root.resolve()}
    if args.against is not None:
        sides = {"before": args.against.resolve(), **sides}
    if args.relay:
        sides["relay"] = None
    work = Path(tempfile.mkdtemp(prefix="gw-request-instructions-"))
    log("starting tritonserver")
    triton = start_triton(work / "tritonserver.log")
    rows: dict[str, dict[str, float]] = {}
    try:
        for label, root in sides.items():  # one at a time: valgrind runs a process on one core
            valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={work / ('callgrind-' + label)}"]
            if root is None:
                program, extra = [*valgrind, *RELAY_PROGRAM], []
            else:
                program = [*valgrind, sys.executable, "-m", "gateway"]
                extra = [f"--model-repository={REFERENCE_REPOSITORY},{TEST_REPOSITORY}"]
            log(f"starting {label} under callgrind")
            server = start_gateway(
                triton.grpc_url, work / f"{label}.log", extra, root=root, program=program, ready_within=600
            )
            try:
                rows[label] = asyncio.run(count(server, work, "callgrind-" + label, args))
            finally:
                server.stop()
            log(f"{label}: " + ", ".join(f"{k} {v:,.0f}" for k, v in rows[label].items()))
    finally:
        triton.stop()
    endpoints = args.endpoints.split(",")
    print(f"instructions per request ({args.tokens} tokens, {args.prompt_bytes} B prompt, {args.requests} requests)")
    print("| side | " + " | ".join(endpoints) + " |")
    print("|---|" + "---:|" * len(endpoints))
    for label, figures in rows.items():
        name = {"before": f"before ({args.against})", "after": f"this tree ({args.gateway_root})"}.get(label, label)
        print(f"| {name} | " + " | ".join(f"{figures[e]:,.0f}" for e in endpoints) + " |")
    for label in ("before", "relay"):
        if label in rows:
            ratios = ", ".join(f"{e} {rows['after'][e] / rows[label][e]:.3f}" for e in endpoints)
            print(f"this tree / {label}: {ratios}")


if __name__ == "__main__":
    main()
