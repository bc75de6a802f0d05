"""The one way a test waits on state that offers no event: poll with a deadline.

For what lies outside the service (the process table, files, a pane's screen read by a
client that only polls): ``poll`` in plain code, ``apoll`` in async tests (its predicate
may itself be a coroutine function). Both return the predicate's last value, so the
caller can assert on it with a useful message; ``what`` makes them raise instead.
Every wait has a deadline; the interval starts short and grows to ``MAX_INTERVAL_S``.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

import anyio

T = TypeVar("T")

FIRST_INTERVAL_S = 0.002
MAX_INTERVAL_S = 0.05


def _intervals(fixed_s: float | None) -> Callable[[], float]:
    """The pauses between calls: ``fixed_s`` each, or doubling from the first to the max."""
    state = {"next": fixed_s or FIRST_INTERVAL_S}

    def step() -> float:
        value = state["next"]
        if fixed_s is None:
            state["next"] = min(value * 2, MAX_INTERVAL_S)
        return value

    return step


def poll(
    predicate: Callable[[], T],
    timeout_s: float,
    *,
    what: str | None = None,
    interval_s: float | None = None,
) -> T:
    """Call ``predicate`` until it returns something truthy or ``timeout_s`` passes.

    Returns its last value; with ``what``, a falsy last value raises AssertionError.
    ``interval_s`` fixes the pause between calls (a predicate that is costly to call).
    """
    deadline = time.monotonic() + timeout_s
    interval = _intervals(interval_s)
    value = predicate()
    while not value:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        time.sleep(min(interval(), remaining))
        value = predicate()
    if what is not None and not value:
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
    return value


@overload
async def apoll(
    predicate: Callable[[], Awaitable[T]],
    timeout_s: float,
    *,
    what: str | None = None,
    interval_s: float | None = None,
) -> T: ...


@overload
async def apoll(
    predicate: Callable[[], T],
    timeout_s: float,
    *,
    what: str | None = None,
    interval_s: float | None = None,
) -> T: ...


async def apoll(
    predicate: Callable[[], Any],
    timeout_s: float,
    *,
    what: str | None = None,
    interval_s: float | None = None,
) -> Any:
    """``poll`` for async tests: sleeps without blocking the loop; ``predicate`` may be
    a plain function or a coroutine function."""
    deadline = time.monotonic() + timeout_s
    interval = _intervals(interval_s)

    async def value_now() -> Any:
        got = predicate()
        return await got if inspect.isawaitable(got) else got

    value = await value_now()
    while not value:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        await anyio.sleep(min(interval(), remaining))
        value = await value_now()
    if what is not None and not value:
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
    return value
