"""The worker's egress proxy: the only way out of a confined pane's network.

A sandbox with a ``network`` list (the default, ``["public"]``) has no network but its
own loopback; its forwarder carries each connection over the Unix socket
``PaneLaunch.egress_socket`` (bound into the sandbox) to this proxy, which runs in the
worker, outside. A connection starts with one of:

- one line ``CONNECT host:port\\n`` (a per-destination listener's): answered ``OK\\n``
  or ``NO <reason>\\n``;
- an HTTP/1.x request head (the inside HTTP proxy's, with ``"public"``): ``CONNECT
  host:port HTTP/1.1`` answered ``200`` or an error status, or an absolute-URI request
  (``GET http://host/path HTTP/1.1``), sent on in origin form with ``Connection: close``.

Then bytes are copied both ways until both sides have closed. A destination on the
pane's list is connected as listed (the operator's choice: loopback included); any
other only with ``"public"`` and only to an address ``addresses.refusal`` accepts: the
name is resolved once, here, and the connection goes to that exact address (DNS
rebinding cannot swap it). The program inside can talk to the socket itself, so every
check is here and nothing the forwarder does is relied on.

It runs in one daemon thread with an asyncio loop of its own (the worker's main loop is
a select loop that must not wait on network peers), started by ``start`` after the
worker has forked its program (no thread may run at that fork). Everything is bounded:
the header (``HEADER_LIMIT`` bytes within ``HEADER_TIMEOUT_S``), the connect
(``CONNECT_TIMEOUT_S``), the connections at once (``MAX_CONNECTIONS``) and the bytes
held per direction (``CHUNK``: a chunk is sent whole before the next is read, so a slow
reader stops the writer instead of filling memory).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from paneworker.confine.addresses import own_addresses, refusal
from protocol.boot import PaneLaunch
from protocol.egress import Destination, parse_destination

log = logging.getLogger(__name__)

# One line, or an HTTP request head (its request line and headers).
HEADER_LIMIT = 16 * 1024
HEADER_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 256
CHUNK = 64 * 1024
STOP_TIMEOUT_S = 5.0
ACCEPT_BATCH = 64
LABEL_LIMIT = 64
# A program inside can get itself refused in a loop: warnings beyond this many per window
# are counted, and the count is logged with the first refusal after the window.
WARNINGS_PER_WINDOW = 20
WARNING_WINDOW_S = 10.0
_CONNECT = b"CONNECT "
NOT_PUBLIC = "not a public address"
# Hop-by-hop headers of an absolute-URI request, not sent on (the proxy closes after
# one exchange: ``Connection: close``).
_HOP_HEADERS = frozenset({"proxy-connection", "proxy-authorization", "connection", "keep-alive"})
# The HTTP status a refusal is answered with on the inside HTTP proxy (else 502).
_HTTP_STATUS = {
    "not allowed": (403, "Forbidden"),
    NOT_PUBLIC: (403, "Forbidden"),
    "bad header": (400, "Bad Request"),
    "bad destination": (400, "Bad Request"),
    "header too long": (431, "Request Header Fields Too Large"),
    "header timeout": (408, "Request Timeout"),
    "connect timeout": (504, "Gateway Timeout"),
}


class _Refused(Exception):
    """A connection the proxy refuses (the reason is the message); ``http``: its client
    had started an HTTP request, so it is answered in HTTP."""

    def __init__(self, reason: str, *, http: bool = False) -> None:
        super().__init__(reason)
        self.http = http


@dataclass(frozen=True)
class _Request:
    """What a connection asked for: where, what its client is told once connected, and
    what goes upstream first."""

    host: str
    port: int
    ok: bytes
    forward: bytes


def start_egress(launch: PaneLaunch) -> EgressProxy | None:
    """The proxy for ``launch``'s destinations, its socket listening before this returns
    (its thread is started by ``EgressProxy.start``); None when the pane has no
    ``network`` list. Raises OSError when the socket cannot be bound."""
    if not launch.egress and not launch.egress_public:
        return None
    return EgressProxy(
        launch.egress, launch.egress_socket, pane=launch.pane, public=launch.egress_public
    )


class EgressProxy:
    """One pane's proxy; see the module docstring. ``public``: the list holds
    ``"public"``. ``resolve`` fixes names to addresses instead of asking DNS (tests: there
    is no DNS on the test machines)."""

    def __init__(
        self,
        destinations: list[Destination],
        socket_path: str,
        *,
        pane: str = "",
        public: bool = False,
        resolve: Mapping[str, str] | None = None,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        self._allowed = frozenset((d.host, d.port) for d in destinations)
        self._public = public
        self._path = socket_path
        self._pane = pane
        self._resolve = dict(resolve or {})
        self._header_timeout_s = header_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._max_connections = max_connections
        self._open: set[socket.socket] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._warned = 0
        self._window_end = 0.0
        self._stopped = False
        self._listener = _listen(socket_path)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="egress-proxy", daemon=True)

    @property
    def path(self) -> str:
        return self._path

    def start(self) -> EgressProxy:
        """Serve (connections made before are queued on the bound socket); returns self.
        The worker calls it after forking its program."""
        if not self._thread.is_alive() and not self._stopped:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Close every connection and the socket, end the thread, remove the socket file.
        Idempotent; waits at most ``STOP_TIMEOUT_S`` for the thread."""
        if self._stopped:
            return
        self._stopped = True
        if self._thread.ident is None:  # never started
            self._loop.close()
            self._listener.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path)
            return
        with contextlib.suppress(RuntimeError):  # the loop has already ended
            self._loop.call_soon_threadsafe(self._shutdown)
        self._thread.join(STOP_TIMEOUT_S)
        if self._thread.is_alive():
            log.warning(
                "egress proxy thread did not end in %.0fs", STOP_TIMEOUT_S, extra=self._extra()
            )
        else:
            self._loop.close()
        self._listener.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path)

    # -- the loop's thread ---------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.add_reader(self._listener, self._accept)
        try:
            self._loop.run_forever()
        finally:
            for sock in list(self._open):
                sock.close()
            self._open.clear()

    def _shutdown(self) -> None:
        self._loop.remove_reader(self._listener)
        for task in asyncio.all_tasks(self._loop):
            task.cancel()
        # Let the cancelled tasks unwind (their finally blocks close their sockets).
        self._loop.call_soon(self._stop_when_idle)

    def _stop_when_idle(self) -> None:
        if any(not t.done() for t in asyncio.all_tasks(self._loop)):
            self._loop.call_soon(self._stop_when_idle)
        else:
            self._loop.stop()

    def _accept(self) -> None:
        # A reader callback, not ``sock_accept``: a cancelled ``sock_accept`` can still
        # accept a connection and drop it (Python 3.11), leaking its socket.
        for _ in range(ACCEPT_BATCH):
            try:
                client, _ = self._listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # out of fds, say: the next readiness tries again
                log.warning("egress proxy accept failed: %s", exc, extra=self._extra())
                return
            client.setblocking(False)
            if len(self._tasks) >= self._max_connections:
                self._refuse_busy(client)
                continue
            task = self._loop.create_task(self._serve(client))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _refuse_busy(self, client: socket.socket) -> None:
        with contextlib.suppress(OSError):
            client.send(b"NO busy\n")  # a fresh socket's buffer is empty: this cannot block
        client.close()
        self._warn("egress refused (busy: %d connections)", self._max_connections)

    async def _serve(self, client: socket.socket) -> None:
        self._open.add(client)
        upstream: socket.socket | None = None
        loop = asyncio.get_running_loop()
        label = "?"
        http = False
        try:
            try:
                head, early, http = await asyncio.wait_for(
                    self._read_head(client), self._header_timeout_s
                )
            except TimeoutError:
                raise _Refused("header timeout") from None
            label = _label(head)
            request = _http_request(head, early) if http else self._line_request(head, early)
            upstream = await self._connect(request.host, request.port)
            self._open.add(upstream)
            if request.ok:
                await loop.sock_sendall(client, request.ok)
            if request.forward:
                await loop.sock_sendall(upstream, request.forward)
            await self._splice(client, upstream)
        except _Refused as refused:
            http = http or refused.http
            self._warn("egress refused %s: %s", label[:LABEL_LIMIT], refused)
            with contextlib.suppress(OSError):
                client.send(_http_refusal(str(refused)) if http else f"NO {refused}\n".encode())
        except OSError:
            pass  # a peer went away: nothing to tell anyone
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    self._open.discard(sock)
                    sock.close()

    async def _read_head(self, client: socket.socket) -> tuple[bytes, bytes, bool]:
        """(the header line without its newline, or an HTTP request head with its blank
        line; the bytes sent after it; whether it is HTTP)."""
        loop = asyncio.get_running_loop()
        data = b""
        while True:
            line, newline, _ = data.partition(b"\n")
            if len(line) + len(newline) >= HEADER_LIMIT:
                raise _Refused("header too long")  # the terminator counts
            if newline:
                http = line.endswith(b"\r")
                if not http:
                    line, _, early = data.partition(b"\n")
                    return line, early, False
                head, blank, early = data.partition(b"\r\n\r\n")
                if len(head) + len(blank) >= HEADER_LIMIT:
                    raise _Refused("header too long", http=True)
                if blank:
                    return head + blank, early, True
            if len(data) >= HEADER_LIMIT:
                raise _Refused("header too long")
            chunk = await loop.sock_recv(client, HEADER_LIMIT - len(data))
            if not chunk:
                raise _Refused("no header", http=bool(newline))
            data += chunk

    def _line_request(self, header: bytes, early: bytes) -> _Request:
        if not header.startswith(_CONNECT):
            raise _Refused("bad header")
        host, port = _destination(header[len(_CONNECT) :])
        return _Request(host, port, b"OK\n", early)

    async def _connect(self, host: str, port: int) -> socket.socket:
        """A connected non-blocking socket to (host, port), within the connect deadline
        (the name's resolution included): as listed, or (``"public"``) to one of the
        addresses the name resolved to that is public."""
        listed = (host, port) in self._allowed
        if not listed and not self._public:
            raise _Refused("not allowed")
        last: OSError | None = None
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                addresses = await self._addresses(host, port)
                if not listed:
                    addresses = public_only(addresses, own_addresses())
                for family, address in addresses:
                    try:
                        return await self._connect_one(family, address)
                    except OSError as exc:
                        last = exc
        except TimeoutError:
            raise _Refused("connect timeout") from None
        if last is not None and last.errno is not None:
            raise _Refused(os.strerror(last.errno).lower())
        raise _Refused("connect failed")

    async def _connect_one(self, family: int, address: tuple[str, int]) -> socket.socket:
        sock = socket.socket(family, socket.SOCK_STREAM)
        self._open.add(sock)  # closed by stop() if the loop ends meanwhile
        try:
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, address)
        except BaseException:
            sock.close()
            raise
        finally:
            self._open.discard(sock)
        return sock

    async def _addresses(self, host: str, port: int) -> list[tuple[int, tuple[str, int]]]:
        fixed = self._resolve.get(host)
        if fixed is not None or _is_ipv4(host):
            return [(_family(fixed or host), (fixed or host, port))]
        try:
            infos = await _getaddrinfo(host, port)
        except socket.gaierror:
            raise _Refused("name not resolved") from None
        return [(family, (str(sa[0]), int(sa[1]))) for family, sa in infos]

    async def _splice(self, client: socket.socket, upstream: socket.socket) -> None:
        pumps = [
            asyncio.ensure_future(_pump(client, upstream)),
            asyncio.ensure_future(_pump(upstream, client)),
        ]
        try:
            # A failed direction (a reset) ends the other too; a clean EOF leaves it.
            await asyncio.wait(pumps, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)

    def _warn(self, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now >= self._window_end:
            if self._warned > WARNINGS_PER_WINDOW:
                log.warning(
                    "egress: %d more refusals not logged",
                    self._warned - WARNINGS_PER_WINDOW,
                    extra=self._extra(),
                )
            self._warned = 0
            self._window_end = now + WARNING_WINDOW_S
        self._warned += 1
        if self._warned <= WARNINGS_PER_WINDOW:
            log.warning(msg, *args, extra=self._extra())

    def _extra(self) -> dict[str, str]:
        return {"pane": self._pane} if self._pane else {}


def public_only(
    addresses: Sequence[tuple[int, tuple[str, int]]], own: frozenset[str]
) -> list[tuple[int, tuple[str, int]]]:
    """The resolved addresses a ``"public"`` destination may be connected to.

    Raises:
        _Refused: ``not a public address`` when none is.
    """
    kept = [(family, address) for family, address in addresses if refusal(address[0], own) is None]
    if not kept:
        raise _Refused(NOT_PUBLIC)
    return kept


def _destination(text: bytes) -> tuple[str, int]:
    try:
        host, port = parse_destination(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise _Refused("bad destination") from None
    return host, port


def _http_request(head: bytes, early: bytes) -> _Request:
    """An HTTP/1.x request head: ``CONNECT authority``, or an absolute ``http://`` URI
    (sent on in origin form, without hop-by-hop headers, with ``Connection: close``)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise _Refused("bad header")
    method, target, version = parts
    if method == "CONNECT":
        host, port = _destination(target.encode("latin-1"))
        return _Request(host, port, b"HTTP/1.1 200 Connection established\r\n\r\n", early)
    if not target[:7].lower() == "http://":
        raise _Refused("bad header")  # origin form, or https:// (CONNECT is for that)
    try:
        url = urlsplit(target)
        port = url.port or 80
    except ValueError:
        raise _Refused("bad destination") from None
    name = url.hostname or ""
    authority = f"[{name}]:{port}" if ":" in name else f"{name}:{port}"
    host, port = _destination(authority.encode("latin-1"))
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    headers = [line for line in lines[1:] if line]
    kept = [h for h in headers if h.split(":", 1)[0].strip().lower() not in _HOP_HEADERS]
    if not any(h.split(":", 1)[0].strip().lower() == "host" for h in kept):
        kept.insert(0, f"Host: {url.netloc.rpartition('@')[2]}")
    out = [f"{method} {path} {version}", *kept, "Connection: close", "", ""]
    return _Request(host, port, b"", "\r\n".join(out).encode("latin-1") + early)


def _http_refusal(reason: str) -> bytes:
    code, phrase = _HTTP_STATUS.get(reason, (502, "Bad Gateway"))
    body = f"panewarden egress: {reason}\n".encode()
    head = (
        f"HTTP/1.1 {code} {phrase}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def _label(head: bytes) -> str:
    """The destination a refusal is logged with: the header line's target."""
    first = head.split(b"\r\n", 1)[0].decode(errors="replace")
    parts = first.split(" ")
    return parts[1] if len(parts) >= 2 else first


async def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` a chunk at a time until ``src`` ends, then end ``dst``'s
    writing side (half-close: the other direction goes on)."""
    loop = asyncio.get_running_loop()
    while True:
        data = await loop.sock_recv(src, CHUNK)
        if not data:
            break
        await loop.sock_sendall(dst, data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


async def _getaddrinfo(host: str, port: int) -> list[tuple[int, tuple[str, int]]]:
    """DNS off the loop, in a daemon thread of its own: a resolver stuck past the connect
    deadline is abandoned instead of holding an executor (and the worker's exit)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[list[tuple[int, tuple[str, int]]]] = loop.create_future()

    def settle(result: object, error: BaseException | None) -> None:
        if done.done():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def resolve() -> None:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            result = [(int(i[0]), (str(i[4][0]), int(i[4][1]))) for i in infos]
            outcome: tuple[object, BaseException | None] = (result, None)
        except OSError as exc:
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=resolve, name="egress-resolve", daemon=True).start()
    return await done


def _listen(path: str) -> socket.socket:
    """The listening socket at ``path``, mode 0600 (its directory is the worker's, 0700).
    A socket left there by a dead worker is replaced; anything else is an error."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(64)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _family(address: str) -> int:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def _is_ipv4(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET, host)
    except OSError:
        return False
    return True
