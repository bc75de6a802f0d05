"""Signals to the HTTP service: SIGHUP reloads profiles and clients and reopens the audit
file; SIGTERM stops gracefully, closing panes unless ``--keep-panes``."""

from __future__ import annotations

import json
import signal
import stat
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from mcp import Client

from tests.polling import poll
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
    write_secret,
)

RELOAD_TIMEOUT_S = 15.0


def _profile(name: str, cols: int) -> dict[str, Any]:
    return {
        "name": name,
        "agent": "demo",
        "argv": [sys.executable, "-m", "supervisor.demo.agent"],
        "cwds": ["/"],
        "env": {"PYTHONPATH": str(REPO)},
        "cols": cols,
    }


def _log_count(service: Service, needle: str) -> int:
    return service.stderr().count(needle)


def _hup_and_wait(service: Service, needle: str) -> None:
    """Send SIGHUP and wait until the service logs ``needle`` once more."""
    before = _log_count(service, needle)
    service.send_signal(signal.SIGHUP)
    poll(
        lambda: _log_count(service, needle) > before, RELOAD_TIMEOUT_S, what=f"log line {needle!r}"
    )


async def _start(client: Client, name: str, profile: str) -> dict[str, Any]:
    result = await call(client, "start_pane", {"name": name, "profile": profile})
    if "error" in result:
        return result
    waited = ok(await call(client, "wait_status", {"name": name, "until": ["idle"]}))
    assert not waited["timed_out"]
    return dict(result["pane"])


def test_sighup_reloads_profiles_keeping_the_old_ones_when_the_file_is_bad(
    services: ServiceFactory,
) -> None:
    service = services.start(profiles={"profiles": [_profile("alpha", 100)]})
    profiles_path = Path(service.env["PANEWARDEN_PROFILES"])
    token = token_of(service)

    async def before_reload() -> dict[str, Any]:
        async with connect(service.url, token) as client:
            return await _start(client, "running", "alpha")

    first = run(before_reload(), 30)
    assert first["profile"] == "alpha"

    # A broken file: the service keeps serving with the old profiles.
    write_secret(profiles_path, '{"profiles": [{"name": "beta", "argv": []}]}')
    _hup_and_wait(service, "profiles reload refused")

    async def after_bad() -> tuple[dict[str, Any], dict[str, Any]]:
        async with connect(service.url, token) as client:
            alpha = await _start(client, "alpha-again", "alpha")
            beta = await call(client, "start_pane", {"name": "beta-1", "profile": "beta"})
            ok(await call(client, "remove_pane", {"name": "alpha-again"}))
            return alpha, beta

    alpha, beta = run(after_bad(), 30)
    assert alpha["profile"] == "alpha"
    assert beta["error"]["code"] == "profile_not_found"

    # A good file: new panes use it; the running pane is untouched.
    write_secret(profiles_path, json.dumps({"profiles": [_profile("beta", 90)]}))
    _hup_and_wait(service, "profiles reloaded")

    async def after_good() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with connect(service.url, token) as client:
            beta = await _start(client, "beta-1", "beta")
            screen = ok(await call(client, "read_output", {"name": "beta-1"}))
            alpha = await call(client, "start_pane", {"name": "alpha-3", "profile": "alpha"})
            sent = ok(await call(client, "send_input", {"name": "running", "text": "still here"}))
            waited = ok(
                await call(
                    client,
                    "wait_status",
                    {"name": "running", "until": ["done"], "after_seq": sent["seq"]},
                )
            )
            listed = ok(await call(client, "list_panes"))
            running = next(p for p in listed["panes"] if p["name"] == "running")
            return beta | {"cols": screen["cols"]}, alpha, waited, running

    beta, alpha, waited, running = run(after_good(), 30)
    assert beta["profile"] == "beta"
    assert beta["cols"] == 90
    assert alpha["error"]["code"] == "profile_not_found"
    assert not waited["timed_out"]
    assert waited["status"]["turn"] == 1
    assert running["pid"] == first["pid"]
    assert running["worker_pid"] == first["worker_pid"]
    assert running["profile"] == "alpha"
    assert running["lifecycle"] == "running"


def test_sighup_reloads_clients_and_reopens_the_audit_file(services: ServiceFactory) -> None:
    old, new = new_token(), new_token()
    scopes = ["read", "lifecycle"]
    service = services.start(
        clients=[{"name": "old", "token_sha256": digest(old), "scopes": scopes}], audit=True
    )
    clients_path = Path(service.env["PANEWARDEN_CLIENTS"])
    audit_path = Path(service.env["PANEWARDEN_AUDIT_FILE"])

    async def remove_missing(token: str, pane: str) -> dict[str, Any]:
        async with connect(service.url, token) as client:
            return await call(client, "remove_pane", {"name": pane})

    assert run(remove_missing(old, "one"), 30)["error"]["code"] == "not_found"

    # A broken clients file keeps the old clients; the audit file is reopened anyway.
    write_secret(clients_path, "[{]")
    _hup_and_wait(service, "clients reload refused")
    assert run(remove_missing(old, "two"), 30)["error"]["code"] == "not_found"

    # Rotation: rename the file, SIGHUP, new records go to a new file at the same path.
    rotated = audit_path.with_name("audit.jsonl.1")
    audit_path.rename(rotated)
    write_secret(
        clients_path,
        json.dumps([{"name": "new", "token_sha256": digest(new), "scopes": scopes}]),
    )
    _hup_and_wait(service, "clients reloaded")
    assert run(remove_missing(new, "three"), 30)["error"]["code"] == "not_found"
    with pytest.raises(ExceptionGroup):
        run(remove_missing(old, "four"), 30)  # the old token is gone: 401

    assert [(r["client"], r["pane"]) for r in read_audit(rotated)] == [
        ("old", "one"),
        ("old", "two"),
    ]
    assert [(r["client"], r["pane"]) for r in read_audit(audit_path)] == [("new", "three")]
    assert stat.S_IMODE(audit_path.stat().st_mode) == 0o600


def _pane_pids(service: Service) -> tuple[int, int]:
    async def scenario() -> tuple[int, int]:
        async with connect(service.url, token_of(service)) as client:
            pane = await _start(client, "lasting", "demo")
            return int(pane["pid"]), int(pane["worker_pid"])

    return run(scenario(), 30)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_sigterm_closes_panes_and_removes_the_url_file(services: ServiceFactory) -> None:
    service = services.start()
    pid, worker_pid = _pane_pids(service)
    assert service.stop(signal.SIGTERM) == 0
    assert not service.url_file.exists()
    poll(lambda: not _alive(pid) and not _alive(worker_pid), 10, what="the pane to be closed")


def test_sigterm_with_keep_panes_leaves_panes_running(services: ServiceFactory) -> None:
    service = services.start(
        args=["serve", "--http", "--host", "127.0.0.1", "--port", "0", "--keep-panes"]
    )
    pid, worker_pid = _pane_pids(service)
    try:
        assert service.stop(signal.SIGTERM, reap=False) == 0
        assert _alive(pid)
        assert _alive(worker_pid)
    finally:
        service.reap()
