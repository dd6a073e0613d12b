"""The Redis store's data layout: key names, and how records, entries and batches are
encoded in them (:mod:`proxy.store.redis` talks to the server; :mod:`proxy.store.redis_lua`
applies a batch on it).

Every key of a deployment starts with ``<ns>`` = ``mrp:{<namespace>}``: the braces are a
hash tag, so all of them live in one cluster slot and one script may touch any of them.
Every key has a TTL, so nothing grows without bound:

=======================  ======  ====================================================
key                      type    what, and its TTL
=======================  ======  ====================================================
``<ns>:epoch``           string  the epoch (see :mod:`proxy.store.base`); 30 days,
                                 refreshed by ``open``, ``commit``, ``current_epoch``
``<ns>:live``            zset    keys of LIVE streams scored by their expiry (unix
                                 ms), for :meth:`RedisStore.live_streams`; until the
                                 latest score
``<ns>:rec:<key>``       hash    a stream's record: ``session owner state first last
                                 rids`` (JSON) ``ann`` (0/1) ``exp`` (unix ms) ``who``
                                 (the principal, JSON: ``null`` or a string; absent
                                 in records written before it existed: ``null``)
                                 ``srv`` (the server, JSON: ``null`` or a string;
                                 absent in records written before it: ``null``);
                                 ``fence`` (its writer's fencing token; absent: "");
                                 until ``exp``: now + ``live_ttl`` on every append
                                 while LIVE, the given ``expires_at`` once COMPLETED
``<ns>:log:<key>``       stream  its entries, id ``<seq>-1``, fields ``p`` (payload)
                                 and ``m`` (mark, absent when 0); the record's TTL
``<ns>:wake:<key>``      stream  one entry per put, completion or drop of the stream:
                                 wakes blocked tails; 60 s
``<ns>:session:<id>``    string  a session record, JSON; its ``expires_at`` (30 days
                                 when it has none)
``<ns>:lease:<name>``    string  the owner; ``ttl`` on the Redis server's clock
``<ns>:task:<id>``       string  a task record, JSON; its ``expires_at``
``<ns>:inbox:<owner>``   list    messages for a replica, JSON; 60 s after the last
=======================  ======  ====================================================
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from proxy.store.base import Batch, Entry, StoreLimits, StreamRecord

EPOCH_TTL_S = 30 * 24 * 3600.0  # the epoch outlives any record; refreshed by every commit
DEFAULT_TTL_S = EPOCH_TTL_S  # a session record with no expires_at still expires
WAKE_TTL_MS = 60_000  # a wake entry only matters to tails blocked at that moment
INBOX_TTL_MS = 60_000  # a message nobody takes within a minute is dropped


def ms(seconds: float) -> int:
    """Unix seconds as the unix milliseconds Redis takes (at least 1: 0 is refused)."""
    return max(1, round(seconds * 1000))


def text(value: bytes | str) -> str:
    """A reply as text (the clients run with ``decode_responses=False``: bytes)."""
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True, slots=True)
class StreamKeys:
    """The three keys of one stream."""

    record: str
    log: str
    wake: str


class Layout:
    """The key names of one deployment (its namespace)."""

    def __init__(self, namespace: str) -> None:
        if not namespace or "{" in namespace or "}" in namespace:
            raise ValueError(f"a Redis namespace must be non-empty, without braces: {namespace!r}")
        self.prefix = f"mrp:{{{namespace}}}:"

    def key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    def stream(self, key: str) -> StreamKeys:
        return StreamKeys(self.key("rec", key), self.key("log", key), self.key("wake", key))


def entry_of(item: tuple[bytes, dict[bytes, bytes]]) -> Entry:
    """An entry of a ``<ns>:log:<key>`` stream (an ``XRANGE`` item)."""
    entry_id, fields = item
    return Entry(int(entry_id.partition(b"-")[0]), fields[b"p"], int(fields.get(b"m", 0)))


def record_of(key: str, fields: dict[bytes, bytes], now: float) -> StreamRecord | None:
    """The record a ``<ns>:rec:<key>`` hash holds, or None (none, or expired by ``now``)."""
    if not fields:
        return None
    expires_at = int(fields[b"exp"]) / 1000
    if expires_at <= now:
        return None
    who = json.loads(fields.get(b"who", b"null"))
    srv = json.loads(fields.get(b"srv", b"null"))
    return StreamRecord(
        key,
        fields[b"session"].decode(),
        fields[b"owner"].decode(),
        fields[b"state"].decode(),
        int(fields[b"first"]),
        int(fields[b"last"]),
        json.loads(fields[b"rids"]),
        fields[b"ann"] == b"1",
        expires_at,
        who if isinstance(who, str) else None,
        srv if isinstance(srv, str) else None,
        fence=fields.get(b"fence", b"").decode(),
    )


def commit_call(
    layout: Layout, batch: Batch, now: float, limits: StoreLimits
) -> tuple[list[str], list[Any]]:
    """The KEYS and ARGV of ``COMMIT_LUA`` for ``batch`` (its header comment has the layout)."""
    slots: dict[str, int] = {}

    def slot(key: str) -> int:
        return slots.setdefault(key, len(slots) + 1)

    puts: list[Any] = []
    for r in batch.streams:
        expires = "" if r.expires_at is None else ms(r.expires_at)
        puts += (slot(r.key), r.session_id, r.owner, r.state, r.first_seq, r.last_seq)
        puts += (json.dumps(r.request_ids), int(r.announced), expires, json.dumps(r.principal))
        puts.append(json.dumps(r.server))
    appends: list[Any] = []
    appended = [(key, entries) for key, entries in batch.appends.items() if entries]
    for key, entries in appended:
        appends += (slot(key), len(entries))
        for e in entries:  # b"%d": an IntFlag mark would go as its repr
            appends += (b"%d" % e.seq, e.payload, b"%d" % e.mark)
    takeovers = [
        x for key, t in batch.takeovers.items() for x in (slot(key), t.fence, b"%d" % t.last_seq)
    ]
    trimmed = [x for key, first in batch.trimmed.items() for x in (slot(key), first)]
    completed = [x for key, at in batch.completed.items() for x in (slot(key), ms(at))]
    dropped = [slot(key) for key in batch.dropped]
    keys = [layout.key("epoch"), layout.key("live")]
    for key in slots:
        names = layout.stream(key)
        keys += (names.record, names.log, names.wake)
    header: list[Any] = [ms(now), ms(now + limits.live_ttl), limits.max_events]
    header += (ms(EPOCH_TTL_S), WAKE_TTL_MS, len(slots), *slots)
    fencing = [batch.fence, batch.owner, len(batch.takeovers), *takeovers]
    args = [*header, *fencing, len(batch.streams), *puts, len(appended), *appends]
    args += (len(batch.trimmed), *trimmed, len(batch.completed), *completed)
    args += (len(dropped), *dropped)
    return keys, args
