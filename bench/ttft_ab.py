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

``--relay`` and ``--floor`` add two more sides to the same rounds: the bare relay
(``relay_floor.py``) and the floor (``tritonclient.grpc.aio`` straight to Triton, one stream per
request, as ``big_prompts.py``'s floor). With them, the TTFT the gateway adds over the floor at
c=1 is measured request by request rather than in windows seconds apart, and the relay's TTFT says
how much of it any Python relay pays. The floor's TTFT is to the first response carrying text.
Without ``--against`` the gateway of this tree is the only gateway side. ``--pause S`` leaves S
seconds of quiet before each request: the box then serves it as it serves the first request after
a long stream, with cold caches and a core waking up.

    .venv/bin/python bench/ttft_ab.py --against /tmp/base
    .venv/bin/python bench/ttft_ab.py --against /tmp/base --requests 2000 --endpoints chat
    .venv/bin/python bench/ttft_ab.py --relay --floor --endpoints chat --tokens 1000 --prompt-bytes 10000
    .venv/bin/python bench/ttft_ab.py --relay --floor --endpoints chat --prompt-bytes 10000 --pause 0.05
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from common import (  # noqa: E402
    REFERENCE_REPOSITORY,
    RELAY_PROGRAM,
    TEST_REPOSITORY,
    Gateway,
    exit_on_sigterm,
    log,
    request_prompt,
    start_gateway,
    start_triton,
)
from loadgen import CLK_TCK, floor_inputs  # noqa: E402

PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


def http_request(path: str, prompt: str, tokens: int, model: str = "firehose") -> bytes:
    body: dict[str, Any] = {"model": model, "max_tokens": tokens, "stream": True}
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
        token, never in a usage chunk's ``prompt_tokens``). Raises on an answer other than a whole
        stream (a status other than 200, an error event instead of ``[DONE]``)."""
        start = time.perf_counter()
        self.writer.write(request)
        seen = b""
        first = 0.0
        done = False
        while True:
            data = await self.reader.read(65536)
            if not data:
                raise RuntimeError("the server closed the connection")
            if not seen and not data.startswith(b"HTTP/1.1 200 "):
                raise RuntimeError(f"the server answered {data[:300]!r}")
            seen = seen[-16:] + data
            if not first and b'"tok ' in seen:
                first = time.perf_counter()
            done = done or b"[DONE]" in seen
            if seen.endswith(b"\r\n0\r\n\r\n"):  # the chunked body's last chunk
                if not (first and done):
                    raise RuntimeError(f"the stream ended without {'[DONE]' if first else 'a token'}: {seen!r}")
                return first - start


async def between_marks(
    client: Client,
    request: bytes,
    *,
    warmup: int,
    requests: int,
    start: Callable[[], None],
    end: Callable[[], None],
    settle: float = 0.0,
) -> None:
    """``warmup`` requests (imports and first-use caches), ``start()``, ``settle`` seconds,
    ``requests`` requests, ``end()``: how the counting tools (callgrind's zero and dump, the
    tracer's signals) count the same requests, one at a time."""
    for _ in range(warmup):
        await client.ask(request)
    start()
    if settle:
        await asyncio.sleep(settle)
    for _ in range(requests):
        await client.ask(request)
    end()


class HttpSide:
    """A gateway (or the bare relay) over one keep-alive HTTP/1.1 connection."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @classmethod
    async def connect(cls, server: Gateway) -> HttpSide:
        return cls(Client(*await asyncio.open_connection("127.0.0.1", server.port)))

    async def __call__(self, endpoint: str, prompt: str, tokens: int) -> float:
        return await self.client.ask(http_request(PATHS[endpoint], prompt, tokens))

    async def close(self) -> None:
        self.client.writer.close()


class FloorSide:
    """Straight to Triton with ``tritonclient.grpc.aio``, one stream per request, the inputs the
    gateway's vLLM contract sends (the prompt as it is: the floor renders no template). TTFT is
    to the first response that carries text."""

    def __init__(self, grpc_url: str) -> None:
        import tritonclient.grpc.aio as grpcclient

        self.grpcclient = grpcclient
        self.client = grpcclient.InferenceServerClient(grpc_url)

    async def __call__(self, endpoint: str, prompt: str, tokens: int) -> float:
        inputs = floor_inputs(self.grpcclient, prompt, {"max_tokens": tokens})

        async def one_request() -> Any:
            yield {"model_name": "firehose", "inputs": inputs}

        start = time.perf_counter()
        first = 0.0
        async for result, error in self.client.stream_infer(one_request()):
            if error is not None:
                raise RuntimeError(f"floor: {error}")
            response = result.get_response()
            if not first:
                for index, output in enumerate(response.outputs):
                    if output.name == "text_output" and len(response.raw_output_contents[index]) > 4:
                        first = time.perf_counter()
            if response.parameters["triton_final_response"].bool_param:
                break
        return first - start

    async def close(self) -> None:
        await self.client.close()


Side = HttpSide | FloorSide


async def alternate(
    sides: dict[str, Side], endpoint: str, prompt: str, tokens: int, *, requests: int, pause: float = 0.0
) -> dict[str, list[float]]:
    """Every side answers the same request in turn, the order reversed every round (A B C, C B A,
    ...), ``pause`` seconds of quiet before each: each side's seconds to the first token."""
    labels = list(sides)
    ttft: dict[str, list[float]] = {label: [] for label in labels}
    for i in range(requests):
        for label in labels if i % 2 == 0 else labels[::-1]:
            if pause:
                await asyncio.sleep(pause)
            ttft[label].append(await sides[label](endpoint, prompt, tokens))
    return ttft


async def measure(
    gateways: dict[str, Gateway], args: argparse.Namespace, grpc_url: str | None = None
) -> list[dict[str, Any]]:
    """``alternate`` over the gateways (and the floor, with ``grpc_url``), with each gateway's CPU
    per request."""
    sides: dict[str, Side] = {label: await HttpSide.connect(gateway) for label, gateway in gateways.items()}
    if grpc_url is not None:
        sides["floor"] = FloorSide(grpc_url)
    rows = []
    for endpoint in [e.strip() for e in args.endpoints.split(",") if e.strip()]:
        prompt = request_prompt(args.prompt_bytes)
        await alternate(sides, endpoint, prompt, args.tokens, requests=args.warmup)
        cpu_before = {label: user_and_system_seconds(gateway.pid) for label, gateway in gateways.items()}
        ttft = await alternate(sides, endpoint, prompt, args.tokens, requests=args.requests, pause=args.pause)
        cpu_after = {label: user_and_system_seconds(gateway.pid) for label, gateway in gateways.items()}
        for label in sides:
            user = system = float("nan")
            if label in gateways:
                user = (cpu_after[label][0] - cpu_before[label][0]) / args.requests
                system = (cpu_after[label][1] - cpu_before[label][1]) / args.requests
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
    for side in sides.values():
        await side.close()
    return rows


def sides_table(rows: list[dict[str, Any]]) -> str:
    """Each side's TTFT, and what it adds over the floor's in the same rounds."""
    out = [
        "| endpoint | side | TTFT p50 (ms) | p10 | p90 | p50 over the floor's (ms) | CPU per request (µs) |",
        "|---|---|---|---|---|---|---|",
    ]
    floors = {r["endpoint"]: r["ttft_p50_ms"] for r in rows if r["gateway"] == "floor"}
    for r in rows:
        floor = floors.get(r["endpoint"])
        added = "—" if floor is None or r["gateway"] == "floor" else f"{r['ttft_p50_ms'] - floor:+.2f}"
        cpu = r["cpu_us_per_request"]
        cells = [f"{r[k]:.2f}" for k in ("ttft_p50_ms", "ttft_p10_ms", "ttft_p90_ms")]
        cpu_cell = "—" if math.isnan(cpu) else f"{cpu:.0f}"  # no CPU figure for the floor
        out.append(f"| {r['endpoint']} | {r['gateway']} | " + " | ".join(cells) + f" | {added} | {cpu_cell} |")
    return "\n".join(out)


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
    parser.add_argument("--against", type=Path, default=None, help="the tree whose gateway is 'before'")
    parser.add_argument("--relay", action="store_true", help="add relay_floor.py, the bare relay, as a side")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds of quiet before each measured request")
    parser.add_argument("--floor", action="store_true", help="add the floor, gRPC straight to Triton, as a side")
    parser.add_argument("--gateway-root", type=Path, default=BENCH.parent, help="the tree whose gateway is 'after'")
    parser.add_argument("--requests", type=int, default=1000, help="measured requests per gateway and endpoint")
    parser.add_argument("--warmup", type=int, default=50, help="requests per gateway before measuring")
    parser.add_argument("--endpoints", default="completions,chat", help="completions and/or chat")
    parser.add_argument("--tokens", type=int, default=16, help="tokens per request")
    parser.add_argument("--prompt-bytes", type=int, default=100, help="prompt size")
    parser.add_argument("--output", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args()
    exit_on_sigterm()
    trees = {"after": args.gateway_root.resolve()}
    if args.against is not None:
        trees = {"before": args.against.resolve(), **trees}
    work = Path(tempfile.mkdtemp(prefix="gw-ttft-ab-"))
    log("starting tritonserver")
    triton = start_triton(work / "tritonserver.log")
    gateways: dict[str, Gateway] = {}
    try:
        for label, root in trees.items():
            repositories = f"--model-repository={REFERENCE_REPOSITORY},{TEST_REPOSITORY}"
            gateways[label] = start_gateway(triton.grpc_url, work / f"gateway-{label}.log", [repositories], root=root)
        if args.relay:
            gateways["relay"] = start_gateway(triton.grpc_url, work / "relay.log", [], program=RELAY_PROGRAM)
        rows = asyncio.run(measure(gateways, args, triton.grpc_url if args.floor else None))
    finally:
        for gateway in gateways.values():
            gateway.stop()
        triton.stop()
    print(table(rows, trees) if "before" in trees else sides_table(rows))
    if args.output is not None:
        args.output.write_text(json.dumps({"trees": {k: str(v) for k, v in trees.items()}, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
