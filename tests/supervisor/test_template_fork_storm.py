"""A storm of pane starts is forked by one template, however long its queue
(``supervisor.workers.template``).

A real ``WorkerManager`` with a real ``TemplateManager`` and ``START`` workers started
at once. The fork deadline is cut to ``FORK_TIMEOUT_S`` below, well under the time the
template takes to answer them all, but far over its time for one fork: a template that
keeps answering forks is busy, not hung, so it is never replaced and no worker starts
cold. (Before: each start counted its 5 s from its own request, so at 1,000 starts
the later ones timed out behind the earlier ones, the template was replaced, and 339
workers started cold; their requests had also filled the socket's queue: EAGAIN.)
"""

from __future__ import annotations

import asyncio
import logging
import os
import tempfile
import time
from pathlib import Path

import pytest

from protocol.agents.table import GENERIC
from protocol.boot import PaneLaunch
from protocol.timing import ORPHAN_AFTER_S
from supervisor.workers import template as template_module
from supervisor.workers.manager import WorkerHandle, WorkerManager
from supervisor.workers.template import TemplateManager
from tests.polling import apoll
from tests.supervisor import close_worker

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

START = 300
FORK_TIMEOUT_S = 1.0
WAIT_S = 60.0


async def test_a_storm_of_starts_is_forked_by_one_template(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(template_module, "FORK_TIMEOUT_S", FORK_TIMEOUT_S)
    caplog.set_level(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="pw-storm-") as workdir:  # short: sun_path
        work = Path(workdir)
        state = work / "state"
        state.mkdir(mode=0o700)
        template = TemplateManager(
            state, work, dict(os.environ), orphan_after_s=ORPHAN_AFTER_S, orphan_grace_s=5.0
        )
        manager = WorkerManager(
            f"ipc://{workdir}/w.ipc", lambda _h, _m: None, lambda _h: None, template=template
        )
        manager.bind()
        await template.start()
        await apoll(
            lambda: template.active is not None and template.active.usable,
            WAIT_S,
            what="the template is ready",
        )
        first = template.active
        handles: list[WorkerHandle] = []
        boots: list[bytes] = []
        try:
            for i in range(START):
                handle, boot = manager.prepare(
                    PaneLaunch(
                        pane=f"storm-{i}",
                        agent=GENERIC,
                        argv=["/bin/sleep", "600"],
                        cwd="/",
                        env={"PATH": os.environ.get("PATH", "")},
                        cols=80,
                        rows=24,
                    )
                )
                handles.append(handle)
                boots.append(boot)
            started = time.monotonic()
            pairs = zip(handles, boots, strict=True)
            await asyncio.gather(*(manager.launch(h, b, dict(os.environ)) for h, b in pairs))
            forked_in_s = time.monotonic() - started
            cold = [h.pane for h in handles if h.proc is not None]
            replaced = [r.getMessage() for r in caplog.records if "replacing it" in r.getMessage()]
            assert not replaced, replaced
            assert not cold, f"{len(cold)} of {START} started cold in {forked_in_s:.2f}s"
            assert template.active is first
            await asyncio.gather(*(manager.wait_ready(h) for h in handles))
        finally:
            await asyncio.gather(*(close_worker(manager, h) for h in handles if h.pid))
            await manager.close()
            await template.stop(keep=False)
