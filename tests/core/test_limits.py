"""Limits that bound what a session holds: streams per session, bytes per process."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.errors import Overloaded, ResumeError
from proxy.core.session import Session, SessionSettings
from proxy.core.stream import ByteBudget, StreamLog
from tests.core.playbook import Playbook, ok, progress, req, upstream_sent


def test_streams_per_session_evict_the_oldest_finished_then_refuse() -> None:
    pb = Playbook(settings=SessionSettings(max_streams=3))
    pb.initialize()  # the initialize stream (1) is finished and retained
    ups = []
    for rid in (1, 2):
        ups.append(upstream_sent(pb.post(pb.conn(), req(rid, "tools/call", {})))[0]["id"])
    # a third live one pushes the finished initialize stream out
    ups.append(upstream_sent(pb.post(pb.conn(), req(3, "tools/call", {})))[0]["id"])
    assert pb.session.stream_numbers() == [0, 2, 3, 4]
    with pytest.raises(Overloaded) as info:
        pb.post(pb.conn(), req(4, "tools/call", {}))
    assert (info.value.http_status, info.value.reason) == (503, "too_many_streams")
    pb.upstream(ok(ups[0]))
    pb.post(pb.conn(), req(5, "tools/call", {}))  # room again: stream 2 finished
    assert 2 not in pb.session.stream_numbers()


def test_the_process_budget_bounds_all_sessions_together() -> None:
    budget = ByteBudget(10_000)
    sessions = [Session(f"s{i}", "ep", SessionSettings(), 0.0, budget) for i in range(3)]
    pbs = []
    for session in sessions:
        pb = Playbook()
        pb.session = session
        pb.initialize()
        pbs.append(
            (
                pb,
                upstream_sent(
                    pb.post(pb.conn(), req(1, "tools/call", {"_meta": {"progressToken": "t"}}))
                )[0]["id"],
            )
        )
    for i in range(1, 500):
        for pb, _ in pbs:
            pb.upstream(progress("t", i))
    # at most one newest event per stream beyond the limit (each is ~80 bytes here)
    assert budget.used <= budget.limit + 3 * 3 * 100
    for pb, _ in pbs:
        with pytest.raises(ResumeError) as info:
            pb.get(pb.conn(), "ep.2.1")
        assert info.value.reason == "history_truncated"
    total = sum(s.buffered_bytes for s in sessions)
    assert total == budget.used


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.binary(min_size=1, max_size=300)), max_size=200),
    st.integers(50, 2000),
)
def test_logs_sharing_a_budget_never_hold_more_than_it_plus_their_newest(
    appends: list[tuple[int, bytes]], limit: int
) -> None:
    budget = ByteBudget(limit)
    logs = [StreamLog(10_000, 10**9, budget) for _ in range(4)]
    for which, payload in appends:
        logs[which].append(payload)
        newest = sum(len(log.after(log.last_seq - 1)[0].payload) for log in logs if len(log))
        assert budget.used == sum(log.bytes for log in logs)
        assert budget.used <= limit + newest
    for log in logs:
        log.clear()
    assert budget.used == 0
