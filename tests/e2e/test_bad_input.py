"""Every bad input gets its docs/design.md §9 code and a message, never a crash, and the service
keeps serving afterwards; a profiles file with a load-time refusal stops ``serve`` with
exit status 2 and the offending field named on stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import REPO, Tools, service_env, stdio_params
from tests.faults import Marks, ProcKey, describe, key_of, sigkill_all, survivors
from tests.polling import apoll

pytestmark = pytest.mark.anyio

DEMO_ARGV = [sys.executable, "-m", "supervisor.demo.agent"]


class Setup:
    """A profiles file: ``demo`` (cwds: ``allowed``) and ``missing`` (no such program)."""

    def __init__(self, tmp: Path) -> None:
        self.marks = Marks(tmp, count=8)
        self.allowed = tmp / "allowed"
        (self.allowed / "sub").mkdir(parents=True)
        self.sub_real = os.path.realpath(self.allowed / "sub")
        self.outside = tmp / "outside"
        self.outside.mkdir()
        (tmp / "allowed-evil").mkdir()
        (self.allowed / "escape").symlink_to(self.outside)
        document = {
            "max_panes": 2,
            "profiles": [
                {
                    "name": "demo",
                    "agent": "demo",
                    "argv": DEMO_ARGV,
                    "cwds": [str(self.allowed)],
                    "extra_args": [self.marks.arg(i) for i in range(self.marks.count)],
                },
                {"name": "missing", "argv": ["/nonexistent/bin"], "cwds": [str(self.allowed)]},
            ],
        }
        self.profiles = tmp / "profiles.json"
        self.profiles.write_text(json.dumps(document))
        self.known: set[ProcKey] = set()

    def env(self) -> dict[str, str]:
        return self.marks.env(self.profiles)

    async def start(self, tools: Tools, name: str, i: int, **args: Any) -> dict[str, Any]:
        pane = (
            await tools.call(
                "start_pane", name=name, profile="demo", extra_args=[self.marks.arg(i)], **args
            )
        )["pane"]
        self.known.update(k for p in (pane["pid"], pane["worker_pid"]) if (k := key_of(p)))
        return dict(pane)

    async def all_gone(self) -> None:
        gone = await apoll(lambda: not survivors(self.known) and not self.marks.everything(), 5)
        assert gone, describe(set(survivors(self.known)) | self.marks.everything())

    def cleanup(self) -> None:
        sigkill_all(self.known | self.marks.everything())


async def refused(tools: Tools, code: str, tool: str, **args: Any) -> None:
    """``tool(**args)`` fails with exactly ``code`` and a non-empty message."""
    body = await tools.error(tool, **args)
    assert body["code"] == code, (tool, args, body)
    assert isinstance(body["message"], str) and body["message"].strip(), body


async def a_turn(tools: Tools, name: str, text: str) -> None:
    before = await tools.call("get_status", name=name)
    await tools.call("send_input", name=name, text=text)
    done = await tools.wait(name, after=before["seq"], until=["done"])
    assert done["lifecycle"] == "running"
    assert f"reply: {text}" in (await tools.call("read_output", name=name))["text"]


async def test_start_pane_refusals(state_dir: Path, tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        async with Client(stdio_params(state_dir, **setup.env())) as client:
            tools = Tools(client)
            ok: dict[str, Any] = {"name": "x", "profile": "demo"}

            await refused(tools, "profile_not_found", "start_pane", name="x", profile="nope")
            await refused(tools, "profile_not_found", "start_pane", name="x", profile="Demo")

            for cwd in (
                str(setup.outside),
                str(setup.allowed / "escape"),  # a symlink inside that points outside
                str(setup.allowed / "escape" / "."),
                str(setup.allowed / ".." / "outside"),
                str(tmp_path / "allowed-evil"),  # shares the prefix, is not below
                "/",
            ):
                await refused(tools, "cwd_not_allowed", "start_pane", **ok, cwd=cwd)
            await refused(tools, "invalid_argument", "start_pane", **ok, cwd="allowed/sub")

            for name in ("Bad Name", "-x", "x" * 33, "", "UPPER", "a/b", "ok\n", "é", "_x"):
                await refused(tools, "invalid_argument", "start_pane", name=name, profile="demo")

            await refused(tools, "forbidden", "start_pane", **ok, argv=["/bin/sh"])
            await refused(tools, "forbidden", "start_pane", **ok, extra_args=["--evil"])

            await refused(tools, "invalid_argument", "start_pane", **ok, evil=1)
            for wrong in (
                {"name": 5, "profile": "demo"},
                {"name": "x", "profile": 5},
                {"name": "x"},
                {"profile": "demo"},
                {**ok, "cwd": 7},
                {**ok, "cols": "80"},
                {**ok, "cols": 10},
                {**ok, "rows": 10_000},
                {**ok, "extra_args": "--x"},
                {**ok, "argv": "/bin/sh"},
            ):
                await refused(tools, "invalid_argument", "start_pane", **wrong)

            started = time.monotonic()
            await refused(tools, "spawn_failed", "start_pane", name="ghost", profile="missing")
            assert time.monotonic() - started < 15
            assert (await tools.call("list_panes"))["panes"] == []

            one = await setup.start(tools, "one", 0, cwd=str(setup.allowed / "sub"))
            assert one["cwd"] == setup.sub_real
            await refused(tools, "pane_exists", "start_pane", name="one", profile="demo")
            await setup.start(tools, "two", 1)
            await refused(tools, "pane_limit", "start_pane", name="three", profile="demo")
            await tools.call("remove_pane", name="two")
            # The slots are free again (the failed start took none): the service still serves.
            await setup.start(tools, "three", 2)
            idle = await tools.wait("one", until=["idle"])
            assert idle["lifecycle"] == "running"
            await a_turn(tools, "one", "after every refusal")
            for name in ("one", "three"):
                await tools.call("remove_pane", name=name)
            assert (await tools.call("list_panes"))["panes"] == []
        await setup.all_gone()
    finally:
        setup.cleanup()


async def test_pane_tools_refuse_bad_input(state_dir: Path, tmp_path: Path) -> None:
    setup = Setup(tmp_path)
    try:
        async with Client(stdio_params(state_dir, **setup.env())) as client:
            tools = Tools(client)
            await setup.start(tools, "p", 0)
            idle = await tools.wait("p", until=["idle"])

            ghost = "ghost"
            calls: tuple[tuple[str, dict[str, Any]], ...] = (
                ("send_input", {"name": ghost, "text": "hi"}),
                ("read_output", {"name": ghost}),
                ("get_status", {"name": ghost}),
                ("wait_status", {"name": ghost, "timeout_s": 1}),
                ("wait_any", {"panes": [{"name": ghost}], "timeout_s": 1}),
                ("wait_any", {"panes": [{"name": "p"}, {"name": ghost}], "timeout_s": 1}),
                ("wait_output", {"name": ghost, "pattern": "x", "timeout_s": 1}),
                ("interrupt_pane", {"name": ghost}),
                ("answer_dialog", {"name": ghost, "answer": "allow_once"}),
                ("remove_pane", {"name": ghost}),
            )
            for tool, args in calls:
                await refused(tools, "not_found", tool, **args)

            for text in ("\x1b[A", "\x03", "\x7f", "\x9b", "\x00", "\r", "\x85", "ok\x1bnot"):
                await refused(tools, "invalid_argument", "send_input", name="p", text=text)
            for answer in ("always_allow", "allow", "yes", "", "ALLOW_ONCE", 1, None):
                await refused(tools, "invalid_argument", "answer_dialog", name="p", answer=answer)

            calls = (
                ("send_input", {"name": "p", "text": "hi", "evil": 1}),
                ("read_output", {"name": "p", "evil": 1}),
                ("get_status", {"name": "p", "evil": 1}),
                ("wait_status", {"name": "p", "evil": 1}),
                ("wait_any", {"panes": [{"name": "p", "evil": 1}]}),
                ("wait_output", {"name": "p", "pattern": "x", "evil": 1}),
                ("list_panes", {"evil": 1}),
                ("interrupt_pane", {"name": "p", "evil": 1}),
                ("answer_dialog", {"name": "p", "answer": "deny_once", "evil": 1}),
                ("remove_pane", {"name": "p", "evil": 1}),
            )
            for tool, args in calls:
                await refused(tools, "invalid_argument", tool, **args)

            calls = (
                ("send_input", {"name": "p", "text": 5}),
                ("send_input", {"name": "p"}),
                ("send_input", {"name": "p", "text": "hi", "submit": "yes"}),
                ("send_input", {"name": "p", "text": "hi", "expect_turn": -1}),
                ("send_input", {"name": "p", "text": "x" * 70_000}),
                ("read_output", {"name": "p", "lines": "3"}),
                ("read_output", {"name": "p", "lines": 0}),
                ("get_status", {"name": ["p"]}),
                ("get_status", {"name": "Bad Name"}),
                ("wait_status", {"name": "p", "timeout_s": "soon"}),
                ("wait_status", {"name": "p", "timeout_s": 0}),
                ("wait_status", {"name": "p", "timeout_s": 3601}),
                ("wait_status", {"name": "p", "after_seq": -1}),
                ("wait_status", {"name": "p", "until": ["asleep"]}),
                ("wait_status", {"name": "p", "until": "idle"}),
                ("wait_any", {"panes": "p"}),
                ("wait_any", {"panes": []}),
                ("wait_any", {"panes": [{"name": "p"}] * 2}),
                ("wait_any", {"panes": [{"name": f"p{i}"} for i in range(17)]}),
                ("wait_output", {"name": "p", "pattern": ""}),
                ("wait_output", {"name": "p", "pattern": "x", "regex": "no"}),
                ("interrupt_pane", {}),
                ("remove_pane", {"name": None}),
            )
            for tool, args in calls:
                await refused(tools, "invalid_argument", tool, **args)

            # Nothing of that reached the pane.
            status = await tools.call("get_status", name="p")
            assert (status["seq"], status["state"], status["turn"]) == (idle["seq"], "idle", 0)
            screen = (await tools.call("read_output", name="p"))["text"]
            assert "hi" not in screen and "not" not in screen, screen

            # Newline and tab are allowed; the service keeps serving.
            sent = await tools.call("send_input", name="p", text="tab\there\nand more")
            assert sent["seq"] >= idle["seq"]
            await tools.call(
                "wait_output", name="p", pattern="reply: .*more", regex=True, timeout_s=20
            )
            settled = await tools.wait("p", after=idle["seq"], until=["done"])
            assert settled["turn"] >= 1
            await a_turn(tools, "p", "still serving")
            await tools.call("remove_pane", name="p")
        await setup.all_gone()
    finally:
        setup.cleanup()


# ---------------------------------------------------------------- load-time refusals


def _profile(**fields: Any) -> dict[str, Any]:
    return {"profiles": [{"name": "p", "argv": ["/bin/true"], **fields}]}


BAD_FILES: dict[str, tuple[Any, str]] = {
    "unknown top-level field": ({"profiles": [], "evil": 1}, "evil"),
    "unknown profile field": (_profile(evil=1), "profiles[0].evil"),
    "unknown watchdog field": (
        _profile(watchdog={"idle_timeout_secs": 60, "nudge_text": "keep going", "evil": 1}),
        "profiles[0].watchdog.evil",
    ),
    "relative cwd": (_profile(cwds=["/ok", "relative/dir"]), "profiles[0].cwds[1]"),
    "empty argv": ({"profiles": [{"name": "p", "argv": []}]}, "profiles[0].argv"),
    "opencode --auto": (
        _profile(agent="opencode", argv=["opencode", "--auto"]),
        "profiles[0].argv[1]",
    ),
    "opencode --AUTO-approve extra arg": (
        _profile(agent="opencode", argv=["opencode"], extra_args=["--AUTO-approve"]),
        "profiles[0].extra_args[0]",
    ),
    "opencode named in argv, generic agent": (
        _profile(argv=["npx", "opencode-ai", "AutoAccept"]),
        "profiles[0].argv[2]",
    ),
    "opencode auto-accept": (
        _profile(argv=["/usr/local/bin/opencode", "auto-accept"]),
        "profiles[0].argv[1]",
    ),
    "opencode bypass mode": (
        _profile(agent="opencode", argv=["opencode"], permission_mode="bypass"),
        "profiles[0].permission_mode",
    ),
    "opencode accept-edits mode": (
        _profile(agent="opencode", argv=["opencode"], permission_mode="accept-edits"),
        "profiles[0].permission_mode",
    ),
    "nudge y": (
        _profile(watchdog={"idle_timeout_secs": 60, "nudge_text": "y"}),
        "profiles[0].watchdog.nudge_text",
    ),
    "nudge Yes!": (
        _profile(watchdog={"idle_timeout_secs": 60, "nudge_text": "Yes!"}),
        "profiles[0].watchdog.nudge_text",
    ),
    "nudge 1": (
        _profile(watchdog={"idle_timeout_secs": 60, "nudge_text": "1"}),
        "profiles[0].watchdog.nudge_text",
    ),
    "second profile refused whole": (
        {"profiles": [{"name": "a", "argv": ["/bin/true"]}, {"name": "b", "argv": []}]},
        "profiles[1].argv",
    ),
    "toml relative cwd": (
        '[[profiles]]\nname = "p"\nargv = ["/bin/true"]\ncwds = ["rel"]\n',
        "profiles[0].cwds[0]",
    ),
}


def test_profiles_files_with_a_load_time_refusal_stop_serve(tmp_path: Path) -> None:
    runs: dict[str, tuple[subprocess.Popen[str], str]] = {}
    cases: dict[str, tuple[Any, str | None]] = {**BAD_FILES, "valid (control)": (_profile(), None)}
    try:
        for i, (case, (document, field)) in enumerate(cases.items()):
            toml = isinstance(document, str)
            path = tmp_path / f"profiles{i}.{'toml' if toml else 'json'}"
            path.write_text(document if toml else json.dumps(document))
            state = tmp_path / f"state{i}"  # one each: a shared lock would refuse too
            state.mkdir(mode=0o700)
            proc = subprocess.Popen(
                [sys.executable, "-m", "supervisor", "serve", "--stdio"],
                env=service_env(state, PANEWARDEN_PROFILES=str(path)),
                cwd=str(REPO),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            runs[case] = (proc, field or "")
        # A bound on all of them at once: each start imports the service (about a second
        # of CPU), and with other tests running beside this one they share the cores.
        deadline = time.monotonic() + 100
        for case, (proc, field) in runs.items():
            _out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            if cases[case][1] is None:
                # Same harness, valid file: serves, sees EOF on stdin, exits 0.
                assert proc.returncode == 0, (case, err)
                continue
            assert proc.returncode == 2, (case, proc.returncode, err)
            assert "another supervisor" not in err, (case, err)
            assert f"panewarden: {field}: " in err, (case, field, err)
            assert "Traceback" not in err, (case, err)
    finally:
        for proc, _field in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
