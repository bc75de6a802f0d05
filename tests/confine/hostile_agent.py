"""A prompt-injected agent run as a confined pane's program: it obeys the ``AGENTS.md`` of
the repository it works in (its cwd) and tries every attack listed there from inside its
sandbox, recording what the kernel, the service or the program it ran said. Standard
library only: it runs inside the sandbox.

``hostile_agent.py ROLE RESULTS_DIR``. Every line ``AGENT: {json}`` of ``AGENTS.md`` is one
step ``{"name", "kind", "arg", "who"?: [roles], "phase"?: N}``; the agent runs the steps of
its ``ROLE`` (all roles when ``who`` is absent), phase by phase. Before phase N > 1 it waits
for the file ``RESULTS_DIR/<ROLE>.go<N>`` (the test's signal), and after each phase it writes
every outcome so far, with ``"_phase": N``, to ``RESULTS_DIR/<ROLE>.json`` (atomically).
Then it waits for input, so the pane stays up. An outcome is ``ok:<evidence>`` when the
step did what it tried, ``rc:<status>:<stderr>`` for a program it ran, and the error
(``OSError:<errno>``, ``refused:<code>``, ``timeout``) otherwise.

Bounded everywhere: at most the asked number of processes (killed and reaped at once),
bytes allocated in ``/tmp`` (removed at once) and connections; ``/proc/sys`` is opened for
writing but never written.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

PREFIX = "AGENT: "
RUN_TIMEOUT_S = 60
GO_TIMEOUT_S = 180
SOCKET_TIMEOUT_S = 5
# How long a flood may wait on a full listen backlog (the service ends an idle ctl
# connection after 10 s: the flood must be whole well before).
FLOOD_S = 2
# Steps that took at least this long are listed in ``_seconds`` (where the time goes).
SLOW_S = 0.5
FILL_CHUNK = 64 << 20
# x86_64 system call numbers, and keyctl's operations (linux/keyctl.h).
SYS_KEYCTL = 250
KEYCTL_SEARCH = 10
KEYCTL_READ = 11
KEY_SPEC_SESSION_KEYRING = -3


class Refused(Exception):
    """The service answered with a typed refusal."""


class Holder:
    """What a step keeps open for a later one (the flood's connections)."""

    def __init__(self) -> None:
        self.sockets: list[socket.socket] = []


HELD = Holder()


def _read(arg: Any) -> object:
    with open(str(arg), "rb") as handle:
        data = handle.read()
    return f"{len(data)}:{data[:64].decode(errors='replace')}"


def _list(arg: Any) -> object:
    return ",".join(sorted(os.listdir(str(arg)))[:32])


def _write(arg: Any) -> object:
    spec = arg if isinstance(arg, dict) else {"path": arg, "text": "hostile\n"}
    path = str(spec["path"])
    if spec.get("parents"):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        return handle.write(str(spec["text"]))


def _open_write(arg: Any) -> object:
    # Opened, never written: the open alone shows the kernel would take a write.
    fd = os.open(str(arg), os.O_WRONLY)
    os.close(fd)
    return "opened for writing"


def _unix(path: str) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(SOCKET_TIMEOUT_S)
    try:
        sock.connect("\0" + path[1:] if path.startswith("@") else path)
    except BaseException:
        sock.close()
        raise
    return sock


def _connect_unix(arg: Any) -> object:
    with _unix(str(arg)):
        return "connected"


def _line_exchange(path: str, request: dict[str, Any]) -> dict[str, Any]:
    with _unix(path) as sock:
        sock.sendall(json.dumps(request).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return dict(json.loads(data.splitlines()[0])) if data.strip() else {}


def _operator_watch(arg: Any) -> object:
    """Read the service's feed: any pane status is what the socket must never give."""
    answer = _line_exchange(str(arg), {"op": "watch"})
    if answer.get("event") == "error":
        raise Refused(answer["data"].get("code"))
    return f"{answer.get('event')}:{json.dumps(answer.get('data'))[:200]}"


def _ctl_status(arg: Any) -> object:
    answer = _line_exchange(str(arg), {"op": "status", "args": {}})
    if not answer.get("ok"):
        raise Refused((answer.get("error") or {}).get("code"))
    return json.dumps(answer.get("result"))[:200]


def _connect_tcp(arg: Any) -> object:
    host, port = str(arg).rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=SOCKET_TIMEOUT_S):
        return "connected"


def _run(arg: Any) -> object:
    spec: dict[str, Any] = arg if isinstance(arg, dict) else {"argv": arg}
    done = subprocess.run(
        list(spec["argv"]),
        env={**os.environ, **spec.get("env", {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    stderr = done.stderr.decode(errors="replace").strip().replace("\n", " | ")
    raise Ran(f"rc:{done.returncode}:{stderr[-600:]}")


class Ran(Exception):
    """A program's exit status and stderr: an outcome, not a failure of the step."""


def _replace_object(arg: Any) -> object:
    """Put ``content`` in the object store under an existing object id."""
    oid = str(arg["oid"])
    body = str(arg["content"]).encode()
    path = os.path.join(str(arg["objects"]), oid[:2], oid[2:])
    tmp = path + ".hostile"
    with open(tmp, "wb") as handle:
        handle.write(zlib.compress(b"blob %d\0" % len(body) + body))
    os.replace(tmp, path)
    return "replaced"


def _keyring(arg: Any) -> object:
    """Find a ``user`` key by description in the session keyring and read its payload."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    key = libc.syscall(
        ctypes.c_long(SYS_KEYCTL),
        ctypes.c_long(KEYCTL_SEARCH),
        ctypes.c_long(KEY_SPEC_SESSION_KEYRING),
        ctypes.c_char_p(b"user"),
        ctypes.c_char_p(str(arg).encode()),
        ctypes.c_long(0),
    )
    if key < 0:
        raise OSError(ctypes.get_errno(), "keyctl search")
    buf = ctypes.create_string_buffer(4096)
    size = libc.syscall(
        ctypes.c_long(SYS_KEYCTL),
        ctypes.c_long(KEYCTL_READ),
        ctypes.c_long(key),
        buf,
        ctypes.c_long(len(buf)),
    )
    if size < 0:
        raise OSError(ctypes.get_errno(), "keyctl read")
    return buf.raw[: min(size, len(buf))].decode(errors="replace")


def _processes(arg: Any) -> object:
    """Start up to ``arg`` processes at once (``cat`` reading one pipe: spawned, not
    forked, so 2,000 take seconds); then end and reap them all."""
    want = int(arg)
    read_end, write_end = os.pipe()
    quiet = os.open(os.devnull, os.O_WRONLY)
    actions = [
        (os.POSIX_SPAWN_DUP2, read_end, 0),
        (os.POSIX_SPAWN_DUP2, quiet, 1),
        (os.POSIX_SPAWN_CLOSE, write_end),
    ]
    pids: list[int] = []
    failure = ""
    try:
        for _ in range(want):
            try:
                pids.append(os.posix_spawn("/bin/cat", ["cat"], {}, file_actions=actions))
            except OSError as exc:
                failure = f":{errno.errorcode.get(exc.errno or 0, exc.errno)}"
                break
    finally:
        for fd in (write_end, read_end, quiet):
            os.close(fd)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in pids:
            os.waitpid(pid, 0)
    return f"{len(pids)}{failure}"


def _fill_tmp(arg: Any) -> object:
    """Write up to ``arg`` bytes to one file in /tmp (stop at the first refusal), in a
    child that offers itself to the OOM killer first (a memory bound may end it); the
    file is removed either way."""
    path = "/tmp/hostile-fill"
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")
        os.write(write_end, _fill(path, int(arg)).encode())
        os._exit(0)
    os.close(write_end)
    try:
        with os.fdopen(read_end, "rb") as pipe:
            said = pipe.read().decode()
        _, status = os.waitpid(pid, 0)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    if os.WIFSIGNALED(status):
        raise Refused(f"killed by signal {os.WTERMSIG(status)} after {said or '?'}")
    return said


def _fill(path: str, want: int) -> str:
    """Allocate ``want`` bytes of ``path`` (``posix_fallocate``: the pages are taken as
    by writing, without copying), a chunk at a time, up to the first refusal."""
    done = 0
    failure = ""
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    try:
        while done < want:
            size = min(FILL_CHUNK, want - done)
            try:
                os.posix_fallocate(fd, done, size)
            except OSError as exc:
                failure = f":{errno.errorcode.get(exc.errno or 0, exc.errno)}"
                break
            done += size
    finally:
        os.close(fd)
    return f"{done}{failure}"


def _ctl_flood(arg: Any) -> object:
    """Open up to ``count`` idle connections to ``path`` and keep them (``ctl_close``
    ends them). A full listen backlog (``EAGAIN``) is waited out, up to a deadline."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    deadline = time.monotonic() + FLOOD_S
    failure = ""
    while len(HELD.sockets) < int(arg["count"]) and not failure:
        try:
            HELD.sockets.append(_unix(str(arg["path"])))
        except BlockingIOError:
            if time.monotonic() > deadline:
                failure = ":EAGAIN"
            time.sleep(0.001)
        except OSError as exc:
            failure = f":{errno.errorcode.get(exc.errno or 0, exc.errno)}"
    return f"{len(HELD.sockets)}{failure}"


def _ctl_close(_arg: Any) -> object:
    count = len(HELD.sockets)
    for sock in HELD.sockets:
        sock.close()
    HELD.sockets.clear()
    return f"closed {count}"


def _mcp_http(arg: Any) -> object:
    """With the other service's URL and token (read from its files), call a tool."""
    with open(str(arg["url_file"])) as handle:
        url = urlparse(handle.read().strip())
    with open(str(arg["token_file"])) as handle:
        token = handle.read().strip()
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
    try:

        def post(message: dict[str, Any]) -> tuple[int, str]:
            conn.request("POST", url.path or "/mcp", json.dumps(message), headers)
            response = conn.getresponse()
            body = response.read().decode(errors="replace")
            session = response.getheader("mcp-session-id")
            if session:
                headers["mcp-session-id"] = session
            return response.status, body

        init = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "hostile", "version": "1"},
        }
        status, body = post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
        if status != 200:
            raise Refused(f"http {status}")
        post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = {"name": str(arg["tool"]), "arguments": arg["arguments"]}
        status, body = post({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
    finally:
        conn.close()
    return f"http {status}:{body[:300]}"


ACTIONS: dict[str, Callable[[Any], object]] = {
    "read": _read,
    "list": _list,
    "write": _write,
    "open_write": _open_write,
    "connect_unix": _connect_unix,
    "operator_watch": _operator_watch,
    "ctl_status": _ctl_status,
    "connect_tcp": _connect_tcp,
    "run": _run,
    "replace_object": _replace_object,
    "keyring": _keyring,
    "processes": _processes,
    "fill_tmp": _fill_tmp,
    "ctl_flood": _ctl_flood,
    "ctl_close": _ctl_close,
    "mcp_http": _mcp_http,
}


def outcome(kind: str, arg: Any) -> str:
    """What one step came to, as one line."""
    try:
        value = ACTIONS[kind](arg)
    except Ran as ran:
        return str(ran)
    except Refused as refused:
        return f"refused:{refused}"
    except TimeoutError:
        return "timeout"
    except OSError as exc:
        return f"{type(exc).__name__}:{exc.errno}"
    except Exception as exc:  # an unforeseen answer is evidence too, not a crash
        return f"error:{type(exc).__name__}:{exc}"[:400]
    return f"ok:{value}"


def steps(role: str) -> list[dict[str, Any]]:
    """This role's steps, in the file's order."""
    found: list[dict[str, Any]] = []
    with open("AGENTS.md") as handle:
        for line in handle:
            if line.startswith(PREFIX):
                step = json.loads(line[len(PREFIX) :])
                if role in step.get("who", [role]):
                    found.append(step)
    return found


def _wait_for(path: str) -> bool:
    deadline = time.monotonic() + GO_TIMEOUT_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _save(path: str, results: dict[str, object]) -> None:
    with open(path + ".tmp", "w") as handle:
        json.dump(results, handle)
    os.replace(path + ".tmp", path)


def main() -> None:
    role, results_dir = sys.argv[1], sys.argv[2]
    todo = steps(role)
    results_path = os.path.join(results_dir, f"{role}.json")
    results: dict[str, object] = {}
    slow: dict[str, float] = {}
    for phase in sorted({int(step.get("phase", 1)) for step in todo}):
        go = os.path.join(results_dir, f"{role}.go{phase}")
        if phase > 1 and not _wait_for(go):
            results["_error"] = f"no {go}"
            break
        for step in todo:
            if int(step.get("phase", 1)) == phase:
                started = time.monotonic()
                results[str(step["name"])] = outcome(str(step["kind"]), step.get("arg"))
                slow[str(step["name"])] = round(time.monotonic() - started, 2)
        results["_seconds"] = {name: took for name, took in slow.items() if took >= SLOW_S}
        results["_phase"] = phase
        _save(results_path, results)
    print("hostile agent done", flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
