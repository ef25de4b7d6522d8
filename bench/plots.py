"""PNG figures of ``load``, ``prompts`` and ``soak``, written beside their reports.

Two steps, so the mapping from figures to lines is tested without drawing: ``load_figure``,
``prompts_figure`` and ``soak_figure`` turn a report's JSON (``Report.data``) into a ``Figure`` of
panels and series, pure data; ``draw`` renders one to a PNG. matplotlib is the optional ``bench``
extra and only ``draw`` imports it, on its Agg canvas (no display, no pyplot state): without it
the bench runs as before and says in one line that the plot was skipped and how to get it.

Every side keeps its colour in every panel (the floor grey, the first variant, the base of an
A/B, blue), TTFT p50 is a solid line and p95 a dashed one, and each panel's title says which way
is better and what the later variants changed against the first, so the figure reads without
the report's tables.
"""

from __future__ import annotations

import io
import json
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.load import FLOOR
from bench.stack import log

PLOTTED = ("load", "prompts", "soak")
INSTALL = "bash scripts/install.sh local,test,speed,bench (or .venv/bin/pip install 'matplotlib>=3.8')"
LOG_RANGE = 30.0
"""A panel's y axis is logarithmic when its largest value is this many times its smallest."""


@dataclass(frozen=True)
class Series:
    """One line: a side's figure; ``side`` picks the colour, ``dashed`` marks p95."""

    side: str
    label: str
    x: tuple[float, ...]
    y: tuple[float, ...]
    dashed: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    xlabel: str
    ylabel: str
    series: tuple[Series, ...]
    xticks: tuple[tuple[float, str], ...] = ()
    xlog: int = 0
    """0: a linear x axis; else the base of a logarithmic one (2 for streams, 10 for bytes)."""
    ylog: bool = False
    note: str = ""
    """A second title line: the later variants against the first, missing points."""


@dataclass(frozen=True)
class Figure:
    title: str
    sides: tuple[str, ...]
    rows: tuple[tuple[Panel, ...], ...]


# --------------------------------------------------------------------------- shared pieces


def number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def side_labels(data: dict[str, Any]) -> dict[str, str]:
    """Legend names: the floor says what it is, a variant its commit."""
    labels = {FLOOR: "floor (Triton direct, no gateway)"}
    for variant in data.get("variants", []):
        commit = variant.get("commit") or "unknown"
        labels[variant["name"]] = variant["name"] if commit == "unknown" else f"{variant['name']} ({commit})"
    return labels


def variant_names(data: dict[str, Any]) -> list[str]:
    return [v["name"] for v in data.get("variants", [])]


def heading(subcommand: str, data: dict[str, Any], what: str) -> str:
    """The figure's title: what ran and when, then the exact command and the machine."""
    machine = data.get("machine", {})
    started = str(data.get("started", ""))[:16]  # to the minute
    return (
        f"bench {subcommand}: {what}, {started}\n"
        f"{data.get('command', '')}  ·  {machine.get('cpu', 'unknown CPU')}, {machine.get('cores', '?')} cores"
    )


def series(side: str, label: str, xs: Iterable[float], ys: Iterable[Any], dashed: bool = False) -> Series:
    """A line through the points that have a value; a missing one (no TTFT in a window) is left out."""
    pairs = [(x, y) for x, y in zip(xs, (number(y) for y in ys), strict=True) if y is not None]
    return Series(side, label, tuple(x for x, _ in pairs), tuple(y for _, y in pairs), dashed)


def lookup(medians: dict[float, Any], key: str) -> Callable[[str, float], float | None]:
    """A side's ``key`` at an x (a level, a prompt size) from the medians kept per x, or None."""
    return lambda side, x: number(medians[x].get(side, {}).get(key))


def ttft_lines(
    sides: Iterable[str], labels: dict[str, str], xs: list[float], medians: dict[float, Any]
) -> tuple[Series, ...]:
    """Every side's TTFT p50 (solid) and p95 (dashed) at each x."""
    return tuple(
        series(s, labels.get(s, s), xs, (lookup(medians, f"ttft_{q}_ms")(s, x) for x in xs), q == "p95")
        for s in sides
        for q in ("p50", "p95")
    )


def log_scale(lines: Iterable[Series]) -> bool:
    values = [y for line in lines for y in line.y if y > 0]
    return bool(values) and max(values) / min(values) >= LOG_RANGE


def versus(
    names: list[str],
    value: Callable[[str, float], float | None],
    xs: list[float],
    where: Callable[[float], str],
    change: Callable[[float, float], str],
    operator: str,
) -> str:
    """Each later variant's ``value`` against the first's at every x, or the one variant's against
    the floor's: the line a reader choosing between them needs, figures beside the lines."""
    if not names:
        return ""
    pairs = [(name, names[0]) for name in names[1:]] or [(names[0], FLOOR)]
    parts = []
    for name, base in pairs:
        cells = []
        for x in xs:
            a, b = value(name, x), value(base, x)
            cells.append(f"{where(x)} {'–' if a is None or b is None else change(a, b)}")
        parts.append(f"{name} {operator} {base}: " + ", ".join(cells))
    return "; ".join(parts)


def times(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "–"


def minus(a: float, b: float) -> str:
    return f"{a - b:+.2f} ms"


def size_label(size: float) -> str:
    if size >= 1_000_000:
        return f"{size / 1_000_000:g} MB"
    return f"{size / 1000:g} KB" if size >= 1000 else f"{size:g} B"


# --------------------------------------------------------------------------- load


def load_figure(data: dict[str, Any]) -> Figure | None:
    """Per scenario, a row: tokens/s and TTFT (p50, p95) against concurrency, every side a line."""
    records = data.get("scenarios") or []
    if not records:
        return None
    names, labels = variant_names(data), side_labels(data)
    sides = (FLOOR, *names)
    rows = []
    for record in records:
        levels = [float(level["concurrency"]) for level in record["levels"]]
        medians = {float(level["concurrency"]): level["medians"] for level in record["levels"]}
        tokens_per_s, ttft_p50 = lookup(medians, "tokens_per_s"), lookup(medians, "ttft_p50_ms")
        ticks = tuple((c, f"{c:g}") for c in levels)
        scenario = f"{record['scenario']} ({record['what']})" if record.get("what") else record["scenario"]
        where = "c = {:g}".format
        tokens = tuple(series(s, labels.get(s, s), levels, (tokens_per_s(s, c) for c in levels)) for s in sides)
        throughput = Panel(
            f"{scenario}\noutput tokens/s, all streams together (higher is better)",
            "concurrent streams (c)",
            "output tokens/s",
            tokens,
            ticks,
            xlog=2,
            note="tokens/s, " + versus(names, tokens_per_s, levels, where, times, "/"),
        )
        ttft = ttft_lines(sides, labels, levels, medians)
        missing = [c for c in levels if all(ttft_p50(s, c) is None for s in sides)]
        levels_with_ttft = [c for c in levels if c not in missing]
        notes = ["TTFT p50, " + versus(names, ttft_p50, levels_with_ttft, where, minus, "−")]
        if missing:
            cs = ", ".join(f"{c:g}" for c in missing)
            notes.append(f"no TTFT at c = {cs}: no stream both began and got its first token in the window")
        latency = Panel(
            f"{scenario}\ntime to first token, p50 solid, p95 dashed (lower is better)",
            "concurrent streams (c)",
            "TTFT, ms",
            ttft,
            ticks,
            xlog=2,
            ylog=log_scale(ttft),
            note="; ".join(notes),
        )
        rows.append((throughput, latency))
    return Figure(heading("load", data, ", ".join(r["scenario"] for r in records)), sides, tuple(rows))


# --------------------------------------------------------------------------- prompts


def endpoint_of(path: str) -> str:
    return "chat completions" if path.endswith("chat/completions") else "completions"


def prompts_figure(data: dict[str, Any]) -> Figure | None:
    """The sweep: per endpoint, TTFT (p50, p95) against the prompt's size at c = 1, every side a line."""
    records = data.get("sweep") or []
    if not records:
        return None
    names, labels = variant_names(data), side_labels(data)
    sides = (FLOOR, *names)
    panels = []
    for endpoint in dict.fromkeys(endpoint_of(r["path"]) for r in records):
        mine = sorted((r for r in records if endpoint_of(r["path"]) == endpoint), key=lambda r: r["prompt_bytes"])
        sizes = [float(r["prompt_bytes"]) for r in mine]
        medians = {float(r["prompt_bytes"]): r["medians"] for r in mine}
        ttft = ttft_lines(sides, labels, sizes, medians)
        panels.append(
            Panel(
                f"{endpoint}, c = 1: time to first token, p50 solid, p95 dashed (lower is better)",
                "prompt size (bytes, log scale)",
                "TTFT, ms",
                ttft,
                tuple((x, size_label(x)) for x in sizes),
                xlog=10,
                ylog=log_scale(ttft),
                note="TTFT p50, " + versus(names, lookup(medians, "ttft_p50_ms"), sizes, size_label, minus, "−"),
            )
        )
    return Figure(heading("prompts", data, "TTFT by prompt size"), sides, (tuple(panels),))


# --------------------------------------------------------------------------- soak


def soak_figure(data: dict[str, Any]) -> Figure | None:
    """Gateway RSS, tokens/s and TTFT over the load's seconds, a line per variant (one after another)."""
    results = {name: r for name, r in (data.get("soak") or {}).items() if r.get("timeline")}
    if not results:
        return None
    labels = side_labels(data)

    def line(name: str, key: str, dashed: bool = False) -> Series:
        points = results[name]["timeline"]
        ys = [p.get("rss_mb", {}).get("gateway") if key == "rss" else p.get(key) for p in points]
        return series(name, labels.get(name, name), [float(p["t_s"]) for p in points], ys, dashed)

    rss_note = "start / peak / end: " + "; ".join(
        f"{n} {number(r.get('rss_start_mb')) or 0:.0f} / {number(r.get('gateway_rss_mb_peak')) or 0:.0f} / "
        f"{number(r.get('rss_end_mb')) or 0:.0f} MB"
        for n, r in results.items()
    )
    seconds = "seconds since the load started"
    ttft = tuple(line(n, f"ttft_{q}_ms", q == "p95") for n in results for q in ("p50", "p95"))
    checked = "streams checked: " + "; ".join(
        f"{n} {r.get('requests_ok', 0):,} ({r.get('errors', 0)} errors, {r.get('unfinished', 0)} unfinished)"
        for n, r in results.items()
    )
    memory = Panel(
        "gateway memory (RSS): flat is good, a climb is a leak",
        seconds,
        "RSS, MB",
        tuple(line(n, "rss") for n in results),
        note=rss_note,
    )
    throughput = Panel(
        "output tokens/s, all streams together, each second (higher is better)",
        seconds,
        "output tokens/s",
        tuple(line(n, "tokens_per_s") for n in results),
        note=checked,
    )
    latency = Panel(
        "time to first token of the streams whose first token came that second, p50 solid, p95 dashed "
        "(lower is better)",
        seconds,
        "TTFT, ms",
        ttft,
        ylog=log_scale(ttft),
    )
    run = data.get("soak_run") or {}
    what = f"{run.get('streams', '?')} streams of {run.get('tokens', '?')} tokens for {run.get('duration_s', 0):.0f} s"
    return Figure(heading("soak", data, what), tuple(results), ((memory,), (throughput,), (latency,)))


FIGURES: dict[str, Callable[[dict[str, Any]], Figure | None]] = {
    "load": load_figure,
    "prompts": prompts_figure,
    "soak": soak_figure,
}


# --------------------------------------------------------------------------- drawing


def draw(figure: Figure, path: Path, dpi: int = 100) -> Path:
    """Render ``figure`` to a PNG at ``path``: 6.5 inches a panel (one panel a row: 11), 4.3 a row."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as Canvas
    from PIL import Image

    columns = max(len(row) for row in figure.rows)
    width, height = (6.5 * columns, 4.3) if columns > 1 else (11.0, 3.4)
    canvas = Canvas(figsize=(width, height * len(figure.rows) + 0.7), layout="constrained")
    FigureCanvasAgg(canvas)
    axes = canvas.subplots(len(figure.rows), columns, squeeze=False)
    variants = [side for side in figure.sides if side != FLOOR]
    colours = {FLOOR: "0.45", **{side: f"C{index}" for index, side in enumerate(variants)}}
    for row, panels in zip(axes, figure.rows, strict=True):
        for index, ax in enumerate(row):
            if index < len(panels):
                draw_panel(ax, panels[index], colours, int(width / columns * 12.5))
            else:
                ax.set_visible(False)
    canvas.suptitle(figure.title, fontsize=10.5)
    rendered = io.BytesIO()
    canvas.savefig(rendered, format="png", dpi=dpi)
    # Line charts need few colours: a 256-colour palette looks the same at a third of the bytes,
    # so a figure can go into docs/ as it is (Pillow is one of the gateway's own dependencies).
    with Image.open(rendered) as image:
        image.convert("RGB").quantize(256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    return path


def draw_panel(ax: Any, panel: Panel, colours: dict[str, str], chars: int) -> None:
    """One panel; a p95 line shares its side's colour and legend entry, and two grey entries
    say which style is which, so the legend names each side once."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    for line in panel.series:
        dense = len(line.x) > 20
        ax.plot(
            line.x,
            line.y,
            color=colours.get(line.side, "black"),
            linestyle="--" if line.dashed else "-",
            marker="s" if line.side == FLOOR else "o",
            markersize=3 if dense else 6,
            linewidth=1.2 if dense else 1.8,
            label="_p95" if line.dashed else line.label,
        )
    if panel.xlog:
        ax.set_xscale("log", base=panel.xlog)
    if panel.xticks:
        ax.set_xticks([x for x, _ in panel.xticks], labels=[text for _, text in panel.xticks])
        ax.xaxis.set_minor_locator(NullLocator())
    values = [y for line in panel.series for y in line.y]
    if panel.ylog:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    elif values:
        ax.set_ylim(0, max(values) * 1.15 or 1.0)  # from 0, and room above the top line for the legend
    ax.set_xlabel(panel.xlabel)
    ax.set_ylabel(panel.ylabel + (", log scale" if panel.ylog else ""))
    ax.set_title(panel.title + (f"\n{wrap(panel.note, chars)}" if panel.note else ""), fontsize=9.5, loc="left")
    ax.grid(True, which="major", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if any(line.dashed for line in panel.series):
        handles += [Line2D([], [], color="0.3", linestyle=style) for style in ("-", "--")]
        labels += ["p50", "p95"]
    if handles:
        ax.legend(handles, labels, fontsize=8, loc="best", handlelength=3)


def wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def write(subcommand: str, data: dict[str, Any], path: Path) -> Path | None:
    """The subcommand's PNG at ``path``, or a line on stderr saying why there is none."""
    figure = FIGURES[subcommand](data)
    if figure is None:
        log(f"plot skipped: the {subcommand} report has nothing to plot")
        return None
    try:
        import matplotlib  # noqa: F401 - only whether it is there
    except ImportError:
        log(f"plot skipped: matplotlib is not installed; {INSTALL}")
        return None
    started = time.perf_counter()
    draw(figure, path)
    log(f"Plot: {path} ({time.perf_counter() - started:.1f} s)")
    return path


def main(argv: list[str]) -> int:
    """``python -m bench.plots bench/results/<subcommand>-<time>.json ...``: each report's PNG
    again beside it (after a change to the plots, or for a report written without matplotlib)."""
    status = 0
    for name in argv:
        report = Path(name)
        subcommand = report.name.split("-", 1)[0]
        if subcommand not in PLOTTED:
            log(f"{report}: not a report of {', '.join(PLOTTED)}")
            status = 1
        elif write(subcommand, json.loads(report.read_text()), report.with_suffix(".png")) is None:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
