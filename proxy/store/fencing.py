"""This process's fencing token, and what happens when it is found stale (DESIGN.md §9).

Every batch this process commits carries :attr:`Fence.token` (:mod:`proxy.store.persist`
stamps it), and every stream record it creates holds it. A store refuses, atomically and
per stream, any write whose token is not the record's (:mod:`proxy.store.base`, Fencing).
A record changes token only by a takeover: the replica that ends a lost replica's
streams (``owner_lost``, :func:`proxy.store.open.end_orphans`) moves each LIVE one to its
own token in the same step that ends it. So a replica that was paused or cut off past
its lease can write nothing more into a stream another replica has ended.

It learns it either way (:meth:`Fence.lost`): a commit comes back with refused keys, or
its lease renewal finds the lease lapsed (:mod:`proxy.replicas`). Then every session it
holds is lost, at once and without another write: their upstreams stop, their attached
connections end without what the refused batch held (the wire never runs ahead of the
store), and the token is replaced, so that what it still had gathered under the old one
is refused too. Its clients resume from the store and read what the store holds: their
stream's end (``owner_lost``) once it is ended, never a second answer.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import structlog

log = structlog.get_logger("proxy.store")

Lost = Callable[[str], None]
"""Called with the token that went stale, synchronously (nothing awaits in between)."""


def new_token() -> str:
    """A fencing token: unique (64 random bits), so a store compares it for equality
    only, on the stream's own keys (no shared counter: every key stays in its own slot)."""
    return secrets.token_hex(8)


class Fence:
    """This process's current token, and who must hear when it goes stale."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.token = new_token()
        self._on_lost: list[Lost] = []

    def on_lost(self, callback: Lost) -> None:
        """Call ``callback(old_token)`` when the token goes stale, in registration order."""
        self._on_lost.append(callback)

    def lost(self, reason: str) -> None:
        """The store holds another writer's token on streams this process wrote
        (``reason``: ``lease_lapsed`` or ``write_refused``): every session of the old
        token is lost. A new token is in force before the callbacks run."""
        old, self.token = self.token, new_token()
        log.error("lease_lost", owner=self.owner, reason=reason)
        for callback in self._on_lost:
            callback(old)
