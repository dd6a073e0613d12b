"""Which pooled upstream session a modern call runs on, and which idle ones stop: pure.

The pool (:mod:`proxy.modern.pool`, docs/modern.md §Pool) holds initialized legacy
sessions. With ``isolation: shared`` a new call goes to a session with nothing in flight;
a call that may make the server ask its client (``exclusive``) otherwise goes to the least
busy session where no other such call runs, so that a question over stdio can only be its
own; else the pool grows (to ``size``, or ``max_size`` for an exclusive call); else the call
shares the least loaded session. A session idle for ``idle_seconds`` is stopped, except the
first (one stays warm) and one held for listeners.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Load:
    """What the pool knows of one live session."""

    busy: int  # calls in flight
    asking: int  # of them, calls that may ask the client
    idle_since: float
    held: bool = False  # kept for listeners


def pick(loads: Sequence[Load], exclusive: bool) -> int | None:
    """The session (index) a new call may go to without growing the pool, if any."""
    best: int | None = None
    for index, load in enumerate(loads):
        if load.busy == 0:
            return index
        if exclusive and load.asking == 0 and (best is None or load.busy < loads[best].busy):
            best = index
    return best


def may_grow(live: int, exclusive: bool, *, size: int, max_size: int) -> bool:
    return live < (max_size if exclusive else size)


def least_loaded(loads: Sequence[Load]) -> int:
    """The session to share when the pool may not grow: fewest asking, then fewest busy."""
    return min(range(len(loads)), key=lambda i: (loads[i].asking, loads[i].busy))


def to_reap(loads: Sequence[Load], now: float, idle_seconds: float) -> tuple[list[int], bool]:
    """(sessions idle long enough to stop, whether others will be later): never the first
    (one stays warm), never a busy or held one."""
    stop: list[int] = []
    later = False
    for index, load in enumerate(loads):
        if index == 0 or load.busy or load.held:
            continue
        if now - load.idle_since >= idle_seconds:
            stop.append(index)
        else:
            later = True
    return stop, later
