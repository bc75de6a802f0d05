"""Drift check: the real-CLI tests against each supported CLI's newest published release.

``.ci/run`` tests the pinned versions (``tests/realcli/versions.json``). A CLI release can
change a screen, a dialog or a flag and silently break status; this command tells before
an operator upgrades. It

1. asks each CLI's registry, through its ordinary client, for the newest version
   (``npm view PKG version``; ``pip index versions aider-chat`` for Aider);
2. installs those versions into a scratch prefix laid out like ``tests/realcli/install.sh``
   lays out the pinned one (npm packages one ``npm install`` each, so that one broken
   release fails alone; Aider into ``PREFIX/aider-venv``);
3. runs the real-CLI tests (``tests/realcli``, the load test left out) with
   ``PANEWARDEN_CLI_PREFIX`` pointing at that prefix and a JUnit report;
4. prints one table: CLI, pinned and newest version, install, pass/fail per check, and
   what broke (the recogniser or the rules file and the rules of the state that was never
   read, taken from the failure); then, per CLI, every screen of it that waits on a choice
   (the ``blocked`` rules of its rules file, with their kind). A failure whose text shows
   one of those screens names it first ("screen fullscreen_offer (permission) shown: …"),
   so that a new start-up offer is told apart from a broken prompt.

Usage::

    python -m tests.realcli.drift [--only kilo,aider] [--prefix DIR] [--workers 1]
                                  [--pinned] [--keep] [--json FILE]

``--pinned`` installs the pinned versions instead (a check of the check). The prefix must
lie outside ``/tmp`` (confined panes get a private one); the default is a fresh directory
under ``~/.cache``. The exit status is
0 when every check of every CLI passed, 1 otherwise, 2 on a usage error. Nothing here
changes the repo's own ``.npm-cli``; the scratch prefix is removed unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
VERSIONS_FILE = HERE / "versions.json"
RULES_DIR = REPO / "paneworker" / "status" / "rules"
# The load test runs CPU hogs and only makes sense alone; everything else under
# tests/realcli is a real-CLI check.
EXCLUDED_MODULES = ("test_first_prompt_load.py",)
INSTALL_TIMEOUT_S = 900
TESTS_TIMEOUT_S = 3600

# Short names of the checks, from the test functions' names (first match wins).
CHECK_LABELS: tuple[tuple[str, str], ...] = (
    ("acp_mode", "acp"),
    ("twenty_starts|consecutive_starts", "20 starts"),
    # One pane carrying a whole session (Kilo, Aider): prompt, allow_once, deny_once, removal.
    ("in_one_session", "session"),
    ("runs_tools_unasked", "turns only"),
    ("start_up_screens", "start-up screens"),
    ("allow_once", "allow_once"),
    ("deny_once", "deny_once"),
    ("plain_prompt|prompt_is_turn|reply", "prompt→done"),
    ("acquires|orchestrat", "orchestrator"),
    ("receipt", "turn output"),
    ("every_start|first_prompt", "first prompt"),
    ("trust", "trust screen"),
    ("auth|sign_in|provider|login", "sign-in screen"),
    ("home_screen|reads_idle", "idle screen"),
)


@dataclass(frozen=True)
class Cli:
    """One supported CLI: its short name (the pane kind), package and registry."""

    name: str
    package: str
    pinned: str
    registry: str  # "npm" or "pypi"
    path: str  # the binary, relative to a prefix


@dataclass
class Row:
    """What the drift check found for one CLI."""

    cli: Cli
    newest: str | None = None
    install: str = "—"  # "ok", "FAIL: …", "—" (not tried)
    checks: dict[str, str] = field(default_factory=dict)  # label -> pass / FAIL / skip
    broke: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.install == "ok" and "FAIL" not in self.checks.values()


def clis(versions: dict[str, dict[str, str]] | None = None) -> list[Cli]:
    """Every supported CLI, from ``versions.json`` (the one home of the pins)."""
    table = versions if versions is not None else json.loads(VERSIONS_FILE.read_text())
    return [
        Cli(entry["bin"], package, entry["version"], entry.get("registry", "npm"), entry["path"])
        for package, entry in table.items()
    ]


# ------------------------------------------------------------------ registries


def _run(argv: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
    )


def parse_pip_index(output: str) -> str | None:
    """The newest version in ``pip index versions`` output (``name (1.2.3)`` first line)."""
    match = re.search(r"^\S+ \(([^)\s]+)\)", output, re.M)
    return match[1] if match else None


def newest_version(cli: Cli) -> tuple[str | None, str]:
    """The newest published version of ``cli`` and, when it could not be read, why."""
    if cli.registry == "pypi":
        proc = _run(
            [sys.executable, "-m", "pip", "index", "versions", cli.package, "--no-color"],
            timeout_s=120,
        )
        version = parse_pip_index(proc.stdout)
    else:
        proc = _run(["npm", "view", cli.package, "version"], timeout_s=120)
        version = proc.stdout.strip() or None
    if version is None:
        return None, (proc.stderr.strip().splitlines() or ["no version"])[-1][:120]
    return version, ""


def install(cli: Cli, version: str, prefix: Path) -> str:
    """Install ``cli`` at ``version`` under ``prefix``; "ok" or "FAIL: <last error line>"."""
    if cli.registry == "pypi":
        venv = prefix / "aider-venv"
        if not (venv / "bin" / "python").exists():
            proc = _run([sys.executable, "-m", "venv", str(venv)], INSTALL_TIMEOUT_S)
            if proc.returncode:
                return "FAIL: venv: " + _last_line(proc.stderr)
        argv = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        argv += ["--disable-pip-version-check", f"{cli.package}=={version}"]
    else:
        argv = ["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund"]
        argv += ["--save-exact", f"{cli.package}@{version}"]
    try:
        proc = _run(argv, INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"FAIL: install took over {INSTALL_TIMEOUT_S} s"
    if proc.returncode or not (prefix / cli.path).exists():
        # A failed npm install can leave the package's bin link behind (Kilo 7.8.1: its
        # postinstall fails after the link is made); without it the CLI's tests skip
        # instead of running a broken install.
        (prefix / cli.path).unlink(missing_ok=True)
        return "FAIL: " + install_error(proc.stderr or proc.stdout)
    return "ok"


# The lines of an installer's output that say why it failed, most telling first.
_INSTALL_ERRORS = re.compile(
    r"No matching version[^\n]*|E404[^\n]*|404 Not Found[^\n]*|ERROR: [^\n]*"
)


def install_error(text: str) -> str:
    """Why an install failed: npm's "No matching version …"/404 line or pip's ``ERROR:``
    line (npm prints the real cause in the middle of pages of noise), else the last line."""
    found = _INSTALL_ERRORS.search(text)
    return found[0].strip()[:160] if found else _last_line(text)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # npm ends with "A complete log of this run…": the error is the line before it.
    lines = [line for line in lines if "complete log of this run" not in line]
    return (lines[-1] if lines else "no output")[:120]


# ------------------------------------------------------------------ the tests


def test_modules() -> list[str]:
    """The real-CLI test modules the check runs."""
    return sorted(
        str(path.relative_to(REPO))
        for path in HERE.glob("test_*.py")
        if path.name not in EXCLUDED_MODULES
    )


def run_tests(prefix: Path, junit: Path, workers: int, only: Iterable[str]) -> int:
    """pytest over the real-CLI modules against ``prefix``; its exit status."""
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-m",
        "not load",
    ]  # the drift-only tests too
    argv += ["-n", str(workers), f"--junitxml={junit}", *test_modules()]
    names = list(only)
    if names:
        # Keep a test when its id names one of the CLIs (parameter or function name).
        argv += ["-k", " or ".join(names)]
    env = {**os.environ, "PANEWARDEN_CLI_PREFIX": str(prefix)}
    try:
        return subprocess.run(
            argv, cwd=REPO, env=env, timeout=TESTS_TIMEOUT_S, check=False
        ).returncode
    except subprocess.TimeoutExpired:
        return 124


def check_label(function: str) -> str:
    """The short name of a check from its test function's name."""
    for pattern, label in CHECK_LABELS:
        if re.search(pattern, function):
            return label
    return function.removeprefix("test_")[:24]


def clis_of(testcase: str, names: Sequence[str], module: str = "") -> list[str]:
    """The CLIs a test case is about: its parameter (``[kilo]``), else the CLI names in
    its function name (``test_gemini_…``, ``…_gemini_qwen…``)."""
    match = re.search(r"\[(.+)\]$", testcase)
    if match:
        params = re.split(r"[-,]", match[1])
        hit = [name for name in names if name in params]
        if hit:
            return hit
    words = set(re.split(r"[_\[\]\-]", testcase))
    found = [name for name in names if name in words]
    if found or not module:
        return found
    # A test about every CLI of its module (test_real_gemini_qwen's twenty starts).
    words = set(re.split(r"[_.]", module))
    return [name for name in names if name in words]


def choice_screens(cli: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """The screens of ``cli`` that wait on a choice: (rule id, kind, what shows it: its
    literal texts, else its regex), from the ``blocked`` rules of its rules file."""
    try:
        data = json.loads((RULES_DIR / f"{cli}.json").read_text())
    except (OSError, ValueError):
        return []
    return [
        (
            str(rule.get("id")),
            str(rule.get("kind") or "permission"),
            tuple(str(t) for t in [*rule.get("all", []), *rule.get("any", [])])
            or ((str(rule["regex"]),) if rule.get("regex") else ()),
        )
        for rule in data.get("rules", [])
        if rule.get("state") == "blocked"
    ]


def screen_shown(cli: str, text: str) -> str | None:
    """The choice screen of ``cli`` a failure's text shows (its first literal is in it)."""
    folded = text.casefold()
    for rule_id, kind, shows in choice_screens(cli):
        first = shows[0].casefold() if shows else ""
        if first and (first in folded or _regex_hit(first, folded)):
            return f"screen {rule_id} ({kind}) shown"
    return None


def _regex_hit(pattern: str, text: str) -> bool:
    try:
        return re.search(pattern, text, re.M) is not None
    except re.error:
        return False


def cause(cli: str, text: str, label: str = "") -> str:
    """What broke (see :func:`_cause`), after the choice screen on show, if any."""
    found = _cause(cli, text, label)
    shown = screen_shown(cli, text)
    return f"{shown}: {found}" if shown else found


def _cause(cli: str, text: str, label: str = "") -> str:
    """What broke, read from a failure's text: the recogniser, or a rules file and the
    rules of the state that was expected and never read, or the screen text waited for.
    An ACP pane reads no screen: its failures name the ACP room and the failure."""
    rules = RULES_DIR / f"{cli}.json"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "no message")
    if "dialog_unrecognized" in text or "dialog_changed" in text:
        found = re.search(r"(dialog_(?:unrecognized|changed)[^\n]{0,140})", text)
        return f"recogniser protocol/agents/kinds/{cli}.py: " + (found[1] if found else "")
    if "+ Timeout +" in text or "Failed: Timeout" in text:
        return "test timed out"
    if label == "acp":
        return f"ACP session (paneworker/acp): {first[:140]}"
    shown = re.search(r"never showed ('[^']*'|\"[^\"]*\")", text)
    if shown:
        return f"start-up screen: {shown[1]} never shown"
    for state, hints in (
        ("blocked", ("'blocked'", "never read blocked", "('blocked', 'permission')")),
        ("idle", ("never read idle", "'idle'")),
        ("done", ("'done'",)),
        ("cancelled", ("'cancelled'",)),
    ):
        if any(hint in text for hint in hints):
            ids = ", ".join(_rule_ids(rules, state))
            return f"rules {rules.relative_to(REPO)}: {state} [{ids}]"
    return first[:140]


def _rule_ids(rules: Path, state: str) -> list[str]:
    try:
        data = json.loads(rules.read_text())
    except (OSError, ValueError):
        return ["no rules file"]
    return [str(r.get("id")) for r in data.get("rules", []) if r.get("state") == state] or ["none"]


def read_junit(junit: Path, rows: dict[str, Row]) -> None:
    """Fill each row's checks and causes from a JUnit report."""
    names = list(rows)
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError) as exc:
        for row in rows.values():
            if row.install == "ok":
                row.broke.append(f"no test report: {exc}")
        return
    for case in root.iter("testcase"):
        name = case.get("name", "")
        function = name.split("[", 1)[0]
        label = check_label(function)
        outcome, text = "pass", ""
        for tag in ("failure", "error"):
            node = case.find(tag)
            if node is not None:
                outcome = "FAIL"
                text = (node.get("message") or "") + "\n" + (node.text or "")
        if outcome == "pass" and case.find("skipped") is not None:
            outcome = "skip"
        for cli in clis_of(name, names, case.get("classname", "")):
            row = rows[cli]
            # Several tests may share a label: a failure wins over a pass, a pass over a skip.
            if _RANK[outcome] >= _RANK[row.checks.get(label, "skip")]:
                row.checks[label] = outcome
            if outcome == "FAIL":
                row.broke.append(f"{label}: {cause(cli, text, label)}")


_RANK = {"skip": 0, "pass": 1, "FAIL": 2}


# ------------------------------------------------------------------ the table


def table(rows: Iterable[Row]) -> str:
    """The drift table, one line per CLI, one column per check."""
    rows = list(rows)
    labels = [label for _, label in CHECK_LABELS]
    extra = sorted({lab for row in rows for lab in row.checks} - set(labels))
    used = [lab for lab in labels + extra if any(lab in row.checks for row in rows)]
    head = ["CLI", "pinned", "newest", "install", *used, "result", "what broke"]
    body = []
    for row in rows:
        install_cell = row.install if row.install in ("ok", "—") else "FAIL"
        broke = list(row.broke)
        if row.install not in ("ok", "—"):
            broke.insert(0, row.install.removeprefix("FAIL: "))
        body.append(
            [
                row.cli.name,
                row.cli.pinned,
                row.newest or "?",
                install_cell,
                *[row.checks.get(lab, "—") for lab in used],
                "pass" if row.passed else "FAIL",
                "; ".join(dict.fromkeys(broke)) or "",
            ]
        )
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head) - 1)]
    lines = []
    for r in [head, ["-" * w for w in widths] + ["-" * 10], *body]:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)]
        lines.append("  ".join([*cells, r[-1]]).rstrip())
    return "\n".join(lines)


def screens_table(rows: Iterable[str]) -> str:
    """One line per CLI: the screens of it that wait on a choice, by rule id and kind."""
    lines = ["choice screens (blocked rules, paneworker/status/rules/<cli>.json):"]
    for cli in rows:
        named = [f"{rule_id} ({kind})" for rule_id, kind, _ in choice_screens(cli)]
        lines.append(f"  {cli}: {', '.join(named) or 'none'}")
    return "\n".join(lines)


def under_tmp(path: Path) -> bool:
    """True for a path under ``/tmp``: a confined pane has a private ``/tmp`` (a tmpfs), so
    a CLI installed there is not found inside its sandbox and every confined test fails."""
    return path.resolve().is_relative_to("/tmp")


def scratch_prefix() -> Path:
    """A fresh scratch prefix outside ``/tmp`` (see :func:`under_tmp`): under the user's
    cache directory."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    cache.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="panewarden-drift-", dir=cache))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated CLI names (default: all)")
    ap.add_argument(
        "--prefix", type=Path, default=None, help="scratch prefix (default: a temp dir)"
    )
    ap.add_argument("--workers", type=int, default=1, help="pytest -n (default 1)")
    ap.add_argument("--pinned", action="store_true", help="install the pinned versions instead")
    ap.add_argument("--keep", action="store_true", help="keep the scratch prefix")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    every = clis()
    wanted = [name for name in args.only.split(",") if name]
    unknown = sorted(set(wanted) - {c.name for c in every})
    if unknown:
        ap.error(f"unknown CLI {', '.join(unknown)}; known: {', '.join(c.name for c in every)}")
    chosen = [c for c in every if not wanted or c.name in wanted]
    rows = {c.name: Row(c) for c in chosen}
    if args.prefix is not None and under_tmp(args.prefix):
        ap.error(f"--prefix {args.prefix} is under /tmp, which confined panes do not see")
    prefix = args.prefix or scratch_prefix()
    prefix.mkdir(parents=True, exist_ok=True)
    try:
        for row in rows.values():
            if args.pinned:
                row.newest = row.cli.pinned
            else:
                row.newest, why = newest_version(row.cli)
                if row.newest is None:
                    row.install = f"FAIL: newest version unknown: {why}"
                    continue
            print(f"drift: installing {row.cli.package}@{row.newest}", flush=True)
            row.install = install(row.cli, row.newest, prefix)
        junit = prefix / "drift-junit.xml"
        installed = [name for name, row in rows.items() if row.install == "ok"]
        if installed:
            run_tests(prefix, junit, args.workers, installed if wanted else [])
            read_junit(junit, rows)
        print()
        print(table(rows.values()))
        print()
        print(screens_table(rows))
        if args.json:
            args.json.write_text(
                json.dumps(
                    [
                        {
                            "cli": r.cli.name,
                            "pinned": r.cli.pinned,
                            "newest": r.newest,
                            "install": r.install,
                            "checks": r.checks,
                            "broke": r.broke,
                            "passed": r.passed,
                            "choice_screens": [
                                {"rule": rule, "kind": kind}
                                for rule, kind, _ in choice_screens(r.cli.name)
                            ],
                        }
                        for r in rows.values()
                    ],
                    indent=1,
                )
            )
    finally:
        if not args.keep and args.prefix is None:
            shutil.rmtree(prefix, ignore_errors=True)
    return 0 if all(row.passed for row in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
