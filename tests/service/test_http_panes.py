"""Driving demo panes over HTTP: several clients at once, the audit trail, status and the proxy."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import TextContent

from tests.service.conftest import (
    REPO,
    Service,
    ServiceFactory,
    call,
    connect,
    digest,
    new_token,
    ok,
    read_audit,
    run,
    token_of,
)

LOAD_CLIENTS = 16
LOAD_CALLS = 200
LOAD_INPUT_EVERY = 20
DRIVER_SCOPES = ["read", "input", "lifecycle", "dialog"]


@dataclass
class Setup:
    service: Service
    tokens: dict[str, str]

    @property
    def audit_path(self) -> Path:
        return Path(self.service.env["PANEWARDEN_AUDIT_FILE"])


@pytest.fixture(scope="module")
def setup(module_services: ServiceFactory) -> Setup:
    names = ["alice", "bob"] + [f"load{i:02d}" for i in range(LOAD_CLIENTS)]
    tokens = {name: new_token() for name in names}
    clients = [
        {"name": name, "token_sha256": digest(token), "scopes": DRIVER_SCOPES}
        for name, token in tokens.items()
    ]
    service = module_services.start(clients=clients, audit=True)
    tokens["operator"] = token_of(service)
    return Setup(service, tokens)


async def _start_idle(client: Client, name: str) -> dict[str, Any]:
    ok(await call(client, "start_pane", {"name": name, "profile": "demo"}))
    waited = ok(await call(client, "wait_status", {"name": name, "until": ["idle"]}))
    assert not waited["timed_out"], waited
    return dict(waited["status"])


async def _turn(client: Client, name: str, text: str) -> dict[str, Any]:
    """Type one line and wait for the turn it starts to finish; returns the done status."""
    sent = ok(await call(client, "send_input", {"name": name, "text": text}))
    waited = ok(
        await call(
            client, "wait_status", {"name": name, "until": ["done"], "after_seq": sent["seq"]}
        )
    )
    assert not waited["timed_out"], waited
    # send_input answers once the program took the prompt, with the pane's status at that
    # moment: the demo's `working` report may still be on its way (the screen showed the
    # prompt taken first), so the turn it started is the one reported or the next.
    assert waited["status"]["turn"] in (sent["turn"], sent["turn"] + 1), (sent, waited)
    return dict(waited["status"])


def test_two_clients_drive_their_own_panes_at_once(setup: Setup) -> None:
    async def drive(who: str) -> tuple[dict[str, Any], str, list[str]]:
        pane = f"own-{who}"
        async with connect(setup.service.url, setup.tokens[who]) as client:
            await _start_idle(client, pane)
            done = await _turn(client, pane, f"hello from {who}")
            screen = ok(await call(client, "read_output", {"name": pane, "lines": 20}))
            names = [p["name"] for p in ok(await call(client, "list_panes"))["panes"]]
            ok(await call(client, "remove_pane", {"name": pane}))
            return done, screen["text"], names

    async def both() -> list[tuple[dict[str, Any], str, list[str]]]:
        return list(await asyncio.gather(drive("alice"), drive("bob")))

    for who, (done, text, _names) in zip(("alice", "bob"), run(both(), 60), strict=True):
        assert done["state"] == "done"
        assert done["turn"] == 1
        assert f"reply: hello from {who}" in text
        other = "bob" if who == "alice" else "alice"
        assert f"hello from {other}" not in text


def test_audit_records_each_mutating_call_and_no_prompt_text(setup: Setup) -> None:
    marker = f"secret-prompt-{new_token()[:16]}"
    before = len(read_audit(setup.audit_path))

    async def scenario() -> None:
        async with connect(setup.service.url, setup.tokens["alice"]) as client:
            await _start_idle(client, "audited")
            await _turn(client, "audited", f"please handle {marker}")
            ok(await call(client, "read_output", {"name": "audited"}))
            ok(await call(client, "get_status", {"name": "audited"}))
            refused = await call(client, "send_input", {"name": "audited", "text": "bad\x1b"})
            assert refused["error"]["code"] == "invalid_argument"
            ok(await call(client, "remove_pane", {"name": "audited"}))

    run(scenario(), 60)
    records = read_audit(setup.audit_path)[before:]
    assert [(r["client"], r["tool"], r["pane"], r["outcome"], r["code"]) for r in records] == [
        ("alice", "start_pane", "audited", "ok", None),
        ("alice", "send_input", "audited", "ok", None),
        ("alice", "send_input", "audited", "error", "invalid_argument"),
        ("alice", "remove_pane", "audited", "ok", None),
    ]
    raw = setup.audit_path.read_text()
    assert marker not in raw
    assert setup.tokens["alice"] not in raw
    assert setup.tokens["operator"] not in raw
    # The service log must not carry the prompt either.
    assert marker not in setup.service.stderr()


# 11 s alone on a quiet 2-core machine; beside other tests (xdist) every one of its 3200
# calls waits its turn for a core several times, 60-90 s, more with other load: the bounds
# are generous, nothing here asserts a speed.
@pytest.mark.timeout(300)
def test_sixteen_clients_with_two_hundred_calls_each_lose_nothing(setup: Setup) -> None:
    async def client_run(index: int) -> tuple[str, int, int, int, int]:
        who = f"load{index:02d}"
        pane = f"load-{index:02d}"
        async with connect(setup.service.url, setup.tokens[who]) as client:
            start = await _start_idle(client, pane)
            # calls counts every tool call of this client, start_pane and wait_status included.
            base_seq, inputs, calls, seq_per_turn = start["seq"], 0, 2, 0
            last = start
            while calls < LOAD_CALLS - 2:
                if calls % LOAD_INPUT_EVERY == 0 and calls + 2 <= LOAD_CALLS - 2:
                    done = await _turn(client, pane, f"{who} line {inputs}")
                    inputs += 1
                    seq_per_turn = seq_per_turn or done["seq"] - last["seq"]
                    last = done
                    calls += 2
                elif calls % 3 == 0:
                    listed = ok(await call(client, "list_panes"))
                    assert any(p["name"] == pane for p in listed["panes"])
                    calls += 1
                else:
                    status = ok(await call(client, "get_status", {"name": pane}))
                    assert status["seq"] >= last["seq"]
                    calls += 1
            final = ok(await call(client, "get_status", {"name": pane}))
            ok(await call(client, "remove_pane", {"name": pane}))
            return pane, inputs, final["turn"], final["seq"] - base_seq, seq_per_turn

    async def everyone() -> list[tuple[str, int, int, int, int]]:
        return list(await asyncio.gather(*(client_run(i) for i in range(LOAD_CLIENTS))))

    started = time.monotonic()
    results = run(everyone(), 270)
    elapsed = time.monotonic() - started
    print(f"{LOAD_CLIENTS} clients x {LOAD_CALLS} calls in {elapsed:.1f} s")
    for pane, inputs, turns, seq_delta, seq_per_turn in results:
        assert inputs == LOAD_CALLS // LOAD_INPUT_EVERY - 1
        assert turns == inputs, pane
        assert seq_per_turn > 0
        # Every state change of every turn was recorded: nothing lost, nothing merged.
        assert seq_delta == inputs * seq_per_turn, (pane, seq_delta, inputs, seq_per_turn)


def _status_cli(service: Service) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "supervisor", "status"],
        cwd=REPO,
        env=service.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_status_prints_the_pane_table(setup: Setup) -> None:
    async def start() -> dict[str, Any]:
        async with connect(setup.service.url, setup.tokens["operator"]) as client:
            return await _start_idle(client, "shown")

    async def remove() -> None:
        async with connect(setup.service.url, setup.tokens["operator"]) as client:
            ok(await call(client, "remove_pane", {"name": "shown"}))

    run(start(), 30)
    try:
        proc = _status_cli(setup.service)
    finally:
        run(remove(), 30)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"service: {setup.service.url}"
    assert lines[1].split() == [
        "name", "lifecycle", "state", "turn", "seq", "agent", "pid", "worker_pid", "cwd",
    ]  # fmt: skip
    row = next(line.split() for line in lines[2:] if line.startswith("shown "))
    assert row[1:4] == ["running", "idle", "0"]
    assert row[5] == "demo"


def test_status_without_a_service_exits_1(services: ServiceFactory) -> None:
    service = services.prepare()
    proc = _status_cli(service)
    assert proc.returncode == 1
    assert "no HTTP service is running" in proc.stderr


def test_status_with_a_dead_service_exits_1(services: ServiceFactory) -> None:
    service = services.start()
    service.remember_children()
    assert service.proc is not None
    service.proc.kill()
    service.proc.wait(timeout=10)
    assert service.url_file.exists()  # a crash leaves the file behind
    proc = _status_cli(service)
    assert proc.returncode == 1
    assert "did not answer" in proc.stderr


def _proxy_params(service: Service) -> StdioServerParameters:
    env = dict(service.env) | {"PANEWARDEN_LOG_LEVEL": "WARNING"}
    return StdioServerParameters(
        command=sys.executable, args=["-m", "supervisor", "stdio-proxy"], env=env, cwd=REPO
    )


def _error_text(result: Any) -> str:
    assert result.is_error
    return str(next(c.text for c in result.content if isinstance(c, TextContent)))


def test_stdio_proxy_drives_a_pane_owned_by_the_http_service(setup: Setup) -> None:
    async def scenario() -> None:
        async with (
            Client(_proxy_params(setup.service)) as proxied,
            connect(setup.service.url, setup.tokens["operator"]) as direct,
        ):
            via_proxy = (await proxied.list_tools()).tools
            via_http = (await direct.list_tools()).tools
            assert [t.model_dump() for t in via_proxy] == [t.model_dump() for t in via_http]

            await _start_idle(proxied, "proxied")
            done = await _turn(proxied, "proxied", "through the proxy")
            assert done["turn"] == 1
            # The pane lives in the HTTP service: a direct client sees the same status.
            seen = ok(await call(direct, "get_status", {"name": "proxied"}))
            assert seen == done

            bad = {"name": "proxied", "text": "no\x07bell"}
            proxied_error = await proxied.call_tool("send_input", bad)
            direct_error = await direct.call_tool("send_input", bad)
            assert _error_text(proxied_error) == _error_text(direct_error)
            assert json.loads(_error_text(proxied_error))["code"] == "invalid_argument"

            ok(await call(proxied, "remove_pane", {"name": "proxied"}))
            listed = ok(await call(direct, "list_panes"))
            assert all(p["name"] != "proxied" for p in listed["panes"])

    run(scenario(), 90)


def test_stdio_proxy_without_a_service_exits_1(services: ServiceFactory) -> None:
    service = services.prepare()
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor", "stdio-proxy"],
        cwd=REPO,
        env=service.env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 1
    assert "no HTTP service is running" in proc.stderr
    assert proc.stdout == ""


def test_stdio_proxy_relays_progress_of_a_long_wait(setup: Setup) -> None:
    """The service reports progress every few seconds of a wait; the proxy passes it on."""
    reports: list[tuple[float, float | None]] = []

    # The parameter names are the SDK's ProgressFnT protocol's (it may pass them by name).
    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total))

    async def scenario() -> dict[str, Any]:
        async with Client(_proxy_params(setup.service)) as proxied:
            await _start_idle(proxied, "slow")
            try:
                result = await proxied.call_tool(
                    "wait_status",
                    {"name": "slow", "until": ["done"], "timeout_s": 5.5},
                    progress_callback=on_progress,
                )
            finally:
                ok(await call(proxied, "remove_pane", {"name": "slow"}))
            return dict(result.structured_content or {})

    waited = run(scenario(), 60)
    assert waited["timed_out"] is True
    assert reports, "no progress notification reached the stdio client"
    assert reports[0][1] == 5.5
