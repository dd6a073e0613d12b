"""A run of consecutive logged events of one stream, framed as SSE only when written.

A replay hands a connection thousands of events at once (a ``GET`` + ``Last-Event-ID``
of a finished 10,000-event burst). One :class:`EventRun` carries them as the log holds
them (the payloads, already encoded JSON, and the first position) instead of one
command and one queued frame per event: the core's work and the runtime's stay O(1) per
replay beside the copy of the payload references, and the writer frames the run in
chunks of bounded size (:func:`in_chunks`), yielding to the event loop between them, so
a long replay never holds it for long.

The bytes are those :func:`proxy.core.sse.encode_event` gives each event
(``id: <epoch>.<stream>.<seq>\\ndata: <payload>\\n\\n``), their ids those of
:func:`proxy.core.eventid.format_event_id`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

CHUNK_BYTES = 64 * 1024
"""About how many bytes of a run are framed and written at a time (an event larger than
this goes alone, whole)."""

_OVERHEAD = len(b"id: ") + len(b"\ndata: ") + len(b"\n\n")


def _digits_total(first: int, last: int) -> int:
    """The number of decimal digits of every integer in ``first..last`` (both ≥ 1)."""
    total, low, digits = 0, 1, 1
    while low <= last:
        high = low * 10 - 1
        a, b = max(first, low), min(last, high)
        if a <= b:
            total += (b - a + 1) * digits
        low, digits = high + 1, digits + 1
    return total


@dataclass(frozen=True, slots=True)
class EventRun:
    """Events ``first_seq``, ``first_seq + 1``, … of one stream, one per payload, with
    ids ``<id_prefix><seq>`` (``id_prefix`` is ``"<epoch>.<stream>."``)."""

    id_prefix: str
    first_seq: int
    payloads: Sequence[bytes]

    def __len__(self) -> int:
        return len(self.payloads)

    @property
    def last_seq(self) -> int:
        return self.first_seq + len(self.payloads) - 1

    def event_id(self, index: int) -> str:
        """The id of the run's ``index``-th event (from 0)."""
        return f"{self.id_prefix}{self.first_seq + index}"

    def size(self) -> int:
        """The bytes :meth:`encode` gives (computed, not framed)."""
        n = len(self.payloads)
        if not n:
            return 0
        fixed = n * (_OVERHEAD + len(self.id_prefix.encode()))
        return fixed + sum(map(len, self.payloads)) + _digits_total(self.first_seq, self.last_seq)

    def encode(self, start: int = 0, stop: int | None = None) -> bytes:
        """The SSE frames of events ``start`` to ``stop`` (indexes into the run)."""
        stop = len(self.payloads) if stop is None else stop
        prefix = b"id: " + self.id_prefix.encode()
        seqs = range(self.first_seq + start, self.first_seq + stop)
        return b"".join(
            [
                b"%s%d\ndata: %s\n\n" % (prefix, seq, payload)
                for seq, payload in zip(seqs, self.payloads[start:stop], strict=True)
            ]
        )

    def chunks(self, max_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
        """:meth:`encode` in pieces of at most ``max_bytes`` (whole events: an event
        larger than that is a piece alone), each framed when it is taken."""
        if self.size() <= max_bytes:  # (a live burst's turn: one piece, no size per event)
            if self.payloads:
                yield self.encode()
            return
        base = _OVERHEAD + len(self.id_prefix.encode())
        seq = self.first_seq
        digits = len(str(seq))
        bigger = 10**digits  # the first seq with one more digit
        start = budget = 0
        for index, payload in enumerate(self.payloads):
            if seq >= bigger:
                digits, bigger = digits + 1, bigger * 10
            size = base + digits + len(payload)
            if budget and budget + size > max_bytes:
                yield self.encode(start, index)
                start, budget = index, 0
            budget += size
            seq += 1
        if start < len(self.payloads):
            yield self.encode(start)


def in_chunks(items: Iterable[bytes | EventRun], max_bytes: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The SSE bytes of ``items`` (encoded frames and runs, in order) as writes of at most
    about ``max_bytes``: small frames joined, a run framed piece by piece as the writes are
    taken (lazily: a piece is framed when the write before it has been taken). Every
    item's bytes come once, in order; nothing is yielded for no items."""
    pending: list[bytes] = []
    size = 0
    for item in items:
        if isinstance(item, EventRun):
            for piece in item.chunks(max_bytes):  # each as full as the bound allows
                if pending and size + len(piece) <= max_bytes:
                    piece = b"".join([*pending, piece])
                elif pending:
                    yield b"".join(pending)
                pending, size = [], 0
                yield piece
            continue
        if pending and size + len(item) > max_bytes:
            yield b"".join(pending)
            pending, size = [], 0
        pending.append(item)
        size += len(item)
    if pending:
        yield b"".join(pending)
