"""Replicas' inbox (proxy/replicas.py), in-process on the memory store: a request goes out
typed and comes back typed, the parts a holder relays ahead of its reply reach the asker
before it, in order, and what cannot be read is answered at once, not after the
forwarding timeout. (tests/test_replicas.py runs real replicas on Redis.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from structlog.testing import capture_logs

from proxy.core.errors import StoreUnavailable
from proxy.forwarding import (
    Acked,
    Answered,
    Forwarded,
    ForwardedAck,
    ForwardedGet,
    ForwardedRetry,
    NotesAhead,
    Refused,
    Reply,
    RetryCancel,
)
from proxy.modern import retry_forward
from proxy.replicas import OwnerUnreachable, Relay, Replicas
from proxy.store.base import StoreError
from proxy.store.memory import MemoryStore

GET = ForwardedGet("s1", "default", "alice")


class Holder:
    """A holder's Registry.serve_forwarded: records what it is asked."""

    def __init__(self) -> None:
        self.asked: list[Forwarded] = []

    async def serve(self, request: Forwarded, relay: Relay) -> Reply:
        self.asked.append(request)
        return Acked()


async def started(memory_store: MemoryStore, owner: str, holder: Holder) -> Replicas:
    replicas = Replicas(memory_store, owner, 30.0, 60.0, holder.serve)
    await replicas.start()
    return replicas


async def test_a_request_and_its_reply_cross_typed(memory_store: MemoryStore) -> None:
    holder = Holder()
    a, b = await started(memory_store, "a", Holder()), await started(memory_store, "b", holder)
    try:
        async with asyncio.timeout(5):
            assert await a.forward("b", GET) == Acked()
            ack = ForwardedAck("s1", "default", None, "e.1.2")
            await a.tell("b", ack)
            while len(holder.asked) < 2:
                await asyncio.sleep(0.01)
        assert holder.asked == [GET, ack]
    finally:
        await a.stop()
        await b.stop()


async def test_a_request_the_holder_cannot_read_is_refused_at_once(
    memory_store: MemoryStore,
) -> None:
    holder = Holder()
    b = await started(memory_store, "b", holder)
    try:
        await memory_store.send("b", {"kind": "shout", "id": 7, "from": "probe"})
        async with asyncio.timeout(5):
            reply = await anext(aiter(memory_store.receive("probe")))
        assert reply["reply_to"] == 7 and reply["outcome"] == "refused"
        assert reply["status"] == 500 and reply["error"]["error"]["code"] == -32603
        assert holder.asked == []
    finally:
        await b.stop()


async def test_a_reply_the_asker_cannot_read_is_an_unreachable_owner(
    memory_store: MemoryStore,
) -> None:
    a = await started(memory_store, "a", Holder())
    try:
        asking = asyncio.create_task(a.forward("c", GET))  # "c": a holder of another make
        async with asyncio.timeout(5):
            request = await anext(aiter(memory_store.receive("c")))
            await memory_store.send("a", {"reply_to": request["id"], "outcome": "maybe"})
            with pytest.raises(OwnerUnreachable, match="cannot read"):
                await asking
        assert request["kind"] == "get" and request["from"] == "a"
    finally:
        await a.stop()


async def test_a_refusal_reaches_the_asker_as_one(memory_store: MemoryStore) -> None:
    refused = Refused(404, {"jsonrpc": "2.0", "id": None, "error": {"code": -32001}})

    class Refusing(Holder):
        async def serve(self, request: Forwarded, relay: Relay) -> Reply:
            return refused

    a, b = await started(memory_store, "a", Holder()), await started(memory_store, "b", Refusing())
    try:
        async with asyncio.timeout(5):
            assert await a.forward("b", GET) == refused
    finally:
        await a.stop()
        await b.stop()


async def test_what_a_holder_relays_ahead_comes_before_its_reply(memory_store: MemoryStore) -> None:
    notes = [{"jsonrpc": "2.0", "method": "n", "params": {"i": i}} for i in range(3)]
    answer = Answered(200, [{"jsonrpc": "2.0", "id": 1, "result": {}}], first=3)

    class Relaying(Holder):
        async def serve(self, request: Forwarded, relay: Relay) -> Reply:
            await relay(NotesAhead(0, notes[:2]))
            await relay(NotesAhead(2, notes[2:]))
            return answer

    a, b = await started(memory_store, "a", Holder()), await started(memory_store, "b", Relaying())
    got: list[NotesAhead] = []
    try:
        async with asyncio.timeout(5):
            retry = ForwardedRetry("default", None, "{}", {}, ahead=True)
            assert await a.forward("b", retry, ahead=got.append) == answer
            assert got == [NotesAhead(0, notes[:2]), NotesAhead(2, notes[2:])]
            # Parts for a request nobody waits on any more are dropped.
            await memory_store.send(
                "a", {"outcome": "notes", "seq": 0, "messages": notes, "reply_to": 99}
            )
            assert await a.forward("b", retry, ahead=got.append) == answer
        assert len(got) == 4
    finally:
        await a.stop()
        await b.stop()


class Blips(MemoryStore):
    """A store whose next ``fails`` sends of a kind (replies: ``reply_to``; requests:
    the rest) fail, as Redis restarting fails them (a fault a real store cannot be made
    to give at that moment)."""

    def __init__(self) -> None:
        super().__init__()
        self.unavailable_wait = 2.0
        self.fails = {"reply": 0, "request": 0}

    async def send(self, to: str, message: dict[str, Any]) -> None:
        kind = "reply" if "reply_to" in message else "request"
        if self.fails[kind] > 0:
            self.fails[kind] -= 1
            raise StoreError("redis at 127.0.0.1:1: send a message failed: Error 111")
        await super().send(to, message)


async def test_a_reply_is_sent_again_while_the_store_fails() -> None:
    """The holder's reply meets a store restarting: it is sent again until the store is
    back (the asker drops a second one), not lost with the asker waiting 30 s."""
    store = Blips()
    a, b = await started(store, "a", Holder()), await started(store, "b", Holder())
    try:
        store.fails["reply"] = 3
        async with asyncio.timeout(5):
            assert await a.forward("b", GET) == Acked()
        assert store.fails["reply"] == 0
    finally:
        await a.stop()
        await b.stop()


class Outage(MemoryStore):
    """A store that refuses replies until :attr:`back` (loop time): a partition between
    the holder and Redis longer than the store's wait."""

    def __init__(self) -> None:
        super().__init__()
        self.unavailable_wait = 0.2
        self.back = 0.0

    async def send(self, to: str, message: dict[str, Any]) -> None:
        if "reply_to" in message and asyncio.get_running_loop().time() < self.back:
            raise StoreError("redis at 127.0.0.1:1: send a message failed: Error 111")
        await super().send(to, message)


async def test_a_reply_the_store_refuses_past_its_wait_is_sent_once_it_is_back() -> None:
    """The holder cannot reach the store for longer than its wait when it replies: the
    reply is sent again with backoff until it lands, and the asker, waiting with no
    bound of its own (an MRTR retry's wait), gets it. Was: dropped after the wait
    (``replica_reply_failed``), and the asker's client waited until it gave up."""
    store = Outage()
    a, b = await started(store, "a", Holder()), await started(store, "b", Holder())
    try:
        store.back = asyncio.get_running_loop().time() + 1.5
        with capture_logs() as logged:
            async with asyncio.timeout(10):
                assert await a.forward("b", GET, timeout=None) == Acked()
        events = [e["event"] for e in logged]
        assert events[-2:] == ["replica_reply_delayed", "replica_reply_sent_late"], events
    finally:
        await a.stop()
        await b.stop()


async def test_only_what_may_arrive_twice_is_sent_again() -> None:
    """A request the holder drops a second copy of (``resend``) is sent again while the
    store fails; any other is refused at once (it may have been delivered)."""
    store = Blips()
    holder = Holder()
    a, b = await started(store, "a", Holder()), await started(store, "b", holder)
    try:
        store.fails["request"] = 2
        async with asyncio.timeout(5):
            assert await a.forward("b", GET, resend=True) == Acked()
        store.fails["request"] = 1
        with pytest.raises(StoreUnavailable):
            await a.forward("b", GET)
        assert holder.asked == [GET]
    finally:
        await a.stop()
        await b.stop()


async def test_a_retrys_cancel_is_sent_again_while_the_store_fails() -> None:
    """A forwarded MRTR retry's client left: the cancel for the holder meets a store
    restarting and is sent again until it lands (the holder ignores a second one), not
    dropped with the call running on unread."""
    store = Blips()
    holder = Holder()
    a, b = await started(store, "a", Holder()), await started(store, "b", holder)
    cancel = RetryCancel("default", "alice", "call-1")
    try:
        store.fails["request"] = 2
        async with asyncio.timeout(5):
            await retry_forward._tell(a, "b", cancel)
            while not holder.asked:
                await asyncio.sleep(0.01)
        assert holder.asked == [cancel] and store.fails["request"] == 0
    finally:
        await a.stop()
        await b.stop()
