"""Any other program: it runs, its status stays ``unknown`` unless it reports OSC 7501,
and its dialogs are never answered."""

from __future__ import annotations

from protocol.agents.spec import NO_LAUNCH_RULES, AgentSpec

SPEC = AgentSpec(
    name="generic",
    evidence="none",
    rules="generic",
    dialogs=None,
    enter_after_echo=False,
    submit_sign="turn_or_cleared",
    launch=NO_LAUNCH_RULES,
    model_flags=None,
    summary="any other program: runs, status from OSC 7501 only, dialogs never answered",
    home_writable=(),
    home_programs=(),
    credentials=(),
    choice_interrupt=b"\x03",  # no cancel key of its choices was measured
)
