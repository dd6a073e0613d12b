"""One ``EVALSHA`` on one server, packed at once: the Redis store's commit path
(:mod:`proxy.store.redis`) for a batch that is one script's call.

redis-py sends a command by encoding each argument in Python (a type check and a
conversion per argument, ~1 µs each: a call's commit has ~40) and wraps it in its retry,
observability and response-callback layers. A commit's arguments are already ``bytes``,
``str`` or ``int``, and its reply needs no callback, so it is packed in one step (by
hiredis, a dependency: ``redis[hiredis]``) and sent on a pooled
connection with redis-py's own ``send_packed_command`` / ``read_response``, which
disconnect the connection on any error mid-command (a cancel included), so a pooled
connection never holds a stale reply. As the client is configured
(:func:`proxy.store.redis_client.connect`): one retry on a fresh connection after a
broken one, none after a timeout. A Redis Cluster keeps redis-py's path (its slot
routing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio as aioredis
from hiredis import pack_command
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

Arg = bytes | str | int


async def evalsha(
    client: aioredis.Redis, sha: str, keys: Sequence[str], args: Sequence[Arg]
) -> Any:
    """``EVALSHA sha len(keys) *keys *args``'s reply; an error reply raises (NoScriptError
    included), as redis-py's own call does."""
    packed = pack_command(("EVALSHA", sha, len(keys), *keys, *args))  # type: ignore[arg-type]
    pool = client.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        try:
            await conn.send_packed_command(packed, check_health=False)
            return await conn.read_response()
        except RedisConnectionError:  # a broken connection (a restarted Redis): once more
            await conn.disconnect()
            await conn.send_packed_command(packed, check_health=False)
            return await conn.read_response()
    finally:
        await pool.release(conn)


async def transaction(client: aioredis.Redis, commands: Sequence[Sequence[Arg]]) -> list[Any]:
    """``MULTI``, ``commands``, ``EXEC`` on one pooled connection: each command's raw
    reply (hiredis' nested lists of ``bytes``, no response callback: a reader parses what
    it asked for). An error reply raises; so does any error while reading, after the
    connection is dropped (replies may be left unread on it)."""
    packed = pack_command(("MULTI",))
    for command in commands:
        packed += pack_command(tuple(command))  # type: ignore[arg-type]
    packed += pack_command(("EXEC",))
    pool = client.connection_pool
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        try:
            replies = await _exchange(conn, packed, len(commands) + 2)
        except RedisConnectionError:  # a broken connection (a restarted Redis): once more
            await conn.disconnect()
            replies = await _exchange(conn, packed, len(commands) + 2)
    finally:
        await pool.release(conn)
    done = replies[-1]
    if done is None:  # EXEC refused (a WATCH would say so; none is used)
        raise ResponseError("the transaction was aborted")
    for reply in done:
        if isinstance(reply, Exception):
            raise reply
    return list(done)


async def _exchange(conn: Any, packed: bytes, replies: int) -> list[Any]:
    """Send ``packed`` and read ``replies`` replies; on any error (an error reply, a
    cancel) the connection is dropped first: replies after it may be left unread."""
    await conn.send_packed_command(packed, check_health=False)
    read: list[Any] = []
    try:
        for _ in range(replies):
            read.append(await conn.read_response())
    except BaseException:
        await conn.disconnect()
        raise
    return read
