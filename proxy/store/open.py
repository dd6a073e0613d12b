"""Make the configured store, and end what a dead proxy left live in it."""

from __future__ import annotations

import json
import time
from typing import Any

import structlog

from proxy.config import StoreConfig
from proxy.core import jsonrpc, seed
from proxy.core.errors import LostReason, lost_answer
from proxy.core.stream import Mark
from proxy.store.base import Batch, Entry, Store, StoreLimits, StreamRecord
from proxy.store.memory import MemoryStore

log = structlog.get_logger("proxy.store")


def make_store(config: StoreConfig, limits: StoreLimits) -> Store:
    """The store ``config`` names, not yet opened."""
    if config.kind == "sqlite":
        from proxy.store.sqlite import SqliteStore

        return SqliteStore(config.path, limits, synchronous=config.synchronous)
    if config.kind == "redis":
        from proxy.store.redis import RedisStore

        return RedisStore(config.url, config.namespace, limits, cluster=config.cluster)
    return MemoryStore(limits)


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


async def end_orphans(store: Store, owner: str | None, retention: float, reason: str) -> int:
    """End every LIVE stream of ``owner`` (None: of anyone): a clean ending for each
    request a dead proxy never answered, then COMPLETED with ``retention`` to be resumed.
    """
    now = time.time()
    records = await store.live_streams(owner, now)
    for record in records:
        entries: list[Any] = []
        if record.last_seq >= record.first_seq:
            entries = await store.read(record.key, record.first_seq - 1, now)
        ending = ending_of(record, entries, reason)
        batch = Batch(completed={record.key: now + retention})
        if ending:
            batch.appends[record.key] = ending
        await store.commit(batch, now)
    if records:
        log.info("store_orphans_ended", streams=len(records), reason=reason)
    return len(records)
