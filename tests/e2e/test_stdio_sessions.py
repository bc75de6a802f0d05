"""Two stdio clients under one HOME, without PANEWARDEN_STATE_DIR, each just work.

Each stdio server that is not the shared service gets a session directory of its own,
removed when it stops; a dead session's directory is swept by the next server. With an
explicit state dir the second server is refused, and told to use the HTTP service.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.conftest import REPO, Tools, service_env
from tests.faults import CLIENT_GONE, key_of, ppid, sigkill_all
from tests.polling import apoll, poll

pytestmark = pytest.mark.anyio


def _home_env(home: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PANEWARDEN_") and k not in ("XDG_STATE_HOME", "XDG_RUNTIME_DIR")
    }
    env["HOME"] = str(home)
    env["PANEWARDEN_LOG_LEVEL"] = "WARNING"
    return env


def _params(home: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "supervisor", "serve", "--stdio"],
        env=_home_env(home),
        cwd=str(REPO),
    )


def _sessions(home: Path) -> list[Path]:
    root = home / ".local" / "state" / "panewarden" / "stdio"
    return sorted(root.iterdir()) if root.exists() else []


async def test_two_stdio_clients_under_one_home_both_work(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    texts: dict[str, str] = {}

    async def client(
        tag: str, mine: tuple[anyio.Event, anyio.Event], theirs: tuple[anyio.Event, anyio.Event]
    ) -> None:
        async with Client(_params(home)) as c:
            tools = Tools(c)
            await tools.call("start_pane", name="same", profile="demo")
            idle = await tools.wait("same", until=["idle"])
            mine[0].set()
            await theirs[0].wait()  # both servers run at once
            await tools.call("send_input", name="same", text=f"from {tag}")
            await tools.wait("same", after=idle["seq"], until=["done"])
            texts[tag] = (await tools.call("read_output", name="same"))["text"]
            assert len(_sessions(home)) == 2
            # Neither server stops (and removes its session) before both have looked.
            mine[1].set()
            await theirs[1].wait()
            await tools.call("remove_pane", name="same")

    a_events, b_events = (anyio.Event(), anyio.Event()), (anyio.Event(), anyio.Event())
    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            tg.start_soon(client, "a", a_events, b_events)
            tg.start_soon(client, "b", b_events, a_events)
    assert "reply: from a" in texts["a"] and "from b" not in texts["a"]
    assert "reply: from b" in texts["b"] and "from a" not in texts["b"]
    assert _sessions(home) == []  # each server removed its own session directory


async def test_a_dead_sessions_directory_is_swept_by_the_next_server(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    known: set[tuple[int, int]] = set()
    try:
        async with Client(_params(home)) as c:
            tools = Tools(c)
            pane = (await tools.call("start_pane", name="x", profile="demo"))["pane"]
            known |= {k for p in (pane["pid"], pane["worker_pid"]) if (k := key_of(p))}
            server = ppid(pane["worker_pid"])
            assert server is not None
            dead = _sessions(home)
            assert len(dead) == 1
            os.kill(server, signal.SIGKILL)
            assert await apoll(lambda: key_of(server) is None or _zombie(server), 10)
    except* CLIENT_GONE:
        pass
    try:
        async with Client(_params(home)) as c:
            await Tools(c).call("list_panes")  # a panes list of its own: empty
            assert dead[0] not in _sessions(home)
            assert len(_sessions(home)) == 1
    finally:
        sigkill_all(known)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
    except OSError:
        return True


def test_a_second_server_on_an_explicit_state_dir_is_told_to_use_http(
    state_dir: Path,
) -> None:
    env = _home_env(state_dir.parent) | {"PANEWARDEN_STATE_DIR": str(state_dir)}
    first = subprocess.Popen(
        [sys.executable, "-m", "supervisor", "serve", "--stdio"],
        env=env,
        cwd=str(REPO),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        lock = state_dir / "supervisor.lock"
        deadline_ok = poll(lambda: lock.exists() and lock.read_text().strip().isdigit(), 20.0)
        assert deadline_ok
        second = subprocess.run(
            [sys.executable, "-m", "supervisor", "serve", "--stdio"],
            env=env,
            cwd=str(REPO),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert second.returncode == 2, second
        assert "serve --http" in second.stderr and "stdio-proxy" in second.stderr, second.stderr
    finally:
        assert first.stdin is not None
        first.stdin.close()
        first.wait(timeout=30)
        assert first.stderr is not None
        first.stderr.close()


async def test_a_graceful_stop_leaves_no_runtime_directory(state_dir: Path) -> None:
    # Short, so the ipc path fits in 107 bytes and the service uses it.
    runtime = Path(tempfile.mkdtemp(prefix="pwrt-"))
    try:
        env = service_env(state_dir, XDG_RUNTIME_DIR=str(runtime))
        argv = ["-m", "supervisor", "serve", "--stdio"]
        params = StdioServerParameters(command=sys.executable, args=argv, env=env, cwd=str(REPO))
        async with Client(params) as c:
            await Tools(c).call("start_pane", name="rt", profile="demo")
            assert any(p.suffix in (".ipc", ".sock") for p in _files(runtime)), _files(runtime)
        # The service stopped when its client left: its socket directory went with it.
        gone = await apoll(lambda: not list((runtime / "panewarden").iterdir()), 10)
        assert gone, _files(runtime)
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def _files(root: Path) -> list[Path]:
    """Everything below ``root`` (for assertions and their messages)."""
    return sorted(root.rglob("*"))
