"""The worker template's contract: its boot record, its messages, and the socket they use.

The template is a long-lived process per state dir that has imported the worker code
once and forks one worker per pane on request. It talks to its supervisor over an
``AF_UNIX`` ``SOCK_SEQPACKET`` connection (no ZeroMQ: the template must hold no
threads when it forks): one msgpack message per packet, and file descriptors passed
alongside with ``SCM_RIGHTS``. The supervisor sends ``Fork`` with the read end of a
pipe holding the new worker's boot record (the template never reads it: the secret
stays between the supervisor and the worker) and the stderr the worker must log to;
the template answers ``Forked`` with a pidfd of the new worker, or ``ForkFailed``.

A template proves itself like a worker: its first packet on every connection is
``TemplateHello`` with the secret it was booted with, whose hash only the supervisor
keeps. ``build`` names the code and environment it forks workers with; a supervisor
whose build differs retires it (``Retire``: no more forks, exit once the workers it
forked are gone) and starts another.

Schema evolution: new fields get defaults; fields are never retyped or reused.
"""

from __future__ import annotations

import array
import os
import socket

import msgspec

TEMPLATE_PROTOCOL_VERSION = 1
MAX_PACKET_BYTES = 64 * 1024
# Fork carries two descriptors; anything beyond is closed unread.
MAX_FDS = 4


# The most blank screens a template builds ahead (each costs it up to ~1 MiB).
MAX_SPARE_SCREENS = 8


class SpareScreen(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A pane screen a template builds blank before forking: a worker whose boot asks
    for this backend and size adopts it (shared with the template until drawn on)
    instead of building its own."""

    emulator: str
    cols: int
    rows: int


class TemplateBoot(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What a template is started with, on an inherited pipe (never argv or env)."""

    protocol_version: int
    secret: bytes
    # Where it listens for a later supervisor of the same state dir.
    socket_path: str
    build: str
    orphan_after_s: float
    orphan_grace_s: float
    # Emulator backends to import before forking (pyte is always imported).
    preload: list[str] = []
    # Blank screens to build ahead: the launch profiles' sizes (at most MAX_SPARE_SCREENS).
    spares: list[SpareScreen] = []


class _Packet(msgspec.Struct, tag_field="op"):
    """Base of every packet; the ``op`` tag is the class name in snake case."""


class Fork(_Packet, tag="fork"):
    """Fork a worker. Descriptors: the boot pipe's read end, then the worker's stderr."""

    rid: int


class Retire(_Packet, tag="retire"):
    """Fork no more; exit once every worker forked so far is gone."""


class TemplateHello(_Packet, tag="template_hello"):
    """First packet of the template on every connection: who it is, and the proof."""

    protocol_version: int
    build: str
    pid: int
    proof: bytes
    started_at: float
    workers: list[int] = []


class Forked(_Packet, tag="forked"):
    """The worker exists. Descriptor: a pidfd of it, opened before anyone could reap it."""

    rid: int
    pid: int
    start_ticks: int


class ForkFailed(_Packet, tag="fork_failed"):
    rid: int
    message: str


ToTemplate = Fork | Retire
FromTemplate = TemplateHello | Forked | ForkFailed


class PacketError(ValueError):
    """A packet that cannot be accepted (too large, malformed, unknown op)."""


_encoder = msgspec.msgpack.Encoder()
_to_template = msgspec.msgpack.Decoder(ToTemplate)
_from_template = msgspec.msgpack.Decoder(FromTemplate)


def encode_boot(boot: TemplateBoot) -> bytes:
    """The template's boot record as bytes (msgpack)."""
    return _encoder.encode(boot)


def decode_boot(data: bytes) -> TemplateBoot:
    """Decode a template boot record; raises ValueError on bad input."""
    if len(data) > MAX_PACKET_BYTES:
        raise ValueError("template boot record too large")
    try:
        return msgspec.msgpack.decode(data, type=TemplateBoot)
    except msgspec.MsgspecError as exc:
        raise ValueError(f"bad template boot record: {exc}") from exc


def decode_to_template(data: bytes) -> ToTemplate:
    """Decode a supervisor → template packet; raises PacketError."""
    try:
        return _to_template.decode(data)
    except msgspec.MsgspecError as exc:
        raise PacketError(str(exc)) from exc


def decode_from_template(data: bytes) -> FromTemplate:
    """Decode a template → supervisor packet; raises PacketError."""
    try:
        return _from_template.decode(data)
    except msgspec.MsgspecError as exc:
        raise PacketError(str(exc)) from exc


class Closed(Exception):
    """The peer closed the connection (or died)."""


def send_packet(sock: socket.socket, msg: _Packet, fds: tuple[int, ...] = ()) -> None:
    """Send one packet (and descriptors) on a non-blocking seqpacket socket.

    Raises:
        BlockingIOError: the peer's queue is full (a hung peer): nothing was sent.
        OSError: the connection is gone.
    """
    data = _encoder.encode(msg)
    if len(data) > MAX_PACKET_BYTES:
        raise PacketError(f"packet of {len(data)} bytes exceeds {MAX_PACKET_BYTES}")
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.send(data)


def receive_packet(sock: socket.socket) -> tuple[bytes, list[int]] | None:
    """One packet and the descriptors that came with it; None when none is waiting.

    The caller owns (and must close) every descriptor returned. A truncated packet
    comes back as more than ``MAX_PACKET_BYTES`` bytes, for the decoder to refuse.

    Raises:
        Closed: end of the connection.
    """
    fd_bytes = array.array("i").itemsize * MAX_FDS
    try:
        data, ancdata, flags, _addr = sock.recvmsg(
            MAX_PACKET_BYTES + 1, socket.CMSG_SPACE(fd_bytes), socket.MSG_CMSG_CLOEXEC
        )
    except (BlockingIOError, InterruptedError):
        return None
    except (ConnectionResetError, BrokenPipeError) as exc:
        raise Closed from exc
    fds = _fds_of(ancdata)
    if not data and not fds:
        raise Closed
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        for fd in fds:
            os.close(fd)
        return b"\0" * (MAX_PACKET_BYTES + 1), []
    return data, fds


def _fds_of(ancdata: list[tuple[int, int, bytes]]) -> list[int]:
    fds: list[int] = []
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            got = array.array("i")
            got.frombytes(payload[: len(payload) - (len(payload) % got.itemsize)])
            fds.extend(got)
    return fds


def peer_pid(sock: socket.socket) -> int:
    """The peer's pid from ``SO_PEERCRED`` (as of its connect or listen)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    pid, _uid, _gid = array.array("i", creds)
    return pid


def peer_uid(sock: socket.socket) -> int:
    """The peer's uid from ``SO_PEERCRED``."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
    _pid, uid, _gid = array.array("i", creds)
    return uid
