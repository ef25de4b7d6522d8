"""``agents``: what a coding agent's large request bodies cost the gateway per request, in process.

Claude Code (``/v1/messages``) and the Codex CLI (``/v1/responses``) send 12-21 tools with tens of
KB of JSON schemas and a system prompt of 10-30 KB on every turn. ``bench/agent_bodies.py`` builds
such bodies synthetically (16 functions, ~49 KB of tools, a 20 KB system prompt), for both APIs
and chat completions, three ways: the user message alone, with the system prompt, with the system
prompt and the tools. Each variant's app runs in a process of its own (``micro_worker.py``, as in
``micro``: no HTTP server or client), on a real Triton's ``scripted`` model answering one token,
so the figure is the request path: reading and validating the body, converting it to chat,
rendering the template, counting, planning, the call, the stream's few events.

The figures are the event loop thread's CPU per request (``time.thread_time``), and every
thread's (``time.process_time``: token counts run on the tokenizer threads), medians over the
requests of a process, then over ``--repeat`` processes per variant (alternating order). The nine
bodies alternate request by request. ``--profile N``: one more process of the first variant
profiles N requests of each API's body with tools (cProfile, the event loop thread).
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench.agent_bodies import API_PATHS, SHAPES, Bodies
from bench.micro import run_worker
from bench.report import Report, fmt, ratio
from bench.stack import REFERENCE_REPOSITORY, TEST_REPOSITORY, Stack, Variant, log

API_NAMES = {"messages": "Messages (Claude Code's shape)", "responses": "Responses (Codex CLI's)", "chat": "chat"}
PROFILE_ROWS = 15


def run(args: Any, variants: list[Variant], report: Report) -> None:
    runs: dict[str, list[dict[str, Any]]] = {v.name: [] for v in variants}
    profile: dict[str, Any] = {}
    with Stack([], Path(tempfile.mkdtemp(prefix="bench-agents-"))) as stack:
        spec = {
            "mode": "agents",
            "triton_url": stack.triton.grpc_url,
            "repositories": [str(REFERENCE_REPOSITORY), str(TEST_REPOSITORY)],
            "requests": args.requests,
            "tool_parser": args.tool_parser,
        }
        for round_ in range(args.repeat):
            for variant in variants if round_ % 2 == 0 else variants[::-1]:
                result = run_worker(variant, spec)
                runs[variant.name].append(result)
                tools = {api: result["agents"][api]["tools"]["us_thread"] for api in API_PATHS}
                log(f"  agents {variant.name}: " + ", ".join(f"{api} {us:,.0f} µs" for api, us in tools.items()))
        if args.profile:
            log(f"  profiling {args.profile} requests of each API's body with tools ({variants[0].name})")
            profile = run_worker(variants[0], {**spec, "profile": args.profile})["profile"]
    describe(args, variants, runs, report)
    if profile:
        describe_profile(profile, variants[0], report)
    report.data["agents"] = runs
    report.data["profile"] = profile


def median(results: list[dict[str, Any]], api: str, shape: str, figure: str) -> float:
    return float(statistics.median(r["agents"][api][shape][figure] for r in results))


def describe(args: Any, variants: list[Variant], runs: dict[str, list[dict[str, Any]]], report: Report) -> None:
    sizes = Bodies().stats()
    parser = args.tool_parser or "the model's own, hermes"
    report.add(
        "## A coding agent's request bodies, in process: µs of CPU per request, one-token answers",
        "",
        f"{sizes['functions']} functions: {sizes['tools_bytes']:,} B of tools in the Messages shape "
        f"({sizes['description_bytes']:,} B of descriptions, {sizes['schema_bytes']:,} B of parameter schemas); "
        f"a {sizes['system_bytes']:,} B system prompt; one short user message. Bodies with tools: "
        + ", ".join(f"{api} {sizes[f'{api}_tools_body_bytes']:,} B" for api in API_PATHS)
        + "; without: "
        + ", ".join(f"{api} {sizes[f'{api}_no_tools_body_bytes']:,} B" for api in API_PATHS)
        + f". The `scripted` model, tool-call parser: {parser}. Medians of {args.repeat} process(es) × "
        f"{args.requests} requests of each body, alternated. *short*: the user message alone; *no tools*: "
        "with the system prompt; *tools*: with the system prompt and the tools. µs of the event loop "
        "thread; *all threads* adds the tokenizer threads' counting.",
        "",
    )
    first = variants[0].name
    rows = []
    for name, results in runs.items():
        for api in API_PATHS:
            loop = {shape: median(results, api, shape, "us_thread") for shape in SHAPES}
            every = {shape: median(results, api, shape, "us_process") for shape in SHAPES}
            row = [name, API_NAMES[api], *(fmt(loop[shape], 0) for shape in SHAPES)]
            row += [fmt(ratio(loop["tools"], loop["no tools"]), 2), fmt(loop["tools"] - loop["no tools"], 0)]
            row += [fmt(every["no tools"], 0), fmt(every["tools"], 0)]
            row += [fmt(median(results, api, "tools", "us_wall") / 1000, 2)]
            if len(runs) > 1:
                row.append(fmt(ratio(loop["tools"], median(runs[first], api, "tools", "us_thread")), 2))
            rows.append(row)
    header = ["variant", "API", "short", "no tools", "tools", "tools / no tools", "tools − no tools"]
    header += ["no tools, all threads", "tools, all threads", "tools, wall ms"]
    if len(runs) > 1:
        header.append(f"tools / {first}")
    report.table(header, rows)


def describe_profile(profile: dict[str, Any], variant: Variant, report: Report) -> None:
    report.add(
        f"## Where the time goes with tools and without (`{variant.name}`, cProfile, the event loop thread)",
        "",
        "µs per request, the two bodies alternated. Self time by where the code is; the entries whose "
        "self time the tools raise most (these add up to the difference); the entries below the "
        "middlewares whose cumulative time they raise most. Wall time: cProfile inflates Python calls "
        "against C ones, a coroutine's cumulative time is per resumption, and a wait for the GIL (the "
        "counting thread) counts to whatever the loop was running. The whole lists are in the JSON.",
        "",
    )
    for api, data in profile.items():
        totals = data["us_per_request"]
        report.add(
            f"### {API_NAMES[api]}: {data['requests']} requests of each, {totals['tools']:,.0f} µs per request "
            f"profiled with tools, {totals['no tools']:,.0f} without",
            "",
        )
        areas = [[a, fmt(t, 0), fmt(n, 0), fmt(t - n, 0)] for a, t, n in data["areas"][:PROFILE_ROWS]]
        report.table(["where", "self µs, tools", "no tools", "added"], areas)
        report.add("Most self time added by the tools:", "")
        report.table(
            ["function", "calls", "self µs", "self µs, no tools", "added"],
            [
                [f"`{where}`", fmt(calls, 1), fmt(self_us, 0), fmt(without, 0), fmt(self_us - without, 0)]
                for where, calls, self_us, _, without in data["by_self_added"][:PROFILE_ROWS]
            ],
        )
        path = [row for row in data["by_cumulative_added"] if not wrapper(row[0])][:PROFILE_ROWS]
        report.add("Most cumulative time added by the tools (below the middlewares):", "")
        report.table(
            ["function", "calls", "cumulative µs", "cumulative µs, no tools", "added"],
            [
                [f"`{where}`", fmt(calls, 1), fmt(cumulative, 0), fmt(without, 0), fmt(cumulative - without, 0)]
                for where, calls, _, cumulative, without in path
            ],
        )


def wrapper(where: str) -> bool:
    """An entry every request passes through on its way down: an ASGI app or middleware, or the
    bench's own client."""
    return where.endswith("(__call__)") or where.startswith("bench/")
