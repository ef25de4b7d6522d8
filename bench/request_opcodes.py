"""Python bytecodes run per request by the running gateway (or the bare relay) on a real Triton,
by function and by package.

``request_instructions.py`` counts machine instructions, which weigh a tight loop over a prompt
(a JSON string scanned, a prompt hashed or copied) as much as straight-line code, though a loop
runs hot after its first turn. Cutting 30 % of a request's instructions and 21 % of its bytecodes,
mostly such loops, moved its TTFT by 0.09 ms (PERFORMANCE, "Fifteenth session"). What tracked
the time there was the number of functions a request runs (344 → 321, against the bare relay's
51): each, run once and cold, brings its code and data back into the caches. This script gives
both: the bytecodes by package and function, and how many functions a request runs (those
with at least one bytecode per request). The server runs under ``sys.settrace`` with opcode
events from ``SIGUSR1`` to ``SIGUSR2`` on its event loop's thread, which is where a request's
Python runs (the tokenizer's threads are not counted). The counts are exact (a timer falling in the
window moves them by a few dozen); the times are not measured (tracing slows the server many
times over).

``--per-token N`` counts a token instead: requests of 1 + N tokens less requests of 1, over N.
With ``--paced SECONDS`` the tokens come from the scripted model that far apart, each a wake-up
of its own as at c = 1 (the firehose's tokens pile up while tracing slows the server, and a batch
of them costs one wake-up); the timers that fall in the window (the catalog's refresh every 10 s)
are then spread over the tokens.

    .venv/bin/python bench/request_opcodes.py
    .venv/bin/python bench/request_opcodes.py --relay --endpoint completions --top 20
    .venv/bin/python bench/request_opcodes.py --per-token 100 --paced 0.02 [--relay]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import runpy
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType
from typing import Any

BENCH = Path(__file__).resolve().parent


def serve(out: Path, argv: list[str]) -> None:
    """The server's process: ``argv`` is ``python -m gateway``'s or ``relay_floor.py``'s command line."""
    counts: collections.Counter[str] = collections.Counter()

    def where(frame: FrameType) -> str:
        code = frame.f_code
        return f"{code.co_filename}:{code.co_firstlineno}({code.co_name})"

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        key = where(frame)

        def opcode(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "opcode":
                counts[key] += 1
            return opcode

        return opcode

    def start(*_: Any) -> None:
        counts.clear()
        sys.settrace(trace)

    def stop(*_: Any) -> None:
        sys.settrace(None)
        out.write_text(json.dumps(counts))

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        sys.path.insert(0, str(Path(argv[0]).parent))
        runpy.run_path(argv[0], run_name="__main__")


def group(name: str) -> str:
    """A function's package: ``gateway/<package>``, a third-party distribution, or the stdlib."""
    path = name.rsplit(":", 1)[0]
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0]
    if "/gateway/" in path:
        parts = path.rsplit("/gateway/", 1)[1].split("/")
        return "gateway/" + (parts[0] if len(parts) > 1 else parts[0].removesuffix(".py"))
    if "/bench/" in path:
        return "bench/" + path.rsplit("/", 1)[1]
    return "stdlib" if path.startswith("/") else path  # <string>: dataclasses' __init__, <template>: jinja's


def short(name: str) -> str:
    for marker in ("site-packages/", "/gateway/", "/bench/", "/lib/python3"):
        if marker in name:
            head = {"/gateway/": "gateway/", "/bench/": "bench/", "/lib/python3": "python3"}.get(marker, "")
            return head + name.split(marker, 1)[1]
    return name


async def count(port: int, pid: int, out: Path, request: bytes, requests: int, warmup: int) -> dict[str, float]:
    """Bytecodes per request by function: ``requests`` requests between the server's two signals,
    after ``warmup`` (imports and first-use caches stay out of the count)."""
    from ttft_ab import Client, between_marks

    client = Client(*await asyncio.open_connection("127.0.0.1", port))
    try:
        await between_marks(
            client,
            request,
            warmup=warmup,
            requests=requests,
            start=lambda: os.kill(pid, signal.SIGUSR1),
            end=lambda: os.kill(pid, signal.SIGUSR2),
            settle=0.2,
        )
    finally:
        client.writer.close()
    deadline = time.monotonic() + 30
    while not out.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    counts: dict[str, int] = json.loads(out.read_text())
    out.unlink()
    return {name: value / requests for name, value in counts.items()}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--serve":
        serve(Path(sys.argv[2]), sys.argv[3:])
        return
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--relay", action="store_true", help="count relay_floor.py, the bare relay, not the gateway")
    parser.add_argument("--gateway-root", type=Path, default=BENCH.parent, help="the tree whose gateway runs")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--endpoint", choices=("chat", "completions"), default="chat")
    parser.add_argument("--tokens", type=int, default=1, help="tokens per request")
    parser.add_argument("--prompt-bytes", type=int, default=10000)
    parser.add_argument(
        "--per-token",
        type=int,
        default=0,
        metavar="N",
        help="count per token instead: requests of 1 + N tokens less requests of 1, over N",
    )
    parser.add_argument(
        "--paced",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="with --per-token: the scripted model's tokens this far apart (completions), so each "
        "token is a wake-up of its own as at c = 1, instead of the firehose's, which pile up under tracing",
    )
    parser.add_argument("--top", type=int, default=40, help="functions listed")
    args = parser.parse_args()
    sys.path.insert(0, str(BENCH.parent))
    sys.path.insert(0, str(BENCH))
    from common import (
        REFERENCE_REPOSITORY,
        RELAY_PROGRAM,
        TEST_REPOSITORY,
        log,
        paced_script,
        request_prompt,
        start_gateway,
        start_triton,
    )
    from ttft_ab import PATHS, http_request

    def request(tokens: int) -> bytes:
        if args.paced:  # the script's tokens, then its end (max_tokens is not what stops it)
            return http_request(PATHS["completions"], paced_script(tokens, args.paced), tokens + 1, model="scripted")
        return http_request(PATHS[args.endpoint], request_prompt(args.prompt_bytes), tokens)

    work = Path(tempfile.mkdtemp(prefix="gw-request-opcodes-"))
    out = work / "counts.json"
    served = list(RELAY_PROGRAM[1:]) if args.relay else ["-m", "gateway"]
    extra = [] if args.relay else [f"--model-repository={REFERENCE_REPOSITORY},{TEST_REPOSITORY}"]
    program = [sys.executable, __file__, "--serve", str(out), *served]
    log("starting tritonserver")
    triton = start_triton(work / "tritonserver.log")
    try:
        server = start_gateway(
            triton.grpc_url,
            work / "server.log",
            extra,
            root=None if args.relay else args.gateway_root.resolve(),
            program=program,
        )
        try:
            if args.per_token:
                one = asyncio.run(count(server.port, server.pid, out, request(1), args.requests, 10))
                more = asyncio.run(count(server.port, server.pid, out, request(1 + args.per_token), args.requests, 3))
                names = one.keys() | more.keys()
                counts = {name: (more.get(name, 0.0) - one.get(name, 0.0)) / args.per_token for name in names}
            else:
                counts = asyncio.run(count(server.port, server.pid, out, request(args.tokens), args.requests, 10))
        finally:
            server.stop()
    finally:
        triton.stop()
    unit = "token" if args.per_token else "request"
    packages: collections.Counter[str] = collections.Counter()
    for name, value in counts.items():
        packages[group(name)] += value
    side = "the bare relay" if args.relay else f"the gateway of {args.gateway_root}"
    print(f"bytecodes per {unit}, {side}: {sum(counts.values()):,.0f}")
    functions = sum(1 for value in counts.values() if value >= 1 - 1e-9)
    print(f"functions run per {unit} (at least one bytecode per {unit}): {functions}")
    if args.per_token:
        what = f"paced {args.paced * 1000:g} ms apart, completions" if args.paced else f"firehose, {args.endpoint}"
        print(f"({args.per_token} tokens, {what}, {args.requests} requests of each length)\n")
    else:
        print(f"({args.endpoint}, {args.tokens} tokens, {args.prompt_bytes} B prompt, {args.requests} requests)\n")
    print(f"| package | bytecodes per {unit} |\n|---|---:|")
    for package, value in packages.most_common():
        if value >= 1:
            print(f"| {package} | {value:,.0f} |")
    print(f"\n| function | bytecodes per {unit} |\n|---|---:|")
    for name, value in sorted(counts.items(), key=lambda item: -item[1])[: args.top]:
        print(f"| `{short(name)}` | {value:,.1f} |")


if __name__ == "__main__":
    main()
