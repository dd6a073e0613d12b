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
