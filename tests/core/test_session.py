"""The session core: routing, id rewriting, resume, expiry (pure; fake clock)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.errors import BadRequest, Conflict, ResumeError, SessionNotFound
from proxy.core.events import (
    Accepted,
    ClientDelete,
    ClientDetached,
    CloseClient,
    ConnId,
    ForgetSession,
    LogNote,
    SendToClient,
    StartSse,
    StopUpstream,
    UpstreamClosed,
    WakeAt,
)
from proxy.core.session import SessionSettings
from tests.core.playbook import (
    Playbook,
    note,
    ok,
    prime,
    progress,
    req,
    sse,
    up,
    upstream_sent,
)


def slow(rid: Any, token: Any = "tok") -> dict[str, Any]:
    """A tools/call carrying a progress token (as sent, and as forwarded with ``rid``)."""
    return req(rid, "tools/call", {"name": "slow", "_meta": {"progressToken": token}})


def call(pb: Playbook, rid: Any = 7, token: Any = "tok") -> tuple[ConnId, int]:
    """Start a tools/call on a new connection; return (conn, upstream id)."""
    c = pb.conn()
    out = pb.post(c, slow(rid, token))
    return c, upstream_sent(out)[0]["id"]


def resumed(stream: int, after: int, replay: int, state: str = "live") -> LogNote:
    """The log line of a resume by GET + Last-Event-ID."""
    fields = {"stream": stream, "after": after, "replay": replay, "state": state}
    return LogNote("stream_resumed", fields)


def test_initialize_is_forwarded_with_a_rewritten_id_and_answered_with_the_clients() -> None:
    pb = Playbook()
    c = pb.conn()
    out = pb.post(c, req("init-1", "initialize", {"protocolVersion": "2025-11-25"}))
    assert out == [
        StartSse(c),
        up(req(1, "initialize", {"protocolVersion": "2025-11-25"})),
    ], "no priming before the protocol version is known"
    assert pb.upstream(ok(1, {"protocolVersion": "2025-06-18"})) == [
        sse(c, "ep0ch.1.1", ok("init-1", {"protocolVersion": "2025-06-18"})),
        CloseClient(c),
        WakeAt(1000.0 + 120.0),  # the completed stream is kept for completed_retention
    ]
    assert pb.session.protocol_version == "2025-06-18"


def test_notification_and_response_posts_are_accepted() -> None:
    pb = Playbook()
    pb.initialize()
    c = pb.conn()
    assert pb.post(c, note("notifications/roots/list_changed")) == [
        up(note("notifications/roots/list_changed")),
        Accepted(c),
    ]


def test_request_stream_primes_relays_progress_by_token_then_closes_after_response() -> None:
    pb = Playbook()
    pb.initialize()
    c = pb.conn()
    assert pb.post(c, slow(7)) == [StartSse(c), prime(c, "ep0ch.2.0.1"), up(slow(2))]
    assert pb.upstream(progress("tok", 1)) == [sse(c, "ep0ch.2.1", progress("tok", 1))]
    # No WakeAt: the wake-up armed for the initialize stream's retention (1120) is also
    # when this stream's retention ends.
    assert pb.upstream(ok(2, {"content": []})) == [
        sse(c, "ep0ch.2.2", ok(7, {"content": []})),
        CloseClient(c),
    ]


def test_no_priming_before_2025_11_25() -> None:
    pb = Playbook(version="2025-06-18")
    pb.initialize()
    c = pb.conn()
    assert pb.post(c, slow(7)) == [StartSse(c), up(slow(2))]
    assert pb.upstream(ok(2)) == [sse(c, "ep0ch.2.1", ok(7)), CloseClient(c)]


def test_unrelated_messages_go_to_the_only_request_in_flight() -> None:
    pb = Playbook()
    pb.initialize()
    c, _ = call(pb)
    log_msg = note("notifications/message", {"level": "info", "data": "x"})
    assert pb.upstream(log_msg) == [sse(c, "ep0ch.2.1", log_msg)]


def test_unrelated_messages_go_to_the_standalone_stream_when_several_are_in_flight() -> None:
    pb = Playbook()
    pb.initialize()
    call(pb, rid=1, token="a")
    c2, _ = call(pb, rid=2, token="b")
    log_msg = note("notifications/message", {"level": "info", "data": "x"})
    assert pb.upstream(log_msg) == [], "logged on the standalone stream, which nobody reads"
    g = pb.conn()
    assert pb.get(g) == [StartSse(g), prime(g, "ep0ch.0.0.1"), sse(g, "ep0ch.0.1", log_msg)]
    # progress still follows its token
    assert pb.upstream(progress("b", 1)) == [sse(c2, "ep0ch.3.1", progress("b", 1))]


def test_a_message_on_a_requests_http_response_goes_to_that_requests_stream() -> None:
    """DESIGN §5 rule 3: the transport says which upstream request's response carried it."""
    pb = Playbook()
    pb.initialize()
    c1, up1 = call(pb, rid=1, token="a")
    c2, up2 = call(pb, rid=2, token="b")
    log_msg = note("notifications/message", {"level": "info", "data": "x"})
    assert pb.upstream(log_msg, origin=up2) == [sse(c2, "ep0ch.3.1", log_msg)]
    ask = req(7, "sampling/createMessage", {"messages": []})
    assert pb.upstream(ask, origin=up1) == [sse(c1, "ep0ch.2.1", {**ask, "id": 1})]
    # An origin that is no longer in flight falls back to the usual rules.
    assert pb.upstream(ok(up2)) == [sse(c2, "ep0ch.3.2", ok(2)), CloseClient(c2)]
    assert pb.upstream(log_msg, origin=up2) == [sse(c1, "ep0ch.2.2", log_msg)]


def test_server_request_ids_are_rewritten_and_the_answer_may_come_on_any_connection() -> None:
    pb = Playbook()
    pb.initialize()
    c, _ = call(pb)
    assert pb.upstream(req("srv-9", "elicitation/create", {"message": "?"})) == [
        sse(c, "ep0ch.2.1", req(1, "elicitation/create", {"message": "?"}))
    ]
    other = pb.conn()
    assert pb.post(other, ok(1, {"action": "accept"})) == [
        up(ok("srv-9", {"action": "accept"})),
        Accepted(other),
    ]


def test_client_id_reuse_and_type_are_kept_apart() -> None:
    pb = Playbook()
    pb.initialize()
    c1, up1 = call(pb, rid=5, token="a")
    c2, up2 = call(pb, rid="5", token="b")
    assert pb.upstream(ok(up2)) == [sse(c2, "ep0ch.3.1", ok("5")), CloseClient(c2)]
    assert pb.upstream(ok(up1)) == [sse(c1, "ep0ch.2.1", ok(5)), CloseClient(c1)]


def test_detached_client_resumes_exactly_the_rest_then_live_then_end() -> None:
    pb = Playbook()
    pb.initialize()
    c, uid = call(pb)
    pb.upstream(progress("tok", 1))
    pb.upstream(progress("tok", 2))
    assert pb.feed(ClientDetached(c)) == []
    assert pb.upstream(progress("tok", 3)) == [], "logged while nobody listens"
    r = pb.conn()
    assert pb.get(r, "ep0ch.2.1") == [
        StartSse(r),
        resumed(2, after=1, replay=2),
        prime(r, "ep0ch.2.1.2"),  # priming on resume: the position, the 2nd attachment
        sse(r, "ep0ch.2.2", progress("tok", 2)),
        sse(r, "ep0ch.2.3", progress("tok", 3)),
    ]
    assert pb.upstream(progress("tok", 4)) == [sse(r, "ep0ch.2.4", progress("tok", 4))]
    assert pb.upstream(ok(uid)) == [sse(r, "ep0ch.2.5", ok(7)), CloseClient(r)]


def test_resume_after_completion_replays_the_tail_within_retention() -> None:
    pb = Playbook()
    pb.initialize()
    c, uid = call(pb)
    pb.feed(ClientDetached(c))
    pb.upstream(progress("tok", 1))
    pb.upstream(ok(uid))
    assert pb.tick(119) == [WakeAt(1120.0)], "retained until 1120: nothing due yet"
    r = pb.conn()
    assert pb.get(r, "ep0ch.2.0") == [
        StartSse(r),
        resumed(2, after=0, replay=2, state="completed"),
        prime(r, "ep0ch.2.0.2"),
        sse(r, "ep0ch.2.1", progress("tok", 1)),
        sse(r, "ep0ch.2.2", ok(7)),
        CloseClient(r),
    ]
    # from the very end: the client has it all; polling again would be pointless
    with pytest.raises(ResumeError) as info:
        pb.get(pb.conn(), "ep0ch.2.2")
    assert (info.value.reason, info.value.http_status) == ("stream_completed", 410)


def test_resume_at_the_end_of_a_live_stream_waits_for_more() -> None:
    pb = Playbook()
    pb.initialize()
    c, uid = call(pb)
    pb.upstream(progress("tok", 1))
    pb.feed(ClientDetached(c))
    r = pb.conn()
    assert pb.get(r, "ep0ch.2.1") == [
        StartSse(r),
        resumed(2, after=1, replay=0),
        prime(r, "ep0ch.2.1.2"),
    ]
    assert pb.upstream(ok(uid)) == [sse(r, "ep0ch.2.2", ok(7)), CloseClient(r)]


def test_a_cancelled_request_stream_tells_a_polling_client_it_is_over() -> None:
    pb = Playbook()
    pb.initialize()
    call(pb)
    pb.upstream(progress("tok", 1))
    pb.post(pb.conn(), note("notifications/cancelled", {"requestId": 7}))
    with pytest.raises(ResumeError) as info:
        pb.get(pb.conn(), "ep0ch.2.1")
    assert info.value.reason == "stream_completed"


def test_after_an_upstream_exit_the_standalone_stream_says_the_session_is_gone() -> None:
    pb = Playbook()
    pb.initialize()
    changed = note("notifications/tools/list_changed")
    pb.upstream(changed)
    assert pb.feed(UpstreamClosed("exit code 1")) == [
        LogNote("upstream_closed", {"reason": "exit code 1"}),
        StopUpstream("exit code 1"),
    ]
    r = pb.conn()
    assert pb.get(r, "ep0ch.0.0") == [
        StartSse(r),
        resumed(0, after=0, replay=1, state="completed"),
        prime(r, "ep0ch.0.0.1"),
        sse(r, "ep0ch.0.1", changed),
        CloseClient(r),
    ]
    with pytest.raises(SessionNotFound):
        pb.get(pb.conn(), "ep0ch.0.1")


def test_completed_stream_expires_after_retention() -> None:
    pb = Playbook()
    pb.initialize()
    _, uid = call(pb)
    pb.upstream(ok(uid))
    # Expiry says nothing; what is left to wake for is the idle timeout (idle since 1000).
    assert pb.tick(121) == [WakeAt(1600.0)]
    with pytest.raises(ResumeError) as info:
        pb.get(pb.conn(), "ep0ch.2.1")
    assert info.value.reason == "unknown_stream" and info.value.http_status == 410


@pytest.mark.parametrize(
    ("last_event_id", "reason", "status"),
    [
        ("not-an-id", "malformed_event_id", 400),
        ("ep0ch.1", "malformed_event_id", 400),
        ("ep0ch.x.1", "malformed_event_id", 400),
        ("other.1.1", "wrong_session", 400),
        ("ep0ch.99.1", "unknown_stream", 410),
        ("ep0ch.2.50", "unknown_position", 400),
    ],
)
def test_resume_errors_are_whole_and_named(last_event_id: str, reason: str, status: int) -> None:
    pb = Playbook()
    pb.initialize()
    call(pb)
    pb.upstream(progress("tok", 1))
    r = pb.conn()
    before = len(pb.log)
    with pytest.raises(ResumeError) as info:
        pb.get(r, last_event_id)
    assert (info.value.reason, info.value.http_status) == (reason, status)
    assert info.value.to_jsonrpc()["error"]["data"] == {"reason": reason}
    assert len(pb.log) == before, "a refused resume has no effect"


def test_resume_into_dropped_history_is_refused() -> None:
    pb = Playbook(settings=SessionSettings(stream_max_events=3, overflow="truncate"))
    pb.initialize()
    c, _ = call(pb)
    for i in range(1, 6):
        pb.upstream(progress("tok", i))
    with pytest.raises(ResumeError) as info:
        pb.get(pb.conn(), "ep0ch.2.1")
    assert info.value.reason == "history_truncated"
    r = pb.conn()
    assert pb.get(r, "ep0ch.2.2") == [  # events 3..5 are all still held
        CloseClient(c),  # the POST's connection, taken over
        StartSse(r),
        resumed(2, after=2, replay=3),
        prime(r, "ep0ch.2.2.2"),
        *[sse(r, f"ep0ch.2.{i}", progress("tok", i)) for i in (3, 4, 5)],
    ]


def test_a_resume_takes_the_stream_over_from_a_stale_connection() -> None:
    pb = Playbook()
    pb.initialize()
    c, _ = call(pb)
    pb.upstream(progress("tok", 1))
    r = pb.conn()
    assert pb.get(r, "ep0ch.2.1") == [
        CloseClient(c),
        StartSse(r),
        resumed(2, after=1, replay=0),
        prime(r, "ep0ch.2.1.2"),
    ]
    assert pb.upstream(progress("tok", 2)) == [sse(r, "ep0ch.2.2", progress("tok", 2))]


def test_second_standalone_get_conflicts_and_buffered_messages_wait_for_it() -> None:
    pb = Playbook()
    pb.initialize()
    msg = note("notifications/tools/list_changed")
    pb.upstream(msg)
    g = pb.conn()
    assert pb.get(g) == [StartSse(g), prime(g, "ep0ch.0.0.1"), sse(g, "ep0ch.0.1", msg)]
    with pytest.raises(Conflict):
        pb.get(pb.conn())
    assert pb.feed(ClientDetached(g)) == []
    g2 = pb.conn()
    assert pb.get(g2) == [
        StartSse(g2),
        prime(g2, "ep0ch.0.1.2"),
    ], "already delivered: a fresh GET does not repeat it"


def test_max_stream_seconds_closes_with_retry_and_the_client_polls_back() -> None:
    pb = Playbook(settings=SessionSettings(max_stream_seconds=5, retry_ms=250))
    pb.initialize()
    g = pb.conn()
    # The standalone stream is left open: it carries no response to wait for (no WakeAt).
    assert pb.get(g) == [StartSse(g), prime(g, "ep0ch.0.0.1", 250)]
    c = pb.conn()
    assert pb.post(c, slow(7)) == [
        StartSse(c),
        prime(c, "ep0ch.2.0.1", 250),
        up(slow(2)),
        WakeAt(1005.0),
    ]
    assert pb.upstream(progress("tok", 1)) == [sse(c, "ep0ch.2.1", progress("tok", 1))]
    assert pb.tick(5) == [
        CloseClient(c, 250),
        LogNote("stream_polling_close", {"stream": 2}),
        WakeAt(1120.0),
    ]
    assert pb.upstream(progress("tok", 2)) == []
    r = pb.conn()
    assert pb.get(r, "ep0ch.2.1") == [
        StartSse(r),
        resumed(2, after=1, replay=1),
        prime(r, "ep0ch.2.1.2", 250),
        sse(r, "ep0ch.2.2", progress("tok", 2)),
        WakeAt(1010.0),
    ]


def test_client_cancel_is_forwarded_and_ends_the_stream() -> None:
    pb = Playbook()
    pb.initialize()
    c, uid = call(pb)
    other = pb.conn()
    assert pb.post(other, note("notifications/cancelled", {"requestId": 7, "reason": "user"})) == [
        up(note("notifications/cancelled", {"requestId": uid, "reason": "user"})),
        CloseClient(c),
        Accepted(other),
    ]
    assert pb.upstream(ok(uid)) == [LogNote("upstream_response_unmatched", {"upstream_id": uid})], (
        "a late answer to a cancelled request is dropped"
    )


def test_upstream_exit_fails_in_flight_requests_and_closes_the_session() -> None:
    pb = Playbook()
    pb.initialize()
    c, _ = call(pb)
    err = {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32000, "message": "MCP server gone: exit code 1"},
    }
    assert pb.feed(UpstreamClosed("exit code 1")) == [
        LogNote("upstream_closed", {"reason": "exit code 1"}),
        sse(c, "ep0ch.2.1", err),
        CloseClient(c),
        StopUpstream("exit code 1"),
    ]
    with pytest.raises(SessionNotFound):
        pb.post(pb.conn(), req(8, "ping"))
    # what was logged can still be collected until retention ends
    r = pb.conn()
    assert pb.get(r, "ep0ch.2.0") == [
        StartSse(r),
        resumed(2, after=0, replay=1, state="completed"),
        prime(r, "ep0ch.2.0.2"),
        sse(r, "ep0ch.2.1", err),
        CloseClient(r),
    ]
    assert pb.tick(121) == [ForgetSession("ended and nothing left to resume")]


def test_idle_session_expires_and_stops_its_upstream() -> None:
    pb = Playbook(settings=SessionSettings(idle_timeout=600))
    pb.initialize()
    assert pb.tick(599) == [WakeAt(1600.0)]
    assert pb.tick(1) == [StopUpstream("idle timeout"), ForgetSession("idle timeout")]


def test_a_live_request_keeps_the_session_from_idling() -> None:
    pb = Playbook(settings=SessionSettings(idle_timeout=10))
    pb.initialize()
    c, uid = call(pb)
    assert pb.feed(ClientDetached(c)) == []
    assert pb.tick(60) == [WakeAt(1120.0)], "in flight: only the retention of stream 1 is due"
    assert pb.upstream(ok(uid)) == [WakeAt(1070.0)], "idle from now"
    assert pb.tick(5) == [WakeAt(1070.0)]
    assert pb.tick(10) == [StopUpstream("idle timeout"), ForgetSession("idle timeout")]


def test_delete_forgets_everything() -> None:
    pb = Playbook()
    pb.initialize()
    c, _ = call(pb)
    assert pb.feed(ClientDelete()) == [
        CloseClient(c),
        StopUpstream("deleted by client"),
        ForgetSession("deleted by client"),
    ]
    assert pb.session.buffered_bytes == 0


def test_batches_only_for_2025_03_26_sessions() -> None:
    pb = Playbook(version="2025-03-26")
    pb.initialize()
    c = pb.conn()
    assert pb.post(c, req(1, "ping"), req(2, "tools/list")) == [
        StartSse(c),
        up(req(2, "ping")),
        up(req(3, "tools/list")),
    ]
    assert pb.upstream(ok(3)) == [sse(c, "ep0ch.2.1", ok(2))]
    assert pb.upstream(ok(2)) == [sse(c, "ep0ch.2.2", ok(1)), CloseClient(c)]
    newer = Playbook(version="2025-06-18")
    newer.initialize()
    with pytest.raises(BadRequest):
        newer.post(newer.conn(), req(1, "ping"), req(2, "ping"))


def test_initialize_twice_is_refused() -> None:
    pb = Playbook()
    pb.initialize()
    with pytest.raises(BadRequest):
        pb.post(pb.conn(), req(1, "initialize", {}))


def test_server_cancellation_of_its_own_request_is_rewritten() -> None:
    pb = Playbook()
    pb.initialize()
    c, _ = call(pb)
    assert pb.upstream(req(44, "sampling/createMessage", {})) == [
        sse(c, "ep0ch.2.1", req(1, "sampling/createMessage", {}))
    ]
    assert pb.upstream(note("notifications/cancelled", {"requestId": 44})) == [
        sse(c, "ep0ch.2.2", note("notifications/cancelled", {"requestId": 1}))
    ]


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=40),
    plan=st.lists(st.tuples(st.integers(0, 40), st.floats(0.0, 1.0)), min_size=0, max_size=12),
)
def test_any_pattern_of_cuts_delivers_every_message_once_in_order(
    n: int, plan: list[tuple[int, float]]
) -> None:
    """Cut after event k, the client having kept a random prefix of what was in flight."""
    pb = Playbook()
    pb.initialize()
    conn, uid = call(pb)
    received: list[dict[str, object]] = []
    last_id = "ep0ch.2.0"
    in_flight: list[SendToClient] = []
    cuts = dict(plan)

    def take(out: list[object]) -> None:
        in_flight.extend(c for c in out if isinstance(c, SendToClient) and c.conn == conn)

    for i in range(1, n + 2):
        take(pb.upstream(progress("tok", i) if i <= n else ok(uid)))
        if i in cuts and i <= n:
            kept = in_flight[: int(len(in_flight) * cuts[i])]
            for ev in kept:
                if ev.payload is not None:
                    received.append(json.loads(ev.payload))
                last_id = ev.event_id
            in_flight.clear()
            pb.feed(ClientDetached(conn))
            conn = pb.conn()
            take(pb.get(conn, last_id))
    for ev in in_flight:
        if ev.payload is not None:
            received.append(json.loads(ev.payload))
    assert received == [progress("tok", i) for i in range(1, n + 1)] + [ok(7)]


def test_a_failed_initialize_closes_the_session() -> None:
    pb = Playbook()
    c = pb.conn()
    assert pb.post(c, req(0, "initialize", {"protocolVersion": "1999-01-01"})) == [
        StartSse(c),
        up(req(1, "initialize", {"protocolVersion": "1999-01-01"})),
    ]
    error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "bad version"}}
    assert pb.upstream(error) == [
        sse(c, "ep0ch.1.1", {**error, "id": 0}),
        CloseClient(c),
        StopUpstream("initialize failed"),
        WakeAt(1120.0),  # the refusal stays collectable until retention ends
    ]
    with pytest.raises(SessionNotFound):
        pb.post(pb.conn(), req(1, "ping"))


def test_a_request_stream_whose_client_never_returns_is_abandoned() -> None:
    """DESIGN.md §6 holds for Last-Event-ID streams too, counted from the detach."""
    pb = Playbook(now=50_000.0, settings=SessionSettings(resume_interval_max=60))
    pb.initialize()
    c, uid = call(pb)
    # attached: a client that is there is never abandoned (only stream 1's retention is due)
    assert pb.tick(100) == [WakeAt(50_120.0)]
    assert pb.feed(ClientDetached(c)) == []
    assert pb.tick(59) == [WakeAt(50_160.0)]
    assert pb.tick(1) == [
        up(
            note(
                "notifications/cancelled",
                {"requestId": uid, "reason": "stream abandoned by the client"},
            )
        ),
        LogNote("stream_abandoned", {"stream": 2}),
        WakeAt(50_160.0 + 600),  # the idle timeout
    ]
    with pytest.raises(ResumeError) as info:
        pb.get(pb.conn(), "ep0ch.2.0")
    assert (info.value.reason, info.value.http_status) == ("abandoned", 410)


def test_a_server_answer_with_a_lone_surrogate_reaches_the_client() -> None:
    pb = Playbook()
    pb.initialize()
    c, uid = call(pb)
    answer = json.loads(b'{"jsonrpc":"2.0","id":%d,"result":{"t":"\\udc80"}}' % uid)
    assert pb.upstream(answer) == [sse(c, "ep0ch.2.1", ok(7, {"t": "\udc80"})), CloseClient(c)]
