"""Every agent kind, once: the one table the supervisor and the worker look kinds up in.

Adding a kind is one module under ``protocol.agents.kinds`` (its ``SPEC``), one row
here and its rules file (docs/architecture.md, "Add an agent kind").
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType

from protocol.agents.kinds import (
    aider,
    claude,
    codex,
    demo,
    devin,
    gemini,
    generic,
    kilo,
    kiro,
    opencode,
    pi,
    qwen,
)
from protocol.agents.spec import AgentSpec

SPECS: Mapping[str, AgentSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            kiro.SPEC,
            devin.SPEC,
            opencode.SPEC,
            claude.SPEC,
            codex.SPEC,
            gemini.SPEC,
            qwen.SPEC,
            kilo.SPEC,
            aider.SPEC,
            pi.SPEC,
            demo.SPEC,
            generic.SPEC,
        )
    }
)
AGENT_KINDS: tuple[str, ...] = tuple(SPECS)
GENERIC = generic.SPEC.name


def spec_for(agent: str) -> AgentSpec:
    """The spec of ``agent``. A name outside the table is a bug on the caller's side (a
    profile's kind is checked when the file loads), so it raises ``KeyError``."""
    return SPECS[agent]


def launch_rules_for(agent: str, argv: Sequence[str]) -> Iterator[AgentSpec]:
    """The kinds whose launch rules apply: the profile's own, and every kind whose
    program ``argv`` names (a wrapper such as ``npx opencode`` in a generic profile)."""
    for spec in SPECS.values():
        if spec.name == agent or spec.launch.named_by(argv):
            yield spec
