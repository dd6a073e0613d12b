"""Which pooled session a call runs on, which idle ones stop (proxy/core/pooling.py), and
the listen rules (proxy/core/subscriptions.py): pure."""

from __future__ import annotations

from proxy.core.pooling import Load, least_loaded, may_grow, pick, spares_to_start, to_reap
from proxy.core.subscriptions import DEDUP_SECONDS, Dedup, Filter, honoured, tagged


def test_an_idle_session_first() -> None:
    assert pick([Load(2, 0, 0.0), Load(0, 0, 0.0)], exclusive=False) == 1
    assert pick([Load(2, 0, 0.0), Load(1, 0, 0.0)], exclusive=False) is None
    assert pick([], exclusive=True) is None


def test_an_asking_call_takes_the_least_busy_session_where_nothing_asks() -> None:
    loads = [Load(3, 1, 0.0), Load(4, 0, 0.0), Load(2, 0, 0.0)]
    assert pick(loads, exclusive=True) == 2
    assert pick([Load(1, 1, 0.0)], exclusive=True) is None


def test_the_pool_grows_to_its_size_and_asking_calls_to_the_max() -> None:
    assert may_grow(3, False, size=4, max_size=32)
    assert not may_grow(4, False, size=4, max_size=32)
    assert may_grow(4, True, size=4, max_size=32)
    assert not may_grow(32, True, size=4, max_size=32)


def test_when_full_the_least_loaded_is_shared() -> None:
    assert least_loaded([Load(1, 1, 0.0), Load(5, 0, 0.0), Load(2, 0, 0.0)]) == 2


def test_idle_sessions_stop_but_one_stays_warm_and_held_ones_stay() -> None:
    loads = [
        Load(0, 0, 0.0),  # the warm one
        Load(0, 0, 10.0),  # idle long enough
        Load(1, 0, 0.0),  # busy
        Load(0, 0, 0.0, held=True),  # kept for listeners
        Load(0, 0, 95.0),  # not yet
    ]
    assert to_reap(loads, 100.0, idle_seconds=60.0) == ([1], True)
    assert to_reap(loads[:4], 100.0, idle_seconds=60.0) == ([1], False)


def test_idle_spares_are_kept_the_most_recently_idle_first() -> None:
    loads = [Load(0, 0, 0.0), Load(0, 0, 10.0), Load(0, 0, 20.0), Load(0, 0, 30.0)]
    assert to_reap(loads, 100.0, idle_seconds=60.0, spare=1) == ([1, 2], False)
    assert to_reap(loads, 100.0, idle_seconds=60.0, spare=3) == ([], False)
    assert to_reap(loads, 75.0, idle_seconds=60.0, spare=1) == ([1], True)


def test_a_spare_starts_beside_the_first_session_and_when_one_is_taken() -> None:
    # The first call starts its own session: one spare beside it.
    assert spares_to_start(idle=0, live=0, starting=1, coming=0, spare=1, limit=4) == 1
    # A spare on its way, or one idle besides the session taken, is enough.
    assert spares_to_start(idle=0, live=1, starting=1, coming=1, spare=1, limit=4) == 0
    assert spares_to_start(idle=1, live=2, starting=0, coming=0, spare=1, limit=4) == 0
    # The spare was taken: another.
    assert spares_to_start(idle=0, live=2, starting=0, coming=0, spare=1, limit=4) == 1
    assert spares_to_start(idle=0, live=2, starting=0, coming=0, spare=3, limit=4) == 2


def test_a_spare_counts_against_the_limit() -> None:
    assert spares_to_start(idle=0, live=0, starting=1, coming=0, spare=1, limit=1) == 0
    assert spares_to_start(idle=0, live=3, starting=1, coming=0, spare=2, limit=4) == 0
    assert spares_to_start(idle=0, live=4, starting=0, coming=0, spare=1, limit=4) == 0
    assert spares_to_start(idle=0, live=4, starting=0, coming=0, spare=1, limit=32) == 1
    assert spares_to_start(idle=5, live=6, starting=0, coming=0, spare=0, limit=32) == 0


def test_the_filter_grants_what_the_server_declared() -> None:
    wanted = {
        "toolsListChanged": True,
        "promptsListChanged": True,
        "resourceSubscriptions": ["file:///a", 7],
    }
    capabilities = {"tools": {"listChanged": True}, "prompts": {}, "resources": {"subscribe": True}}
    assert honoured(wanted, capabilities) == {
        "toolsListChanged": True,
        "resourceSubscriptions": ["file:///a"],
    }


def test_a_listener_gets_what_it_asked_for_tagged() -> None:
    listener = Filter("sub-1", {"toolsListChanged"}, {"file:///a"}, {"task-1"})
    assert listener.wants("notifications/tools/list_changed", {})
    assert not listener.wants("notifications/prompts/list_changed", {})
    assert listener.wants("notifications/resources/updated", {"uri": "file:///a"})
    assert not listener.wants("notifications/resources/updated", {"uri": "file:///b"})
    assert listener.wants("notifications/tasks", {"taskId": "task-1"})
    assert tagged("notifications/tools/list_changed", {"_meta": {"x": 1}}, "sub-1") == {
        "jsonrpc": "2.0",
        "method": "notifications/tools/list_changed",
        "params": {"_meta": {"x": 1, "io.modelcontextprotocol/subscriptionId": "sub-1"}},
    }


def test_one_change_from_several_sessions_is_delivered_once() -> None:
    dedup = Dedup()
    assert dedup.first("a", 10.0)
    assert not dedup.first("a", 10.0 + DEDUP_SECONDS / 2)
    assert dedup.first("b", 10.1)
    assert dedup.first("a", 10.0 + DEDUP_SECONDS)
    for n in range(2000):  # remembers a bounded number
        dedup.first(f"k{n}", 20.0 + n)
    assert len(dedup._recent) <= 1025
