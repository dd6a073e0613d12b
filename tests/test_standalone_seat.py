"""Which ``/ws`` socket has a session's standalone stream (proxy/standalone_seat.py), in
process: replicas on the memory store, a stand-in session that records where the next
socket is to start. The newest socket takes the stream; one on another replica is asked
to stop and says how far it wrote, else (gone, or it does not know the socket) what it
said closing, else its last acknowledgement. (tests/test_replicas_ws_standalone.py runs
real sockets on two replicas.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy.forwarding import Acked, Forwarded, Reply
from proxy.forwarding_seat import StandaloneStopped, StandaloneTakeover, WsSocket
from proxy.replicas import Relay, Replicas
from proxy.standalone_seat import StandaloneSeat
from proxy.store.memory import MemoryStore


class Session:
    def __init__(self) -> None:
        self.handed: list[int] = []

    def standalone_handed(self, upto: int) -> None:
        self.handed.append(upto)


class Local:
    def __init__(self) -> None:
        self.released = 0

    def release_standalone(self) -> None:
        self.released += 1


class Elsewhere:
    """Replica "b": its sockets stop where they say."""

    def __init__(self, stops: dict[str, int | None]) -> None:
        self.stops = stops
        self.asked: list[str] = []

    async def serve(self, request: Forwarded, relay: Relay) -> Reply:
        if isinstance(request, StandaloneTakeover):
            self.asked.append(request.token)
            return StandaloneStopped(self.stops.get(request.token))
        return Acked()


@pytest.fixture
async def replicas(memory_store: MemoryStore) -> AsyncIterator[tuple[Replicas, Elsewhere]]:
    store = memory_store
    b_side = Elsewhere({"t1": 5, "t2": None})
    a = Replicas(store, "a", 30.0, 60.0, Elsewhere({}).serve)
    b = Replicas(store, "b", 30.0, 60.0, b_side.serve)
    await a.start()
    await b.start()
    yield a, b_side
    await a.stop()
    await b.stop()


def attached(start: int | None) -> Any:
    async def attach() -> tuple[int | None, str]:
        return start, "made"

    return attach


async def test_a_local_socket_is_released_at_once() -> None:
    session, old, new = Session(), Local(), Local()
    seat = StandaloneSeat(session)  # type: ignore[arg-type]
    assert await seat.take(old, None, attached(0)) == "made"
    assert await seat.take(new, None, attached(0)) == "made"
    assert (old.released, new.released, seat.holder, session.handed) == (1, 0, new, [])
    seat.left(old)  # (no longer its)
    assert seat.holder is new
    seat.left(new)
    assert seat.holder is None


async def test_a_socket_elsewhere_stops_where_it_says(
    replicas: tuple[Replicas, Elsewhere],
) -> None:
    a, b = replicas
    session, new = Session(), Local()
    seat = StandaloneSeat(session)  # type: ignore[arg-type]
    await seat.take(WsSocket("b", "t1"), a, attached(2))
    await seat.take(new, a, attached(0))
    assert (b.asked, session.handed, seat.holder) == (["t1"], [5], new)


async def test_a_socket_elsewhere_that_cannot_say_falls_back(
    replicas: tuple[Replicas, Elsewhere],
) -> None:
    """b no longer knows t2: what t2 said closing; gone replica c: its last ack."""
    a, _ = replicas
    session = Session()
    seat = StandaloneSeat(session)  # type: ignore[arg-type]
    await seat.take(WsSocket("b", "t2"), a, attached(2))
    seat.released("t3", 9)  # another socket's: kept aside
    seat.acknowledged(4)
    await seat.take(WsSocket("b", "t3"), a, attached(9))
    assert session.handed == [4]  # t2 said nothing: its last acknowledgement
    await seat.take(WsSocket("b", "t2"), a, attached(9))
    assert session.handed == [4, 9]  # "t3" closing said 9 (and b no longer knows it)
    await seat.take(WsSocket("c", "t4"), a, attached(11))
    seat.acknowledged(12)
    await seat.take(Local(), a, attached(0))
    assert session.handed == [4, 9, 9, 12]  # (b's t2 said: None, nor any release)


async def test_a_remote_socket_that_closes_hands_back_what_it_did_not_write() -> None:
    session = Session()
    seat = StandaloneSeat(session)  # type: ignore[arg-type]
    await seat.take(WsSocket("b", "t1"), None, attached(2))
    seat.released("t1", 6)
    assert (seat.holder, session.handed) == (None, [6])


async def test_a_socket_that_could_not_attach_has_nothing() -> None:
    old = Local()
    seat = StandaloneSeat(Session())  # type: ignore[arg-type]
    await seat.take(old, None, attached(0))
    await seat.take(Local(), None, attached(None))
    assert (old.released, seat.holder) == (1, None)
