"""Which pooled upstream session a modern call runs on, and which idle ones stop: pure.

The pool (:mod:`proxy.modern.pool`, docs/modern.md §Pool) holds initialized legacy
sessions. With ``isolation: shared`` a new call goes to a session with nothing in flight;
a call that may make the server ask its client (``exclusive``) otherwise goes to the least
busy session where no other such call runs, so that a question over stdio can only be its
own; else the pool grows (to ``size``, or ``max_size`` for an exclusive call); else the call
shares the least loaded session. A session idle for ``idle_seconds`` is stopped, except the
first (one stays warm), ``spare`` more, and one held for listeners.

**Spares** (``modern.pool.spare``): so that a call finds an initialized session instead of
waiting for a server to start, the pool keeps ``spare`` sessions idle besides the one a call
takes, starting them beside the first one and again whenever one is taken. A spare is a
start made ahead of time, so it is bound by the limit the call that took the last one could
have grown the pool to (``size``, or ``max_size`` for an asking call), sessions starting
included.
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


def spares_to_start(
    *, idle: int, live: int, starting: int, coming: int, spare: int, limit: int
) -> int:
    """How many spare sessions to start now.

    ``idle``: live sessions with nothing in flight, not counting one a call is taking;
    ``live``: live sessions; ``starting``: sessions being started (a call's own included);
    ``coming``: of those, spares no call has claimed yet. Enough to have ``spare`` idle or
    coming, never past ``limit`` sessions live or starting.
    """
    return max(0, min(spare - idle - coming, limit - live - starting))


def to_reap(
    loads: Sequence[Load], now: float, idle_seconds: float, spare: int = 0
) -> tuple[list[int], bool]:
    """(sessions idle long enough to stop, whether others will be later): never the first
    (one stays warm), nor the ``spare`` most recently idle others, nor a busy or held one."""
    idle = [i for i, load in enumerate(loads) if i != 0 and not load.busy and not load.held]
    idle.sort(key=lambda i: loads[i].idle_since, reverse=True)
    stop: list[int] = []
    later = False
    for index in idle[spare:]:
        if now - loads[index].idle_since >= idle_seconds:
            stop.append(index)
        else:
            later = True
    return sorted(stop), later
