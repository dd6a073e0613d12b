"""Which way a /ws upgrade goes (proxy/core/socket_route.py): never 4404 for a session
that may be live on another replica."""

from __future__ import annotations

import pytest

from proxy.core.socket_route import SocketRoute, socket_route


@pytest.mark.parametrize(
    ("named", "here", "holder", "me", "answered", "route"),
    [
        (False, False, None, "a", True, SocketRoute.NEW),
        (True, True, None, "a", True, SocketRoute.LOCAL),
        (True, True, None, "a", False, SocketRoute.LOCAL),  # the store is not asked
        (True, False, "b", "a", True, SocketRoute.REMOTE),
        (True, False, "a", "a", True, SocketRoute.NOT_FOUND),  # here, but not this client's
        (True, False, None, "a", True, SocketRoute.NOT_FOUND),  # no record, or lease lapsed
        (True, False, None, None, True, SocketRoute.NOT_FOUND),  # no replicas
        (True, False, None, "a", False, SocketRoute.UNKNOWN),  # the store cannot say
    ],
)
def test_routes(
    named: bool, here: bool, holder: str | None, me: str | None, answered: bool, route: SocketRoute
) -> None:
    assert socket_route(named, here, holder, me, answered) is route
