"""Limits that bound what a session holds: streams per session, bytes per process."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.errors import Overloaded, ResumeError
from proxy.core.events import (
    Accepted,
    ClientAck,
    ClientDetached,
    CloseClient,
    LogNote,
    PauseUpstream,
    ResumeUpstream,
    StartSse,
    WakeAt,
)
from proxy.core.session import Session, SessionSettings
from proxy.core.stream import ByteBudget, StreamLog
from tests.core.playbook import Playbook, ok, prime, progress, req, sse, up, upstream_sent


def test_streams_per_session_evict_the_oldest_finished_then_refuse() -> None:
    pb = Playbook(settings=SessionSettings(max_streams=3))
    pb.initialize()  # the initialize stream (1) is finished and retained
    first = pb.conn()
    pb.post(first, req(1, "tools/call", {}))
    pb.post(pb.conn(), req(2, "tools/call", {}))
    # a third live one pushes the finished initialize stream out (silently)
    c = pb.conn()
    assert pb.post(c, req(3, "tools/call", {})) == [
        StartSse(c),
        prime(c, "ep0ch.4.0.1"),
        up(req(4, "tools/call", {})),
    ]
    assert pb.session.stream_numbers() == [0, 2, 3, 4]
    with pytest.raises(Overloaded) as info:
        pb.post(pb.conn(), req(4, "tools/call", {}))
    assert (info.value.http_status, info.value.reason) == (503, "too_many_streams")
    assert pb.upstream(ok(2)) == [
        sse(first, "ep0ch.2.1", ok(1)),
        CloseClient(first),
        WakeAt(1120.0),
    ]
    c = pb.conn()
    # room again: stream 2 finished and goes; the refused POST used no id nor number
    assert pb.post(c, req(5, "tools/call", {})) == [
        StartSse(c),
        prime(c, "ep0ch.5.0.1"),
        up(req(5, "tools/call", {})),
    ]
    assert pb.session.stream_numbers() == [0, 3, 4, 5]


def test_a_batch_refused_at_the_stream_limit_changes_nothing() -> None:
    """2025-03-26 batch [answer to a server request, new request] at the limit: 503, and
    the answer is still the server's to get (it was taken from the id map and lost)."""
    pb = Playbook(settings=SessionSettings(max_streams=2), version="2025-03-26")
    pb.initialize()
    c = pb.conn()
    assert pb.post(c, req(1, "tools/call", {})) == [StartSse(c), up(req(2, "tools/call", {}))]
    assert pb.upstream(req("srv-1", "roots/list")) == [sse(c, "ep0ch.2.1", req(1, "roots/list"))]
    pb.post(pb.conn(), req(2, "tools/call", {}))  # the second stream: at the limit
    before = pb.session.stream_numbers(), pb.session.live_requests, len(pb.log)
    with pytest.raises(Overloaded):
        pb.post(pb.conn(), ok(1, {"roots": []}), req(3, "tools/call", {}))
    assert (pb.session.stream_numbers(), pb.session.live_requests, len(pb.log)) == before
    d = pb.conn()
    assert pb.post(d, ok(1, {"roots": []})) == [up(ok("srv-1", {"roots": []})), Accepted(d)]
    assert pb.upstream(ok(2)) == [sse(c, "ep0ch.2.2", ok(1)), CloseClient(c), WakeAt(1120.0)]


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
    uid = call_away(pb)
    outs = [pb.upstream(progress("t", i)) for i in range(1, 8)]
    # the 6th passes the bound; the 7th was already on its way
    assert outs == [[]] * 5 + [[PauseUpstream()], []]
    assert pb.session.upstream_paused
    r = pb.conn()
    # the client comes back from the start: nothing was lost
    assert pb.get(r, "ep0ch.2.0") == [
        StartSse(r),
        LogNote("stream_resumed", {"stream": 2, "after": 0, "replay": 7, "state": "live"}),
        prime(r, "ep0ch.2.0.2"),
        *[sse(r, f"ep0ch.2.{i}", progress("t", i)) for i in range(1, 8)],
        # still unacknowledged: the proxy asks for the client's position by ending the stream
        CloseClient(r, 1000),
        LogNote("ack_solicited", {"stream": 2}),
    ]
    assert pb.session.upstream_paused
    r2 = pb.conn()
    assert pb.get(r2, "ep0ch.2.7") == [
        StartSse(r2),
        LogNote("stream_resumed", {"stream": 2, "after": 7, "replay": 0, "state": "live"}),
        prime(r2, "ep0ch.2.7.3"),
        ResumeUpstream(),
    ]
    assert not pb.session.upstream_paused
    assert pb.upstream(ok(uid)) == [sse(r2, "ep0ch.2.8", ok(1)), CloseClient(r2)]


def test_an_acknowledgement_given_to_another_replica_lets_the_server_go_on() -> None:
    """ClientAck: the client resumed from seq 7 elsewhere; positions never reached and
    streams that are gone are ignored."""
    pb = Playbook(settings=SessionSettings(stream_max_events=5, overflow="block"))
    pb.initialize()
    uid = call_away(pb)
    for i in range(1, 8):
        pb.upstream(progress("t", i))
    assert pb.session.upstream_paused
    assert pb.feed(ClientAck(2, 99)) == []  # never reached
    assert pb.feed(ClientAck(9, 1)) == []  # no such stream
    assert pb.session.upstream_paused
    assert pb.feed(ClientAck(2, 7)) == [ResumeUpstream()]
    assert not pb.session.upstream_paused
    assert pb.upstream(ok(uid)) == []  # logged for whoever resumes; nobody is attached


def test_truncate_drops_the_oldest_and_never_pauses() -> None:
    pb = Playbook(settings=SessionSettings(stream_max_events=5, overflow="truncate"))
    pb.initialize()
    call_away(pb)
    outs = [pb.upstream(progress("t", i)) for i in range(1, 8)]
    assert outs == [[]] * 7, "never paused"
    with pytest.raises(ResumeError) as info:
        pb.get(pb.conn(), "ep0ch.2.0")
    assert info.value.reason == "history_truncated"
    r = pb.conn()
    assert pb.get(r, "ep0ch.2.2") == [
        StartSse(r),
        LogNote("stream_resumed", {"stream": 2, "after": 2, "replay": 5, "state": "live"}),
        prime(r, "ep0ch.2.2.2"),
        *[sse(r, f"ep0ch.2.{i}", progress("t", i)) for i in range(3, 8)],
    ]
