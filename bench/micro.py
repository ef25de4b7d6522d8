"""``micro``: the gateway's per-token path in one process, without HTTP server or client.

Starts one tritonserver, then runs ``micro_worker.py`` once per variant per round, the order
reversed every round (ABBA), each a fresh process importing that variant's tree. A figure of the
app's own work per token, steadier than the end-to-end CPU per token because no uvicorn, client
socket or client process shares the measurement.

By default (no ``--variant``) it compares the working tree (``change``) with a commit (``base``,
``--against REF``, the merge base of HEAD and its branch by default) checked out in a temporary
git worktree (``bench/against.py``). Each compared figure is the median of per-round paired
ratios with a bootstrap interval (``bench/compare.py``). Each feature (reasoning, tools offered,
logprobs, a stop string, continuous usage, an API key with limits) runs in the same process as
the plain stream, its added cost the difference. Where valgrind can count instructions
(``bench/instructions.py``), each side's instructions per token and per request too, on a paced
model. Also: µs per ``feed`` of each tool-call and reasoning parser, from each variant's tree.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import against, instructions
from bench.compare import SEED, Change, added, compare, cost_at, instruction_change, rounds_to_see
from bench.compare import paired as compare_pairs
from bench.micro_worker import FEATURES, REFERENCE
from bench.otlp_sink import OtlpSink
from bench.report import Report, fmt
from bench.scenarios import prompt_text
from bench.stack import REFERENCE_REPOSITORY, ROOT, TEST_REPOSITORY, Stack, Variant, log

WORKER = ROOT / "bench" / "micro_worker.py"
TITLES = {f.name: f.title for f in FEATURES}


def start_worker(
    variant: Variant, spec: dict[str, Any], prefix: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A measuring process of ``variant``'s tree (``prefix``: a command it runs under, such as
    valgrind), started."""
    environ = {**os.environ, "PYTHONPATH": str(variant.root), **dict(variant.env), **(env or {})}
    return subprocess.Popen(  # noqa: S603 - our interpreter and script
        [*prefix, sys.executable, str(WORKER), json.dumps(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=variant.root,
        env=environ,
    )


def finish_worker(variant: Variant, process: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    """Its last stdout line's JSON, once it ended, checked to have imported that tree. Waits in
    one-second slices: a signal another thread (the OTLP sink's) receives runs its handler only
    when the main thread runs again, so SIGTERM would otherwise wait for the worker to end."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            stdout, stderr = process.communicate(timeout=1.0)
            break
        except subprocess.TimeoutExpired:
            if time.monotonic() > deadline:
                raise
    if process.returncode != 0:
        raise RuntimeError(f"micro worker of {variant.name} failed:\n{stderr.decode(errors='replace')[-3000:]}")
    result = dict(json.loads(stdout.decode().splitlines()[-1]))
    if not Path(result["package"]).is_relative_to(variant.root):
        raise RuntimeError(f"micro worker of {variant.name} imported {result['package']}")
    return result


def run_worker(
    variant: Variant,
    spec: dict[str, Any],
    prefix: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> dict[str, Any]:
    """One measuring process of ``variant``'s tree, run to its end (killed if this one is
    interrupted): its result."""
    process = start_worker(variant, spec, prefix, env)
    try:
        return finish_worker(variant, process, timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def traced(variants: list[Variant], sink: OtlpSink) -> list[Variant]:
    """Each variant, then the same with traces on (``<name>+traces``), exported to ``sink``."""
    out = []
    for variant in variants:
        on = (("GATEWAY_OTLP_TRACES_ENDPOINT", sink.url), ("OTEL_BSP_SCHEDULE_DELAY", "200"))
        out += [variant, Variant(f"{variant.name}+traces", variant.root, variant.env + on)]
    return out


@contextmanager
def compared(args: Any, variants: list[Variant], report: Report) -> Iterator[list[Variant]]:
    """The variants to measure: ``--variant``'s as given; with ``--against REF`` (or no
    ``--variant``), ``base`` = REF in a temporary worktree first, then ``--variant``'s or
    ``change`` = the working tree. Says in the report which commit each side is."""
    ref = getattr(args, "against", None)
    if args.variant and ref is None:
        yield variants
        return
    if ref is None:
        commit, why = against.default_ref(ROOT)
    else:
        commit, why = against.resolve(ROOT, ref), f"`{ref}`"
    with against.worktree(ROOT, commit) as tree:
        base = Variant("base", tree)
        others = list(args.variant) or [Variant("change", ROOT)]
        chosen = [base, *others]
        if len({v.name for v in chosen}) != len(chosen):
            raise SystemExit("with --against, no --variant may be named 'base'")
        report.data["variants"] = Report(report.subcommand, chosen).data["variants"]
        head = against.git(ROOT, "rev-parse", "HEAD")
        old, new = against.side(ROOT, commit, working_tree=False), against.side(ROOT, head, working_tree=True)
        report.data["against"] = {"ref": ref, "commit": commit, "why": why, "head": head, "changed": new.changed}
        edits = f"{len(new.changed)} uncommitted file(s) under gateway/" if new.changed else "no uncommitted change"
        here = f"HEAD and {edits}" if head == commit else f"{new.describe()}, {edits}"
        described = [
            f"`{v.name}` = " + (f"the working tree ({here})" if v.root == ROOT else str(v.root)) for v in others
        ]
        report.add(
            f"Compared: `base` = {why}: {old.describe()}, checked out in a temporary worktree; "
            + "; ".join(described)
            + ".",
            "",
        )
        if all(v.root == ROOT for v in others) and commit == head and not new.changed:
            report.add(
                "The working tree has no changes under gateway/: both sides run the same code, so the "
                "intervals show the noise alone.",
                "",
            )
        log(f"base = {commit[:10]} ({why}) in {tree}")
        yield chosen


def run(args: Any, variants: list[Variant], report: Report) -> None:
    with compared(args, variants, report) as chosen, OtlpSink() as sink:
        if getattr(args, "traced", False):
            chosen = traced(chosen, sink)
        measure(args, chosen, report)
        if sink.exports:
            report.add(f"Spans exported to the sink: {sink.exports} exports, {sink.bytes:,} bytes.", "")


def wanted_features(args: Any) -> list[str]:
    """``--features`` with what their added costs are over (plain, and ``plain, scripted`` for
    logprobs), in the order of ``FEATURES``."""
    names = [n.strip() for n in (getattr(args, "features", None) or "").split(",") if n.strip()]
    known = {f.name for f in FEATURES}
    unknown = set(names) - known
    if unknown:
        raise SystemExit(f"unknown --features {sorted(unknown)}; of: {', '.join(sorted(known))}")
    chosen = set(names or known) | {"plain"} | {REFERENCE[n] for n in names if n in REFERENCE}
    return [f.name for f in FEATURES if f.name in chosen]


def measure(args: Any, variants: list[Variant], report: Report) -> None:
    runs: dict[str, list[dict[str, Any]]] = {v.name: [] for v in variants}
    counts: dict[str, dict[str, Any]] = {}
    features = wanted_features(args)
    workdir = Path(tempfile.mkdtemp(prefix="bench-micro-"))
    with Stack([], workdir) as stack:
        spec = {
            "triton_url": stack.triton.grpc_url,
            "repositories": [str(REFERENCE_REPOSITORY), str(TEST_REPOSITORY)],
            "prompt": prompt_text(args.prompt_bytes),
            "tokens": args.tokens,
            "requests": args.requests,
            "features": features,
        }
        for round_ in range(args.repeat):
            for variant in variants if round_ % 2 == 0 else variants[::-1]:
                # The parsers' µs per feed once per variant: best-of figures, not paired.
                result = run_worker(variant, {**spec, "parsers": round_ == 0})
                per_token(result, args.tokens)
                runs[variant.name].append(result)
                plain = result["features"]["plain"]
                log(
                    f"  micro round {round_ + 1}/{args.repeat} {variant.name}: {plain['us_per_token']:.1f} µs/token, "
                    f"{plain['us_per_request']:.0f} µs/request (plain)"
                )
        why_not = instruction_plan(args)
        if why_not is None:
            counts = count_instructions(args, variants, {**spec, "features": features}, workdir)
    report.add(
        f"## The app in process: chat, {args.prompt_bytes:,} B prompt, {args.tokens}-token streams, one at a time",
        "",
        f"The event loop thread's CPU, medians over {args.repeat} round(s) of one process per variant (in ABBA "
        f"order), each process {args.requests} requests of each kind and as many of one token, alternated. "
        f"µs per token: tokens that arrive together leave as one chunk, and most of a stream's cost is per "
        f"chunk, so each process's {args.tokens}-token streams' cost is read at {args.tokens} chunks off a "
        "robust line through (chunks, cost), less the median 1-token request, over "
        f"{args.tokens - 1}: the cost when every token is a wake-up of its own, as at c = 1. *Added*: the "
        "kind's figure less the plain stream's in the same process (logprobs: less the plain stream of the "
        "same `scripted` model), the median over rounds.",
        "",
    )
    time_tables(args, variants, runs, features, report)
    if counts:
        instruction_tables(args, variants, counts, report)
        report.add(f"callgrind's dumps (`callgrind_annotate` reads them): {workdir}/callgrind-*", "")
    elif why_not:
        report.add(f"Instructions: not counted ({why_not}).", "")
    missing_notes(variants, runs, counts, report)
    parser_tables(variants, runs, report)
    report.data["micro"] = runs
    report.data["instructions"] = counts


def per_token(result: dict[str, Any], tokens: int) -> None:
    """Each feature's µs per token as if every token were a chunk of its own (one wake-up each,
    as at c = 1): its long streams' cost read at ``tokens`` chunks (``compare.cost_at``), less
    the median one-token request, over ``tokens - 1``."""
    for figures_ in result["features"].values():
        at = cost_at(figures_["long_chunks"], figures_["long_us"], tokens)
        figures_["us_per_token"] = (at - statistics.median(figures_["short_us"])) / (tokens - 1)


def figures(results: list[dict[str, Any]], feature: str, key: str) -> list[float | None]:
    """One figure of one feature, round by round (None where that round lacks it)."""
    out: list[float | None] = []
    for result in results:
        value = result.get("features", {}).get(feature, {}).get(key)
        out.append(float(value) if isinstance(value, (int, float)) else None)
    return out


def added_cell(results: list[dict[str, Any]], feature: str, key: str) -> str:
    """The feature's added cost over its reference, both from the same processes."""
    if feature == "plain":
        return "–"
    reference = REFERENCE.get(feature, "plain")
    value = added(figures(results, feature, key), figures(results, reference, key))
    return "–" if value is None else fmt(value, 1 if key == "us_per_token" else 0, sign=True)


def change_cells(change: Change | None) -> list[str]:
    """The change in %, its interval and verdict."""
    if change is None:
        return ["–", "–", "–"]
    low, high = change.interval
    return [f"{change.percent:+.1f} %", f"{low:+.1f} … {high:+.1f} %", change.verdict]


def median_cell(values: list[float | None], digits: int) -> str:
    present = [v for v in values if v is not None]
    return fmt(statistics.median(present), digits) if present else "–"


ROWS = {
    "us_per_token": ("µs per token (a chunk per token)", 1),
    "us_per_request": ("µs per 1-token request", 0),
}


def time_tables(
    args: Any, variants: list[Variant], runs: dict[str, list[dict[str, Any]]], features: list[str], report: Report
) -> None:
    """Per token and per request: one table per compared variant (each against the first), or
    the figures alone for one variant."""
    first = variants[0]
    compared_data: dict[str, Any] = {}
    for key, (what, digits) in ROWS.items():
        rows_for = [*features, "plain, every thread"] if key == "us_per_request" else features
        for other in variants[1:] or [first]:
            names = [first.name] if other is first else [first.name, other.name]
            title = f"### {what}" + ("" if other is first else f": `{other.name}` against `{first.name}`")
            header = ["request", *(f"`{n}`" for n in names)]
            if other is not first:
                header += ["change", f"{int(100 * 0.95)} % interval", "verdict"]
            header += [f"added, `{n}`" for n in names]
            if key == "us_per_token":
                header.append(f"chunks per stream ({' / '.join(names)})")
            rows = []
            for feature in rows_for:
                source, figure = (
                    ("plain", "process_us_per_request") if feature == "plain, every thread" else (feature, key)
                )
                series = [figures(runs[n], source, figure) for n in names]
                row = [TITLES.get(feature, "plain: every thread's CPU (mean per request)")]
                row += [median_cell(s, digits) for s in series]
                if other is not first:
                    change = compare(series[0], series[1])
                    row += change_cells(change)
                    compared_data.setdefault(other.name, {}).setdefault(key, {})[feature] = (
                        None if change is None else _plain(change)
                    )
                row += [added_cell(runs[n], source, figure) if feature != "plain, every thread" else "–" for n in names]
                if key == "us_per_token":
                    row.append(
                        " / ".join(median_cell(figures(runs[n], feature, "chunks_per_stream"), 0) for n in names)
                    )
                rows.append(row)
            report.add(title, "")
            report.table(header, rows)
    if len(variants) > 1:
        report.add(*verdict_notes(args, variants, runs), "")
    report.data["micro_compared"] = compared_data


def _plain(change: Change) -> dict[str, float]:
    """A ``Change`` as JSON (slots: no ``__dict__``)."""
    return {
        "base": change.base,
        "change": change.change,
        "ratio": change.ratio,
        "low": change.low,
        "high": change.high,
        "rounds": change.rounds,
    }


def verdict_notes(args: Any, variants: list[Variant], runs: dict[str, list[dict[str, Any]]]) -> list[str]:
    """How to read the verdicts, and how many rounds this run's spread says a 5 % move needs."""
    first, other = variants[0].name, variants[1].name

    def ratios(key: str) -> list[float]:
        pairs = compare_pairs(figures(runs[first], "plain", key), figures(runs[other], "plain", key))
        return [c / b for b, c in pairs if b > 0]

    lines = [
        f"*change*: the median over rounds of `{other}` / `{first}` in the same round; *interval*: a bootstrap "
        f"95 % interval of that median over the rounds (seed {SEED}); *verdict*: `slower` or `faster` when the "
        "whole interval lies on one side of 0 %, else `within noise` (at 95 %, about one row in twenty of an A/A "
        "run, the same tree on both sides, says otherwise by chance)."
    ]
    kinds = (("us_per_token", "µs/token"), ("us_per_request", "µs/request"))
    needed = {what: rounds_to_see(ratios(key)) for key, what in kinds}
    said = [f"{what} ~{n}" for what, n in needed.items() if n is not None]
    if said:
        lines.append(
            f"Rounds this run's spread (plain) needs for an interval of about ±5 %: {', '.join(said)} "
            f"(this run: {args.repeat})."
        )
    return lines


def instruction_plan(args: Any) -> str | None:
    """None when instructions are to be counted, else why not (the report says it)."""
    wanted = getattr(args, "instructions", None)
    if wanted is False:
        return "off: --no-instructions"
    return instructions.unavailable()


def count_instructions(
    args: Any, variants: list[Variant], spec: dict[str, Any], workdir: Path
) -> dict[str, dict[str, Any]]:
    """Each variant's instruction counts: one process under callgrind per variant, two at a time
    (the counts do not depend on the machine's speed; the pacing keeps each token a wake-up of its
    own as long as the process keeps up, which the chunk counts show). Killed if this process is
    interrupted."""
    library = instructions.build_library(workdir)
    counting = {
        **spec,
        "mode": "instructions",
        "callgrind_library": str(library),
        "tokens": args.instruction_tokens,
        "requests": args.instruction_requests,
        "delay": args.instruction_delay,
    }

    def result(variant: Variant, process: subprocess.Popen[bytes]) -> dict[str, Any]:
        done = finish_worker(variant, process, timeout=3600)
        per = instructions.per_feature(
            instructions.read_dumps(outdirs[variant.name]), done["dumps"], counting["requests"], counting["tokens"]
        )
        return {
            "features": {name: {"per_token": c.per_token, "per_request": c.per_request} for name, c in per.items()},
            "chunks": done["chunks"],
            "missing": done["missing"],
        }

    outdirs = {v.name: workdir / f"callgrind-{v.name}" for v in variants}
    out: dict[str, dict[str, Any]] = {}
    for start in range(0, len(variants), 2):
        batch = variants[start : start + 2]
        log("  micro instructions under valgrind (~1-2 min): " + ", ".join(v.name for v in batch))
        processes: list[tuple[Variant, subprocess.Popen[bytes]]] = []
        try:
            for variant in batch:
                outdirs[variant.name].mkdir(exist_ok=True)
                prefix = instructions.valgrind_command(outdirs[variant.name])
                processes.append((variant, start_worker(variant, counting, prefix, {"PYTHONHASHSEED": "0"})))
            for variant, process in processes:
                out[variant.name] = result(variant, process)
        finally:
            for _, process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
    return out


def instruction_tables(args: Any, variants: list[Variant], counts: dict[str, dict[str, Any]], report: Report) -> None:
    """Mi instructions per token and per request, each side, the change, and each feature's added
    count over plain."""
    tokens, requests = args.instruction_tokens, args.instruction_requests
    names = [v.name for v in variants]
    piled = [
        f"`{name}` {feature}: {min(chunks)} chunks"
        for name in names
        for feature, chunks in counts[name]["chunks"].items()
        if min(chunks) < tokens
    ]
    report.add(
        "## Instructions (valgrind), the event loop thread",
        "",
        f"Counted by callgrind in one process per variant: {requests} requests of {tokens} tokens and {requests} of "
        f"one per kind, on the `scripted` model sending a token every {args.instruction_delay * 1000:.0f} ms (a "
        "wake-up per token), each batch after a full garbage collection. Mi per token: (long − short) / "
        f"({requests} × {tokens - 1}); per request: short / {requests}. The same tree repeats within "
        f"{instructions.REPEAT_TOLERANCE:.0%}, so a smaller change is within noise. *Added*: less the plain "
        "stream's count in the same process.",
        "",
    )
    if piled:
        report.add(
            "Tokens piled up (fewer chunks than tokens; those counts are less exact): " + "; ".join(piled) + ".", ""
        )
    for key, what, digits in (
        ("per_token", "Mi instructions per token", 4),
        ("per_request", "Mi instructions per 1-token request", 3),
    ):
        header = ["request", *(f"`{n}`" for n in names)]
        for other in names[1:]:
            header += [f"change, `{other}`", "verdict"] if len(names) > 2 else ["change", "verdict"]
        header += [f"added, `{n}`" for n in names]
        rows = []
        for feature in [f.name for f in FEATURES if any(f.name in counts[n]["features"] for n in names)]:
            values = [counts[n]["features"].get(feature, {}).get(key) for n in names]
            row = [TITLES[feature], *("–" if v is None else f"{v / 1e6:.{digits}f}" for v in values)]
            for value in values[1:]:
                if value is None or values[0] is None:
                    row += ["–", "–"]
                else:
                    percent, verdict = instruction_change(values[0], value, instructions.REPEAT_TOLERANCE)
                    row += [f"{percent:+.1f} %", verdict]
            for n, value in zip(names, values, strict=True):
                plain = counts[n]["features"].get("plain", {}).get(key)
                nothing = feature == "plain" or value is None or plain is None
                row.append("–" if nothing else f"{(value - plain) / 1e6:+.{digits}f}")
            rows.append(row)
        report.add(f"### {what}", "")
        report.table(header, rows)


def missing_notes(
    variants: list[Variant], runs: dict[str, list[dict[str, Any]]], counts: dict[str, dict[str, Any]], report: Report
) -> None:
    """What a tree could not run, and why: its cells say –."""
    notes = []
    for variant in variants:
        reasons: dict[str, str] = {}
        for result in [*runs[variant.name], counts.get(variant.name, {})]:
            for feature, why in result.get("missing", {}).items():
                reasons.setdefault(feature, why)
        notes += [f"- `{variant.name}`, {TITLES.get(f, f)}: {why}" for f, why in reasons.items()]
    if notes:
        report.add("Not measured (–):", "", *notes, "")


def parser_tables(variants: list[Variant], runs: dict[str, list[dict[str, Any]]], report: Report) -> None:
    """The parsers' and contracts' µs per feed or token, each variant's first round, side by side."""
    names = [v.name for v in variants]
    first = {n: runs[n][0] for n in names}
    sections = (
        ("reasoning_parsers_us_per_feed", "Reasoning parsers inside the reasoning, 4-character pieces, µs per feed", 3),
        (
            "streamed_arguments_us_per_feed",
            "A call's string argument as it streams, 4-character pieces, µs per feed",
            3,
        ),
        ("contracts_us_per_token", "Each backend contract: a response read and assembled, µs per token", 2),
        ("tool_parsers_us_per_feed", "Tool-call parsers on plain prose, 4-character pieces, µs per feed", 3),
    )
    for key, title, digits in sections:
        tables = {n: first[n].get(key) or {} for n in names}
        rows_names = list(dict.fromkeys(name for table in tables.values() for name in table))
        if not rows_names:
            continue
        report.add(f"## {title}", "")
        if key == "contracts_us_per_token":
            report.add(
                "One token a response, 64 tokens of prose, in process (bench/contracts.py): the part of a "
                "token's path that differs between layouts. Best-of figures of one process per variant.",
                "",
            )
        report.table(
            ["parser" if "parser" in key else "layout", *(f"`{n}`" for n in names)],
            [[row, *(fmt(tables[n].get(row), digits) for n in names)] for row in rows_names],
        )
