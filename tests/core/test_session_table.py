"""proxy/core/session_table.py: the session table's limits and lookups, without a loop."""

from __future__ import annotations

import pytest

from proxy.core.errors import Overloaded, SessionNotFound
from proxy.core.session_table import (
    ANYONE,
    ServerLimit,
    SessionLimits,
    SessionTable,
)


def _table(
    max_sessions: int = 10, docs: int | None = None, per_principal: int | None = None
) -> SessionTable[str]:
    servers = {"docs": ServerLimit(docs, "servers.docs"), "code": ServerLimit(None, "servers.code")}
    return SessionTable(SessionLimits(max_sessions, servers, per_principal))


def test_a_reserved_slot_becomes_a_session_found_by_id() -> None:
    table = _table()
    slot = table.reserve("docs", "alice")
    assert table.starting == 1 and len(table) == 0 and "s1" not in table
    table.admit(slot, "s1", "runner-1")
    assert table.starting == 0 and len(table) == 1 and "s1" in table
    assert table.lookup("s1") == "runner-1"
    assert table.lookup("s1", "alice", "docs") == "runner-1"
    assert list(table.entries()) == ["runner-1"]
    assert table.remove("s1") == "runner-1" and table.remove("s1") is None
    assert len(table) == 0


@pytest.mark.parametrize(
    ("principal", "server"),
    [("bob", None), (None, None), ("alice", "code"), (ANYONE, "code")],
)
def test_another_principal_or_server_reads_as_not_found(
    principal: str | None, server: str | None
) -> None:
    table = _table()
    table.admit(table.reserve("docs", "alice"), "s1", "runner-1")
    with pytest.raises(SessionNotFound, match="Session not found"):
        table.lookup("s1", principal, server)
    with pytest.raises(SessionNotFound, match="Session not found"):
        table.lookup("nope")
    assert table.lookup("s1", ANYONE, "docs") == "runner-1"


def test_the_proxy_limit_counts_sessions_still_starting() -> None:
    table = _table(max_sessions=2)
    first = table.reserve("code", None)
    table.reserve("code", None)  # still starting: it holds its slot
    with pytest.raises(Overloaded, match=r"sessions\.max_sessions=2") as refused:
        table.reserve("code", None)
    assert refused.value.reason == "too_many_sessions"
    table.release(first)  # its upstream failed to start: the slot is free again
    table.release(first)  # twice is harmless
    table.reserve("code", None)


def test_a_server_limit_names_its_key_and_spares_other_servers() -> None:
    table = _table(docs=1)
    table.admit(table.reserve("docs", None), "s1", "runner-1")
    with pytest.raises(Overloaded) as refused:
        table.reserve("docs", None)
    assert str(refused.value.message) == (
        "Too many sessions of docs (servers.docs.max_sessions=1); try again later"
    )
    table.reserve("code", None)  # no limit of its own
    table.remove("s1")
    assert table.held_by_server("docs") == 0
    table.reserve("docs", None)
    assert table.held_by_server("docs") == 1  # the starting one


def test_a_principal_limit_counts_live_and_starting_sessions_of_that_principal() -> None:
    table = _table(per_principal=2)
    table.admit(table.reserve("docs", "alice"), "s1", "runner-1")
    table.reserve("code", "alice")
    with pytest.raises(Overloaded, match="Too many sessions for alice") as refused:
        table.reserve("docs", "alice")
    assert "auth.per_principal.max_sessions=2); end one first" in refused.value.message
    table.reserve("docs", "bob")
    table.reserve("docs", None)  # no principal (auth off): no principal limit
    assert table.held_by_principal("alice") == 2


def test_admitting_needs_a_held_slot_and_a_new_id() -> None:
    table = _table()
    slot = table.reserve("docs", None)
    table.admit(slot, "s1", "runner-1")
    with pytest.raises(ValueError, match="not a slot"):
        table.admit(slot, "s2", "runner-2")
    with pytest.raises(ValueError, match="in the table already"):
        table.admit(table.reserve("docs", None), "s1", "runner-3")
