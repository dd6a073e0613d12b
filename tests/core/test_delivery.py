"""Delivery: which connection reads which stream, priming, and what each is sent."""

from __future__ import annotations

import pytest

from proxy.core.errors import Conflict
from proxy.core.events import ClientDetached, CloseClient, LogNote, StartSse, WakeAt
from proxy.core.session import SessionSettings
from tests.core.playbook import (
    Playbook,
    call,
    note,
    ok,
    prime,
    progress,
    resumed,
    slow,
    sse,
    up,
)


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
