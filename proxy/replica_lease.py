"""What a replica can tell about leases from when it looked (DESIGN.md §9): a lease that
*lapsed* (its holder was paused, cut off or dead past it) from one that was *lost* (its
key went with the data of a Redis master that failed without a replica, a flush, a
failover to a replica that had not yet received it).

A lease key's expiry runs on the store's clock and only moves forward while its holder
renews it, every third of ``lease_seconds``. So:

- **The holder** (:meth:`LeaseClock.lost_not_lapsed`): a renewal *sent* less than a
  lease after the last renewal that held was sent that finds its lease missing cannot be
  a lapse of this replica (the key had at least that long to live when it was sent): the
  key was lost, or Redis itself stalled past its expiry before it took the renewal (or
  before it answered the epoch read that ends each round of renewal: a renewal sent
  less than a lease after that round ended is no lapse either).
  After a renewal that could not reach the store (an outage) the holder cannot tell,
  and treats it as lost too. Either way it takes the lease again only if nobody reaped
  it meanwhile (:mod:`proxy.replicas`); a lapse still loses its sessions, as fencing
  says.
- **Another replica** (:meth:`LeaseClock.note`, :meth:`LeaseClock.missing_long`): a
  holder whose key was lost takes it again within a third of a lease. So a lease found
  missing is *presumed alive* for :attr:`LeaseClock.grace` (half a lease) if this replica
  saw it held shortly before, or found the store unreachable (or stalled: a command
  that waited a third of a lease) itself less than a lease before (an outage longer
  than the lease's rest lets every key lapse, and their holders take them again at their
  first renewal after it: a long outage also keeps this replica from seeing them held
  meanwhile); and it is reaped (its streams ended with
  ``owner_lost``) only once it was missing at two looks at least :attr:`grace` apart,
  never seen held in between.

Times are this process's monotonic clock (injected, for the tests); the store's clock is
never compared with it, only durations, which run at the same rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], float]

FORGET_AFTER_LEASES = 10
"""How long an owner missing (never seen held again) stays in the notes."""


class LeaseClock:
    """This replica's notes on its own lease and on the others' (one per Replicas)."""

    def __init__(self, lease_seconds: float, clock: Clock = time.monotonic) -> None:
        self.lease_seconds = lease_seconds
        self.grace = lease_seconds / 2
        self.clock = clock
        self._renewed_at: float | None = None  # the last renewal that held: when sent
        self._round_ended_at = 0.0  # … when its round (the epoch read after it) ended
        self._outage = False  # the last renewal could not reach the store
        self._unreachable_at: float | None = None  # … when one last could not
        self._seen_held: dict[str, float] = {}  # another owner's lease: last seen held
        self._missing_since: dict[str, float] = {}  # … first seen missing since then

    # ------------------------------------------------------------------ its own lease
    def renewed(self, sent: float) -> None:
        """A renewal (or acquisition) sent at ``sent`` found the lease held. Sent a lease
        or more after the last that held, this replica was away (paused, or the store
        down) and saw nothing of the others meanwhile: noted as an outage, so that a
        lease it finds missing now gets its grace (:meth:`note`)."""
        at = self._renewed_at
        if at is not None and sent - at >= self.lease_seconds:
            self._unreachable_at = self.clock()
        self._renewed_at = sent
        self._round_ended_at = self.clock()
        self._outage = False

    def unreachable(self) -> None:
        """A renewal could not reach the store."""
        self._outage = True
        self._unreachable_at = self.clock()

    def answered(self, sent: float) -> None:
        """A store command sent at ``sent`` was answered just now. Waiting a third of a
        lease or more (the renewals' period) means the store stalled (a fork, a starved
        VM) or could not be reached: noted as an outage, since lease keys may have
        expired in it by the store's clock while no holder could renew them."""
        now = self.clock()
        if now - sent >= self.lease_seconds / 3:
            self._unreachable_at = now

    def lost_not_lapsed(self, sent: float) -> bool:
        """A renewal sent at ``sent`` just found the lease missing: was its key lost
        rather than lapsed? (It was sent less than a lease after the last renewal that
        held was sent, or after that renewal's round ended, or the store was unreachable
        at the last renewal.) The send time, not the reply's: a renewal sent on time that
        Redis took late (Redis itself stalled, its clock expiring the key meanwhile) is
        no lapse of this replica; nor is one sent late because the round before waited
        out such a stall."""
        outage, self._outage = self._outage, False
        at = self._renewed_at
        if outage or at is None:
            return outage
        # Within a lease of the end of that renewal's round (never before its send; its
        # epoch read, which the store may have stalled on: waited on, not away).
        return sent - self._round_ended_at < self.lease_seconds

    # ------------------------------------------------------------------ the others'
    def note(self, owner: str, held: bool) -> bool:
        """Note what a look at ``owner``'s lease found; whether ``owner`` is (presumed)
        alive: held, or missing for less than :attr:`grace` after it was seen held
        within a lease, or less than a lease after this replica found the store
        unreachable (its key may have been lost, or lapsed in the outage: its holder
        takes it again)."""
        now = self.clock()
        if held:
            self._seen_held[owner] = now
            self._missing_since.pop(owner, None)
            return True
        since = self._since(owner, now)
        seen = self._seen_held.get(owner)
        self._forget(now)
        if now - since >= self.grace:
            return False
        outage = self._unreachable_at
        return (seen is not None and since - seen < self.lease_seconds) or (
            outage is not None and since - outage < self.lease_seconds
        )

    def _since(self, owner: str, now: float) -> float:
        """Since when ``owner``'s lease is missing, for this look: a lease found missing
        before an outage (or a stall, or this replica's own absence) is looked at afresh
        after it, since its holder could renew it no more than this replica could see
        it."""
        since = self._missing_since.setdefault(owner, now)
        outage = self._unreachable_at
        if outage is not None and outage > since:
            since = self._missing_since[owner] = outage
        return since

    def missing_long(self, owner: str) -> bool:
        """``owner``'s lease was found missing at least :attr:`grace` ago and never held
        since: its holder, had it only lost the key, would have taken it again."""
        if owner not in self._missing_since:
            return False
        now = self.clock()
        return now - self._since(owner, now) >= self.grace

    def _forget(self, now: float) -> None:
        horizon = now - FORGET_AFTER_LEASES * self.lease_seconds
        for notes in (self._seen_held, self._missing_since):
            for owner in [o for o, at in notes.items() if at < horizon]:
                del notes[owner]
