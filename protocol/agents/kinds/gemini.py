"""Gemini CLI (npm ``@google/gemini-cli``): the shell-command confirmation and the
folder-trust prompt of 0.61.0 (``tests/captured/gemini``; trusting is refused, Esc
declines and Gemini exits). Its approval mode must be pinned on the command line
(:mod:`protocol.agents.approval_mode`), and Enter waits for the echo of a pasted prompt.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.agents import approval_mode
from protocol.agents.dialog_kit import (
    ALLOW_ONCE,
    BLANK_BOX_ROW,
    DENY_ONCE,
    ESC,
    RADIO_OPTION,
    DialogPlan,
    DialogScreen,
    navigate,
    radio_options,
    refuse,
    refuse_answer,
    unboxed,
)
from protocol.agents.spec import AgentSpec, LaunchRules

_GEMINI_QUESTION = "allow execution of [shell]?"
_GEMINI_HEADER = "? shell "
_GEMINI_ALLOW = "allow once"
_GEMINI_DENY = "no, suggest changes (esc)"
# "Allow for this session" remembers the approval until Gemini exits: never the target.
_GEMINI_OPTIONS = frozenset({_GEMINI_ALLOW, "allow for this session", _GEMINI_DENY})
_GEMINI_TRUST_QUESTION = "do you trust the files in this folder?"
_GEMINI_TRUST_OPTIONS = ("trust folder (", "trust parent folder (", "don't trust")
_GEMINI_BODY_ROWS = 16


def recognise(screen: DialogScreen, answer: str) -> DialogPlan:
    """Gemini CLI's shell-command confirmation and its folder-trust prompt."""
    rows = [unboxed(line) for line in screen.lines]
    trust = [row for row, text in enumerate(rows) if text == _GEMINI_TRUST_QUESTION]
    if trust:
        return _trust_prompt(screen, rows, trust, answer)
    questions = [row for row, text in enumerate(rows) if text == _GEMINI_QUESTION]
    if len(questions) != 1:
        raise refuse("no single Gemini CLI shell-command confirmation is on screen")
    question = questions[0]
    headers = [
        row
        for row in range(max(0, question - _GEMINI_BODY_ROWS), question)
        if rows[row].startswith(_GEMINI_HEADER)
    ]
    if len(headers) != 1:
        raise refuse("the Gemini CLI confirmation is not about a shell command")
    radio = radio_options(rows, question + 1)
    _check_closed(screen, radio.end_row)
    if not set(radio.labels) <= _GEMINI_OPTIONS or len(set(radio.labels)) != len(radio.labels):
        raise refuse("the Gemini CLI confirmation offers options that were never measured")
    if _GEMINI_ALLOW not in radio.labels or _GEMINI_DENY not in radio.labels:
        raise refuse("the Gemini CLI confirmation does not offer 'Allow once' and 'No'")
    body = [rows[row] for row in range(headers[0], question + 1) if rows[row]]
    fingerprint = (*body, *radio.labels)
    if answer == DENY_ONCE:
        # Measured (0.61.0, tests/captured/gemini/permission_deny and live): Esc is the
        # "No, suggest changes (esc)" option; the command does not run ("Request
        # cancelled.") and no further model call is made.
        return DialogPlan((ESC,), fingerprint)
    target = radio.labels.index(_GEMINI_ALLOW)
    return DialogPlan(navigate(screen, radio.focus, target), fingerprint)


def _check_closed(screen: DialogScreen, row: int) -> None:
    """The options must be followed by the dialog box's bottom border (blank rows inside
    the box allowed): the whole dialog is on screen."""
    lines = screen.lines
    while row < len(lines) and BLANK_BOX_ROW.match(lines[row]):
        row += 1
    if row >= len(lines) or not lines[row].lstrip().startswith("╰"):
        raise refuse("the Gemini CLI dialog is not complete on screen")


def _trust_prompt(
    screen: DialogScreen, rows: Sequence[str], questions: list[int], answer: str
) -> DialogPlan:
    """The folder-trust prompt (0.61.0): ``● 1. Trust folder (<dir>)``,
    ``2. Trust parent folder (<dir>)``, ``3. Don't trust``, inside a box."""
    if len(questions) != 1:
        raise refuse("more than one Gemini CLI folder-trust prompt is on screen")
    radio = radio_options(rows, _first_option_row(rows, questions[0] + 1))
    _check_closed(screen, radio.end_row)
    shaped = len(radio.labels) == len(_GEMINI_TRUST_OPTIONS) and all(
        label.startswith(prefix)
        for label, prefix in zip(radio.labels, _GEMINI_TRUST_OPTIONS, strict=True)
    )
    if not shaped:
        raise refuse("the Gemini CLI folder-trust prompt does not show its three options")
    if answer == ALLOW_ONCE:
        raise refuse_answer("trusting a folder is saved for good and is never selected")
    # Measured (0.61.0, live): Esc ends Gemini CLI ("A folder trust level must be selected
    # to continue. Exiting since escape was pressed.") and saves nothing. "3. Don't trust"
    # would be saved in trustedFolders.json: never pressed.
    return DialogPlan((ESC,), (rows[questions[0]], *radio.labels))


def _first_option_row(rows: Sequence[str], row: int) -> int:
    """The first numbered option at or below ``row`` (past the trust prompt's text)."""
    while row < len(rows) and not RADIO_OPTION.match(rows[row]):
        row += 1
    return row


SPEC = AgentSpec(
    name="gemini",
    evidence="measured",
    rules="gemini",
    dialogs=recognise,
    enter_after_echo=True,
    submit_sign="turn",
    launch=LaunchRules(
        cli_names=approval_mode.CLI_NAMES,
        refusal=approval_mode.REFUSAL,
        refused_flag=approval_mode.refused_flag,
        required=approval_mode.missing_pin,
    ),
    model_flags=None,
    summary="Gemini CLI: title and screen status, shell and folder-trust dialogs; "
    "the approval mode pinned",
    home_writable=(".gemini/",),
    home_programs=(
        ".gemini/settings.json",
        ".gemini/GEMINI.md",
        ".gemini/extensions/",
        ".gemini/commands/",
    ),
    credentials=(
        ".gemini/oauth_creds.json",
        ".gemini/google_accounts.json",
        ".gemini/mcp-oauth-tokens.json",
    ),
    choice_interrupt=b"\x1b",  # its dialogs' documented cancel key (measured)
)
