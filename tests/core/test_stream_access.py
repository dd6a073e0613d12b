"""Who may read a stored stream (proxy/core/stream_access.py), pure: the principal and the
server must both match; a record that names no server (written before they were
recorded) is read only when the proxy fronts exactly one server."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.stream_access import may_read

PRINCIPALS = st.one_of(st.none(), st.text(max_size=8))
SERVERS = st.sampled_from(["default", "a", "b", ""])


@pytest.mark.parametrize(
    ("owner", "owner_server", "principal", "server", "sole", "expected"),
    [
        ("alice", "a", "alice", "a", False, True),
        ("alice", "a", "alice", "b", False, False),  # another server's path
        ("alice", "a", "bob", "a", False, False),  # another principal
        (None, "a", None, "a", False, True),  # authentication off
        (None, "a", "", "a", False, False),  # "" is a name, not nobody
        ("alice", "default", "alice", "default", True, True),
        ("alice", "default", "alice", "x", True, False),  # renamed server: not the same one
        ("alice", None, "alice", "default", True, True),  # an old record, one server
        ("alice", None, "alice", "a", False, False),  # an old record, several: refused
        ("alice", None, "bob", "default", True, False),  # ... and still only alice's
    ],
)
def test_principal_and_server_both_match(
    owner: str | None,
    owner_server: str | None,
    principal: str | None,
    server: str,
    sole: bool,
    expected: bool,
) -> None:
    assert may_read(owner, owner_server, principal, server, sole_server=sole) is expected


@given(PRINCIPALS, st.one_of(st.none(), SERVERS), PRINCIPALS, SERVERS, st.booleans())
def test_never_another_principal_nor_a_named_other_server(
    owner: str | None, owner_server: str | None, principal: str | None, server: str, sole: bool
) -> None:
    allowed = may_read(owner, owner_server, principal, server, sole_server=sole)
    if owner != principal or (owner_server is not None and owner_server != server):
        assert not allowed
    if owner_server is None and not sole:
        assert not allowed
