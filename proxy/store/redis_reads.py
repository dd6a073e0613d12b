"""The Redis store's stream reads (:mod:`proxy.store.redis`): a record and the entries
after a sequence in one MULTI (:meth:`RedisReads._snapshot`: on one server on the reads'
own connection, :mod:`proxy.store.redis_wire`, else through redis-py), and a tail that
yields :data:`TAIL_BATCH` entries at a time, reads its next batch ahead while the one
before is written, and blocks in ``XREAD BLOCK`` on the log and the wake key when it has
nothing to yield."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from proxy.store.base import (
    COMPLETED,
    Entry,
    StoreError,
    StreamRecord,
    check_read,
    read_to_end,
    readable_after,
)
from proxy.store.redis_client import Client
from proxy.store.redis_layout import StreamKeys, entries_of, entry_of, ms, pairs, record_of
from proxy.store.redis_wire import Arg, Closed, Wire, executed, pack_transaction

T = TypeVar("T")

TAIL_BATCH = 1000  # entries per batch a tail yields
Ahead = tuple["asyncio.Future[list[Any]]", bytes, int]
"""A read sent ahead (:meth:`RedisReads._read_ahead`): its replies' future, the packed
command and its replies' count (to send it again on a new connection)."""


class RedisReads:
    """A stream's snapshot and its tail; :class:`~proxy.store.redis.RedisStore` gives the
    connections, the keys and the error handling."""

    block: float
    _closed: bool
    _where: str
    _reads: Wire | None

    async def _run(
        self, doing: str, call: Callable[[Client], Awaitable[T]], *, blocking: bool = False
    ) -> T:
        raise NotImplementedError

    async def _wired(
        self, doing: str, wire: Wire, packed: bytes, count: int = 1, *, scripts: bool = False
    ) -> list[Any]:
        raise NotImplementedError

    def _failing(self, doing: str) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def _stream_keys(self, key: str) -> StreamKeys:
        raise NotImplementedError

    async def snapshot(
        self, key: str, after: int, now: float, limit: int | None = None
    ) -> tuple[StreamRecord | None, list[Entry]]:
        """:meth:`~proxy.store.base.Store.snapshot` in one MULTI (:meth:`_found`)."""
        record, entries, _ = await self._found(key, after, now, limit)
        if not readable_after(record, after):
            return record, []
        return record, entries

    async def _snapshot(
        self, key: str, after: int, now: float, limit: int | None, wake: bool = False
    ) -> tuple[StreamRecord, list[Entry], str]:
        """The record, the entries after ``after`` and (``wake``) the wake key's newest
        id, read in one MULTI; raises what :func:`check_read` raises."""
        found, entries, newest = await self._found(key, after, now, limit, wake)
        return check_read(found, after), entries, newest

    async def _found(
        self, key: str, after: int, now: float, limit: int | None, wake: bool = False
    ) -> tuple[StreamRecord | None, list[Entry], str]:
        """:meth:`_snapshot`'s MULTI, the record as found (None: there is none)."""
        names = self._stream_keys(key)

        if self._reads is not None:  # one server: raw replies, parsed here
            packed, count = self._read_packed(key, after, limit, wake)
            replies = await self._wired("read a stream", self._reads, packed, count)
            return self._read_parsed(key, now, replies, wake)

        async def snapshot(client: Client) -> tuple[dict[bytes, bytes], list[Entry], list[Any]]:
            pipe = client.pipeline(transaction=True)
            pipe.hgetall(names.record)
            pipe.xrange(names.log, min=f"{after + 1}-0", max="+", count=limit)
            if wake:
                pipe.xrevrange(names.wake, count=1)
            results = list(await pipe.execute())
            return results[0], [entry_of(item) for item in results[1]], results[2] if wake else []

        fields, entries, woken = await self._run("read a stream", snapshot)
        newest = woken[0][0].decode() if woken else "0-0"
        return record_of(key, fields, now), entries, newest

    def _read_packed(
        self, key: str, after: int, limit: int | None, wake: bool
    ) -> tuple[bytes, int]:
        """:meth:`_snapshot`'s MULTI on the reads' connection, packed; its replies' count."""
        names = self._stream_keys(key)
        xrange: list[Arg] = ["XRANGE", names.log, b"%d-0" % (after + 1), "+"]
        if limit is not None:
            xrange += ("COUNT", limit)
        commands: list[list[Arg]] = [["HGETALL", names.record], xrange]
        if wake:
            commands.append(["XREVRANGE", names.wake, "+", "-", "COUNT", 1])
        return pack_transaction(commands), len(commands) + 2

    def _read_parsed(
        self, key: str, now: float, replies: list[Any], wake: bool
    ) -> tuple[StreamRecord | None, list[Entry], str]:
        with self._failing("read a stream"):
            raw = executed(replies)
        record = record_of(key, pairs(raw[0]), now)
        woken = raw[2] if wake else []
        return record, entries_of(raw[1]), woken[0][0].decode() if woken else "0-0"

    def _read_ahead(self, key: str, after: int) -> Ahead | None:
        """A tail's next read (:data:`TAIL_BATCH` entries after ``after``) written now on
        the reads' connection, while the entries before are written to the client: over a
        Unix socket a 1,000-entry reply comes in pieces over 4-5 turns of the loop. None:
        no connection up (the tail reads as it would)."""
        wire = self._reads
        if wire is None or self._closed:
            return None
        packed, count = self._read_packed(key, after, TAIL_BATCH, True)
        future = wire.send_now(packed, count)
        return None if future is None else (future, packed, count)

    async def _read_landed(
        self, key: str, after: int, ahead: Ahead
    ) -> tuple[StreamRecord, list[Entry], str]:
        """What :meth:`_read_ahead` asked for, as :meth:`_snapshot` gives it."""
        assert self._reads is not None
        with self._failing("read a stream"):
            try:
                replies = await self._reads.replies(*ahead)
            except Closed:
                raise StoreError(f"the redis store ({self._where}) is closed") from None
        found, entries, newest = self._read_parsed(key, time.time(), replies, True)
        return check_read(found, after), entries, newest

    async def tail(self, key: str, after: int) -> AsyncIterator[list[Entry]]:
        ahead: Ahead | None = None  # the next read, sent before these entries were yielded
        while True:
            if ahead is not None:
                record, entries, woken_at = await self._read_landed(key, after, ahead)
                ahead = None
            else:
                record, entries, woken_at = await self._snapshot(
                    key, after, time.time(), TAIL_BATCH, wake=True
                )
            if entries:
                after = entries[-1].seq
                if read_to_end(record, after):
                    yield entries
                    return
                if len(entries) == TAIL_BATCH:  # (a replay: more is likely there)
                    ahead = self._read_ahead(key, after)
                yield entries
                continue
            if record.state == COMPLETED:
                return
            await self._wait_for_change(key, after, woken_at)

    async def _wait_for_change(self, key: str, after: int, woken_at: str) -> None:
        """Block until the log has an entry after ``after``, the wake key one after
        ``woken_at``, :meth:`close` is called, or ``block`` seconds pass."""
        names = self._stream_keys(key)
        streams: dict[Any, Any] = {names.log: f"{after}-1", names.wake: woken_at}
        await self._run(
            "tail a stream",
            lambda r: r.xread(streams, count=1, block=ms(self.block)),
            blocking=True,
        )
