"""The Redis store's small keyed values beside the logs (:mod:`proxy.store.redis`):
sessions, leases, tasks, and the messages replicas send each other. Each is one command
or one short script on redis-py's client, run as one of the store's commands
(:meth:`RedisStore._run <proxy.store.redis.RedisStore._run>`)."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import structlog
from redis.commands.core import AsyncScript

from proxy.core.taskrecord import TERMINAL
from proxy.store.base import SessionRecord
from proxy.store.redis_client import Client
from proxy.store.redis_layout import DEFAULT_TTL_S, INBOX_TTL_MS, ms, text
from proxy.store.redis_lua import TAKEN_LUA

log = structlog.get_logger("proxy.store")

T = TypeVar("T")


class RedisRecords:
    """Sessions, leases, tasks and messages; :class:`~proxy.store.redis.RedisStore` gives
    the client, the keys and the scripts."""

    block: float
    _acquire_script: AsyncScript
    _release_script: AsyncScript
    _renew_script: AsyncScript
    _put_task_script: AsyncScript
    _given: dict[str, Counter[bytes]]

    async def _run(
        self, doing: str, call: Callable[[Client], Awaitable[T]], *, blocking: bool = False
    ) -> T:
        raise NotImplementedError

    def _key(self, kind: str, name: str) -> str:
        raise NotImplementedError

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
        """``owner``'s messages, in order, each once. A message is moved (``BLMOVE``) from
        the inbox into ``<inbox>:taking`` as it is read, and removed from there only once
        the caller took it (asked for the next), so one whose read a broken connection
        lost (Redis moved it, its reply never came) is read from there instead of lost;
        one given by this store and not yet removed (the removal failed) is removed, not
        given again, even by a later call (the counts live on the store). The removal and
        the next read go in one round trip (a pipeline), as one ``BLPOP`` did."""
        inbox = self._key("inbox", owner)
        taking = f"{inbox}:taking"
        given = self._given.setdefault(taking, Counter())
        drop, look = b"", True  # look: list ``taking`` alone (at first, and while it holds more)
        while True:
            if look:
                (removed, *left), read = await self._taken(taking, drop), None
            else:
                (removed, *left), read = await self._taken_then_read(inbox, taking, drop)
            if drop:
                given[drop] -= int(removed)
            drop = b""
            held = Counter(left)
            for raw in [raw for raw in given if given[raw] > held[raw]]:
                given[raw] = held[raw]  # (removed, the reply lost)
            given += Counter()  # (no counts of zero kept)
            if read is not None:
                left.append(read)  # (moved after the listing: last in ``taking``)
            again = next((raw for raw in left if given[raw] > 0), None)
            if again is not None:
                drop, look = again, True
                continue
            if not left:  # the read timed out
                look = False
                continue
            raw, look = left[0], len(left) > 1
            given[raw] += 1
            drop = raw
            try:
                message = json.loads(raw)
            except ValueError:
                log.error("replica_message_unreadable", size=len(raw))
                continue
            yield message

    async def _taken(self, taking: str, drop: bytes) -> list[Any]:
        """Remove ``drop`` from ``taking`` (TAKEN_LUA): how many, then what is left."""
        return await self._run(
            "receive messages", lambda r: r.eval(TAKEN_LUA, 1, taking, INBOX_TTL_MS, drop)
        )

    async def _taken_then_read(self, inbox: str, taking: str, drop: bytes) -> tuple[list[Any], Any]:
        """:meth:`_taken`, then the inbox's next message (moved to ``taking``; None after
        ``block`` s), in one pipeline on a blocking read's connection."""
        block: Any = self.block  # (seconds, a float: redis-py's hint says int)

        async def both(client: Client) -> tuple[list[Any], Any]:
            async with client.pipeline(transaction=False) as pipe:
                # EVAL (Redis caches the script), not a script object: redis-py checks a
                # pipeline's scripts with SCRIPT EXISTS first, a round trip more.
                pipe.eval(TAKEN_LUA, 1, taking, INBOX_TTL_MS, drop)
                pipe.blmove(inbox, taking, block, "LEFT", "RIGHT")
                listed, read = await pipe.execute()
            return listed, read

        return await self._run("receive messages", both, blocking=True)

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
        return self._session_of(session_id, raw, now)

    async def session_and_lease(
        self, session_id: str, lease: str, now: float
    ) -> tuple[SessionRecord | None, str | None]:
        """Both reads in one pipeline (two slots on a cluster: one round trip per master)."""

        async def both(client: Client) -> list[Any]:
            pipe = client.pipeline(transaction=False)
            pipe.get(self._key("session", session_id))
            pipe.get(self._key("lease", lease))
            return list(await pipe.execute())

        raw, held = await self._run("read a session", both)
        return self._session_of(session_id, raw, now), text(held) if held is not None else None

    @staticmethod
    def _session_of(session_id: str, raw: Any, now: float) -> SessionRecord | None:
        """A session's record from its stored value (None: none, or expired at ``now``)."""
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
