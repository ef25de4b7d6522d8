"""The leanest streaming relay this transport allows: the floor of a Python relay's CPU per token.

Not a gateway. It answers ``POST`` with an SSE stream and ``GET`` with 200, and does per token
only what any relay between Triton and an OpenAI client must do: parse the response message
(the gateway's own HTTP/2 connection and stream reader, vLLM contract), encode one OpenAI chunk (only its delta
and finish reason: the bytes every chunk of the stream shares are encoded once, as the gateway's
encoder does) and write it. No FastAPI, uvicorn, validation, template, tokenizer, admission,
assembly (stop strings, UTF-8), metrics or pings. Each stream is one task reading the call's
batches, as in the gateway, and a client that disconnects has its calls cancelled (else their
tokens would load Triton in the next run of the bench).

``big_prompts.py`` runs it beside the gateway on the chat workload, so the gateway's CPU per token is
reported against what the bare relay costs on the same machine in the same run: what is left to
cut in the gateway's own code, apart from the cost of being woken per token, which both pay.

    .venv/bin/python bench/relay_floor.py --triton-url 127.0.0.1:8001 --port 9000
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.backend.contracts.vllm import build_infer_request  # noqa: E402
from gateway.backend.transport.base import STREAM_INFER_PATH  # noqa: E402
from gateway.backend.transport.h2 import connect  # noqa: E402
from gateway.backend.transport.h2call import StreamCall  # noqa: E402
from gateway.backend.transport.h2conn import GrpcConnection  # noqa: E402
from gateway.backend.triton import vllm_reader  # noqa: E402
from gateway.backend.types import GenerationChunk, GenerationRequest  # noqa: E402

STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
READY = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


def chunked(payload: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(payload), payload)


class Relay(asyncio.Protocol):
    """One client connection: HTTP/1.1 requests in, one streaming call each."""

    ids = itertools.count()

    def __init__(self, triton: GrpcConnection) -> None:
        self.triton = triton
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.streams: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        for task in self.streams:
            task.cancel()  # its call is cancelled on the way out: Triton stops the generation

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            lines = self.buffer[:end].decode("latin-1").split("\r\n")
            length = next(
                (int(v) for k, _, v in (line.partition(":") for line in lines[1:]) if k.lower() == "content-length"),
                0,
            )
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            assert self.transport is not None
            if lines[0].startswith("GET "):
                self.transport.write(READY)
            else:
                task = asyncio.get_running_loop().create_task(self.stream(orjson.loads(body)))
                self.streams.add(task)
                task.add_done_callback(self.streams.discard)

    async def stream(self, body: dict[str, Any]) -> None:
        transport = self.transport
        assert transport is not None
        messages = body.get("messages")
        prompt = messages[-1]["content"] if messages else body["prompt"]
        request_id, model = f"relay-{next(self.ids)}", body["model"]
        request = GenerationRequest(request_id, model, prompt, {"max_tokens": body.get("max_tokens", 16)})
        message = build_infer_request(request).SerializeToString()
        shared = {"id": request_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
        head = b"data: " + orjson.dumps(shared)[:-1] + b',"choices":[{"index":0,"delta":'
        transport.write(STREAM_HEAD)
        completion = 0
        prompt_tokens = 0
        call: StreamCall[GenerationChunk] = await self.triton.open(STREAM_INFER_PATH, message, vllm_reader())
        finished = False
        try:
            async for batch in call:
                out = []
                for chunk in batch:
                    if chunk.num_input_tokens is not None:
                        prompt_tokens = chunk.num_input_tokens
                    if chunk.num_output_tokens:
                        completion += chunk.num_output_tokens[0]
                    delta = {"content": chunk.text[0].decode("utf-8", "replace")} if chunk.text else {}
                    reason = orjson.dumps(chunk.finish_reason[0])
                    out.append(chunked(head + orjson.dumps(delta) + b',"finish_reason":' + reason + b"}]}\n\n"))
                transport.write(b"".join(out))
                finished = batch[-1].final
        finally:
            if not finished:
                call.cancel()
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion}
        tail = b"data: " + orjson.dumps({**shared, "choices": [], "usage": usage}) + b"\n\ndata: [DONE]\n\n"
        transport.write(chunked(tail) + b"0\r\n\r\n")


async def serve(triton_url: str, port: int) -> None:
    triton = await connect(triton_url)
    server = await asyncio.get_running_loop().create_server(lambda: Relay(triton), "127.0.0.1", port)
    await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--triton-url", required=True)
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()  # the gateway's other flags, which the bench passes to both
    uvloop.run(serve(args.triton_url, args.port))


if __name__ == "__main__":
    main()
