"""The supervisor's one ZeroMQ reader survives a failing event sink, and stops the
service loudly when it dies anyway (``supervisor.workers.manager``).

A real ``WorkerManager`` with a real (cold-started) worker process. The sink raises
for one frame: the failure is logged with the pane, and the next frames are still read
and handled. A sink raising what no containment catches kills the loop: its death is
logged as critical, the service's stop path (SIGTERM to itself) runs, and ``close``
still closes everything.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest

from protocol.agents.table import GENERIC
from protocol.boot import PaneLaunch
from protocol.messages import Hello, Introduce, Ok, Ping, ToSupervisor
from supervisor.workers.manager import WorkerHandle, WorkerManager
from tests.polling import apoll
from tests.supervisor import close_worker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

PANE = "rx-pane"
WAIT_S = 20.0
# Each poll asks the worker for a Hello again (the first ask may race its reconnect).
INTRODUCE_EVERY_S = 0.1
MANAGER_LOG = "supervisor.workers.manager"


class Deafening(BaseException):
    """Raised by the sink where ``except Exception`` cannot catch it."""


@dataclass
class FailingSink:
    """Records the Hellos it gets; raises ``fail`` once, for the next Hello after it is
    armed."""

    fail: type[BaseException] | None = None
    hellos: list[Hello] = field(default_factory=list)

    def __call__(self, handle: WorkerHandle, msg: ToSupervisor) -> None:
        if isinstance(msg, Hello) and self.fail is not None:
            fail, self.fail = self.fail, None
            raise fail(f"sink bug for {handle.pane}")
        if isinstance(msg, Hello):
            self.hellos.append(msg)


@dataclass
class Running:
    manager: WorkerManager
    handle: WorkerHandle
    sink: FailingSink

    async def ping(self) -> None:
        reply = await self.manager.request(self.handle, lambda rid: Ping(rid=rid), WAIT_S)
        assert isinstance(reply, Ok), reply

    async def introduce_until(self, done: Callable[[], bool], what: str) -> None:
        """Ask the worker for a Hello until ``done()``."""

        def asked() -> bool:
            if done():
                return True
            self.manager.send(self.handle, Introduce())
            return False

        await apoll(asked, WAIT_S, what=what, interval_s=INTRODUCE_EVERY_S)


@pytest.fixture
async def running() -> AsyncIterator[Running]:
    """A bound manager with one ready worker; the sink is not armed yet."""
    sink = FailingSink()
    with tempfile.TemporaryDirectory(prefix="pw-rx-") as workdir:  # short: sun_path
        manager = WorkerManager(f"ipc://{workdir}/w.ipc", sink, lambda handle: None)
        manager.bind()
        handle: WorkerHandle | None = None
        try:
            handle, boot = manager.prepare(
                PaneLaunch(
                    pane=PANE,
                    agent=GENERIC,
                    argv=[sys.executable, "-c", "import time; time.sleep(600)"],
                    cwd="/",
                    env={"PATH": os.environ.get("PATH", "")},
                    cols=80,
                    rows=24,
                )
            )
            await manager.launch(handle, boot, dict(os.environ))
            await manager.wait_ready(handle)
            yield Running(manager, handle, sink)
        finally:
            if handle is not None:
                await close_worker(manager, handle)
            await manager.close()


def _records(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage()]


async def test_a_frame_whose_sink_fails_is_dropped_and_logged_and_the_reader_goes_on(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=MANAGER_LOG)
    running.sink.fail = RuntimeError
    await running.introduce_until(
        lambda: bool(_records(caplog, "dispatch failed")), "the failing frame was logged"
    )
    [dropped] = _records(caplog, "dispatch failed")
    assert getattr(dropped, "pane", None) == PANE
    assert dropped.exc_info is not None and dropped.exc_info[0] is RuntimeError
    # The frames after it are read: a request's reply, and an event for the sink.
    await running.ping()
    before = len(running.sink.hellos)
    await running.introduce_until(
        lambda: len(running.sink.hellos) > before, "a later Hello reached the sink"
    )
    await running.ping()
    assert not [r for r in caplog.records if r.levelno >= logging.CRITICAL], caplog.text


async def test_a_receive_loop_that_dies_anyway_stops_the_service_loudly(
    running: Running, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=MANAGER_LOG)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    # Where the service's runtime has its stop handler: the manager's SIGTERM lands here.
    loop.add_signal_handler(signal.SIGTERM, stopping.set)
    try:
        running.sink.fail = Deafening
        await running.introduce_until(stopping.is_set, "the dead loop stopped the service")
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
    [died] = [r for r in caplog.records if r.levelno == logging.CRITICAL]
    assert "worker-rx" in died.getMessage(), died.getMessage()
    assert died.exc_info is not None and died.exc_info[0] is Deafening
    # The stop path goes on past the dead loop: ``close`` (the fixture's) must not raise.
