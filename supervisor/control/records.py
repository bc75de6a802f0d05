"""The durable records of the coordination layer (docs/design.md §7, §8).

All are msgspec Structs with a ``version``, stored one file each (see
:mod:`supervisor.store.records`). None holds a secret in the clear (fence tokens only as
SHA-256), a prompt, screen output, argv or environment: results are kept as digests.

State machines (every transition is in the module that owns the record):

- controller lease: ``active`` → ``released`` (by its holder, with a checkpoint) or
  ``superseded`` (resumed or taken over: a new lease, generation + 1, names it as its
  predecessor). ``active`` past ``expires_at`` is *expired*: refused as credentials,
  open to takeover.
- pane lease (reviewer, writer, adopted): ``provisioning`` → ``active`` →
  ``closing``/``releasing`` → ``closed``/``released``; ``failed_closed`` when a start
  failed (nothing left running); ``release_failed`` when a release could not finish;
  ``orphaned`` when its pane was found gone at a restart (see
  :mod:`supervisor.control.startup`); ``abandoned`` when a controller closed a writer
  lane by force (``writer_close``: its pane killed, nothing checked or imported).
  *Retained* states keep the pane leased and block conflicting leases.
- receipt: ``reserved`` (admitted, delivery under way or ambiguous) → ``pending``
  (the pane entered the prompt's turn) → ``completed`` (that turn settled and was
  collected); ``failed`` (delivery refused, pane gone or re-created); ``abandoned``
  (an ambiguous one released by the controller once the pane was seen settled).
  ``reserved`` and ``pending`` are *outstanding*: they block new prompts to the pane.
  Which event moves a receipt from which state is the table of
  :mod:`supervisor.control.receipt_book`, the only writer of receipts.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from supervisor.panes.pane import PaneLeaseType

RECORD_VERSION = 1

ControllerState = Literal["active", "released", "superseded"]
PaneLeaseState = Literal[
    "provisioning",
    "active",
    "closing",
    "closed",
    "releasing",
    "released",
    "release_failed",
    "failed_closed",
    "orphaned",
    "abandoned",
]
ReceiptState = Literal["reserved", "pending", "completed", "failed", "abandoned"]

RETAINED_STATES: frozenset[str] = frozenset(
    {"provisioning", "active", "closing", "releasing", "release_failed", "orphaned"}
)
OUTSTANDING_RECEIPTS: frozenset[str] = frozenset({"reserved", "pending"})


class ControllerLease(msgspec.Struct, forbid_unknown_fields=True):
    """One generation of a controller's authority."""

    version: int
    lease_id: str
    controller_id: str
    # Who holds it: "http:<client>", "stdio", or "pane:<name>:<instance>".
    identity: str
    generation: int
    fence_sha256: str
    state: ControllerState
    authority_ref: str
    authority_sha256: str
    ttl_s: int
    created_at: float
    renewed_at: float
    expires_at: float
    predecessor_lease_id: str | None = None
    ended_at: float | None = None
    checkpoint_ref: str | None = None
    checkpoint_sha256: str | None = None


class WriterTerms(msgspec.Struct, forbid_unknown_fields=True):
    """What a writer lane was admitted with (Git evidence, scopes)."""

    repository: str  # the git common dir: one repository, whatever the worktree
    worktree: str
    branch: str
    base_commit: str
    head: str
    status_sha256: str
    owned_scopes: list[str]
    locked_scopes: list[str]
    protected_branches: list[str]
    ticket_ref: str
    release_head: str | None = None
    release_status_sha256: str | None = None
    # The recipes file at the base commit as writer_start read it (verify runs these,
    # never a later read of the object store); None: no such file. Leases from before
    # the capture have recipes_captured False.
    base_recipes: bytes | None = None
    recipes_captured: bool = False
    # How many of the lane's new objects its release imported into the shared store.
    imported_objects: int | None = None
    # Why the controller closed the lane by force (writer_close).
    close_reason: str | None = None


class PaneLease(msgspec.Struct, forbid_unknown_fields=True):
    """A controller's lease on one pane: reviewer, writer, or adopted (cleanup-only)."""

    version: int
    lease_id: str
    lease_type: PaneLeaseType
    controller_id: str
    name: str
    state: PaneLeaseState
    created_at: float
    updated_at: float
    purpose: str = ""
    # The pane's worker instance once it runs: a pane re-created under the same name is
    # another instance, never this lease's.
    instance: str | None = None
    profile: str | None = None
    cwd: str | None = None
    authority_ref: str | None = None
    authority_sha256: str | None = None
    checkpoint_ref: str | None = None
    checkpoint_sha256: str | None = None
    closed_seq: int | None = None
    capture_sha256: str | None = None
    failure: str | None = None
    writer: WriterTerms | None = None
    # Its pane runs in a sandbox (set when it turns active). Records from before panes
    # were confined load as False, which they were.
    confined: bool = False
    # The pane identity (``pane:<name>:<instance>``) that started it over ctl: it ends
    # with that pane (supervisor.lanes.starters). None: a client started it.
    started_by: str | None = None


class SettledStatus(msgspec.Struct, forbid_unknown_fields=True):
    """A pane status as a receipt keeps it (no output)."""

    lifecycle: str
    state: str
    kind: str | None
    turn: int
    seq: int
    source: str
    exit_code: int | None = None


class Receipt(msgspec.Struct, forbid_unknown_fields=True):
    """A prompt handed to a leased pane, bound to the turn it started."""

    version: int
    receipt_id: str
    controller_id: str
    lease_id: str
    lease_type: PaneLeaseType
    name: str
    instance: str
    state: ReceiptState
    created_at: float
    updated_at: float
    # The pane's seq before the prompt was typed, and the turn the prompt started.
    cursor: int | None = None
    turn: int | None = None
    result: SettledStatus | None = None
    capture_sha256: str | None = None
    failure_stage: str | None = None
    failure_code: str | None = None
