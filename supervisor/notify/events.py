"""Which pane status changes are events, and the body every target gets.

A state event (``blocked``, ``done``, ``cancelled``, ``error``) is one transition into
that state: a record whose (state, turn) differs from the record before it. A repeated
record with the same state and turn (a new kind, source or exit code) is no new event.
A lifecycle event (``exited``, ``lost``) is the first record in that lifecycle. The body
holds the pane's names and status fields only, never any screen text.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass

from protocol.messages import PaneStatusFields

STATE_EVENTS = frozenset({"blocked", "done", "cancelled", "error"})
LIFECYCLE_EVENTS = frozenset({"exited", "lost"})


@dataclass(frozen=True)
class PaneRef:
    """The names of the pane an event is about."""

    name: str
    profile: str
    agent: str


def status_events(old: PaneStatusFields, new: PaneStatusFields) -> list[str]:
    """The events the change from ``old`` to ``new`` is (usually none)."""
    found: list[str] = []
    if new.state in STATE_EVENTS and (new.state, new.turn) != (old.state, old.turn):
        found.append(new.state)
    if new.lifecycle in LIFECYCLE_EVENTS and new.lifecycle != old.lifecycle:
        found.append(new.lifecycle)
    return found


def iso_utc(at: float) -> str:
    """``at`` (epoch seconds) as ISO 8601 UTC with milliseconds, ``Z`` suffix."""
    moment = datetime.datetime.fromtimestamp(at, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def event_body(
    event: str, service: str, pane: PaneRef, status: PaneStatusFields, at: float
) -> bytes:
    """The JSON every target of ``event`` gets (webhook body, command stdin)."""
    body = {
        "event": event,
        "service": service,
        "pane": pane.name,
        "profile": pane.profile,
        "agent": pane.agent,
        "state": status.state,
        "kind": status.kind,
        "turn": status.turn,
        "seq": status.seq,
        "at": iso_utc(at),
    }
    return json.dumps(body, separators=(",", ":")).encode()
