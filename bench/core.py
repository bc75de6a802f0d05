"""What every benchmark returns, and how the suite prints and stores it.

A :class:`Figure` is one measured quantity: the median of its repeats, the repeats
themselves, and where a reference was measured in the same run (tmux, stock pyte)
its median and the ratio. ``goal`` states the target in words and ``met`` whether
the median meets it; both are information, never an assertion.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Options:
    """How a run is made: ``smoke`` shrinks every size so everything runs in seconds."""

    smoke: bool = False
    repeats: int = 5
    stream_bytes: int = 20 * 1024 * 1024
    # The pane counts of ``scale`` (1,000 is opt-in: it takes the machine for minutes).
    scale_counts: tuple[int, ...] = (64, 256)

    @property
    def rounds(self) -> int:
        return 1 if self.smoke else self.repeats


@dataclass
class Figure:
    name: str
    unit: str
    values: list[float]
    reference: str | None = None
    reference_values: list[float] = field(default_factory=list)
    goal: str | None = None
    # Lower is better (times, memory) or higher (throughput): decides how "met" reads.
    lower_is_better: bool = True
    limit: float | None = None  # the goal as a number
    limit_on_ratio: bool = True  # the limit applies to the ratio when there is a reference
    note: str = ""

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    @property
    def reference_median(self) -> float | None:
        return statistics.median(self.reference_values) if self.reference_values else None

    @property
    def ratio(self) -> float | None:
        ours, theirs = self.median, self.reference_median
        if ours is None or not theirs:
            return None
        return ours / theirs

    @property
    def met(self) -> bool | None:
        if self.limit is None:
            return None
        value = self.ratio if self.reference_values and self.limit_on_ratio else self.median
        if value is None:
            return None
        return value <= self.limit if self.lower_is_better else value >= self.limit

    def as_json(self) -> dict[str, object]:
        out = asdict(self)
        out.update(
            median=self.median,
            reference_median=self.reference_median,
            ratio=self.ratio,
            met=self.met,
        )
        return out


Benchmark = Callable[[Options], Sequence[Figure]]


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def table(figures: Sequence[Figure]) -> str:
    """The figures as a fixed-width text table."""
    head = ("figure", "median", "unit", "reference", "ref median", "ratio", "goal", "met")
    rows = [head]
    for f in figures:
        met = {True: "yes", False: "NO", None: "-"}[f.met]
        rows.append(
            (
                f.name,
                _fmt(f.median),
                f.unit,
                f.reference or "-",
                _fmt(f.reference_median),
                _fmt(f.ratio),
                f.goal or "-",
                met,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_json(path: Path, figures: Sequence[Figure], meta: dict[str, object]) -> None:
    path.write_text(
        json.dumps({"meta": meta, "figures": [f.as_json() for f in figures]}, indent=2) + "\n"
    )
