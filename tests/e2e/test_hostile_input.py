"""Hostile or odd input: a catastrophic regex, planted state files, out-of-range integers,
names with a trailing newline, client-injected arguments, and the published schemas."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from tests.conftest import REPO, Tools, service_env, stdio_params

pytestmark = pytest.mark.anyio


async def test_a_catastrophic_regex_never_stalls_the_pane(tools: Tools) -> None:
    """(a+)+$ against 34 'a' and '!' runs for minutes in a backtracking engine."""
    await tools.call("start_pane", name="re", profile="demo")
    idle = await tools.wait("re", until=["idle"])
    await tools.call("send_input", name="re", text="a" * 34 + "!")
    await tools.wait("re", after=idle["seq"], until=["done"])
    reads: list[float] = []

    async def keep_reading() -> None:
        for _ in range(10):
            started = time.monotonic()
            text = (await tools.call("read_output", name="re"))["text"]
            reads.append(time.monotonic() - started)
            assert "a" * 34 + "!" in text

    async with anyio.create_task_group() as tg:
        tg.start_soon(keep_reading)
        out = await tools.call("wait_output", name="re", pattern="(a+)+$", regex=True, timeout_s=2)
    assert out["matched"] is False
    assert max(reads) < 2.0, reads  # the worker's loop kept answering
    status = await tools.call("get_status", name="re")
    assert status["lifecycle"] == "running", status
    found = await tools.call("wait_output", name="re", pattern=r"a{34}!", regex=True, timeout_s=5)
    assert found["matched"], found
    # What RE2 cannot do in linear time is refused up front, never tried.
    refused = await tools.error("wait_output", name="re", pattern=r"(a)\1", regex=True)
    assert refused["code"] == "invalid_argument", refused


async def test_integers_are_bounded_and_names_follow_one_rule(tools: Tools) -> None:
    await tools.call("start_pane", name="ok", profile="demo")
    await tools.wait("ok", until=["idle"])
    huge = await tools.error("send_input", name="ok", text="x", expect_turn=2**64)
    assert huge["code"] == "invalid_argument", huge
    wide = await tools.error("wait_status", name="ok", after_seq=2**63, timeout_s=1)
    assert wide["code"] == "invalid_argument", wide
    # One name rule for every tool: a trailing newline is refused the same way everywhere.
    for tool, args in [
        ("get_status", {}),
        ("read_output", {}),
        ("start_pane", {"profile": "demo"}),
        ("remove_pane", {}),
    ]:
        err = await tools.error(tool, name="ok\n", **args)
        assert err["code"] == "invalid_argument", (tool, err)
    waited = await tools.error("wait_any", panes=[{"name": "ok\n"}], timeout_s=1)
    assert waited["code"] == "invalid_argument", waited


async def test_a_client_injected_argument_is_ignored_and_others_refused(tools: Tools) -> None:
    await tools.call("start_pane", name="gem", profile="demo", wait_for_previous=True)
    status = await tools.call("get_status", name="gem", wait_for_previous=False)
    assert status["name"] == "gem"
    other = await tools.error("get_status", name="gem", wait_for_everything=True)
    assert other["code"] == "invalid_argument", other


async def test_published_schemas_are_plain_and_bounded(tools: Tools) -> None:
    listed = await tools.client.list_tools()

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            assert "$ref" not in node, where
            if "anyOf" in node:
                assert {"type": "null"} not in node["anyOf"], where
            if node.get("type") == "integer":
                assert "maximum" in node and "minimum" in node, where
            for key, value in node.items():
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")

    for tool in listed.tools:
        walk(tool.input_schema, tool.name)


def _plant(panes_dir: Path) -> dict[str, Path]:
    panes_dir.mkdir(parents=True, mode=0o700)
    fifo = panes_dir / "fifo.json"
    os.mkfifo(fifo)
    link = panes_dir / "zero.json"
    link.symlink_to("/dev/zero")
    huge = panes_dir / "huge.json"
    with huge.open("wb") as f:
        f.truncate(2 * 1024**3)  # sparse: 2 GiB on paper
    garbled = panes_dir / "garbled.json"
    garbled.write_bytes(b"{not json")
    return {"fifo": fifo, "link": link, "huge": huge, "garbled": garbled}


async def test_planted_state_files_are_quarantined_and_serve_starts(state_dir: Path) -> None:
    planted = _plant(state_dir / "panes")
    started = time.monotonic()
    with anyio.fail_after(30):
        async with Client(stdio_params(state_dir)) as client:
            tools = Tools(client)
            assert (await tools.call("list_panes"))["panes"] == []
            await tools.call("start_pane", name="fine", profile="demo")
            await tools.wait("fine", until=["idle"])
    assert time.monotonic() - started < 30
    names = {p.name for p in (state_dir / "panes").iterdir()}
    for path in planted.values():
        assert path.name not in names and f"{path.stem}.json.corrupt" in names, names
    # The link itself was set aside, never followed.
    assert (state_dir / "panes" / "zero.json.corrupt").readlink() == Path("/dev/zero")


def test_panewarden_help_lists_commands_without_suppressed_ones(state_dir: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "supervisor", "--help"],
        env=service_env(state_dir),
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert "SUPPRESS" not in out, out
    assert "demo-agent" not in out, out
    for command in ("serve", "demo", "status", "doctor", "stdio-proxy"):
        assert command in out, out


async def test_an_invalid_value_is_echoed_as_a_short_prefix_only(tools: Tools) -> None:
    """An invalid enum value used to come back whole: 1 MiB in, 1 MiB out."""
    big = "z" * (900 * 1024)  # under the arguments bound: validation sees it
    calls: list[tuple[str, dict[str, Any]]] = [
        ("answer_dialog", {"answer": big, "name": "p"}),
        ("wait_status", {"until": ["idle", big], "name": "p"}),
        ("batch_handoff", {"mode": big}),
        ("collect_handoffs", {"mode": big}),
        ("lease_reconcile", {"lease_type": big}),
        ("get_status", {big: 1}),  # an unknown field's name is quoted too
    ]
    for tool, args in calls:
        err = await tools.error(tool, **args)
        assert err["code"] == "invalid_argument", (tool, err["message"][:200])
        assert len(err["message"]) < 300, (tool, err["message"][:200])
        assert "zzzz" in err["message"], (tool, err["message"])  # a prefix is still shown


async def test_oversized_arguments_are_refused_before_validation(tools: Tools) -> None:
    started = time.monotonic()
    err = await tools.error("answer_dialog", name="p", answer="z" * (3 * 1024 * 1024))
    assert err["code"] == "invalid_argument", err["message"][:200]
    assert "at most 1048576" in err["message"] and len(err["message"]) < 200, err
    err = await tools.error("send_input", name="p", text="t", extra=["z" * 1024] * 2048)
    assert "at most 1048576" in err["message"], err["message"][:200]
    assert time.monotonic() - started < 10
    assert (await tools.call("list_panes"))["panes"] == []  # and the session still serves


def _dir_modes(root: Path) -> dict[str, str]:
    dirs = [root, *(p for p in root.rglob("*") if p.is_dir())]
    return {str(p.relative_to(root)): oct(p.stat().st_mode & 0o777) for p in dirs}


async def test_every_state_directory_is_private(state_dir: Path) -> None:
    """``$STATE/leases/`` was 0755: mkdir(parents=True) gives parents the umask's mode."""
    old = os.umask(0o022)  # the usual one, which the service inherits
    try:
        async with Client(stdio_params(state_dir)) as client:
            assert (await Tools(client).call("list_panes"))["panes"] == []
            modes = _dir_modes(state_dir)
    finally:
        os.umask(old)
    assert "leases" in modes, modes
    assert set(modes.values()) == {"0o700"}, modes
