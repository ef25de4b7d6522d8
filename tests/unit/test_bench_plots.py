"""``bench``'s plots (bench/plots.py): the report-to-lines mapping of ``load``, ``prompts`` and
``soak`` apart from drawing, then a PNG drawn from each small synthetic report, and the one line
a run without matplotlib prints instead."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from bench import plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def header(**extra: Any) -> dict[str, Any]:
    """What ``Report`` puts at the top of every report's JSON."""
    return {
        "command": ".venv/bin/python -m bench load --variant base=/tmp/base --variant change=.",
        "started": "2026-12-03 14:05:09 UTC",
        "machine": {"cpu": "AMD EPYC", "cores": 2},
        "variants": [
            {"name": "base", "tree": "/tmp/base", "env": {}, "commit": "abc1234"},
            {"name": "change", "tree": "/work/main", "env": {}, "commit": "unknown"},
        ],
        **extra,
    }


def side(tokens: float, p50: float | None, p95: float | None, errors: int = 0) -> dict[str, Any]:
    return {"tokens_per_s": tokens, "ttft_p50_ms": p50, "ttft_p95_ms": p95, "errors": errors}


def load_report() -> dict[str, Any]:
    figures = {  # c: floor, base, change
        1: (side(900.0, 2.0, 3.0), side(850.0, 2.5, 4.0), side(900.0, 2.4, 3.5)),
        16: (side(3000.0, 10.0, 20.0), side(3300.0, 12.0, 25.0), side(3630.0, 11.0, 22.0)),
        64: (side(4000.0, None, None), side(4400.0, None, None), side(4200.0, None, None)),
    }
    levels = [
        {"concurrency": c, "medians": dict(zip(("floor", "base", "change"), sides, strict=True)), "runs": {}}
        for c, sides in figures.items()
    ]
    return header(scenarios=[{"scenario": "chat", "what": "chat completions, 10 KB prompt", "levels": levels}])


def prompts_report() -> dict[str, Any]:
    sweep = []
    for path in ("/v1/completions", "/v1/chat/completions"):
        for size, ms in ((100, 1.0), (10_000, 1.5), (100_000, 4.0)):
            medians = {
                "floor": side(0.0, ms, ms * 2),
                "base": side(0.0, ms + 0.5, None),
                "change": side(0.0, ms + 0.3, ms * 3),
            }
            sweep.append({"scenario": f"x-{size}B", "path": path, "prompt_bytes": size, "medians": medians})
    return header(sweep=sweep[::-1])  # the order of the records is not the order of the axis


def soak_report() -> dict[str, Any]:
    def timeline(rss: float) -> list[dict[str, Any]]:
        return [
            {"t_s": t + 0.1, "tokens_per_s": 5000.0 + t, "ttft_p50_ms": 40.0, "ttft_p95_ms": 90.0,
             "rss_mb": {"gateway": rss + t, "triton": 900.0}, "errors": 0}
            for t in range(5)
        ]  # fmt: skip

    result = {
        "requests_ok": 4273,
        "errors": 0,
        "rss_start_mb": 101.0,
        "gateway_rss_mb_peak": 149.0,
        "rss_end_mb": 149.0,
    }
    soak = {"base": {**result, "timeline": timeline(100.0)}, "change": {**result, "timeline": timeline(120.0)}}
    return header(soak=soak, soak_run={"streams": 500, "tokens": 64, "duration_s": 60.0})


def lines(panel: plots.Panel) -> dict[str, plots.Series]:
    """A panel's lines by legend name, `` p95`` added to the dashed ones."""
    return {line.label + (" p95" if line.dashed else ""): line for line in panel.series}


# -- the mapping ------------------------------------------------------------------------------------


def test_load_maps_each_side_to_a_line_of_tokens_per_s_against_concurrency() -> None:
    figure = plots.load_figure(load_report())
    assert figure is not None
    assert figure.sides == ("floor", "base", "change")
    ((throughput, latency),) = figure.rows
    by_label = lines(throughput)
    assert list(by_label) == ["floor (Triton direct, no gateway)", "base (abc1234)", "change"]
    assert by_label["base (abc1234)"].x == (1.0, 16.0, 64.0)
    assert by_label["base (abc1234)"].y == (850.0, 3300.0, 4400.0)
    assert by_label["change"].y == (900.0, 3630.0, 4200.0)
    assert throughput.xlog == 2 and throughput.xticks == ((1.0, "1"), (16.0, "16"), (64.0, "64"))
    assert "chat (chat completions, 10 KB prompt)" in throughput.title and "higher is better" in throughput.title
    assert "tokens/s, change / base: c = 1 1.06, c = 16 1.10, c = 64 0.95" in throughput.note


def test_load_draws_ttft_p50_solid_and_p95_dashed_and_says_where_there_is_none() -> None:
    figure = plots.load_figure(load_report())
    assert figure is not None
    latency = figure.rows[0][1]
    by_label = lines(latency)
    assert by_label["change"].y == (2.4, 11.0) and not by_label["change"].dashed
    assert by_label["change p95"].y == (3.5, 22.0) and by_label["change p95"].dashed
    assert by_label["change"].x == (1.0, 16.0)  # c = 64 had no TTFT: left out, not drawn as 0
    assert "TTFT p50, change − base: c = 1 -0.10 ms, c = 16 -1.00 ms" in latency.note
    assert "no TTFT at c = 64" in latency.note
    assert latency.ylog is False  # 2 to 25 ms: within LOG_RANGE


def test_one_variant_is_compared_with_the_floor() -> None:
    data = load_report()
    data["variants"] = data["variants"][:1]
    figure = plots.load_figure(data)
    assert figure is not None
    assert figure.sides == ("floor", "base")
    assert "base / floor: c = 1 0.94" in figure.rows[0][0].note


def test_prompts_map_each_endpoint_to_a_panel_with_sizes_in_order() -> None:
    figure = plots.prompts_figure(prompts_report())
    assert figure is not None
    ((chat, completions),) = figure.rows  # the endpoints in the order the report met them
    assert chat.title.startswith("chat completions") and completions.title.startswith("completions")
    by_label = lines(completions)
    assert by_label["floor (Triton direct, no gateway)"].x == (100.0, 10_000.0, 100_000.0)
    assert by_label["floor (Triton direct, no gateway)"].y == (1.0, 1.5, 4.0)
    assert by_label["base (abc1234) p95"].y == ()  # no p95 in the report: no line rather than zeros
    assert completions.xticks == ((100.0, "100 B"), (10_000.0, "10 KB"), (100_000.0, "100 KB"))
    assert "change − base: 100 B -0.20 ms, 10 KB -0.20 ms, 100 KB -0.20 ms" in completions.note


def test_soak_maps_each_variant_to_its_lines_over_time() -> None:
    figure = plots.soak_figure(soak_report())
    assert figure is not None
    assert figure.sides == ("base", "change")
    (memory,), (throughput,), (latency,) = figure.rows
    assert [line.side for line in memory.series] == ["base", "change"]
    assert memory.series[1].x == (0.1, 1.1, 2.1, 3.1, 4.1)
    assert memory.series[1].y == (120.0, 121.0, 122.0, 123.0, 124.0)  # the gateway's RSS, not Triton's
    assert throughput.series[0].y == (5000.0, 5001.0, 5002.0, 5003.0, 5004.0)
    assert [(line.side, line.dashed) for line in latency.series] == [
        ("base", False), ("base", True), ("change", False), ("change", True)
    ]  # fmt: skip
    assert memory.series[0].label == "base (abc1234)"
    assert "streams checked: base 4,273 (0 errors, 0 unfinished)" in throughput.note
    assert "500 streams of 64 tokens for 60 s" in figure.title
    assert "base 101 / 149 / 149 MB" in memory.note


def test_reports_without_figures_have_no_plot() -> None:
    assert plots.load_figure(header(scenarios=[])) is None
    assert plots.prompts_figure(header(stall={})) is None  # --sections stall
    assert plots.soak_figure(header(soak={"base": {"requests_ok": 1}})) is None  # a report from before timelines


# -- drawing ---------------------------------------------------------------------------------------


def png_size(path: Path) -> tuple[int, int]:
    """The PNG's size from its header, after Pillow has checked the whole file."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    with Image.open(path) as image:
        image.verify()
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@pytest.mark.parametrize(
    ("subcommand", "report", "rows"),
    [("load", load_report, 1), ("prompts", prompts_report, 1), ("soak", soak_report, 3)],
)
def test_each_subcommand_writes_a_png_of_sensible_size(
    subcommand: str, report: Any, rows: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / f"{subcommand}.png"
    assert plots.write(subcommand, report(), path) == path
    width, height = png_size(path)
    assert 600 <= width <= 2000 and 350 * rows <= height <= 600 * rows + 200
    assert 10_000 < path.stat().st_size < 500_000
    assert f"Plot: {path}" in capsys.readouterr().err


def test_without_matplotlib_the_plot_is_skipped_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    path = tmp_path / "load.png"
    assert plots.write("load", load_report(), path) is None
    assert not path.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "plot skipped: matplotlib is not installed" in err[0] and "bench" in err[0]


def test_a_report_is_plotted_again_beside_itself(tmp_path: Path) -> None:
    report = tmp_path / "soak-20261203-140509.json"
    report.write_text(json.dumps(soak_report()))
    assert plots.main([str(report)]) == 0
    assert png_size(report.with_suffix(".png"))[0] > 600
    assert plots.main([str(tmp_path / "micro-20261203-140509.json")]) == 1  # micro has no plot
