"""The seed's stream protocol (D2): announcing a call's stream (create) and its end."""

from __future__ import annotations

from typing import Any

from proxy.core.events import CloseClient, StartSse, WakeAt
from proxy.core.tokens import resume_token_for
from tests.core.playbook import (
    SECRET,
    SETTINGS,
    Playbook,
    create,
    end,
    local,
    note,
    ok,
    prime,
    progress,
    ref_of,
    req,
    seeded,
    seeded_call,
    slow,
    sse,
    taken_up,
    up,
)

META_KEY = "io.github.mcp-resume-proxy/eventId"


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
        *taken_up(r, 1, 2),
        sse(r, "ep0ch.2.2", ok(1)),
        sse(r, "ep0ch.2.3", end(2)),
        sse(r, "ep0ch.3.1", ok(99)),
        CloseClient(r),
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
    c, _, _ = seeded_call(plain)
    assert plain.upstream(progress("tok", 1)) == [sse(c, "ep0ch.2.2", progress("tok", 1))]
