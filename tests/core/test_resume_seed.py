"""The seed's stream protocol (D2): stream/resume, its refusals, and abandonment."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.events import (
    Accepted,
    ClientDetached,
    CloseClient,
    LogNote,
    StartSse,
    WakeAt,
)
from proxy.core.tokens import resume_token_for
from tests.core.playbook import (
    SECRET,
    create,
    end,
    local,
    note,
    ok,
    polled,
    prime,
    progress,
    ref_of,
    req,
    seeded,
    seeded_call,
    seeded_resumed,
    served,
    sse,
    taken_up,
    up,
)


def refused(rid: Any, reason: str, message: str) -> dict[str, Any]:
    error = {"code": -32602, "message": message, "data": {"reason": reason}}
    return {"jsonrpc": "2.0", "id": rid, "error": error}


def cancelled(upstream_id: int) -> dict[str, Any]:
    params = {"requestId": upstream_id, "reason": "stream abandoned by the client"}
    return note("notifications/cancelled", params)


def test_resume_sends_the_rest_then_live_then_end_then_its_own_answer() -> None:
    pb = seeded()
    c, uid, _ = seeded_call(pb)
    pb.upstream(progress("tok", 1))
    pb.upstream(progress("tok", 2))
    pb.feed(ClientDetached(c))
    pb.upstream(progress("tok", 3))
    r, out = local(pb, "stream/resume", ref_of(2), rid="res-1", lei="ep0ch.2.2")
    assert out == [
        *taken_up(r, 2, 2),
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
    c, uid, _ = seeded_call(pb)
    pb.feed(ClientDetached(c))
    r1, out = local(pb, "stream/resume", ref_of(2), rid=1, lei="ep0ch.2.1")
    assert out == [
        *taken_up(r1, 1, 2),
        WakeAt(1120.0),
    ]
    r2, out = local(pb, "stream/resume", ref_of(2), rid=2, lei="ep0ch.2.1")
    assert out == [
        StartSse(r2),
        seeded_resumed(1),
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
        *taken_up(r3, 2, 4),
        sse(r3, "ep0ch.2.3", ok(7)),
        sse(r3, "ep0ch.2.4", end(2)),
        sse(r3, "ep0ch.5.1", ok(3)),
        CloseClient(r3),
    ]


def test_a_server_request_is_answered_after_resuming_on_another_connection() -> None:
    pb = seeded()
    c, _, _ = seeded_call(pb)
    pb.feed(ClientDetached(c))
    assert pb.upstream(req("srv-1", "elicitation/create", {"message": "?"})) == []
    r, out = local(pb, "stream/resume", ref_of(2), lei="ep0ch.2.1")
    assert out == [
        *taken_up(r, 1, 2),
        sse(r, "ep0ch.2.2", req(1, "elicitation/create", {"message": "?"})),
        WakeAt(1120.0),
    ]
    answer = pb.conn()
    assert pb.post(answer, ok(1, {"action": "accept"})) == [
        up(ok("srv-1", {"action": "accept"})),
        Accepted(answer),
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
        (  # a token of another session's stream
            {
                "streamId": "ep0ch.2",
                "resumeToken": resume_token_for(SECRET, "another-session", "ep0ch.2"),
            },
            "invalid_token",
            "the resume token does not match the stream",
        ),
    ],
)
def test_errors_name_their_reason_and_replay_nothing(
    params: dict[str, Any], reason: str, message: str
) -> None:
    pb = seeded()
    seeded_call(pb)
    for reply, method in ((3, "stream/poll"), (4, "stream/resume")):
        r, out = local(pb, method, params)
        assert out == served(r, reply, refused(99, reason, message))


def test_resume_into_dropped_history_is_refused() -> None:
    pb = seeded(stream_max_events=3, overflow="truncate")
    c, _, _ = seeded_call(pb)
    pb.feed(ClientDetached(c))
    for i in range(1, 6):
        pb.upstream(progress("tok", i))
    r, out = local(pb, "stream/resume", ref_of(2))
    truncated = refused(
        99, "history_truncated", "the events after Last-Event-ID were dropped from the buffer"
    )
    assert out == served(r, 3, truncated)


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
    c, uid, _ = seeded_call(pb)
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
        assert out == served(r, 3, refused("r", expected, REFUSALS[expected]))
        return
    after = acked or 0
    replay = [sse(r, f"ep0ch.2.{EVENTS[e][0]}", EVENTS[e][1]) for e in expected]
    if then == "complete":  # then the resume's own answer, and the connection ends
        rest = [sse(r, "ep0ch.3.1", ok("r")), CloseClient(r)]
    else:  # live: attached, so not abandoned; stream 1's retention is next
        rest = [WakeAt(1120.0)]
    assert out == [
        *taken_up(r, after, 2),
        *replay,
        *rest,
    ]


def test_abandoned_streams_are_cancelled_upstream_and_freed() -> None:
    pb = seeded(resume_interval_max=60, completed_retention=10)
    calls = []
    for i in range(1000):
        c, uid, stream = seeded_call(pb, rid=i)
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
        *served(r, 1002, refused(99, "abandoned", gone)),
        WakeAt(1070.0),  # the poll's own stream, retained for 10 s
    ]
    assert pb.upstream(ok(uid)) == [LogNote("upstream_response_unmatched", {"upstream_id": uid})], (
        "a late answer is dropped"
    )


def test_a_poll_resets_the_abandonment_timer() -> None:
    pb = seeded(resume_interval_max=60)
    c, uid, _ = seeded_call(pb)
    assert pb.feed(ClientDetached(c)) == [WakeAt(1060.0)]
    assert pb.tick(50) == [WakeAt(1060.0)]
    p, out = local(pb, "stream/poll", ref_of(2))
    assert out == [
        *served(p, 3, polled(pending=True)),
        WakeAt(1110.0),  # abandonment moved to 60 s after the poll
    ]
    assert pb.tick(50) == [WakeAt(1110.0)]
    assert pb.tick(10) == [
        up(cancelled(uid)),
        LogNote("stream_abandoned", {"stream": 2}),
        WakeAt(1120.0),
    ]
