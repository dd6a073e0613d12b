"""A session's upstream side taking a turn's messages at once (proxy/core/session_upstream.py,
``UpstreamMessages``, issue 23): each connection gets what one message at a time would
have given it, in the same order, but as one run of events per connection; a response
in the run has everything before it handed over first; a stream whose bound would push
out an event not yet sent is flushed before it does."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import jsonrpc
from proxy.core.events import (
    CloseClient,
    Command,
    ConnId,
    SendEvents,
    SendToClient,
    UpstreamMessages,
    WakeAt,
)
from proxy.core.session import SessionSettings
from tests.core.playbook import Playbook, call, note, ok, progress, req


def _wire(commands: list[Command]) -> dict[ConnId, list[Any]]:
    """What each connection is sent, in order: (event id, message) or "close"."""
    out: dict[ConnId, list[Any]] = {}
    for c in commands:
        if isinstance(c, SendToClient):
            body = None if c.payload is None else json.loads(c.payload)
            out.setdefault(c.conn, []).append((c.event_id, body))
        elif isinstance(c, CloseClient):
            out.setdefault(c.conn, []).append("close")
    return out


def _others(commands: list[Command]) -> list[Command]:
    """Every command that is not for a client connection's wire, in order, but the
    wake-ups (asked once per event: the schedule's own wake-up is compared instead)."""
    return [c for c in commands if not isinstance(c, SendToClient | CloseClient | WakeAt)]


def _logs(pb: Playbook) -> dict[int, list[bytes]]:
    streams = pb.session._streams
    return {n: s.log.payloads_after(s.log.first_kept_seq - 1) for n, s in streams.items()}


def _setup(settings: SessionSettings) -> tuple[Playbook, ConnId, int, ConnId, int]:
    """A session with its standalone stream open and two calls in flight (progress
    tokens "a" and "b"): (playbook, GET conn, first call's upstream id, second call's
    conn, its upstream id)."""
    pb = Playbook(settings=settings)
    pb.initialize()
    listener = pb.conn()
    pb.get(listener)
    _, first = call(pb, 7, "a")
    second_conn, second = call(pb, 8, "b")
    return pb, listener, first, second_conn, second


def _message(kind: int, n: int, first: int, second: int) -> dict[str, Any]:
    return [
        progress("a", n),
        progress("b", n),
        note("notifications/message", {"n": n}),  # two in flight: the standalone stream
        req(f"s{n}", "sampling/createMessage", {}),
        ok(first, {"n": n}),
        ok(second, {"n": n}),
        progress("gone", n),
    ][kind]


@settings(max_examples=150, deadline=None)
@given(
    kinds=st.lists(st.integers(0, 6), max_size=40),
    standalone_max=st.sampled_from([2, 5, 1000]),
)
def test_a_run_gives_each_connection_what_one_at_a_time_gives(
    kinds: list[int], standalone_max: int
) -> None:
    settings_ = SessionSettings(standalone_max_events=standalone_max, overflow="truncate")
    one, _, first, _, second = _setup(settings_)
    run, *_ = _setup(settings_)
    messages = [_message(k, n, first, second) for n, k in enumerate(kinds)]
    singly: list[Command] = []
    for m in messages:
        singly += one.upstream(m)
    together = run.feed(UpstreamMessages([jsonrpc.classify(m) for m in messages]))
    assert _wire(together) == _wire(singly)
    assert _others(together) == _others(singly)
    assert _logs(run) == _logs(one)
    assert run.session.live_requests == one.session.live_requests
    assert run.session.schedule.wake == one.session.schedule.wake


def test_a_run_of_notifications_is_one_command_per_connection() -> None:
    pb, _, _, second_conn, _ = _setup(SessionSettings())
    msgs = [jsonrpc.classify(progress("b", n)) for n in range(1, 65)]
    out = pb.session.handle(UpstreamMessages(msgs), pb.now)
    (sent,) = [c for c in out if isinstance(c, SendEvents)]
    assert sent.conn == second_conn
    assert sent.run.event_id(0) == "ep0ch.3.1" and len(sent.run) == 64
    assert not [c for c in out if isinstance(c, SendToClient)]


def test_a_response_in_a_run_comes_after_what_came_before_it_then_its_stream_ends() -> None:
    pb, _, _, second_conn, second = _setup(SessionSettings())
    out = pb.feed(
        UpstreamMessages(
            [
                jsonrpc.classify(progress("b", 1)),
                jsonrpc.classify(ok(second, {"done": True})),
                jsonrpc.classify(progress("b", 2)),  # late: its request is answered
            ]
        )
    )
    assert _wire(out)[second_conn] == [
        ("ep0ch.3.1", progress("b", 1)),
        ("ep0ch.3.2", ok(8, {"done": True})),
        "close",
    ]


def test_a_bound_smaller_than_the_run_loses_no_event_for_an_attached_connection() -> None:
    pb, listener, *_ = _setup(SessionSettings(standalone_max_events=3, overflow="truncate"))
    msgs = [jsonrpc.classify(note("notifications/message", {"n": n})) for n in range(10)]
    out = pb.feed(UpstreamMessages(msgs))
    got = [body["params"]["n"] for _, body in _wire(out)[listener]]
    assert got == list(range(10))
    assert len(pb.session._streams[0].log) == 3
