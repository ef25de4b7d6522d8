"""Two gateways on one Triton, requests alternating between them: TTFT at concurrency 1 and
gateway CPU per request, for a before/after that the machine's load cannot tilt.

``big_prompts.py`` measures the gateway against the floor, in runs minutes apart. On the shared
2-core box, the floor's own TTFT then moves by a millisecond between runs (2.6-3.6 ms for the
same request), more than a change to the per-request path moves the gateway. Here the two
gateway processes (this tree and ``--against``, or any two with ``--gateway-root``) serve the
same Triton model at the same time. One client sends the same request to A, then to B, then to
B, then to A, and so on, one at a time. Both see the same load, and the difference is the
change. TTFT is the time from the request's first byte to the first token's bytes (``firehose``,
``--tokens`` per request, a ``--prompt-bytes`` prompt). CPU is the gateway process's
(``/proc``), per request, over the measured requests.

    .venv/bin/python bench/ttft_ab.py --against /tmp/base
    .venv/bin/python bench/ttft_ab.py --against /tmp/base --requests 2000 --endpoints chat
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from common import (  # noqa: E402
    REFERENCE_REPOSITORY,
    TEST_REPOSITORY,
    Gateway,
    exit_on_sigterm,
    log,
    start_gateway,
    start_triton,
)
from loadgen import CLK_TCK  # noqa: E402
from request_path import prompt_text  # noqa: E402

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def http_request(path: str, prompt: str, tokens: int) -> bytes:
    body: dict[str, Any] = {"model": "firehose", "max_tokens": tokens, "stream": True}
    body["stream_options"] = {"include_usage": True}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    raw = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
    head += f"Content-Length: {len(raw)}\r\n\r\n"
    return head.encode() + raw


def user_and_system_seconds(pid: int) -> tuple[float, float]:
    """A process's CPU in user space and in the kernel (all threads). The kernel's share is mostly
    the loopback TCP of its sockets, each send carrying the receiver's side too."""
    with open(f"/proc/{pid}/stat", "rb") as handle:
        fields = handle.read().rsplit(b")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


class Client:
    """One keep-alive connection; ``ask`` sends the request and reads the whole stream."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def ask(self, request: bytes) -> float:
        """Seconds from sending to the first token's bytes (``"tok `` in a chunk's JSON: firehose's
        token, never in a usage chunk's ``prompt_tokens``)."""
        start = time.perf_counter()
        self.writer.write(request)
        seen = b""
        first = 0.0
        while True:
            data = await self.reader.read(65536)
            if not data:
                raise RuntimeError("the gateway closed the connection")
            seen = seen[-16:] + data
            if not first and b'"tok ' in seen:
                first = time.perf_counter()
            if seen.endswith(b"0\r\n\r\n") and b"[DONE]" in seen:
                return first - start


async def measure(gateways: dict[str, Gateway], args: argparse.Namespace) -> list[dict[str, Any]]:
    clients = {}
    for label, gateway in gateways.items():
        clients[label] = Client(*await asyncio.open_connection("127.0.0.1", gateway.port))
    rows = []
    for endpoint in [e.strip() for e in args.endpoints.split(",") if e.strip()]:
        request = http_request(PATHS[endpoint], prompt_text(args.prompt_bytes), args.tokens)
        labels = list(gateways)
        for _ in range(args.warmup):
            for label in labels:
                await clients[label].ask(request)
        ttft: dict[str, list[float]] = {label: [] for label in labels}
        cpu_before = {label: user_and_system_seconds(gateways[label].pid) for label in labels}
        for i in range(args.requests):
            for label in labels if i % 2 == 0 else labels[::-1]:
                ttft[label].append(await clients[label].ask(request))
        for label in labels:
            user, system = user_and_system_seconds(gateways[label].pid)
            user = (user - cpu_before[label][0]) / args.requests
            system = (system - cpu_before[label][1]) / args.requests
            times = sorted(ttft[label])
            row = {
                "endpoint": endpoint,
                "gateway": label,
                "ttft_p10_ms": times[len(times) // 10] * 1e3,
                "ttft_p50_ms": statistics.median(times) * 1e3,
                "ttft_p90_ms": times[9 * len(times) // 10] * 1e3,
                "cpu_us_per_request": (user + system) * 1e6,
                "user_us_per_request": user * 1e6,
                "system_us_per_request": system * 1e6,
            }
            rows.append(row)
            log(
                f"{endpoint:12s} {label:7s} TTFT p50 {row['ttft_p50_ms']:.3f} ms "
                f"(p10 {row['ttft_p10_ms']:.3f}, p90 {row['ttft_p90_ms']:.3f}); CPU {row['cpu_us_per_request']:.0f} µs "
                f"(user {row['user_us_per_request']:.0f}, kernel {row['system_us_per_request']:.0f})"
            )
    return rows


def table(rows: list[dict[str, Any]], trees: dict[str, Path]) -> str:
    out = [
        f"before: `{trees['before']}`; after: `{trees['after']}`",
        "",
        "| endpoint | TTFT p50 before → after (ms) | p10 | p90 | gateway CPU per request before → after (µs) "
        "| of which user space |",
        "|---|---|---|---|---|---|",
    ]
    by = {(r["endpoint"], r["gateway"]): r for r in rows}
    for endpoint in dict.fromkeys(r["endpoint"] for r in rows):
        b, a = by[(endpoint, "before")], by[(endpoint, "after")]
        cells = [f"{b[k]:.2f} → {a[k]:.2f}" for k in ("ttft_p50_ms", "ttft_p10_ms", "ttft_p90_ms")]
        cells.append(f"{b['cpu_us_per_request']:.0f} → {a['cpu_us_per_request']:.0f}")
        cells.append(f"{b['user_us_per_request']:.0f} → {a['user_us_per_request']:.0f}")
        out.append(f"| {endpoint} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--against", type=Path, required=True, help="the tree whose gateway is 'before'")
    parser.add_argument("--gateway-root", type=Path, default=BENCH.parent, help="the tree whose gateway is 'after'")
    parser.add_argument("--requests", type=int, default=1000, help="measured requests per gateway and endpoint")
    parser.add_argument("--warmup", type=int, default=50, help="requests per gateway before measuring")
    parser.add_argument("--endpoints", default="completions,chat", help="completions and/or chat")
    parser.add_argument("--tokens", type=int, default=16, help="tokens per request")
    parser.add_argument("--prompt-bytes", type=int, default=100, help="prompt size")
    parser.add_argument("--output", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    exit_on_sigterm()
    trees = {"before": args.against.resolve(), "after": args.gateway_root.resolve()}
    work = Path(tempfile.mkdtemp(prefix="gw-ttft-ab-"))
    log("starting tritonserver")
    triton = start_triton(work / "tritonserver.log")
    gateways: dict[str, Gateway] = {}
    try:
        for label, root in trees.items():
            repositories = f"--model-repository={REFERENCE_REPOSITORY},{TEST_REPOSITORY}"
            gateways[label] = start_gateway(triton.grpc_url, work / f"gateway-{label}.log", [repositories], root=root)
        rows = asyncio.run(measure(gateways, args))
    finally:
        for gateway in gateways.values():
            gateway.stop()
        triton.stop()
    print(table(rows, trees))
    if args.output is not None:
        args.output.write_text(json.dumps({"trees": {k: str(v) for k, v in trees.items()}, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
