"""The seed's stream protocol (D2) in the core: create, poll, resume, end, abandonment."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.errors import ResumeError
from proxy.core.events import (
    Accepted,
    ClientDetached,
    ClientPost,
    CloseClient,
    Command,
    ConnId,
    LogNote,
    StartSse,
    WakeAt,
)
from proxy.core.jsonrpc import classify
from proxy.core.session import SessionSettings
from proxy.core.stream import StreamLog
from proxy.core.tokens import resume_token_for
from tests.core.playbook import (
    Playbook,
    note,
    ok,
    payloads,
    prime,
    progress,
    req,
    sse,
    up,
    upstream_sent,
)
from tests.core.test_stream import full_parse_summary

SECRET = b"k" * 32
SETTINGS = SessionSettings(token_secret=SECRET, resume_interval_min=2, resume_interval_max=60)
META_KEY = "io.github.mcp-resume-proxy/eventId"


def seeded(**changes: Any) -> Playbook:
    pb = Playbook(settings=dataclasses.replace(SETTINGS, **changes))
    out = pb.initialize({"streams": {}, "elicitation": {}})
    (forwarded,) = upstream_sent(out)
    assert forwarded["params"]["capabilities"] == {"elicitation": {}}, "streams stays here"
    assert pb.session.speaks_streams
    return pb


def slow(rid: Any) -> dict[str, Any]:
    """A tools/call with a progress token (as sent, and as forwarded with ``rid``)."""
    return req(rid, "tools/call", {"name": "slow", "_meta": {"progressToken": "tok"}})


def call(pb: Playbook, rid: Any = 7) -> tuple[ConnId, int, dict[str, Any]]:
    """A tools/call; returns its connection, upstream id and the stream/create params."""
    c = pb.conn()
    out = pb.post(c, slow(rid))
    (create,) = [m for m in payloads(out, c) if m.get("method") == "notifications/stream/create"]
    return c, upstream_sent(out)[0]["id"], create["params"]["stream"]


def local(
    pb: Playbook, method: str, params: dict[str, Any], *, rid: Any = 99, lei: str | None = None
) -> tuple[ConnId, list[Command]]:
    c = pb.conn()
    out = pb.feed(ClientPost(c, [classify(req(rid, method, params))], last_event_id=lei))
    assert not upstream_sent(out), "stream/* is never forwarded upstream"
    return c, out


def ref_of(number: int) -> dict[str, Any]:
    """What a stream/poll or stream/resume names stream ``number`` with."""
    stream_id = f"ep0ch.{number}"
    return {"streamId": stream_id, "resumeToken": resume_token_for(SECRET, "sid", stream_id)}


def create(number: int, request_id: Any, *, flat: bool = False) -> dict[str, Any]:
    """notifications/stream/create of stream ``number`` (resumeInterval as in SETTINGS)."""
    fields = {**ref_of(number), "requestId": request_id, "resumeInterval": {"min": 2, "max": 60}}
    return note("notifications/stream/create", fields if flat else {"stream": fields})


def end(number: int) -> dict[str, Any]:
    return note("notifications/stream/end", {"streamId": f"ep0ch.{number}"})


def polled(pending: bool, has_request: bool = False, status: str = "live") -> dict[str, Any]:
    """The answer to stream/poll request 99 about stream 2."""
    result = {
        "streamId": "ep0ch.2",
        "status": status,
        "pendingMessages": pending,
        "hasRequest": has_request,
        "hasError": False,
    }
    return ok(99, result)


def refused(rid: Any, reason: str, message: str) -> dict[str, Any]:
    error = {"code": -32602, "message": message, "data": {"reason": reason}}
    return {"jsonrpc": "2.0", "id": rid, "error": error}


def cancelled(upstream_id: int) -> dict[str, Any]:
    params = {"requestId": upstream_id, "reason": "stream abandoned by the client"}
    return note("notifications/cancelled", params)


def early(method: str, after_seconds: float = 0.0) -> LogNote:
    """Stream 2 resumed or polled sooner than resumeInterval.min after it was touched."""
    fields = {"stream": 2, "method": method, "after_seconds": after_seconds}
    return LogNote("resumed_early", fields)


def resumed(after: int) -> LogNote:
    """Stream 2 taken up by a stream/resume after position ``after``."""
    return LogNote("stream_resumed", {"stream": 2, "after": after})


def tagged(msg: dict[str, Any], event_id: str) -> dict[str, Any]:
    """``msg`` carrying its event id in ``_meta`` (``streams.event_id_in_meta``)."""
    key = "params" if "method" in msg else "result"
    body = msg.get(key, {})
    return {**msg, key: {**body, "_meta": {**body.get("_meta", {}), META_KEY: event_id}}}


def test_create_notification_announces_the_call_with_a_bound_token() -> None:
    pb = seeded()
    c = pb.conn()
    announced = {
        "streamId": "ep0ch.2",
        "resumeToken": resume_token_for(SECRET, "sid", "ep0ch.2"),
        "requestId": 7,
        "resumeInterval": {"min": 2, "max": 60},
    }
    assert pb.post(c, slow(7)) == [
        StartSse(c),
        prime(c, "ep0ch.2.0.1"),
        up(slow(2)),
        sse(c, "ep0ch.2.1", note("notifications/stream/create", {"stream": announced})),
    ]
    assert pb.upstream(progress("tok", 1)) == [sse(c, "ep0ch.2.2", progress("tok", 1))]
    assert pb.upstream(ok(2)) == [
        sse(c, "ep0ch.2.3", ok(7)),
        sse(c, "ep0ch.2.4", end(2)),
        CloseClient(c),
    ]


def test_flat_shape_and_only_configured_methods() -> None:
    pb = seeded(notification_shape="flat")
    c = pb.conn()
    assert pb.post(c, req(1, "tools/call", {"name": "x"})) == [
        StartSse(c),
        prime(c, "ep0ch.2.0.1"),
        up(req(2, "tools/call", {"name": "x"})),
        sse(c, "ep0ch.2.1", create(2, 1, flat=True)),
    ]
    c2 = pb.conn()
    assert pb.post(c2, req(2, "tools/list")) == [
        StartSse(c2),
        prime(c2, "ep0ch.3.0.1"),
        up(req(3, "tools/list")),
    ], "tools/list gets no stream"


def test_clients_without_the_capability_get_no_stream() -> None:
    pb = Playbook(settings=SETTINGS)
    pb.initialize()
    c = pb.conn()
    assert pb.post(c, req(1, "tools/call", {})) == [
        StartSse(c),
        prime(c, "ep0ch.2.0.1"),
        up(req(2, "tools/call", {})),
    ]


def test_poll_reports_what_the_client_has_not_acknowledged() -> None:
    pb = seeded()
    c, _, _ = call(pb)
    pb.upstream(progress("tok", 1))
    pb.feed(ClientDetached(c))
    pb.upstream(req("srv-1", "elicitation/create", {"message": "?"}))
    p, out = local(pb, "stream/poll", ref_of(2), lei="ep0ch.2.2")
    assert out == [
        StartSse(p),
        early("stream/poll"),
        prime(p, "ep0ch.3.0.1"),  # the poll's own (reply) stream
        sse(p, "ep0ch.3.1", polled(pending=True, has_request=True)),
        CloseClient(p),
    ]
    p, out = local(pb, "stream/poll", {**ref_of(2), "lastEventId": "ep0ch.2.3"})
    assert out == [
        StartSse(p),
        early("stream/poll"),
        prime(p, "ep0ch.4.0.1"),
        sse(p, "ep0ch.4.1", polled(pending=False)),
        CloseClient(p),
    ]


def test_resume_sends_the_rest_then_live_then_end_then_its_own_answer() -> None:
    pb = seeded()
    c, uid, _ = call(pb)
    pb.upstream(progress("tok", 1))
    pb.upstream(progress("tok", 2))
    pb.feed(ClientDetached(c))
    pb.upstream(progress("tok", 3))
    r, out = local(pb, "stream/resume", ref_of(2), rid="res-1", lei="ep0ch.2.2")
    assert out == [
        StartSse(r),
        early("stream/resume"),
        resumed(2),
        prime(r, "ep0ch.2.2.2"),
        sse(r, "ep0ch.2.3", progress("tok", 2)),
        sse(r, "ep0ch.2.4", progress("tok", 3)),
        WakeAt(1120.0),  # attached: no abandonment (1060); stream 1's retention is next
    ]
    assert pb.upstream(ok(uid)) == [
        sse(r, "ep0ch.2.5", ok(7)),
        sse(r, "ep0ch.2.6", end(2)),
        sse(r, "ep0ch.3.1", ok("res-1")),  # the resume's answer, on its own stream
        CloseClient(r),
    ]


def test_resume_after_completion_and_a_second_resume_taking_over() -> None:
    pb = seeded()
    c, uid, _ = call(pb)
    pb.feed(ClientDetached(c))
    r1, out = local(pb, "stream/resume", ref_of(2), rid=1, lei="ep0ch.2.1")
    assert out == [
        StartSse(r1),
        early("stream/resume"),
        resumed(1),
        prime(r1, "ep0ch.2.1.2"),
        WakeAt(1120.0),
    ]
    r2, out = local(pb, "stream/resume", ref_of(2), rid=2, lei="ep0ch.2.1")
    assert out == [
        StartSse(r2),
        resumed(1),
        CloseClient(r1),  # the second resume takes the stream over
        prime(r2, "ep0ch.2.1.3"),
    ]
    assert pb.upstream(progress("tok", 1)) == [sse(r2, "ep0ch.2.2", progress("tok", 1))]
    assert pb.upstream(ok(uid)) == [
        sse(r2, "ep0ch.2.3", ok(7)),
        sse(r2, "ep0ch.2.4", end(2)),
        sse(r2, "ep0ch.4.1", ok(2)),
        CloseClient(r2),
    ]
    r3, out = local(pb, "stream/resume", ref_of(2), rid=3, lei="ep0ch.2.2")
    assert out == [
        StartSse(r3),
        early("stream/resume"),
        resumed(2),
        prime(r3, "ep0ch.2.2.4"),
        sse(r3, "ep0ch.2.3", ok(7)),
        sse(r3, "ep0ch.2.4", end(2)),
        sse(r3, "ep0ch.5.1", ok(3)),
        CloseClient(r3),
    ]


@pytest.mark.parametrize(
    ("params", "reason", "message"),
    [
        (
            {"streamId": "ep0ch.2", "resumeToken": "nope"},
            "invalid_token",
            "the resume token does not match the stream",
        ),
        ({"streamId": "ep0ch.2"}, "invalid_token", "the resume token does not match the stream"),
        (
            {"streamId": "other.2", "resumeToken": "x"},
            "unknown_stream",
            "no such stream in this session",
        ),
        (ref_of(77), "unknown_stream", "the stream has expired or never existed"),
        ({"resumeToken": "x"}, "unknown_stream", 'stream/* needs a string "streamId"'),
    ],
)
def test_errors_name_their_reason_and_replay_nothing(
    params: dict[str, Any], reason: str, message: str
) -> None:
    pb = seeded()
    call(pb)
    for reply, method in ((3, "stream/poll"), (4, "stream/resume")):
        r, out = local(pb, method, params)
        assert out == [
            StartSse(r),
            prime(r, f"ep0ch.{reply}.0.1"),
            sse(r, f"ep0ch.{reply}.1", refused(99, reason, message)),
            CloseClient(r),
        ]


def test_a_token_of_another_sessions_stream_is_refused() -> None:
    pb = seeded()
    call(pb)
    other = resume_token_for(SECRET, "another-session", "ep0ch.2")
    r, out = local(pb, "stream/resume", {"streamId": "ep0ch.2", "resumeToken": other})
    assert out == [
        StartSse(r),
        prime(r, "ep0ch.3.0.1"),
        sse(
            r,
            "ep0ch.3.1",
            refused(99, "invalid_token", "the resume token does not match the stream"),
        ),
        CloseClient(r),
    ]


def test_resume_into_dropped_history_is_refused() -> None:
    pb = seeded(stream_max_events=3, overflow="truncate")
    c, _, _ = call(pb)
    pb.feed(ClientDetached(c))
    for i in range(1, 6):
        pb.upstream(progress("tok", i))
    r, out = local(pb, "stream/resume", ref_of(2))
    truncated = refused(
        99, "history_truncated", "the events after Last-Event-ID were dropped from the buffer"
    )
    assert out == [
        StartSse(r),
        prime(r, "ep0ch.3.0.1"),
        sse(r, "ep0ch.3.1", truncated),
        CloseClient(r),
    ]


def test_abandoned_streams_are_cancelled_upstream_and_freed() -> None:
    pb = seeded(resume_interval_max=60, completed_retention=10)
    calls = []
    for i in range(1000):
        c, uid, stream = call(pb, rid=i)
        pb.upstream(progress("tok", 1))
        pb.feed(ClientDetached(c))
        calls.append((uid, int(stream["streamId"].split(".")[1])))
    assert pb.session.buffered_bytes > 0
    assert pb.tick(59) == [WakeAt(1060.0)]
    abandoned: list[Any] = []
    for uid, number in calls:  # in stream order
        abandoned += [up(cancelled(uid)), LogNote("stream_abandoned", {"stream": number})]
    assert pb.tick(1) == [*abandoned, WakeAt(1060.0 + 600)]  # then only the idle timeout
    assert pb.session.live_requests == 0
    assert pb.session.stream_numbers() == [0] and pb.session.buffered_bytes == 0
    uid, number = calls[0]
    r, out = local(pb, "stream/poll", ref_of(number))
    gone = "the stream was abandoned: nobody resumed or polled it within resumeInterval.max"
    assert out == [
        StartSse(r),
        prime(r, "ep0ch.1002.0.1"),
        sse(r, "ep0ch.1002.1", refused(99, "abandoned", gone)),
        CloseClient(r),
        WakeAt(1070.0),  # the poll's own stream, retained for 10 s
    ]
    assert pb.upstream(ok(uid)) == [LogNote("upstream_response_unmatched", {"upstream_id": uid})], (
        "a late answer is dropped"
    )


def test_a_poll_resets_the_abandonment_timer() -> None:
    pb = seeded(resume_interval_max=60)
    c, uid, _ = call(pb)
    assert pb.feed(ClientDetached(c)) == [WakeAt(1060.0)]
    assert pb.tick(50) == [WakeAt(1060.0)]
    p, out = local(pb, "stream/poll", ref_of(2))
    assert out == [
        StartSse(p),
        prime(p, "ep0ch.3.0.1"),
        sse(p, "ep0ch.3.1", polled(pending=True)),
        CloseClient(p),
        WakeAt(1110.0),  # abandonment moved to 60 s after the poll
    ]
    assert pb.tick(50) == [WakeAt(1110.0)]
    assert pb.tick(10) == [
        up(cancelled(uid)),
        LogNote("stream_abandoned", {"stream": 2}),
        WakeAt(1120.0),
    ]


def test_create_after_announces_only_calls_that_run_long_enough() -> None:
    pb = seeded(create_after=0.5)
    c = pb.conn()
    assert pb.post(c, req(1, "tools/call", {})) == [
        StartSse(c),
        prime(c, "ep0ch.2.0.1"),
        up(req(2, "tools/call", {})),
        WakeAt(1000.5),
    ]
    assert pb.upstream(ok(2)) == [
        sse(c, "ep0ch.2.1", ok(1)),
        CloseClient(c),
        WakeAt(1120.0),
    ], "done in time: no stream, no end"
    c2 = pb.conn()
    assert pb.post(c2, req(2, "tools/call", {})) == [
        StartSse(c2),
        prime(c2, "ep0ch.3.0.1"),
        up(req(3, "tools/call", {})),
        WakeAt(1000.5),
    ]
    assert pb.tick(0.5) == [sse(c2, "ep0ch.3.1", create(3, 2)), WakeAt(1120.0)]
    assert pb.upstream(ok(3)) == [
        sse(c2, "ep0ch.3.2", ok(2)),
        sse(c2, "ep0ch.3.3", end(3)),
        CloseClient(c2),
    ]


def test_detach_after_create_ends_the_post_with_the_announcement() -> None:
    pb = seeded(detach_after_create=True)
    c = pb.conn()
    assert pb.post(c, req(1, "tools/call", {})) == [
        StartSse(c),
        prime(c, "ep0ch.2.0.1"),
        up(req(2, "tools/call", {})),
        sse(c, "ep0ch.2.1", create(2, 1)),
        CloseClient(c),
        WakeAt(1060.0),  # detached: abandoned unless resumed or polled within 60 s
    ]
    assert pb.upstream(ok(2)) == [WakeAt(1120.0)], "logged for the resume; retained"
    r, out = local(pb, "stream/resume", ref_of(2), lei="ep0ch.2.1")
    assert out == [
        StartSse(r),
        early("stream/resume"),
        resumed(1),
        prime(r, "ep0ch.2.1.2"),
        sse(r, "ep0ch.2.2", ok(1)),
        sse(r, "ep0ch.2.3", end(2)),
        sse(r, "ep0ch.3.1", ok(99)),
        CloseClient(r),
    ]


def test_a_server_request_is_answered_after_resuming_on_another_connection() -> None:
    pb = seeded()
    c, _, _ = call(pb)
    pb.feed(ClientDetached(c))
    assert pb.upstream(req("srv-1", "elicitation/create", {"message": "?"})) == []
    r, out = local(pb, "stream/resume", ref_of(2), lei="ep0ch.2.1")
    assert out == [
        StartSse(r),
        early("stream/resume"),
        resumed(1),
        prime(r, "ep0ch.2.1.2"),
        sse(r, "ep0ch.2.2", req(1, "elicitation/create", {"message": "?"})),
        WakeAt(1120.0),
    ]
    answer = pb.conn()
    assert pb.post(answer, ok(1, {"action": "accept"})) == [
        up(ok("srv-1", {"action": "accept"})),
        Accepted(answer),
    ]


def test_resuming_before_resume_interval_min_is_served_and_logged() -> None:
    pb = seeded(resume_interval_min=2)
    c, _, _ = call(pb)
    pb.feed(ClientDetached(c))
    pb.now += 0.5
    p, out = local(pb, "stream/poll", ref_of(2))
    assert out == [
        StartSse(p),
        early("stream/poll", after_seconds=0.5),
        prime(p, "ep0ch.3.0.1"),
        sse(p, "ep0ch.3.1", polled(pending=True)),
        CloseClient(p),
        WakeAt(1060.5),
    ]
    pb.now += 3
    p, out = local(pb, "stream/poll", ref_of(2))
    assert out == [
        StartSse(p),
        prime(p, "ep0ch.4.0.1"),
        sse(p, "ep0ch.4.1", polled(pending=True)),
        CloseClient(p),
        WakeAt(1063.5),
    ]


# The call's stream 2 logs: 1 create, 2-4 progress p1..p3, then (if it completes)
# 5 the result and 6 the end.
EVENTS = {
    "create": (1, create(2, 7)),
    "p1": (2, progress("tok", 1)),
    "p2": (3, progress("tok", 2)),
    "p3": (4, progress("tok", 3)),
    "result": (5, ok(7)),
    "end": (6, end(2)),
}
RECOVERY = [
    # (name, the seq the client acknowledges, what happens before it resumes, expected)
    ("from the start", None, "live", ["create", "p1", "p2", "p3"]),
    ("from the middle", 2, "live", ["p2", "p3"]),
    ("from the end", 4, "live", []),
    ("after completion", 2, "complete", ["p2", "p3", "result", "end"]),
    ("from the end after completion", 6, "complete", []),
    ("after abandonment", 2, "abandon", "abandoned"),
    ("after truncation", None, "truncate", "history_truncated"),
]
REFUSALS = {
    "abandoned": "the stream was abandoned: nobody resumed or polled it within resumeInterval.max",
    "history_truncated": "the events after Last-Event-ID were dropped from the buffer",
}


@pytest.mark.parametrize(
    ("name", "acked", "then", "expected"), RECOVERY, ids=[r[0] for r in RECOVERY]
)
def test_recovery_table(name: str, acked: int | None, then: str, expected: list[str] | str) -> None:
    pb = seeded(resume_interval_max=60, stream_max_events=4, overflow="truncate")
    c, uid, _ = call(pb)
    for i in (1, 2, 3):
        pb.upstream(progress("tok", i))  # seq 2, 3, 4 (the create is seq 1)
    pb.feed(ClientDetached(c))
    if then == "complete":
        pb.upstream(ok(uid))  # result 5, end 6
    elif then == "abandon":
        pb.tick(61)
    elif then == "truncate":
        pb.upstream(progress("tok", 4))  # seq 5; with max 4 events, seq 1 goes
    params = {**ref_of(2), **({} if acked is None else {"lastEventId": f"ep0ch.2.{acked}"})}
    r, out = local(pb, "stream/resume", params, rid="r")
    if isinstance(expected, str):
        assert out == [
            StartSse(r),
            prime(r, "ep0ch.3.0.1"),
            sse(r, "ep0ch.3.1", refused("r", expected, REFUSALS[expected])),
            CloseClient(r),
        ]
        return
    after = acked or 0
    replay = [sse(r, f"ep0ch.2.{EVENTS[e][0]}", EVENTS[e][1]) for e in expected]
    if then == "complete":  # then the resume's own answer, and the connection ends
        rest = [sse(r, "ep0ch.3.1", ok("r")), CloseClient(r)]
    else:  # live: attached, so not abandoned; stream 1's retention is next
        rest = [WakeAt(1120.0)]
    assert out == [
        StartSse(r),
        early("stream/resume"),
        resumed(after),
        prime(r, f"ep0ch.2.{after}.2"),
        *replay,
        *rest,
    ]


def test_event_ids_in_meta_only_when_opted_in() -> None:
    pb = seeded(event_id_in_meta=True)
    c = pb.conn()
    assert pb.post(c, slow(7)) == [
        StartSse(c),
        prime(c, "ep0ch.2.0.1"),
        up(slow(2)),
        sse(c, "ep0ch.2.1", tagged(create(2, 7), "ep0ch.2.1")),
    ]
    assert pb.upstream(progress("tok", 1)) == [
        sse(c, "ep0ch.2.2", tagged(progress("tok", 1), "ep0ch.2.2"))
    ]
    assert pb.upstream(ok(2, {"content": []})) == [
        sse(c, "ep0ch.2.3", tagged(ok(7, {"content": []}), "ep0ch.2.3")),
        sse(c, "ep0ch.2.4", tagged(end(2), "ep0ch.2.4")),
        CloseClient(c),
    ]
    plain = seeded()
    c, _, _ = call(plain)
    assert plain.upstream(progress("tok", 1)) == [sse(c, "ep0ch.2.2", progress("tok", 1))]


@pytest.mark.parametrize("backlog", [10, 3000])
def test_a_poll_costs_the_same_whatever_the_backlog(
    backlog: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The poll summary is kept as events are logged: a poll parses no payload and walks
    no log but its own answer's (it used to parse every unacknowledged message)."""
    pb = seeded()
    c, _, _ = call(pb)
    pb.feed(ClientDetached(c))
    for n in range(backlog):
        pb.upstream(progress("tok", n))
    pb.upstream(req("srv-1", "elicitation/create", {"message": "?"}))
    parsed: list[int] = []
    walked: list[int] = []
    real_loads, real_after = json.loads, StreamLog.after

    def counting_loads(*args: Any, **kwargs: Any) -> Any:
        parsed.append(1)
        return real_loads(*args, **kwargs)

    def counting_after(log: StreamLog, seq: int) -> Any:
        entries = real_after(log, seq)
        walked.append(len(entries))
        return entries

    monkeypatch.setattr(json, "loads", counting_loads)
    monkeypatch.setattr(StreamLog, "after", counting_after)
    p = pb.conn()
    poll = req(99, "stream/poll", ref_of(2))
    out = pb.feed(ClientPost(p, [classify(poll)], last_event_id="ep0ch.2.1"))
    monkeypatch.undo()
    assert parsed == [], "no payload is parsed"
    assert sum(walked) == 1, "only the poll's own answer is read from a log"
    assert out == [
        StartSse(p),
        early("stream/poll"),
        prime(p, "ep0ch.3.0.1"),
        sse(p, "ep0ch.3.1", polled(pending=True, has_request=True)),
        CloseClient(p),
    ]


ANSWERS = {
    "ok": {"content": []},
    "failed": {"content": [], "isError": True},
}


@settings(max_examples=100, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            st.sampled_from(["progress", "ask", "log", "ok", "failed", "error"]),
            st.floats(0, 1),  # a poll acknowledging that fraction of the unacknowledged rest
        ),
        max_size=30,
    ),
    overflow=st.sampled_from(["block", "truncate"]),
    max_events=st.integers(2, 6),
)
def test_a_poll_answers_what_parsing_the_unacknowledged_rest_would(
    steps: list[str | float], overflow: str, max_events: int
) -> None:
    pb = seeded(overflow=overflow, stream_max_events=max_events)
    c, uid, stream = call(pb)
    ref = {"streamId": stream["streamId"], "resumeToken": stream["resumeToken"]}
    pb.feed(ClientDetached(c))
    log = pb.session._streams[2].log
    for n, step in enumerate(steps):
        if isinstance(step, float):
            seq = log.acked + round(step * (log.last_seq - log.acked))
            p, out = local(pb, "stream/poll", {**ref, "lastEventId": f"ep0ch.2.{seq}"}, rid=n)
            (reply,) = payloads(out, p)
            try:
                expected: object = full_parse_summary([e.payload for e in log.after(log.acked)])
            except ResumeError as exc:
                expected = exc.reason
            got = reply["error"]["data"]["reason"] if "error" in reply else reply["result"]
            if isinstance(got, dict):
                got = {k: got[k] for k in ("pendingMessages", "hasRequest", "hasError")}
            assert got == expected, step
        elif step == "progress":
            pb.upstream(progress("tok", n))
        elif step == "ask":
            pb.upstream(req(f"srv-{n}", "elicitation/create", {"message": "?"}))
        elif step == "log":
            pb.upstream(note("notifications/message", {"level": "info", "data": n}))
        elif step == "error":
            pb.upstream({"jsonrpc": "2.0", "id": uid, "error": {"code": -1, "message": "no"}})
        else:
            pb.upstream(ok(uid, ANSWERS[step]))
