"""When a stream can be resumed from an event position: the rules, stated once.

They hold wherever the stream is: in this process's buffer (:class:`~proxy.core.stream.
StreamLog`, resumed by :mod:`proxy.core.resume`), or only in a store (a session another
process held: :func:`proxy.store.base.check_read` and :mod:`proxy.downstream.stored`).
Each caller reads the positions from what it holds and asks here; it keeps only what is
its own to know (which session a stream belongs to, whose it is, whether it was
abandoned, whether it exists at all).

- 2025-11-25 transports §Resumability: the server replays the messages after the
  ``Last-Event-ID`` the client gives, on the stream that id names.
- DESIGN.md §3: a resume is whole or refused, never a partial replay: a position the
  stream never reached is ``unknown_position``, one whose following events are gone is
  ``history_truncated``.
- A completed stream whose client already has every event has nothing left to give:
  ``stream_completed`` (a 200 that only primed and closed would invite the client to
  come back until retention ends). For the standalone GET stream that means the session
  itself has ended: 404, so the client initializes again.
"""

from __future__ import annotations

from enum import Enum

from proxy.core.errors import ResumeError, SessionNotFound


class HeldIn(Enum):
    """Where the events are kept: it names what dropped them, in the error's message."""

    BUFFER = "the events after Last-Event-ID were dropped from the buffer"
    STORE = "the events after Last-Event-ID are no longer in the store"


def check_position(after: int, *, first_kept: int, last: int, held_in: HeldIn) -> None:
    """Raise unless every event after ``after`` is still held.

    ``first_kept`` is the seq of the oldest event still held (``last + 1`` when none is),
    ``last`` the seq of the newest event written (0 before the first).
    """
    if after < 0 or after > last:
        raise ResumeError(
            "Last-Event-ID names a position this stream never reached", reason="unknown_position"
        )
    if after + 1 < first_kept:
        raise ResumeError(held_in.value, reason="history_truncated")


def check_unfinished(after: int, *, last: int, completed: bool, standalone: bool) -> None:
    """Raise if a client that has the events up to ``after`` (a position the stream
    reached) has nothing left to get: the stream completed and ``after`` is its end."""
    if completed and after == last:
        if standalone:
            raise SessionNotFound("Session not found: it has ended")
        raise ResumeError(
            "the stream is complete and the client already has all of it",
            reason="stream_completed",
        )


def check_resume(
    after: int,
    *,
    first_kept: int,
    last: int,
    held_in: HeldIn,
    completed: bool,
    standalone: bool,
) -> None:
    """Raise unless a client that has the events up to ``after`` may resume the stream:
    its replay must be whole (:func:`check_position`), and there must be something left
    to give it (:func:`check_unfinished`)."""
    check_position(after, first_kept=first_kept, last=last, held_in=held_in)
    check_unfinished(after, last=last, completed=completed, standalone=standalone)
