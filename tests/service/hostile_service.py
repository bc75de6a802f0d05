"""A hostile service on loopback for ``top`` and ``watch``: it speaks just enough MCP
(streamable HTTP, JSON answers) and serves a ``/feed``, and each of its paths lies in
its own way.

``/MODE/mcp`` answers ``list_panes`` per ``MODE``: ``good`` (one honest pane),
``escape`` (control sequences in every string), ``types`` (wrong-typed fields),
``badjson`` (an answer that is not JSON), ``huge`` (a 200 MB answer, generated as it is
sent), ``endless`` (an event stream whose one line never ends), ``toolerror`` (a tool
error whose text holds control sequences) and ``broken`` (a 500 on the call);
``wait_any`` sees no change and lasts its timeout.
``/feed?pane=MODE`` streams: ``escape`` (a status and a screen full of control
sequences, then keepalives), ``endless`` (one line that never ends) and ``badjson``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# What a terminal must never receive from a remote: OSC 52 (clipboard), OSC 0 (title),
# DCS, C1 CSI and OSC, bidi override and isolates, line and paragraph separators, BEL.
HOSTILE = (
    "\x1b]52;c;aGVsbG8=\x07\x1b]0;owned\x1b\\\x1bP+q544e\x1b\\\x9b2J\x9d0;t\x9c"
    "\u202e\u2066\u2028\u2029\x07\x08\x7f"
)
CHUNK = b"x" * 65536
HUGE_BYTES = 200 * 1000 * 1000


def _pane(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "profile": "p",
        "agent": "a",
        "lifecycle": "running",
        "state": "idle",
        "kind": None,
        "turn": 1,
        "seq": 3,
        "confined": False,
        "usage": {"cpu_percent": 1.5, "rss_bytes": 1024, "processes": 1},
    }


def _panes(mode: str) -> list[Any]:
    if mode == "escape":
        pane = _pane(f"esc{HOSTILE}name")
        for key in ("profile", "agent", "lifecycle", "state", "kind"):
            pane[key] = f"{key}{HOSTILE}"
        pane["lease"] = {"lease_type": f"lease{HOSTILE}"}
        return [pane]
    if mode == "types":
        return [
            {
                "name": ["typed"],
                "seq": "7",
                "turn": {"n": 1},
                "usage": [1, 2],
                "lease": "held",
                "started_at": 12,
                "tokens": 5,
                "confined": "yes",
                "worker_pid": "nan",
            },
            "not a pane",
        ]
    return [_pane("good-pane")]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _endless(self, kind: str, head: bytes, total: int | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        sent = 0
        try:
            self.wfile.write(head)
            while total is None or sent < total:
                self.wfile.write(CHUNK)
                sent += len(CHUNK)
            self.wfile.write(b'"}]}}')
        except OSError:
            return

    def do_GET(self) -> None:
        if self.path.startswith("/feed"):
            self._feed(self.path.partition("pane=")[2])
            return
        self._send(405, b"")

    def do_DELETE(self) -> None:
        self._send(405, b"")

    def do_POST(self) -> None:
        mode = self.path.strip("/").split("/")[0]
        size = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(size))
        method, rid = request.get("method"), request.get("id")
        if rid is None:
            self._send(202, b"")
            return
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": f"hostile{HOSTILE}", "version": "1"},
            }
        elif method == "tools/call" and request["params"].get("name") == "wait_any":
            # Nothing changes here: the wait lasts its timeout (or until the server stops).
            timeout_s = float(request["params"].get("arguments", {}).get("timeout_s", 5))
            stopping = getattr(self.server, "stopping", None)
            assert isinstance(stopping, threading.Event)
            stopping.wait(timeout_s)
            text = json.dumps({"timed_out": True})
            result = {"content": [{"type": "text", "text": text}]}
        elif method == "tools/list":
            result = {"tools": [{"name": "list_panes", "inputSchema": {"type": "object"}}]}
        elif mode == "badjson":
            self._send(200, b'{"jsonrpc": "2.0", "id": ' + str(rid).encode() + b", nope")
            return
        elif mode == "huge":
            head = (
                '{"jsonrpc":"2.0","id":' + json.dumps(rid) + ',"result":{"content":'
                '[{"type":"text","text":"'
            ).encode()
            self._endless("application/json", head, HUGE_BYTES)
            return
        elif mode == "endless":
            self._endless("text/event-stream", b"event: message\ndata: ")
            return
        elif mode == "broken":
            self._send(500, f"boom{HOSTILE}".encode())
            return
        elif mode == "toolerror":
            text = json.dumps({"code": f"bad{HOSTILE}", "message": f"no{HOSTILE}"})
            result = {"content": [{"type": "text", "text": text}], "isError": True}
        else:
            panes = _panes(mode)
            text = json.dumps({"panes": panes})
            result = {
                "content": [{"type": "text", "text": text}],
                "structuredContent": {"panes": panes},
            }
        self._send(200, json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode())

    def _feed(self, mode: str) -> None:
        if mode == "endless":
            self._endless("text/event-stream", b": feed\n\nevent: screen\ndata: ")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        if mode == "badjson":
            body = b"event: status\ndata: {nope\n\n"
        else:
            status = {
                "pane": mode,
                "state": f"idle{HOSTILE}",
                "kind": f"k{HOSTILE}",
                "turn": f"t{HOSTILE}",
                "seq": 1,
                "lifecycle": {"x": 1},
                "confined": "yes",
                "lease": {"lease_type": f"l{HOSTILE}", "lease_id": 5},
            }
            screen = {
                "pane": mode,
                "frame": 1,
                "cols": 80,
                "rows": 3,
                "cursor": [0, 0],
                "lines": [f"\x1b[31mvisible-text{HOSTILE}\x1b[0m", f"second{HOSTILE}", ""],
                "plain": False,
            }
            body = (
                f"event: status\ndata: {json.dumps(status)}\n\n"
                f"event: screen\ndata: {json.dumps(screen)}\n\n"
            ).encode()
        try:
            self.wfile.write(body)
            self.wfile.flush()
            # Held open until the viewer leaves.
            while self.rfile.read(1):
                pass
        except OSError:
            return


class HostileService:
    """The server on an ephemeral loopback port, served by a daemon thread."""

    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        self.server.stopping = threading.Event()  # type: ignore[attr-defined]
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, mode: str) -> str:
        return f"http://127.0.0.1:{self.port}/{mode}/mcp"

    def close(self) -> None:
        self.server.stopping.set()  # type: ignore[attr-defined]
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)
