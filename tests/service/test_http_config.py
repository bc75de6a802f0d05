"""``serve --http`` refuses unsafe addresses and access files before it binds anything."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.service.conftest import REPO, ServiceFactory, digest, new_token

REFUSAL_TIMEOUT_S = 20.0


def _run_refused_prepared(env: dict[str, str], args: list[str]) -> tuple[int, str, Path]:
    proc = subprocess.run(
        [sys.executable, "-m", "supervisor", *args],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=REFUSAL_TIMEOUT_S,
        check=False,
    )
    return proc.returncode, proc.stderr.decode(errors="replace"), Path(env["PANEWARDEN_STATE_DIR"])


def _run_refused(services: ServiceFactory, **kwargs: object) -> tuple[int, str, Path]:
    service = services.prepare(**kwargs)  # type: ignore[arg-type]
    return _run_refused_prepared(service.env, service.args)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5"])
def test_non_loopback_host_exits_2_before_anything_starts(
    services: ServiceFactory, host: str
) -> None:
    code, err, state = _run_refused(
        services, args=["serve", "--http", "--host", host, "--port", "0"]
    )
    assert code == 2, err
    assert "--host" in err, err
    assert "loopback" in err or "literal IP" in err, err
    # Nothing was started: not even the state dir (lock, worker socket) exists.
    assert not state.exists()


def test_token_file_with_mode_0644_refuses_to_start(services: ServiceFactory) -> None:
    service = services.prepare()
    os.chmod(service.env["PANEWARDEN_TOKEN_FILE"], 0o644)
    code, err, state = _run_refused_prepared(service.env, service.args)
    assert code == 2, err
    assert "0644" in err, err
    assert "0600" in err, err
    assert not state.exists()


def test_missing_token_file_setting_refuses_to_start(services: ServiceFactory) -> None:
    code, err, _ = _run_refused(services, token=None)
    assert code == 2
    assert "PANEWARDEN_TOKEN_FILE" in err


def test_clients_file_without_audit_file_refuses(services: ServiceFactory) -> None:
    clients = [{"name": "reader", "token_sha256": digest(new_token()), "scopes": ["read"]}]
    code, err, _ = _run_refused(services, clients=clients)
    assert code == 2
    assert "PANEWARDEN_AUDIT_FILE" in err


def test_host_check_happens_before_token_check(services: ServiceFactory) -> None:
    """A bad --host is reported even when the token file is also bad."""
    service = services.prepare(args=["serve", "--http", "--host", "0.0.0.0", "--port", "0"])
    os.chmod(service.env["PANEWARDEN_TOKEN_FILE"], 0o644)
    code, err, _ = _run_refused_prepared(service.env, service.args)
    assert code == 2, err
    assert "--host" in err, err


def test_the_service_listens_on_loopback_only_and_records_its_url(
    services: ServiceFactory,
) -> None:
    service = services.start()
    assert service.proc is not None
    assert stat.S_IMODE(service.url_file.stat().st_mode) == 0o600
    port = int(service.url.rsplit(":", 1)[1].split("/", 1)[0])
    assert service.url == f"http://127.0.0.1:{port}/mcp"
    listening = [
        c.laddr
        for c in psutil.Process(service.proc.pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]
    assert listening == [("127.0.0.1", port)]

    # A second service asking for the same port fails with status 2 and says why.
    other = services.prepare(args=["serve", "--http", "--host", "127.0.0.1", "--port", str(port)])
    code, err, _ = _run_refused_prepared(other.env, other.args)
    assert code == 2, err
    assert f"cannot listen on 127.0.0.1:{port}" in err, err
