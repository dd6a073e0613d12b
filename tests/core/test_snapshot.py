"""proxy/core/snapshot.py: what the status page reads of a session, as frozen values."""

from __future__ import annotations

import dataclasses

import pytest

from proxy.core.session_state import STANDALONE
from proxy.core.snapshot import SessionSnapshot, StreamSnapshot
from tests.core.playbook import Playbook, ok, req, upstream_sent


def test_a_snapshot_shows_the_standalone_and_each_request_stream() -> None:
    pb = Playbook()
    pb.initialize()
    pb.now += 5.0
    c = pb.conn()
    (call,) = upstream_sent(pb.post(c, req(1, "tools/call", {"name": "t"})))
    live = pb.session.snapshot()
    assert isinstance(live, SessionSnapshot)
    assert (live.closed, live.paused) == (False, False)
    standalone, request = live.streams[0], live.streams[-1]
    assert standalone.standalone and standalone.live and not request.standalone
    assert request.state == "live" and request.attached and request.created_at == pb.now
    assert live.buffered_bytes == sum(s.buffered_bytes for s in live.streams)
    pb.upstream(ok(call["id"], {"content": []}))
    done = pb.session.snapshot().streams[-1]
    assert done.number == request.number and done.state == "completed" and not done.live
    assert done.events >= 1 and done.buffered_bytes > 0
    assert request.state == "live"  # the earlier snapshot did not change with the session


def test_snapshots_are_frozen() -> None:
    stream = StreamSnapshot(STANDALONE, "live", False, 0, 0, 0.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stream.state = "completed"  # type: ignore[misc]
    session = SessionSnapshot(0.0, False, False, (stream,))
    assert session.buffered_bytes == 0 and session.streams[0].standalone
