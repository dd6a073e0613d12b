"""Connecting the Redis store (:mod:`proxy.store.redis`) to one server or to a Redis
Cluster, and checking, before anything is read or written, that the server is what the
configuration says.

A cluster client (redis-py's :class:`~redis.asyncio.cluster.RedisCluster`) discovers the
masters from the one node the URL names and sends each command, script and blocking read
to the master of its keys' slot. Whether to use one is ``store.cluster``, never guessed:
:func:`check_server` asks the node the URL names (``INFO``) and refuses a mismatch.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from proxy.store.base import StoreError

MIN_MAJOR = 7  # XADD <seq>-1, PEXPIRETIME, SET PXAT, script shebangs
# Connections per cluster node (each blocked tail holds one): as unbounded as the single
# server's pool, in effect (redis-py's cluster default, 100, would refuse the 101st tail).
CLUSTER_MAX_CONNECTIONS = 1 << 20

Client = aioredis.Redis | RedisCluster


def where(url: str) -> str:
    """Where the server is, for messages: host and port (or socket path), no credentials."""
    parts = urlsplit(url)
    if parts.hostname is None:
        return parts.path or "redis"
    return f"{parts.hostname}:{parts.port or 6379}"


def connect(url: str, socket_timeout: float, connect_timeout: float, *, cluster: bool) -> Client:
    """A client (not yet connected) for the server, or the cluster, ``url`` names."""
    # One retry on a fresh connection after a broken one (a restarted Redis); none after
    # a timeout, so that an unresponsive server costs ``socket_timeout``, not more.
    retry = Retry(ExponentialBackoff(cap=0.2, base=0.02), 1, (RedisConnectionError,))
    if cluster:
        return RedisCluster.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            retry=retry,
            max_connections=CLUSTER_MAX_CONNECTIONS,
        )
    return aioredis.Redis.from_url(
        url, socket_timeout=socket_timeout, socket_connect_timeout=connect_timeout, retry=retry
    )


async def check_server(url: str, timeout: float, *, cluster: bool) -> str | None:
    """The node ``url`` names (one connection of its own) is Redis >= 7 (or Valkey), and
    a cluster node exactly when ``cluster`` is set; else StoreError saying what to set.
    Redis' own errors (unreachable, refused) pass through. Returns what to warn of: the
    node may evict the store's keys (:func:`eviction_warning`)."""
    probe = connect(url, timeout, timeout, cluster=False)
    try:
        info = await probe.info("server")
        enabled = (await probe.info("cluster")).get("cluster_enabled", 0)
        memory = await probe.info("memory")
    finally:
        await probe.aclose()
    version = str(info.get("redis_version", "0"))
    if int(version.split(".")[0]) < MIN_MAJOR:
        raise StoreError(
            f"redis at {where(url)} is version {version}: the store needs Redis "
            f">= {MIN_MAJOR} (or Valkey)"
        )
    if bool(int(enabled)) != cluster:
        said = "is a Redis Cluster node: set store.cluster: true"
        if cluster:
            said = "is not in cluster mode (cluster_enabled:0): set store.cluster: false"
        raise StoreError(f"redis at {where(url)} {said}")
    return eviction_warning(memory)


def eviction_warning(memory: dict[str, object]) -> str | None:
    """What to warn of when a node's ``INFO memory`` says it evicts keys once full: every
    key of the store has a TTL, so any ``maxmemory-policy`` but ``noeviction`` (the
    ``volatile-*`` ones too) may drop a stream's events, a session or a lease, and the
    proxy could no longer replay what it stored. None: ``noeviction`` (a full Redis
    refuses writes instead: the proxy waits for it, then answers 503 store_unavailable),
    or a server that does not say."""
    policy = str(memory.get("maxmemory_policy", "noeviction"))
    if policy == "noeviction":
        return None
    limit = int(str(memory.get("maxmemory", 0)) or 0)
    when = f"once it holds maxmemory {limit} bytes" if limit else "if maxmemory is ever set"
    return (
        f"maxmemory-policy is {policy}: Redis evicts keys {when}, and may drop a stream's "
        "events, a session or a lease the proxy relies on to replay what it stored; set "
        "maxmemory-policy noeviction (a full Redis then refuses writes, and the proxy "
        "answers 503 store_unavailable until it has room)"
    )
