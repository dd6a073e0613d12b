"""A lease that was lost, not lapsed (proxy/replica_lease.py, proxy/replicas.py), in-process
on the memory store with a hand-turned clock.

The holder that finds its lease missing less than a lease after its last renewal (or
right after the store was unreachable) takes it again and keeps its fencing token, so
its sessions live on; found missing after a lease (paused past it) it loses them, as
before; and it loses them also when another replica reaped it meanwhile
(``reaper:<owner>`` held). Another replica presumes a lease found missing alive for half a
lease and reaps it only once it was missing at two looks that far apart.
(tests/test_replicas_lease_lost.py shows it with real replicas on Redis.)
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from proxy.core.errors import SessionNotFound
from proxy.forwarding import Acked, Forwarded, Reply
from proxy.replicas import Relay, Replicas
from proxy.store.base import LIVE, Batch, SessionRecord, StoreError, StreamRecord
from proxy.store.fencing import Fence
from proxy.store.memory import MemoryStore

LEASE = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def serve(request: Forwarded, relay: Relay) -> Reply:
    return Acked()


@pytest.fixture
async def started() -> AsyncIterator[list[Replicas]]:
    """The replicas a test started, stopped after it."""
    running: list[Replicas] = []
    yield running
    for replicas in running:
        await replicas.stop()


class Replica:
    """A started Replicas whose loops do not come round in a test (a lease of 10 s): the
    test turns renew_once and reap_once itself."""

    def __init__(self, memory_store: MemoryStore, owner: str, clock: Clock) -> None:
        self.fence = Fence(owner)
        self.lost: list[str] = []
        self.fence.on_lost(self.lost.append)
        self.replicas = Replicas(memory_store, owner, LEASE, 60.0, serve, self.fence, clock)

    async def join(self, started: list[Replicas]) -> Replica:
        await self.replicas.start()
        started.append(self.replicas)
        return self


async def live_stream(memory_store: MemoryStore, owner: str, fence: str) -> str:
    key = f"{owner}0000.1"
    batch = Batch([StreamRecord(key, f"s-{owner}", owner)], fence=fence, owner=owner)
    assert await memory_store.commit(batch, time.time()) == []
    return key


async def lose_lease(memory_store: MemoryStore, owner: str) -> None:
    """Its key goes (a master lost, a flush of that key): not a lapse."""
    await memory_store.release_lease(f"replica:{owner}", owner)


@contextlib.contextmanager
def stalled(memory_store: MemoryStore, method: str, clock: Clock) -> Iterator[None]:
    """Redis frozen for a lease and a half with ``method``'s command in its socket: a's
    lease key expires meanwhile by the store's own clock; then the command runs."""
    original = getattr(memory_store, method)

    async def late(*args: Any) -> Any:
        clock.now += LEASE * 1.5
        await lose_lease(memory_store, "a")
        return await original(*args)

    setattr(memory_store, method, late)
    try:
        yield
    finally:
        setattr(memory_store, method, original)


async def test_a_lease_lost_soon_after_its_renewal_is_taken_again_keeping_the_sessions(
    memory_store: MemoryStore, started: list[Replicas]
) -> None:
    clock = Clock()
    a = await Replica(memory_store, "a", clock).join(started)
    token = a.fence.token
    clock.now += LEASE / 3
    await lose_lease(memory_store, "a")
    await a.replicas.renew_once()
    assert a.lost == [] and a.fence.token == token  # nothing lost, the same writer
    assert await memory_store.lease_owner("replica:a", time.time()) == "a"


async def test_a_lease_found_missing_after_an_outage_is_taken_again(
    memory_store: MemoryStore, started: list[Replicas]
) -> None:
    clock = Clock()
    a = await Replica(memory_store, "a", clock).join(started)
    clock.now += 3 * LEASE  # renewals failed all along: the store was unreachable
    a.replicas.leases.unreachable()
    await lose_lease(memory_store, "a")
    await a.replicas.renew_once()
    assert a.lost == []
    assert await memory_store.lease_owner("replica:a", time.time()) == "a"


async def test_a_renewal_sent_on_time_that_the_store_took_late_is_no_lapse(
    memory_store: MemoryStore, started: list[Replicas]
) -> None:
    """The renewal is sent a third of a lease after the last that held, and the store
    (stalled) takes it a lease and a half later, its key expired meanwhile: not this
    replica's lapse, so it takes the lease again and keeps its sessions."""
    clock = Clock()
    a = await Replica(memory_store, "a", clock).join(started)
    clock.now += LEASE / 3
    with stalled(memory_store, "renew_lease", clock):  # the renewal in Redis' socket
        await a.replicas.renew_once()
    assert a.lost == []
    assert await memory_store.lease_owner("replica:a", time.time()) == "a"


async def test_a_lease_that_expired_while_the_store_stalled_after_its_renewal_is_no_lapse(
    memory_store: MemoryStore, started: list[Replicas]
) -> None:
    """The renewal holds, and the store stalls on the epoch read right after it (the same
    round of renewals) for a lease and a half: the key expires meanwhile and the next
    renewal, sent a third of a lease after the stall, finds it missing more than a lease
    after the last that held. The replica waited on the store, it was not away: it takes
    the lease again and keeps its sessions. Was: a lapse (CI, test_replicas_lease_lost's
    stalled Redis, when the stall began between the renewal's reply and the epoch's)."""
    clock = Clock()
    a = await Replica(memory_store, "a", clock).join(started)
    token = a.fence.token
    clock.now += LEASE / 3
    with stalled(memory_store, "current_epoch", clock):  # the epoch read in its socket
        await a.replicas.renew_once()
    clock.now += LEASE / 3
    await a.replicas.renew_once()
    assert a.lost == [] and a.fence.token == token
    assert await memory_store.lease_owner("replica:a", time.time()) == "a"


async def test_a_lease_that_lapsed_loses_the_sessions(
    memory_store: MemoryStore, started: list[Replicas]
) -> None:
    clock = Clock()
    a = await Replica(memory_store, "a", clock).join(started)
    token = a.fence.token
    clock.now += LEASE + 1  # paused past it: it may have lapsed, and may be reaped
    await lose_lease(memory_store, "a")
    await a.replicas.renew_once()
    assert a.lost == [token] and a.fence.token != token


async def test_a_lost_lease_that_another_replica_reaped_loses_the_sessions(
    memory_store: MemoryStore, started: list[Replicas]
) -> None:
    clock = Clock()
    a = await Replica(memory_store, "a", clock).join(started)
    token = a.fence.token
    await lose_lease(memory_store, "a")
    assert await memory_store.acquire_lease("reaper:a", "b", 60, time.time())  # b ends its streams
    await a.replicas.renew_once()
    assert a.lost == [token]


async def test_a_lost_lease_whose_reaper_cannot_be_read_loses_the_sessions(
    memory_store: MemoryStore, started: list[Replicas], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    a = await Replica(memory_store, "a", clock).join(started)
    token = a.fence.token
    await lose_lease(memory_store, "a")
    held = memory_store.lease_owner

    async def failing(name: str, now: float) -> str | None:
        if name.startswith("reaper:"):
            raise StoreError("that master is down")
        return await held(name, now)

    monkeypatch.setattr(memory_store, "lease_owner", failing)
    await a.replicas.renew_once()
    assert a.lost == [token]


async def test_another_replica_waits_half_a_lease_before_it_reaps_a_missing_lease(
    memory_store: MemoryStore, started: list[Replicas]
) -> None:
    clock = Clock()
    a = await Replica(memory_store, "a", clock).join(started)
    b = await Replica(memory_store, "b", clock).join(started)
    key = await live_stream(memory_store, "a", a.fence.token)
    assert await b.replicas.owner_alive("a")  # b sees a's lease held
    await lose_lease(memory_store, "a")
    assert await b.replicas.owner_alive("a")  # presumed alive: its key may be lost
    assert await b.replicas.reap_once() == 0
    clock.now += LEASE / 3
    await a.replicas.renew_once()  # a takes it again
    clock.now += LEASE
    assert await b.replicas.reap_once() == 0
    record = await memory_store.get_stream(key, time.time())
    assert record is not None and record.state == LIVE and a.lost == []


async def test_a_lease_missing_at_two_looks_half_a_lease_apart_is_reaped(
    memory_store: MemoryStore, started: list[Replicas]
) -> None:
    clock = Clock()
    a = await Replica(memory_store, "a", clock).join(started)
    b = await Replica(memory_store, "b", clock).join(started)
    key = await live_stream(memory_store, "a", a.fence.token)
    assert await b.replicas.owner_alive("a")
    await lose_lease(memory_store, "a")  # and a is gone for good
    assert await b.replicas.reap_once() == 0
    clock.now += LEASE / 2
    assert not await b.replicas.owner_alive("a")
    assert await b.replicas.reap_once() == 1
    record = await memory_store.get_stream(key, time.time())
    assert record is not None and record.state != LIVE and record.fence == b.fence.token
    # a comes back: it finds b's reaper lease, so it knows its streams were ended.
    await a.replicas.renew_once()
    assert len(a.lost) == 1


async def test_a_holder_another_replica_took_for_gone_loses_its_sessions_when_back(
    memory_store: MemoryStore, started: list[Replicas]
) -> None:
    """b finds a's lease missing a lease after it saw it held (a cut off from the store
    past its lease): a is gone, and b's client is told so (404). a, back, cannot tell a
    lapse from a loss after its outage, but it finds ``reaper:a`` held by b (claimed
    before b answered), so it loses its sessions: the session b called gone is gone
    through a too. Was: a took its lease again and kept them (no live stream of a's for
    b's reaper to end, or a back before it ended them)."""
    clock = Clock()
    a = await Replica(memory_store, "a", clock).join(started)
    b = await Replica(memory_store, "b", clock).join(started)
    token = a.fence.token
    assert await b.replicas.owner_alive("a")  # seen held
    a.replicas.leases.unreachable()  # a's renewals fail: cut off from the store
    clock.now += LEASE + 1
    await lose_lease(memory_store, "a")  # lapsed meanwhile
    assert not await b.replicas.owner_alive("a")
    assert await memory_store.lease_owner("reaper:a", time.time()) == "b"
    await a.replicas.renew_once()
    assert a.lost == [token]


async def test_a_holder_back_before_the_claim_is_alive_and_the_claim_let_go(
    memory_store: MemoryStore, started: list[Replicas]
) -> None:
    """b took a for gone at its look, but a holds its lease again by the time b has
    claimed ``reaper:a`` (b looks once more after the claim, as its reaper does): a is
    alive, the claim is let go, and a keeps its sessions."""
    clock = Clock()
    a = await Replica(memory_store, "a", clock).join(started)
    b = await Replica(memory_store, "b", clock).join(started)
    assert await b.replicas.owner_alive("a")
    clock.now += LEASE + 1
    await lose_lease(memory_store, "a")
    acquire = memory_store.acquire_lease

    async def a_back_first(name: str, owner: str, ttl: float, now: float) -> bool:
        if name == "reaper:a":  # a's renewal lands between b's look and b's claim
            a.replicas.leases.unreachable()
            await a.replicas.renew_once()
        return await acquire(name, owner, ttl, now)

    memory_store.acquire_lease = a_back_first  # type: ignore[method-assign]
    assert await b.replicas.owner_alive("a")
    assert await memory_store.lease_owner("reaper:a", time.time()) is None
    assert a.lost == []


async def test_a_lease_found_missing_by_a_look_the_store_stalled_is_presumed_alive(
    memory_store: MemoryStore, started: list[Replicas]
) -> None:
    """b's look at a's lease waits a lease and a half in a stalled store (a fork, a
    starved VM), a's key expiring meanwhile by the store's clock while a could not renew
    it either: b presumes a alive (a takes its key again at its first renewal after the
    stall), claims nothing, and a keeps its sessions. Was: a lease seen held more than a
    lease before was gone at once: b claimed ``reaper:a``, and a, back, lost them all."""
    clock = Clock()
    a = await Replica(memory_store, "a", clock).join(started)
    b = await Replica(memory_store, "b", clock).join(started)
    assert await b.replicas.owner_alive("a")  # seen held
    owner = memory_store.lease_owner

    async def stalled(name: str, now: float) -> str | None:
        clock.now += LEASE * 1.5
        await lose_lease(memory_store, "a")  # expired in the stall
        return await owner(name, now)

    memory_store.lease_owner = stalled  # type: ignore[method-assign]
    assert await b.replicas.owner_alive("a")
    memory_store.lease_owner = owner  # type: ignore[method-assign]
    assert await memory_store.lease_owner("reaper:a", time.time()) is None
    a.replicas.leases.unreachable()  # a's renewal waited the stall out too
    await a.replicas.renew_once()
    assert a.lost == []


async def test_a_replica_back_from_its_own_absence_gives_a_missing_lease_its_grace(
    memory_store: MemoryStore, started: list[Replicas]
) -> None:
    """b itself was away past its lease (paused: its renewals stopped); a lease it finds
    missing right after is presumed alive for half a lease, as after an outage (b could
    not see it renewed meanwhile). Was: seen held more than a lease before, it was gone
    at once, and b's claim cost its holder every session (nemesis: a replica paused,
    then Redis frozen)."""
    clock = Clock()
    a = await Replica(memory_store, "a", clock).join(started)
    b = await Replica(memory_store, "b", clock).join(started)
    assert await b.replicas.owner_alive("a")
    clock.now += LEASE * 1.5  # b paused
    await b.replicas.renew_once()  # b back: its lease lapsed, taken again
    await lose_lease(memory_store, "a")  # expired meanwhile (a Redis stall, say)
    assert await b.replicas.owner_alive("a")
    assert await memory_store.lease_owner("reaper:a", time.time()) is None
    clock.now += LEASE / 2
    assert not await b.replicas.owner_alive("a")  # still missing half a lease on
    assert a.lost == []


async def test_a_lease_missing_since_before_an_outage_is_looked_at_afresh(
    memory_store: MemoryStore, started: list[Replicas]
) -> None:
    """b found a's lease missing, then the store stalled (b's renewal waited it out):
    what b saw before the stall says nothing of a after it (a renews at its first
    renewal after), so the lease gets half a lease from the stall's end. Was: missing
    since before the stall, it was gone at once."""
    clock = Clock()
    a = await Replica(memory_store, "a", clock).join(started)
    b = await Replica(memory_store, "b", clock).join(started)
    assert await b.replicas.owner_alive("a")
    await lose_lease(memory_store, "a")
    assert await b.replicas.owner_alive("a")  # missing: presumed alive
    renew = memory_store.renew_lease

    async def stalled(name: str, owner: str, ttl: float, now: float) -> bool:
        clock.now += LEASE  # the store frozen with b's renewal in it
        return await renew(name, owner, ttl, now)

    memory_store.renew_lease = stalled  # type: ignore[method-assign]
    await b.replicas.renew_once()
    memory_store.renew_lease = renew  # type: ignore[method-assign]
    assert await b.replicas.owner_alive("a")  # afresh after the stall
    assert await memory_store.lease_owner("reaper:a", time.time()) is None
    assert not b.replicas.leases.missing_long("a")
    clock.now += LEASE / 2
    assert b.replicas.leases.missing_long("a")
    assert a.lost == []


async def test_a_lease_never_seen_held_is_not_presumed_alive(
    memory_store: MemoryStore, started: list[Replicas]
) -> None:
    """A request for a long-gone replica's session is refused at once (404), not after
    half a lease: only a lease seen held shortly before (or missing just after an outage,
    below) is presumed alive."""
    clock = Clock()
    b = await Replica(memory_store, "b", clock).join(started)
    assert not await b.replicas.owner_alive("gone")


async def test_a_lease_missing_just_after_an_outage_is_presumed_alive_for_half_a_lease(
    memory_store: MemoryStore, started: list[Replicas]
) -> None:
    """The store was down longer than a lease: every lease key lapsed meanwhile, and this
    replica saw none held for over a lease. One found missing less than a lease after
    this replica found the store unreachable may be taken again by its holder (its first
    renewal after the outage): presumed alive for half a lease, then not; a lease after
    the outage, a missing lease is taken for gone at once again."""
    clock = Clock()
    b = await Replica(memory_store, "b", clock).join(started)
    assert await b.replicas.owner_alive("a") is False  # never held: gone
    b.replicas.leases.unreachable()  # b's renewal failed: the store is down
    clock.now += LEASE / 3
    assert await b.replicas.owner_alive("late")  # missing, just after the outage
    clock.now += LEASE / 2
    assert not await b.replicas.owner_alive("late")  # still missing half a lease on
    clock.now += LEASE
    assert not await b.replicas.owner_alive("later")  # a lease after the outage


async def test_a_session_taken_over_since_it_was_last_seen_is_found_at_its_new_holder(
    memory_store: MemoryStore, started: list[Replicas]
) -> None:
    """The asker reads a session's record with the lease of the replica it last saw
    holding it (one round trip); what it goes by is the fresh record: a session taken
    over meanwhile is found at its new holder, a dropped one is gone."""
    clock = Clock()
    asker = (await Replica(memory_store, "c", clock).join(started)).replicas
    await Replica(memory_store, "a", clock).join(started)
    await Replica(memory_store, "b", clock).join(started)
    now = time.time()
    await memory_store.put_session(SessionRecord("s1", "ep", "a", None, now + 60))
    assert await asker.owner_of("s1") == "a"
    assert await asker.owner_of("s1") == "a"  # (the record and a's lease, together)
    await memory_store.put_session(SessionRecord("s1", "ep", "b", None, now + 60))
    assert await asker.owner_of("s1") == "b"
    await memory_store.drop_session("s1")
    with pytest.raises(SessionNotFound):
        await asker.owner_of("s1")
