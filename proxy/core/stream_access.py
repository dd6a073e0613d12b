"""Who may read a stream served from the store: the rule, stated once.

A stream outlives its session (a restart with SQLite, another replica with Redis), and
then only its record in the store says whose it is. Its record names the principal the
session belonged to (inbound auth; None: nobody) and the server whose path the session
was made on (``servers:`` names; ``default`` for ``upstream:`` alone). A stored stream
is served only to a request of that principal at that server's path, exactly as a live
session is (:meth:`proxy.registry.Registry.get`): the same client at another server's
path gets what a stream that does not exist gets, so nothing tells "exists, but not
here" from "no such stream".

Records written before servers were recorded name none (``server`` None). Which server
such a stream was made at is unknown, so it is served only when that question has one
answer: the proxy fronts exactly one server. With several servers it is refused (as an
unknown stream), whichever path asks: the safe side of "don't know".
"""

from __future__ import annotations


def may_read(
    owner_principal: str | None,
    owner_server: str | None,
    principal: str | None,
    server: str,
    *,
    sole_server: bool,
) -> bool:
    """Whether a request of ``principal`` at ``server``'s path may read a stream whose
    record names ``owner_principal`` and ``owner_server``; ``sole_server``: ``server`` is
    the only server the proxy fronts."""
    if owner_principal != principal:
        return False
    if owner_server is None:
        return sole_server
    return owner_server == server
