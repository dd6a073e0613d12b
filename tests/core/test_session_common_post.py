"""The common POST (one request: ``Session._post_request``) does what the general path
does with it, command for command and state for state; a connection detached twice
changes nothing the second time (issue 23, fifth pass: both are shortcuts, not rules)."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core import session as session_module
from proxy.core.errors import Overloaded
from proxy.core.events import ClientDetached, Command
from proxy.core.session import SessionSettings
from tests.core.playbook import Playbook, ok, req, seeded, upstream_sent

CASES: list[tuple[str, dict[str, Any] | None]] = [
    ("tools/call", {"name": "echo", "arguments": {"text": "hi"}}),
    ("tools/call", {"name": "slow", "_meta": {"progressToken": "tok"}}),
    ("tools/call", {"_meta": {"progressToken": 5}}),
    ("tools/call", {"_meta": "not an object"}),
    ("tools/list", None),
    ("ping", {}),
]


def _run(pb: Playbook, method: str, params: dict[str, Any] | None) -> list[list[Command]]:
    """A call, its answer, its connection gone, a second call: every command, in order."""
    steps: list[list[Command]] = []
    c = pb.conn()
    out = pb.post(c, req("r1", method, params))
    steps.append(out)
    (sent,) = upstream_sent(out)
    steps.append(pb.upstream(ok(sent["id"], {"content": []})))
    steps.append(pb.feed(ClientDetached(c)))
    steps.append(pb.post(pb.conn(), req(2, method, params)))
    return steps


def _state(pb: Playbook) -> Any:
    s = pb.session
    streams = {
        n: (st.state, st.conn, st.cursor, st.sent_upto, st.pending, st.request_id, st.create_at)
        for n, st in s._streams.items()
    }
    return streams, dict(s._ids._pending), dict(s._ids._progress), s.schedule.wake


@pytest.mark.parametrize(("method", "params"), CASES)
@pytest.mark.parametrize("seed_streams", [False, True])
@pytest.mark.parametrize("max_streams", [1000, 1])  # 1: each call evicts a finished one
def test_the_common_post_does_what_the_general_path_does(
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    params: dict[str, Any] | None,
    seed_streams: bool,
    max_streams: int,
) -> None:
    def playbook() -> Playbook:
        if seed_streams:
            return seeded(max_streams=max_streams)
        pb = Playbook(settings=SessionSettings(max_streams=max_streams))
        pb.initialize()
        return pb

    common = playbook()
    common_steps = _run(common, method, params)
    # Every request left to the general path: the same session, the same calls.
    monkeypatch.setattr(session_module, "_NOT_PLAIN", session_module._NOT_PLAIN | {method})
    general = playbook()
    general_steps = _run(general, method, params)
    assert common_steps == general_steps
    assert _state(common) == _state(general)


def test_the_common_post_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """(So the test above compares two paths, not one with itself.)"""
    pb = Playbook()
    pb.initialize()
    taken: list[object] = []
    original = pb.session._post_request
    monkeypatch.setattr(pb.session, "_post_request", lambda *a: taken.append(a) or original(*a))
    pb.post(pb.conn(), req(1, "tools/call", {}))
    assert len(taken) == 1


def test_a_connection_detached_twice_changes_nothing_the_second_time() -> None:
    pb = Playbook()
    pb.initialize()
    c = pb.conn()
    (sent,) = upstream_sent(pb.post(c, req(1, "tools/call", {})))
    pb.upstream(ok(sent["id"]))  # completes the stream: its connection is detached here
    before = _state(pb), pb.session.schedule.idle_since
    assert pb.feed(ClientDetached(c)) == []
    assert (_state(pb), pb.session.schedule.idle_since) == before


@pytest.mark.parametrize("general", [False, True])
def test_no_room_refuses_the_common_post_as_the_general_path_does(
    monkeypatch: pytest.MonkeyPatch, general: bool
) -> None:
    if general:
        general_only = session_module._NOT_PLAIN | {"tools/call"}
        monkeypatch.setattr(session_module, "_NOT_PLAIN", general_only)
    pb = Playbook(settings=SessionSettings(max_streams=1))
    pb.initialize()  # its stream finished: evicted for the first call
    pb.post(pb.conn(), req(1, "tools/call", {}))
    before = _state(pb)
    with pytest.raises(Overloaded):
        pb.post(pb.conn(), req(2, "tools/call", {}))  # the first still runs: no room
    assert _state(pb) == before, "a refused POST changes nothing"
