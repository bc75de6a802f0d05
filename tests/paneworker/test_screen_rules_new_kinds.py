"""Kilo Code's, Aider's and Pi's screen rules on their recordings (``tests/captured``).

At each mark of each recording the pane reads the state the recorded moment shows; at
every recorded read, a dialog's text on screen never reads ``idle`` and the whole dialog
reads ``blocked``/``permission`` (Kilo's reject panel too: the decision is still pending).
"""

from __future__ import annotations

import json

import pytest

from paneworker.screen.terminal import Terminal
from paneworker.status.screen_rules import bundled_rules, classify
from tests.paneworker.dialog_screens import CAPTURED, terminal_with

Expected = tuple[str, str | None]
MARKS: dict[tuple[str, str], dict[str, Expected]] = {
    ("kilo", "permission_deny"): {
        "ready": ("idle", None),
        "typed": ("idle", None),
        "dialog": ("blocked", "permission"),
        "reject_panel": ("blocked", "permission"),
        "denied": ("idle", None),
    },
    ("aider", "permission_allow"): {
        "ready": ("idle", None),
        "typed": ("idle", None),
        "dialog": ("blocked", "permission"),
        "allowed": ("idle", None),
    },
    ("pi", "prompt_reply"): {
        "ready": ("idle", None),
        "typed": ("idle", None),
        "working": ("working", None),
        "replied": ("idle", None),
    },
}
DIALOG_TEXT = {"kilo": ("permission required", "reject permission"), "aider": ("run shell",)}
CASES = [(cli, scenario, name) for (cli, scenario), marks in MARKS.items() for name in marks]


def decide(cli: str, term: Terminal) -> tuple[str, str | None]:
    decision = classify(bundled_rules(cli), term.display_lines(), term.title)
    return decision.state, decision.kind


@pytest.mark.parametrize(("cli", "scenario", "name"), CASES, ids=["/".join(c) for c in CASES])
def test_each_recorded_mark_reads_its_state(cli: str, scenario: str, name: str) -> None:
    meta = json.loads((CAPTURED / cli / f"{scenario}.json").read_text())
    (offset,) = [m["offset"] for m in meta["marks"] if m["name"] == name]
    data = (CAPTURED / cli / f"{scenario}.bin").read_bytes()[:offset]
    assert decide(cli, terminal_with(data, 120, 40)) == MARKS[cli, scenario][name]


@pytest.mark.parametrize(
    ("cli", "scenario"), [("kilo", "permission_deny"), ("aider", "permission_allow")]
)
def test_a_dialog_on_screen_never_reads_idle(cli: str, scenario: str) -> None:
    data = (CAPTURED / cli / f"{scenario}.bin").read_bytes()
    chunks = json.loads((CAPTURED / cli / f"{scenario}.json").read_text())["chunks"]
    term = terminal_with(b"", 120, 40)
    start = 0
    blocked = 0
    for _t, end in chunks:
        term.feed(data[start:end])
        start = end
        text = "\n".join(term.display_lines()).lower()
        state, kind = decide(cli, term)
        if any(needle in text for needle in DIALOG_TEXT[cli]) and "[yes]: y" not in text:
            assert state != "idle", end
        if state == "blocked":
            blocked += 1
            assert kind == "permission", end
    assert blocked > 0
