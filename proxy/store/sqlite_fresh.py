"""Which keys a SQLite commit need not read (:class:`FreshEpochs`), for
:mod:`proxy.store.sqlite_commit`: a new stream's key of a session this store has seen
with no row at all has none, so its ``SELECT`` (a fifth of a call's commit) is skipped.
"""

from __future__ import annotations

import sqlite3
from collections import OrderedDict

_EPOCH_ROWS = (
    "SELECT EXISTS (SELECT 1 FROM streams WHERE key > ?1 AND key < ?2)"
    " OR EXISTS (SELECT 1 FROM events WHERE key > ?1 AND key < ?2)"
)
FRESH_EPOCHS = 16_384  # sessions whose new keys are known absent, at most (the oldest go)
STALE_EPOCHS = 4_096  # sessions known to have had rows when first seen, at most


class FreshEpochs:
    """The keys a commit need not read: a new stream's key of a session this store has
    seen with no row at all (a session made since the file was opened).

    A key is ``epoch.number``, and a session numbers its streams upwards. The store is
    the file's one writer (:mod:`proxy.store.sqlite_lock`) and only its commits add rows:
    once an epoch had no stream and no event row when first seen, a key of it with a
    number above every one a commit of this store has named since has no row either. Its
    ``SELECT`` (a fifth of a call's commit) would find none; it is skipped. Anything else
    (a number named before, an epoch that had rows: a session made before a restart, a
    key not of that form, a takeover) is read as before. What is kept is bounded (the
    oldest epochs go, and are read again)."""

    __slots__ = ("_high", "_stale")

    def __init__(self) -> None:
        # fresh epoch -> highest number named since; first seen first (``popitem`` of the
        # oldest in O(1): a dict's first key is found past every one deleted before it)
        self._high: OrderedDict[str, int] = OrderedDict()
        self._stale: set[str] = set()  # epochs that had rows when first seen

    def absent(self, conn: sqlite3.Cursor, key: str) -> bool:
        """Whether ``key`` certainly has no row (no ``SELECT`` needed); either way, a
        commit about to write it is noted (called inside that commit's transaction)."""
        epoch, _, number = key.rpartition(".")
        high = self._high.get(epoch)
        if high is None:
            if epoch in self._stale or not epoch:
                return False
            if conn.execute(_EPOCH_ROWS, (epoch + ".", epoch + "/")).fetchone()[0]:
                if len(self._stale) >= STALE_EPOCHS:
                    self._stale.clear()
                self._stale.add(epoch)
                return False
            if len(self._high) >= FRESH_EPOCHS:
                self._high.popitem(last=False)
            high = -1
        if not number.isdigit() or (number[0] == "0" and number != "0"):
            # (not a number as journal_batch writes one: read it, and forget the epoch)
            self._high.pop(epoch, None)
            return False
        n = int(number)
        if n <= high:
            return False
        self._high[epoch] = n
        return True

    def named(self, key: str) -> None:
        """A commit that reads every key (a takeover's) is about to write ``key``."""
        epoch, _, number = key.rpartition(".")
        high = self._high.get(epoch)
        if high is not None:
            if number.isdigit():
                self._high[epoch] = max(high, int(number))
            else:
                del self._high[epoch]
