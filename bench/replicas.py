"""``replicas``: one gateway over three Triton replicas, in three phases (``--phase``, default all).

* ``chaos`` (``bench/replicas_chaos.py``): streams while replicas are killed or drained under them
  and started again: streams lost (bar: 0), migrations and the latency each adds, and a sample
  of completed streams asked again uninterrupted (greedy: the same text, bar: 0 mismatches).
* ``slow`` (``bench/replicas_slow.py``): one replica slower per decode step: its share of the
  requests against its share of the speed (bar: within 20 %).
* ``prefix`` (``bench/replicas_prefix.py``): multi-turn conversations with shared system prompts
  over the ``prefix_cache`` test model, ``--routing-policy affinity``: the replicas' prefix-cache
  hit rate, per variant side by side (bar: within 10 % of the first variant's).

Each phase starts its own three tritonservers (each its own ports, metrics included) and passes
``--triton-url a,b,c --triton-metrics pa,pb,pc`` to its gateway, so the gateway reads every
replica's engine load (a tree whose settings lack ``triton_metrics`` runs without the flag).
``chaos`` and ``slow`` run the last ``--variant`` (the change, in ``--variant base=... --variant
change=.``); ``prefix`` runs every variant, in order, the first as the base. What they share (the
Tritons, the client, the Prometheus pages) is in ``bench/replicas_fleet.py``; the chaos phase's
pure parts (schedule, victims, summaries) in ``bench/replicas_strikes.py``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from bench.report import Report
from bench.stack import Variant, log

PHASES = ("chaos", "slow", "prefix")

SETTINGS = {
    "chaos": "seconds streams max_tokens migration_limit seed verify",
    "slow": "slow_seconds slow_users slow_max_tokens slow_delay_ms calibrate",
    "prefix": "seconds conversations turns concurrency system_prompts system_chars user_chars prefix_max_tokens "
    "cache_blocks block_chars prefill_us_per_char",
}
"""The knobs each phase's report records."""


def parse_phases(text: str) -> list[str]:
    """``--phase``'s comma list, in the order given, each once."""
    phases = list(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    unknown = [p for p in phases if p not in PHASES]
    if unknown or not phases:
        raise ValueError(f"--phase takes a comma list of {', '.join(PHASES)}; got {text!r}")
    return phases


def slow_seconds(args: Any) -> float:
    """``slow``'s window: ``--slow-seconds``, else ``--seconds`` up to 40 (its figures are shares,
    settled well before that; the default run stays near 6 minutes)."""
    return float(args.slow_seconds if args.slow_seconds is not None else min(args.seconds, 40.0))


def run(args: Any, variants: list[Variant], report: Report) -> int:
    """Every phase asked for, in order; 1 if any missed its bar."""
    from bench import replicas_chaos, replicas_prefix, replicas_slow

    args.slow_seconds = slow_seconds(args)
    phases = parse_phases(args.phase)
    report.data["settings"] = {p: {k: getattr(args, k) for k in SETTINGS[p].split()} for p in phases}
    report.data["phases"] = {}
    verdicts: dict[str, bool | None] = {}
    for phase in phases:
        workdir = Path(tempfile.mkdtemp(prefix=f"bench-replicas-{phase}-"))
        log(f"phase {phase} (logs in {workdir})")
        results: dict[str, Any]
        if phase == "chaos":
            results = replicas_chaos.run(args, variants[-1], workdir)
            replicas_chaos.write(report, results, args)
        elif phase == "slow":
            results = replicas_slow.run(args, variants[-1], workdir)
            replicas_slow.write(report, results, args)
        else:
            results = replicas_prefix.run(args, variants, workdir)
            replicas_prefix.write(report, results, args)
        report.data["phases"][phase] = results
        verdicts[phase] = results["verdict"]["ok"]
    report.add("## Bars", "")
    said = {True: "yes", False: "**no**", None: "– (one variant: no base to compare with)"}
    report.table(["phase", "bar met"], [[p, said[ok]] for p, ok in verdicts.items()])
    return 1 if False in verdicts.values() else 0
