"""The Redis store: Redis ≥ 7 or Valkey, one server or a Redis Cluster, shared by every
replica of a deployment.

Its keys, what each holds and for how long, and how records and batches are encoded in
them are in :mod:`proxy.store.redis_layout`; the Lua scripts in :mod:`proxy.store.redis_lua`.

A :class:`~proxy.store.base.Batch` is split by bucket (a bucket holds whole sessions, in
one cluster slot: :func:`~proxy.store.redis_layout.by_bucket`) and each part is applied by
one Lua script (``EVALSHA``, loaded again on ``NOSCRIPT``; the parts of one batch go in one
pipeline), so replicas and readers see all of what a batch does to a
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

On one server (``redis://``, ``unix://``) a commit and a stream's read go on connections
of the store's own (:mod:`proxy.store.redis_wire`: packed in one step, a commit's entries
by :mod:`proxy.store.redis_pack`, the rest by hiredis; written
at once, the reply read as it arrives: two turns of the event loop per command; a
commit the persister starts with :meth:`RedisStore.commit_soon` lands in the reply's
own callback; a tail reads its next batch ahead while the one before is written). Every
other command runs on redis-py's client, in a task of its own that its caller waits on
(:mod:`proxy.store.redis_commands`), so a cancelled caller always ends at once with
CancelledError (redis-py alone can swallow a cancel) and :meth:`RedisStore.close` ends
every command left. Sessions, leases, tasks and messages:
:mod:`proxy.store.redis_records`; a stream's snapshot and its tail (with its read ahead):
:mod:`proxy.store.redis_reads`.
"""

from __future__ import annotations

import contextlib
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar, cast

import structlog
from hiredis import pack_command
from redis.exceptions import NoScriptError, ReadOnlyError, RedisError

from proxy.core.stream import Unacknowledged
from proxy.store.base import (
    LIVE,
    Batch,
    Entry,
    Store,
    StoreError,
    StoreLimits,
    StreamRecord,
    count_marks,
)
from proxy.store.redis_client import Client, check_server, connect, where
from proxy.store.redis_commands import Commands, Ended
from proxy.store.redis_layout import (
    BUCKETS,
    EPOCH_TTL_S,
    Layout,
    StreamKeys,
    by_bucket,
    commit_call,
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
from proxy.store.redis_pack import pack_commit, pack_per_bucket
from proxy.store.redis_reads import RedisReads
from proxy.store.redis_records import RedisRecords
from proxy.store.redis_wire import (
    Closed,
    Wire,
    checked,
    wire_for,
)

log = structlog.get_logger("proxy.store")

T = TypeVar("T")

SUMMARY_CHUNK = 1000
"""Entries a ``stream/poll``'s :meth:`RedisStore.summary` reads per command: a poll of a
50,000-event stream is 50 reads, each reply parsed in a turn of its own, never one 10 MB
reply parsed (and 50,000 entries made) in one step of the event loop."""
CLOSE_WAIT_SECONDS = 2.0
"""How long :meth:`RedisStore.close` waits for the commands it cancelled."""


class RedisStore(RedisRecords, RedisReads, Store):
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
        self._replica = False  # a READONLY reply came: redis-py's pools connect anew first
        self._commands = Commands()  # in flight
        # One server: commits and stream reads on connections of their own (a commit
        # never waits behind a read's reply); None for a cluster or TLS.
        self._wire: Wire | None = None
        self._reads: Wire | None = None
        self._given: dict[str, Counter[bytes]] = {}  # inbox messages given, not yet removed

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
        if not self.cluster:
            self._wire = wire_for(self.url, self.timeout, self._became_replica)
            self._reads = wire_for(self.url, self.timeout, self._became_replica)
        with self._failing("open"):
            evicts = await check_server(self.url, self.timeout, cluster=self.cluster)
        if evicts is not None:
            log.warning("redis_evicts_keys", redis=self._where, note=evicts)
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
        for wire in (self._wire, self._reads):
            if wire is not None:
                wire.close()
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
            if self._replica:
                await self._connect_anew()
            client = self._blocking if blocking else self._client
            assert client is not None, "_failing checked that the store is open"
            try:
                return await self._commands.run(call(client))
            except Ended:
                raise StoreError(f"the redis store ({self._where}) is closed") from None
            except ReadOnlyError:
                self._became_replica()
                raise

    def _became_replica(self) -> None:
        """A READONLY reply (from redis-py here, or told by a wire, whose link is closed
        already): the server this store reaches was made a replica (a failover
        moved the master behind the same name, and these connections still reach the old
        one). Every connection is dropped, so that the next command of each connects
        anew, to whatever the URL names now (the failed command fails: its caller's
        retry goes there). A cluster never says READONLY to a write (MOVED instead)."""
        if not self._replica:
            log.warning("redis_server_became_replica", redis=self._where)
        self._replica = True
        for wire in (self._wire, self._reads):
            if wire is not None:
                wire.drop()

    async def _connect_anew(self) -> None:
        """Drop redis-py's pooled connections (after :meth:`_became_replica`)."""
        self._replica = False
        for client in (self._client, self._blocking):
            pool = getattr(client, "connection_pool", None)
            if pool is not None:
                await pool.disconnect()

    async def _wired(
        self, doing: str, wire: Wire, packed: bytes, count: int = 1, *, scripts: bool = False
    ) -> list[Any]:
        """The replies to ``packed`` (``count`` commands) on ``wire``, an error reply among
        them as an exception instance; ``scripts``: a NOSCRIPT reply (a restarted or
        flushed server) loads the scripts and sends ``packed`` once more."""
        with self._failing(doing):
            try:
                replies = await wire.call(packed, count)
                if scripts and any(isinstance(reply, NoScriptError) for reply in replies):
                    await self._run(doing, self._load_scripts)
                    replies = await wire.call(packed, count)
            except Closed:
                raise StoreError(f"the redis store ({self._where}) is closed") from None
            return replies

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
        parts = by_bucket(batch)
        if self._wire is not None:  # one server: the EVALSHAs written at once on the wire
            sha = self._commit_script.sha
            packed = b"".join(
                pack_commit(sha, self._layout, bucket, part, now, self.limits)
                for bucket, part in parts.items()
            )
            replies = await self._wired("commit", self._wire, packed, len(parts), scripts=True)
            with self._failing("commit"):
                checked(replies)
        else:
            replies = await self._commit_parts(
                [
                    commit_call(self._layout, bucket, part, now, self.limits)
                    for bucket, part in parts.items()
                ]
            )
        # Each part's reply: the keys fencing refused in it (nothing applied to them).
        return [text(key) for reply in replies for key in cast(list[bytes], reply)]

    def commit_soon(
        self, batch: Batch, now: float, landed: Callable[[list[str] | Exception], None]
    ) -> bool:
        """:meth:`commit` written now on the store's own connection, its outcome handed to
        ``landed`` as the reply is read (no task, no future: two turns of the event loop
        fewer for a call's answer waiting for its commit). Not retried here: a NOSCRIPT
        reply (a flushed script cache), a broken connection or any error is handed to
        ``landed`` as a StoreError, and :meth:`commit` (which loads, reconnects) does the
        rest. False, nothing sent: no connection up (a cluster, TLS, none made yet)."""
        wire = self._wire
        if wire is None or self._closed or not batch:
            return False
        parts = by_bucket(batch)
        sha = self._commit_script.sha
        packed = b"".join(
            pack_commit(sha, self._layout, bucket, part, now, self.limits)
            for bucket, part in parts.items()
        )

        def replied(replies: list[Any] | Exception) -> None:
            if not isinstance(replies, Exception):
                error = next((r for r in replies if isinstance(r, Exception)), None)
                if error is None:
                    landed([text(key) for reply in replies for key in cast(list[bytes], reply)])
                    return
                replies = error
            landed(StoreError(f"redis at {self._where}: commit failed: {replies}"))

        return wire.send_then(packed, len(parts), replied)

    async def _commit_parts(self, calls: list[tuple[list[str], list[Any]]]) -> list[Any]:
        """Run ``COMMIT_LUA`` once per part (bucket) through redis-py; their replies, in
        order. Several parts go as EVALSHAs in one pipeline (a cluster client: one per
        master), their scripts loaded again on NOSCRIPT (a restarted or flushed server, a
        new master)."""

        async def commit(client: Client) -> list[Any]:
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

    async def read(self, key: str, after: int, now: float, limit: int | None = None) -> list[Entry]:
        _, entries, _ = await self._snapshot(key, after, now, limit)
        return entries

    async def summary(self, key: str, after: int, now: float) -> Unacknowledged:
        """Counted :data:`SUMMARY_CHUNK` entries at a time. Each read checks the record
        again, so the answer is the stream as the last read found it (one trimmed past
        ``after`` meanwhile raises, as a poll started then would)."""
        messages = requests = errors = 0
        while True:
            entries = await self.read(key, after, now, SUMMARY_CHUNK)
            counted = count_marks(entries)
            messages += counted.messages
            requests += counted.requests
            errors += counted.errors
            if len(entries) < SUMMARY_CHUNK:
                return Unacknowledged(messages, requests, errors)
            after = entries[-1].seq

    # ------------------------------------------------------------------ listing
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

        if self._reads is not None:  # one server: on the reads' own connection
            keys, rows = await self._live_wired(self._reads, now)
        else:
            keys, rows = await self._run("list live streams", list_live)
        records = [record_of(key, row, now) for key, row in zip(keys, rows, strict=True)]
        return [
            r
            for r in records
            if r is not None and r.state == LIVE and (owner is None or r.owner == owner)
        ]

    async def _live_wired(
        self, wire: Wire, now: float
    ) -> tuple[list[str], Sequence[dict[bytes, bytes]]]:
        """:meth:`live_streams`' two reads packed at once (not 256 redis-py commands
        built and parsed in one step of the loop: ~10 ms of a replica's CPU at each reap)."""
        ranges = pack_per_bucket(self._layout, "ZRANGE", f"({ms(now)}", "+inf", "BYSCORE")
        found = await self._wired("list live streams", wire, ranges, BUCKETS)
        with self._failing("list live streams"):
            keys = [text(member) for members in checked(found) for member in members]
        if not keys:
            return [], []
        records = [self._stream_keys(key).record for key in keys]
        packed = b"".join(pack_command(("HGETALL", r)) for r in records)  # type: ignore[arg-type]
        rows = await self._wired("list live streams", wire, packed, len(keys))
        with self._failing("list live streams"):
            return keys, [pairs(row) for row in checked(rows)]

    # ------------------------------------------------------------------ housekeeping
    async def sweep(self, now: float) -> int:
        """Redis expires every key itself; what it cannot expire is a member of a
        bucket's live index whose stream expired while LIVE (an abandoned session's
        call). The index key lives as long as its latest member, and :meth:`live_streams`
        reads only members whose expiry is to come; the sweep alone removes the others
        (the commit script did, on every commit, before the seventh pass: a call here per
        commit for what one sweep a minute does). Here: one ``ZREMRANGEBYSCORE`` per
        bucket, pipelined (a cluster client: one pipeline per master); how many members
        went."""

        async def sweep_live(client: Client) -> list[int]:
            pipe = client.pipeline(transaction=False)
            for bucket in range(BUCKETS):
                pipe.zremrangebyscore(self._layout.live(bucket), "-inf", ms(now))
            return cast(list[int], await pipe.execute())

        if self._reads is not None:
            ranges = pack_per_bucket(self._layout, "ZREMRANGEBYSCORE", "-inf", str(ms(now)))
            swept = await self._wired("sweep the live indexes", self._reads, ranges, BUCKETS)
            with self._failing("sweep the live indexes"):
                return sum(checked(swept))
        return sum(await self._run("sweep the live indexes", sweep_live))
