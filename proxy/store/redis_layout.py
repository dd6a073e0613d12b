"""The Redis store's data layout: key names, and how records, entries and batches are
encoded in them (:mod:`proxy.store.redis` talks to the server; :mod:`proxy.store.redis_lua`
applies a batch on it).

Every key of a deployment starts with ``<ns>`` = ``mrp:<namespace>``, then a hash tag in
braces that decides its cluster slot (Redis Cluster hashes only what is inside the first
``{…}``; the namespace may hold no braces). A stream's keys are in its session's
**bucket** ``{b<n>}``, ``n`` = CRC-32 of the session's part of the stream key (``<epoch>``
of ``<epoch>.<number>``) mod :data:`BUCKETS`: every key of one session, and the bucket's
index of live streams, share one slot, so one script applies everything a batch does to
a session, and a cluster spreads the sessions over its masters. Every other key has a
tag of its own. Every key has a TTL, so nothing grows without bound:

===============================  ======  ============================================
key                              type    what, and its TTL
===============================  ======  ============================================
``<ns>:{epoch}``                 string  the epoch (see :mod:`proxy.store.base`); 30
                                         days, refreshed by ``open`` and
                                         ``current_epoch`` (each replica's lease)
``<ns>:{b<n>}:live``             zset    keys of the bucket's LIVE streams scored by
                                         their expiry (unix ms), for
                                         :meth:`RedisStore.live_streams`; until the
                                         latest score
``<ns>:{b<n>}:rec:<key>``        hash    a stream's record: ``session owner state
                                         first last rids`` (JSON) ``ann`` (0/1)
                                         ``exp`` (unix ms) ``who`` (the principal,
                                         JSON: ``null`` or a string; absent: ``null``)
                                         ``srv`` (the server, JSON: ``null`` or a
                                         string; absent: ``null``) ``fence`` (its
                                         writer's fencing token; absent: "");
                                         until ``exp``: now + ``live_ttl`` on every
                                         append while LIVE, the given ``expires_at``
                                         once COMPLETED
``<ns>:{b<n>}:log:<key>``        stream  its entries, id ``<seq>-1``, fields ``p``
                                         (payload) and ``m`` (mark, absent when 0);
                                         the record's TTL
``<ns>:{b<n>}:wake:<key>``       stream  one entry per commit that puts, trims,
                                         completes or drops a stream that had a
                                         record and adds nothing to its log (an entry
                                         added to the log wakes its tails): wakes
                                         blocked tails; 60 s
``<ns>:{session:<id>}``          string  a session record, JSON; its ``expires_at``
                                         (30 days when it has none)
``<ns>:{lease:<name>}``          string  the owner; ``ttl`` on the Redis server's clock
``<ns>:{task:<id>}``             string  a task record, JSON; its ``expires_at``
``<ns>:{inbox:<owner>}``         list    messages for a replica, JSON; 60 s after the
                                         last
``<ns>:{inbox:<owner>}:taking``  list    ``.``, then the messages read from the inbox
                                         and not yet removed (taken); 60 s after the
                                         replica's last read
===============================  ======  ============================================

Before this layout every key was ``mrp:{<namespace>}:…`` (one slot). This one does not
read those: its epoch key is new, so a store opened on such a namespace mints a new epoch,
and an event id from before gets what any id of a lost history gets (``unknown_stream``);
the old keys expire by their own TTLs (:data:`OLD_LAYOUT_EPOCH` is only looked at, to say
so in the log).
"""

from __future__ import annotations

import dataclasses
import json
import zlib
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Any

from proxy.store.base import Batch, Entry, StoreLimits, StreamRecord

EPOCH_TTL_S = 30 * 24 * 3600.0  # the epoch outlives any record; refreshed by each lease
DEFAULT_TTL_S = EPOCH_TTL_S  # a session record with no expires_at still expires
WAKE_TTL_MS = 60_000  # a wake entry only matters to tails blocked at that moment
INBOX_TTL_MS = 60_000  # a message nobody takes within a minute is dropped
BUCKETS = 256  # slots a deployment's streams spread over; live_streams reads each index
OLD_LAYOUT_EPOCH = "mrp:{{{namespace}}}:epoch"  # the epoch key of the one-slot layout


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


def session_part(key: str) -> str:
    """The part of a stream key ``<epoch>.<number>`` that names its session (the whole
    key when it has no dot)."""
    return key.rpartition(".")[0] or key


def bucket_of(key: str) -> int:
    """The bucket of a stream key: every stream of one session is in the same one."""
    return zlib.crc32(session_part(key).encode()) % BUCKETS


STREAM_KEYS_KEPT = 4096
"""How many streams' key names a :class:`Layout` keeps made (every commit names its
streams' keys; a burst's commits name the same ones)."""


class Layout:
    """The key names of one deployment (its namespace)."""

    def __init__(self, namespace: str) -> None:
        if not namespace or "{" in namespace or "}" in namespace:
            raise ValueError(f"a Redis namespace must be non-empty, without braces: {namespace!r}")
        self.prefix = f"mrp:{namespace}:"
        self.epoch = f"{self.prefix}{{epoch}}"
        self.old_epoch = OLD_LAYOUT_EPOCH.format(namespace=namespace)
        self._live = [f"{self.prefix}{{b{bucket}}}:live" for bucket in range(BUCKETS)]
        self.live_bulks = [b"$%d\r\n%b\r\n" % (len(k), k) for k in map(str.encode, self._live)]
        """Each bucket's live index as a RESP bulk string (one command per bucket, packed
        at once: :func:`~proxy.store.redis_pack.pack_per_bucket`)."""
        self._streams: dict[str, StreamKeys] = {}

    def key(self, kind: str, name: str) -> str:
        """A deployment-wide key (``session``, ``lease``, ``task``, ``inbox``), each
        ``name`` in a slot of its own."""
        return f"{self.prefix}{{{kind}:{name}}}"

    def live(self, bucket: int) -> str:
        """The index of a bucket's LIVE streams."""
        return self._live[bucket]

    def stream(self, key: str) -> StreamKeys:
        found = self._streams.get(key)
        if found is None:
            tag = f"{self.prefix}{{b{bucket_of(key)}}}"
            found = StreamKeys(f"{tag}:rec:{key}", f"{tag}:log:{key}", f"{tag}:wake:{key}")
            if len(self._streams) >= STREAM_KEYS_KEPT:
                self._streams.clear()
            self._streams[key] = found
        return found


def by_bucket(batch: Batch) -> dict[int, Batch]:
    """``batch`` split into one batch per bucket (each applied by one script, in one
    slot). A session's streams share a bucket, so each part holds whole sessions.

    Field by field, whatever fields :class:`Batch` has: a dict keyed by stream key is
    split by key, a list of stream keys or of records (``.key``) by item, and any other
    value (one for the whole batch) is copied into every part."""
    appends = batch.appends
    if len(appends) == 1 and not (
        batch.streams or batch.takeovers or batch.trimmed or batch.completed or batch.dropped
    ):  # a burst's commit: one stream's events
        return {bucket_of(next(iter(appends))): batch}
    one = one_key(batch)
    if one is not None:  # a call's commit: its record, its answer, its end
        return {bucket_of(one): batch}
    buckets = {bucket_of(key) for key in batch.touched()}
    if len(buckets) == 1:  # the common case: one session's batch, one part
        return {buckets.pop(): batch}
    names = [f.name for f in dataclasses.fields(batch)]
    whole = {
        name: getattr(batch, name)
        for name in names
        if not isinstance(getattr(batch, name), (dict, list))
    }
    parts: dict[int, Batch] = {}

    def part(key: str) -> Batch:
        found = parts.get(bucket := bucket_of(key))
        if found is None:
            found = parts[bucket] = Batch(**whole)
        return found

    for name in names:
        value = getattr(batch, name)
        if isinstance(value, dict):
            for key, item in value.items():
                getattr(part(key), name)[key] = item
        elif isinstance(value, list):
            for item in value:
                getattr(part(item if isinstance(item, str) else item.key), name).append(item)
    return parts


def one_key(batch: Batch) -> str | None:
    """The key of a batch that names one stream and takes over none (a call's commit:
    its record, its answer and its end), else None."""
    if batch.takeovers or len(batch.streams) > 1:
        return None
    key = batch.streams[0].key if batch.streams else None
    for named in (batch.appends, batch.trimmed, batch.completed, batch.dropped):
        if named:
            if len(named) > 1:
                return None
            (only,) = named
            if key is None:
                if named is batch.appends and not batch.appends[only]:
                    continue  # no events: it names nothing (commit_pieces skips it)
                key = only
            elif only != key:
                return None
    return key


def entry_of(item: tuple[bytes, dict[bytes, bytes]]) -> Entry:
    """An entry of a ``<ns>:log:<key>`` stream (an ``XRANGE`` item)."""
    entry_id, fields = item
    return Entry(int(entry_id.partition(b"-")[0]), fields[b"p"], int(fields.get(b"m", 0)))


def pairs(flat: list[Any]) -> dict[Any, Any]:
    """``{k: v}`` of a flat ``[k, v, k, v, ...]`` reply."""
    return dict(zip(flat[::2], flat[1::2], strict=True))


def entries_of(items: list[Any]) -> list[Entry]:
    """The entries of a raw ``XRANGE`` reply (hiredis' lists, no redis-py callback:
    ``[[id, [field, value, ...]], ...]``). One Python step per entry of a replay read on
    another replica (10,000 of them for a 10,000-event resume): each tuple is made by
    ``tuple.__new__`` (``Entry._make`` is a Python call with a length check), the common
    entry (``p`` alone: no mark) first; ~0.5 µs per entry against ~1.3 µs before
    (bench/README.md, helper replay)."""
    found: list[Entry] = []
    add = found.append
    new = tuple.__new__
    for entry_id, fields in items:
        seq = int(entry_id.partition(b"-")[0])
        if len(fields) == 2 and fields[0] == b"p":  # as the script adds an unmarked event
            add(new(Entry, (seq, fields[1], 0)))
        elif len(fields) == 4 and fields[0] == b"p" and fields[2] == b"m":  # a marked one
            add(new(Entry, (seq, fields[1], int(fields[3]))))
        else:
            named = pairs(fields)
            add(new(Entry, (seq, named[b"p"], int(named.get(b"m", 0)))))
    return found


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
    layout: Layout, bucket: int, batch: Batch, now: float, limits: StoreLimits
) -> tuple[list[str], list[Any]]:
    """The KEYS and ARGV of ``COMMIT_LUA`` for ``batch``, whose keys are all in ``bucket``
    (:func:`by_bucket`; the script's header comment has the layout)."""
    keys, head, appended, tail = commit_pieces(layout, bucket, batch, now, limits)
    return keys, [*head, *appended_args(appended), *tail]


def appended_args(appended: list[tuple[int, list[Entry]]]) -> list[Any]:
    """The runs of appended entries (:func:`commit_pieces`) as the script's arguments."""
    args: list[Any] = []
    for slot, entries in appended:
        args += (slot, len(entries), entries[0].seq, *run_marks(entries))
        args += [b"%d-1" % e.seq for e in entries]
        args += [e.payload for e in entries]
    return args


def run_marks(entries: list[Entry]) -> list[Any]:
    """The marks of a run as the commit script takes them: their count, then the 0-based
    index and the mark of each event that has one (most have none)."""
    marked = [x for k, e in enumerate(entries) if e.mark for x in (k, b"%d" % e.mark)]
    return [len(marked) // 2, *marked]  # b"%d": an IntFlag mark would go as its repr


def runs(entries: list[Entry]) -> list[list[Entry]]:
    """``entries`` (one stream's, seqs increasing) as runs of consecutive seqs: the
    commit script checks a run against the record once, then only adds its events. A
    stream's events in a batch are one run (the journal numbers them one by one); a gap,
    should there be one, starts another run."""
    if entries[-1].seq - entries[0].seq == len(entries) - 1:
        return [entries]
    out: list[list[Entry]] = [[entries[0]]]
    for e in entries[1:]:
        if e.seq == out[-1][-1].seq + 1:
            out[-1].append(e)
        else:
            out.append([e])
    return out


_JSON_KEPT = 1024
_json_strings: dict[str, str] = {}  # a principal's or a server's name -> its JSON


def _json(value: str | None) -> str:
    """A record's principal or server as JSON (a few names, each made once)."""
    if value is None:
        return "null"
    found = _json_strings.get(value)
    if found is None:
        found = json.dumps(value)
        if len(_json_strings) < _JSON_KEPT:
            _json_strings[value] = found
    return found


def _ids_json(ids: list[Any]) -> str:
    """A record's request ids as JSON, without the encoder for a call's (none left once
    it is answered, or one number or string): ``json.dumps``' own output."""
    if not ids:
        return "[]"
    if len(ids) == 1:
        kind = type(ids[0])
        if kind is int:
            return f"[{ids[0]:d}]"
        if kind is str:
            return f"[{encode_basestring_ascii(ids[0])}]"
    return json.dumps(ids)


def _puts(slot: int, r: StreamRecord) -> list[Any]:
    """A record's fields as the commit script takes a put."""
    expires = "" if r.expires_at is None else ms(r.expires_at)
    return [
        slot,
        r.session_id,
        r.owner,
        r.state,
        r.first_seq,
        r.last_seq,
        _ids_json(r.request_ids),
        int(r.announced),
        expires,
        _json(r.principal),
        _json(r.server),
    ]


def _burst_pieces(
    layout: Layout, bucket: int, batch: Batch, now: float, limits: StoreLimits
) -> tuple[list[str], list[Any], list[tuple[int, list[Entry]]], list[Any]] | None:
    """:func:`commit_pieces` of a batch of one stream's appends alone, one run (a burst's
    commit), built at once; None if the appends are not one run."""
    ((key, entries),) = batch.appends.items()
    if not entries or entries[-1].seq - entries[0].seq != len(entries) - 1:
        return None
    names = layout.stream(key)
    keys = [layout.live(bucket), names.record, names.log, names.wake]
    head = [ms(now), ms(now + limits.live_ttl), limits.max_events, WAKE_TTL_MS, 1, key]
    head += (batch.fence, batch.owner, 0, 0, 1)  # no takeovers, no records, one run
    return keys, head, [(1, entries)], [0, 0, 0]  # no trims, endings, drops


def _one_pieces(
    layout: Layout, bucket: int, key: str, batch: Batch, now: float, limits: StoreLimits
) -> tuple[list[str], list[Any], list[tuple[int, list[Entry]]], list[Any]]:
    """:func:`commit_pieces` of a batch that names one stream, ``key`` (:func:`one_key`):
    every part's slot is 1."""
    puts = _puts(1, batch.streams[0]) if batch.streams else []
    entries = batch.appends.get(key)
    appended: list[tuple[int, list[Entry]]] = []
    if entries:
        if entries[-1].seq - entries[0].seq == len(entries) - 1:
            appended.append((1, entries))
        else:
            appended += [(1, run) for run in runs(entries)]
    tail: list[Any] = [1, 1, batch.trimmed[key]] if batch.trimmed else [0]
    if batch.completed:
        tail += (1, 1, ms(batch.completed[key]))
    else:
        tail.append(0)
    tail += (1, 1) if batch.dropped else (0,)
    names = layout.stream(key)
    keys = [layout.live(bucket), names.record, names.log, names.wake]
    head: list[Any] = [ms(now), ms(now + limits.live_ttl), limits.max_events, WAKE_TTL_MS]
    head += (1, key, batch.fence, batch.owner, 0, len(batch.streams), *puts, len(appended))
    return keys, head, appended, tail


def commit_pieces(
    layout: Layout, bucket: int, batch: Batch, now: float, limits: StoreLimits
) -> tuple[list[str], list[Any], list[tuple[int, list[Entry]]], list[Any]]:
    """:func:`commit_call`'s KEYS and ARGV in pieces: the KEYS, the ARGV before the
    appended entries (ending with their runs' count), each run's stream slot and entries
    (:func:`runs`), the ARGV after them (:mod:`proxy.store.redis_pack` packs the entries
    itself). Each part is built only when the batch has some (a burst's commit is one
    stream's appends alone: :func:`_burst_pieces`)."""
    if len(batch.appends) == 1 and not (
        batch.streams or batch.takeovers or batch.trimmed or batch.completed or batch.dropped
    ):
        burst = _burst_pieces(layout, bucket, batch, now, limits)
        if burst is not None:
            return burst
    one = one_key(batch)
    if one is not None:
        return _one_pieces(layout, bucket, one, batch, now, limits)
    slots: dict[str, int] = {}

    def slot(key: str) -> int:
        return slots.setdefault(key, len(slots) + 1)

    puts: list[Any] = []
    for r in batch.streams:
        puts += _puts(slot(r.key), r)
    appended: list[tuple[int, list[Entry]]] = []
    for key, entries in batch.appends.items():
        if not entries:
            continue
        i = slot(key)
        if entries[-1].seq - entries[0].seq == len(entries) - 1:  # one run, as nearly always
            appended.append((i, entries))
        else:
            appended += [(i, run) for run in runs(entries)]
    fencing: list[Any] = [batch.fence, batch.owner, len(batch.takeovers)]
    for key, t in batch.takeovers.items():
        fencing += (slot(key), t.fence, b"%d" % t.last_seq)
    tail: list[Any] = [len(batch.trimmed)]
    for key, first in batch.trimmed.items():
        tail += (slot(key), first)
    tail.append(len(batch.completed))
    for key, at in batch.completed.items():
        tail += (slot(key), ms(at))
    tail.append(len(batch.dropped))
    tail += [slot(key) for key in batch.dropped]
    keys = [layout.live(bucket)]
    for key in slots:
        names = layout.stream(key)
        keys += (names.record, names.log, names.wake)
    head: list[Any] = [ms(now), ms(now + limits.live_ttl), limits.max_events]
    head += (WAKE_TTL_MS, len(slots), *slots, *fencing, len(batch.streams), *puts, len(appended))
    return keys, head, appended, tail
