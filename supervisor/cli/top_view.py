"""The ``panewarden top`` screen: rows of every service as one Rich table, sortable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

# (heading, row key): the order the sort key cycles through.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("SERVICE", "service"),
    ("NAME", "name"),
    ("PROFILE", "profile"),
    ("AGENT", "agent"),
    ("STATE", "state"),
    ("KIND", "kind"),
    ("TURN", "turn"),
    ("AGE", "age_s"),
    ("LEASE", "lease"),
    ("CONF", "confined"),
    ("WORKER", "worker_pid"),
    ("CPU%", "cpu_percent"),
    ("MEM", "rss_bytes"),
    ("PROCS", "processes"),
    ("TOKENS", "tokens"),
)
STATE_STYLES = {"blocked": "bold red", "working": "yellow", "error": "red", "done": "green"}


def human_bytes(n: int) -> str:
    """``n`` bytes in a short unit (``12.3M``)."""
    value = float(n)
    for unit in ("B", "K", "M", "G"):
        if value < 1024 or unit == "G":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}G"


def human_age(seconds: int) -> str:
    """An age as ``42s``, ``7m``, ``3h``, ``2d``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key == "rss_bytes":
        return human_bytes(int(value))
    if key == "age_s":
        return human_age(int(value))
    if key == "confined":
        return "yes" if value else "no"
    if key == "cpu_percent":
        return f"{float(value):.1f}"
    return str(value)


def _sort_key(key: str, row: dict[str, Any]) -> tuple[int, Any, str, str]:
    value = row.get(key)
    # Error rows and absent values sort last whatever the column; ties by service, name.
    missing = 1 if value is None or "error" in row else 0
    if isinstance(value, bool | int | float):
        ordered: Any = (0, float(value), "")
    else:
        ordered = (1, 0.0, "" if value is None else str(value))
    return (missing, ordered, str(row.get("service", "")), str(row.get("name", "")))


@dataclass
class TopView:
    """The rows of every service, the sort column and the rendering."""

    services: list[str]
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    sort_index: int = 0
    reverse: bool = False

    def update(self, service: str, rows: list[dict[str, Any]]) -> None:
        self.rows[service] = rows

    def cycle_sort(self) -> None:
        self.sort_index = (self.sort_index + 1) % len(COLUMNS)

    def flip(self) -> None:
        self.reverse = not self.reverse

    def sorted_rows(self) -> list[dict[str, Any]]:
        key = COLUMNS[self.sort_index][1]
        every = [r for s in self.services for r in self.rows.get(s, [])]
        errors = [r for r in every if "error" in r]
        panes = sorted(
            (r for r in every if "error" not in r),
            key=lambda r: _sort_key(key, r),
            reverse=self.reverse,
        )
        return panes + errors

    def render(self) -> Group:
        heading, _ = COLUMNS[self.sort_index]
        order = "desc" if self.reverse else "asc"
        table = Table(box=None, pad_edge=False, header_style="bold", expand=False)
        for name, key in COLUMNS:
            mark = "*" if COLUMNS[self.sort_index][1] == key else ""
            right = key in ("turn", "cpu_percent", "rss_bytes", "processes", "tokens")
            table.add_column(name + mark, justify="right" if right else "left", no_wrap=True)
        for row in self.sorted_rows():
            if "error" in row:
                table.add_row(str(row["service"]), Text("error: " + str(row["error"]), style="red"))
                continue
            cells = [_cell(key, row.get(key)) for _, key in COLUMNS]
            style = STATE_STYLES.get(str(row.get("state")), "")
            table.add_row(
                *[
                    Text(c, style=style if k == "state" else "")
                    for c, (_, k) in zip(cells, COLUMNS, strict=True)
                ]
            )
        waiting = [s for s in self.services if s not in self.rows]
        footer = f"sort: {heading} {order}   s: next column  r: reverse  q: quit"
        if waiting:
            footer += "   connecting: " + ", ".join(waiting)
        return Group(
            Text(
                f"panewarden top — {sum(1 for r in self.sorted_rows() if 'error' not in r)} panes",
                style="bold",
            ),
            table,
            Text(footer, style="dim"),
        )
