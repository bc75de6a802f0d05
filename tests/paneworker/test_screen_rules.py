"""Screen status rules: the data files, the matcher, recorded and synthetic screens, the pane.

Recorded screens are the tmux golden points of ``tests/captured`` (replayed through the
pane terminal); synthetic ones are ``tests/paneworker/screens/<agent>/<case>.txt``, written
from the public fingerprints (see that directory's README). Claude Code reports its own
state over OSC 7501, which gives a measured truth to compare the claude rules with.
"""

from __future__ import annotations

import json
import os
import select
import sys
import time
import tomllib
from pathlib import Path

import pytest

from paneworker.program import Program
from paneworker.screen_rules import (
    Decision,
    RulesError,
    bundled_rules,
    classify,
    load_rules,
    parse_rules,
    prefer,
    region_text,
)
from paneworker.screenstate import RULES_INTERVAL_S, ScreenState
from paneworker.terminal import Terminal
from protocol import PROTOCOL_VERSION
from protocol.boot import BootRecord
from protocol.messages import Status, ToSupervisor
from tests.paneworker.emulators import EMULATOR

TESTS = Path(__file__).resolve().parent.parent
CAPTURED = TESTS / "captured"
SCREENS = Path(__file__).resolve().parent / "screens"
REPO = TESTS.parent
PROFILE_AGENTS = ("kiro", "devin", "opencode", "claude", "codex", "demo", "generic")


def screen_of(data: bytes, cols: int = 120, rows: int = 40) -> Terminal:
    term = Terminal(cols, rows, reply=lambda _d: None, on_report=lambda _r: None, emulator=EMULATOR)
    term.feed(data)
    return term


def recorded(cli: str, scenario: str, upto: int | None = None) -> Terminal:
    data = (CAPTURED / cli / f"{scenario}.bin").read_bytes()
    return screen_of(data if upto is None else data[:upto])


def fixture_lines(agent: str, case: str) -> list[str]:
    text = (SCREENS / agent / f"{case}.txt").read_text(encoding="utf-8")
    return screen_of(text.replace("\n", "\r\n").encode()).display_lines()


def decide(agent: str, lines: list[str]) -> tuple[str, str | None]:
    decision = classify(bundled_rules(agent), lines)
    return decision.state, decision.kind


# -- 1. the bundled data -------------------------------------------------------------


@pytest.mark.parametrize("agent", PROFILE_AGENTS)
def test_every_profile_agent_kind_has_a_valid_versioned_rules_file(agent: str) -> None:
    path = REPO / "paneworker" / "rules" / f"{agent}.json"
    raw = json.loads(path.read_text())
    assert raw["agent"] == agent and raw["version"] >= 1
    assert all(rule.get("note") for rule in raw["rules"]), "every rule says where it comes from"
    rules = bundled_rules(agent)
    assert (rules.agent, rules.version) == (agent, raw["version"])


def test_generic_and_unknown_kinds_have_no_rules() -> None:
    for agent in ("generic", "gemini", "../demo", "Kiro"):
        rules = bundled_rules(agent)
        assert (rules.agent, rules.rules) == ("generic", ())
        assert classify(rules, ["anything", "› Allow once", "esc to interrupt"]) == Decision(
            "unknown"
        )


def test_rules_files_are_package_data() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "rules/*.json" in pyproject["tool"]["setuptools"]["package-data"]["paneworker"]


# -- 2. the file format is checked ---------------------------------------------------


def rules_json(*rules: dict[str, object], agent: str = "kiro", version: int = 1) -> bytes:
    return json.dumps({"agent": agent, "version": version, "rules": list(rules)}).encode()


@pytest.mark.parametrize(
    ("rule", "complaint"),
    [
        ({"id": "a", "state": "idle", "all": ["x"], "colour": "red"}, "unknown field"),
        ({"id": "a", "state": "idle", "all": ["Esc to cancel"]}, "not lower-case"),
        ({"id": "a", "state": "blocked", "all": ["x"]}, "'kind' is required"),
        ({"id": "a", "state": "idle", "kind": "auth", "all": ["x"]}, "'kind' is required"),
        ({"id": "a", "state": "idle", "none": ["x"]}, "needs 'all', 'any' or 'regex'"),
        ({"id": "a", "state": "idle", "regex": "(unclosed"}, "bad regex"),
        ({"id": "a", "state": "idle", "all": ["x"], "region_lines": 0}, "region_lines"),
        ({"id": "a", "state": "idle", "all": [""]}, "empty substring"),
        ({"id": "a", "state": "done", "all": ["x"]}, "Invalid enum value"),
    ],
)
def test_a_bad_rule_refuses_the_whole_file(rule: dict[str, object], complaint: str) -> None:
    with pytest.raises(RulesError, match=complaint):
        parse_rules(rules_json(rule), agent="kiro", source="test")


def test_duplicate_ids_wrong_agent_and_bad_version_are_refused() -> None:
    rule = {"id": "a", "state": "idle", "all": ["x"]}
    with pytest.raises(RulesError, match="duplicate rule id"):
        parse_rules(rules_json(rule, rule), agent="kiro", source="t")
    with pytest.raises(RulesError, match="not 'kiro'"):
        parse_rules(rules_json(rule, agent="devin"), agent="kiro", source="t")
    with pytest.raises(RulesError, match="version"):
        parse_rules(rules_json(rule, version=0), agent="kiro", source="t")
    with pytest.raises(RulesError):
        parse_rules(b"{not json", agent="kiro", source="t")


# -- 3. overrides from the profiles directory ----------------------------------------


def test_an_override_with_a_newer_or_equal_version_replaces_the_bundled_rules(
    tmp_path: Path,
) -> None:
    bundled = bundled_rules("kiro")
    rule = {"id": "mine", "state": "working", "all": ["compiling"]}
    for version in (bundled.version, bundled.version + 1):
        (tmp_path / "kiro.json").write_bytes(rules_json(rule, version=version))
        rules = load_rules("kiro", tmp_path)
        assert rules.version == version and [r.id for r in rules.rules] == ["mine"]
        assert rules.source == str(tmp_path / "kiro.json")
        assert decide_with(rules, ["compiling…"]) == ("working", None)


def decide_with(rules: object, lines: list[str]) -> tuple[str, str | None]:
    decision = classify(rules, lines)  # type: ignore[arg-type]
    return decision.state, decision.kind


def test_an_older_or_broken_override_is_ignored_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bundled = bundled_rules("devin")
    rule = {"id": "mine", "state": "idle", "all": ["x"]}
    newer = parse_rules(rules_json(rule, agent="devin", version=3), agent="devin", source="b")
    older = parse_rules(rules_json(rule, agent="devin", version=2), agent="devin", source="o")
    assert prefer(newer, older) is newer
    assert prefer(older, newer) is newer
    override = tmp_path / "devin.json"
    override.write_bytes(b'{"agent": "devin", "version": 99, "rules": [{"id": "x"}]}')
    assert load_rules("devin", tmp_path) == bundled
    assert load_rules("claude", tmp_path) == bundled_rules("claude")  # no file: bundled
    assert load_rules("devin", None) == bundled
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "older than the bundled" in messages and "override refused" in messages


def test_an_override_can_give_rules_to_a_kind_without_bundled_ones(tmp_path: Path) -> None:
    rule = {"id": "prompt", "state": "idle", "regex": "^gemini> $"}
    (tmp_path / "gemini.json").write_bytes(rules_json(rule, agent="gemini"))
    assert decide_with(load_rules("gemini", tmp_path), ["gemini> "]) == ("idle", None)


# -- 4. matching semantics -----------------------------------------------------------


def test_the_region_is_the_bottom_non_empty_lines_lower_cased() -> None:
    lines = ["Top", "", "Middle", "  ", "Esc To Cancel", "", ""]
    assert region_text(lines, 2) == "middle\nesc to cancel"
    assert region_text(lines, 10) == "top\nmiddle\nesc to cancel"


def test_first_match_wins_and_all_any_none_regex_combine() -> None:
    rules = parse_rules(
        rules_json(
            {"id": "b", "state": "blocked", "kind": "question", "all": ["pick", "one"]},
            {"id": "w", "state": "working", "any": ["busy", "thinking"], "none": ["paused"]},
            {"id": "i", "state": "idle", "regex": r"^> $", "region_lines": 1},
        ),
        agent="kiro",
        source="t",
    )
    assert classify(rules, ["Pick ONE", "busy", "> "]) == Decision("blocked", "question", "b")
    assert classify(rules, ["pick", "thinking", "> "]) == Decision("working", None, "w")
    assert classify(rules, ["thinking (paused)", "> "]) == Decision("idle", None, "i")
    assert classify(rules, ["> ", "output"]) == Decision("unknown")
    assert classify(rules, []) == Decision("unknown")


# -- 5. recorded screens (measured) --------------------------------------------------

RECORDED = [
    ("claude", "startup", 1452, ("blocked", "permission")),
    ("claude", "trusted", 1452, ("blocked", "permission")),
    ("claude", "trusted", 1569, ("blocked", "permission")),
    ("claude", "trusted", 4095, ("idle", None)),
    ("claude", "trusted", 4208, ("idle", None)),
    ("claude", "prompt_auth", 4095, ("idle", None)),
    ("claude", "prompt_auth", 4181, ("idle", None)),
    ("claude", "prompt_auth", 5584, ("working", None)),
    ("claude", "prompt_auth", 6947, ("blocked", "auth")),
    ("codex", "startup", 1771, ("blocked", "auth")),
    ("codex", "signin_menu", 1771, ("blocked", "auth")),
    ("codex", "signin_menu", 2023, ("blocked", "auth")),
    ("codex", "signin_menu", 2249, ("blocked", "auth")),
    ("codex", "signin_menu", 2760, ("blocked", "auth")),
    ("opencode", "startup", 21069, ("idle", None)),
    ("opencode", "prompt_error", 21069, ("idle", None)),
    ("opencode", "prompt_error", 21231, ("idle", None)),
    ("opencode", "prompt_error", 35234, ("working", None)),
    ("opencode", "prompt_error", 40770, ("working", None)),
    ("opencode", "prompt_error", 41476, ("idle", None)),
    # Permission dialogs reached with tests/tools/fake_model.py (marks "dialog", "allowed",
    # "denied"); Codex's dialog has no mark, see test_recorded_codex_approval_reads_blocked.
    ("opencode", "permission_allow", 38146, ("blocked", "permission")),
    ("opencode", "permission_allow", 48204, ("idle", None)),
    ("opencode", "permission_deny", 37947, ("blocked", "permission")),
    ("opencode", "permission_deny", 41660, ("idle", None)),
    ("claude", "permission_allow", 7135, ("blocked", "permission")),
    ("claude", "permission_deny", 8761, ("blocked", "permission")),
]


@pytest.mark.parametrize(
    ("cli", "scenario", "upto", "expected"),
    RECORDED,
    ids=[f"{c}/{s}@{n}" for c, s, n, _ in RECORDED],
)
def test_recorded_screens_classify_as_the_program_was(
    cli: str, scenario: str, upto: int, expected: tuple[str, str | None]
) -> None:
    assert decide(cli, recorded(cli, scenario, upto).display_lines()) == expected


def test_claude_rules_agree_with_claudes_own_reports_at_every_golden_point() -> None:
    checked = 0
    for meta_path in sorted((CAPTURED / "claude").glob("*.at*.golden.json")):
        upto = json.loads(meta_path.read_text())["bytes"]
        term = recorded("claude", meta_path.name.split(".", 1)[0], upto)
        root = term.records.root
        assert root is not None
        # 2.1.332 reports `done` after a finished turn (permission_*); the screen shows the
        # idle prompt, which the pane reports as `done` because it ends a turn.
        reported = ("idle" if root.state == "done" else root.state, root.kind)
        assert decide("claude", term.display_lines()) == reported
        checked += 1
    assert checked == 16


@pytest.mark.parametrize(
    "scenario", ["startup", "trusted", "prompt_auth", "permission_allow", "permission_deny"]
)
def test_claude_rules_never_contradict_a_settled_report_at_any_read(scenario: str) -> None:
    """At every recorded read boundary: never blocked where Claude says it is not, never
    idle where Claude says blocked (a read or two of lag at a transition is allowed)."""
    data = (CAPTURED / "claude" / f"{scenario}.bin").read_bytes()
    chunks = json.loads((CAPTURED / "claude" / f"{scenario}.json").read_text())["chunks"]
    term = screen_of(b"")
    start = 0
    before = None  # the report at the previous read
    for _t, end in chunks:
        term.feed(data[start:end])
        start = end
        root = term.records.root
        if root is None:
            continue
        state, kind = decide("claude", term.display_lines())
        if root.state == "blocked":
            assert state != "idle"
        elif before != "blocked":
            assert state != "blocked"
        # else: the read that took the answer to a tool dialog (permission_*) carries the
        # new report but not yet the redraw; the dialog is gone at the next read.
        if state == "blocked" and before != "blocked":
            assert (root.state, root.kind) == (state, kind)
        before = root.state


@pytest.mark.parametrize("scenario", ["permission_allow", "permission_deny"])
def test_recorded_codex_approval_reads_blocked(scenario: str) -> None:
    """At every read while Codex's approval is fully drawn the rules say blocked; Codex's own
    OSC 7501 report (0.171.0 reports once a session runs) says so too until the answer."""
    data = (CAPTURED / "codex" / f"{scenario}.bin").read_bytes()
    chunks = json.loads((CAPTURED / "codex" / f"{scenario}.json").read_text())["chunks"]
    term = screen_of(b"")
    start = 0
    seen = 0
    for _t, end in chunks:
        term.feed(data[start:end])
        start = end
        text = "\n".join(term.display_lines()).lower()
        if "would you like to run" in text and "press enter to confirm" in text:
            assert decide("codex", term.display_lines()) == ("blocked", "permission")
            root = term.records.root
            assert root is not None
            # The read that took the answer carries the next report before the redraw.
            seen += (root.state, root.kind) == ("blocked", "permission")
    assert seen >= 1


@pytest.mark.parametrize("cli", ["gemini", "qwen"])
def test_kinds_without_rules_stay_unknown_on_their_dialogs(cli: str) -> None:
    for meta_path in sorted((CAPTURED / cli).glob("*.golden.json")):
        upto = json.loads(meta_path.read_text())["bytes"]
        term = recorded(cli, meta_path.name.split(".", 1)[0], upto)
        assert decide("generic", term.display_lines()) == ("unknown", None)


# -- 6. synthetic screens (inferred from the fingerprints) ----------------------------

SYNTHETIC = [
    ("kiro", "tool_approval", ("blocked", "permission")),
    ("kiro", "subagent_approval", ("blocked", "permission")),
    ("kiro", "working", ("working", None)),
    ("kiro", "working_spinner", ("working", None)),
    ("kiro", "idle", ("idle", None)),
    ("kiro", "idle_error_done", ("idle", None)),
    ("kiro", "prose_permission", ("idle", None)),
    ("kiro", "bypass_status", ("unknown", None)),
    ("devin", "permission", ("blocked", "permission")),
    ("devin", "trust", ("blocked", "permission")),
    ("devin", "working_guide", ("working", None)),
    ("devin", "working_running_tools", ("working", None)),
    ("devin", "idle", ("idle", None)),
    ("devin", "idle_error_done", ("idle", None)),
    ("devin", "prose_permission", ("idle", None)),
    ("devin", "bypass_status", ("unknown", None)),
    ("opencode", "permission", ("blocked", "permission")),
    ("opencode", "question", ("blocked", "question")),
    ("opencode", "working_interrupt", ("working", None)),
    ("opencode", "working_footer", ("working", None)),  # copied from a live opencode pane
    ("opencode", "idle_error_done", ("idle", None)),
    ("opencode", "prose_permission", ("idle", None)),
    ("opencode", "bypass_status", ("unknown", None)),
    ("claude", "tool_permission", ("blocked", "permission")),
    ("claude", "idle_error_done", ("idle", None)),
    ("claude", "prose_permission", ("idle", None)),
    ("claude", "bypass_idle", ("idle", None)),
    ("claude", "bypass_status", ("unknown", None)),
    ("codex", "approval", ("blocked", "permission")),
    ("codex", "trust", ("blocked", "permission")),
    ("codex", "working", ("working", None)),
    ("codex", "prose_permission", ("unknown", None)),
    ("codex", "bypass_status", ("unknown", None)),
    ("demo", "dialog", ("blocked", "permission")),
    ("demo", "prose_permission", ("unknown", None)),
]


@pytest.mark.parametrize(
    ("agent", "case", "expected"), SYNTHETIC, ids=[f"{a}/{c}" for a, c, _ in SYNTHETIC]
)
def test_synthetic_screens_classify_as_their_fingerprints_say(
    agent: str, case: str, expected: tuple[str, str | None]
) -> None:
    assert decide(agent, fixture_lines(agent, case)) == expected


def test_every_fixture_file_is_listed() -> None:
    listed = {(agent, case) for agent, case, _ in SYNTHETIC}
    on_disk = {(p.parent.name, p.stem) for p in SCREENS.glob("*/*.txt")}
    assert on_disk == listed


@pytest.mark.parametrize("agent", PROFILE_AGENTS)
def test_prose_or_a_status_bar_never_blocks_any_agent(agent: str) -> None:
    for other in ("kiro", "devin", "opencode", "claude", "codex", "demo"):
        for case in ("prose_permission", "bypass_status"):
            if (SCREENS / other / f"{case}.txt").exists():
                assert decide(agent, fixture_lines(other, case))[0] != "blocked", (other, case)
    # A status bar alone decides nothing, idle or blocked.
    bar = ["  ⏵⏵ bypass permissions on (shift+tab to cycle)", "  bypass permissions on"]
    assert decide(agent, bar) == ("unknown", None)


# -- 7. the pane: evaluation in ScreenState.after_step --------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def boot_for(agent: str, argv: list[str] | None = None, cwd: str = "/") -> BootRecord:
    return BootRecord(
        protocol_version=PROTOCOL_VERSION,
        pane="p",
        instance="i",
        secret=b"s",
        endpoint="ipc:///nonexistent",
        agent=agent,
        argv=argv or ["true"],
        cwd=cwd,
        env={},
        cols=120,
        rows=40,
    )


class Pane:
    """A ScreenState with a fake clock; nothing is spawned."""

    def __init__(self, agent: str) -> None:
        self.sent: list[ToSupervisor] = []
        self.clock = FakeClock()
        self.screen = ScreenState(boot_for(agent), self.sent.append, clock=self.clock)
        self.screen.status.set_lifecycle("running")

    def step(self, advance_s: float = RULES_INTERVAL_S) -> None:
        self.clock.now += advance_s
        self.screen.after_step()

    def settle(self) -> None:
        """Two evaluations, an interval apart: enough for a steady screen to decide."""
        self.step()
        self.step()

    @property
    def statuses(self) -> list[tuple[str, str | None, int, str]]:
        return [
            (m.status.state, m.status.kind, m.status.turn, m.status.source)
            for m in self.sent
            if isinstance(m, Status)
        ]


def test_a_recorded_opencode_turn_is_idle_working_done_from_the_screen() -> None:
    data = (CAPTURED / "opencode" / "prompt_error.bin").read_bytes()
    pane = Pane("opencode")
    pane.screen.feed(data[:21069])
    pane.settle()
    pane.screen.status.note_input()  # the recorded prompt was submitted here
    pane.screen.feed(data[21069:35234])
    pane.settle()
    pane.screen.feed(data[35234:41476])
    pane.settle()
    assert pane.statuses == [
        ("idle", None, 0, "screen"),
        ("working", None, 1, "screen"),
        ("done", None, 1, "screen"),
    ]


def test_a_decision_needs_two_looks_and_a_flicker_changes_nothing() -> None:
    data = (CAPTURED / "opencode" / "prompt_error.bin").read_bytes()
    pane = Pane("opencode")
    pane.screen.feed(data[:21069])
    pane.step()
    assert pane.statuses == []  # seen once: not yet
    pane.step()
    assert pane.statuses == [("idle", None, 0, "screen")]
    # One frame of the running turn, then the home screen again: no change is recorded.
    pane.screen.feed(b"\x1b[40;1H   \xe2\x96\xa0\xe2\x96\xa0\xe2\x96\xa0\xe2\x96\xa0 retrying")
    pane.step()
    pane.screen.feed(b"\x1b[40;1H\x1b[2K   tab agents  ctrl+p commands")
    pane.step()
    pane.step()
    assert pane.statuses == [("idle", None, 0, "screen")]


def test_rules_run_at_most_every_interval_and_only_after_text_changed() -> None:
    data = (CAPTURED / "codex" / "signin_menu.bin").read_bytes()
    pane = Pane("codex")
    pane.screen.feed(data[:1771])
    pane.step()
    first = pane.screen.last_decision
    assert first is not None and first.state == "blocked"
    pane.step(RULES_INTERVAL_S / 4)  # too soon: the pending decision waits
    assert pane.statuses == []
    pane.step(RULES_INTERVAL_S)
    assert pane.statuses == [("blocked", "auth", 0, "screen")]
    pane.screen.last_decision = None
    pane.step()
    pane.step()
    assert pane.screen.last_decision is None  # nothing changed on screen: nothing evaluated
    assert pane.screen.rules_deadline() is None


def test_osc_reports_win_and_the_screen_takes_over_when_the_record_goes() -> None:
    data = (CAPTURED / "claude" / "trusted.bin").read_bytes()
    pane = Pane("claude")
    pane.screen.feed(data[:1452])  # Claude reported blocked:kind=permission
    pane.settle()
    assert pane.statuses == [("blocked", "permission", 0, "osc7501")]
    pane.screen.feed(b"\x1b]7501;state=clear\x07")
    assert pane.statuses[-1] == ("unknown", None, 0, "osc7501")
    pane.settle()
    assert pane.statuses[-1] == ("blocked", "permission", 0, "screen")
    pane.screen.status.note_input()
    pane.screen.feed(b"\x1b]7501;state=working:app=claude-code\x07")
    pane.settle()
    assert pane.statuses[-1] == ("working", None, 1, "osc7501")


def test_generic_panes_never_decide_from_the_screen() -> None:
    pane = Pane("generic")
    pane.screen.feed((CAPTURED / "codex" / "signin_menu.bin").read_bytes()[:1771])
    pane.settle()
    assert pane.statuses == [] and pane.screen.status.source == "none"


def test_an_exited_pane_is_not_reclassified() -> None:
    pane = Pane("codex")
    pane.screen.program_exited(0)
    pane.sent.clear()
    pane.screen.feed((CAPTURED / "codex" / "signin_menu.bin").read_bytes()[:1771])
    pane.settle()
    assert pane.statuses == []


def test_recorded_bytes_on_a_real_pty_make_a_screen_decided_status(tmp_path: Path) -> None:
    """The codex sign-in bytes, written by a real process on a real PTY, reach `blocked`."""
    recording = CAPTURED / "codex" / "signin_menu.bin"
    script = (
        "import sys, os\n"
        f"data = open({str(recording)!r}, 'rb').read()[:1771]\n"
        "os.write(1, data)\n"
        "sys.stdin.buffer.read()\n"
    )
    argv = [sys.executable, "-c", script]
    env = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", "TERM": "xterm-256color"}
    program = Program(argv, str(tmp_path), env, 120, 40)
    sent: list[ToSupervisor] = []
    screen = ScreenState(boot_for("codex", argv, str(tmp_path)), sent.append)
    screen.attach(program)
    screen.status.set_lifecycle("running")
    try:
        deadline = time.monotonic() + 10
        while screen.status.state != "blocked":
            assert time.monotonic() < deadline, screen.terminal.display_lines()
            wait = screen.rules_deadline()
            timeout = 0.05 if wait is None else max(0.0, wait - time.monotonic())
            ready, _, _ = select.select([program.fd], [], [], min(timeout, 0.05))
            if ready and (data := program.read()):
                screen.feed(data)
            screen.after_step()
        assert (screen.status.kind, screen.status.source) == ("auth", "screen")
        assert "Sign in with ChatGPT" in screen.text(None, False)
    finally:
        program.close()
        os.waitpid(program.pid, 0)
