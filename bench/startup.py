"""How long a pane takes to start, over what its program itself takes.

The program is ``quick`` (a shell that reports ``idle`` over OSC 7501 at once). Its own
start is measured bare: spawned on a fresh PTY by this process, from the spawn until its
report comes out of the PTY. Through the real service over MCP stdio, one pane at a
time: from the ``start_pane`` call until ``wait_status(until=idle)`` returns, minus the
program's own start (median): the service's overhead, p50 and p99 over the starts; and
``start_pane`` alone (until the worker said hello). The same with the worker template
off (every worker started cold) in the same run is the reference. Then 64 panes are
started at once: how many failed, and how long until all were idle. Those runs are
unconfined; the same sequential starts confined (the program in its Bubblewrap sandbox,
a profile with ``confine: true``) alternate with unconfined ones in one service: what
confinement adds to a start, with ``network: "none"`` (the sandbox alone) and with the
default ``["public"]`` (the sandbox, the forwarder inside and the worker's egress proxy).
"""

from __future__ import annotations

import asyncio
import os
import select
import statistics
import subprocess
import time
from collections.abc import Sequence

from bench.core import Figure, Options
from bench.service import QUICK_ARGV, Service, bench_service

REPORT = b"\x1b]7501;state=idle"


def own_start_ms(runs: int) -> list[float]:
    """Spawn the quick program on a PTY; ms until its status report is read."""
    out: list[float] = []
    for _ in range(runs):
        master, slave = os.openpty()
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            QUICK_ARGV, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
        os.close(slave)
        seen = b""
        try:
            while REPORT not in seen:
                ready, _, _ = select.select([master], [], [], 10)
                if not ready:
                    raise TimeoutError("the quick program never reported")
                seen += os.read(master, 4096)
            out.append((time.perf_counter() - t0) * 1000)
        finally:
            proc.kill()
            proc.wait()
            os.close(master)
    return out


async def _sequential(service: Service, runs: int) -> tuple[list[float], list[float]]:
    """(start_pane → idle, start_pane alone) in ms, one pane at a time."""
    to_idle: list[float] = []
    to_hello: list[float] = []
    for i in range(runs):
        name = f"s{i}"
        t0 = time.perf_counter()
        await service.call("start_pane", name=name, profile="quick")
        t1 = time.perf_counter()
        await service.call("wait_status", name=name, until=["idle"], timeout_s=60)
        t2 = time.perf_counter()
        to_hello.append((t1 - t0) * 1000)
        to_idle.append((t2 - t0) * 1000)
        await service.call("remove_pane", name=name)
    return to_idle, to_hello


async def _parallel(service: Service, count: int) -> tuple[int, float]:
    """Start ``count`` panes at once; (failures, ms until all were idle)."""

    async def one(i: int) -> bool:
        started = await service.try_call("start_pane", name=f"p{i}", profile="quick")
        if started is None:
            return False
        idle = await service.try_call("wait_status", name=f"p{i}", until=["idle"], timeout_s=60)
        return idle is not None and not idle["timed_out"]

    t0 = time.perf_counter()
    results = await asyncio.gather(*(one(i) for i in range(count)))
    elapsed = (time.perf_counter() - t0) * 1000
    await asyncio.gather(
        *(service.try_call("remove_pane", name=f"p{i}") for i in range(count) if results[i])
    )
    return results.count(False), elapsed


async def _measure(runs: int, parallel: int, template: str) -> dict[str, list[float]]:
    async with bench_service(
        PANEWARDEN_WORKER_TEMPLATE=template, PANEWARDEN_CONFINE="off"
    ) as service:
        # One start first: the template, started with the service, is ready after it.
        await _sequential(service, 1)
        to_idle, to_hello = await _sequential(service, runs)
        out = {"to_idle": to_idle, "to_hello": to_hello}
        if parallel:
            failures, elapsed = await _parallel(service, parallel)
            out |= {"failures": [float(failures)], "parallel_ms": [elapsed]}
    return out


async def _confined_vs_plain(runs: int) -> tuple[list[float], list[float], list[float]]:
    """start_pane -> idle (ms) of unconfined starts and confined ones (``network:
    "none"``, and unset: ``["public"]``), alternating."""
    boxed = {"agent": "generic", "argv": QUICK_ARGV, "cwds": ["/"], "confine": True}
    profiles = [
        boxed | {"name": "quick-confined", "network": "none"},
        boxed | {"name": "quick-public"},
    ]
    plain: list[float] = []
    confined: list[float] = []
    public: list[float] = []
    async with bench_service(profiles, PANEWARDEN_CONFINE="off") as service:
        for i in range(runs + 1):
            for profile, into in (
                ("quick", plain),
                ("quick-confined", confined),
                ("quick-public", public),
            ):
                name = f"c{i}-{profile}"
                t0 = time.perf_counter()
                await service.call("start_pane", name=name, profile=profile)
                await service.call("wait_status", name=name, until=["idle"], timeout_s=60)
                if i:  # the first round warms the template and the sandbox's files
                    into.append((time.perf_counter() - t0) * 1000)
                await service.call("remove_pane", name=name)
    return plain, confined, public


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def run(options: Options) -> Sequence[Figure]:
    runs = 3 if options.smoke else 100
    parallel = 4 if options.smoke else 64
    own = own_start_ms(5 if options.smoke else 30)
    own_median = statistics.median(own)
    warm = asyncio.run(_measure(runs, parallel, "on"))
    cold = asyncio.run(_measure(runs, 0, "off"))
    plain, confined, public = asyncio.run(_confined_vs_plain(runs))
    plain_median = statistics.median(plain)
    added = [v - plain_median for v in confined]
    added_public = [v - plain_median for v in public]
    over_warm = [v - own_median for v in warm["to_idle"]]
    over_cold = [v - own_median for v in cold["to_idle"]]
    return [
        Figure("startup.program_own_start", "ms", own, note="quick program on a bare PTY"),
        Figure(
            "startup.confined_extra_p50",
            "ms",
            added,
            goal="<= 10 ms over an unconfined start",
            limit=10.0,
            limit_on_ratio=False,
            note='confined (network "none") start_pane -> idle minus the unconfined median, '
            "alternating starts",
        ),
        Figure(
            "startup.confined_public_extra_p50",
            "ms",
            added_public,
            goal="<= 40 ms over an unconfined start",
            limit=40.0,
            limit_on_ratio=False,
            note='confined, network unset (["public"]: forwarder and egress proxy), minus the '
            "unconfined median, alternating starts",
        ),
        Figure(
            "startup.overhead_p50",
            "ms",
            over_warm,
            reference="cold start",
            reference_values=over_cold,
            goal="<= 20 ms over the program's own start",
            limit=20.0,
            limit_on_ratio=False,
            note="start_pane -> first idle, minus the program's own start",
        ),
        Figure(
            "startup.overhead_p99",
            "ms",
            [_p99(over_warm)],
            reference="cold start",
            reference_values=[_p99(over_cold)],
            goal="<= 60 ms",
            limit=60.0,
            limit_on_ratio=False,
        ),
        Figure(
            "startup.start_pane_call",
            "ms",
            warm["to_hello"],
            reference="cold start",
            reference_values=cold["to_hello"],
            note="until start_pane returns (the worker said hello)",
        ),
        Figure(
            f"startup.parallel_{parallel}_failures",
            "panes",
            warm["failures"],
            goal="0",
            limit=0.0,
        ),
        Figure(f"startup.parallel_{parallel}_all_idle", "ms", warm["parallel_ms"]),
    ]
