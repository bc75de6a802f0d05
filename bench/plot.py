"""Draw the throughput figures of a benchmark run as an SVG bar chart (no dependencies).

``python -m bench.plot bench-results.json docs/benchmarks-throughput.svg``: one bar per
emulator backend and one for the stock-pyte reference, on a log scale, each labelled
with its median MB/s; the goals are drawn as marks.
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


def main(argv: list[str]) -> int:
    source, target = Path(argv[0]), Path(argv[1])
    data = json.loads(source.read_text())
    target.write_text(svg(_bars(data), "Emulator throughput, 20 MB realistic stream (red: goal)"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
