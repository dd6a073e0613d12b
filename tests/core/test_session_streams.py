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
    ClientDetached,
    ClientPost,
    CloseClient,
    ConnId,
    LogNote,
    SendToClient,
    StartSse,
)
from proxy.core.jsonrpc import classify
from proxy.core.session import SessionSettings
from proxy.core.stream import StreamLog
from proxy.core.tokens import resume_token_for
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
from tests.core.test_stream import full_parse_summary

SECRET = b"k" * 32
SETTINGS = SessionSettings(token_secret=SECRET, resume_interval_min=2, resume_interval_max=60)


def seeded(**changes: Any) -> Playbook:
    pb = Playbook(settings=dataclasses.replace(SETTINGS, **changes))
    out = pb.initialize({"streams": {}, "elicitation": {}})
    (forwarded,) = upstream_sent(out)
    assert forwarded["params"]["capabilities"] == {"elicitation": {}}, "streams stays here"
    assert pb.session.speaks_streams
    return pb


def call(pb: Playbook, rid: Any = 7) -> tuple[ConnId, int, dict[str, Any]]:
    """A tools/call; returns its connection, upstream id and the stream/create params."""
    c = pb.conn()
    out = pb.post(c, req(rid, "tools/call", {"name": "slow", "_meta": {"progressToken": "tok"}}))
    (create,) = [m for m in payloads(out, c) if m.get("method") == "notifications/stream/create"]
    return c, upstream_sent(out)[0]["id"], create["params"]["stream"]


def local(
    pb: Playbook, method: str, params: dict[str, Any], *, rid: Any = 99, lei: str | None = None
):  # type: ignore[no-untyped-def]
    c = pb.conn()
    out = pb.feed(ClientPost(c, [classify(req(rid, method, params))], last_event_id=lei))
    assert not upstream_sent(out), "stream/* is never forwarded upstream"
    return c, out


def test_create_notification_announces_the_call_with_a_bound_token() -> None:
    pb = seeded()
    c, up, stream = call(pb)
    assert stream == {
        "streamId": "ep0ch.2",
        "resumeToken": resume_token_for(SECRET, "sid", "ep0ch.2"),
        "requestId": 7,
        "resumeInterval": {"min": 2, "max": 60},
    }
    out = pb.upstream(progress("tok", 1)) + pb.upstream(ok(up))
    assert payloads(out, c) == [
        progress("tok", 1),
        ok(7),
        note("notifications/stream/end", {"streamId": "ep0ch.2"}),
    ]
    assert CloseClient(c) in out


def test_flat_shape_and_only_configured_methods() -> None:
    pb = seeded(notification_shape="flat")
    c, _, _ = pb.conn(), None, None
    out = pb.post(c, req(1, "tools/call", {"name": "x"}))
    (create,) = payloads(out, c)
    assert set(create["params"]) == {"streamId", "resumeToken", "requestId", "resumeInterval"}
    c2 = pb.conn()
    out = pb.post(c2, req(2, "tools/list"))
    assert payloads(out, c2) == [], "tools/list gets no stream"


def test_clients_without_the_capability_get_no_stream() -> None:
    pb = Playbook(settings=SETTINGS)
    pb.initialize()
    c = pb.conn()
    assert payloads(pb.post(c, req(1, "tools/call", {})), c) == []


def test_poll_reports_what_the_client_has_not_acknowledged() -> None:
    pb = seeded()
    c, up, stream = call(pb)
    ref = {"streamId": stream["streamId"], "resumeToken": stream["resumeToken"]}
    pb.upstream(progress("tok", 1))
    pb.feed(ClientDetached(c))
    pb.upstream(req("srv-1", "elicitation/create", {"message": "?"}))
    p, out = local(pb, "stream/poll", ref, lei="ep0ch.2.2")
    (result,) = [m["result"] for m in payloads(out, p)]
    assert result == {
        "streamId": "ep0ch.2",
        "status": "live",
        "pendingMessages": True,
        "hasRequest": True,
        "hasError": False,
    }
    assert CloseClient(p) in out
    p, out = local(pb, "stream/poll", {**ref, "lastEventId": "ep0ch.2.3"})
    (result,) = [m["result"] for m in payloads(out, p)]
    assert (result["pendingMessages"], result["hasRequest"]) == (False, False)


def test_resume_sends_the_rest_then_live_then_end_then_its_own_answer() -> None:
    pb = seeded()
    c, up, stream = call(pb)
    ref = {"streamId": stream["streamId"], "resumeToken": stream["resumeToken"]}
    pb.upstream(progress("tok", 1))
    pb.upstream(progress("tok", 2))
    pb.feed(ClientDetached(c))
    pb.upstream(progress("tok", 3))
    r, out = local(pb, "stream/resume", ref, rid="res-1", lei="ep0ch.2.2")
    assert out[0] == StartSse(r)
    assert payloads(out, r) == [progress("tok", 2), progress("tok", 3)]
    out = pb.upstream(ok(up))
    assert payloads(out, r) == [
        ok(7),
        note("notifications/stream/end", {"streamId": "ep0ch.2"}),
        ok("res-1"),
    ]
    assert out[-2:] == [CloseClient(r), *out[-1:]] or CloseClient(r) in out


def test_resume_after_completion_and_a_second_resume_taking_over() -> None:
    pb = seeded()
    c, up, stream = call(pb)
    ref = {"streamId": stream["streamId"], "resumeToken": stream["resumeToken"]}
    pb.feed(ClientDetached(c))
    r1, _ = local(pb, "stream/resume", ref, rid=1, lei="ep0ch.2.1")
    r2, out = local(pb, "stream/resume", ref, rid=2, lei="ep0ch.2.1")
    assert CloseClient(r1) in out, "the second resume takes the stream over"
    out = pb.upstream(progress("tok", 1)) + pb.upstream(ok(up))
    assert payloads(out, r2) == [
        progress("tok", 1),
        ok(7),
        note("notifications/stream/end", {"streamId": "ep0ch.2"}),
        ok(2),
    ]
    r3, out = local(pb, "stream/resume", ref, rid=3, lei="ep0ch.2.2")
    assert payloads(out, r3) == [
        ok(7),
        note("notifications/stream/end", {"streamId": "ep0ch.2"}),
        ok(3),
    ]


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"streamId": "ep0ch.2", "resumeToken": "nope"}, "invalid_token"),
        ({"streamId": "ep0ch.2"}, "invalid_token"),
        ({"streamId": "other.2", "resumeToken": "x"}, "unknown_stream"),
        (
            {"streamId": "ep0ch.77", "resumeToken": resume_token_for(SECRET, "sid", "ep0ch.77")},
            "unknown_stream",
        ),
        ({"resumeToken": "x"}, "unknown_stream"),
    ],
)
def test_errors_name_their_reason_and_replay_nothing(params: dict[str, Any], reason: str) -> None:
    pb = seeded()
    call(pb)
    for method in ("stream/poll", "stream/resume"):
        r, out = local(pb, method, params)
        (err,) = payloads(out, r)
        assert err["id"] == 99 and err["error"]["code"] == -32602
        assert err["error"]["data"] == {"reason": reason}


def test_a_token_of_another_sessions_stream_is_refused() -> None:
    pb = seeded()
    call(pb)
    other = resume_token_for(SECRET, "another-session", "ep0ch.2")
    r, out = local(pb, "stream/resume", {"streamId": "ep0ch.2", "resumeToken": other})
    assert payloads(out, r)[0]["error"]["data"]["reason"] == "invalid_token"


def test_resume_into_dropped_history_is_refused() -> None:
    pb = seeded(stream_max_events=3, overflow="truncate")
    c, up, stream = call(pb)
    ref = {"streamId": stream["streamId"], "resumeToken": stream["resumeToken"]}
    pb.feed(ClientDetached(c))
    for i in range(1, 6):
        pb.upstream(progress("tok", i))
    r, out = local(pb, "stream/resume", ref)
    assert payloads(out, r)[0]["error"]["data"]["reason"] == "history_truncated"


def test_abandoned_streams_are_cancelled_upstream_and_freed() -> None:
    pb = seeded(resume_interval_max=60, completed_retention=10)
    calls = []
    for i in range(1000):
        c, up, stream = call(pb, rid=i)
        pb.upstream(progress("tok", 1))
        pb.feed(ClientDetached(c))
        calls.append((up, stream))
    assert pb.session.buffered_bytes > 0
    out = pb.tick(59)
    assert not upstream_sent(out)
    out = pb.tick(1)
    cancelled = [m["params"]["requestId"] for m in upstream_sent(out)]
    assert sorted(cancelled) == sorted(up for up, _ in calls)
    assert pb.session.live_requests == 0
    assert pb.session.stream_numbers() == [0] and pb.session.buffered_bytes == 0
    up, stream = calls[0]
    ref = {"streamId": stream["streamId"], "resumeToken": stream["resumeToken"]}
    r, out = local(pb, "stream/poll", ref)
    assert payloads(out, r)[0]["error"]["data"]["reason"] == "abandoned"
    assert not client_sent(pb.upstream(ok(up))), "a late answer is dropped"


def test_a_poll_resets_the_abandonment_timer() -> None:
    pb = seeded(resume_interval_max=60)
    c, up, stream = call(pb)
    ref = {"streamId": stream["streamId"], "resumeToken": stream["resumeToken"]}
    pb.feed(ClientDetached(c))
    pb.tick(50)
    local(pb, "stream/poll", ref)
    assert not upstream_sent(pb.tick(50))
    assert upstream_sent(pb.tick(10))[0]["method"] == "notifications/cancelled"


def test_create_after_announces_only_calls_that_run_long_enough() -> None:
    pb = seeded(create_after=0.5)
    c = pb.conn()
    out = pb.post(c, req(1, "tools/call", {}))
    assert payloads(out, c) == []
    quick = upstream_sent(out)[0]["id"]
    assert payloads(pb.upstream(ok(quick)), c) == [ok(1)], "done in time: no stream, no end"
    c2 = pb.conn()
    up = upstream_sent(pb.post(c2, req(2, "tools/call", {})))[0]["id"]
    (create,) = payloads(pb.tick(0.5), c2)
    assert create["method"] == "notifications/stream/create"
    assert payloads(pb.upstream(ok(up)), c2)[-1]["method"] == "notifications/stream/end"


def test_detach_after_create_ends_the_post_with_the_announcement() -> None:
    pb = seeded(detach_after_create=True)
    c = pb.conn()
    out = pb.post(c, req(1, "tools/call", {}))
    assert [m["method"] for m in payloads(out, c)] == ["notifications/stream/create"]
    assert CloseClient(c) in out
    up = upstream_sent(out)[0]["id"]
    (create,) = payloads(out, c)
    pb.upstream(ok(up))
    ref = {k: create["params"]["stream"][k] for k in ("streamId", "resumeToken")}
    r, out = local(pb, "stream/resume", ref, lei="ep0ch.2.1")
    assert payloads(out, r) == [
        ok(1),
        note("notifications/stream/end", {"streamId": "ep0ch.2"}),
        ok(99),
    ]


def test_a_server_request_is_answered_after_resuming_on_another_connection() -> None:
    pb = seeded()
    c, up, stream = call(pb)
    pb.feed(ClientDetached(c))
    pb.upstream(req("srv-1", "elicitation/create", {"message": "?"}))
    ref = {"streamId": stream["streamId"], "resumeToken": stream["resumeToken"]}
    r, out = local(pb, "stream/resume", ref, lei="ep0ch.2.1")
    (asked,) = payloads(out, r)
    answer = pb.conn()
    out = pb.post(answer, {"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "accept"}})
    assert upstream_sent(out) == [{"jsonrpc": "2.0", "id": "srv-1", "result": {"action": "accept"}}]


def test_resuming_before_resume_interval_min_is_served_and_logged() -> None:
    pb = seeded(resume_interval_min=2)
    c, up, stream = call(pb)
    ref = {"streamId": stream["streamId"], "resumeToken": stream["resumeToken"]}
    pb.feed(ClientDetached(c))
    pb.now += 0.5
    p, out = local(pb, "stream/poll", ref)
    assert "result" in payloads(out, p)[-1]
    assert [n.fields for n in out if isinstance(n, LogNote) and n.event == "resumed_early"]
    pb.now += 3
    p, out = local(pb, "stream/poll", ref)
    assert not [n for n in out if isinstance(n, LogNote) and n.event == "resumed_early"]


RECOVERY = [
    # (name, how far the client got, what happens before it resumes, expected)
    ("from the start", 0, "live", ["p1", "p2", "p3"]),
    ("from the middle", 3, "live", ["p2", "p3"]),
    ("from the end", 5, "live", []),
    ("after completion", 3, "complete", ["p2", "p3", "result", "end"]),
    ("from the end after completion", 7, "complete", []),
    ("after abandonment", 3, "abandon", "abandoned"),
    ("after truncation", 0, "truncate", "history_truncated"),
]


@pytest.mark.parametrize(
    ("name", "acked", "then", "expected"), RECOVERY, ids=[r[0] for r in RECOVERY]
)
def test_recovery_table(name: str, acked: int, then: str, expected: list[str] | str) -> None:
    """Events of the call's stream: 1 create, 2 priming-free progress p1..p3 (seq 2-4)…"""
    pb = seeded(resume_interval_max=60, stream_max_events=4, overflow="truncate")
    c, up, stream = call(pb)
    ref = {"streamId": stream["streamId"], "resumeToken": stream["resumeToken"]}
    for i in (1, 2, 3):
        pb.upstream(progress("tok", i))  # seq 2, 3, 4 (the create is seq 1)
    pb.feed(ClientDetached(c))
    if then == "complete":
        pb.upstream(ok(up))  # result 5, end 6
    elif then == "abandon":
        pb.tick(61)
    elif then == "truncate":
        pb.upstream(progress("tok", 4))  # seq 5; with max 4 events, seq 1 goes
    # acked counts events: 0 = none, 3 = create+p1, 5 = through p3 (live end), 7 = all
    last = {0: None, 3: "ep0ch.2.2", 5: "ep0ch.2.4", 7: "ep0ch.2.6"}[acked]
    params = {**ref, **({"lastEventId": last} if last else {})}
    r, out = local(pb, "stream/resume", params, rid="r")
    got = payloads(out, r)
    if isinstance(expected, str):
        assert got == [got[0]] and got[0]["error"]["data"]["reason"] == expected
        return
    names = {
        "notifications/stream/create": "create",
        "notifications/stream/end": "end",
        "notifications/progress": None,
    }
    seen = []
    for m in got:
        if m.get("id") == "r":
            continue  # the resume's own {} (after the end, when complete)
        if m.get("method") == "notifications/progress":
            seen.append(f"p{m['params']['progress']}")
        elif "result" in m:
            seen.append("result")
        else:
            seen.append(names[m["method"]] or "?")
    if name == "from the start":
        expected = ["create", *expected]
    assert seen == expected
    if then == "complete":
        assert got[-1] == ok("r")


def test_event_ids_in_meta_only_when_opted_in() -> None:
    key = "io.github.mcp-resume-proxy/eventId"
    pb = seeded(event_id_in_meta=True)
    c, up, stream = call(pb)
    out = pb.upstream(progress("tok", 1)) + pb.upstream(ok(up, {"content": []}))
    sent = [s for s in pb.log if isinstance(s, SendToClient) and s.conn == c and s.payload]
    for event in sent:  # the create, the progress, the result and the end
        msg = json.loads(event.payload or b"")
        body = msg["params"] if "method" in msg else msg["result"]
        assert body["_meta"][key] == event.event_id
    assert len(sent) == 4
    plain = seeded()
    c, up, _ = call(plain)
    out = plain.upstream(progress("tok", 1))
    assert "_meta" not in payloads(out, c)[0]["params"]


@pytest.mark.parametrize("backlog", [10, 3000])
def test_a_poll_costs_the_same_whatever_the_backlog(
    backlog: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The poll summary is kept as events are logged: a poll parses no payload and walks
    no log but its own answer's (it used to parse every unacknowledged message)."""
    pb = seeded()
    c, up, stream = call(pb)
    ref = {"streamId": stream["streamId"], "resumeToken": stream["resumeToken"]}
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
    out = pb.feed(ClientPost(p, [classify(req(99, "stream/poll", ref))], last_event_id="ep0ch.2.1"))
    monkeypatch.undo()
    assert parsed == [], "no payload is parsed"
    assert sum(walked) == 1, "only the poll's own answer is read from a log"
    (result,) = [m["result"] for m in payloads(out, p)]
    assert (result["pendingMessages"], result["hasRequest"], result["hasError"]) == (
        True,
        True,
        False,
    )


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
    c, up, stream = call(pb)
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
            pb.upstream({"jsonrpc": "2.0", "id": up, "error": {"code": -1, "message": "no"}})
        else:
            pb.upstream(ok(up, ANSWERS[step]))
