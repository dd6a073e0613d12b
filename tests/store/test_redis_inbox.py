"""A replica's inbox on Redis (proxy/store/redis_records.py ``receive``): each message is
given once, in order, whatever the receiver's connection meets. A message is moved into
``<inbox>:taking`` as it is read and removed from there once taken, so a read whose
reply a broken connection lost (Redis moved the message, the reply never came) leaves
the message there to be given, not lost. Was: ``BLPOP``, and such a message was gone (a
forwarded request or a holder's reply: the call waiting on it never ended; the nemesis's
``ask`` calls under partitions). The receiver reaches Redis through a relay it can hang
and reset (tests/nemesis/links.py); the sender reaches it directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from structlog.testing import capture_logs

from proxy.store.base import StoreError
from proxy.store.redis import RedisStore
from tests.nemesis.links import RedisLink
from tests.support import eventually


class Receiver:
    """A replica's inbox loop (Replicas._listen): takes every message given, and reads
    again after a store error."""

    def __init__(self, store: RedisStore, owner: str) -> None:
        self.store = store
        self.owner = owner
        self.got: list[dict[str, Any]] = []
        self.errors = 0
        self._task = asyncio.ensure_future(self._listen())

    async def _listen(self) -> None:
        while True:
            try:
                async for message in self.store.receive(self.owner):
                    self.got.append(message)
            except StoreError:
                self.errors += 1
                await asyncio.sleep(0.1)

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@pytest.fixture
async def pair(redis_url: str) -> AsyncIterator[tuple[RedisLink, RedisStore, RedisStore]]:
    """A relay to Redis, a store through it (the receiver's: its blocking read waits a
    minute) and a store reaching Redis directly (the sender's), on one namespace."""
    namespace = f"i{secrets.token_hex(4)}"
    link = RedisLink(int(redis_url.rsplit(":", 1)[1].split("/")[0]))
    await link.up()
    through = RedisStore(link.url(), namespace, block=60.0, timeout=2.0)
    direct = RedisStore(redis_url, namespace)
    await through.open()
    await direct.open()
    try:
        yield link, through, direct
    finally:
        await through.close()
        await direct.close()
        await link.close()


def message(n: int) -> dict[str, Any]:
    return {"id": n, "from": "a", "body": "x" * n}


async def test_a_message_whose_read_reply_was_lost_is_given_once(
    pair: tuple[RedisLink, RedisStore, RedisStore],
) -> None:
    link, through, direct = pair
    receiver = Receiver(through, "b")
    try:
        await asyncio.sleep(0.2)  # its read blocks in Redis
        link.hang()  # Redis' reply to it will stay in the relay
        await direct.send("b", message(1))
        inbox = direct._key("inbox", "b")
        client = aioredis.Redis.from_url(direct.url)
        try:
            await eventually(lambda: _empty(client, inbox), what="Redis to hand the message out")
        finally:
            await client.aclose()
        link.down()  # the reply with it is lost with the connection
        await asyncio.sleep(0.3)
        await link.up()
        await eventually(lambda: receiver.got, what="the message", timeout=10)
        await direct.send("b", message(2))
        await eventually(lambda: len(receiver.got) == 2, what="the next message", timeout=10)
        assert receiver.got == [message(1), message(2)]
        assert receiver.errors >= 1
    finally:
        await receiver.stop()


async def _empty(client: aioredis.Redis, key: str) -> bool:
    return not await client.llen(key)


async def test_a_message_given_is_not_given_again_when_its_removal_failed(
    pair: tuple[RedisLink, RedisStore, RedisStore],
) -> None:
    """The store fails between giving a message and removing it (the next read): a later
    ``receive`` removes it without giving it again, then gives what came after."""
    link, through, direct = pair
    await direct.send("b", message(1))
    first = through.receive("b")
    assert await anext(first) == message(1)
    link.down()
    with pytest.raises(StoreError):
        await anext(first)  # the removal fails
    await link.up()
    await direct.send("b", message(2))
    again = through.receive("b")
    assert await asyncio.wait_for(anext(again), 10) == message(2)
    await direct.send("b", message(3))
    assert await asyncio.wait_for(anext(again), 10) == message(3)
    await again.aclose()


async def test_messages_come_in_order_and_what_cannot_be_read_is_dropped(
    pair: tuple[RedisLink, RedisStore, RedisStore],
) -> None:
    _, through, direct = pair
    client = aioredis.Redis.from_url(direct.url)
    try:
        await direct.send("b", message(1))
        await client.rpush(direct._key("inbox", "b"), b"not json")
        for n in (2, 3):
            await direct.send("b", message(n))
        inbox = through.receive("b")
        with capture_logs() as logged:
            got = [await asyncio.wait_for(anext(inbox), 10) for _ in range(3)]
        assert got == [message(1), message(2), message(3)]
        assert [e["event"] for e in logged] == ["replica_message_unreadable"]
        await inbox.aclose()
        taking = f"{direct._key('inbox', 'b')}:taking"
        left = await client.lrange(taking, 0, -1)  # the mark, and the last (not yet removed)
        assert left == [b".", b'{"id":3,"from":"a","body":"xxx"}']
        assert await client.pttl(taking) > 0
    finally:
        await client.aclose()


async def test_a_receiver_gone_with_a_message_moved_leaves_a_key_that_expires(
    pair: tuple[RedisLink, RedisStore, RedisStore],
) -> None:
    """A replica that dies holding a message it read (never removed): the list it was
    moved to still has a TTL (another process never reads a dead replica's inbox)."""
    _, through, direct = pair
    await direct.send("b", message(1))
    inbox = through.receive("b")
    assert await anext(inbox) == message(1)
    await inbox.aclose()  # gone before the removal
    client = aioredis.Redis.from_url(direct.url)
    try:
        taking = f"{direct._key('inbox', 'b')}:taking"
        assert len(await client.lrange(taking, 0, -1)) == 2  # the mark and the message
        assert 0 < await client.pttl(taking) <= 60_000
    finally:
        await client.aclose()
