"""Harness for coordination scenario 28: a controller whose identity is a pane cannot
adopt that pane.

Only ``panewarden ctl`` inside a pane has a pane identity (``pane:<name>:<instance>``,
attested by the service), so this runs the real service core (state dir, stores, a demo
pane with its worker) in its own process and calls the adopted-pane lane with that
identity. Prints the error code of adopting the own pane, then of adopting another pane
twice. Run as ``python -m tests.control.own_pane`` with a service environment.
"""

from __future__ import annotations

import asyncio
import sys

from protocol.errors import PanewardenError
from supervisor.config import load_config
from supervisor.control.controllers import Attested
from supervisor.front.runtime import running_service
from supervisor.panes.pane import Pane, wait_for_status
from tests.control.support import AUTHORITY_SHA

SETTLE_S = 30.0


async def idle_seq(pane: Pane) -> int:
    status, timed_out = await wait_for_status(pane, {"idle"}, None, SETTLE_S)
    assert not timed_out, f"pane {pane.name} never went idle"
    return status.seq


async def main() -> int:
    async with running_service(load_config()) as services:
        lifecycle, adopted = services.panes.lifecycle, services.lanes.adopted
        own = await lifecycle.start_pane("own", "demo", cwd="/")
        other = await lifecycle.start_pane("other", "demo", cwd="/")
        identity = f"pane:own:{own.handle.instance}"
        await services.control.authority.acquire(identity, "boss", "issue-8", AUTHORITY_SHA, None)
        creds = Attested("boss")
        codes: list[str] = []
        try:
            await adopted.adopt(identity, creds, "own", await idle_seq(own), "x", AUTHORITY_SHA)
        except PanewardenError as exc:
            codes.append(exc.code.value)
        seq = await idle_seq(other)
        await adopted.adopt(identity, creds, "other", seq, "x", AUTHORITY_SHA)
        try:
            await adopted.adopt(identity, creds, "other", seq, "x", AUTHORITY_SHA)
        except PanewardenError as exc:
            codes.append(exc.code.value)
        print(" ".join(codes))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
