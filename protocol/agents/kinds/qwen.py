"""Qwen Code (npm ``@qwen-code/qwen-code``): the shell-command confirmation of 0.24.4
(``tests/captured/qwen``); its folder-trust prompt is recognised and refused both ways
(every answer is saved). Its own default approval mode, ``auto``, approves calls without
a dialog, so the mode must be pinned (:mod:`protocol.agents.approval_mode`); Enter waits
for the echo of a pasted prompt.
"""

from __future__ import annotations

import re

from protocol.agents import approval_mode
from protocol.agents.dialog_kit import (
    DENY_ONCE,
    ESC,
    DialogPlan,
    DialogScreen,
    navigate,
    norm,
    radio_options,
    refuse,
    refuse_answer,
    unboxed,
)
from protocol.agents.spec import AgentSpec, LaunchRules

_QWEN_QUESTION = re.compile(r"^allow execution of: '.+'\?$")
_QWEN_HEADER = "? shell "
_QWEN_ALLOW = "yes, allow once"
_QWEN_DENY = "no, suggest changes (esc)"
# "Always allow …" options write permanent rules (project or user settings).
_QWEN_RULE_PREFIX = "always allow "
_QWEN_WAITING = "waiting for user confirmation..."
_QWEN_BODY_ROWS = 8
_QWEN_TRUST_QUESTION = "do you trust this folder?"


def recognise(screen: DialogScreen, answer: str) -> DialogPlan:
    """Qwen Code's shell-command confirmation (0.24.4, measured against a fake model)::

    ? Shell <command> (<description>) ←
       <command>
     Allow execution of: '<root command>'?
     › 1. Yes, allow once
       2. Always allow run '<root> *' commands in this project
       3. Always allow run '<root> *' commands for this user
       4. No, suggest changes (esc)
    ⠏ Waiting for user confirmation...
    """
    rows = [norm(line) for line in screen.lines]
    if any(unboxed(line) == _QWEN_TRUST_QUESTION for line in screen.lines):
        # Measured (0.24.4 with security.folderTrust.enabled): both "Trust folder" and
        # "Don't trust (esc)" are saved in trustedFolders.json.
        raise refuse_answer("every answer to Qwen Code's folder-trust prompt is saved for good")
    questions = [row for row, text in enumerate(rows) if _QWEN_QUESTION.match(text)]
    if len(questions) != 1:
        raise refuse("no single Qwen Code shell-command confirmation is on screen")
    question = questions[0]
    headers = [
        row
        for row in range(max(0, question - _QWEN_BODY_ROWS), question)
        if rows[row].startswith(_QWEN_HEADER)
    ]
    if len(headers) != 1:
        raise refuse("the Qwen Code confirmation is not about a shell command")
    radio = radio_options(rows, question + 1)
    tail = next((row for row in range(radio.end_row, len(rows)) if rows[row]), None)
    if tail is None or not rows[tail].endswith(_QWEN_WAITING):
        raise refuse("the Qwen Code dialog is not complete on screen")
    known = all(
        label in (_QWEN_ALLOW, _QWEN_DENY) or label.startswith(_QWEN_RULE_PREFIX)
        for label in radio.labels
    )
    if not known or radio.labels.count(_QWEN_ALLOW) != 1 or radio.labels.count(_QWEN_DENY) != 1:
        raise refuse("the Qwen Code confirmation does not offer one 'Yes, allow once', one 'No'")
    body = [rows[row] for row in range(headers[0], question + 1) if rows[row]]
    fingerprint = (*body, *radio.labels)
    if answer == DENY_ONCE:
        # Measured (0.24.4, tests/captured/qwen/permission_deny and live): Esc is the
        # "No, suggest changes (esc)" option; nothing runs and no further model call.
        return DialogPlan((ESC,), fingerprint)
    target = radio.labels.index(_QWEN_ALLOW)
    return DialogPlan(navigate(screen, radio.focus, target), fingerprint)


SPEC = AgentSpec(
    name="qwen",
    evidence="measured",
    rules="qwen",
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
    summary="Qwen Code: title and screen status, shell confirmations, provider and trust "
    "screens; the approval mode pinned",
    home_writable=(".qwen/",),
    home_programs=(".qwen/settings.json", ".qwen/QWEN.md", ".qwen/extensions/", ".qwen/commands/"),
    credentials=(".qwen/oauth_creds.json",),
    choice_interrupt=b"\x1b",  # its dialogs' documented cancel key (measured)
)
