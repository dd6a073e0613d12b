"""Make the configured store, and end what a dead proxy left live in it."""

from __future__ import annotations

import json
import time
from typing import Any

import structlog

from proxy.config_sections import StoreConfig
from proxy.core import jsonrpc, seed
from proxy.core.errors import LostReason, lost_answer
from proxy.core.stream import Mark
from proxy.store.base import LIVE, Batch, Entry, Store, StoreLimits, StreamRecord, Takeover
from proxy.store.memory import MemoryStore

log = structlog.get_logger("proxy.store")


def make_store(config: StoreConfig, limits: StoreLimits) -> Store:
    """The store ``config`` names, not yet opened."""
    store: Store
    if config.kind == "sqlite":
        from proxy.store.sqlite import SqliteStore

        store = SqliteStore(config.path, limits, synchronous=config.synchronous)
    elif config.kind == "redis":
        from proxy.store.redis import RedisStore

        store = RedisStore(config.url, config.namespace, limits, cluster=config.cluster)
    else:
        store = MemoryStore(limits)
    store.unavailable_wait = config.unavailable_wait_seconds
    return store


def _answered_ids(entries: list[Entry]) -> set[str]:
    """The ids (as JSON) of the responses already in a log."""
    found: set[str] = set()
    for entry in entries:
        try:
            msg = json.loads(entry.payload)
        except ValueError:
            continue
        if isinstance(msg, dict) and "method" not in msg and ("result" in msg or "error" in msg):
            found.add(json.dumps(msg.get("id")))
    return found


_LOST_MESSAGES = {
    LostReason.PROXY_RESTARTED: "the proxy restarted while the request ran",
    LostReason.OWNER_LOST: "the proxy replica running the request was lost",
}


def ending_of(record: StreamRecord, entries: list[Entry], reason: str) -> list[Entry]:
    """What a stream whose proxy died gets appended: an error for each request it never
    answered (``data.reason``: ``reason``, a :class:`LostReason` value), then the seed's
    end notification if announced."""
    answered = _answered_ids(entries)
    lost = LostReason(reason)
    message = _LOST_MESSAGES.get(lost, "the request was lost")
    payloads: list[tuple[bytes, int]] = []
    for request_id in record.request_ids:
        if json.dumps(request_id) in answered:
            continue
        error = lost_answer(request_id, lost, message)
        payloads.append((jsonrpc.encode(error), int(Mark.ERROR)))
    if record.announced:
        end = seed.end_notification(record.key)
        payloads.append((jsonrpc.encode(end), int(Mark.NONE)))
    first = record.last_seq + 1
    return [Entry(seq, payload, mark) for seq, (payload, mark) in enumerate(payloads, first)]


ENDING_ATTEMPTS = 3
"""How often an ending is computed again when its stream moved meanwhile (its old owner
woke up and wrote once more before it learned it is fenced)."""


async def end_orphans(
    store: Store,
    owner: str | None,
    retention: float,
    reason: str,
    *,
    fence: str = "",
    spare: str | None = None,
) -> int:
    """End every LIVE stream of ``owner`` (None: of anyone) but those whose token is
    ``spare``: a clean ending for each request a dead proxy never answered, then COMPLETED
    with ``retention`` to be resumed. Each is a takeover to ``fence`` (this writer's
    token): its old writer can append nothing after it (:mod:`proxy.store.fencing`)."""
    now = time.time()
    records = await store.live_streams(owner, now)
    ended = 0
    for record in records:
        if record.fence != spare and await _end_orphan(store, record, retention, reason, fence):
            ended += 1
    if ended:
        log.info("store_orphans_ended", streams=ended, reason=reason)
    return ended


async def _end_orphan(
    store: Store, record: StreamRecord, retention: float, reason: str, fence: str
) -> bool:
    """Take ``record`` over and end it; False if another writer ended it first."""
    found: StreamRecord | None = record
    for _ in range(ENDING_ATTEMPTS):
        assert found is not None
        now = time.time()
        entries: list[Any] = []
        if found.last_seq >= found.first_seq:
            entries = await store.read(found.key, found.first_seq - 1, now)
        ending = ending_of(found, entries, reason)
        takeover = Takeover(found.fence, found.last_seq)
        batch = Batch(
            completed={found.key: now + retention}, takeovers={found.key: takeover}, fence=fence
        )
        if ending:
            batch.appends[found.key] = ending
        if not await store.commit(batch, now):
            return True
        found = await store.get_stream(found.key, time.time())
        if found is None or found.state != LIVE:
            return False  # ended (or gone) by another: nothing to add
    log.warning("store_orphan_not_ended", stream=record.key, reason=reason)
    return False
