"""SSE event ids: which session epoch, which stream, which position.

2025-11-25 transports §Resumability: event ids "MUST be globally unique across all
streams within that session" and "SHOULD encode sufficient information to identify the
originating stream". Ours read ``<epoch>.<stream>.<seq>``:

- ``epoch`` is a random tag minted with the session (from the runtime's id generator). An
  id carrying another epoch was issued by another session (or an earlier life of the
  proxy) and is refused, never misread as a position in this one.
- ``stream`` is the stream's number in the session (0 is the standalone GET stream).
- ``seq`` is the position of the event in the stream's log, from 1. Resuming from
  ``seq`` replays ``seq + 1`` onwards.

A priming event (an id with empty data) carries the position the client is at plus a
fourth part, the attachment number: ``<epoch>.<stream>.<seq>.<attach>``. It names the same
cursor as ``<seq>`` yet stays unique within the session.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core.errors import ResumeError

_MAX_PART = 2**53


@dataclass(frozen=True, slots=True)
class EventPosition:
    epoch: str
    stream: int
    seq: int


def format_event_id(epoch: str, stream: int, seq: int, attach: int | None = None) -> str:
    if attach is None:
        return f"{epoch}.{stream}.{seq}"
    return f"{epoch}.{stream}.{seq}.{attach}"


def event_id_prefix(epoch: str, stream: int) -> str:
    """What every id of ``stream`` starts with: ``format_event_id(epoch, stream, seq)`` is
    this followed by ``seq``."""
    return f"{epoch}.{stream}."


def _number(text: str) -> int:
    if not (text.isascii() and text.isdigit()) or len(text) > 16:
        raise ValueError(text)
    value = int(text)
    if value >= _MAX_PART:
        raise ValueError(text)
    return value


def parse_event_id(text: str) -> EventPosition:
    """Parse a ``Last-Event-ID``; raise ``ResumeError(malformed_event_id)`` if it is not ours."""
    parts = text.strip().split(".")
    try:
        if len(parts) not in (3, 4) or not parts[0].isalnum() or not parts[0].isascii():
            raise ValueError(text)
        stream, seq = _number(parts[1]), _number(parts[2])
        if len(parts) == 4:
            _number(parts[3])
    except ValueError:
        raise ResumeError(
            "Last-Event-ID is not an event id issued by this proxy", reason="malformed_event_id"
        ) from None
    return EventPosition(parts[0], stream, seq)
