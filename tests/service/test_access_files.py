"""Token, clients and audit files: what is accepted, what is refused, and how records look."""

from __future__ import annotations

import ipaddress
import json
import os
import stat
from pathlib import Path

import pytest

from protocol.errors import ErrorCode, PanewardenError
from supervisor.auth.access import SCOPES
from supervisor.auth.audit import AuditLog
from supervisor.auth.clients import (
    ClientTable,
    check_audit_path,
    load_client_table,
    read_token_file,
)
from supervisor.auth.http_access import HttpGate
from supervisor.config import load_config
from supervisor.front.transports.http import (
    loopback_address,
    parse_allowed_hosts,
    transport_security,
)
from tests.service.conftest import digest, new_token, write_secret


def _config(tmp_path: Path, **env: str) -> object:
    return load_config({"PANEWARDEN_STATE_DIR": str(tmp_path / "state"), **env})


def _refusal(tmp_path: Path, **env: str) -> str:
    with pytest.raises(PanewardenError) as caught:
        load_client_table(_config(tmp_path, **env))  # type: ignore[arg-type]
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    return caught.value.message


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "127.255.0.9", "::1"])
def test_literal_loopback_hosts_are_accepted(host: str) -> None:
    assert loopback_address(host) == ipaddress.ip_address(host)


@pytest.mark.parametrize(
    "host",
    ["localhost", "0.0.0.0", "::", "192.168.1.5", "::ffff:127.0.0.1", "[::1]", "example.com", ""],
)
def test_names_and_non_loopback_hosts_are_refused(host: str) -> None:
    with pytest.raises(PanewardenError) as caught:
        loopback_address(host)
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert "--host" in caught.value.message


def test_allowed_hosts_must_be_host_colon_port() -> None:
    assert parse_allowed_hosts(("Box.example.ts.net:8445",)) == ["box.example.ts.net:8445"]
    for bad in ("box.example", "box:http", "box:0", ":8443", "box:*", "user@box:1"):
        with pytest.raises(PanewardenError):
            parse_allowed_hosts((bad,))


def test_transport_security_lists_exact_ports_only() -> None:
    settings = transport_security(ipaddress.ip_address("127.0.0.2"), 4321, ["box.ts.net:8445"])
    assert settings.enable_dns_rebinding_protection
    assert settings.allowed_hosts == [
        "127.0.0.1:4321",
        "localhost:4321",
        "[::1]:4321",
        "127.0.0.2:4321",
        "box.ts.net:8445",
    ]
    assert "http://localhost:4321" in settings.allowed_origins
    assert "https://box.ts.net:8445" in settings.allowed_origins
    assert not any("*" in entry for entry in settings.allowed_hosts + settings.allowed_origins)


def test_token_file_is_read_when_private(tmp_path: Path) -> None:
    token = new_token()
    path = write_secret(tmp_path / "token", f"{token}\n")
    assert read_token_file(str(path)) == token


@pytest.mark.parametrize(
    ("content", "mode", "needle"),
    [
        ("x" * 32, 0o644, "0644"),
        ("x" * 32, 0o640, "0640"),
        ("x" * 32, 0o400, "0400"),
        ("", 0o600, "empty"),
        ("  \n", 0o600, "empty"),
        ("short", 0o600, "shorter"),
        ("two tokens-here-long-enough", 0o600, "without spaces"),
    ],
)
def test_unsafe_or_unusable_token_files_are_refused(
    tmp_path: Path, content: str, mode: int, needle: str
) -> None:
    path = write_secret(tmp_path / "token", content, mode)
    with pytest.raises(PanewardenError) as caught:
        read_token_file(str(path))
    assert needle in caught.value.message


def test_token_path_that_is_not_a_regular_file_is_refused(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo", 0o600)
    for path in (tmp_path / "fifo", tmp_path, tmp_path / "absent"):
        with pytest.raises(PanewardenError):
            read_token_file(str(path))


def test_single_token_mode_is_operator_with_every_scope(tmp_path: Path) -> None:
    token = new_token()
    path = write_secret(tmp_path / "token", token)
    table = load_client_table(_config(tmp_path, PANEWARDEN_TOKEN_FILE=str(path)))  # type: ignore[arg-type]
    caller = table.lookup(token)
    assert caller is not None
    assert caller.name == "operator"
    assert caller.scopes == SCOPES
    assert table.lookup(token + "x") is None
    assert table.lookup(token[:-1]) is None
    assert table.lookup("") is None


def test_named_clients_and_operator_share_one_table(tmp_path: Path) -> None:
    operator, reader = new_token(), new_token()
    clients = [{"name": "reader", "token_sha256": digest(reader).upper(), "scopes": ["read"]}]
    table = load_client_table(
        _config(  # type: ignore[arg-type]
            tmp_path,
            PANEWARDEN_TOKEN_FILE=str(write_secret(tmp_path / "token", operator)),
            PANEWARDEN_CLIENTS=str(write_secret(tmp_path / "c.json", json.dumps(clients))),
        )
    )
    assert table.names() == ["operator", "reader"]
    found = table.lookup(reader)
    assert found is not None
    assert found.scopes == frozenset({"read"})


def test_clients_file_alone_is_enough(tmp_path: Path) -> None:
    reader = new_token()
    clients = [{"name": "reader", "token_sha256": digest(reader), "scopes": ["read"]}]
    path = write_secret(tmp_path / "c.json", json.dumps(clients))
    table = load_client_table(_config(tmp_path, PANEWARDEN_CLIENTS=str(path)))  # type: ignore[arg-type]
    assert table.names() == ["reader"]


@pytest.mark.parametrize(
    ("entries", "needle"),
    [
        ([{"name": "a", "token_sha256": "0" * 64, "scopes": ["read"], "role": "x"}], "role"),
        ([{"name": "a", "token_sha256": "0" * 64}], "scopes"),
        ([{"name": "a", "token_sha256": "0" * 63, "scopes": ["read"]}], "64 hexadecimal"),
        ([{"name": "a", "token_sha256": "g" * 64, "scopes": ["read"]}], "64 hexadecimal"),
        ([{"name": "A b", "token_sha256": "0" * 64, "scopes": ["read"]}], "name"),
        ([{"name": "a", "token_sha256": "0" * 64, "scopes": ["root"]}], "unknown scope"),
        ([{"name": "a", "token_sha256": "0" * 64, "scopes": []}], "at least one"),
        ([{"name": "a", "token_sha256": "0" * 64, "scopes": ["read", "read"]}], "twice"),
        (
            [
                {"name": "a", "token_sha256": "0" * 64, "scopes": ["read"]},
                {"name": "a", "token_sha256": "1" * 64, "scopes": ["read"]},
            ],
            "used twice",
        ),
        (
            [
                {"name": "a", "token_sha256": "0" * 64, "scopes": ["read"]},
                {"name": "b", "token_sha256": "0" * 64, "scopes": ["read"]},
            ],
            "same token",
        ),
        ({"name": "a"}, "array"),
        ([], "no client"),
    ],
)
def test_bad_clients_files_are_refused_whole(tmp_path: Path, entries: object, needle: str) -> None:
    path = write_secret(tmp_path / "c.json", json.dumps(entries))
    message = _refusal(tmp_path, PANEWARDEN_CLIENTS=str(path))
    assert needle in message, message


def test_clients_file_must_be_0600(tmp_path: Path) -> None:
    clients = [{"name": "a", "token_sha256": "0" * 64, "scopes": ["read"]}]
    path = write_secret(tmp_path / "c.json", json.dumps(clients), 0o644)
    assert "0644" in _refusal(tmp_path, PANEWARDEN_CLIENTS=str(path))


def test_operator_name_is_reserved_when_a_token_file_is_given(tmp_path: Path) -> None:
    clients = [{"name": "operator", "token_sha256": "0" * 64, "scopes": ["read"]}]
    message = _refusal(
        tmp_path,
        PANEWARDEN_TOKEN_FILE=str(write_secret(tmp_path / "token", new_token())),
        PANEWARDEN_CLIENTS=str(write_secret(tmp_path / "c.json", json.dumps(clients))),
    )
    assert "operator" in message


def test_operator_token_reused_by_a_named_client_is_refused(tmp_path: Path) -> None:
    token = new_token()
    clients = [{"name": "twin", "token_sha256": digest(token), "scopes": ["read"]}]
    message = _refusal(
        tmp_path,
        PANEWARDEN_TOKEN_FILE=str(write_secret(tmp_path / "token", token)),
        PANEWARDEN_CLIENTS=str(write_secret(tmp_path / "c.json", json.dumps(clients))),
    )
    assert "same token" in message


def test_no_token_and_no_clients_is_refused(tmp_path: Path) -> None:
    assert "PANEWARDEN_TOKEN_FILE" in _refusal(tmp_path)


def test_audit_directory_must_exist_and_be_0700(tmp_path: Path) -> None:
    clients = write_secret(
        tmp_path / "c.json",
        json.dumps([{"name": "a", "token_sha256": "0" * 64, "scopes": ["read"]}]),
    )
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    os.chmod(open_dir, 0o755)
    for audit, needle in (
        (None, "PANEWARDEN_AUDIT_FILE"),
        (open_dir / "a.jsonl", "0755"),
        (tmp_path / "absent" / "a.jsonl", "absent"),
    ):
        env = {"PANEWARDEN_CLIENTS": str(clients)}
        if audit is not None:
            env["PANEWARDEN_AUDIT_FILE"] = str(audit)
        with pytest.raises(PanewardenError) as caught:
            check_audit_path(_config(tmp_path, **env))  # type: ignore[arg-type]
        assert needle in caught.value.message


def test_audit_records_are_content_free_private_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path)
    audit.record("alice", "send_input", "p1", "ok", None)
    audit.record("bob", "start_pane", "p2", "error", "forbidden")
    audit.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [sorted(r) for r in records] == [["client", "code", "outcome", "pane", "tool", "ts"]] * 2
    assert records[1] | {"ts": None} == {
        "ts": None,
        "client": "bob",
        "tool": "start_pane",
        "pane": "p2",
        "outcome": "error",
        "code": "forbidden",
    }
    assert records[0]["ts"].endswith("Z")


def test_audit_tightens_an_existing_file_and_appends(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text('{"old": true}\n')
    os.chmod(path, 0o644)
    audit = AuditLog(path)
    audit.record("a", "remove_pane", "p", "ok", None)
    audit.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(path.read_text().splitlines()) == 2


def test_audit_reopen_follows_a_rename(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    audit = AuditLog(path)
    audit.record("a", "start_pane", "p", "ok", None)
    rotated = tmp_path / "audit.jsonl.1"
    path.rename(rotated)
    audit.record("a", "send_input", "p", "ok", None)  # still the old file
    audit.reopen()
    audit.record("a", "remove_pane", "p", "ok", None)
    audit.close()
    assert [r["tool"] for r in map(json.loads, rotated.read_text().splitlines())] == [
        "start_pane",
        "send_input",
    ]
    assert [r["tool"] for r in map(json.loads, path.read_text().splitlines())] == ["remove_pane"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_gate_reload_keeps_old_clients_when_the_file_breaks(tmp_path: Path) -> None:
    first, second = new_token(), new_token()
    clients_path = write_secret(
        tmp_path / "c.json",
        json.dumps([{"name": "first", "token_sha256": digest(first), "scopes": ["read"]}]),
    )
    audit_dir = tmp_path / "audit"
    audit_dir.mkdir(mode=0o700)
    gate = HttpGate(
        _config(  # type: ignore[arg-type]
            tmp_path,
            PANEWARDEN_CLIENTS=str(clients_path),
            PANEWARDEN_AUDIT_FILE=str(audit_dir / "a.jsonl"),
        )
    )
    try:
        write_secret(clients_path, "[{not json")
        assert not gate.reload()
        assert gate.table.lookup(first) is not None
        write_secret(
            clients_path,
            json.dumps([{"name": "second", "token_sha256": digest(second), "scopes": ["read"]}]),
        )
        assert gate.reload()
        assert gate.table.lookup(first) is None
        assert gate.table.lookup(second) is not None
    finally:
        gate.close()


def test_client_table_needs_at_least_one_client() -> None:
    with pytest.raises(PanewardenError):
        ClientTable([])
