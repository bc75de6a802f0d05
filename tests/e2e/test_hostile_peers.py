"""A stranger on the worker socket: garbage, a forged Hello, oversized frames.

The supervisor drops them with a log line and keeps serving its panes.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
import zmq

from protocol import PROTOCOL_VERSION
from protocol.framing import MAX_FRAME_BYTES, Codec
from protocol.messages import Hello, PaneStatusFields, Status
from tests.conftest import Tools

pytestmark = pytest.mark.anyio


def _endpoint(state_dir: Path) -> str:
    return (state_dir / "run" / "endpoint").read_text().strip()


async def test_garbage_and_forged_workers_do_not_disturb_the_supervisor(
    tools: Tools, state_dir: Path
) -> None:
    pane = (await tools.call("start_pane", name="real", profile="demo"))["pane"]
    idle = await tools.wait("real", until=["idle"])
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    try:
        sock.setsockopt(zmq.LINGER, 0)
        # The real pane's own routing id would be a takeover attempt; use a stranger's.
        sock.setsockopt(zmq.ROUTING_ID, b"stranger")
        sock.connect(_endpoint(state_dir))
        codec = Codec()
        status = PaneStatusFields(
            lifecycle="running", state="done", kind=None, turn=99, seq=999, source="osc7501"
        )
        frames = [
            b"\xc1\xc1\xc1",
            msgspec.msgpack.encode({"op": "nonsense"}),
            codec.encode(
                Hello(
                    protocol_version=PROTOCOL_VERSION,
                    pane="real",
                    instance="stranger",
                    proof=b"guess" * 8,
                    worker_pid=1,
                    child_pid=1,
                    status=status,
                    started_at=0.0,
                )
            ),
            codec.encode(Status(status=status)),
            # Last: an oversized frame makes the supervisor drop this connection.
            b"\x00" * (MAX_FRAME_BYTES + 10),
        ]
        for frame in frames:
            sock.send(frame)
        # A same-user process can read the pane record; claiming the live worker's
        # routing id must not let it speak for the pane.
        instance = json.loads((state_dir / "panes" / "real.json").read_text())["instance"]
        impostor = ctx.socket(zmq.DEALER)
        impostor.setsockopt(zmq.LINGER, 1000)  # bounded: let the frame actually go out
        impostor.setsockopt(zmq.ROUTING_ID, instance.encode())
        impostor.connect(_endpoint(state_dir))
        impostor.send(codec.encode(Status(status=status)))
        impostor.close()
        sock.close()
        ctx.term()  # returns once both frames were handed to the supervisor (or 1 s)
    finally:
        if not ctx.closed:
            sock.close(linger=0)
            ctx.term()
    # The real pane is untouched: no forged status, and it still works.
    now = await tools.call("get_status", name="real")
    assert now["seq"] == idle["seq"] and now["turn"] == 0
    await tools.call("send_input", name="real", text="still here")
    done = await tools.wait("real", after=idle["seq"], until=["done"])
    assert done["turn"] == 1
    panes = (await tools.call("list_panes"))["panes"]
    assert [p["name"] for p in panes] == ["real"] and panes[0]["pid"] == pane["pid"]
    await tools.call("remove_pane", name="real")
