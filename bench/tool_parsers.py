"""µs per ``feed`` of every tool-call parser, on plain text and on text holding calls.

The parser runs once per token of every choice that offered tools, so its plain-text cost is
the one that matters: it should be close to the bare function call (the ``baseline`` row, a
function that returns its argument the way a parser's fast path does). The ``calls`` column is
the cost while a call is being held and parsed, amortised over the call's tokens; ``markdown``
is prose full of the marker's first character (``<``, ``[``), which takes the slower path.

Pieces are 4 characters, about one token. Best of several rounds (a shared machine is noisy);
compare rows of one run, not runs of different days.

    .venv/bin/python bench/tool_parsers.py
    .venv/bin/python bench/tool_parsers.py --rounds 9 --repeat 200
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.backend.types import GenerationChunk
from gateway.core.assemble import RequestAssembler
from gateway.core.generation_plan import ToolPlan
from gateway.tools import ParsedCall, make_parser

NAMES = frozenset({"get_weather", "search"})
PROSE = (
    "The weather in Paris is mild today, with a light breeze from the west and temperatures "
    "around eighteen degrees. Tomorrow looks similar, so a light jacket should be enough. "
)
MARKDOWN = "See [the docs](https://example.com/a<b>) and <em>this</em> [note] for details. "
ARGS = {"city": "Paris", "unit": "celsius", "days": 3, "details": {"hourly": True, "lang": "fr"}}
CALLS = {
    "hermes": "Let me check. "
    + "".join(
        f"<tool_call>\n{json.dumps({'name': 'get_weather', 'arguments': ARGS})}\n</tool_call>\n" for _ in range(2)
    ),
    "llama3_json": "; ".join(json.dumps({"name": "get_weather", "parameters": ARGS}) for _ in range(2)),
    "mistral": "[TOOL_CALLS]" + json.dumps([{"name": "get_weather", "arguments": ARGS}] * 2),
    "pythonic": "[" + ", ".join(["get_weather(city='Paris', unit='celsius', days=3, details={'a': True})"] * 2) + "]",
    "forced_named": json.dumps(ARGS),
    "forced_required": json.dumps([{"name": "get_weather", "parameters": ARGS}] * 2),
}


def pieces(text: str, size: int = 4) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _identity(text: str) -> tuple[str, list[ParsedCall]]:
    return text, []


def time_feeds(make: Callable[[], Callable[[str], object]], tokens: list[str], repeat: int, rounds: int) -> float:
    """Best µs per feed over ``rounds``, each feeding ``tokens`` to ``repeat`` fresh parsers."""
    best = float("inf")
    for _ in range(rounds):
        elapsed = 0
        for _ in range(repeat):
            feed = make()
            start = time.perf_counter_ns()
            for token in tokens:
                feed(token)
            elapsed += time.perf_counter_ns() - start
        best = min(best, elapsed / (repeat * len(tokens)) / 1000)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=100)
    args = parser.parse_args()

    plain = pieces(PROSE * 4)
    markdown = pieces(MARKDOWN * 6)
    baseline = time_feeds(lambda: _identity, plain, args.repeat, args.rounds)
    print(f"{'parser':<16} {'plain µs/feed':>14} {'markdown':>10} {'calls':>8}   (4-char pieces)")
    print(f"{'baseline':<16} {baseline:>14.3f} {'':>10} {'':>8}   a function returning (text, [])")
    for name, text in CALLS.items():
        tools = frozenset({"get_weather"}) if name == "forced_named" else NAMES

        def make(tools: frozenset[str] = tools, name: str = name) -> Callable[[str], object]:
            instance = make_parser(name, tools)
            instance.feed("OK. ")  # past the start: the steady per-token state
            return instance.feed

        def make_fresh(tools: frozenset[str] = tools, name: str = name) -> Callable[[str], object]:
            return make_parser(name, tools).feed

        check = make_parser(name, tools)
        found = check.feed(text)[1] + check.finish()[1]
        assert found, f"{name}: the benchmark's calls did not parse"
        row = [
            time_feeds(make, plain, args.repeat, args.rounds),
            time_feeds(make, markdown, args.repeat, args.rounds),
            time_feeds(make_fresh, pieces(text), args.repeat, args.rounds),
        ]
        print(f"{name:<16} {row[0]:>14.3f} {row[1]:>10.3f} {row[2]:>8.3f}")
    print()
    print("In the gateway's assembly step (core/assemble.py), µs per token of plain text, one choice:")
    without = time_assembly(None, args.rounds)
    with_reader = time_assembly(ToolPlan("hermes", NAMES, parallel=True), args.rounds)
    added = with_reader - without
    print(f"  without tools {without:.2f}   with tools (hermes reader) {with_reader:.2f}   added {added:.2f}")


def time_assembly(tools: ToolPlan | None, rounds: int) -> float:
    """The whole per-token assembly (UTF-8, stop strings, events) with and without the per-choice
    tool-call reader (``core/toolcalls.py``): what a request with ``tools`` pays per token."""
    chunks = [GenerationChunk((piece.encode(),), (None,), 5, (1,)) for piece in pieces(PROSE * 40)]
    best = float("inf")
    for _ in range(rounds):
        assembler = RequestAssembler(n=1, chat=True, top_logprobs=None, max_tokens=[10**9], tools=tools)
        start = time.perf_counter()
        for chunk in chunks:
            assembler.feed(0, chunk)
        best = min(best, (time.perf_counter() - start) / len(chunks))
    return best * 1e6


if __name__ == "__main__":
    main()
