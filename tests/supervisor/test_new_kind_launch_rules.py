"""Load-time refusals of Kilo Code's, Aider's and Pi's ways to skip their confirmations.

Kilo: OpenCode's ``--auto…`` spellings, ``--yolo`` and ``--dangerously-skip-permissions``,
and the variables that carry a permission config (``KILO_PERMISSION`` and friends, whose
``"bash": "allow"`` turns the dialog off). Aider: ``--yes``/``--yes-always`` and the
``AIDER_YES_ALWAYS`` variable. Pi asks before nothing: a profile of it may not say
``confine: false``, and a start that cannot be confined is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import ErrorCode, PanewardenError
from supervisor.profiles.policy import ProfileSet, load_profiles


def load(tmp_path: Path, profile: dict[str, Any]) -> ProfileSet:
    path = tmp_path / "profiles.json"
    path.write_text(json.dumps({"profiles": [{"name": "p", **profile}]}))
    return load_profiles(str(path), demo_argv=["demo"])


def refused(tmp_path: Path, profile: dict[str, Any]) -> str:
    with pytest.raises(PanewardenError) as info:
        load(tmp_path, profile)
    assert info.value.code is ErrorCode.CONFIG_INVALID
    return info.value.message


@pytest.mark.parametrize(
    ("profile", "where"),
    [
        ({"agent": "kilo", "argv": ["kilo", "--auto"]}, "argv[1]"),
        ({"agent": "kilo", "argv": ["kilo", "--yolo"]}, "argv[1]"),
        ({"agent": "kilo", "argv": ["kilo", "--dangerously-skip-permissions"]}, "argv[1]"),
        ({"argv": ["npx", "@kilocode/cli", "--Auto-Accept"]}, "argv[2]"),
        ({"agent": "kilo", "argv": ["k"], "extra_args": ["--autoaccept"]}, "extra_args[0]"),
    ],
)
def test_kilo_auto_approval_flags_are_refused(
    tmp_path: Path, profile: dict[str, Any], where: str
) -> None:
    message = refused(tmp_path, profile)
    assert message.startswith(f"profiles[0].{where}: auto-approval refused for kilo"), message


@pytest.mark.parametrize("name", ["KILO_PERMISSION", "KILO_CONFIG_CONTENT", "kilo_config"])
def test_kilo_permission_variables_are_refused_whatever_their_value(
    tmp_path: Path, name: str
) -> None:
    allow = json.dumps({"bash": "allow", "edit": "allow"})
    message = refused(tmp_path, {"agent": "kilo", "argv": ["kilo"], "env": {name: allow}})
    assert message.startswith(f"profiles[0].env.{name}: auto-approval refused for kilo")
    assert "permission config" in message


@pytest.mark.parametrize(
    ("profile", "where"),
    [
        ({"agent": "aider", "argv": ["aider", "--yes-always"]}, "argv[1]"),
        ({"agent": "aider", "argv": ["aider", "--yes"]}, "argv[1]"),
        ({"agent": "aider", "argv": ["aider", "--YES-ALWAYS=true"]}, "argv[1]"),
        ({"argv": ["python", "-m", "aider", "--model", "m", "--yes"]}, "argv[5]"),
        ({"agent": "aider", "argv": ["a"], "extra_args": ["--yes-always"]}, "extra_args[0]"),
    ],
)
def test_aider_yes_flags_are_refused(tmp_path: Path, profile: dict[str, Any], where: str) -> None:
    message = refused(tmp_path, profile)
    assert message.startswith(f"profiles[0].{where}: auto-approval refused for aider"), message


def test_aider_yes_always_variable_is_refused(tmp_path: Path) -> None:
    profile = {"agent": "aider", "argv": ["aider"], "env": {"AIDER_YES_ALWAYS": "true"}}
    message = refused(tmp_path, profile)
    assert message.startswith("profiles[0].env.AIDER_YES_ALWAYS: auto-approval refused")


def test_the_new_kinds_load_without_those_flags(tmp_path: Path) -> None:
    for profile in (
        {"agent": "kilo", "argv": ["kilo"], "env": {"KILO_DISABLE_MODELS_FETCH": "1"}},
        {"agent": "aider", "argv": ["aider", "--no-gitignore", "--yes-nothing-else"][:2]},
        {"agent": "pi", "argv": ["pi"], "confine": True},
        {"agent": "pi", "argv": ["pi"], "confine": "auto"},
        {"agent": "pi", "argv": ["pi"]},
    ):
        assert load(tmp_path, profile).get("p").agent == profile["agent"]


@pytest.mark.parametrize(
    "profile",
    [
        {"agent": "pi", "argv": ["pi"], "confine": False},
        # A generic profile whose argv names Pi's package gets Pi's rule too.
        {"argv": ["npx", "@mariozechner/pi-coding-agent"], "confine": False},
    ],
)
def test_an_unconfined_pi_profile_is_refused(tmp_path: Path, profile: dict[str, Any]) -> None:
    message = refused(tmp_path, profile)
    assert message.startswith("profiles[0].confine: pi runs every tool without asking"), message
