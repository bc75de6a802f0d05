"""Controller leases: which caller holds a controller's authority, and the fence on it.

One lease per ``controller_id`` is current: the one with the highest generation.
``acquire`` makes generation 1 (or the next one after a release); ``resume`` rotates
the lease id and fence for the same caller identity (a client restarted, a context
cleared); ``takeover`` hands an *expired* lease to another identity, naming the
predecessor it expects; ``renew`` extends; ``release`` ends the generation with a
checkpoint. Pane leases (reviewer, writer, adopted) outlive their controller's
generations: a resumed or taken-over controller finds them.

A lease is bound to the caller identity (HTTP client name, ``stdio``, or a pane attested
by ``panewarden ctl``): credentials presented by another identity are refused like a
wrong token. A pane's controller ids live in its own namespace (``pane:<name>/<id>``,
``controller_id_for``): a pane never names, acquires or inherits a client's controller.
A release ends what the holder may hand on: the next ``acquire`` of that id by another
identity is refused while pane leases of the released generation are retained (they
stay the releasing holder's to re-acquire and close), so no pane lease is ever carried
to a new identity through a release. ``check`` must run under the controller store's
lock, immediately before the mutation it guards: a lease that expired while the call
waited for the lock is refused after the lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from protocol.errors import ErrorCode, PanewardenError
from supervisor.control.fences import new_id, new_token, token_digest, token_matches
from supervisor.control.records import RECORD_VERSION, RETAINED_STATES, ControllerLease
from supervisor.control.stores import ControlStores

DEFAULT_TTL_S = 900
MAX_TTL_S = 1800
MIN_TTL_S = 60
# Identities the service attested itself (a pane, by process ancestry).
ATTESTED_PREFIX = "pane:"
# How many controller ids one pane may hold leases of (any state): its namespace is its
# own, but every id is a record on disk.
MAX_CONTROLLERS_PER_PANE = 8


def pane_identity(name: str, instance: str) -> str:
    """``pane:<name>:<instance>``: the identity of a caller attested in that pane."""
    return f"{ATTESTED_PREFIX}{name}:{instance}"


def pane_of_identity(identity: str) -> str | None:
    """The pane name a ``pane:<name>:<instance>`` identity is, if it is one."""
    if not identity.startswith(ATTESTED_PREFIX):
        return None
    return identity[len(ATTESTED_PREFIX) :].split(":", 1)[0]


def controller_id_for(identity: str, requested: str) -> str:
    """The controller id ``identity`` means by ``requested``: a pane's ids are
    ``pane:<name>/<requested>``, every other caller's are its own words (never one in
    a pane's namespace).

    Raises:
        PanewardenError: ``invalid_argument`` when a caller that is no pane names an id
            in a pane's namespace.
    """
    pane = pane_of_identity(identity)
    if pane is None:
        if requested.startswith(ATTESTED_PREFIX):
            raise PanewardenError(
                ErrorCode.INVALID_ARGUMENT,
                f"controller ids starting {ATTESTED_PREFIX!r} belong to panes",
            )
        return requested
    prefix = f"{ATTESTED_PREFIX}{pane}/"
    return requested if requested.startswith(prefix) else prefix + requested


@dataclass(frozen=True)
class Creds:
    """What a caller presents for a mutation: the lease and its fence token."""

    controller_id: str
    lease_id: str
    fence_token: str


@dataclass(frozen=True)
class Attested:
    """A caller proven by the service itself (``panewarden ctl`` in a pane, attested by
    its process ancestry): it names its controller and presents no token, because the
    lease is held by that very pane and no fence token ever leaves the service."""

    controller_id: str


Credentials = Creds | Attested


@dataclass(frozen=True)
class Granted:
    """A new lease and the fence token that goes to its caller once, and nowhere else."""

    lease: ControllerLease
    fence_token: str


def _refused(why: str) -> PanewardenError:
    return PanewardenError(ErrorCode.FENCE_INVALID, f"the controller credentials {why}")


class ControllerAuthority:
    """Acquire, resume, take over, renew, release and check controller leases."""

    def __init__(
        self,
        stores: ControlStores,
        *,
        min_ttl_s: int = MIN_TTL_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._stores = stores
        self._min_ttl_s = min_ttl_s
        self._clock = clock

    # ------------------------------------------------------------ reading

    def current(self, controller_id: str) -> ControllerLease | None:
        """The current lease of ``controller_id`` (highest generation), if any."""
        found = [
            lease
            for lease in self._stores.controller.load_all()[0].values()
            if lease.controller_id == controller_id
        ]
        return max(found, key=lambda lease: lease.generation, default=None)

    def leases(self) -> list[ControllerLease]:
        """Every controller's current lease, by controller id."""
        latest: dict[str, ControllerLease] = {}
        for lease in self._stores.controller.load_all()[0].values():
            held = latest.get(lease.controller_id)
            if held is None or lease.generation > held.generation:
                latest[lease.controller_id] = lease
        return [latest[k] for k in sorted(latest)]

    def expired(self, lease: ControllerLease) -> bool:
        """True for an active lease past its expiry."""
        return lease.state == "active" and self._clock() >= lease.expires_at

    def check(self, identity: str, creds: Credentials) -> ControllerLease:
        """The lease ``creds`` name, if they are valid for ``identity`` right now.

        Call it under the controller store's lock, just before the mutation.

        Raises:
            PanewardenError: ``fence_invalid`` (wrong, superseded, released or expired
                credentials, or another caller's), never saying what the token was.
        """
        if isinstance(creds, Attested):
            if not identity.startswith(ATTESTED_PREFIX):
                raise _refused("need a fence token from this caller")
            return self.held_by(identity, controller_id_for(identity, creds.controller_id))
        try:
            lease = self._stores.controller.load(creds.lease_id)
        except PanewardenError:
            lease = None
        if lease is None or lease.controller_id != creds.controller_id:
            raise _refused("name no lease of that controller")
        if not token_matches(creds.fence_token, lease.fence_sha256) or lease.identity != identity:
            raise _refused("do not match the lease")
        current = self.current(lease.controller_id)
        if current is None or current.lease_id != lease.lease_id:
            # A crash between writing a successor and marking this one superseded
            # leaves it `active` on disk: the successor alone holds the authority.
            raise _refused("were superseded by a resume or a takeover")
        self._check_live(lease)
        return lease

    def held_by(self, identity: str, controller_id: str) -> ControllerLease:
        """The current lease of ``controller_id`` if ``identity`` holds it and it is live
        (for callers attested without a token: ``panewarden ctl`` in a pane).

        Raises:
            PanewardenError: ``fence_invalid`` otherwise.
        """
        lease = self.current(controller_id)
        if lease is None or lease.identity != identity:
            raise _refused("are not held by this caller")
        self._check_live(lease)
        return lease

    def _check_live(self, lease: ControllerLease) -> None:
        if lease.state == "superseded":
            raise _refused("were superseded by a resume or a takeover")
        if lease.state == "released":
            raise _refused("were released")
        if self.expired(lease):
            raise _refused("expired; resume or take over the lease")

    # ------------------------------------------------------------ changes

    def _ttl(self, ttl_s: int | None) -> int:
        ttl = DEFAULT_TTL_S if ttl_s is None else ttl_s
        if not self._min_ttl_s <= ttl <= MAX_TTL_S:
            raise PanewardenError(
                ErrorCode.INVALID_ARGUMENT,
                f"ttl_s must be {self._min_ttl_s}..{MAX_TTL_S} seconds",
            )
        return ttl

    def _grant(
        self,
        identity: str,
        controller_id: str,
        authority_ref: str,
        authority_sha256: str,
        ttl: int,
        predecessor: ControllerLease | None,
    ) -> Granted:
        now = self._clock()
        token = new_token()
        lease = ControllerLease(
            version=RECORD_VERSION,
            lease_id=new_id("ctl"),
            controller_id=controller_id,
            identity=identity,
            generation=1 if predecessor is None else predecessor.generation + 1,
            fence_sha256=token_digest(token),
            state="active",
            authority_ref=authority_ref,
            authority_sha256=authority_sha256,
            ttl_s=ttl,
            created_at=now,
            renewed_at=now,
            expires_at=now + ttl,
            predecessor_lease_id=None if predecessor is None else predecessor.lease_id,
        )
        # The new generation first: a crash between the writes leaves two records, and
        # the higher generation is current; never no lease at all.
        self._stores.controller.save(lease.lease_id, lease)
        if predecessor is not None:
            if predecessor.state == "active":
                self._stores.controller.save(
                    predecessor.lease_id,
                    _replace(predecessor, state="superseded", ended_at=now),
                )
            self._prune(controller_id, keep={lease.lease_id, predecessor.lease_id})
        return Granted(lease, token)

    def _prune(self, controller_id: str, keep: set[str]) -> None:
        """Keep a controller's current lease and its predecessor only."""
        for key, lease in self._stores.controller.load_all()[0].items():
            if lease.controller_id == controller_id and key not in keep:
                self._stores.controller.delete(key)

    async def acquire(
        self,
        identity: str,
        controller_id: str,
        authority_ref: str,
        authority_sha256: str,
        ttl_s: int | None,
    ) -> Granted:
        """The first generation, or the next after a release; ``lease_conflict`` while a
        lease (expired or not) is active."""
        ttl = self._ttl(ttl_s)
        controller_id = controller_id_for(identity, controller_id)
        async with self._stores.locks.hold("controller"):
            current = self.current(controller_id)
            if current is not None and current.state == "active":
                how = "expired; take it over" if self.expired(current) else "active"
                raise PanewardenError(
                    ErrorCode.LEASE_CONFLICT,
                    f"controller {controller_id!r} already has a lease ({how})",
                )
            if current is not None and current.identity != identity:
                self._nothing_carried(current)
            self._one_per_pane(identity, controller_id)
            return self._grant(
                identity, controller_id, authority_ref, authority_sha256, ttl, current
            )

    def _nothing_carried(self, released: ControllerLease) -> None:
        """Refuse to hand a released controller to another identity while pane leases
        of it are retained: they were granted to the releasing holder, and a release is
        no hand-over (``takeover`` of an expired lease, naming it, is)."""
        kept = [
            lease
            for store in self._stores.pane_leases.values()
            for lease in store.load_all()[0].values()
            if lease.controller_id == released.controller_id and lease.state in RETAINED_STATES
        ]
        if kept:
            raise PanewardenError(
                ErrorCode.LEASE_CONFLICT,
                f"controller {released.controller_id!r} was released by another caller with "
                f"{len(kept)} pane lease(s) still retained; only that caller may acquire it "
                "until they are closed",
            )

    def _one_per_pane(self, identity: str, controller_id: str) -> None:
        """A pane holds one live controller lease at a time (``panewarden ctl`` names no
        controller, the service finds the one its pane holds), and leases of at most
        ``MAX_CONTROLLERS_PER_PANE`` controller ids."""
        if not identity.startswith(ATTESTED_PREFIX):
            return
        held = {lease.controller_id for lease in self.leases() if lease.identity == identity}
        if controller_id not in held and len(held) >= MAX_CONTROLLERS_PER_PANE:
            raise PanewardenError(
                ErrorCode.LEASE_CONFLICT,
                f"a pane holds leases of at most {MAX_CONTROLLERS_PER_PANE} controller ids",
            )
        for lease in self.leases():
            if (
                lease.identity == identity
                and lease.controller_id != controller_id
                and lease.state == "active"
                and not self.expired(lease)
            ):
                raise PanewardenError(
                    ErrorCode.LEASE_CONFLICT,
                    f"this pane already holds controller {lease.controller_id!r}'s lease; "
                    "release it first",
                )

    async def resume(
        self,
        identity: str,
        controller_id: str,
        authority_ref: str,
        authority_sha256: str,
        ttl_s: int | None,
    ) -> Granted:
        """A new lease id and fence for the same identity; the old credentials die."""
        ttl = self._ttl(ttl_s)
        controller_id = controller_id_for(identity, controller_id)
        async with self._stores.locks.hold("controller"):
            current = self.current(controller_id)
            if current is None:
                raise PanewardenError(
                    ErrorCode.NOT_FOUND, f"controller {controller_id!r} has no lease"
                )
            if current.identity != identity:
                raise PanewardenError(
                    ErrorCode.LEASE_CONFLICT,
                    f"controller {controller_id!r} is held by another caller",
                )
            if current.state != "active":
                raise PanewardenError(
                    ErrorCode.LEASE_STATE,
                    f"controller {controller_id!r}'s lease is {current.state}; acquire a new one",
                )
            return self._grant(
                identity, controller_id, authority_ref, authority_sha256, ttl, current
            )

    async def takeover(
        self,
        identity: str,
        controller_id: str,
        expected_predecessor_lease_id: str,
        authority_ref: str,
        authority_sha256: str,
        ttl_s: int | None,
    ) -> Granted:
        """Take an expired lease, if it is still the one the caller expects."""
        ttl = self._ttl(ttl_s)
        controller_id = controller_id_for(identity, controller_id)
        async with self._stores.locks.hold("controller"):
            current = self.current(controller_id)
            if current is None or current.lease_id != expected_predecessor_lease_id:
                raise PanewardenError(
                    ErrorCode.LEASE_CONFLICT,
                    "the expected predecessor is not the controller's current lease",
                )
            if current.state != "active":
                raise PanewardenError(
                    ErrorCode.LEASE_STATE,
                    f"the lease is {current.state}; acquire a new one instead",
                )
            if not self.expired(current):
                raise PanewardenError(
                    ErrorCode.LEASE_CONFLICT,
                    "the lease has not expired; only its holder may renew or release it",
                )
            return self._grant(
                identity, controller_id, authority_ref, authority_sha256, ttl, current
            )

    async def renew(self, identity: str, creds: Credentials, ttl_s: int | None) -> ControllerLease:
        """Extend a live lease by ``ttl_s`` from now."""
        ttl = self._ttl(ttl_s)
        async with self._stores.locks.hold("controller"):
            lease = self.check(identity, creds)
            now = self._clock()
            renewed = _replace(lease, renewed_at=now, expires_at=now + ttl, ttl_s=ttl)
            self._stores.controller.save(lease.lease_id, renewed)
            return renewed

    async def release(
        self, identity: str, creds: Credentials, checkpoint_ref: str, checkpoint_sha256: str
    ) -> ControllerLease:
        """End the generation with a durable checkpoint; pane leases stay."""
        async with self._stores.locks.hold("controller"):
            lease = self.check(identity, creds)
            released = _replace(
                lease,
                state="released",
                ended_at=self._clock(),
                checkpoint_ref=checkpoint_ref,
                checkpoint_sha256=checkpoint_sha256,
            )
            self._stores.controller.save(lease.lease_id, released)
            return released


def _replace(lease: ControllerLease, **changes: object) -> ControllerLease:
    return msgspec.structs.replace(lease, **changes)
