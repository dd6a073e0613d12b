"""The session core: routing, id rewriting, lifetime (pure; fake clock).

Delivery to connections is tested in test_delivery.py, resuming in test_resume*.py.
"""

from __future__ import annotations

import json

import pytest

from proxy.core.errors import BadRequest, ResumeError, SessionNotFound
from proxy.core.events import (
    Accepted,
    ClientDelete,
    ClientDetached,
    CloseClient,
    ForgetSession,
    LogNote,
    StartSse,
    StopUpstream,
    UpstreamClosed,
    WakeAt,
)
from proxy.core.session import SessionSettings
from proxy.core.tool_policy import Kind, Policy, Rules, ScopeRule
from tests.core.playbook import (
    Playbook,
    call,
    note,
    ok,
    payloads,
    prime,
    progress,
    req,
    resumed,
    sse,
    up,
    upstream_sent,
)


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


def test_what_a_socket_elsewhere_wrote_of_the_standalone_stream_is_not_given_again() -> None:
    """Issue 19: a /ws socket on another replica wrote the standalone stream up to 2 (of
    3); the next connection gets 3 only. A position past the log is the log's end."""
    pb = Playbook()
    pb.initialize()
    call(pb, rid=1, token="a")
    call(pb, rid=2, token="b")
    logged = [note("notifications/message", {"level": "info", "data": n}) for n in "xyz"]
    for msg in logged:
        assert pb.upstream(msg) == []
    pb.session.standalone_handed(2)
    g = pb.conn()
    assert pb.get(g) == [StartSse(g), prime(g, "ep0ch.0.2.1"), sse(g, "ep0ch.0.3", logged[2])]
    pb.feed(ClientDetached(g))
    pb.session.standalone_handed(99)
    g2 = pb.conn()
    assert pb.get(g2) == [StartSse(g2), prime(g2, "ep0ch.0.3.2")]


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


def test_a_server_answer_with_a_lone_surrogate_reaches_the_client() -> None:
    pb = Playbook()
    pb.initialize()
    c, uid = call(pb)
    answer = json.loads(b'{"jsonrpc":"2.0","id":%d,"result":{"t":"\\udc80"}}' % uid)
    assert pb.upstream(answer) == [sse(c, "ep0ch.2.1", ok(7, {"t": "\udc80"})), CloseClient(c)]


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


def _ruled(version: str = "2025-11-25", scopes: frozenset[str] | None = None) -> Playbook:
    pb = Playbook(version=version)
    pb.session.policy = Policy(
        tools=Rules(
            Kind.TOOL,
            deny=("secret",),
            rename={"echo": "say"},
            require=(ScopeRule("admin", ("drop",)),),
        )
    )
    pb.session.scopes = scopes
    pb.initialize()
    return pb


def test_a_hidden_tool_is_refused_in_the_servers_words_and_never_forwarded() -> None:
    """docs/tools.md: the answer is logged like any (resumable), the stream completes."""
    pb = _ruled(scopes=frozenset())
    for name in ("secret", "echo", "drop"):
        c = pb.conn()
        out = pb.post(c, req(9, "tools/call", {"name": name}))
        unknown = {
            "jsonrpc": "2.0",
            "id": 9,
            "error": {"code": -32602, "message": f"Unknown tool: {name}"},
        }
        assert upstream_sent(out) == [], name
        assert payloads(out, c) == [unknown]
        assert CloseClient(c) in out


def test_a_renamed_tool_reaches_the_server_by_its_own_name_and_lists_by_the_new() -> None:
    pb = _ruled(scopes=frozenset({"admin"}))
    c = pb.conn()
    out = pb.post(c, req(9, "tools/call", {"name": "say", "arguments": {"x": 1}}))
    (sent,) = upstream_sent(out)
    assert sent["params"] == {"name": "echo", "arguments": {"x": 1}}
    c = pb.conn()
    (listing,) = upstream_sent(pb.post(c, req(10, "tools/list", {"cursor": "p2"})))
    assert listing["params"] == {"cursor": "p2"}
    tools = [{"name": n} for n in ("echo", "secret", "drop", "other")]
    out = pb.upstream(ok(listing["id"], {"tools": tools, "nextCursor": "p3"}))
    assert payloads(out, c) == [
        ok(
            10,
            {"tools": [{"name": "say"}, {"name": "drop"}, {"name": "other"}], "nextCursor": "p3"},
        )
    ]


def test_a_batch_with_a_refused_request_forwards_the_rest() -> None:
    pb = _ruled(version="2025-03-26", scopes=None)  # no scopes: drop is not limited
    c = pb.conn()
    out = pb.post(
        c, req(1, "tools/call", {"name": "secret"}), req(2, "tools/call", {"name": "drop"})
    )
    assert [m["params"]["name"] for m in upstream_sent(out)] == ["drop"]
    assert [m.get("error", {}).get("code") for m in payloads(out, c)] == [-32602]
    assert CloseClient(c) not in out  # the forwarded one is still to be answered


def test_updates_of_a_hidden_resource_do_not_reach_the_client() -> None:
    pb = Playbook()
    pb.session.policy = Policy(resources=Rules(Kind.RESOURCE, deny=("secret://*",)))
    pb.initialize()
    c, _ = call(pb)
    hidden = note("notifications/resources/updated", {"uri": "secret://x"})
    shown = note("notifications/resources/updated", {"uri": "file:///y"})
    assert pb.upstream(hidden) == []
    assert payloads(pb.upstream(shown), c) == [shown]
