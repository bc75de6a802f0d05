"""Launch profiles: load-time refusals, start-time policy and the built-in demo profile."""

from __future__ import annotations

import json
import os
import pwd
import sys
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import ErrorCode, PanewardenError
from supervisor.profiles.policy import LaunchSpec, ProfileSet, builtin_profiles, load_profiles

DEMO_ARGV = ["/usr/bin/python3", "-m", "supervisor.demo.agent"]


def write_json(tmp_path: Path, document: object, name: str = "profiles.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return str(path)


def load(tmp_path: Path, document: object) -> ProfileSet:
    return load_profiles(write_json(tmp_path, document), demo_argv=DEMO_ARGV)


def one(tmp_path: Path, **fields: Any) -> ProfileSet:
    """A file with a single profile named ``p`` (argv ``tool``) plus ``fields``."""
    profile: dict[str, Any] = {"name": "p", "argv": ["tool"], **fields}
    return load(tmp_path, {"profiles": [profile]})


def refused(tmp_path: Path, document: object) -> str:
    with pytest.raises(PanewardenError) as info:
        load(tmp_path, document)
    assert info.value.code is ErrorCode.CONFIG_INVALID
    return info.value.message


def refused_one(tmp_path: Path, **fields: Any) -> str:
    profile: dict[str, Any] = {"name": "p", "argv": ["tool"], **fields}
    return refused(tmp_path, {"profiles": [profile]})


def resolve(
    profiles: ProfileSet,
    name: str = "p",
    *,
    cwd: str | None = None,
    extra_args: list[str] | None = None,
    argv: list[str] | None = None,
    cols: int | None = None,
    rows: int | None = None,
    environ: dict[str, str] | None = None,
) -> LaunchSpec:
    return profiles.resolve(
        name,
        cwd=cwd,
        extra_args=extra_args,
        argv=argv,
        cols=cols,
        rows=rows,
        environ={"HOME": "/", "USER": "u"} if environ is None else environ,
    )


def resolve_error(profiles: ProfileSet, code: ErrorCode, **kwargs: Any) -> str:
    with pytest.raises(PanewardenError) as info:
        resolve(profiles, **kwargs)
    assert info.value.code is code, info.value.message
    return info.value.message


# --- load: valid files -------------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "  \n", "{}", '{"allow_arbitrary_command": true}'])
def test_empty_file_or_file_without_profiles_allows_nothing(tmp_path: Path, content: str) -> None:
    path = tmp_path / "profiles.json"
    path.write_text(content, encoding="utf-8")
    profiles = load_profiles(str(path), demo_argv=DEMO_ARGV)
    assert profiles.names() == []
    assert profiles.max_panes == 32
    with pytest.raises(PanewardenError) as info:
        profiles.get("demo")
    assert info.value.code is ErrorCode.PROFILE_NOT_FOUND


def test_profile_fields_take_their_defaults(tmp_path: Path) -> None:
    profiles = one(tmp_path)
    assert profiles.allow_arbitrary_command is False
    profile = profiles.get("p")
    assert (profile.agent, profile.argv, profile.extra_args, profile.cwds) == (
        "generic",
        ("tool",),
        (),
        (),
    )
    assert (profile.permission_mode, profile.cols, profile.rows) == ("normal", 120, 40)
    assert (profile.env, profile.watchdog, profile.colorterm) == ((), None, False)


def test_toml_and_json_files_load_to_the_same_profiles(tmp_path: Path) -> None:
    document = {
        "allow_arbitrary_command": True,
        "max_panes": 7,
        "profiles": [
            {
                "name": "claude-1",
                "agent": "claude",
                "argv": ["claude", "--verbose"],
                "extra_args": ["--model", "opus"],
                "cwds": ["/srv/work", "/home/dev"],
                "env": {"API_KEY": "env:CLAUDE_KEY", "MODE": "fast", "TOKEN": "file:/run/t"},
                "permission_mode": "normal",
                "cols": 200,
                "rows": 50,
                "colorterm": True,
                "watchdog": {
                    "idle_timeout_secs": 60,
                    "nudge_text": "continue working on the todo list",
                    "todo_file": "/srv/work/TODO.md",
                },
            },
            {"name": "plain", "argv": ["bash"]},
        ],
    }
    toml_text = """
allow_arbitrary_command = true
max_panes = 7

[[profiles]]
name = "claude-1"
agent = "claude"
argv = ["claude", "--verbose"]
extra_args = ["--model", "opus"]
cwds = ["/srv/work", "/home/dev"]
permission_mode = "normal"
cols = 200
rows = 50
colorterm = true

[profiles.env]
API_KEY = "env:CLAUDE_KEY"
MODE = "fast"
TOKEN = "file:/run/t"

[profiles.watchdog]
idle_timeout_secs = 60
nudge_text = "continue working on the todo list"
todo_file = "/srv/work/TODO.md"

[[profiles]]
name = "plain"
argv = ["bash"]
"""
    toml_path = tmp_path / "profiles.toml"
    toml_path.write_text(toml_text, encoding="utf-8")
    from_toml = load_profiles(str(toml_path), demo_argv=DEMO_ARGV)
    from_json = load(tmp_path, document)
    assert from_toml.profiles == from_json.profiles
    assert (from_toml.allow_arbitrary_command, from_toml.max_panes) == (True, 7)
    assert (from_json.allow_arbitrary_command, from_json.max_panes) == (True, 7)
    watchdog = from_toml.get("claude-1").watchdog
    assert watchdog is not None
    assert watchdog.max_consecutive_nudges == 3
    assert [src.scheme for src in from_toml.get("claude-1").env] == ["env", "literal", "file"]


def test_toml_syntax_is_used_only_for_toml_files(tmp_path: Path) -> None:
    path = tmp_path / "profiles.json"
    path.write_text("max_panes = 3\n", encoding="utf-8")
    with pytest.raises(PanewardenError) as info:
        load_profiles(str(path), demo_argv=DEMO_ARGV)
    assert info.value.code is ErrorCode.CONFIG_INVALID
    assert "not valid JSON" in info.value.message


def test_max_panes_goes_up_to_4096(tmp_path: Path) -> None:
    path = tmp_path / "profiles.json"
    path.write_text('{"max_panes": 4096}', encoding="utf-8")
    assert load_profiles(str(path), demo_argv=DEMO_ARGV).max_panes == 4096


# --- load: refusals ----------------------------------------------------------------------


def test_unknown_top_level_field_is_refused(tmp_path: Path) -> None:
    assert refused(tmp_path, {"max_pane": 3}).startswith("max_pane: unknown field")


def test_unknown_profile_field_is_refused(tmp_path: Path) -> None:
    assert refused_one(tmp_path, colour=True).startswith("profiles[0].colour: unknown field")


def test_unknown_watchdog_field_is_refused(tmp_path: Path) -> None:
    watchdog = {"idle_timeout_secs": 30, "nudge_text": "keep going please", "every": 3}
    message = refused_one(tmp_path, watchdog=watchdog)
    assert message.startswith("profiles[0].watchdog.every: unknown field")


def test_relative_cwd_is_refused(tmp_path: Path) -> None:
    document = {
        "profiles": [
            {"name": "a", "argv": ["x"], "cwds": ["/ok"]},
            {"name": "b", "argv": ["x"], "cwds": ["work/dir"]},
        ]
    }
    assert refused(tmp_path, document) == "profiles[1].cwds[0]: must be absolute"


def test_empty_argv_is_refused(tmp_path: Path) -> None:
    assert refused_one(tmp_path, argv=[]).startswith("profiles[0].argv: ")


def test_empty_argv_element_is_refused(tmp_path: Path) -> None:
    assert refused_one(tmp_path, argv=["tool", ""]).startswith("profiles[0].argv[1]: ")


def test_argv_element_with_nul_is_refused(tmp_path: Path) -> None:
    assert refused_one(tmp_path, argv=["to\0ol"]).startswith("profiles[0].argv[0]: ")


def test_missing_argv_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path, {"profiles": [{"name": "p"}]})
    assert message == "profiles[0].argv: required field is missing"


def test_duplicate_profile_names_are_refused(tmp_path: Path) -> None:
    document = {"profiles": [{"name": "p", "argv": ["a"]}, {"name": "p", "argv": ["b"]}]}
    assert refused(tmp_path, document).startswith("profiles[1].name: duplicate profile name")


@pytest.mark.parametrize("name", ["", "Kiro", "-kiro", "_kiro", "a" * 33, "demo\n", "a b", "ä"])
def test_bad_profile_name_is_refused(tmp_path: Path, name: str) -> None:
    assert refused_one(tmp_path, name=name).startswith("profiles[0].name: must match")


def test_longest_allowed_profile_name_loads(tmp_path: Path) -> None:
    name = "a" + "b_-9" * 7 + "xyz"
    assert len(name) == 32
    assert one(tmp_path, name=name).names() == [name]


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"agent": "opencode", "argv": ["opencode", "--auto"]}, "argv[1]"),
        ({"argv": ["npx", "opencode", "--AUTO-share"]}, "argv[2]"),
        ({"argv": ["/usr/local/bin/opencode"], "extra_args": ["--autoaccept"]}, "extra_args[0]"),
        ({"argv": ["sh", "-c", "OpenCode --auto"]}, "argv[2]"),
        (
            {"agent": "opencode", "argv": ["oc"], "extra_args": ["x", "Auto-Accept"]},
            "extra_args[1]",
        ),
        ({"argv": ["opencode", "--config=session.permissions=autoaccept"]}, "argv[1]"),
    ],
)
def test_opencode_auto_approve_flags_are_refused(
    tmp_path: Path, fields: dict[str, Any], where: str
) -> None:
    message = refused_one(tmp_path, **fields)
    assert message.startswith(f"profiles[0].{where}: auto-approve flag refused for opencode")


def test_auto_flags_are_left_alone_for_other_programs(tmp_path: Path) -> None:
    profiles = one(tmp_path, agent="kiro", argv=["kiro-cli", "--auto"], extra_args=["--autoaccept"])
    assert profiles.get("p").argv == ("kiro-cli", "--auto")


@pytest.mark.parametrize(
    "fields",
    [
        {"agent": "opencode", "argv": ["oc"], "permission_mode": "accept-edits"},
        {"agent": "claude", "argv": ["npx", "opencode"], "permission_mode": "bypass"},
    ],
)
def test_opencode_outside_normal_mode_is_refused(tmp_path: Path, fields: dict[str, Any]) -> None:
    message = refused_one(tmp_path, **fields)
    mode = fields["permission_mode"]
    assert message.startswith(f"profiles[0].permission_mode: {mode!r} is not allowed for opencode")


@pytest.mark.parametrize(
    "agent", ["kiro", "devin", "demo", "generic", "claude", "codex", "gemini", "qwen"]
)
@pytest.mark.parametrize("mode", ["accept-edits", "bypass"])
def test_no_agent_leaves_normal_mode_without_a_measured_adapter(
    tmp_path: Path, agent: str, mode: str
) -> None:
    argv = ["tool", *PIN] if agent in ("gemini", "qwen") else ["tool"]
    message = refused_one(tmp_path, agent=agent, argv=argv, permission_mode=mode)
    assert message.startswith(f"profiles[0].permission_mode: {mode!r} is not allowed")


@pytest.mark.parametrize("agent", ["claude", "codex", "kiro", "generic"])
def test_every_agent_may_use_normal_mode(tmp_path: Path, agent: str) -> None:
    profile = one(tmp_path, agent=agent, permission_mode="normal").get("p")
    assert profile.permission_mode == "normal"


def test_unknown_agent_is_refused(tmp_path: Path) -> None:
    assert refused_one(tmp_path, agent="crush").startswith("profiles[0].agent: ")


# --- Gemini CLI and Qwen Code: approvals stay on -------------------------------------

PIN = ["--approval-mode", "default"]


@pytest.mark.parametrize(
    "argv",
    [
        ["gemini", "--approval-mode", "default"],
        ["gemini", "--approval-mode=plan"],
        ["/opt/bin/qwen", "--approvalMode", "default", "--model", "my-model"],
        ["npx", "@qwen-code/qwen-code", "--approval_mode=DEFAULT"],
    ],
)
@pytest.mark.parametrize("agent", ["gemini", "qwen"])
def test_gemini_and_qwen_load_with_the_approval_mode_pinned(
    tmp_path: Path, agent: str, argv: list[str]
) -> None:
    profile = one(tmp_path, agent=agent, argv=argv, extra_args=["--debug"]).get("p")
    assert (profile.agent, profile.argv) == (agent, tuple(argv))


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"agent": "gemini", "argv": ["gemini", *PIN, "--yolo"]}, "argv[3]"),
        ({"agent": "gemini", "argv": ["gemini", "-y", *PIN]}, "argv[1]"),
        ({"agent": "qwen", "argv": ["qwen", *PIN, "-dy"]}, "argv[3]"),
        ({"agent": "gemini", "argv": ["gemini", "--approval-mode", "yolo"]}, "argv[1]"),
        ({"agent": "gemini", "argv": ["gemini", "--approval-mode=auto_edit"]}, "argv[1]"),
        ({"agent": "qwen", "argv": ["qwen", "--approval-mode", "auto"]}, "argv[1]"),
        ({"agent": "qwen", "argv": ["qwen", "--approvalMode=auto-edit"]}, "argv[1]"),
        ({"agent": "qwen", "argv": ["qwen", *PIN, "--approval-mode"]}, "argv[3]"),
        ({"agent": "qwen", "argv": ["qwen", *PIN, "--allowed-tools", "x"]}, "argv[3]"),
        ({"agent": "gemini", "argv": ["gemini", *PIN], "extra_args": ["--YOLO"]}, "extra_args[0]"),
        ({"agent": "qwen", "argv": ["qwen", *PIN], "extra_args": ["-y"]}, "extra_args[0]"),
        # A generic profile that runs either CLI is held to the same rules.
        ({"argv": ["npx", "@google/gemini-cli", *PIN, "--yolo"]}, "argv[4]"),
        ({"argv": ["sh", "-c", "qwen --approval-mode default --yolo"]}, "argv[2]"),
    ],
)  # fmt: skip
def test_gemini_and_qwen_auto_approval_flags_are_refused(
    tmp_path: Path, fields: dict[str, Any], where: str
) -> None:
    message = refused_one(tmp_path, **fields)
    assert message.startswith(f"profiles[0].{where}: auto-approval refused for gemini and qwen")


@pytest.mark.parametrize(
    "fields",
    [
        {"agent": "qwen", "argv": ["qwen"]},
        {"agent": "gemini", "argv": ["gemini", "--model", "default"]},
        {"argv": ["/usr/local/bin/qwen"]},
        # The pin must be in the fixed argv: a caller may leave an extra arg out.
        {"agent": "qwen", "argv": ["qwen"], "extra_args": ["--approval-mode=default"]},
    ],
)
def test_gemini_and_qwen_without_a_pinned_approval_mode_are_refused(
    tmp_path: Path, fields: dict[str, Any]
) -> None:
    message = refused_one(tmp_path, **fields)
    assert message.startswith("profiles[0].argv: must pin the approval mode")


def test_caller_argv_cannot_switch_gemini_or_qwen_approvals_off(tmp_path: Path) -> None:
    profiles = arbitrary(tmp_path, agent="qwen", argv=["qwen", *PIN])
    message = resolve_error(profiles, ErrorCode.FORBIDDEN, argv=["qwen", "--approval-mode", "auto"])
    assert message.startswith("argv[1]: auto-approval refused")
    message = resolve_error(profiles, ErrorCode.FORBIDDEN, argv=["npx", "gemini"])
    assert message.startswith("argv: must pin the approval mode")
    assert resolve(profiles, argv=["qwen", *PIN, "--debug"]).argv == ("qwen", *PIN, "--debug")


def test_unknown_permission_mode_is_refused(tmp_path: Path) -> None:
    message = refused_one(tmp_path, agent="claude", permission_mode="yolo")
    assert message.startswith("profiles[0].permission_mode: ")


def watchdog(**fields: Any) -> dict[str, Any]:
    return {"idle_timeout_secs": 30, "nudge_text": "continue working on the todo list", **fields}


@pytest.mark.parametrize(
    "nudge", ["y", "Yes!", "  OK.  ", "1", "[y]", "allow once", "Continue", "yes, always", "42"]
)
def test_nudge_that_reads_as_a_dialog_answer_is_refused(tmp_path: Path, nudge: str) -> None:
    message = refused_one(tmp_path, watchdog=watchdog(nudge_text=nudge))
    assert message.startswith("profiles[0].watchdog.nudge_text: reads as a bare dialog answer")


@pytest.mark.parametrize(
    "nudge", ["continue working on the todo list", "Please pick the next unchecked item."]
)
def test_nudge_that_gives_an_instruction_loads(tmp_path: Path, nudge: str) -> None:
    config = one(tmp_path, watchdog=watchdog(nudge_text=nudge)).get("p").watchdog
    assert config is not None
    assert config.nudge_text == nudge


@pytest.mark.parametrize("nudge", ["keep going\n", "keep\tgoing", "\x1b[Akeep going", "go\x85on"])
def test_nudge_with_control_characters_is_refused(tmp_path: Path, nudge: str) -> None:
    message = refused_one(tmp_path, watchdog=watchdog(nudge_text=nudge))
    assert message.startswith("profiles[0].watchdog.nudge_text: must not contain control")


def test_empty_nudge_is_refused(tmp_path: Path) -> None:
    message = refused_one(tmp_path, watchdog=watchdog(nudge_text=""))
    assert message.startswith("profiles[0].watchdog.nudge_text: ")


def test_relative_todo_file_is_refused(tmp_path: Path) -> None:
    message = refused_one(tmp_path, watchdog=watchdog(todo_file="TODO.md"))
    assert message == "profiles[0].watchdog.todo_file: must be an absolute path"


@pytest.mark.parametrize(
    ("fields", "key"),
    [
        ({"idle_timeout_secs": 9}, "idle_timeout_secs"),
        ({"max_consecutive_nudges": 0}, "max_consecutive_nudges"),
        ({"max_consecutive_nudges": 101}, "max_consecutive_nudges"),
    ],
)
def test_watchdog_numbers_out_of_bounds_are_refused(
    tmp_path: Path, fields: dict[str, Any], key: str
) -> None:
    message = refused_one(tmp_path, watchdog=watchdog(**fields))
    assert message.startswith(f"profiles[0].watchdog.{key}: ")


def test_watchdog_without_nudge_text_is_refused(tmp_path: Path) -> None:
    message = refused_one(tmp_path, watchdog={"idle_timeout_secs": 30})
    assert message == "profiles[0].watchdog.nudge_text: required field is missing"


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ({"max_panes": 0}, "max_panes"),
        ({"max_panes": 4097}, "max_panes"),
        ({"max_panes": "3"}, "max_panes"),
        ({"max_panes": True}, "max_panes"),
        ({"allow_arbitrary_command": "yes"}, "allow_arbitrary_command"),
        ({"profiles": [{"name": "p", "argv": ["t"], "cols": 19}]}, "profiles[0].cols"),
        ({"profiles": [{"name": "p", "argv": ["t"], "cols": 501}]}, "profiles[0].cols"),
        ({"profiles": [{"name": "p", "argv": ["t"], "rows": 4}]}, "profiles[0].rows"),
        ({"profiles": [{"name": "p", "argv": ["t"], "rows": 201}]}, "profiles[0].rows"),
        ({"profiles": [{"name": "p", "argv": ["t"], "colorterm": 1}]}, "profiles[0].colorterm"),
        ({"profiles": [{"name": "p", "argv": "t"}]}, "profiles[0].argv"),
        ({"profiles": {"name": "p"}}, "profiles"),
    ],
)
def test_wrong_type_or_out_of_bounds_value_is_refused(
    tmp_path: Path, document: dict[str, Any], where: str
) -> None:
    assert refused(tmp_path, document).startswith(f"{where}: ")


def test_top_level_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    assert refused(tmp_path, []).startswith("(top level): expected `object`")


@pytest.mark.parametrize("name", ["1KEY", "MY-KEY", "A B", ""])
def test_bad_env_name_is_refused(tmp_path: Path, name: str) -> None:
    message = refused_one(tmp_path, env={name: "x"})
    assert message.startswith(f"profiles[0].env.{name}: variable names must match")


@pytest.mark.parametrize("name", ["TERM", "COLORTERM"])
def test_terminal_variables_cannot_be_set_by_a_profile(tmp_path: Path, name: str) -> None:
    assert refused_one(tmp_path, env={name: "dumb"}).startswith(f"profiles[0].env.{name}: ")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (7, "expected a string"),
        ("env:1BAD", "env: must name a variable"),
        ("env:", "env: must name a variable"),
        ("file:relative/token", "file: needs an absolute path"),
        ("keychain:  ", "keychain: needs an item name"),
        ("lit\0eral", "must not contain a NUL"),
    ],
)
def test_bad_env_value_is_refused_without_echoing_it(
    tmp_path: Path, value: object, problem: str
) -> None:
    message = refused_one(tmp_path, env={"API_KEY": value})
    assert message.startswith(f"profiles[0].env.API_KEY: {problem}")
    assert "1BAD" not in message
    assert "relative/token" not in message


def test_json_with_a_syntax_error_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "profiles.json"
    path.write_text('{"profiles": [}', encoding="utf-8")
    with pytest.raises(PanewardenError) as info:
        load_profiles(str(path), demo_argv=DEMO_ARGV)
    assert info.value.code is ErrorCode.CONFIG_INVALID
    assert info.value.message.startswith("(file): not valid JSON: ")
    assert "line 1" in info.value.message


def test_json_with_a_repeated_key_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "profiles.json"
    path.write_text('{"max_panes": 3, "max_panes": 200}', encoding="utf-8")
    with pytest.raises(PanewardenError) as info:
        load_profiles(str(path), demo_argv=DEMO_ARGV)
    assert info.value.code is ErrorCode.CONFIG_INVALID
    assert "'max_panes' appears twice" in info.value.message


def test_toml_with_a_syntax_error_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "profiles.toml"
    path.write_text("[[profiles]]\nname = \n", encoding="utf-8")
    with pytest.raises(PanewardenError) as info:
        load_profiles(str(path), demo_argv=DEMO_ARGV)
    assert info.value.code is ErrorCode.CONFIG_INVALID
    assert info.value.message.startswith("(file): not valid TOML: ")


def test_toml_schema_errors_name_the_field(tmp_path: Path) -> None:
    path = tmp_path / "profiles.toml"
    path.write_text('[[profiles]]\nname = "p"\nargv = ["t"]\ncwds = ["rel"]\n', encoding="utf-8")
    with pytest.raises(PanewardenError) as info:
        load_profiles(str(path), demo_argv=DEMO_ARGV)
    assert info.value.message == "profiles[0].cwds[0]: must be absolute"


def test_non_utf8_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "profiles.json"
    path.write_bytes(b'{"profiles": ["\xff"]}')
    with pytest.raises(PanewardenError) as info:
        load_profiles(str(path), demo_argv=DEMO_ARGV)
    assert info.value.code is ErrorCode.CONFIG_INVALID


@pytest.mark.parametrize("kind", ["missing", "directory", "fifo"])
def test_unreadable_profiles_file_is_refused(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "profiles.json"
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # must be refused without blocking on open or read
    with pytest.raises(PanewardenError) as info:
        load_profiles(str(path), demo_argv=DEMO_ARGV)
    assert info.value.code is ErrorCode.CONFIG_INVALID
    assert info.value.message.startswith("(file): cannot read")


# --- resolve: profile, size, extra args, arbitrary argv ----------------------------------


def test_unknown_profile_is_profile_not_found(tmp_path: Path) -> None:
    profiles = one(tmp_path, cwds=[str(tmp_path)])
    message = resolve_error(profiles, ErrorCode.PROFILE_NOT_FOUND, name="nope")
    assert "'nope'" in message


def test_resolve_builds_the_launch_spec_from_the_profile(tmp_path: Path) -> None:
    profiles = one(tmp_path, agent="codex", cwds=[str(tmp_path)], cols=100, rows=30)
    spec = resolve(profiles)
    assert spec.profile == "p"
    assert spec.agent == "codex"
    assert spec.argv == ("tool",)
    assert spec.cwd == str(tmp_path.resolve())
    assert (spec.cols, spec.rows, spec.permission_mode, spec.watchdog) == (100, 30, "normal", None)


@pytest.mark.parametrize(("cols", "rows"), [(20, 5), (500, 200), (None, 7)])
def test_caller_may_choose_a_size_within_bounds(
    tmp_path: Path, cols: int | None, rows: int | None
) -> None:
    spec = resolve(one(tmp_path, cwds=[str(tmp_path)]), cols=cols, rows=rows)
    assert (spec.cols, spec.rows) == (cols or 120, rows or 40)


@pytest.mark.parametrize(
    ("cols", "rows", "field"),
    [
        (19, None, "cols"),
        (501, None, "cols"),
        (None, 4, "rows"),
        (None, 201, "rows"),
        (True, None, "cols"),
    ],
)
def test_size_out_of_bounds_is_invalid_argument(
    tmp_path: Path, cols: int | None, rows: int | None, field: str
) -> None:
    profiles = one(tmp_path, cwds=[str(tmp_path)])
    message = resolve_error(profiles, ErrorCode.INVALID_ARGUMENT, cols=cols, rows=rows)
    assert message.startswith(f"{field}: ")


def test_allowed_extra_args_are_appended_in_the_callers_order(tmp_path: Path) -> None:
    profiles = one(tmp_path, cwds=[str(tmp_path)], extra_args=["--fast", "--quiet"])
    spec = resolve(profiles, extra_args=["--quiet", "--fast"])
    assert spec.argv == ("tool", "--quiet", "--fast")


def test_extra_arg_outside_the_allow_list_is_forbidden(tmp_path: Path) -> None:
    profiles = one(tmp_path, cwds=[str(tmp_path)], extra_args=["--fast"])
    message = resolve_error(profiles, ErrorCode.FORBIDDEN, extra_args=["--fast", "--fast=1"])
    assert message.startswith("extra_args[1]: '--fast=1' is not allowed")


def test_caller_argv_is_forbidden_without_allow_arbitrary_command(tmp_path: Path) -> None:
    profiles = one(tmp_path, cwds=[str(tmp_path)])
    message = resolve_error(profiles, ErrorCode.FORBIDDEN, argv=["bash"])
    assert message.startswith("argv: ")


def arbitrary(tmp_path: Path, **fields: Any) -> ProfileSet:
    profile: dict[str, Any] = {"name": "p", "argv": ["tool"], "cwds": [str(tmp_path)], **fields}
    return load(tmp_path, {"allow_arbitrary_command": True, "profiles": [profile]})


def test_caller_argv_replaces_the_command_and_drops_profile_variables(tmp_path: Path) -> None:
    profiles = arbitrary(
        tmp_path,
        agent="claude",
        env={"API_KEY": "sk-secret", "HOME": "/profile-home"},
        colorterm=True,
        rows=33,
        watchdog=watchdog(),
    )
    environ = {"HOME": "/home/u", "USER": "u", "PATH": "/bin", "LANG": "en_US.UTF-8"}
    spec = resolve(profiles, argv=["bash", "-l"], environ=environ)
    assert spec.argv == ("bash", "-l")
    assert spec.agent == "claude"
    assert spec.rows == 33
    assert spec.watchdog is None
    assert spec.env == {
        "HOME": "/home/u",
        "USER": "u",
        "PATH": "/bin",
        "LANG": "en_US.UTF-8",
        "TERM": "xterm-256color",
        "COLORTERM": "truecolor",
    }


def test_profile_argv_keeps_its_variables_when_arbitrary_commands_are_on(tmp_path: Path) -> None:
    spec = resolve(arbitrary(tmp_path, env={"API_KEY": "sk-secret"}))
    assert spec.env["API_KEY"] == "sk-secret"


def test_caller_argv_still_checks_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "allowed").mkdir()
    profiles = arbitrary(tmp_path / "allowed")
    resolve_error(profiles, ErrorCode.CWD_NOT_ALLOWED, argv=["bash"], cwd=str(tmp_path))


@pytest.mark.parametrize("argv", [[], [""], ["bash", "a\0b"]])
def test_malformed_caller_argv_is_invalid_argument(tmp_path: Path, argv: list[str]) -> None:
    resolve_error(arbitrary(tmp_path), ErrorCode.INVALID_ARGUMENT, argv=argv)


def test_caller_argv_with_extra_args_is_invalid_argument(tmp_path: Path) -> None:
    profiles = arbitrary(tmp_path, extra_args=["--fast"])
    message = resolve_error(
        profiles, ErrorCode.INVALID_ARGUMENT, argv=["bash"], extra_args=["--fast"]
    )
    assert message.startswith("extra_args: ")


def test_caller_argv_cannot_switch_opencode_approvals_off(tmp_path: Path) -> None:
    message = resolve_error(
        arbitrary(tmp_path), ErrorCode.FORBIDDEN, argv=["npx", "opencode", "--auto"]
    )
    assert message.startswith("argv[2]: auto-approve flag refused")


# --- resolve: working directory ----------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """allowed/ (with sub/deep, a link out and a link in), allowed-evil/, ab/, outside/."""
    for directory in ("allowed/sub/deep", "allowed-evil", "outside", "ab"):
        (tmp_path / directory).mkdir(parents=True)
    (tmp_path / "allowed" / "escape").symlink_to(tmp_path / "outside")
    (tmp_path / "allowed" / "inner").symlink_to(tmp_path / "allowed" / "sub")
    (tmp_path / "allowed" / "file.txt").write_text("x", encoding="utf-8")
    return tmp_path


def test_cwd_equal_to_an_allowed_directory_is_allowed(tmp_path: Path, tree: Path) -> None:
    profiles = one(tmp_path, cwds=[str(tree / "allowed")])
    assert resolve(profiles, cwd=str(tree / "allowed")).cwd == str(tree / "allowed")


def test_cwd_below_an_allowed_directory_is_allowed(tmp_path: Path, tree: Path) -> None:
    profiles = one(tmp_path, cwds=[str(tree / "outside"), str(tree / "allowed")])
    spec = resolve(profiles, cwd=str(tree / "allowed" / "sub" / "deep"))
    assert spec.cwd == str(tree / "allowed" / "sub" / "deep")


@pytest.mark.parametrize(("allowed", "asked"), [("allowed", "allowed-evil"), ("a", "ab")])
def test_sibling_sharing_a_name_prefix_is_not_allowed(
    tmp_path: Path, tree: Path, allowed: str, asked: str
) -> None:
    (tree / "a").mkdir(exist_ok=True)
    profiles = one(tmp_path, cwds=[str(tree / allowed)])
    message = resolve_error(profiles, ErrorCode.CWD_NOT_ALLOWED, cwd=str(tree / asked))
    assert message.startswith("cwd: ")
    assert str(tree) not in message


def test_symlink_leading_out_of_an_allowed_directory_is_not_allowed(
    tmp_path: Path, tree: Path
) -> None:
    profiles = one(tmp_path, cwds=[str(tree / "allowed")])
    resolve_error(profiles, ErrorCode.CWD_NOT_ALLOWED, cwd=str(tree / "allowed" / "escape"))


def test_dot_dot_leading_out_of_an_allowed_directory_is_not_allowed(
    tmp_path: Path, tree: Path
) -> None:
    profiles = one(tmp_path, cwds=[str(tree / "allowed")])
    cwd = str(tree / "allowed" / "sub" / ".." / ".." / "outside")
    resolve_error(profiles, ErrorCode.CWD_NOT_ALLOWED, cwd=cwd)


def test_symlink_staying_inside_resolves_to_its_real_path(tmp_path: Path, tree: Path) -> None:
    profiles = one(tmp_path, cwds=[str(tree / "allowed")])
    assert resolve(profiles, cwd=str(tree / "allowed" / "inner")).cwd == str(
        tree / "allowed" / "sub"
    )


def test_allowed_directory_given_through_a_symlink_admits_its_target(
    tmp_path: Path, tree: Path
) -> None:
    (tree / "link-to-allowed").symlink_to(tree / "allowed")
    profiles = one(tmp_path, cwds=[str(tree / "link-to-allowed")])
    assert resolve(profiles, cwd=str(tree / "allowed" / "sub")).cwd == str(tree / "allowed" / "sub")


def test_nonexistent_cwd_inside_is_invalid_argument(tmp_path: Path, tree: Path) -> None:
    profiles = one(tmp_path, cwds=[str(tree / "allowed")])
    message = resolve_error(
        profiles, ErrorCode.INVALID_ARGUMENT, cwd=str(tree / "allowed" / "missing")
    )
    assert message == "cwd: not an existing directory"


def test_nonexistent_cwd_outside_is_not_allowed(tmp_path: Path, tree: Path) -> None:
    profiles = one(tmp_path, cwds=[str(tree / "allowed")])
    resolve_error(profiles, ErrorCode.CWD_NOT_ALLOWED, cwd=str(tree / "outside" / "missing"))


def test_file_as_cwd_is_invalid_argument(tmp_path: Path, tree: Path) -> None:
    profiles = one(tmp_path, cwds=[str(tree / "allowed")])
    cwd = str(tree / "allowed" / "file.txt")
    resolve_error(profiles, ErrorCode.INVALID_ARGUMENT, cwd=cwd)


@pytest.mark.parametrize("cwd", ["allowed", "./allowed", "~/x", "/a\0b"])
def test_relative_or_malformed_cwd_is_invalid_argument(
    tmp_path: Path, tree: Path, cwd: str
) -> None:
    profiles = one(tmp_path, cwds=["/"])
    resolve_error(profiles, ErrorCode.INVALID_ARGUMENT, cwd=cwd)


def test_default_cwd_is_the_first_allowed_directory(tmp_path: Path, tree: Path) -> None:
    profiles = one(tmp_path, cwds=[str(tree / "allowed" / "inner"), str(tree / "outside")])
    assert resolve(profiles).cwd == str(tree / "allowed" / "sub")


def test_profile_without_cwds_allows_no_directory(tmp_path: Path) -> None:
    profiles = one(tmp_path)
    resolve_error(profiles, ErrorCode.CWD_NOT_ALLOWED)
    resolve_error(profiles, ErrorCode.CWD_NOT_ALLOWED, cwd=str(tmp_path))


# --- resolve: environment ----------------------------------------------------------------


def test_pane_environment_holds_only_the_base_variables_and_the_profiles(tmp_path: Path) -> None:
    profiles = one(tmp_path, cwds=[str(tmp_path)], env={"MODE": "fast", "PATH": "/opt/bin"})
    environ = {
        "HOME": "/home/u",
        "USER": "u",
        "LANG": "de_DE.UTF-8",
        "PATH": "/usr/bin",
        "SSH_AUTH_SOCK": "/tmp/agent",
        "AWS_SECRET_ACCESS_KEY": "leak",
        "TERM": "screen",
        "COLORTERM": "truecolor",
    }
    assert resolve(profiles, environ=environ).env == {
        "HOME": "/home/u",
        "USER": "u",
        "LANG": "de_DE.UTF-8",
        "PATH": "/opt/bin",
        "TERM": "xterm-256color",
        "MODE": "fast",
    }


def test_missing_base_variables_get_defaults(tmp_path: Path) -> None:
    account = pwd.getpwuid(os.getuid())
    env = resolve(one(tmp_path, cwds=[str(tmp_path)]), environ={}).env
    assert env == {
        "HOME": account.pw_dir,
        "USER": account.pw_name,
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "TERM": "xterm-256color",
    }


def test_colorterm_switch_sets_truecolor(tmp_path: Path) -> None:
    spec = resolve(one(tmp_path, cwds=[str(tmp_path)], colorterm=True))
    assert spec.env["COLORTERM"] == "truecolor"


def test_env_source_reads_the_supervisor_environment(tmp_path: Path) -> None:
    profiles = one(tmp_path, cwds=[str(tmp_path)], env={"API_KEY": "env:SOURCE_KEY"})
    spec = resolve(profiles, environ={"HOME": "/", "USER": "u", "SOURCE_KEY": "sk-123"})
    assert spec.env["API_KEY"] == "sk-123"
    assert "SOURCE_KEY" not in spec.env


def test_missing_env_source_is_credential_unavailable(tmp_path: Path) -> None:
    profiles = one(
        tmp_path, cwds=[str(tmp_path)], env={"LIT": "sk-literal", "API_KEY": "env:SOURCE_KEY"}
    )
    message = resolve_error(profiles, ErrorCode.CREDENTIAL_UNAVAILABLE)
    assert message.startswith("env.API_KEY: ")
    assert "SOURCE_KEY" in message
    assert "sk-literal" not in message


def test_file_source_is_read_at_start_without_trailing_newline(tmp_path: Path) -> None:
    token = tmp_path / "token"
    profiles = one(tmp_path, cwds=[str(tmp_path)], env={"TOKEN": f"file:{token}"})
    token.write_text("first\n", encoding="utf-8")
    assert resolve(profiles).env["TOKEN"] == "first"
    token.write_text("second\r\n", encoding="utf-8")
    assert resolve(profiles).env["TOKEN"] == "second"


@pytest.mark.parametrize("kind", ["missing", "fifo", "directory", "too-large", "binary"])
def test_unusable_file_source_is_credential_unavailable(tmp_path: Path, kind: str) -> None:
    token = tmp_path / "token"
    if kind == "fifo":
        os.mkfifo(token)
    elif kind == "directory":
        token.mkdir()
    elif kind == "too-large":
        token.write_bytes(b"s" * (64 * 1024 + 1))
    elif kind == "binary":
        token.write_bytes(b"sk-\xff\xfe")
    profiles = one(tmp_path, cwds=[str(tmp_path)], env={"TOKEN": f"file:{token}"})
    message = resolve_error(profiles, ErrorCode.CREDENTIAL_UNAVAILABLE)
    assert message.startswith("env.TOKEN: ")
    assert "sk-" not in message


@pytest.mark.skipif(sys.platform == "darwin", reason="the keychain exists on macOS")
def test_keychain_source_off_macos_is_credential_unavailable(tmp_path: Path) -> None:
    profiles = one(tmp_path, cwds=[str(tmp_path)], env={"API_KEY": "keychain:my-item"})
    message = resolve_error(profiles, ErrorCode.CREDENTIAL_UNAVAILABLE)
    assert message.startswith("env.API_KEY: keychain sources are available only on macOS")


@pytest.mark.parametrize("value", ["vault:item", "https://example.test", "ENV:X", "plain"])
def test_value_with_an_unknown_scheme_is_a_literal(tmp_path: Path, value: str) -> None:
    profiles = one(tmp_path, cwds=[str(tmp_path)], env={"VALUE": value})
    assert resolve(profiles).env["VALUE"] == value


def test_refused_request_reads_no_credential(tmp_path: Path) -> None:
    token = tmp_path / "token"
    os.mkfifo(token)  # reading it would fail as credential_unavailable
    profiles = one(tmp_path, cwds=[str(tmp_path)], env={"TOKEN": f"file:{token}"})
    resolve_error(profiles, ErrorCode.FORBIDDEN, extra_args=["--x"])
    resolve_error(profiles, ErrorCode.CWD_NOT_ALLOWED, cwd="/")


def test_literal_values_stay_out_of_reprs(tmp_path: Path) -> None:
    profiles = one(tmp_path, cwds=[str(tmp_path)], env={"API_KEY": "sk-literal-secret"})
    assert "sk-literal-secret" not in repr(profiles.get("p"))
    assert "sk-literal-secret" not in repr(resolve(profiles))


# --- built-in profiles -------------------------------------------------------------------


def test_without_a_file_only_the_demo_profile_exists(tmp_path: Path) -> None:
    profiles = load_profiles(None, demo_argv=DEMO_ARGV)
    assert profiles.names() == ["demo"]
    assert (profiles.allow_arbitrary_command, profiles.max_panes) == (False, 32)
    demo = profiles.get("demo")
    assert (demo.agent, demo.argv, demo.env, demo.permission_mode) == (
        "demo",
        tuple(DEMO_ARGV),
        (),
        "normal",
    )
    spec = resolve(profiles, "demo", cwd=str(tmp_path))
    assert spec.cwd == str(tmp_path.resolve())
    assert spec.argv == tuple(DEMO_ARGV)


def test_demo_profile_starts_in_home_by_default(tmp_path: Path) -> None:
    profiles = builtin_profiles(DEMO_ARGV)
    spec = resolve(profiles, "demo", environ={"HOME": str(tmp_path), "USER": "u"})
    assert spec.cwd == str(tmp_path.resolve())
    missing_home = {"HOME": str(tmp_path / "gone"), "USER": "u"}
    assert resolve(profiles, "demo", environ=missing_home).cwd == "/"


def test_a_file_replaces_the_demo_profile(tmp_path: Path) -> None:
    assert one(tmp_path).names() == ["p"]


def test_demo_profile_needs_a_command() -> None:
    with pytest.raises(ValueError, match="demo_argv"):
        builtin_profiles([])
