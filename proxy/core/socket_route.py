"""Which way a ``/ws`` upgrade naming a session goes (issue 19: every client path on any
replica). Pure: what the registry and the store said comes in.

- held here → the local socket (:class:`~proxy.downstream.ws_socket.ClientSocket`);
- held by another live replica → served through it
  (:class:`~proxy.downstream.ws_remote.RemoteSocket`);
- nobody holds it (no record, its replica's lease lapsed, or not this principal's) →
  close 4404 "Session not found": the client initializes again;
- the store cannot say (unreachable) → close 1013 "try again later": the session may be
  live elsewhere, and a 4404 would tell the client it ended.
"""

from __future__ import annotations

from enum import Enum

CLOSE_SESSION_NOT_FOUND = 4404  # application close codes are 4000-4999 (RFC 6455 §7.4.2)
CLOSE_TRY_AGAIN_LATER = 1013  # RFC 6455 §7.4.1 (IANA registry): "Try Again Later"


class SocketRoute(Enum):
    NEW = "new"  # no session named: the socket may initialize one
    LOCAL = "local"
    REMOTE = "remote"
    NOT_FOUND = "not_found"
    UNKNOWN = "unknown"


def socket_route(
    named: bool, held_here: bool, holder: str | None, me: str | None, store_answered: bool
) -> SocketRoute:
    """``named``: the upgrade names a session; ``held_here``: this process holds it (for
    this principal and server); ``holder``: the live replica the store names (None: none);
    ``me``: this replica's owner id (None: no replicas); ``store_answered``: the store
    could be asked."""
    if not named:
        return SocketRoute.NEW
    if held_here:
        return SocketRoute.LOCAL
    if not store_answered:
        return SocketRoute.UNKNOWN
    if holder is not None and me is not None and holder != me:
        return SocketRoute.REMOTE
    return SocketRoute.NOT_FOUND
