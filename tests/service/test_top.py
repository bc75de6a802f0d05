"""``panewarden top`` against real HTTP services, and the usage ``list_panes`` reports.

The usage figures are checked against psutil's own view of the pane's tree (a pane whose
program forks a CPU burner and holds a known amount of memory); ``--once --json`` reads
two services on two ports and one that is down; the live screen runs on a PTY, read
with pyte, and follows a demo pane into ``blocked``; an ACP pane's reported tokens show.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pyte
import pytest
from ptyprocess import PtyProcess

from tests.polling import poll
from tests.service.conftest import (
    REPO,
    Service,
    ServiceFactory,
    call,
    connect,
    ok,
    run,
    write_secret,
)

HELD_BYTES = 64 * 1024 * 1024
# The program forks a burner (before allocating, so the held memory is counted once),
# then holds HELD_BYTES of written pages.
BURNER = (
    "import os, sys, time\n"
    "if os.fork() == 0:\n"
    "    while True:\n"
    "        pass\n"
    f"held = b'x' * {HELD_BYTES}\n"
    "print('ready', flush=True)\n"
    "time.sleep(3600)\n"
)
TOP_TIMEOUT_S = 30.0


def _profiles() -> dict[str, Any]:
    return {
        "profiles": [
            {"name": "burn", "argv": [sys.executable, "-c", BURNER], "cwds": ["/"]},
        ]
    }


def _tree(worker_pid: int) -> list[psutil.Process]:
    root = psutil.Process(worker_pid)
    return [root, *root.children(recursive=True)]


def _tree_cpu_s(procs: list[psutil.Process]) -> float:
    total = 0.0
    for proc in procs:
        times = proc.cpu_times()
        total += times.user + times.system
    return total


def _top(
    args: list[str], env: dict[str, str], timeout_s: float = TOP_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "top", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _client_env(service: Service, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PANEWARDEN_", "HTTP"))}
    return env | {"PANEWARDEN_TOKEN_FILE": service.env["PANEWARDEN_TOKEN_FILE"]} | extra


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _start_demo(service: Service, name: str, token: str) -> None:
    async with connect(service.url, token) as client:
        ok(await call(client, "start_pane", {"name": name, "profile": "demo"}))
        waited = ok(await call(client, "wait_status", {"name": name, "until": ["idle"]}))
        assert not waited["timed_out"], waited


def _token(service: Service) -> str:
    return Path(service.env["PANEWARDEN_TOKEN_FILE"]).read_text().strip()


@pytest.mark.timeout(90)
def test_usage_of_a_pane_tree_matches_psutil(services: ServiceFactory) -> None:
    service = services.start(profiles=_profiles())

    async def scenario() -> None:
        async with connect(service.url, _token(service)) as client:
            pane = ok(await call(client, "start_pane", {"name": "burn", "profile": "burn"}))
            worker_pid = pane["pane"]["worker_pid"]
            ready = ok(await call(client, "wait_output", {"name": "burn", "pattern": "ready"}))
            assert ready["matched"], ready
            first = ok(await call(client, "list_panes"))["panes"][0]
            # The first call has no previous sample: no CPU% yet.
            assert first["usage"]["cpu_percent"] is None
            procs = _tree(worker_pid)
            cpu_before, at_before = _tree_cpu_s(procs), time.monotonic()
            # Let the burner spend at least one CPU second, as psutil sees it.
            poll(lambda: _tree_cpu_s(procs) - cpu_before >= 1.0, 20.0, what="the burner to run")
            second = ok(await call(client, "list_panes"))["panes"][0]
            cpu_after, at_after = _tree_cpu_s(procs), time.monotonic()
            expected = (cpu_after - cpu_before) / (at_after - at_before) * 100.0
            usage = second["usage"]
            assert usage["processes"] == len(_tree(worker_pid)) >= 3, usage
            rss = sum(p.memory_info().rss for p in _tree(worker_pid))
            assert usage["rss_bytes"] >= HELD_BYTES, usage
            assert abs(usage["rss_bytes"] - rss) <= 0.05 * rss, (usage, rss)
            assert usage["cpu_percent"] is not None, usage
            assert usage["cpu_percent"] >= 30.0, usage
            assert abs(usage["cpu_percent"] - expected) <= 25.0, (usage, expected)

    run(scenario(), 80.0)


@pytest.mark.timeout(90)
def test_once_json_reads_two_services_and_shows_a_dead_one(
    services: ServiceFactory, tmp_path: Path
) -> None:
    first = services.start()
    second = services.start()
    run(_start_demo(first, "alpha", _token(first)))
    run(_start_demo(second, "beta", _token(second)))
    listing = [
        {"name": "one", "url": first.url, "token_file": first.env["PANEWARDEN_TOKEN_FILE"]},
        {"name": "two", "url": second.url, "token_file": second.env["PANEWARDEN_TOKEN_FILE"]},
        {
            "name": "gone",
            "url": f"http://127.0.0.1:{_free_port()}/mcp",
            "token_file": first.env["PANEWARDEN_TOKEN_FILE"],
        },
    ]
    services_file = write_secret(tmp_path / "services.json", json.dumps(listing))
    env = _client_env(first, PANEWARDEN_SERVICES=str(services_file))
    done = _top(["--once", "--json"], env)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    panes = {(r["service"], r["name"]): r for r in rows if "error" not in r}
    assert set(panes) == {("one", "alpha"), ("two", "beta")}, rows
    for row in panes.values():
        assert row["state"] == "idle", row
        assert row["profile"] == "demo" and row["agent"] == "demo", row
        assert row["rss_bytes"] > 0 and row["processes"] >= 2, row
        assert row["worker_pid"] > 0 and isinstance(row["confined"], bool), row
    errors = [r for r in rows if "error" in r]
    assert [r["service"] for r in errors] == ["gone"], rows


@pytest.mark.timeout(60)
def test_top_shows_the_tokens_an_acp_agent_reported(services: ServiceFactory) -> None:
    agent = [sys.executable, str(REPO / "tests" / "acp" / "fake_acp_agent.py")]
    profile = {"name": "acp", "argv": agent, "cwds": ["/"], "protocol": "acp"}
    service = services.start(profiles={"profiles": [profile]})

    async def scenario() -> None:
        async with connect(service.url, _token(service)) as client:
            ok(await call(client, "start_pane", {"name": "talk", "profile": "acp"}))
            sent = ok(await call(client, "send_input", {"name": "talk", "text": "usage"}))
            args = {"name": "talk", "after_seq": sent["seq"], "until": ["done"]}
            waited = ok(await call(client, "wait_status", args))
            assert waited["status"]["usage"]["total_tokens"] == 15, waited
            listed = ok(await call(client, "list_panes", {}))["panes"]
            assert listed[0]["tokens"]["total_tokens"] == 15, listed

    run(scenario(), 40.0)
    done = _top(["--once", "--json", "--url", service.url], _client_env(service))
    assert done.returncode == 0, done.stderr
    (row,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert (row["name"], row["state"], row["tokens"]) == ("talk", "done", 15), row
    shown = _top(["--once", "--url", service.url], _client_env(service, COLUMNS="200"))
    assert "TOKENS" in shown.stdout and " 15" in shown.stdout, shown.stdout


def test_failures_are_one_line_without_a_traceback(
    services: ServiceFactory, tmp_path: Path
) -> None:
    service = services.start()
    wrong = write_secret(tmp_path / "wrong", "w" * 64)
    cases = {
        "wrong token": (["--once", "--json", "--url", service.url], str(wrong)),
        "service gone": (
            ["--once", "--json", "--url", f"http://127.0.0.1:{_free_port()}/mcp"],
            service.env["PANEWARDEN_TOKEN_FILE"],
        ),
        "bad url": (["--once", "--url", "ftp://nowhere"], service.env["PANEWARDEN_TOKEN_FILE"]),
        "no token file": (["--once", "--url", service.url], str(tmp_path / "absent")),
    }
    for label, (args, token_file) in cases.items():
        env = _client_env(service) | {"PANEWARDEN_TOKEN_FILE": token_file}
        done = _top(args, env)
        assert done.returncode != 0, (label, done)
        assert "Traceback" not in done.stderr, (label, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("panewarden top: "), (label, done.stderr)
        assert done.stdout == "", (label, done.stdout)


class Screen:
    """``panewarden top`` on a PTY, its output fed to a pyte screen."""

    def __init__(self, env: dict[str, str], url: str, cols: int = 200, rows: int = 30) -> None:
        self.screen = pyte.Screen(cols, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.proc = PtyProcess.spawn(
            [sys.executable, "-m", "supervisor", "top", "--url", url],
            cwd=str(REPO),
            # Rich takes COLUMNS/LINES over the terminal's size: the PTY's size must count.
            env={k: v for k, v in env.items() if k not in ("COLUMNS", "LINES")}
            | {"TERM": "xterm-256color"},
            dimensions=(rows, cols),
        )

    def pump(self) -> str:
        ready, _, _ = select.select([self.proc.fd], [], [], 0.05)
        if ready:
            with contextlib.suppress(OSError):
                self.stream.feed(os.read(self.proc.fd, 65536))
        return "\n".join(self.screen.display)

    def wait_for(self, predicate: Any, timeout_s: float, what: str) -> str:
        def seen() -> str:
            text = self.pump()
            return text if predicate(text) else ""

        text = poll(seen, timeout_s)
        assert text, f"timed out after {timeout_s} s waiting for {what}:\n{self.pump()}"
        return text

    def close(self) -> None:
        if self.proc.isalive():
            self.proc.terminate(force=True)
        self.proc.close()


def _row_of(text: str, name: str) -> str:
    return next((line for line in text.splitlines() if f" {name} " in line), "")


@pytest.mark.timeout(90)
def test_live_top_on_a_pty_follows_a_pane_into_blocked(services: ServiceFactory) -> None:
    service = services.start()
    run(_start_demo(service, "demo1", _token(service)))
    top = Screen(_client_env(service), service.url)
    try:
        top.wait_for(lambda s: "idle" in _row_of(s, "demo1"), 20.0, "the idle pane on screen")

        async def ask() -> None:
            async with connect(service.url, _token(service)) as client:
                ok(await call(client, "send_input", {"name": "demo1", "text": "dialog rm x"}))

        run(ask())
        started = time.monotonic()
        screen = top.wait_for(
            lambda s: "blocked" in _row_of(s, "demo1"), 10.0, "the blocked state on screen"
        )
        # Driven by wait_any, not the 5 s refresh: seen well within it.
        assert time.monotonic() - started < 5.0, screen
        assert "permission" in _row_of(screen, "demo1"), screen
        # The README shows this screen (docs/top-screen.txt, as the page's screenshot).
        (REPO / "docs" / "top-screen.txt").write_text(screen.rstrip() + "\n")
        top.proc.write(b"s")
        top.wait_for(lambda s: "NAME*" in s, 5.0, "the sort column moved to NAME")
        top.proc.write(b"q")
        poll(lambda: not top.proc.isalive(), 10.0, what="top to quit on q")
        assert top.proc.exitstatus == 0, top.proc.exitstatus
    finally:
        top.close()
