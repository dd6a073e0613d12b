"""The Redis store: Redis ≥ 7 or Valkey, one server or a Redis Cluster, shared by every
replica of a deployment.

Its keys, what each holds and for how long, and how records and batches are encoded in
them are in :mod:`proxy.store.redis_layout`; the Lua scripts in :mod:`proxy.store.redis_lua`.

A :class:`~proxy.store.base.Batch` is split by bucket (a bucket holds whole sessions, in
one cluster slot: :func:`~proxy.store.redis_layout.by_bucket`) and each part is applied by
one Lua script (``EVALSHA``, loaded again on ``NOSCRIPT``; the parts of one batch go in one
pipeline; a single part on a single server is packed and sent at once:
:mod:`proxy.store.redis_fast`), so replicas and readers see all of what a batch does to a
session or none of it. ``commit`` returns once Redis has applied every part (a part that
fails fails the commit, which the caller retries whole: every part is idempotent). The
store is as durable as the server is configured (``appendonly yes`` with ``appendfsync always``
survives a crash of Redis itself; the default ``everysec`` may lose the last second;
``--save ''`` without AOF keeps nothing).

Tails block in ``XREAD BLOCK`` on the stream's log *and* its wake key, each on a pooled
connection of their own: an append wakes them through the log, a completion or a drop
through the wake key. A key that expires or is flushed wakes nobody; a tail sees it when
its blocking read times out (``block`` seconds, 2 by default) and checks the record again.

``cluster=True`` (``store.cluster: true``) talks to a Redis Cluster
(:mod:`proxy.store.redis_client`): every command and script touches keys of one slot
(blocking reads too: a tail's two keys share a slot).

Network and server errors come out as :class:`~proxy.store.base.StoreError`; an outage is
bounded by ``timeout`` (a socket timeout, 5 s by default; a broken connection is retried
once on a new one, so the first command after a Redis restart succeeds).

Every command runs in a task of its own that its caller waits on
(:mod:`proxy.store.redis_commands`), so a cancelled caller always ends at once with
CancelledError (redis-py alone can swallow a cancel) and :meth:`RedisStore.close` ends
every command left.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

import redis.asyncio as aioredis
import structlog
from redis.exceptions import NoScriptError, RedisError

from proxy.core.stream import Unacknowledged
from proxy.core.taskrecord import TERMINAL
from proxy.store import redis_fast
from proxy.store.base import (
    COMPLETED,
    LIVE,
    Batch,
    Entry,
    SessionRecord,
    Store,
    StoreError,
    StoreLimits,
    StreamRecord,
    check_read,
    count_marks,
)
from proxy.store.redis_client import Client, check_server, connect, where
from proxy.store.redis_commands import Commands, Ended
from proxy.store.redis_fast import Arg
from proxy.store.redis_layout import (
    BUCKETS,
    DEFAULT_TTL_S,
    EPOCH_TTL_S,
    INBOX_TTL_MS,
    Layout,
    StreamKeys,
    by_bucket,
    commit_call,
    entries_of,
    entry_of,
    ms,
    pairs,
    record_of,
    text,
)
from proxy.store.redis_lua import (
    ACQUIRE_LUA,
    COMMIT_LUA,
    EPOCH_LUA,
    PUT_TASK_LUA,
    RELEASE_LUA,
    RENEW_LUA,
)

log = structlog.get_logger("proxy.store")

T = TypeVar("T")

TAIL_BATCH = 1000  # entries per batch a tail yields
CLOSE_WAIT_SECONDS = 2.0
"""How long :meth:`RedisStore.close` waits for the commands it cancelled."""


class RedisStore(Store):
    """The store contract on Redis ≥ 7 / Valkey (keys: :mod:`proxy.store.redis_layout`)."""

    kind = "redis"
    durable = True
    shared = True

    def __init__(
        self,
        url: str,
        namespace: str,
        limits: StoreLimits | None = None,
        *,
        timeout: float = 5.0,
        block: float = 2.0,
        cluster: bool = False,
    ) -> None:
        super().__init__(limits or StoreLimits())
        self._layout = Layout(namespace)
        self.url = url
        self.namespace = namespace
        self.timeout = timeout
        self.block = block
        self.cluster = cluster
        self._where = where(url)
        self._client: Client | None = None
        self._blocking: Client | None = None  # tails' XREAD BLOCK, longer timeout
        self._closed = False
        self._commands = Commands()  # in flight

    # ------------------------------------------------------------------ lifetime
    async def open(self) -> None:
        self._client = connect(self.url, self.timeout, self.timeout, cluster=self.cluster)
        self._blocking = connect(
            self.url, self.timeout + self.block, self.timeout, cluster=self.cluster
        )
        self._commit_script = self._client.register_script(COMMIT_LUA)
        self._epoch_script = self._client.register_script(EPOCH_LUA)
        self._acquire_script = self._client.register_script(ACQUIRE_LUA)
        self._release_script = self._client.register_script(RELEASE_LUA)
        self._renew_script = self._client.register_script(RENEW_LUA)
        self._put_task_script = self._client.register_script(PUT_TASK_LUA)
        with self._failing("open"):
            await check_server(self.url, self.timeout, cluster=self.cluster)
        await self._run("open", self._load_scripts)
        self._epoch = await self.current_epoch()
        if await self._run("open", lambda r: r.exists(self._layout.old_epoch)):
            log.warning(
                "store_old_layout_ignored",
                namespace=self.namespace,
                epoch=self._epoch,
                note="streams written before the per-session key layout are not read: "
                "their ids get unknown_stream; their keys expire by their own TTLs",
            )

    async def _load_scripts(self, client: Client) -> None:
        """SCRIPT LOAD each script (a cluster client sends it to every master)."""
        for script in (COMMIT_LUA, EPOCH_LUA, ACQUIRE_LUA, RELEASE_LUA, RENEW_LUA, PUT_TASK_LUA):
            await client.script_load(script)

    async def close(self) -> None:
        self._closed = True
        self._commands.cancel()
        for client in (self._client, self._blocking):
            if client is not None:
                with contextlib.suppress(RedisError, OSError):
                    await client.aclose()
        # Their connections are closed: they end now, or never will.
        stuck = await self._commands.ended(CLOSE_WAIT_SECONDS)
        if stuck:
            log.warning("redis_blocked_calls_left", count=stuck)

    async def current_epoch(self) -> str:
        """The epoch in Redis now (minted anew if it was flushed); :attr:`epoch` stays the
        one seen at :meth:`open`, so a caller compares the two."""
        epoch = await self._run(
            "read the epoch",
            lambda _: self._epoch_script(
                [self._layout.epoch], [secrets.token_hex(6), ms(EPOCH_TTL_S)]
            ),
        )
        return text(epoch)

    async def _run(
        self, doing: str, call: Callable[[Client], Awaitable[T]], *, blocking: bool = False
    ) -> T:
        """``call`` on the client (``blocking``: the blocking reads' client), as one of
        :attr:`_commands` (a cancelled caller ends at once; its command is left to end);
        Redis' errors come out as StoreError, and so does a command :meth:`close` ended."""
        with self._failing(doing):
            client = self._blocking if blocking else self._client
            assert client is not None, "_failing checked that the store is open"
            try:
                return await self._commands.run(call(client))
            except Ended:
                raise StoreError(f"the redis store ({self._where}) is closed") from None

    @contextlib.contextmanager
    def _failing(self, doing: str) -> Iterator[None]:
        """Turn Redis' errors (network, server, refused scripts) into StoreError."""
        if self._closed:
            raise StoreError(f"the redis store ({self._where}) is closed")
        if self._client is None:
            raise StoreError(f"the redis store ({self._where}) is not open")
        try:
            yield
        except (RedisError, OSError) as exc:
            raise StoreError(f"redis at {self._where}: {doing} failed: {exc}") from exc

    def _key(self, kind: str, name: str) -> str:
        return self._layout.key(kind, name)

    def _stream_keys(self, key: str) -> StreamKeys:
        return self._layout.stream(key)

    # ------------------------------------------------------------------ logs
    async def commit(self, batch: Batch, now: float) -> list[str]:
        if not batch:
            return []
        replies = await self._commit_parts(
            [
                commit_call(self._layout, bucket, part, now, self.limits)
                for bucket, part in by_bucket(batch).items()
            ]
        )
        # Each part's reply: the keys fencing refused in it (nothing applied to them).
        return [text(key) for reply in replies for key in cast(list[bytes], reply)]

    async def _commit_parts(self, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """Run ``COMMIT_LUA`` once per part (bucket); their replies, in order. Several
        parts go as EVALSHAs in one pipeline (a cluster client: one per master), their
        scripts loaded again on NOSCRIPT (a restarted or flushed server, a new master)."""

        async def commit(client: Client) -> list[Any]:
            if len(calls) == 1 and isinstance(client, aioredis.Redis):  # one server
                keys, args = calls[0]
                sha = self._commit_script.sha
                try:
                    return [await redis_fast.evalsha(client, sha, keys, args)]
                except NoScriptError:  # a restarted or flushed server
                    await self._load_scripts(client)
                    return [await redis_fast.evalsha(client, sha, keys, args)]
            if len(calls) == 1:
                return [await self._commit_script(*calls[0])]
            try:
                return await self._commit_pipelined(client, calls)
            except NoScriptError:
                await self._load_scripts(client)
                return await self._commit_pipelined(client, calls)

        return await self._run("commit", commit)

    async def _commit_pipelined(
        self, client: Client, calls: list[tuple[list[str], list[Any]]]
    ) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for keys, args in calls:
            pipe.evalsha(self._commit_script.sha, len(keys), *keys, *args)
        return list(await pipe.execute())

    async def get_stream(self, key: str, now: float) -> StreamRecord | None:
        fields = await self._run(
            "read a stream record", lambda r: r.hgetall(self._stream_keys(key).record)
        )
        return record_of(key, cast(dict[bytes, bytes], fields), now)

    async def _snapshot(
        self, key: str, after: int, now: float, limit: int | None, wake: bool = False
    ) -> tuple[StreamRecord, list[Entry], str]:
        """The record, the entries after ``after`` and (``wake``) the wake key's newest
        id, read in one MULTI; raises what :func:`check_read` raises."""
        names = self._stream_keys(key)

        async def snapshot(client: Client) -> tuple[dict[bytes, bytes], list[Entry], list[Any]]:
            if isinstance(client, aioredis.Redis):  # one server: raw replies, parsed here
                xrange: list[Arg] = ["XRANGE", names.log, b"%d-0" % (after + 1), "+"]
                if limit is not None:
                    xrange += ("COUNT", limit)
                commands: list[list[Arg]] = [["HGETALL", names.record], xrange]
                if wake:
                    commands.append(["XREVRANGE", names.wake, "+", "-", "COUNT", 1])
                raw = await redis_fast.transaction(client, commands)
                fields = raw[0]  # a map (RESP3) or its flat pairs (RESP2)
                record = fields if isinstance(fields, dict) else pairs(fields)
                return record, entries_of(raw[1]), raw[2] if wake else []
            pipe = client.pipeline(transaction=True)
            pipe.hgetall(names.record)
            pipe.xrange(names.log, min=f"{after + 1}-0", max="+", count=limit)
            if wake:
                pipe.xrevrange(names.wake, count=1)
            results = list(await pipe.execute())
            return results[0], [entry_of(item) for item in results[1]], results[2] if wake else []

        fields, entries, woken = await self._run("read a stream", snapshot)
        record = check_read(record_of(key, fields, now), after)
        newest = woken[0][0].decode() if woken else "0-0"
        return record, entries, newest

    async def read(self, key: str, after: int, now: float, limit: int | None = None) -> list[Entry]:
        _, entries, _ = await self._snapshot(key, after, now, limit)
        return entries

    async def summary(self, key: str, after: int, now: float) -> Unacknowledged:
        return count_marks(await self.read(key, after, now))

    async def tail(self, key: str, after: int) -> AsyncIterator[list[Entry]]:
        while True:
            record, entries, woken_at = await self._snapshot(
                key, after, time.time(), TAIL_BATCH, wake=True
            )
            if entries:
                after = entries[-1].seq
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

    # ------------------------------------------------------------------ messages
    async def send(self, to: str, message: dict[str, Any]) -> None:
        inbox = self._key("inbox", to)

        async def push(client: Client) -> None:
            async with client.pipeline(transaction=True) as pipe:
                pipe.rpush(inbox, json.dumps(message, separators=(",", ":")))
                pipe.pexpire(inbox, INBOX_TTL_MS)
                await pipe.execute()

        await self._run("send a message", push)

    async def receive(self, owner: str) -> AsyncIterator[dict[str, Any]]:
        inbox = self._key("inbox", owner)
        while True:
            popped = await self._run(
                "receive messages", lambda r: r.blpop([inbox], timeout=self.block), blocking=True
            )
            if popped is not None:
                yield json.loads(popped[1])

    async def live_streams(self, owner: str | None, now: float) -> list[StreamRecord]:
        """Each bucket's index's keys that expire after ``now`` (one pipelined ZRANGE per
        bucket), then their records (one pipelined HGETALL each): the cost is
        :data:`~proxy.store.redis_layout.BUCKETS` small reads plus the live streams."""

        async def list_live(client: Client) -> tuple[list[str], Sequence[dict[bytes, bytes]]]:
            pipe = client.pipeline(transaction=False)
            for bucket in range(BUCKETS):
                pipe.zrange(self._layout.live(bucket), f"({ms(now)}", "+inf", byscore=True)
            found = cast(list[list[bytes]], await pipe.execute())
            keys = [text(member) for members in found for member in members]
            pipe = client.pipeline(transaction=False)
            for key in keys:
                pipe.hgetall(self._stream_keys(key).record)
            return keys, await pipe.execute() if keys else []

        keys, rows = await self._run("list live streams", list_live)
        records = [record_of(key, row, now) for key, row in zip(keys, rows, strict=True)]
        return [
            r
            for r in records
            if r is not None and r.state == LIVE and (owner is None or r.owner == owner)
        ]

    # ------------------------------------------------------------------ sessions, leases
    async def put_session(self, record: SessionRecord) -> None:
        value = {
            "epoch": record.epoch,
            "owner": record.owner,
            "protocol_version": record.protocol_version,
            "expires_at": record.expires_at,
        }
        expires_at = record.expires_at
        if expires_at is None:
            expires_at = time.time() + DEFAULT_TTL_S
        key = self._key("session", record.session_id)
        await self._run(
            "write a session", lambda r: r.set(key, json.dumps(value), pxat=ms(expires_at))
        )

    async def get_session(self, session_id: str, now: float) -> SessionRecord | None:
        raw = await self._run("read a session", lambda r: r.get(self._key("session", session_id)))
        if raw is None:
            return None
        value = json.loads(raw)
        expires_at = value["expires_at"]
        if expires_at is not None and expires_at <= now:
            return None
        return SessionRecord(
            session_id, value["epoch"], value["owner"], value["protocol_version"], expires_at
        )

    async def drop_session(self, session_id: str) -> None:
        await self._run("drop a session", lambda r: r.delete(self._key("session", session_id)))

    async def acquire_lease(self, name: str, owner: str, ttl: float, now: float) -> bool:
        """As the contract says; the lease lapses on the Redis server's clock (``now`` is
        not used), so every replica agrees on when."""
        taken = await self._run(
            "acquire a lease",
            lambda _: self._acquire_script(
                [self._key("lease", name)], [owner, max(1, round(ttl * 1000))]
            ),
        )
        return bool(taken)

    async def renew_lease(self, name: str, owner: str, ttl: float, now: float) -> bool:
        renewed = await self._run(
            "renew a lease",
            lambda _: self._renew_script(
                [self._key("lease", name)], [owner, max(1, round(ttl * 1000))]
            ),
        )
        return bool(renewed)

    async def release_lease(self, name: str, owner: str) -> None:
        await self._run(
            "release a lease", lambda _: self._release_script([self._key("lease", name)], [owner])
        )

    async def lease_owner(self, name: str, now: float) -> str | None:
        held = await self._run("read a lease", lambda r: r.get(self._key("lease", name)))
        return text(held) if held is not None else None

    # ------------------------------------------------------------------ tasks
    async def put_task(self, task_id: str, record: dict[str, Any], expires_at: float) -> bool:
        value = json.dumps({"record": record, "expires_at": expires_at})
        written = await self._run(
            "write a task",
            lambda _: self._put_task_script(
                [self._key("task", task_id)], [value, ms(expires_at), *sorted(TERMINAL)]
            ),
        )
        return bool(written)

    async def get_task(self, task_id: str, now: float) -> dict[str, Any] | None:
        raw = await self._run("read a task", lambda r: r.get(self._key("task", task_id)))
        if raw is None:
            return None
        value = json.loads(raw)
        if value["expires_at"] <= now:
            return None
        record: dict[str, Any] = value["record"]
        return record
