"""Draw a benchmark run's figures as SVG charts (no dependencies).

``python -m bench.plot bench-results.json docs/benchmarks-throughput.svg
[docs/benchmarks-idle.svg [docs/benchmarks-scale-cpu.svg docs/benchmarks-scale-pss.svg]]``:
the throughput chart has one bar per emulator backend and one for the stock-pyte
reference, on a log scale, each labelled with its median MB/s, the goals drawn as
marks; the idle chart draws the idle CPU of the service against the pane count, one
line per backend, with the goal as a dashed line; the two scale charts draw
``scale``'s idle CPU (first minute, settled) and total PSS against the pane count.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from xml.sax.saxutils import escape

WIDTH, BAR_H, GAP, LEFT, TOP = 640, 28, 14, 150, 40


def _bars(data: dict[str, object]) -> list[tuple[str, float, float | None]]:
    bars: list[tuple[str, float, float | None]] = []
    reference = None
    for fig in data["figures"]:  # type: ignore[union-attr]
        name = str(fig["name"])
        if not name.startswith("throughput.") or name.endswith(".cpu"):
            continue
        bars.append((f"{name.split('.', 1)[1]} backend", float(fig["median"]), fig["limit"]))
        reference = fig["reference_median"]
    if reference:
        bars.append(("stock pyte", float(reference), None))
    return bars


def svg(bars: list[tuple[str, float, float | None]], title: str) -> str:
    top_value = max(max(v for _n, v, _g in bars), max((g or 0) for _n, _v, g in bars))
    high = 10 ** math.ceil(math.log10(top_value))
    low = 0.01
    span = WIDTH - LEFT - 60

    def x(value: float) -> float:
        return LEFT + span * (math.log10(max(value, low)) - math.log10(low)) / (
            math.log10(high) - math.log10(low)
        )

    height = TOP + len(bars) * (BAR_H + GAP) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        'font-family="sans-serif" font-size="13">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-weight="bold">'
        f"{escape(title)}</text>",
    ]
    tick = low
    while tick <= high:
        tx = x(tick)
        out.append(
            f'<line x1="{tx:.1f}" y1="{TOP - 6}" x2="{tx:.1f}" y2="{height - 34}" stroke="#ddd"/>'
        )
        out.append(
            f'<text x="{tx:.1f}" y="{height - 18}" text-anchor="middle" fill="#555">{tick:g}</text>'
        )
        tick *= 10
    out.append(
        f'<text x="{LEFT + span / 2}" y="{height - 2}" text-anchor="middle" fill="#555">'
        "MB/s (log scale), median of repeats</text>"
    )
    for index, (name, value, goal) in enumerate(bars):
        y = TOP + index * (BAR_H + GAP)
        colour = "#888" if name == "stock pyte" else "#3a7bd5"
        out.append(
            f'<text x="{LEFT - 8}" y="{y + BAR_H / 2 + 5}" text-anchor="end">{escape(name)}</text>'
        )
        out.append(
            f'<rect x="{LEFT}" y="{y}" width="{x(value) - LEFT:.1f}" height="{BAR_H}" '
            f'fill="{colour}"/>'
        )
        out.append(f'<text x="{x(value) + 6:.1f}" y="{y + BAR_H / 2 + 5}">{value:.3g}</text>')
        if goal:
            gx = x(float(goal))
            out.append(
                f'<line x1="{gx:.1f}" y1="{y - 3}" x2="{gx:.1f}" y2="{y + BAR_H + 3}" '
                'stroke="#d33" stroke-width="3"/>'
            )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _idle_points(data: dict[str, object]) -> dict[str, list[tuple[int, float]]]:
    """Per backend: (pane count, median % of a core) from the ``idle.*.cpu_at_N_panes``."""
    series: dict[str, list[tuple[int, float]]] = {}
    for fig in data["figures"]:  # type: ignore[union-attr]
        parts = str(fig["name"]).split(".")
        if len(parts) == 3 and parts[0] == "idle" and parts[2].startswith("cpu_at_"):
            count = int(parts[2].removeprefix("cpu_at_").removesuffix("_panes"))
            series.setdefault(parts[1], []).append((count, float(fig["median"])))
    return {kind: sorted(points) for kind, points in series.items()}


IDLE_W, IDLE_H, PAD = 640, 360, 60
COLOURS = ("#3a7bd5", "#e08a1e", "#2a9d5b")


def _scale_points(data: dict[str, object], figure: str) -> list[tuple[int, float]]:
    """(pane count, median) of ``scale.N.<figure>``, by pane count."""
    points: list[tuple[int, float]] = []
    for fig in data["figures"]:  # type: ignore[union-attr]
        parts = str(fig["name"]).split(".")
        if len(parts) == 3 and parts[0] == "scale" and parts[2] == figure:
            points.append((int(parts[1]), float(fig["median"])))
    return sorted(points)


def idle_svg(
    series: dict[str, list[tuple[int, float]]],
    goal: float,
    title: str,
    unit: str = "% of one core (median)",
    goal_label: str = "",
) -> str:
    """A figure (idle CPU by default) against the pane count, one line per series."""
    max_x = max((n for points in series.values() for n, _ in points), default=1) or 1
    max_y = max([goal * 1.5, *(v for points in series.values() for _, v in points)])
    span_x, span_y = IDLE_W - 2 * PAD, IDLE_H - 2 * PAD

    def x(n: float) -> float:
        return PAD + span_x * n / max_x

    def y(v: float) -> float:
        return IDLE_H - PAD - span_y * v / max_y

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{IDLE_W}" height="{IDLE_H}" '
        'font-family="sans-serif" font-size="13">',
        f'<rect width="{IDLE_W}" height="{IDLE_H}" fill="white"/>',
        f'<text x="{IDLE_W / 2}" y="24" text-anchor="middle" font-weight="bold">'
        f"{escape(title)}</text>",
        f'<line x1="{PAD}" y1="{y(0)}" x2="{x(max_x)}" y2="{y(0)}" stroke="#555"/>',
        f'<line x1="{PAD}" y1="{y(0)}" x2="{PAD}" y2="{y(max_y)}" stroke="#555"/>',
        f'<line x1="{PAD}" y1="{y(goal):.1f}" x2="{x(max_x)}" y2="{y(goal):.1f}" '
        'stroke="#d33" stroke-dasharray="6 4"/>',
        f'<text x="{x(max_x) - 4}" y="{y(goal) - 6:.1f}" text-anchor="end" fill="#d33">'
        f"{escape(goal_label or f'goal {goal:g} %')}</text>",
        f'<text x="{PAD + span_x / 2}" y="{IDLE_H - 16}" text-anchor="middle" fill="#555">'
        "idle panes</text>",
        f'<text x="16" y="{PAD + span_y / 2}" text-anchor="middle" fill="#555" '
        f'transform="rotate(-90 16 {PAD + span_y / 2})">{escape(unit)}</text>',
    ]
    for n in sorted({n for points in series.values() for n, _ in points}):
        out.append(
            f'<text x="{x(n):.1f}" y="{y(0) + 18:.1f}" text-anchor="middle" fill="#555">{n}</text>'
        )
    steps = 4
    for i in range(steps + 1):
        v = max_y * i / steps
        out.append(
            f'<text x="{PAD - 8}" y="{y(v) + 4:.1f}" text-anchor="end" fill="#555">{v:.4g}</text>'
        )
    for index, (kind, points) in enumerate(sorted(series.items())):
        colour = COLOURS[index % len(COLOURS)]
        path = " ".join(f"{x(n):.1f},{y(v):.1f}" for n, v in points)
        out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for n, v in points:
            out.append(f'<circle cx="{x(n):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}"/>')
        out.append(
            f'<text x="{PAD + 10}" y="{PAD + 16 * index}" fill="{colour}">{escape(kind)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    """``RESULTS THROUGHPUT_SVG [IDLE_SVG [SCALE_CPU_SVG SCALE_PSS_SVG]]``."""
    source, target = Path(argv[0]), Path(argv[1])
    data = json.loads(source.read_text())
    bars = _bars(data)
    if bars:
        target.write_text(svg(bars, "Emulator throughput, 20 MB realistic stream (red: goal)"))
    if len(argv) > 2:
        title = "Idle panes: CPU of supervisor + template + workers"
        Path(argv[2]).write_text(idle_svg(_idle_points(data), 2.0, title))
    if len(argv) > 4:
        cpu = {
            "first minute": _scale_points(data, "idle_cpu_first_minute"),
            "after 10 s settle": _scale_points(data, "idle_cpu_settled"),
        }
        title = "Many panes: idle CPU of supervisor + template + workers"
        Path(argv[3]).write_text(
            idle_svg(cpu, 3.0, title, goal_label="goal 3 % at 256 (8 % at 1,000)")
        )
        pss = {"total PSS": [(n, v / 1024) for n, v in _scale_points(data, "total_pss")]}
        title = "Many panes: total PSS of supervisor + template + workers"
        Path(argv[4]).write_text(
            idle_svg(pss, 1e9 / 2**30, title, unit="GiB", goal_label="goal 1 GB at 256")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
