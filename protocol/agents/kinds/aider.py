"""Aider (PyPI ``aider-chat``): its "Run shell command?" question and its launch rules.

Measured on 0.86.2 against the fake model on loopback (tests/realcli). Aider calls no
tools: it runs the commands of a fenced shell block in the model's reply after asking,
on the screen's last line, ``Run shell command? (Y)es/(N)o/(D)on't ask again [Yes]:``
under the command. It reads a whole line: ``y`` Enter runs the command, ``n`` Enter
does not and the turn ends. "Don't ask again" is never pressed, and Enter alone (which
means Yes) is never planned. Several commands at once ("Run shell commands?") were not
measured and are refused.

A command that prints anything is followed, in the same turn, by ``Add command output
to the chat? (Y)es/(N)o/(D)on't ask again [Yes]:``. It is part of the same choice
(docs/design.md §13): the plan for ``allow_once`` carries it as its follow-up, which the
worker answers ``y`` Enter when it shows, so the output goes back to the model as every
other kind's allowed tool result does, and the turn ends ``done``. ``deny_once`` runs
nothing, so nothing follows it.

Its ``--yes-always`` (and ``--yes``, any spelling starting so) answers every question
with yes; ``AIDER_YES_ALWAYS`` in the environment does the same and is refused in a
profile. An ``.aider.conf.yml`` in the working directory or HOME saying ``yes-always:
true`` is not read by panewarden (docs/operations.md "Agent kinds").
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.agents.dialog_kit import ALLOW_ONCE, DialogPlan, DialogScreen, refuse
from protocol.agents.spec import AgentSpec, LaunchRules

QUESTION = "Run shell command? (Y)es/(N)o/(D)on't ask again [Yes]:"
OUTPUT_QUESTION = "Add command output to the chat? (Y)es/(N)o/(D)on't ask again [Yes]:"
REFUSED_ENV = ("AIDER_YES_ALWAYS", "AIDER_YES")


def auto_approve_flag(args: Sequence[str]) -> tuple[int, str] | None:
    """The first ``--yes…`` element of ``args`` (``--yes``, ``--yes-always=1``, …)."""
    for index, arg in enumerate(args):
        if arg.casefold().startswith("--yes"):
            return index, "it answers every question, running commands, with yes"
    return None


def recognise(screen: DialogScreen, answer: str) -> DialogPlan:
    """The question on the last non-empty row, nothing typed after it, the command above."""
    lines = screen.lines
    rows = [row for row, line in enumerate(lines) if line.strip()]
    if len(rows) < 2:
        raise refuse("no Aider 'Run shell command?' question is on screen")
    last = lines[rows[-1]].rstrip()
    if last != QUESTION:
        # Typed text after the question, another question, or the plural form.
        raise refuse("the screen's last line is not Aider's bare 'Run shell command?' question")
    command = lines[rows[-2]].strip()
    if not command or command.endswith(":"):
        raise refuse("the Aider question shows no command above it")
    if answer == ALLOW_ONCE:
        return DialogPlan((b"y\r",), (command, last), follow_up=output_question)
    return DialogPlan((b"n\r",), (command, last))


def output_question(screen: DialogScreen, answer: str) -> DialogPlan:
    """The bare "Add command output to the chat?" question on the last non-empty row."""
    rows = [line.rstrip() for line in screen.lines if line.strip()]
    if not rows or rows[-1] != OUTPUT_QUESTION:
        raise refuse("the screen's last line is not Aider's bare 'Add command output' question")
    return DialogPlan((b"y\r" if answer == ALLOW_ONCE else b"n\r",), (OUTPUT_QUESTION,))


SPEC = AgentSpec(
    name="aider",
    evidence="measured",
    rules="aider",
    dialogs=recognise,
    enter_after_echo=False,
    submit_sign="turn",
    launch=LaunchRules(
        cli_names=("aider",),
        refusal="auto-approval refused for aider",
        refused_flag=auto_approve_flag,
        refused_env=REFUSED_ENV,
        refused_env_why="it answers every question, running commands, with yes",
    ),
    model_flags=None,
    summary="Aider: screen status, its 'Run shell command?' question; --yes/--yes-always refused",
    # The rest (chat history, tags cache) it writes in the working directory.
    home_writable=(".aider/",),
    home_programs=(".aider.conf.yml", ".aider.model.settings.yml"),
    credentials=(".aider/oauth-keys.env",),
    choice_interrupt=b"\x03",  # no cancel key of its choices was measured
)
