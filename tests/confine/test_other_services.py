"""A confined pane of one service against another service of the same user, as a
prompt-injected agent would attack it (issue 27, item 3): a stdio server's pane, under
the defaults a user gets (its session dir inside the default state dir, no
``XDG_RUNTIME_DIR`` of its own), cannot read the HTTP service's token in
``~/.config/panewarden`` or its state dir, and that service's operator socket, which
lies in a runtime base the pane's service does not use, refuses it: it runs in another
PID namespace. The operator, in the service's own, is still served."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import StdioServerParameters
from mcp.client.client import Client

from supervisor.cli.watch_source import operator_socket_path
from tests.confine.probing import probe, probe_profile, python_run
from tests.conftest import REPO, Tools
from tests.service.conftest import Service, new_token, write_secret

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

DENIED = "PermissionError:13"
# What the probe runs inside: ask an operator socket for a pane that does not exist and
# print its answer (``not_found`` when served, ``forbidden`` when refused).
WATCH = """
import socket, sys
with socket.socket(socket.AF_UNIX) as s:
    s.settimeout(10)
    s.connect(sys.argv[1])
    s.sendall(b'{"op": "watch", "pane": "nope"}\\n')
    print(s.makefile().readline().strip())
"""


@pytest.fixture
def base() -> Iterator[Path]:
    path = Path("/var/tmp") / f"pw-users-{secrets.token_hex(4)}"
    path.mkdir(mode=0o700)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def _first_line(socket_path: Path) -> str:
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    try:
        writer.write(b'{"op": "watch", "pane": "nope"}\n')
        return (await asyncio.wait_for(reader.readline(), 10)).decode().strip()
    finally:
        writer.close()


async def _first_line_from_another_pid_namespace(socket_path: Path) -> object:
    """The operator socket's first answer to a process in a PID namespace of its own
    (a sandbox of no pane of this service, the socket bound in as it is)."""
    bwrap = shutil.which("bwrap")
    assert bwrap is not None, "bwrap is installed where confined tests run"
    argv = [bwrap, "--die-with-parent", "--unshare-pid", "--ro-bind", "/", "/"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--", sys.executable, "-c", WATCH]
    proc = await asyncio.create_subprocess_exec(
        *argv, str(socket_path), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 30)
    return json.loads(out.decode())


def _env(home: Path, **extra: str) -> dict[str, str]:
    kept = ("PATH", "LANG", "PANEWARDEN_EMULATOR", "PANEWARDEN_WORKER_TEMPLATE")
    env = {k: v for k, v in os.environ.items() if k in kept}
    return {**env, "HOME": str(home), "PANEWARDEN_LOG_LEVEL": "WARNING", **extra}


async def test_a_pane_of_one_service_reaches_nothing_of_another(base: Path) -> None:
    home, work, run = base / "home", base / "work", base / "run"
    for path in (home, work, run):
        path.mkdir(mode=0o700)
    # The HTTP service as docs/panewarden.service runs it: the token in
    # ~/.config/panewarden, the state in the default state dir.
    token = home / ".config" / "panewarden" / "token"
    token.parent.mkdir(parents=True, mode=0o700)
    write_secret(token, new_token())
    http_state = home / ".local" / "state" / "panewarden"
    http_env = _env(
        home,
        PANEWARDEN_STATE_DIR=str(http_state),
        PANEWARDEN_TOKEN_FILE=str(token),
        XDG_RUNTIME_DIR=str(run),
        PANEWARDEN_CONFINE="off",
    )
    http = Service(base, http_env, ["serve", "--http", "--host", "127.0.0.1", "--port", "0"])
    http.start()
    try:
        operator = operator_socket_path(http_state)
        assert operator.is_relative_to(run), operator
        # The operator in the service's own namespaces is served: asked for a pane that
        # does not exist, it hears so (a refused peer hears ``forbidden``).
        served = json.loads(await _first_line(operator))
        assert served["data"]["code"] == "not_found", served
        (base / "profiles.json").write_text(
            json.dumps({"profiles": [probe_profile("probe", [str(work)])]})
        )
        stdio_env = _env(
            home, PANEWARDEN_PROFILES=str(base / "profiles.json"), PANEWARDEN_CONFINE="on"
        )
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "supervisor", "serve", "--stdio"],
            env=stdio_env,
            cwd=str(REPO),
        )
        async with Client(params) as client:
            seen = await probe(
                Tools(client),
                "p",
                "probe",
                work,
                {
                    "token": ["read", str(token)],
                    "state": ["list", str(http_state)],
                    "records": ["list", str(http_state / "run")],
                    "config": ["list", str(token.parent)],
                    "operator": python_run(WATCH, str(operator)),
                },
            )
        assert seen["token"] == DENIED, seen
        assert seen["state"] == DENIED, seen
        assert seen["records"] == DENIED, seen
        assert seen["config"] == DENIED, seen
        # Every host Unix socket is hidden from a pane (the operator socket's file is a
        # stand-in); where one is reached all the same, it refuses a peer in another PID
        # namespace, which a process of no pane at all shows below.
        assert seen["operator"].endswith("PermissionError: [Errno 13] Permission denied"), seen
        line = await _first_line_from_another_pid_namespace(operator)
        assert isinstance(line, dict) and line["event"] == "error", line
        assert line["data"]["code"] == "forbidden", line
    finally:
        http.stop()
