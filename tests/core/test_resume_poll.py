"""The seed's stream protocol (D2): what a stream/poll reports, and what it costs."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import jsoncodec
from proxy.core.errors import ResumeError
from proxy.core.events import ClientDetached, ClientPost, WakeAt
from proxy.core.jsonrpc import classify
from proxy.core.stream import StreamLog
from tests.core.playbook import (
    early,
    local,
    note,
    ok,
    payloads,
    polled,
    progress,
    ref_of,
    req,
    seeded,
    seeded_call,
    served,
)
from tests.core.poll_reference import full_parse_summary


def test_poll_reports_what_the_client_has_not_acknowledged() -> None:
    pb = seeded()
    c, _, _ = seeded_call(pb)
    pb.upstream(progress("tok", 1))
    pb.feed(ClientDetached(c))
    pb.upstream(req("srv-1", "elicitation/create", {"message": "?"}))
    p, out = local(pb, "stream/poll", ref_of(2), lei="ep0ch.2.2")
    # answered on the poll's own (reply) stream, 3
    assert out == served(p, 3, polled(pending=True, has_request=True), early("stream/poll"))
    p, out = local(pb, "stream/poll", {**ref_of(2), "lastEventId": "ep0ch.2.3"})
    assert out == served(p, 4, polled(pending=False), early("stream/poll"))


def test_resuming_before_resume_interval_min_is_served_and_logged() -> None:
    pb = seeded(resume_interval_min=2)
    c, _, _ = seeded_call(pb)
    pb.feed(ClientDetached(c))
    pb.now += 0.5
    p, out = local(pb, "stream/poll", ref_of(2))
    assert out == [
        *served(p, 3, polled(pending=True), early("stream/poll", after_seconds=0.5)),
        WakeAt(1060.5),
    ]
    pb.now += 3
    p, out = local(pb, "stream/poll", ref_of(2))
    assert out == [*served(p, 4, polled(pending=True)), WakeAt(1063.5)]


@pytest.mark.parametrize("backlog", [10, 3000])
def test_a_poll_costs_the_same_whatever_the_backlog(
    backlog: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The poll summary is kept as events are logged: a poll parses no payload and walks
    no log but its own answer's (it used to parse every unacknowledged message)."""
    pb = seeded()
    c, _, _ = seeded_call(pb)
    pb.feed(ClientDetached(c))
    for n in range(backlog):
        pb.upstream(progress("tok", n))
    pb.upstream(req("srv-1", "elicitation/create", {"message": "?"}))
    parsed: list[int] = []
    walked: list[int] = []
    real_loads, real_after = json.loads, StreamLog.payloads_after

    def counting_loads(*args: Any, **kwargs: Any) -> Any:
        parsed.append(1)
        return real_loads(*args, **kwargs)

    def counting_after(log: StreamLog, seq: int) -> Any:
        entries = real_after(log, seq)
        walked.append(len(entries))
        return entries

    monkeypatch.setattr(json, "loads", counting_loads)
    monkeypatch.setattr(jsoncodec, "loads", counting_loads)  # (msgspec: not json.loads)
    monkeypatch.setattr(StreamLog, "payloads_after", counting_after)
    p = pb.conn()
    poll = req(99, "stream/poll", ref_of(2))
    out = pb.feed(ClientPost(p, [classify(poll)], last_event_id="ep0ch.2.1"))
    monkeypatch.undo()
    assert parsed == [], "no payload is parsed"
    # The poll's own answer, just logged, is handed over without walking its log.
    assert sum(walked) == 0, "no log is walked"
    assert out == served(p, 3, polled(pending=True, has_request=True), early("stream/poll"))


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
    c, uid, stream = seeded_call(pb)
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
