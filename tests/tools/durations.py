"""Write ``tests/durations.json``: how long each test module takes, from a serial run.

The suite runs on pytest-xdist workers, a whole module per worker at a time
(``--dist loadscope``); ``tests/conftest.py`` hands the modules out longest first, so
that no long module starts last while the other workers idle. Only the order depends on
these figures: a module missing here (a new one) runs after the measured ones, and a
stale figure costs time, never a test.

Usage::

    .venv/bin/python -m pytest -n 0 -q -p no:cacheprovider --durations=0 > durations.txt
    .venv/bin/python -m tests.tools.durations durations.txt
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "durations.json"
LINE = re.compile(r"^([\d.]+)s (?:setup|call|teardown)\s+(\S+?\.py)::")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="the output of a --durations=0 run")
    args = parser.parse_args()
    seconds: dict[str, float] = defaultdict(float)
    for line in args.report.read_text().splitlines():
        match = LINE.match(line)
        if match:
            seconds[match[2]] += float(match[1])
    table = {module: round(s, 1) for module, s in sorted(seconds.items())}
    OUT.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{OUT}: {len(table)} modules, {sum(table.values()):.0f} s")


if __name__ == "__main__":
    main()
