"""Tests of the supervisor's parts in-process, and the helper they share for closing a
real worker they started."""

from __future__ import annotations

import anyio

from protocol.messages import Close
from supervisor.workers.manager import WorkerHandle, WorkerManager

CLOSE_WAIT_S = 20.0


async def close_worker(manager: WorkerManager, handle: WorkerHandle) -> None:
    """Ask the worker to close its pane and exit (no reply awaited: the receive loop may
    be dead), SIGKILL it if it lingers; its death comes through its pidfd either way."""
    if handle.dead:
        return
    manager.send(handle, Close(rid=0, grace_s=1.0))
    with anyio.move_on_after(CLOSE_WAIT_S):
        await handle.died.wait()
    if not handle.died.is_set():
        manager.kill(handle)
        with anyio.fail_after(CLOSE_WAIT_S):
            await handle.died.wait()
