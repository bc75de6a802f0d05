"""The per-profile watchdog against real demo panes in an in-process service (docs/design.md §5).

The service runs in this process (``running_service``) with its own watchdog slowed to
one pass an hour; each test drives a second ``Watchdog`` over the same service with a
fake clock, so the idle timeout (at least 10 s in the profile schema) passes instantly.
Synchronisation is by complete watchdog passes (``wait_passes``) and pane status
records, never by sleeping.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from protocol.errors import ErrorCode, PanewardenError
from protocol.messages import PaneStatusFields
from supervisor.config import load_config
from supervisor.front.runtime import running_service
from supervisor.panes.pane import LeaseTag
from supervisor.panes.service import PaneService
from supervisor.panes.watchdog import Watchdog, has_unchecked_item
from tests.conftest import REPO, service_env

pytestmark = pytest.mark.anyio

NUDGE = "please continue with the next todo item"
IDLE_S = 10
DEADLINE_S = 15.0
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


@pytest.fixture(autouse=True)
def restore_subreaper() -> Iterator[None]:
    """The in-process service makes pytest a subreaper; undo that for later tests."""
    libc = ctypes.CDLL(None, use_errno=True)
    before = ctypes.c_int(0)
    libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(before), 0, 0, 0)
    yield
    libc.prctl(PR_SET_CHILD_SUBREAPER, before.value, 0, 0, 0)


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Harness:
    service: PaneService
    watchdog: Watchdog
    clock: FakeClock
    caplog: pytest.LogCaptureFixture

    async def passes(self, count: int = 1) -> None:
        async with asyncio.timeout(DEADLINE_S):
            await self.watchdog.wait_passes(count)

    async def idle_for(self, seconds: float) -> None:
        """Let ``seconds`` of fake time pass, then wait for a full pass to see it."""
        self.clock.now += seconds
        await self.passes()

    async def start(self, name: str = "w1") -> PaneStatusFields:
        await self.service.lifecycle.start_pane(name, "demo")
        return await self.wait(name, after=None, until=("idle",))

    async def wait(self, name: str, after: int | None, until: tuple[str, ...]) -> PaneStatusFields:
        status, timed_out = await self.service.driver.wait_status(name, until, after, DEADLINE_S)
        assert not timed_out, status
        return status

    async def turn(
        self, name: str, text: str, until: tuple[str, ...] = ("done",)
    ) -> PaneStatusFields:
        """A client's prompt; returns the settled status and lets the watchdog see it."""
        before = self.service.registry.get(name).status.seq
        await self.service.driver.send_input(name, text, True, None)
        status = await self.wait(name, after=before, until=until)
        await self.passes()
        return status

    async def nudged_turn(self, name: str, before: PaneStatusFields) -> PaneStatusFields:
        """The turn a nudge started, settled and seen by the watchdog."""
        done = await self.wait(name, after=before.seq, until=("done",))
        assert done.turn == before.turn + 1
        await self.passes()
        return done

    def logged(self, name: str, prefix: str) -> int:
        return sum(
            1
            for r in self.caplog.records
            if r.name == "supervisor.panes.watchdog"
            and getattr(r, "pane", None) == name
            and r.getMessage().startswith(prefix)
        )

    def nudges(self, name: str = "w1") -> int:
        return self.logged(name, "watchdog nudged")

    def give_ups(self, name: str = "w1") -> int:
        return self.logged(name, "watchdog: giving up")

    async def screen(self, name: str = "w1") -> str:
        return (await self.service.driver.read_output(name, None, True)).text


@asynccontextmanager
async def harness(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, protocol: str = "terminal", **watchdog: Any
) -> AsyncIterator[Harness]:
    """``protocol="acp"``: the profile's pane is the fake ACP agent, an ACP pane."""
    caplog.set_level(logging.DEBUG, logger="supervisor.panes.watchdog")
    profiles = tmp_path / "profiles.json"
    watch = {"idle_timeout_secs": IDLE_S, "nudge_text": NUDGE, **watchdog}
    profile = {
        "name": "demo",
        "agent": "demo",
        "argv": [sys.executable, "-m", "supervisor.demo.agent"],
        "cwds": [str(tmp_path)],
        "watchdog": watch,
    }
    if protocol == "acp":
        agent = REPO / "tests" / "acp" / "fake_acp_agent.py"
        profile |= {"agent": "generic", "argv": [sys.executable, str(agent)], "protocol": "acp"}
    profiles.write_text(json.dumps({"profiles": [profile]}))
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    env = service_env(
        state,
        PANEWARDEN_PROFILES=str(profiles),
        # The service's own watchdog must stay out of the way of the test's.
        PANEWARDEN_WATCHDOG_PERIOD_S="3600",
    )
    clock = FakeClock()
    async with running_service(load_config(env)) as services:
        service = services.panes
        dog = Watchdog(service.registry, service.driver, period_s=0.05, clock=clock)
        dog.start()
        try:
            yield Harness(service, dog, clock, caplog)
        finally:
            await dog.stop()


@pytest.mark.parametrize("protocol", ["terminal", "acp"])
async def test_nudges_after_the_idle_timeout_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, protocol: str
) -> None:
    # On a terminal pane (the demo agent) and on an ACP pane (the fake ACP agent).
    async with harness(tmp_path, caplog, protocol) as h:
        await h.start()
        await h.idle_for(10 * IDLE_S)
        assert h.nudges() == 0, "a fresh pane that never had a turn is not nudged"

        done = await h.turn("w1", "hello")
        assert (done.state, done.turn) == ("done", 1)
        await h.idle_for(IDLE_S - 0.5)
        assert h.nudges() == 0
        assert h.service.registry.get("w1").status.seq == done.seq

        await h.idle_for(0.5)
        assert h.nudges() == 1
        nudged = await h.nudged_turn("w1", done)
        assert nudged.state == "done"
        assert f"reply: {NUDGE}" in await h.screen()
        record = next(r for r in caplog.records if r.getMessage().startswith("watchdog nudged"))
        assert NUDGE not in record.getMessage()


async def test_the_cap_is_honoured_then_the_watchdog_gives_up_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(tmp_path, caplog, max_consecutive_nudges=2) as h:
        await h.start()
        last = await h.turn("w1", "start the work")
        for count in (1, 2):
            await h.idle_for(IDLE_S)
            assert h.nudges() == count
            last = await h.nudged_turn("w1", last)

        await h.idle_for(IDLE_S)
        assert (h.nudges(), h.give_ups()) == (2, 1)
        for _ in range(3):
            await h.idle_for(IDLE_S)
        assert (h.nudges(), h.give_ups()) == (2, 1)
        status = h.service.registry.get("w1").status
        assert (status.state, status.turn, status.seq) == ("done", 3, last.seq)


async def test_outside_progress_resets_the_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(tmp_path, caplog, max_consecutive_nudges=1) as h:
        await h.start()
        last = await h.turn("w1", "first task")
        await h.idle_for(IDLE_S)
        last = await h.nudged_turn("w1", last)
        await h.idle_for(IDLE_S)
        assert (h.nudges(), h.give_ups()) == (1, 1)

        last = await h.turn("w1", "a client's new task")
        assert last.turn == 3
        await h.idle_for(IDLE_S)
        assert h.nudges() == 2
        last = await h.nudged_turn("w1", last)
        await h.idle_for(IDLE_S)
        assert (h.nudges(), h.give_ups()) == (2, 2)


async def test_blocked_and_cancelled_panes_are_not_nudged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(tmp_path, caplog) as h:
        await h.start()
        blocked = await h.turn("w1", "dialog make deploy", until=("blocked",))
        assert (blocked.state, blocked.turn) == ("blocked", 1)
        await h.idle_for(10 * IDLE_S)
        await h.idle_for(10 * IDLE_S)
        assert h.nudges() == 0
        assert h.service.registry.get("w1").status.seq == blocked.seq
        assert NUDGE not in await h.screen()

        await h.service.driver.answer_dialog("w1", "deny_once", 1)
        cancelled = await h.wait("w1", after=blocked.seq, until=("cancelled",))
        await h.passes()
        await h.idle_for(10 * IDLE_S)
        assert h.nudges() == 0
        assert h.service.registry.get("w1").status.seq == cancelled.seq

        done = await h.turn("w1", "carry on")
        await h.idle_for(IDLE_S)
        assert h.nudges() == 1
        await h.nudged_turn("w1", done)


async def test_the_todo_file_gates_nudges(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    todo = tmp_path / "TODO.md"
    async with harness(tmp_path, caplog, todo_file=str(todo)) as h:
        await h.start()
        done = await h.turn("w1", "work")
        await h.idle_for(IDLE_S)
        await h.idle_for(IDLE_S)
        assert h.nudges() == 0
        assert h.logged("w1", "watchdog: cannot read todo file") == 1

        todo.write_text("# plan\n- [x] parse\n* [x] render\n\n- [ ]x not an item\n")
        await h.idle_for(IDLE_S)
        await h.idle_for(IDLE_S)
        assert h.nudges() == 0
        assert h.logged("w1", "watchdog: cannot read todo file") == 1

        with todo.open("a") as f:
            f.write("  - [ ] ship\n")
        await h.passes()
        assert h.nudges() == 1
        await h.nudged_turn("w1", done)


async def test_leased_and_exited_panes_are_not_nudged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with harness(tmp_path, caplog) as h:
        await h.start()
        done = await h.turn("w1", "work")
        pane = h.service.registry.get("w1")
        pane.lease = LeaseTag("lease-under-test", "writer", "test")
        await h.idle_for(IDLE_S)
        await h.idle_for(IDLE_S)
        assert h.nudges() == 0
        pane.lease = None
        await h.passes()
        assert h.nudges() == 1
        done = await h.nudged_turn("w1", done)

        await h.service.driver.send_input("w1", "exit", True, None)
        exited = await h.wait("w1", after=done.seq, until=("exited",))
        assert exited.lifecycle == "exited"
        await h.passes()
        await h.idle_for(10 * IDLE_S)
        assert h.nudges() == 1


async def test_the_service_runs_its_watchdog_at_the_configured_period(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    config = load_config(service_env(state, PANEWARDEN_WATCHDOG_PERIOD_S="0.05"))
    assert config.watchdog_period_s == 0.05
    async with running_service(config) as services:
        service = services.panes
        assert service.watchdog.period_s == 0.05
        async with asyncio.timeout(DEADLINE_S):
            await service.watchdog.wait_passes(3)


@pytest.mark.parametrize("raw", ["0.01", "3601", "nan", "inf", "-1", "soon"])
def test_the_period_knob_is_bounded(tmp_path: Path, raw: str) -> None:
    with pytest.raises(PanewardenError) as caught:
        load_config(service_env(tmp_path, PANEWARDEN_WATCHDOG_PERIOD_S=raw))
    assert caught.value.code is ErrorCode.CONFIG_INVALID
    assert "PANEWARDEN_WATCHDOG_PERIOD_S" in caught.value.message


def test_the_period_defaults_to_five_seconds(tmp_path: Path) -> None:
    assert load_config(service_env(tmp_path)).watchdog_period_s == 5.0
    assert (
        load_config(service_env(tmp_path, PANEWARDEN_WATCHDOG_PERIOD_S="3600")).watchdog_period_s
        == 3600.0
    )


@pytest.mark.parametrize(
    ("text", "open_item"),
    [
        ("- [ ] a", True),
        ("done\n   * [ ] nested", True),
        ("+\t[ ] tab", True),
        ("- [x] a\n- [X] b", False),
        ("text - [ ] inline is not an item", False),
        ("-[ ] no space", False),
        ("- [ ]x glued", False),
        ("1. [ ] ordered\r\n", True),
        ("", False),
    ],
)
def test_unchecked_items(text: str, open_item: bool) -> None:
    assert has_unchecked_item(text) is open_item
