"""Resuming by GET + Last-Event-ID (D1): the exact rest, then live; refusals by name."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.errors import ResumeError, SessionNotFound
from proxy.core.events import (
    ClientDetached,
    ClientGet,
    CloseClient,
    LogNote,
    SendEvents,
    SendToClient,
    StartSse,
    StopUpstream,
    UpstreamClosed,
    WakeAt,
)
from proxy.core.session import SessionSettings
from tests.core.playbook import (
    Playbook,
    call,
    note,
    ok,
    prime,
    progress,
    resumed,
    sse,
    up,
)


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


def test_a_replay_is_one_run_of_events_however_long() -> None:
    """A resume hands its backlog as one :class:`SendEvents` (framed when written, in
    chunks), not one command per event; a live event afterwards comes alone."""
    pb = Playbook()
    pb.initialize()
    c, uid = call(pb)
    pb.feed(ClientDetached(c))
    for n in range(1, 3001):
        pb.upstream(progress("tok", n))
    r = pb.conn()
    out = pb.session.handle(ClientGet(r, "ep0ch.2.1000"), pb.now)
    runs = [cmd for cmd in out if isinstance(cmd, SendEvents)]
    assert [type(cmd) for cmd in out] == [StartSse, LogNote, SendToClient, SendEvents]
    (run,) = [cmd.run for cmd in runs]
    assert (run.id_prefix, run.first_seq, len(run)) == ("ep0ch.2.", 1001, 2000)
    assert [json.loads(p)["params"]["progress"] for p in run.payloads] == list(range(1001, 3001))
    assert pb.upstream(ok(uid)) == [sse(r, "ep0ch.2.3001", ok(7)), CloseClient(r)]


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
