"""The worker template's packets: what decodes, what is refused, and descriptors passed."""

from __future__ import annotations

import os
import socket

import pytest

from protocol.template import (
    MAX_PACKET_BYTES,
    Closed,
    Fork,
    Forked,
    PacketError,
    Retire,
    TemplateBoot,
    TemplateHello,
    decode_boot,
    decode_from_template,
    decode_to_template,
    encode_boot,
    receive_packet,
    send_packet,
)


def test_packets_round_trip_each_way() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        send_packet(a, Fork(rid=3))
        send_packet(a, Retire())
        hello = TemplateHello(protocol_version=1, build="x", pid=5, proof=b"p", started_at=1.0)
        send_packet(b, hello)
        got = receive_packet(b)
        assert got is not None and decode_to_template(got[0]) == Fork(rid=3)
        got = receive_packet(b)
        assert got is not None and decode_to_template(got[0]) == Retire()
        got = receive_packet(a)
        assert got is not None and decode_from_template(got[0]) == hello


def test_descriptors_travel_with_their_packet() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read_fd, write_fd = os.pipe()
    with a, b:
        send_packet(a, Forked(rid=1, pid=2, start_ticks=3), (read_fd,))
        os.close(read_fd)
        b.setblocking(False)
        got = receive_packet(b)
        assert got is not None
        data, fds = got
        assert decode_from_template(data) == Forked(rid=1, pid=2, start_ticks=3)
        assert len(fds) == 1
        os.write(write_fd, b"ok")
        assert os.read(fds[0], 2) == b"ok"
        os.close(fds[0])
        os.close(write_fd)
        assert receive_packet(b) is None  # nothing waiting: None, never a block


@pytest.mark.parametrize(
    "data",
    [b"", b"\xc1", b"\x81\xa2op\xa4nope", b"\x81\xa2op\xa4fork", b"\x82\xa2op\xa4fork\xa3rid\xa1x"],
)
def test_malformed_packets_are_refused_with_a_typed_error(data: bytes) -> None:
    with pytest.raises(PacketError):
        decode_to_template(data)
    with pytest.raises(PacketError):
        decode_from_template(data)


def test_an_oversized_packet_is_refused_both_when_sent_and_when_received() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with a, b:
        build = "x" * MAX_PACKET_BYTES
        big = TemplateHello(protocol_version=1, build=build, pid=1, proof=b"", started_at=0)
        with pytest.raises(PacketError):
            send_packet(b, big)
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * MAX_PACKET_BYTES)
        a.send(b"\x00" * (MAX_PACKET_BYTES + 100))
        got = receive_packet(b)
        assert got is not None
        data, fds = got
        assert fds == [] and len(data) > MAX_PACKET_BYTES
        with pytest.raises(PacketError):
            decode_to_template(data)


def test_end_of_connection_is_closed() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    a.close()
    with b, pytest.raises(Closed):
        receive_packet(b)


def test_boot_records_round_trip_and_refuse_garbage() -> None:
    boot = TemplateBoot(
        protocol_version=1,
        secret=b"s",
        socket_path="/tmp/x.sock",
        build="b",
        orphan_after_s=15.0,
        orphan_grace_s=120.0,
        preload=["ghostty"],
    )
    assert decode_boot(encode_boot(boot)) == boot
    for bad in (b"", b"\x93", b"\x00" * (MAX_PACKET_BYTES + 1)):
        with pytest.raises(ValueError, match="template boot record"):
            decode_boot(bad)
