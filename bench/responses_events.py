"""CPU of the Responses API's stream events next to chat's chunks, per token and per request.

Both encoders get the same choice events the core yields (one token of text per step, as a
stream that keeps up with the model sees them) and turn them into the SSE bytes the gateway
writes: ``openai.encode.ChunkEncoder`` (``chat.completion.chunk``) and
``openai.responses_encode.ResponseEncoder`` (``response.output_text.delta``). Per request, each
also pays its fixed events: chat's role chunk, finish chunk and ``[DONE]``; the Responses API's
``response.created``, ``response.in_progress``, the item and part events around the text and
``response.completed`` (which carries the whole Response object, its text included). Best of
several rounds; quote the ratio, not the absolute time (docs/PERFORMANCE.md).

    .venv/bin/python bench/responses_events.py --tokens 64 --requests 2000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.core.assemble import ChoiceEvent, Usage
from gateway.http.sse import DATA_FRAMING, DONE_FRAME, event_framing
from gateway.openai.encode import ChunkEncoder
from gateway.openai.responses_encode import ResponseEncoder
from gateway.plan.responses_request import ResponsesRequest
from gateway.plan.responses import response_head

TOKEN = " tok"


def chat_request(tokens: int) -> int:
    """Bytes of one chat stream of ``tokens`` steps."""
    encoder = ChunkEncoder(
        chat=True, completion_id="chatcmpl-0123456789abcdef", created=1, model="tiny-llm", framing=DATA_FRAMING
    )
    size = len(encoder.role_chunks(1))
    step = [ChoiceEvent(0, TOKEN, None, None)]
    for _ in range(tokens):
        size += len(encoder.events(step, None))
    size += len(encoder.events([ChoiceEvent(0, "", "stop", None)], None)) + len(DONE_FRAME)
    return size


def responses_request(tokens: int, head: dict[str, object]) -> int:
    """Bytes of one Responses stream of ``tokens`` steps."""
    encoder = ResponseEncoder(head, event_framing)
    size = len(encoder.opening())
    step = [ChoiceEvent(0, TOKEN, None, None)]
    for _ in range(tokens):
        size += len(encoder.events(step))
    frames, _ = encoder.closing("stop", Usage(12, tokens))
    return size + len(frames)


def best(run: object, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    head = response_head(ResponsesRequest(model="tiny-llm", input="hi"), "resp_" + "0" * 32, 1, True)
    tokens, requests, rounds = args.tokens, args.requests, args.rounds

    rows = []
    for name, request, empty in (
        ("chat chunks", lambda: chat_request(tokens), lambda: chat_request(0)),
        ("responses events", lambda: responses_request(tokens, head), lambda: responses_request(0, head)),
    ):
        whole = best(lambda r=request: [r() for _ in range(requests)], rounds) / requests * 1e6  # type: ignore[misc]
        fixed = best(lambda e=empty: [e() for _ in range(requests)], rounds) / requests * 1e6  # type: ignore[misc]
        rows.append((name, (whole - fixed) / tokens, fixed, request()))
    print(f"{tokens} tokens per request, {requests} requests, best of {rounds} rounds")
    print(f"{'':18} {'µs/token':>9} {'µs/request fixed':>17} {'bytes/request':>14}")
    for name, token_us, fixed_us, size in rows:
        print(f"{name:18} {token_us:9.2f} {fixed_us:17.1f} {size:14d}")
    ratio = rows[1][1] / rows[0][1]
    print(f"per token, responses / chat: {ratio:.2f}")


if __name__ == "__main__":
    main()
