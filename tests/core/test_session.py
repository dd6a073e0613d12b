"""The session core: routing, id rewriting, resume, expiry (pure; fake clock)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.errors import BadRequest, Conflict, ResumeError, SessionNotFound
from proxy.core.events import (
    Accepted,
    ClientDelete,
    ClientDetached,
    CloseClient,
    ForgetSession,
    SendToClient,
    StartSse,
    StopUpstream,
    UpstreamClosed,
    WakeAt,
)
from proxy.core.session import SessionSettings
from tests.core.playbook import (
    Playbook,
    client_sent,
    note,
    ok,
    payloads,
    progress,
    req,
    upstream_sent,
)


def call(pb: Playbook, rid: object = 7, token: object = "tok") -> tuple[int, int]:
    """Start a tools/call on a new connection; return (conn, upstream id)."""
    c = pb.conn()
    out = pb.post(c, req(rid, "tools/call", {"name": "slow", "_meta": {"progressToken": token}}))
    return c, upstream_sent(out)[0]["id"]


def test_initialize_is_forwarded_with_a_rewritten_id_and_answered_with_the_clients() -> None:
    pb = Playbook()
    c = pb.conn()
    out = pb.post(c, req("init-1", "initialize", {"protocolVersion": "2025-11-25"}))
    assert out[0] == StartSse(c)
    sent = upstream_sent(out)
    assert sent[0]["method"] == "initialize" and sent[0]["id"] == 1
    assert not client_sent(out), "no priming before the protocol version is known"
    out = pb.upstream(ok(1, {"protocolVersion": "2025-06-18"}))
    assert payloads(out, c) == [ok("init-1", {"protocolVersion": "2025-06-18"})]
    assert CloseClient(c) in out
    assert pb.session.protocol_version == "2025-06-18"


def test_notification_and_response_posts_are_accepted() -> None:
    pb = Playbook()
    pb.initialize()
    c = pb.conn()
    out = pb.post(c, note("notifications/roots/list_changed"))
    assert Accepted(c) in out
    assert upstream_sent(out) == [note("notifications/roots/list_changed")]


def test_request_stream_primes_relays_progress_by_token_then_closes_after_response() -> None:
    pb = Playbook()
    pb.initialize()
    c, up = call(pb)
    first = [x for x in pb.log if getattr(x, "conn", None) == c]
    assert first[0] == StartSse(c)
    assert isinstance(first[1], SendToClient) and first[1].payload is None  # priming
    assert first[1].event_id == "ep0ch.2.0.1"
    out = pb.upstream(progress("tok", 1)) + pb.upstream(ok(up, {"content": []}))
    assert payloads(out, c) == [progress("tok", 1), ok(7, {"content": []})]
    assert [s.event_id for s in client_sent(out)] == ["ep0ch.2.1", "ep0ch.2.2"]
    assert out[-2:] == [CloseClient(c), WakeAt(1000.0 + 120.0)] or CloseClient(c) in out


def test_no_priming_before_2025_11_25() -> None:
    pb = Playbook(version="2025-06-18")
    pb.initialize()
    c, _ = call(pb)
    assert not client_sent(pb.log, c)


def test_unrelated_messages_go_to_the_only_request_in_flight() -> None:
    pb = Playbook()
    pb.initialize()
    c, _ = call(pb)
    log_msg = note("notifications/message", {"level": "info", "data": "x"})
    out = pb.upstream(log_msg)
    assert payloads(out, c) == [log_msg]


def test_unrelated_messages_go_to_the_standalone_stream_when_several_are_in_flight() -> None:
    pb = Playbook()
    pb.initialize()
    c1, _ = call(pb, rid=1, token="a")
    c2, _ = call(pb, rid=2, token="b")
    out = pb.upstream(note("notifications/message", {"level": "info", "data": "x"}))
    assert not client_sent(out)
    g = pb.conn()
    out = pb.get(g)
    assert payloads(out, g) == [note("notifications/message", {"level": "info", "data": "x"})]
    # progress still follows its token
    out = pb.upstream(progress("b", 1))
    assert payloads(out, c2) == [progress("b", 1)] and not payloads(out, c1)


def test_a_message_on_a_requests_http_response_goes_to_that_requests_stream() -> None:
    """DESIGN §5 rule 3: the transport says which upstream request's response carried it."""
    pb = Playbook()
    pb.initialize()
    c1, up1 = call(pb, rid=1, token="a")
    c2, up2 = call(pb, rid=2, token="b")
    log_msg = note("notifications/message", {"level": "info", "data": "x"})
    out = pb.upstream(log_msg, origin=up2)
    assert payloads(out, c2) == [log_msg] and not payloads(out, c1)
    ask = req(7, "sampling/createMessage", {"messages": []})
    out = pb.upstream(ask, origin=up1)
    (sent,) = payloads(out, c1)
    assert sent["method"] == "sampling/createMessage"
    # An origin that is no longer in flight falls back to the usual rules.
    pb.upstream(ok(up2))
    out = pb.upstream(log_msg, origin=up2)
    assert payloads(out, c1) == [log_msg]


def test_server_request_ids_are_rewritten_and_the_answer_may_come_on_any_connection() -> None:
    pb = Playbook()
    pb.initialize()
    c, up = call(pb)
    out = pb.upstream(req("srv-9", "elicitation/create", {"message": "?"}))
    (asked,) = payloads(out, c)
    assert asked["method"] == "elicitation/create" and asked["id"] != "srv-9"
    other = pb.conn()
    out = pb.post(other, {"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept"}})
    assert Accepted(other) in out
    assert upstream_sent(out) == [{"jsonrpc": "2.0", "id": "srv-9", "result": {"action": "accept"}}]


def test_client_id_reuse_and_type_are_kept_apart() -> None:
    pb = Playbook()
    pb.initialize()
    c1, up1 = call(pb, rid=5, token="a")
    c2, up2 = call(pb, rid="5", token="b")
    out = pb.upstream(ok(up2)) + pb.upstream(ok(up1))
    assert payloads(out, c2) == [ok("5")] and payloads(out, c1) == [ok(5)]


def test_detached_client_resumes_exactly_the_rest_then_live_then_end() -> None:
    pb = Playbook()
    pb.initialize()
    c, up = call(pb)
    pb.upstream(progress("tok", 1))
    pb.upstream(progress("tok", 2))
    pb.feed(ClientDetached(c))
    pb.upstream(progress("tok", 3))  # logged while nobody listens
    r = pb.conn()
    out = pb.get(r, "ep0ch.2.1")
    assert out[0] == StartSse(r)
    assert client_sent(out, r)[0].payload is None  # priming on resume
    assert client_sent(out, r)[0].event_id == "ep0ch.2.1.2"
    assert payloads(out, r) == [progress("tok", 2), progress("tok", 3)]
    out = pb.upstream(progress("tok", 4)) + pb.upstream(ok(up))
    assert payloads(out, r) == [progress("tok", 4), ok(7)]
    assert CloseClient(r) in out


def test_resume_after_completion_replays_the_tail_within_retention() -> None:
    pb = Playbook()
    pb.initialize()
    c, up = call(pb)
    pb.feed(ClientDetached(c))
    pb.upstream(progress("tok", 1))
    pb.upstream(ok(up))
    pb.tick(119)
    r = pb.conn()
    out = pb.get(r, "ep0ch.2.0")
    assert payloads(out, r) == [progress("tok", 1), ok(7)]
    assert CloseClient(r) in out
    # from the very end: the client has it all; polling again would be pointless
    with pytest.raises(ResumeError) as info:
        pb.get(pb.conn(), "ep0ch.2.2")
    assert (info.value.reason, info.value.http_status) == ("stream_completed", 410)


def test_resume_at_the_end_of_a_live_stream_waits_for_more() -> None:
    pb = Playbook()
    pb.initialize()
    c, up = call(pb)
    pb.upstream(progress("tok", 1))
    pb.feed(ClientDetached(c))
    r = pb.conn()
    out = pb.get(r, "ep0ch.2.1")
    assert StartSse(r) in out and payloads(out, r) == [] and CloseClient(r) not in out
    assert payloads(pb.upstream(ok(up)), r) == [ok(7)]


def test_a_cancelled_request_stream_tells_a_polling_client_it_is_over() -> None:
    pb = Playbook()
    pb.initialize()
    c, up = call(pb)
    pb.upstream(progress("tok", 1))
    pb.post(pb.conn(), note("notifications/cancelled", {"requestId": 7}))
    with pytest.raises(ResumeError) as info:
        pb.get(pb.conn(), "ep0ch.2.1")
    assert info.value.reason == "stream_completed"


def test_after_an_upstream_exit_the_standalone_stream_says_the_session_is_gone() -> None:
    pb = Playbook()
    pb.initialize()
    pb.upstream(note("notifications/tools/list_changed"))
    pb.feed(UpstreamClosed("exit code 1"))
    r = pb.conn()
    assert payloads(pb.get(r, "ep0ch.0.0"), r) == [note("notifications/tools/list_changed")]
    with pytest.raises(SessionNotFound):
        pb.get(pb.conn(), "ep0ch.0.1")


def test_completed_stream_expires_after_retention() -> None:
    pb = Playbook()
    pb.initialize()
    c, up = call(pb)
    pb.upstream(ok(up))
    pb.tick(121)
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
    c, _ = call(pb)
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
    out = pb.get(r, "ep0ch.2.2")  # events 3..5 are all still held
    assert payloads(out, r) == [progress("tok", i) for i in (3, 4, 5)]


def test_a_resume_takes_the_stream_over_from_a_stale_connection() -> None:
    pb = Playbook()
    pb.initialize()
    c, _ = call(pb)
    pb.upstream(progress("tok", 1))
    r = pb.conn()
    out = pb.get(r, "ep0ch.2.1")
    assert out[0] == CloseClient(c)
    out = pb.upstream(progress("tok", 2))
    assert payloads(out, r) == [progress("tok", 2)] and not payloads(out, c)


def test_second_standalone_get_conflicts_and_buffered_messages_wait_for_it() -> None:
    pb = Playbook()
    pb.initialize()
    msg = note("notifications/tools/list_changed")
    pb.upstream(msg)
    g = pb.conn()
    out = pb.get(g)
    assert payloads(out, g) == [msg]
    with pytest.raises(Conflict):
        pb.get(pb.conn())
    pb.feed(ClientDetached(g))
    g2 = pb.conn()
    out = pb.get(g2)
    assert payloads(out, g2) == [], "already delivered: a fresh GET does not repeat it"


def test_max_stream_seconds_closes_with_retry_and_the_client_polls_back() -> None:
    pb = Playbook(settings=SessionSettings(max_stream_seconds=5, retry_ms=250))
    pb.initialize()
    g = pb.conn()
    pb.get(g)  # the standalone stream is left open: it carries no response to wait for
    c, up = call(pb)
    assert WakeAt(1005.0) in pb.log
    pb.upstream(progress("tok", 1))
    out = pb.tick(5)
    assert CloseClient(c, 250) in out and not any(getattr(x, "conn", None) == g for x in out)
    out = pb.upstream(progress("tok", 2))
    assert not client_sent(out)
    r = pb.conn()
    out = pb.get(r, "ep0ch.2.1")
    assert payloads(out, r) == [progress("tok", 2)]


def test_client_cancel_is_forwarded_and_ends_the_stream() -> None:
    pb = Playbook()
    pb.initialize()
    c, up = call(pb)
    other = pb.conn()
    out = pb.post(other, note("notifications/cancelled", {"requestId": 7, "reason": "user"}))
    assert upstream_sent(out) == [
        note("notifications/cancelled", {"requestId": up, "reason": "user"})
    ]
    assert CloseClient(c) in out
    out = pb.upstream(ok(up))
    assert not client_sent(out), "a late answer to a cancelled request is dropped"


def test_upstream_exit_fails_in_flight_requests_and_closes_the_session() -> None:
    pb = Playbook()
    pb.initialize()
    c, up = call(pb)
    out = pb.feed(UpstreamClosed("exit code 1"))
    (err,) = payloads(out, c)
    assert err["id"] == 7 and err["error"]["code"] == -32000
    assert "exit code 1" in err["error"]["message"]
    assert StopUpstream("exit code 1") in out
    with pytest.raises(SessionNotFound):
        pb.post(pb.conn(), req(8, "ping"))
    # what was logged can still be collected until retention ends
    r = pb.conn()
    assert payloads(pb.get(r, "ep0ch.2.0"), r) == [err]
    out = pb.tick(121)
    assert any(isinstance(x, ForgetSession) for x in out)


def test_idle_session_expires_and_stops_its_upstream() -> None:
    pb = Playbook(settings=SessionSettings(idle_timeout=600))
    pb.initialize()
    assert not any(isinstance(x, ForgetSession) for x in pb.tick(599))
    out = pb.tick(1)
    assert any(isinstance(x, StopUpstream) for x in out)
    assert any(isinstance(x, ForgetSession) for x in out)


def test_a_live_request_keeps_the_session_from_idling() -> None:
    pb = Playbook(settings=SessionSettings(idle_timeout=10))
    pb.initialize()
    c, up = call(pb)
    pb.feed(ClientDetached(c))
    assert not any(isinstance(x, ForgetSession) for x in pb.tick(60))
    pb.upstream(ok(up))
    assert not any(isinstance(x, ForgetSession) for x in pb.tick(5))
    assert any(isinstance(x, ForgetSession) for x in pb.tick(10))


def test_delete_forgets_everything() -> None:
    pb = Playbook()
    pb.initialize()
    c, _ = call(pb)
    out = pb.feed(ClientDelete())
    assert CloseClient(c) in out and any(isinstance(x, ForgetSession) for x in out)
    assert pb.session.buffered_bytes == 0


def test_batches_only_for_2025_03_26_sessions() -> None:
    pb = Playbook(version="2025-03-26")
    pb.initialize()
    c = pb.conn()
    out = pb.post(c, req(1, "ping"), req(2, "tools/list"))
    ups = upstream_sent(out)
    assert len(ups) == 2
    out = pb.upstream(ok(ups[1]["id"]))
    assert payloads(out, c) == [ok(2)] and CloseClient(c) not in out
    out = pb.upstream(ok(ups[0]["id"]))
    assert payloads(out, c) == [ok(1)] and CloseClient(c) in out
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
    (asked,) = payloads(pb.upstream(req(44, "sampling/createMessage", {})), c)
    out = pb.upstream(note("notifications/cancelled", {"requestId": 44}))
    assert payloads(out, c) == [note("notifications/cancelled", {"requestId": asked["id"]})]


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
    conn, up = call(pb)
    received: list[dict[str, object]] = []
    last_id = "ep0ch.2.0"
    in_flight: list[SendToClient] = []
    cuts = dict(plan)

    def take(out: list[object]) -> None:
        in_flight.extend(c for c in out if isinstance(c, SendToClient) and c.conn == conn)

    for i in range(1, n + 2):
        take(pb.upstream(progress("tok", i) if i <= n else ok(up)))
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
    out = pb.post(c, req(0, "initialize", {"protocolVersion": "1999-01-01"}))
    up = upstream_sent(out)[0]["id"]
    error = {"jsonrpc": "2.0", "id": up, "error": {"code": -32602, "message": "bad version"}}
    out = pb.upstream(error)
    assert payloads(out, c) == [{**error, "id": 0}]
    assert StopUpstream("initialize failed") in out
    with pytest.raises(SessionNotFound):
        pb.post(pb.conn(), req(1, "ping"))


def test_a_request_stream_whose_client_never_returns_is_abandoned() -> None:
    """DESIGN.md §6 holds for Last-Event-ID streams too, counted from the detach."""
    pb = Playbook(now=50_000.0, settings=SessionSettings(resume_interval_max=60))
    pb.initialize()
    c, up = call(pb)
    pb.tick(100)  # attached: a client that is there is never abandoned
    pb.feed(ClientDetached(c))
    assert not upstream_sent(pb.tick(59))
    (cancel,) = upstream_sent(pb.tick(1))
    assert cancel == note(
        "notifications/cancelled", {"requestId": up, "reason": "stream abandoned by the client"}
    )
    with pytest.raises(ResumeError) as info:
        pb.get(pb.conn(), "ep0ch.2.0")
    assert (info.value.reason, info.value.http_status) == ("abandoned", 410)


def test_a_server_answer_with_a_lone_surrogate_reaches_the_client() -> None:
    pb = Playbook()
    pb.initialize()
    c, up = call(pb)
    answer = json.loads(b'{"jsonrpc":"2.0","id":%d,"result":{"t":"\\udc80"}}' % up)
    out = pb.upstream(answer)
    assert payloads(out, c)[-1]["result"] == {"t": "\udc80"}
