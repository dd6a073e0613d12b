"""A group commit in slices: small sessions first, no commit larger than a cap.

The persister (:mod:`proxy.store.persist`) gathers every session's appends of a loop turn
(or of a whole commit's round trip) into one :class:`~proxy.store.base.Batch`. Behind a
burst that batch holds thousands of one session's events, and another session's one-event
answer waited for all of them (issue 23). :func:`slices` cuts a batch larger than ``cap``
events into commits of at most ``cap`` events (one session's part larger than that alone
is cut into pieces), the sessions with the fewest events first, so that the persister can
let a small session's writers go as soon as its part is in the store.

A session's part keeps its order across pieces: its new stream records (and takeovers) go
with its first piece, each stream's entries stay in sequence, and its trims, endings and
drops go with its last piece. Keys name their session: ``epoch.number``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.store.base import Batch, Entry

COMMIT_CAP = 512
"""Events in one commit at most (a batch of more is cut into slices)."""


def lane_of(key: str) -> str:
    """The session a stream key belongs to (its epoch)."""
    return key.split(".", 1)[0]


@dataclass(slots=True)
class Slice:
    """One commit of a cut batch, and the sessions whose whole part is in the store once
    it and every slice before it landed."""

    batch: Batch
    finished: list[str] = field(default_factory=list)


def slices(batch: Batch, cap: int = COMMIT_CAP) -> list[Slice]:
    """``batch`` as commits of at most ``cap`` events, the smallest sessions' parts first
    (one slice, the batch itself, when it holds ``cap`` events or fewer)."""
    if batch.events() <= cap:
        return [Slice(batch, list(_parts(batch)))]
    out: list[Slice] = []
    current = Slice(_empty(batch))
    room = cap
    ordered = sorted(_parts(batch).items(), key=lambda kv: kv[1].events())  # stable
    for lane, part in ordered:
        for piece in _pieces(part, cap):
            n = piece.events()
            if n > room and current.batch:
                out.append(current)
                current, room = Slice(_empty(batch)), cap
            _merge(current.batch, piece)
            room -= n
        current.finished.append(lane)  # its last piece is in this slice
    out.append(current)
    return out


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
