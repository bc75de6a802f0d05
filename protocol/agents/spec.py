"""What panewarden knows of one agent kind, in one value: :class:`AgentSpec`.

Both processes read it: the supervisor its launch rules (what a profile or a caller's
argv must and must not say) and its reviewer model flags; the worker its screen rules
file, its dialog recogniser and its prompt-submission policy; the worker template the
rules it parses before forking. Each kind's spec is one module under
``protocol.agents.kinds``, listed once in ``protocol.agents.table``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from protocol.agents.dialog_kit import Recogniser

Evidence = Literal["measured", "inferred", "none"]
# What makes the worker answer "sent" after Enter (docs/operations.md "Delivery
# confirmation"): ``turn``: only the program's status (a turn opened, working, a dialog,
# its exit); ``turn_or_cleared``: also the typed text leaving the input line, for kinds
# whose working state may never be recognised (no rules for it, or rules not measured).
SubmitSign = Literal["turn", "turn_or_cleared"]

# The first element of an argument list that the kind refuses, with why; None if none.
FlagCheck = Callable[[Sequence[str]], "tuple[int, str] | None"]
# Why an argv lacks what the kind requires of it (a pinned approval mode); None if fine.
ArgvRequirement = Callable[[Sequence[str]], "str | None"]


@dataclass(frozen=True)
class LaunchRules:
    """What a launch of the kind must and must not say, checked when the profiles file
    loads (``config_invalid``) and when a caller picks argv (``forbidden``).

    They apply to every profile of the kind, and to a profile of any kind whose argv
    names one of ``cli_names`` (a wrapper such as ``npx opencode``), case-insensitively.
    """

    cli_names: tuple[str, ...] = ()
    # The subject of a refusal message: "auto-approve flag refused for opencode".
    refusal: str = ""
    refused_flag: FlagCheck | None = None
    required: ArgvRequirement | None = None
    # Permission modes the kind's adapter was measured in ("normal" only, so far).
    permission_modes: frozenset[str] = frozenset({"normal"})
    # Profile variables refused whatever their value (they can turn every dialog off:
    # Kilo's KILO_PERMISSION, Aider's AIDER_YES_ALWAYS), with why.
    refused_env: tuple[str, ...] = ()
    refused_env_why: str = ""
    # True for a program that asks before nothing it runs (Pi): its panes must be
    # confined. ``confine: false`` is refused at load time and a start that cannot be
    # confined fails with ``sandbox_unavailable``, whatever the service's default.
    confined_only: bool = False

    def named_by(self, argv: Sequence[str]) -> bool:
        """True when an element of ``argv`` names one of the kind's programs."""
        return any(name in arg.casefold() for arg in argv for name in self.cli_names)


NO_LAUNCH_RULES = LaunchRules()


@dataclass(frozen=True)
class AgentSpec:
    """One agent kind. Every field is explicit in each kind's module: a forgotten one is a
    load error, not a silent default."""

    name: str
    # How the screens, dialogs and flags below were learnt: on the real program
    # ("measured"), from public descriptions ("inferred"), or not at all ("none").
    evidence: Evidence
    # The bundled screen-rules file (``paneworker/status/rules/<rules>.json``): status from
    # the screen and title where the program sends no OSC 7501.
    rules: str
    # The permission-dialog recogniser; None: this kind's dialogs are never answered.
    dialogs: Recogniser | None
    # True for programs that take an Enter right after a paste as a newline: Enter waits
    # until the typed text is echoed and the screen is quiet.
    enter_after_echo: bool
    # What confirms a submitted prompt (see ``SubmitSign``). ``enter_after_echo`` kinds
    # copy the prompt into their history and may turn Enter into a newline, so the text
    # leaving the input line proves nothing for them: they must say ``turn``.
    submit_sign: SubmitSign
    launch: LaunchRules
    # The flags ``reviewer_start`` turns ``model`` and ``effort`` into; None: not offered.
    model_flags: tuple[str, str] | None
    # One line for the docs and ``doctor``: what the kind is and what was measured.
    summary: str
    # What the program must write under HOME (paths relative to it; a directory ends in
    # "/" and is made when missing, a file is bound only when it exists) when its pane is
    # confined: the rest of HOME stays read-only there (supervisor.confinement).
    home_writable: tuple[str, ...]
    # The files and directories under HOME whose contents name programs or instructions
    # the program runs or follows (hooks, plugins, notify commands, MCP servers, custom
    # commands and agents, settings): a confined pane of this kind gets a private copy of
    # each such file (seeded from the host's, written only in the copy) and such
    # directories read-only, so no pane plants what the operator's next CLI runs. A
    # directory ends in "/"; a path outside ``home_writable`` is read-only anyway. A file
    # missing on the host is made there, neutral: ``{}`` for ``.json``/``.jsonc``, else
    # empty, or the text a ``(path, text)`` entry gives (what the CLI reads as nothing).
    home_programs: tuple[str | tuple[str, str], ...]
    # This kind's credential files and directories under HOME: hidden in the panes of
    # every other kind (and of the generic kind).
    credentials: tuple[str, ...]
    # What ``interrupt_pane`` writes while the pane reads ``blocked`` (a choice is on
    # screen): the key the kind's dialogs document as cancelling them (Esc), or Ctrl-C
    # where no such key was measured. Outside a choice it always writes Ctrl-C.
    choice_interrupt: bytes

    def __post_init__(self) -> None:
        if self.enter_after_echo and self.submit_sign != "turn":
            raise ValueError(f"{self.name}: an enter_after_echo kind is confirmed by its turn only")
