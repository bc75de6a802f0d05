"""``panewarden ctl``: coordination commands for an agent that runs inside a pane.

The client sends one request over the service's ctl socket (``$PANEWARDEN_CTL_SOCKET``,
else the path in ``$STATE/run/ctl``) and prints the answer: readable text, or with
``--json`` the result as one JSON line. It holds no credential: the service attests
the calling pane from its process ancestry, and the controller lease is held by that
pane, so no fence token is ever printed, stored or sent.

Exit status: 0 ok; 1 the operation failed (the service refused: its error code and
message are printed; or a handoff did not complete); 2 usage or configuration error
(bad flags, no socket).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from protocol.safe_files import FileReadError, read_regular_file
from supervisor.exit_codes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from supervisor.front.ctl.wire import (
    CTL_SOCKET_VARIABLE,
    MAX_REQUEST_BYTES,
    MAX_RESPONSE_BYTES,
)

DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 3600.0
# Beyond a handoff's own wait: time for the service to deliver, capture and answer.
ANSWER_SLACK_S = 30.0
WAITING_COMMANDS = frozenset({"ask", "ask-many", "collect"})
RECORD_LIMIT_BYTES = 4096
# The client's own failure code when the exchange broke (the service's codes are
# docs/operations.md "Error codes"; `timeout` is shared).
CONNECTION_FAILED = "connection_failed"


class CtlUsageError(Exception):
    """A configuration problem on the client's side (exit status 2)."""


class CtlFailed(Exception):
    """The exchange failed without an answer from the service (exit status 1):
    ``timeout`` (no answer in time) or ``connection_failed``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# ---------------------------------------------------------------- arguments


def _timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= MAX_TIMEOUT_S:  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be a number of seconds in (0, {MAX_TIMEOUT_S:g}]")
    return value


def _request(text: str) -> tuple[str, str]:
    name, sep, message = text.partition("=")
    if not sep or not name or not message:
        raise argparse.ArgumentTypeError("must be NAME=MESSAGE")
    return name, message


def _common(parser: argparse.ArgumentParser, *, nested: bool) -> None:
    # On `ctl` and on each command, so they may come before or after the command name;
    # the command's copy leaves the value alone unless it is given there.
    default: Any = argparse.SUPPRESS if nested else None
    parser.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS if nested else False,
        help="print the result as one JSON line",
    )
    parser.add_argument(
        "--timeout-s",
        type=_timeout,
        default=default,
        metavar="N",
        help="ask/ask-many/collect: how long to wait for the turns (default 60); other "
        "commands: how long to wait for the service's answer (default 60)",
    )


def add_ctl_parser(sub: Any) -> None:
    """Add ``ctl`` and its commands to the ``panewarden`` subcommands."""
    ctl = sub.add_parser(
        "ctl",
        help="coordination commands for an agent inside a pane (over the ctl socket)",
        description="Coordination commands for an agent inside a pane; the service "
        "attests the calling pane, which holds the controller lease.",
    )
    _common(ctl, nested=False)
    commands = ctl.add_subparsers(dest="ctl_command", required=True, metavar="COMMAND")

    def command(name: str, help_text: str, *, held: bool = True) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = commands.add_parser(name, help=help_text)
        _common(parser, nested=True)
        if held:
            parser.add_argument(
                "--controller-id",
                help="the controller whose lease this pane holds (default: the one it holds)",
            )
        return parser

    for name, what in (("acquire", "acquire"), ("resume", "rotate (same pane)")):
        p = command(name, f"{what} a controller lease held by this pane", held=False)
        p.add_argument("--controller-id", required=True)
        p.add_argument("--authority-ref", required=True)
        p.add_argument("--authority-sha256", required=True)
        p.add_argument("--ttl-s", type=int)
    command("renew", "extend this pane's controller lease").add_argument("--ttl-s", type=int)
    p = command("release", "end this pane's controller lease with a checkpoint")
    p.add_argument("--checkpoint-ref", required=True)
    p.add_argument("--checkpoint-sha256", required=True)
    command("status", "this pane's controller lease, outstanding receipts and reviewers")
    command("receipts", "every receipt of this pane's controller")
    p = command("ask", "hand MESSAGE to leased pane NAME and wait for that turn's result")
    p.add_argument("name", metavar="NAME")
    p.add_argument("message", nargs="+", metavar="MESSAGE")
    p.add_argument("--lines", type=int, help="lines of output to return (default 200)")
    p = command("ask-many", "hand messages to up to 8 leased panes at once")
    p.add_argument(
        "--request", type=_request, action="append", required=True, metavar="NAME=MESSAGE"
    )
    p.add_argument("--mode", choices=("all", "first"), required=True)
    p.add_argument("--lines", type=int)
    p = command("collect", "collect receipts: each one's turn status and output")
    p.add_argument("--receipt", action="append", required=True, metavar="T")
    p.add_argument("--mode", choices=("all", "first"), default="all")
    p.add_argument("--lines", type=int)
    p = command("abandon", "release an outstanding receipt once its pane is settled")
    p.add_argument("--receipt", required=True, metavar="T")
    p = command("reviewer-start", "start a reviewer pane under this pane's controller lease")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--profile", required=True)
    p.add_argument("--cwd", required=True, help="the reviewer's directory (relative to here)")
    p.add_argument("--purpose", required=True)
    p.add_argument("--model")
    p.add_argument("--effort")
    p = command("reviewer-close", "capture and close a reviewer pane at an expected seq")
    p.add_argument("--lease-id", required=True)
    p.add_argument("--expected-seq", type=int, required=True)


def request_of(args: argparse.Namespace) -> dict[str, Any]:
    """The request line's object for the parsed command."""
    op: str = args.ctl_command
    fields: dict[str, Any] = {}
    if op in ("acquire", "resume"):
        fields = {
            "controller_id": args.controller_id,
            "authority_ref": args.authority_ref,
            "authority_sha256": args.authority_sha256,
            "ttl_s": args.ttl_s,
        }
    elif op == "renew":
        fields = {"ttl_s": args.ttl_s}
    elif op == "release":
        fields = {
            "checkpoint_ref": args.checkpoint_ref,
            "checkpoint_sha256": args.checkpoint_sha256,
        }
    elif op == "ask":
        fields = {"name": args.name, "text": " ".join(args.message), "lines": args.lines}
    elif op == "ask-many":
        fields = {
            "requests": [{"name": n, "text": t} for n, t in args.request],
            "mode": args.mode,
            "lines": args.lines,
        }
    elif op == "collect":
        fields = {"receipts": args.receipt, "mode": args.mode, "lines": args.lines}
    elif op == "abandon":
        fields = {"receipt": args.receipt}
    elif op == "reviewer-start":
        fields = {
            "name": args.name,
            "profile": args.profile,
            # Relative to where ctl runs (the service takes absolute paths only).
            "cwd": os.path.abspath(args.cwd),
            "purpose": args.purpose,
            "model": args.model,
            "effort": args.effort,
        }
    elif op == "reviewer-close":
        fields = {"lease_id": args.lease_id, "expected_seq": args.expected_seq}
    if op in WAITING_COMMANDS and args.timeout_s is not None:
        fields["timeout_s"] = args.timeout_s
    if op not in ("acquire", "resume") and args.controller_id is not None:
        fields["controller_id"] = args.controller_id
    return {"op": op, "args": {k: v for k, v in fields.items() if v is not None}}


# ---------------------------------------------------------------- the exchange


def socket_path(environ: Mapping[str, str], state_dir: Path) -> Path:
    """The ctl socket: ``$PANEWARDEN_CTL_SOCKET``, else the one ``$STATE/run/ctl`` names."""
    named = environ.get(CTL_SOCKET_VARIABLE)
    if named:
        return Path(named)
    record = state_dir / "run" / "ctl"
    try:
        text = read_regular_file(record, limit_bytes=RECORD_LIMIT_BYTES).decode().strip()
    except (FileReadError, UnicodeDecodeError):
        raise CtlUsageError(
            f"{CTL_SOCKET_VARIABLE} is not set and no service records a ctl socket in "
            f"{record} (is `panewarden serve` running for this state dir?)"
        ) from None
    if not text:
        raise CtlUsageError(f"{record} names no socket")
    return Path(text)


def exchange(path: Path, request: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
    """Send one request and read its one response line, all within ``timeout_s``."""
    line = json.dumps(request, separators=(",", ":")).encode() + b"\n"
    if len(line) > MAX_REQUEST_BYTES:
        raise CtlUsageError(f"the request is larger than {MAX_REQUEST_BYTES} bytes")
    deadline = time.monotonic() + timeout_s
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError, PermissionError, NotADirectoryError):
            raise CtlUsageError(f"no service listens on the ctl socket {path}") from None
        except OSError as exc:
            raise CtlUsageError(f"cannot reach the ctl socket {path}: {exc.strerror}") from None
        try:
            # A connection beyond the service's bounds is answered (ctl_busy) and closed
            # at once, maybe before the request went out: that answer is still read.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(line)
            return _parse(_read_line(sock, deadline))
        except TimeoutError:
            why = f"the service did not answer within {timeout_s:g}s"
            raise CtlFailed("timeout", why) from None
        except OSError as exc:
            why = f"the connection failed: {exc.strerror or exc}"
            raise CtlFailed(CONNECTION_FAILED, why) from None


def _read_line(sock: socket.socket, deadline: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        sock.settimeout(remaining)
        chunk = sock.recv(65536)
        if not chunk:
            raise CtlFailed(CONNECTION_FAILED, "the service hung up without an answer")
        newline = chunk.find(b"\n")
        if newline >= 0:
            chunks.append(chunk[:newline])
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_RESPONSE_BYTES:
            why = f"the answer is larger than {MAX_RESPONSE_BYTES} bytes"
            raise CtlFailed(CONNECTION_FAILED, why)


def _parse(line: bytes) -> dict[str, Any]:
    try:
        body = json.loads(line)
    except ValueError:
        raise CtlFailed(CONNECTION_FAILED, "the service's answer is not JSON") from None
    if not isinstance(body, dict) or not isinstance(body.get("ok"), bool):
        raise CtlFailed(CONNECTION_FAILED, "the service's answer has no `ok`")
    return body


# ---------------------------------------------------------------- output


def completed_enough(op: str, mode: str, result: Mapping[str, Any]) -> bool:
    """A waiting command succeeded: every turn completed (mode all) or one did (first)."""
    completed = result.get("completed") or []
    if mode == "first" and op != "ask":
        return bool(completed)
    return bool(completed) and not result.get("failed") and not result.get("pending")


def _lease_text(lease: Mapping[str, Any]) -> str:
    return (
        f"controller {lease['controller_id']}: {lease['state']}, generation "
        f"{lease['generation']}, lease {lease['lease_id']}, expires {lease['expires_at']}"
    )


def _pane_lease_text(lease: Mapping[str, Any]) -> str:
    return f"{lease['lease_type']} {lease['name']}: {lease['state']}, lease {lease['lease_id']}" + (
        f", closed at seq {lease['closed_seq']}" if lease.get("closed_seq") is not None else ""
    )


def _receipt_text(r: Mapping[str, Any]) -> str:
    result = f", result {r['result_state']}" if r.get("result_state") else ""
    failure = f", {r['failure_stage']}: {r['failure_code']}" if r.get("failure_code") else ""
    turn = f", turn {r['turn']}" if r.get("turn") is not None else ""
    return f"{r['receipt']}  {r['name']}: {r['state']}{turn}{result}{failure}"


def _outcome_text(result: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    for item in result.get("completed", []):
        status = item["status"]
        lines.append(
            f"== {item['name']} receipt {item['receipt']}: {status['state']} "
            f"(turn {status['turn']}, seq {status['seq']})"
        )
        output = item.get("output")
        lines.append(output.rstrip("\n") if output is not None else "(output no longer on screen)")
    for item in result.get("failed", []):
        lines.append(
            f"== {item['name']} receipt {item['receipt']}: failed at {item['stage']}: "
            f"{item['code']}"
        )
    for receipt in result.get("pending", []):
        lines.append(f"== receipt {receipt}: pending (panewarden ctl collect --receipt {receipt})")
    return lines


def format_text(op: str, result: Mapping[str, Any]) -> str:
    """The readable form of a command's result."""
    if op in ("acquire", "resume", "renew", "release"):
        return _lease_text(result)
    if op == "status":
        lines = [f"pane {result['pane']} ({result['identity']})"]
        controller = result.get("controller")
        lines.append(_lease_text(controller) if controller else "no controller lease")
        receipts = result.get("receipts") or []
        lines.append(f"outstanding receipts: {len(receipts)}")
        lines += [f"  {_receipt_text(r)}" for r in receipts]
        reviewers = result.get("reviewers") or []
        lines.append(f"reviewers: {len(reviewers)}")
        lines += [f"  {_pane_lease_text(lease)}" for lease in reviewers]
        return "\n".join(lines)
    if op == "receipts":
        receipts = result.get("receipts") or []
        return "\n".join(_receipt_text(r) for r in receipts) if receipts else "no receipts"
    if op in WAITING_COMMANDS:
        return "\n".join(_outcome_text(result))
    if op == "abandon":
        return _receipt_text(result)
    return _pane_lease_text(result)


def _emit_error(as_json: bool, code: str, message: str) -> None:
    if as_json:
        print(json.dumps({"error": {"code": code, "message": message}}))
    print(f"panewarden ctl: {code}: {message}", file=sys.stderr)


def ctl_command(args: argparse.Namespace, environ: Mapping[str, str], state_dir: Path) -> int:
    """Run one ``panewarden ctl`` command; returns the exit status."""
    op: str = args.ctl_command
    as_json: bool = args.json
    waits = op in WAITING_COMMANDS
    timeout_s: float = args.timeout_s if args.timeout_s is not None else DEFAULT_TIMEOUT_S
    try:
        path = socket_path(environ, state_dir)
        body = exchange(path, request_of(args), timeout_s + ANSWER_SLACK_S if waits else timeout_s)
    except CtlUsageError as exc:
        print(f"panewarden ctl: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CtlFailed as exc:
        _emit_error(as_json, exc.code, str(exc))
        return EXIT_FAILED
    if not body["ok"]:
        error = body.get("error") or {}
        _emit_error(as_json, str(error.get("code")), str(error.get("message")))
        return EXIT_FAILED
    result = body.get("result") or {}
    print(json.dumps(result) if as_json else format_text(op, result))
    if waits and not completed_enough(op, getattr(args, "mode", "all"), result):
        return EXIT_FAILED
    return EXIT_OK
