"""Limits that bound what a session holds: streams per session, bytes per process."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import jsonrpc
from proxy.core.errors import Overloaded, ResumeError
from proxy.core.events import (
    Accepted,
    ClientDetached,
    CloseClient,
    PauseUpstream,
    ResumeUpstream,
    SendUpstream,
)
from proxy.core.session import Session, SessionSettings
from proxy.core.stream import ByteBudget, StreamLog
from tests.core.playbook import Playbook, ok, payloads, progress, req, upstream_sent


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


def test_a_batch_refused_at_the_stream_limit_changes_nothing() -> None:
    """2025-03-26 batch [answer to a server request, new request] at the limit: 503, and
    the answer is still the server's to get (it was taken from the id map and lost)."""
    pb = Playbook(settings=SessionSettings(max_streams=2), version="2025-03-26")
    pb.initialize()
    c = pb.conn()
    up = upstream_sent(pb.post(c, req(1, "tools/call", {})))[0]["id"]
    (ask,) = payloads(pb.upstream(req("srv-1", "roots/list")), c)
    pb.post(pb.conn(), req(2, "tools/call", {}))  # the second stream: at the limit
    before = pb.session.stream_numbers(), pb.session.live_requests, len(pb.log)
    with pytest.raises(Overloaded):
        pb.post(pb.conn(), ok(ask["id"], {"roots": []}), req(3, "tools/call", {}))
    assert (pb.session.stream_numbers(), pb.session.live_requests, len(pb.log)) == before
    d = pb.conn()
    assert pb.post(d, ok(ask["id"], {"roots": []})) == [
        SendUpstream(jsonrpc.encode(ok("srv-1", {"roots": []}))),
        Accepted(d),
    ]
    assert payloads(pb.upstream(ok(up)), c) == [ok(1)]


def test_the_process_budget_bounds_all_sessions_together() -> None:
    budget = ByteBudget(10_000)  # a hard cap, whatever the overflow policy
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


def call_away(pb: Playbook) -> int:
    """A tools/call whose client went away at once; returns its upstream id."""
    c = pb.conn()
    out = pb.post(c, req(1, "tools/call", {"_meta": {"progressToken": "t"}}))
    pb.feed(ClientDetached(c))
    return int(upstream_sent(out)[0]["id"])


def test_block_holds_what_no_client_was_sent_and_pauses_the_server() -> None:
    pb = Playbook(settings=SessionSettings(stream_max_events=5, overflow="block"))
    pb.initialize()
    up = call_away(pb)
    outs = [pb.upstream(progress("t", i)) for i in range(1, 8)]
    assert [PauseUpstream() in out for out in outs] == [False] * 5 + [True, False]
    assert pb.session.upstream_paused
    r = pb.conn()
    out = pb.get(r, "ep0ch.2.0")  # the client comes back from the start: nothing was lost
    assert [m["params"]["progress"] for m in payloads(out, r)] == list(range(1, 8))
    # still unacknowledged: the proxy asks for the client's position by ending the stream
    assert CloseClient(r, 1000) in out and pb.session.upstream_paused
    r2 = pb.conn()
    out = pb.get(r2, "ep0ch.2.7")
    assert ResumeUpstream() in out and not pb.session.upstream_paused
    assert payloads(pb.upstream(ok(up)), r2) == [ok(1)]


def test_truncate_drops_the_oldest_and_never_pauses() -> None:
    pb = Playbook(settings=SessionSettings(stream_max_events=5, overflow="truncate"))
    pb.initialize()
    call_away(pb)
    outs = [pb.upstream(progress("t", i)) for i in range(1, 8)]
    assert not any(PauseUpstream() in out for out in outs)
    with pytest.raises(ResumeError) as info:
        pb.get(pb.conn(), "ep0ch.2.0")
    assert info.value.reason == "history_truncated"
    r = pb.conn()
    assert [m["params"]["progress"] for m in payloads(pb.get(r, "ep0ch.2.2"), r)] == [3, 4, 5, 6, 7]
