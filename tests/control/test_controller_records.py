"""Controller leases over their durable records: the states a crash between two writes
can leave must not hand authority to superseded credentials.

A resume (or takeover) writes the new generation first and then marks its predecessor
``superseded``; a crash between the two writes leaves both records ``active``. These
tests build that state with the real authority and real files.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from protocol.errors import ErrorCode, PanewardenError
from supervisor.control.controllers import ControllerAuthority, Creds
from supervisor.control.stores import ControlStores
from tests.control.support import AUTHORITY_SHA

pytestmark = pytest.mark.anyio

IDENTITY = "http:alice"


async def test_a_predecessor_left_active_by_a_crash_is_refused(tmp_path: Path) -> None:
    stores = ControlStores(tmp_path, lock_wait_s=1)
    authority = ControllerAuthority(stores, min_ttl_s=1)
    first = await authority.acquire(IDENTITY, "boss", "ref", AUTHORITY_SHA, None)
    second = await authority.resume(IDENTITY, "boss", "ref", AUTHORITY_SHA, None)
    # The crash: the new generation was written, the old one not yet marked superseded.
    stores.controller.save(first.lease.lease_id, first.lease)
    assert {r.state for r in stores.controller.load_all()[0].values()} == {"active"}

    old = Creds("boss", first.lease.lease_id, first.fence_token)
    with pytest.raises(PanewardenError) as refused:
        authority.check(IDENTITY, old)
    assert refused.value.code is ErrorCode.FENCE_INVALID
    with pytest.raises(PanewardenError) as refused:
        await authority.renew(IDENTITY, old, None)
    assert refused.value.code is ErrorCode.FENCE_INVALID
    new = Creds("boss", second.lease.lease_id, second.fence_token)
    assert authority.check(IDENTITY, new).lease_id == second.lease.lease_id
    assert [lease.lease_id for lease in authority.leases()] == [second.lease.lease_id]


async def test_a_takeover_interrupted_the_same_way_leaves_the_old_holder_nothing(
    tmp_path: Path,
) -> None:
    stores = ControlStores(tmp_path, lock_wait_s=1)
    clock = [1000.0]
    authority = ControllerAuthority(stores, min_ttl_s=1, clock=lambda: clock[0])
    first = await authority.acquire(IDENTITY, "boss", "ref", AUTHORITY_SHA, 60)
    clock[0] += 61
    taken = await authority.takeover(
        "http:bob", "boss", first.lease.lease_id, "r", AUTHORITY_SHA, 60
    )
    # Crash before the predecessor was marked; then alice renews... with a clock that
    # never moved on (the expiry alone must not be what refuses her).
    stores.controller.save(
        first.lease.lease_id, msgspec.structs.replace(first.lease, expires_at=clock[0] + 600)
    )
    with pytest.raises(PanewardenError) as refused:
        authority.check(IDENTITY, Creds("boss", first.lease.lease_id, first.fence_token))
    assert refused.value.code is ErrorCode.FENCE_INVALID
    assert authority.check("http:bob", Creds("boss", taken.lease.lease_id, taken.fence_token))
