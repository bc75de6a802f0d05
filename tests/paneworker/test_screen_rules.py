"""Screen status rules: the data files, the matcher, recorded and synthetic screens, the pane.

Recorded screens are the tmux golden points of ``tests/captured`` (replayed through the
pane terminal); synthetic ones are ``tests/paneworker/screens/<agent>/<case>.txt``, written
from the public fingerprints (see that directory's README). Claude Code reports its own
state over OSC 7501, which gives a measured truth to compare the claude rules with.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import sys
import time
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

from paneworker.procs.program import Program
from paneworker.screen.state import RULES_INTERVAL_S, ScreenState
from paneworker.screen.terminal import Terminal
from paneworker.status.screen_rules import (
    UNKNOWN,
    Decision,
    RulesError,
    bundled_rules,
    classify,
    combine,
    load_rules,
    parse_rules,
    prefer,
    region_text,
)
from protocol import PROTOCOL_VERSION
from protocol.boot import BootRecord, PaneLaunch
from protocol.messages import Status, ToSupervisor
from tests.paneworker.emulators import EMULATOR

TESTS = Path(__file__).resolve().parent.parent
CAPTURED = TESTS / "captured"
SCREENS = Path(__file__).resolve().parent / "screens"
REPO = TESTS.parent
PROFILE_AGENTS = (
    "kiro",
    "devin",
    "opencode",
    "claude",
    "codex",
    "gemini",
    "qwen",
    "demo",
    "generic",
)


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


def decide(agent: str, lines: list[str], title: str = "") -> tuple[str, str | None]:
    decision = classify(bundled_rules(agent), lines, title)
    return decision.state, decision.kind


# -- 1. the bundled data -------------------------------------------------------------


@pytest.mark.parametrize("agent", PROFILE_AGENTS)
def test_every_profile_agent_kind_has_a_valid_versioned_rules_file(agent: str) -> None:
    path = REPO / "paneworker" / "status" / "rules" / f"{agent}.json"
    raw = json.loads(path.read_text())
    assert raw["agent"] == agent and raw["version"] >= 1
    assert all(rule.get("note") for rule in raw["rules"]), "every rule says where it comes from"
    rules = bundled_rules(agent)
    assert (rules.agent, rules.version) == (agent, raw["version"])


def test_generic_and_unknown_kinds_have_no_rules() -> None:
    for agent in ("generic", "crush", "../demo", "Kiro"):
        rules = bundled_rules(agent)
        assert (rules.agent, rules.rules) == ("generic", ())
        assert classify(rules, ["anything", "› Allow once", "esc to interrupt"]) == Decision(
            "unknown"
        )


def test_rules_files_are_package_data() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "status/rules/*.json" in pyproject["tool"]["setuptools"]["package-data"]["paneworker"]


# -- 2. the file format is checked ---------------------------------------------------


def rules_json(*rules: Mapping[str, object], agent: str = "kiro", version: int = 1) -> bytes:
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
        ({"id": "a", "state": "idle", "on": "icon", "all": ["x"]}, "Invalid enum value"),
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


def test_startup_quiet_is_bounded_and_defaults_to_none() -> None:
    rule = {"id": "a", "state": "idle", "all": ["x"]}
    assert parse_rules(rules_json(rule), agent="kiro", source="t").startup_quiet_s == 0
    for bad in (-1, 10.5):
        data = json.dumps({"agent": "kiro", "version": 1, "startup_quiet_s": bad, "rules": [rule]})
        with pytest.raises(RulesError, match="startup_quiet_s"):
            parse_rules(data.encode(), agent="kiro", source="t")
    assert bundled_rules("gemini").startup_quiet_s == bundled_rules("qwen").startup_quiet_s > 0


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


def test_an_override_replaces_a_newer_kinds_bundled_rules(tmp_path: Path) -> None:
    rule = {"id": "prompt", "state": "idle", "regex": "^aider> $"}
    version = bundled_rules("aider").version
    (tmp_path / "aider.json").write_bytes(rules_json(rule, agent="aider", version=version))
    assert decide_with(load_rules("aider", tmp_path), ["aider> "]) == ("idle", None)


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
    # Gemini CLI 0.61.0 and Qwen Code 0.24.4 (screen and window title): the trust and sign-in
    # screens read blocked although the title already says ready; prompt_reply, permission_*
    # against the fake model (marks ready, typed, working, dialog, replied/allowed/denied).
    ("gemini", "startup", 9303, ("blocked", "permission")),
    ("gemini", "startup", 12385, ("blocked", "permission")),
    ("gemini", "trusted", 9303, ("blocked", "permission")),
    ("gemini", "trusted", 26447, ("blocked", "auth")),
    ("gemini", "trusted", 30414, ("blocked", "auth")),
    ("gemini", "prompt_reply", 4265, ("idle", None)),
    ("gemini", "prompt_reply", 5622, ("idle", None)),
    ("gemini", "prompt_reply", 9145, ("working", None)),
    ("gemini", "prompt_reply", 35194, ("idle", None)),
    ("gemini", "permission_allow", 35131, ("blocked", "permission")),
    ("gemini", "permission_allow", 69490, ("idle", None)),
    ("gemini", "permission_deny", 33608, ("blocked", "permission")),
    ("gemini", "permission_deny", 36346, ("idle", None)),
    ("qwen", "startup", 22849, ("blocked", "auth")),
    ("qwen", "provider_menu", 22849, ("blocked", "auth")),
    ("qwen", "provider_menu", 26800, ("blocked", "auth")),
    ("qwen", "provider_menu", 32769, ("blocked", "auth")),
    ("qwen", "trust", 15888, ("blocked", "permission")),
    ("qwen", "trust", 20039, ("blocked", "permission")),
    ("qwen", "trust", 24557, ("blocked", "auth")),
    ("qwen", "prompt_reply", 38547, ("idle", None)),
    ("qwen", "prompt_reply", 42965, ("idle", None)),
    ("qwen", "prompt_reply", 52423, ("working", None)),
    ("qwen", "prompt_reply", 137339, ("idle", None)),
    ("qwen", "permission_allow", 144728, ("blocked", "permission")),
    ("qwen", "permission_allow", 232208, ("idle", None)),
    ("qwen", "permission_deny", 172263, ("blocked", "permission")),
    ("qwen", "permission_deny", 186542, ("idle", None)),
]


@pytest.mark.parametrize(
    ("cli", "scenario", "upto", "expected"),
    RECORDED,
    ids=[f"{c}/{s}@{n}" for c, s, n, _ in RECORDED],
)
def test_recorded_screens_classify_as_the_program_was(
    cli: str, scenario: str, upto: int, expected: tuple[str, str | None]
) -> None:
    term = recorded(cli, scenario, upto)
    assert decide(cli, term.display_lines(), term.title) == expected


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


# What each dialog of Gemini CLI and Qwen Code shows, and the kind it must read as.
DIALOG_TEXTS = {
    "gemini": {
        "do you trust the files in this folder?": "permission",
        "how would you like to authenticate": "auth",
        "allow execution of [shell]?": "permission",
    },
    "qwen": {
        "do you trust this folder?": "permission",
        "connect a provider": "auth",
        "third-party providers · provider": "auth",
        "allow execution of: '": "permission",
    },
}
TITLED = [
    (cli, path.stem)
    for cli in ("gemini", "qwen")
    for path in sorted((CAPTURED / cli).glob("*.bin"))
]


@pytest.mark.parametrize(("cli", "scenario"), TITLED, ids=[f"{c}/{s}" for c, s in TITLED])
def test_a_stale_title_never_reads_idle_over_a_dialog(cli: str, scenario: str) -> None:
    """At every recorded read: while a dialog's text is on screen the pane never reads idle
    (Gemini's title says '◇  Ready' over its trust and sign-in screens, Qwen's 'Qwen - <dir>'),
    and once the whole dialog is drawn it reads blocked with the dialog's kind."""
    data = (CAPTURED / cli / f"{scenario}.bin").read_bytes()
    chunks = json.loads((CAPTURED / cli / f"{scenario}.json").read_text())["chunks"]
    term = screen_of(b"")
    start = 0
    dialogs = 0
    for _t, end in chunks:
        term.feed(data[start:end])
        start = end
        text = "\n".join(term.display_lines()).lower()
        state, kind = decide(cli, term.display_lines(), term.title)
        shown = [k for needle, k in DIALOG_TEXTS[cli].items() if needle in text]
        if shown:
            assert state != "idle", (end, term.title)
        if state == "blocked":
            dialogs += 1
            assert kind in (shown or ["permission"]), (end, kind, shown, term.title)
    assert (dialogs > 0) == (scenario != "prompt_reply")  # the one recording without a dialog


def test_a_title_alone_never_makes_a_pane_idle() -> None:
    ready = "◇  Ready (work)" + " " * 65
    assert decide("gemini", [], ready) == ("unknown", None)
    assert decide("gemini", ["some output", "  ⠋ frame half drawn"], ready) == ("unknown", None)
    assert decide("qwen", ["  ? Shell rm -rf build"], "Qwen - work") == ("unknown", None)
    # With the idle prompt on screen, the title decides and says so.
    idle = recorded("gemini", "prompt_reply", 35194)
    decision = classify(bundled_rules("gemini"), idle.display_lines(), idle.title)
    assert (decision.state, decision.source, decision.rule_id) == ("idle", "title", "title_ready")
    # Without a title the screen alone decides (a CLI with titles switched off).
    decision = classify(bundled_rules("gemini"), idle.display_lines(), "")
    assert (decision.state, decision.source) == ("idle", "screen")


def test_a_working_or_blocked_title_wins_over_an_idle_screen() -> None:
    """Gemini keeps its input box on screen while a turn runs, and says 'Action Required'
    in its title a read before it draws a confirmation."""
    idle = recorded("gemini", "prompt_reply", 35194).display_lines()
    assert decide("gemini", idle, "✦  Working… (work)") == ("working", None)
    assert decide("gemini", idle, "⏲  Working… (work)") == ("working", None)
    assert decide("gemini", idle, "✋  Action Required (work)") == ("blocked", "permission")
    qwen_idle = recorded("qwen", "prompt_reply", 137339).display_lines()
    assert decide("qwen", qwen_idle, "\u25d0\ufe0e Qwen - work") == ("working", None)
    assert decide("qwen", qwen_idle, "\u2733\ufe0e Qwen - work") == ("blocked", "permission")
    assert decide("qwen", qwen_idle, "my session") == ("idle", None)


S_IDLE, S_WORK, S_BLOCK = Decision("idle"), Decision("working"), Decision("blocked", "auth")
T_IDLE, T_WORK = Decision("idle", source="title"), Decision("working", source="title")
T_BLOCK = Decision("blocked", "permission", source="title")


@pytest.mark.parametrize(
    ("screen", "title", "expected"),
    [
        (S_BLOCK, T_IDLE, S_BLOCK),  # the stale title over a dialog
        (S_BLOCK, T_WORK, S_BLOCK),
        (S_BLOCK, T_BLOCK, S_BLOCK),  # the screen knows the kind
        (S_IDLE, T_BLOCK, T_BLOCK),
        (UNKNOWN, T_BLOCK, T_BLOCK),  # a dialog the screen rules do not know
        (S_IDLE, T_WORK, T_WORK),
        (UNKNOWN, T_WORK, T_WORK),
        (S_WORK, T_IDLE, S_WORK),  # the title went ready a frame early
        (S_WORK, UNKNOWN, S_WORK),
        (S_IDLE, T_IDLE, T_IDLE),
        (S_IDLE, UNKNOWN, S_IDLE),
        (UNKNOWN, T_IDLE, UNKNOWN),  # never idle from the title alone
        (UNKNOWN, UNKNOWN, UNKNOWN),
    ],
)
def test_screen_and_title_combine_in_a_fixed_order(
    screen: Decision, title: Decision, expected: Decision
) -> None:
    assert combine(screen, title) == expected


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
    # Claude Code 2.1.332's start-up offer, copied from a live pane
    # (tests/realcli/test_real_startup_screens.py).
    ("claude", "fullscreen_offer", ("blocked", "permission")),
    ("claude", "auto_mode_offer", ("blocked", "permission")),
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
    ("gemini", "prose_permission", ("idle", None)),
    ("qwen", "prose_permission", ("idle", None)),
    # Kilo 7.7.7 and Aider 0.86.2: prose over a recorded idle layout; Aider's start-up
    # question as measured live (0.86.2 without --no-gitignore).
    ("kilo", "prose_permission", ("idle", None)),
    ("aider", "prose_permission", ("idle", None)),
    ("aider", "startup_question", ("blocked", "question")),
    # Pi 0.73.1 with no model configured, copied from a live pane.
    ("pi", "no_models", ("blocked", "auth")),
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
    for other in ("kiro", "devin", "opencode", "claude", "codex", "gemini", "qwen", "demo"):
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
        instance="i",
        secret=b"s",
        endpoint="ipc:///nonexistent",
        launch=PaneLaunch(
            pane="p", agent=agent, argv=argv or ["true"], cwd=cwd, env={}, cols=120, rows=40
        ),
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

    def settle_start(self) -> None:
        """Enough for a steady screen before the first input (``startup_quiet_s``)."""
        self.settle()
        self.step(self.screen.rules.startup_quiet_s)

    def replay(
        self, data: bytes, chunks: list[list[float]], upto: int | None = None, scale: float = 1.0
    ) -> None:
        """Feed the recorded reads at their recorded times (stretched by ``scale``, as on a
        slower machine), looking every 50 ms between."""
        start = 0
        base = self.clock.now - chunks[0][0] * scale
        for t_recorded, end in chunks:
            t = t_recorded * scale
            while self.clock.now + 0.05 < base + t:
                self.step(0.05)
            self.clock.now = max(self.clock.now, base + t)
            self.screen.feed(data[start : int(end)])
            start = int(end)
            if upto is not None and start >= upto:
                break
        for _ in range(40):  # two seconds more
            self.step(0.05)

    @property
    def statuses(self) -> list[tuple[str, str | None, int, str]]:
        return [
            (m.status.state, m.status.kind, m.status.turn, m.status.source)
            for m in self.sent
            if isinstance(m, Status)
        ]

    def last_status(self) -> tuple[str, str | None, int, str]:
        """A method: mypy would keep ``statuses[-1]`` narrowed from one assert to the next."""
        return self.statuses[-1]


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


def test_aider_clearing_its_spinner_before_the_answer_does_not_end_the_turn() -> None:
    """Aider 0.86.2 erases its "Waiting for" spinner before it draws the model's answer:
    for 20 ms in the recording (offsets 2634-2646), longer on a loaded machine, its
    screen is its idle one (the submitted prompt under its rule). Held for 0.3 s (three
    looks), that frame must not end the turn: the next state is the dialog. Without
    ``idle_quiet_s`` it read done first (a drift-check run saw a turn done without its
    reply)."""
    data = (CAPTURED / "aider" / "permission_allow.bin").read_bytes()
    for quiet_s in (None, 0.0):
        pane = Pane("aider")
        if quiet_s is not None:
            pane.screen.rules = dataclasses.replace(pane.screen.rules, idle_quiet_s=quiet_s)
        pane.screen.feed(data[:1967])
        pane.settle_start()
        pane.screen.status.note_input()  # the recorded prompt was submitted here
        pane.screen.feed(data[1967:2592])
        pane.settle()
        pane.screen.feed(data[2592:2646])  # the spinner erased, nothing drawn yet
        for _ in range(3):
            pane.step()
        pane.screen.feed(data[2646:3721])
        pane.settle()
        if quiet_s is None:
            assert pane.statuses == [
                ("idle", None, 0, "screen"),
                ("working", None, 1, "screen"),
                ("blocked", "permission", 1, "screen"),
            ]
        else:
            assert ("done", None, 1, "screen") in pane.statuses  # the rule is what holds it


@pytest.mark.parametrize(
    ("cli", "ready", "working", "replied"),
    [("gemini", 4265, 9145, 35194), ("qwen", 38547, 52423, 137339)],
)
def test_a_recorded_turn_is_idle_working_done_from_the_title(
    cli: str, ready: int, working: int, replied: int
) -> None:
    data = (CAPTURED / cli / "prompt_reply.bin").read_bytes()
    pane = Pane(cli)
    pane.screen.feed(data[:ready])
    pane.settle_start()
    pane.screen.status.note_input()  # the recorded prompt was submitted here
    pane.screen.feed(data[ready:working])
    pane.settle()
    pane.screen.feed(data[working:replied])
    pane.settle()
    assert pane.statuses == [
        ("idle", None, 0, "title"),
        ("working", None, 1, "title"),
        ("done", None, 1, "title"),
    ]
    assert "hello from the fake model" in pane.screen.text(None, False)


def test_a_title_change_alone_is_looked_at() -> None:
    """Qwen's title says 'responding' before anything on screen changes."""
    data = (CAPTURED / "qwen" / "prompt_reply.bin").read_bytes()
    pane = Pane("qwen")
    pane.screen.feed(data[:137339])
    pane.settle_start()
    assert pane.statuses == [("idle", None, 0, "title")]
    assert pane.screen.rules_deadline() is None  # nothing new to look at
    generation = pane.screen.terminal.text_generation
    pane.screen.feed("\x1b]2;\u25d0\ufe0e Qwen - work\x07".encode())
    assert pane.screen.terminal.text_generation == generation
    assert pane.screen.rules_deadline() is not None
    pane.settle()
    assert pane.statuses[-1] == ("working", None, 0, "title")


def test_a_provisional_input_box_before_the_trust_prompt_never_reads_idle() -> None:
    """Gemini CLI with API-key auth draws its input box (title '◇  Ready') 0.15 s before its
    folder-trust prompt (live, on a busy machine, long enough to read idle). Replayed at the
    recorded pace and three times slower, the pane goes straight to blocked; without
    ``startup_quiet_s`` the slow replay reads idle first."""
    data = (CAPTURED / "gemini" / "trust_authed.bin").read_bytes()
    chunks = json.loads((CAPTURED / "gemini" / "trust_authed.json").read_text())["chunks"]
    for scale in (1.0, 3.0):
        pane = Pane("gemini")
        pane.replay(data, chunks, scale=scale)
        assert pane.statuses == [("blocked", "permission", 0, "screen")]
    hasty = Pane("gemini")
    hasty.screen.rules = dataclasses.replace(hasty.screen.rules, startup_quiet_s=0.0)
    hasty.replay(data, chunks, scale=3.0)
    assert hasty.statuses == [("idle", None, 0, "title"), ("blocked", "permission", 0, "screen")]


REPLAYED = [
    ("gemini", "prompt_reply", [("idle", None, 0), ("working", None, 1), ("done", None, 1)]),
    ("qwen", "prompt_reply", [("idle", None, 0), ("working", None, 1), ("done", None, 1)]),
    (
        "gemini",
        "permission_allow",
        [
            ("idle", None, 0),
            ("working", None, 1),
            ("blocked", "permission", 1),
            ("working", None, 1),
            ("done", None, 1),
        ],
    ),
    (
        "qwen",
        "permission_allow",
        [
            ("idle", None, 0),
            ("working", None, 1),
            ("blocked", "permission", 1),
            ("working", None, 1),
            ("done", None, 1),
        ],
    ),
    (
        "gemini",
        "permission_deny",
        [
            ("idle", None, 0),
            ("working", None, 1),
            ("blocked", "permission", 1),
            ("cancelled", None, 1),
        ],
    ),
    (
        "qwen",
        "permission_deny",
        [
            ("idle", None, 0),
            ("working", None, 1),
            ("blocked", "permission", 1),
            ("cancelled", None, 1),
        ],
    ),
]


@pytest.mark.parametrize(
    ("cli", "scenario", "expected"), REPLAYED, ids=[f"{c}/{s}" for c, s, _ in REPLAYED]
)
def test_recorded_sessions_replayed_at_their_pace_give_one_clean_turn(
    cli: str, scenario: str, expected: list[tuple[str, str | None, int]]
) -> None:
    """The whole recording at its recorded timing: the prompt is turn 1, nothing before it
    is a turn, the dialog is blocked(permission) and the answer ends the turn done or, after
    Esc (deny_once marks the cancel), cancelled; the exit at the end is not counted."""
    data = (CAPTURED / cli / f"{scenario}.bin").read_bytes()
    meta = json.loads((CAPTURED / cli / f"{scenario}.json").read_text())
    marks = {mark["name"]: mark["offset"] for mark in meta["marks"]}
    last = marks.get("replied", marks.get("allowed", marks.get("denied")))
    pane = Pane(cli)
    pane.replay(data, meta["chunks"], upto=marks["typed"])
    pane.screen.status.note_input()  # Enter of the recorded prompt came right after "typed"
    rest = [[t, end] for t, end in meta["chunks"] if end > marks["typed"]]
    if "dialog" in marks and scenario.endswith("deny"):
        before = [[t, end] for t, end in rest if end <= marks["dialog"]]
        pane.replay(data, before)
        pane.screen.status.note_cancel()  # what deny_once does as it presses Esc
        rest = [[t, end] for t, end in rest if end > marks["dialog"]]
    pane.replay(data, [[t, end] for t, end in rest if end <= last] or rest[:1])
    got = [(state, kind, turn) for state, kind, turn, _source in pane.statuses]
    assert got == expected, pane.statuses


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
    assert pane.last_status() == ("unknown", None, 0, "osc7501")
    pane.settle()
    assert pane.last_status() == ("blocked", "permission", 0, "screen")
    pane.screen.status.note_input()
    pane.screen.feed(b"\x1b]7501;state=working:app=claude-code\x07")
    pane.settle()
    assert pane.last_status() == ("working", None, 1, "osc7501")


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


@pytest.mark.parametrize("agent", ["demo", "claude", "gemini"])
def test_a_pane_whose_program_exited_has_no_rules_deadline(agent: str) -> None:
    # The rules never look at a pane whose program is gone; a deadline they would never
    # act on kept the worker's loop from sleeping (a program that exited at once: 100 %
    # CPU until the pane was removed, seen in CI).
    pane = Pane(agent)
    pane.screen.feed(b"starting\r\n")
    assert pane.screen.rules_deadline() is not None  # something new to look at
    pane.screen.status.set_lifecycle("exited", exit_code=1)
    assert pane.screen.rules_deadline() is None
    pane.step()
    assert pane.screen.rules_deadline() is None
