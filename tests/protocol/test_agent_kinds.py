"""The agent-kind table: every kind a profile may name has a whole spec, and nothing else.

Adding a kind is one module under ``protocol/agents/kinds``, one row in
``protocol/agents/table.py`` and its rules file; these tests fail when a step is
forgotten, instead of the kind silently running as ``generic``.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import pkgutil
import re
from pathlib import Path
from typing import cast

import msgspec
import pytest

from protocol.agents import kinds
from protocol.agents.spec import AgentSpec
from protocol.agents.table import AGENT_KINDS, SPECS, launch_rules_for, spec_for
from protocol.boot import BootRecord, PaneLaunch, decode_boot, encode_boot
from protocol.errors import PanewardenError
from supervisor.profiles.model import ProfileEntry, parse_document

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "paneworker" / "status" / "rules"
SCREENS = REPO / "tests" / "paneworker" / "screens"
OPERATIONS = (REPO / "docs" / "operations.md").read_text()
PIN = ["--approval-mode", "default"]


def _profile_schema_kinds() -> set[str]:
    info = msgspec.inspect.type_info(ProfileEntry)
    assert isinstance(info, msgspec.inspect.StructType)
    (entry,) = [f for f in info.fields if f.name == "agent"]
    assert isinstance(entry.type, msgspec.inspect.LiteralType)
    # The field is a Literal of strings; msgspec types the values as any literal.
    return set(cast("tuple[str, ...]", entry.type.values))


def test_the_profile_schema_accepts_exactly_the_kinds_of_the_table() -> None:
    assert _profile_schema_kinds() == set(AGENT_KINDS) == set(SPECS)


@pytest.mark.parametrize("agent", AGENT_KINDS)
def test_a_profile_of_every_kind_loads(agent: str) -> None:
    argv = ["tool", *PIN] if spec_for(agent).launch.required is not None else ["tool"]
    parsed = parse_document({"profiles": [{"name": "p", "agent": agent, "argv": argv}]})
    assert parsed.profiles[0].agent == agent


def test_a_kind_outside_the_table_is_refused_by_the_file_and_the_boot_record() -> None:
    with pytest.raises(PanewardenError, match=r"^profiles\[0\]\.agent: "):
        parse_document({"profiles": [{"name": "p", "agent": "crush", "argv": ["crush"]}]})
    launch = PaneLaunch(pane="p", agent="crush", argv=["a"], cwd="/", env={}, cols=80, rows=24)
    record = BootRecord(protocol_version=1, instance="i", secret=b"s", endpoint="e", launch=launch)
    with pytest.raises(ValueError, match="unknown agent kind"):
        decode_boot(encode_boot(record))


def test_every_spec_field_is_written_out_in_each_kind_module() -> None:
    """No field has a default: a kind module that forgets one does not import."""
    for field in dataclasses.fields(AgentSpec):
        assert field.default is dataclasses.MISSING, field.name
        assert field.default_factory is dataclasses.MISSING, field.name


def test_every_kind_module_has_its_row_and_every_row_its_module() -> None:
    modules = {m.name for m in pkgutil.iter_modules(kinds.__path__)}
    assert modules == set(SPECS), "a kind module without a row in the table, or the reverse"
    for name in modules:
        spec = importlib.import_module(f"protocol.agents.kinds.{name}").SPEC
        assert isinstance(spec, AgentSpec)
        assert spec.name == name and SPECS[name] is spec


@pytest.mark.parametrize("agent", AGENT_KINDS)
def test_every_kind_has_its_rules_file(agent: str) -> None:
    spec = spec_for(agent)
    path = RULES / f"{spec.rules}.json"
    assert path.is_file(), f"{agent}: no rules file {path.name}"
    assert json.loads(path.read_text())["agent"] == agent


def test_no_rules_file_without_a_kind() -> None:
    assert {p.stem for p in RULES.glob("*.json")} == {s.rules for s in SPECS.values()}


@pytest.mark.parametrize("agent", AGENT_KINDS)
def test_every_kind_decides_about_its_dialogs(agent: str) -> None:
    """A recogniser, or None (never answered): a kind that has one has screens to test it
    on, among them a permission described in prose, which it must refuse."""
    spec = spec_for(agent)
    if spec.dialogs is None:
        # Only a program that asks before nothing (Pi) is measured without one, and then
        # its panes must be confined.
        assert spec.evidence == "none" or spec.launch.confined_only, agent
        return
    assert callable(spec.dialogs)
    assert (SCREENS / agent / "prose_permission.txt").is_file(), agent


def test_only_kiro_and_devin_are_inferred() -> None:
    inferred = {s.name for s in SPECS.values() if s.evidence == "inferred"}
    assert inferred == {"kiro", "devin"}
    assert {s.name for s in SPECS.values() if s.evidence == "none"} == {"generic"}


def test_the_measured_clis_are_confirmed_by_their_turn_alone() -> None:
    """A cleared input line is no proof that one of them took a prompt (OpenCode's box
    empties before its session loaded): docs/operations.md "Delivery confirmation"."""
    by_turn = {s.name for s in SPECS.values() if s.submit_sign == "turn"}
    assert by_turn == {"claude", "codex", "gemini", "opencode", "qwen", "kilo", "aider", "pi"}
    with pytest.raises(ValueError, match="turn only"):
        dataclasses.replace(spec_for("gemini"), submit_sign="turn_or_cleared")


@pytest.mark.parametrize("agent", AGENT_KINDS)
def test_the_docs_have_a_row_for_every_kind(agent: str) -> None:
    """Both per-kind tables of docs/operations.md ("Per agent kind", "answer_dialog per
    agent kind") name the kind in a row of their own."""
    rows = re.findall(rf"^\| `{re.escape(agent)}`[ ,]", OPERATIONS, flags=re.MULTILINE)
    assert len(rows) >= 2, f"docs/operations.md has no rows for {agent!r}"


def test_launch_rules_follow_the_program_named_in_argv() -> None:
    assert {s.name for s in launch_rules_for("generic", ["npx", "opencode"])} == {
        "opencode",
        "generic",
    }
    assert {s.name for s in launch_rules_for("claude", ["claude"])} == {"claude"}
    assert {s.name for s in launch_rules_for("generic", ["sh", "-c", "qwen"])} == {
        "generic",
        "gemini",
        "qwen",
    }
