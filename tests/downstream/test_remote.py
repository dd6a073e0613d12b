"""RemoteSessions.acknowledge (proxy/downstream/remote.py): the hint a non-owner sends the
session's holder when a client resumes from it goes out without holding the resume back,
and what is still on its way ends with the replicas."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

from structlog.testing import capture_logs

from proxy.config import Config
from proxy.downstream.remote import RemoteSessions
from proxy.downstream.stored import StoredStreams
from proxy.forwarding import Forwarded, ForwardedAck
from proxy.replicas import Replicas
from proxy.servers import Server
from proxy.store.base import StoreError


class FakeReplicas:
    """The part of :class:`Replicas` an acknowledgement uses, with a gate on the store."""

    owner = "replica-b"

    def __init__(self) -> None:
        self.gate = asyncio.Event()  # the store answers once this is set
        self.told: list[tuple[str, Forwarded]] = []
        self.stops: list[Callable[[], Awaitable[None]]] = []
        self.failure: Exception | None = None

    def on_stop(self, stop: Callable[[], Awaitable[None]]) -> None:
        self.stops.append(stop)

    async def owner_of(self, session_id: str) -> str:
        await self.gate.wait()
        return "replica-a"

    async def tell(self, owner: str, request: Forwarded) -> None:
        if self.failure is not None:
            raise self.failure
        self.told.append((owner, request))

    async def stop(self) -> None:
        for stop in self.stops:
            await stop()


def remote_over(replicas: FakeReplicas) -> RemoteSessions:
    server = Server("default", Config())
    return RemoteSessions(cast(Replicas, replicas), cast(StoredStreams, None), server)


async def settled(remote: RemoteSessions) -> None:
    """Until no acknowledgement is on its way."""
    async with asyncio.timeout(5):
        while remote._acks:
            await asyncio.sleep(0)


async def test_acknowledge_returns_before_the_holder_is_found() -> None:
    replicas = FakeReplicas()
    remote = remote_over(replicas)
    # The store does not answer until the gate is set, after this: waiting for it would
    # never end, so the bound is generous (a loaded box must not fail it), not tight.
    async with asyncio.timeout(10):
        await remote.acknowledge("s1", "e.1.4", "alice")
    assert replicas.told == []
    replicas.gate.set()
    await settled(remote)
    assert replicas.told == [("replica-a", ForwardedAck("s1", "default", "alice", "e.1.4"))]


async def test_acknowledgements_on_their_way_end_with_the_replicas() -> None:
    replicas = FakeReplicas()
    remote = remote_over(replicas)
    await remote.acknowledge("s1", "e.1.4")
    await remote.acknowledge("s1", "e.1.5")
    (task, *_) = remote._acks
    await replicas.stop()  # what Replicas.stop does first: RemoteSessions.close
    assert not remote._acks and task.cancelled()
    assert replicas.told == []


async def test_an_acknowledgement_lost_is_logged_not_raised() -> None:
    replicas = FakeReplicas()
    replicas.failure = StoreError("redis is down")
    replicas.gate.set()
    remote = remote_over(replicas)
    with capture_logs() as logged:
        await remote.acknowledge("s1", "e.1.4")
        await settled(remote)
    assert [e["event"] for e in logged] == ["remote_ack_not_delivered"]
    replicas.failure = RuntimeError("a bug")
    with capture_logs() as logged:
        await remote.acknowledge("s1", "e.1.4")
        await settled(remote)
    events: list[dict[str, Any]] = logged
    assert [(e["event"], e["log_level"]) for e in events] == [("remote_ack_failed", "error")]
