"""StoredStreams.follow (proxy/downstream/stored.py): the stream of a request another
replica runs, served from the store, opens with the holder's priming event; when the
store cannot be read at that moment the client still gets that event (an id to resume
from), never an error for a call that goes on. Over a real aiohttp server."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from proxy.config import Config
from proxy.config_sections import SseConfig
from proxy.core.errors import StoreUnavailable
from proxy.core.sse import SSEDecoder, encode_event
from proxy.downstream.stored import REPLAY_CHUNK, JsonHold, StoredStreams
from proxy.servers import Server
from proxy.store.base import Batch, Entry, StoreError, StoreLimits, StreamRecord
from proxy.store.memory import MemoryStore
from tests.support import eventually

KEY = "e1e1.3"
OPENING = encode_event(None, event_id=f"{KEY}.0.1", retry_ms=500)


class UnreadableStore(MemoryStore):
    """A store that is restarting: every read fails."""

    async def get_stream(self, key: str, now: float) -> StreamRecord | None:
        raise StoreError("connection refused")


async def follow(aiohttp_client: Any, store: MemoryStore, opening: bytes) -> tuple[int, bytes]:
    """``StoredStreams.follow`` of :data:`KEY` from its start: the status and body its
    client reads (status -1: it raised StoreError or, after the bounded wait, StoreUnavailable,
    which the endpoint then answers)."""
    store.unavailable_wait = 0.2  # the bounded wait (store.unavailable_wait_seconds), short
    server = Server("default", Config(sse=SseConfig(keepalive_seconds=10.0)))
    stored = StoredStreams(store, b"secret", server, sole_server=True)
    raised: list[Exception] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        try:
            return await stored.follow(request, "s1", KEY, 0, opening)
        except (StoreError, StoreUnavailable) as exc:
            raised.append(exc)
            return web.Response(status=503)

    app = web.Application()
    app.router.add_get("/", handler)
    client = await aiohttp_client(app)
    async with client.get("/") as resp:
        status, body = resp.status, await resp.read()
    return (-1 if raised else status), body


async def test_the_priming_event_comes_first_then_the_events_then_the_end(
    aiohttp_client: Any,
) -> None:
    store = MemoryStore(StoreLimits())
    await store.open()
    now = time.time()
    entries = [Entry(1, b'{"a":1}'), Entry(2, b'{"b":2}')]
    batch = Batch([StreamRecord(KEY, "s1", server="default")], {KEY: entries}, {KEY: now + 60})
    await store.commit(batch, now)
    status, body = await follow(aiohttp_client, store, OPENING)
    assert status == 200
    events = SSEDecoder().feed(body)
    assert [(e.id, e.data, e.retry) for e in events] == [
        (f"{KEY}.0.1", "", 500),
        (f"{KEY}.1", '{"a":1}', None),
        (f"{KEY}.2", '{"b":2}', None),
    ]


async def test_a_store_that_cannot_be_read_still_gives_the_priming_event(
    aiohttp_client: Any,
) -> None:
    store = UnreadableStore(StoreLimits())
    await store.open()
    assert await follow(aiohttp_client, store, OPENING) == (200, OPENING)
    # Unprimed (a session before 2025-11-25): nothing to resume from, the error stands.
    assert (await follow(aiohttp_client, store, b""))[0] == -1


class TailWatched(MemoryStore):
    """A memory store that notes each tail started (the position it starts after)."""

    def __init__(self, limits: StoreLimits) -> None:
        super().__init__(limits)
        self.tails: list[int] = []

    def tail(self, key: str, after: int) -> AsyncIterator[list[Entry]]:
        self.tails.append(after)
        return super().tail(key, after)


async def test_the_rest_is_read_while_the_first_chunk_is_written(aiohttp_client: Any) -> None:
    """A replay's first chunk (REPLAY_CHUNK entries, ~10 MB here: more than the socket
    buffers hold) waits for its client to read; the tail of the log after it is already
    being read meanwhile, not only once that chunk is written."""
    store = TailWatched(StoreLimits())
    await store.open()
    now = time.time()
    big = b'{"x":"%s"}' % (b"y" * 10_000)
    entries = [Entry(seq, big) for seq in range(1, REPLAY_CHUNK + 6)]
    batch = Batch([StreamRecord(KEY, "s1", server="default")], {KEY: entries}, {KEY: now + 60})
    await store.commit(batch, now)
    server = Server("default", Config(sse=SseConfig(keepalive_seconds=10.0)))
    stored = StoredStreams(store, b"secret", server, sole_server=True)

    async def handler(request: web.Request) -> web.StreamResponse:
        return await stored.follow(request, "s1", KEY, 0)

    app = web.Application()
    app.router.add_get("/", handler)
    client = await aiohttp_client(app)
    async with client.get("/") as resp:
        assert resp.status == 200
        await eventually(lambda: store.tails, what="the tail after the first chunk")
        assert store.tails == [REPLAY_CHUNK]
        body = await resp.read()
    events = SSEDecoder().feed(body)
    assert [e.id for e in events] == [f"{KEY}.{seq}" for seq in range(1, REPLAY_CHUNK + 6)]


async def test_a_stream_read_to_its_end_before_the_response_starts_no_tail(
    aiohttp_client: Any,
) -> None:
    """A stream that had completed when its record was read, and whose first read took
    it to its last entry (a forwarded call answered before its holder replied), is
    served without a tail: nothing is left to read (``read_to_end``). A stream still live,
    or longer than the first read, is tailed; each response is the whole stream."""
    store = TailWatched(StoreLimits())
    await store.open()
    now = time.time()
    done, live = "e1e1.4", "e1e1.5"
    events = [Entry(1, b'{"a":1}'), Entry(2, b'{"b":2}')]
    await store.commit(Batch([StreamRecord(done, "s1", server="default")], {done: events}), now)
    await store.commit(Batch(completed={done: now + 60}), now)
    await store.commit(Batch([StreamRecord(live, "s1", server="default")], {live: events}), now)
    server = Server("default", Config(sse=SseConfig(keepalive_seconds=10.0)))
    stored = StoredStreams(store, b"secret", server, sole_server=True)
    hold = JsonHold(window_seconds=0.05, min_bytes=1 << 20)  # as a JSON-accepting client's

    async def handler(request: web.Request) -> web.StreamResponse:
        key = request.query["key"]
        return await stored.follow(
            request, "s1", key, 0, hold=hold if "hold" in request.query else None
        )

    app = web.Application()
    app.router.add_get("/", handler)
    client = await aiohttp_client(app)
    for query in ("", "&hold=1"):
        async with client.get(f"/?key={done}{query}") as resp:
            ids = [e.id for e in SSEDecoder().feed(await resp.read())]
        assert ids == [f"{done}.1", f"{done}.2"]
    assert store.tails == []
    async with client.get(f"/?key={live}") as resp:
        await eventually(lambda: store.tails, what="the live stream's tail")
        await store.commit(
            Batch(appends={live: [Entry(3, b'{"c":3}')]}, completed={live: now + 60}), now
        )
        ids = [e.id for e in SSEDecoder().feed(await resp.read())]
    assert ids == [f"{live}.1", f"{live}.2", f"{live}.3"]
    assert store.tails == [2]
