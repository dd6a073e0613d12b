"""A group commit in slices: small sessions first, no commit larger than a cap.

The persister (:mod:`proxy.store.persist`) gathers every session's appends of a loop turn
(or of a whole commit's round trip) into one :class:`~proxy.store.base.Batch`. Behind a
burst that batch holds thousands of one session's events, and another session's one-event
answer waited for all of them (issue 23). :func:`slices` cuts a batch into commits of at
most ``cap`` events (one session's part larger than that is cut into pieces), the
sessions with the fewest events first, the small ones (a call's answer) in a slice of
their own beside a burst, so that the persister can let a small session's writers go as
soon as its part is in the store.

A session's part keeps its order across pieces: its new stream records (and takeovers) go
with its first piece, each stream's entries stay in sequence, and its trims, endings and
drops go with its last piece. Keys name their session: ``epoch.number``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.store.base import Batch, Entry

COMMIT_CAP = 256
"""Events in one commit at most (a batch of more is cut into slices): what a small
session's answer may wait for, a commit already in flight, stays short."""

SMALL_EVENTS = 16
"""A session's part of a batch with at most this many events goes in a slice before any
larger part (a burst's)."""


def lane_of(key: str) -> str:
    """The session a stream key belongs to (its epoch)."""
    return key.split(".", 1)[0]


@dataclass(slots=True)
class Slice:
    """One commit of a cut batch, and the sessions whose whole part is in the store once
    it and every slice before it landed."""

    batch: Batch
    finished: list[str] = field(default_factory=list)
    ticket: int = 0  # the batch it is of, when not the one in commit (:func:`take_small`)


def slices(batch: Batch, cap: int = COMMIT_CAP, small: int = SMALL_EVENTS) -> list[Slice]:
    """``batch`` as commits of at most ``cap`` events; the parts of the sessions with at
    most ``small`` events (a call's answer) first, in a slice of their own when another
    session's part is larger (a burst). One slice, the batch itself, when it holds
    ``cap`` events or fewer and no such pair."""
    if len(batch.appends) <= 1 and batch.events() <= cap:  # the common case: one stream
        return [Slice(batch)]
    parts = sorted(_parts(batch).items(), key=lambda kv: kv[1].events())  # stable
    largest = parts[-1][1].events() if parts else 0
    if batch.events() <= cap and (largest <= small or parts[0][1].events() > small):
        return [Slice(batch, [lane for lane, _ in parts])]
    out: list[Slice] = []
    current = Slice(_empty(batch))
    room = cap
    smalls = False  # ``current`` holds small parts: a large one starts a slice of its own
    for lane, part in parts:
        size = part.events()
        if size > small and smalls:
            out.append(current)
            current, room, smalls = Slice(_empty(batch)), cap, False
        for piece in _pieces(part, cap):
            n = piece.events()
            if n > room and current.batch:
                out.append(current)
                current, room = Slice(_empty(batch)), cap
            _merge(current.batch, piece)
            room -= n
        smalls = smalls or size <= small
        current.finished.append(lane)  # its last piece is in this slice
    out.append(current)
    return out


def take_small(batch: Batch, busy: set[str], small: int = SMALL_EVENTS) -> Slice | None:
    """Take out of ``batch`` (in place) the parts of the sessions with 1 to ``small``
    events in it (a call's answer) that are not in ``busy`` (sessions with a part still
    to commit before): a slice that may go ahead of the slices left of the batch before
    (:class:`~proxy.store.persist.Persister`); None if there is no such part."""
    parts = _parts(batch)
    chosen = [
        lane for lane, part in parts.items() if lane not in busy and 0 < part.events() <= small
    ]
    if not chosen:
        return None
    out, rest = Slice(_empty(batch), chosen), _empty(batch)
    for lane, part in parts.items():
        _merge(out.batch if lane in chosen else rest, part)
    batch.streams, batch.appends, batch.takeovers = rest.streams, rest.appends, rest.takeovers
    batch.trimmed, batch.completed, batch.dropped = rest.trimmed, rest.completed, rest.dropped
    return out


def lanes_of(parts: list[Slice]) -> set[str]:
    """The sessions with something in ``parts``."""
    return {lane_of(key) for part in parts for key in part.batch.touched()}


def _empty(like: Batch) -> Batch:
    return Batch(fence=like.fence, owner=like.owner)


def _parts(batch: Batch) -> dict[str, Batch]:
    """Each session's part of ``batch`` (by the epoch its keys name)."""
    parts: dict[str, Batch] = {}

    def part(key: str) -> Batch:
        lane = lane_of(key)
        found = parts.get(lane)
        if found is None:
            found = parts[lane] = _empty(batch)
        return found

    for record in batch.streams:
        part(record.key).streams.append(record)
    for key, takeover in batch.takeovers.items():
        part(key).takeovers[key] = takeover
    for key, entries in batch.appends.items():
        part(key).appends[key] = entries
    for key, first in batch.trimmed.items():
        part(key).trimmed[key] = first
    for key, until in batch.completed.items():
        part(key).completed[key] = until
    for key in batch.dropped:
        part(key).dropped.append(key)
    return parts


def _pieces(part: Batch, cap: int) -> list[Batch]:
    """One session's ``part`` in pieces of at most ``cap`` events: the records with the
    first, the trims, endings and drops with the last, each stream's entries in order."""
    if part.events() <= cap:
        return [part]
    pieces = [_empty(part)]
    pieces[0].streams = part.streams
    pieces[0].takeovers = part.takeovers
    room = cap
    for key, entries in part.appends.items():
        start = 0
        while start < len(entries):
            if room == 0:
                pieces.append(_empty(part))
                room = cap
            taken: list[Entry] = entries[start : start + room]
            pieces[-1].appends[key] = taken
            start += len(taken)
            room -= len(taken)
    last = pieces[-1]
    last.trimmed, last.completed, last.dropped = part.trimmed, part.completed, part.dropped
    return pieces


def _merge(into: Batch, piece: Batch) -> None:
    into.streams.extend(piece.streams)
    into.takeovers.update(piece.takeovers)
    for key, entries in piece.appends.items():
        had = into.appends.get(key)
        into.appends[key] = entries if had is None else had + entries
    into.trimmed.update(piece.trimmed)
    into.completed.update(piece.completed)
    into.dropped.extend(piece.dropped)
