"""The forwarder: a confined pane's destinations, inside its sandbox.

Run as ``python -I -S .../forwarder.py --socket SOCK [--proxy ADDR:PORT] --listen
ADDR:PORT=HOST:PORT ... -- PROGRAM ARGS...`` (argv from ``protocol.egress.forwarder_argv``;
by path and without ``site``: it imports nothing but the standard library). It binds
every listener first, so the program's first connection cannot come before them, then
forks: the child accepts on the listeners and carries each TCP connection over the Unix
socket ``SOCK`` to the worker's egress proxy (header ``CONNECT HOST:PORT`` for a
``--listen`` one; the ``--proxy`` one's bytes as they come: the program speaks HTTP to
the proxy itself); the parent execs PROGRAM, which keeps the pane's PID, terminal and
signal dispositions.

A port below 1024 (``api.anthropic.com:443``) under a root service is unprivileged in
the pane's network namespace (the worker made it so: ``confined_child``), so the
forwarder binds it with no capability. Under a non-root service it needs
``CAP_NET_BIND_SERVICE`` there: the sandbox gives the forwarder that and ``CAP_SETPCAP``
only when one is listed, and after binding it drops every capability (bounding and
ambient sets included) and sets ``no_new_privs``, and checks that it holds none, before
it forks; the program never has one.

The child is not trusted with anything (the proxy checks every destination); it only
must not outlive the program (``PR_SET_PDEATHSIG``, and the PID namespace's end) nor die
of the terminal's ^C, ^\\ and ^Z, which reach the whole foreground group. It runs at every
start of such a pane, so the path to the program's ``exec`` imports little: ``_socket``
and ``_signal``, not their wrappers (``socket``'s enums and ``threading`` were half of
its start); the child imports what it serves with.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # signal's C half: no enums to import
import _socket
import os
import sys

TYPE_CHECKING = False  # not typing's: its import is a few ms of every start
if TYPE_CHECKING:
    import socket
    import threading
    from collections.abc import Sequence

EXIT_USAGE = 64
EXIT_BIND = 70  # EX_SOFTWARE: the sandbox is not as planned (a bind, a capability left)
EXIT_EXEC = 127
CHUNK = 64 * 1024
ANSWER_LIMIT = 128
# The proxy's header and connect deadlines, and a margin.
ANSWER_TIMEOUT_S = 20.0
# Connections carried at once; more are reset (the proxy allows fewer anyway).
MAX_CONNECTIONS = 512
PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_CAP_FIELDS = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
_PREFIX = "panewarden forwarder: "
# The terminal's signals reach the whole foreground group, this child too; a hang-up
# ends the program, and the program's end ends the child (PR_SET_PDEATHSIG).
_CHILD_IGNORES = {_signal.SIGINT, _signal.SIGQUIT, _signal.SIGTSTP, _signal.SIGHUP}


class _Usage(Exception):
    pass


def parse(argv: Sequence[str]) -> tuple[str, list[tuple[str, int, str]], list[str]]:
    """(socket, [(listen address, port, "host:port", or "" for the HTTP proxy)],
    program argv)."""
    path = ""
    listens: list[tuple[str, int, str]] = []
    args = list(argv)
    while args:
        flag = args.pop(0)
        if flag == "--":
            break
        if flag not in ("--socket", "--listen", "--proxy") or not args:
            raise _Usage(f"unexpected argument {flag[:64]!r}")
        value = args.pop(0)
        if flag == "--socket":
            path = value
            continue
        if flag == "--proxy":
            address, _, port = value.rpartition(":")
            if not address or not port.isdigit():
                raise _Usage(f"--proxy wants ADDR:PORT, not {value[:64]!r}")
            listens.append((address, int(port), ""))
            continue
        inside, sep, target = value.partition("=")
        address, _, port = inside.rpartition(":")
        if not sep or not address or not port.isdigit() or ":" not in target:
            raise _Usage(f"--listen wants ADDR:PORT=HOST:PORT, not {value[:64]!r}")
        listens.append((address, int(port), target))
    else:
        raise _Usage("no program after --")
    if not path or not args:
        raise _Usage("--socket and a program after -- are required")
    return path, listens, args


def main(argv: Sequence[str]) -> int:
    try:
        path, listens, program = parse(argv)
    except _Usage as exc:
        print(_PREFIX + str(exc), file=sys.stderr)
        return EXIT_USAGE
    listeners: list[tuple[_socket.socket, str]] = []
    for address, port, target in listens:
        try:
            listeners.append((_bind(address, port), target))
        except OSError as exc:
            print(f"{_PREFIX}cannot listen on {address}:{port}: {exc.strerror}", file=sys.stderr)
            return EXIT_BIND
    left = _drop_capabilities()
    if left:
        print(f"{_PREFIX}cannot drop its capabilities: {left}", file=sys.stderr)
        return EXIT_BIND
    if listeners:
        # Blocked across the fork, so a ^C at that moment cannot kill the child before
        # it ignores them; the program gets the mask it was given.
        mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, _CHILD_IGNORES)
        if os.fork() == 0:
            try:
                _child(path, listeners, mask)
            finally:
                os._exit(0)
        _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
    for sock, _ in listeners:
        sock.close()
    try:
        os.execvp(program[0], program)
    except OSError as exc:
        print(f"{_PREFIX}cannot run {program[0][:64]!r}: {exc.strerror}", file=sys.stderr)
    return EXIT_EXEC


def _bind(address: str, port: int) -> _socket.socket:
    sock = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def _capabilities() -> dict[str, int]:
    """This process's capability sets and ``NoNewPrivs``, from ``/proc/self/status``."""
    with open("/proc/self/status") as status:
        fields = dict(line.split(":", 1) for line in status if ":" in line)
    names = (*_CAP_FIELDS, "NoNewPrivs")
    return {name: int(fields.get(name, "0").strip() or "0", 16) for name in names}


def _drop_capabilities() -> str:
    """Drop every capability this process holds (the sandbox gave it some only to bind
    a port below 1024) and set ``no_new_privs``; what is left (empty: nothing)."""
    held = _capabilities()
    if held.pop("NoNewPrivs") and not any(held.values()):
        return ""  # as bwrap left it without --cap-add: nothing to drop (ctypes unneeded)
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    # The bounding set first: dropping it needs CAP_SETPCAP, which capset removes.
    with open("/proc/sys/kernel/cap_last_cap") as last:
        top = int(last.read())
    for cap in range(top + 1):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable; twice
    libc.capset(header, data)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    after = _capabilities()
    left = {name: value for name, value in after.items() if value and name != "NoNewPrivs"}
    if not after["NoNewPrivs"]:
        left["NoNewPrivs"] = 0
    return ", ".join(f"{name} {value:x}" for name, value in left.items())


def _serving_imports() -> None:
    """The modules only the serving child needs, bound as this module's names."""
    global socket, threading
    import socket
    import threading


def _child(path: str, raw: list[tuple[_socket.socket, str]], mask: set[int]) -> None:
    for sig in _CHILD_IGNORES:
        _signal.signal(sig, _signal.SIG_IGN)
    _signal.pthread_sigmask(_signal.SIG_SETMASK, mask)
    parent = os.getppid()
    _die_with_parent()
    if os.getppid() != parent:  # it ended before the prctl took effect
        return
    # Nothing of ours may reach the pane's terminal, nor keep it open.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    import selectors

    _serving_imports()
    listeners = [(socket.socket(fileno=sock.detach()), target) for sock, target in raw]

    slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
    with selectors.DefaultSelector() as selector:
        for sock, target in listeners:
            selector.register(sock, selectors.EVENT_READ, target)
        while True:
            for key, _ in selector.select():
                listener = key.fileobj
                assert isinstance(listener, socket.socket)
                try:
                    conn, _ = listener.accept()
                except OSError:
                    continue
                if not slots.acquire(blocking=False):
                    _reset(conn)
                    continue
                threading.Thread(
                    target=_carry, args=(conn, path, key.data, slots), daemon=True
                ).start()


def _die_with_parent() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, _signal.SIGKILL, 0, 0, 0)


def _carry(conn: socket.socket, path: str, target: str, slots: threading.BoundedSemaphore) -> None:
    """One TCP connection: through the proxy to ``target``, or reset if refused; the
    HTTP proxy's (``target`` empty) as it comes (the proxy answers the program)."""
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.settimeout(ANSWER_TIMEOUT_S)
        upstream.connect(path)
        if target:
            upstream.sendall(f"CONNECT {target}\n".encode())
            if _answer(upstream) != b"OK":
                _reset(conn)
                return
        upstream.settimeout(None)
        other = threading.Thread(target=_pump, args=(upstream, conn), daemon=True)
        other.start()
        _pump(conn, upstream)
        other.join()
    except OSError:
        _reset(conn)
    finally:
        upstream.close()
        conn.close()
        slots.release()


def _answer(sock: socket.socket) -> bytes:
    """The proxy's answer line, read a byte at a time: what follows it is the stream."""
    line = b""
    while not line.endswith(b"\n") and len(line) < ANSWER_LIMIT:
        byte = sock.recv(1)
        if not byte:
            break
        line += byte
    return line.rstrip(b"\n")


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy until ``src`` ends, then half-close ``dst``; on an error end both."""
    try:
        while data := src.recv(CHUNK):
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        for sock in (src, dst):
            try:  # noqa: SIM105 (contextlib is not imported: the start waits for imports)
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _reset(conn: socket.socket) -> None:
    """Close with a reset: the program sees a failed connection, not an empty reply."""
    try:  # noqa: SIM105 (no contextlib: the program's start waits for every import)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    except OSError:
        pass
    conn.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
