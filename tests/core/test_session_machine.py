"""A Hypothesis state machine over the core session: many calls, drops and resumes.

Clients drop at any moment, keeping any prefix of what was in flight on the wire, and
resume with the id of the last event they kept — by ``GET`` + ``Last-Event-ID`` or, when
the session speaks the seed protocol, by ``stream/resume`` — and poll. Streams are small
and overflow under either policy. Whatever the interleaving, each call's messages reach
its client as a prefix of what the server sent (never a gap, never a duplicate); a resume
is either that exact rest or, under ``truncate`` only, ``history_truncated``; no log holds
more than its bound (plus the one event that trips it, while ``block`` pauses the
server); once everything is collected, each client has all of it and the result.

Sessions run 2025-11-25 or 2025-03-26 (batches) with a few streams allowed or many: a
request refused at the stream limit changes nothing, even in a batch that also answers
a server request (the answer can be sent again alone and reaches the server); a stream
evicted to make room is refused by name (``unknown_stream``), never replayed in part.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from proxy.core.errors import Overloaded, ResumeError
from proxy.core.events import (
    ClientDetached,
    ClientPost,
    CloseClient,
    Command,
    ConnId,
    SendToClient,
)
from proxy.core.jsonrpc import classify
from proxy.core.session import SessionSettings
from tests.core.playbook import Playbook, note, ok, payloads, progress, req, upstream_sent

IGNORED = {
    "notifications/message",
    "notifications/stream/create",
    "notifications/stream/end",
    "roots/list",  # the server's questions: they go to the only call in flight, if one is
}


@dataclass
class Call:
    rid: int
    upstream_id: int
    conn: ConnId | None
    emitted: list[dict[str, Any]] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)
    wire: list[SendToClient] = field(default_factory=list)  # sent, not yet read
    last_id: str | None = None
    answered: bool = False
    finished: bool = False  # the client read the response
    lost: bool = False  # nothing to resume from, or (truncate) its history was dropped
    ref: dict[str, Any] | None = None  # streamId + resumeToken, when announced

    def mine(self) -> list[dict[str, Any]]:
        return [m for m in self.received if m.get("method") not in IGNORED]


class SessionMachine(RuleBasedStateMachine):
    @initialize(
        overflow=st.sampled_from(["block", "truncate"]),
        max_events=st.integers(2, 8),
        seeded=st.booleans(),
        version=st.sampled_from(["2025-11-25", "2025-03-26"]),
        max_streams=st.sampled_from([4, 1000]),
    )
    def start(
        self, overflow: str, max_events: int, seeded: bool, version: str, max_streams: int
    ) -> None:
        settings = SessionSettings(
            completed_retention=1e9,
            idle_timeout=1e9,
            overflow=overflow,
            stream_max_events=max_events,
            max_streams=max_streams,
            token_secret=b"k" * 32,
        )
        self.pb = Playbook(settings=settings, version=version)
        self.pb.initialize({"streams": {}} if seeded else None)
        self.calls: list[Call] = []
        self.resumes = 0
        self.asks = 0

    def _session_state(self) -> object:
        """Everything a refused POST must leave as it was."""
        s = self.pb.session
        streams = [
            (n, x.log.last_seq, x.conn, x.state, sorted(x.pending), x.acked)
            for n, x in s._streams.items()
        ]
        ids = sorted(s._ids._server.items())
        return s.stream_numbers(), s.live_requests, dict(s.delivery.by_conn), ids, streams

    def _overloaded(self, exc: Overloaded, before: object) -> None:
        event("request refused: too many streams")
        assert exc.reason == "too_many_streams"
        assert self._session_state() == before, "a refused POST changed the session"

    def _route(self, out: list[Command]) -> None:
        by_conn = {c.conn: c for c in self.calls if c.conn is not None}
        for cmd in out:
            if isinstance(cmd, SendToClient) and cmd.conn in by_conn:
                by_conn[cmd.conn].wire.append(cmd)
            elif isinstance(cmd, CloseClient) and cmd.conn in by_conn:
                call = by_conn[cmd.conn]
                self._read(call, len(call.wire))
                call.conn = None

    def _read(self, call: Call, n: int) -> None:
        for ev in call.wire[:n]:
            msg = json.loads(ev.payload) if ev.payload is not None else {}
            if str(msg.get("id", "")).startswith("res-"):
                continue  # a stream/resume request's own {} (its own stream): not the call's
            call.last_id = ev.event_id
            if ev.payload is not None:
                call.received.append(msg)
                if msg.get("method") == "notifications/stream/create":
                    call.ref = {k: msg["params"]["stream"][k] for k in ("streamId", "resumeToken")}
                if "result" in msg:
                    call.finished = True
        del call.wire[:n]

    @rule()
    def client_calls(self) -> None:
        self._call()

    def _call(self) -> bool:
        """A new tools/call; False if the session refused it (too many streams)."""
        rid = len(self.calls) + 1
        conn = self.pb.conn()
        params = {"name": "slow", "_meta": {"progressToken": f"t{rid}"}}
        before = self._session_state()
        try:
            out = self.pb.post(conn, req(rid, "tools/call", params))
        except Overloaded as exc:
            self._overloaded(exc, before)
            return False
        call = Call(rid, upstream_sent(out)[0]["id"], conn)
        self.calls.append(call)
        self._route(out)
        self._read(call, min(2, len(call.wire)))  # the priming event and the announcement
        return True

    @precondition(
        lambda self: (
            self.pb.session.accepts_batches()
            and self.pb.session.settings.max_streams < 10
            and not self.pb.session.upstream_paused
        )
    )
    @rule()
    def client_answers_and_calls_in_one_batch_at_the_limit(self) -> None:
        self.asks += 1
        server_id = f"ask-{self.asks}"
        self._route(self.pb.upstream(req(server_id, "roots/list")))
        (asked,) = [d for d, s in self.pb.session._ids._server.items() if s == server_id]
        while self._call():  # fill the session up to its stream limit
            pass
        answer = ok(asked, {"roots": []})
        params = {"name": "slow", "_meta": {"progressToken": f"batch-{self.asks}"}}
        before = self._session_state()
        with pytest.raises(Overloaded) as refused:
            self.pb.post(self.pb.conn(), answer, req(f"batch-{self.asks}", "tools/call", params))
        self._overloaded(refused.value, before)
        event("batch refused at the stream limit")
        out = self.pb.post(self.pb.conn(), answer)  # alone: nothing to refuse
        assert upstream_sent(out) == [ok(server_id, {"roots": []})]

    @precondition(
        lambda self: any(not c.answered for c in self.calls) and not self.pb.session.upstream_paused
    )
    @rule(data=st.data(), answer=st.booleans())
    def server_speaks(self, data: st.DataObject, answer: bool) -> None:
        call = data.draw(st.sampled_from([c for c in self.calls if not c.answered]))
        if answer:
            msg = ok(call.upstream_id, {"n": len(call.emitted)})
            call.answered = True
            call.emitted.append({**msg, "id": call.rid})
        else:
            msg = progress(f"t{call.rid}", len(call.emitted) + 1)
            call.emitted.append(msg)
        self._route(self.pb.upstream(msg))

    @precondition(lambda self: not self.pb.session.upstream_paused)
    @rule()
    def server_logs(self) -> None:
        # Unrelated: goes to the only call in flight or to the standalone stream.
        self._route(self.pb.upstream(note("notifications/message", {"level": "info"})))

    @precondition(lambda self: any(c.conn is not None for c in self.calls))
    @rule(data=st.data(), keep=st.floats(0, 1))
    def client_drops(self, data: st.DataObject, keep: float) -> None:
        call = data.draw(st.sampled_from([c for c in self.calls if c.conn is not None]))
        self._read(call, int(len(call.wire) * keep))
        call.wire.clear()  # the rest was lost with the connection
        call.lost = call.last_id is None
        self.pb.feed(ClientDetached(call.conn))  # type: ignore[arg-type]
        call.conn = None

    def _waiting(self) -> list[Call]:
        return [c for c in self.calls if c.conn is None and not c.finished and not c.lost]

    def _refused(self, call: Call, reason: str) -> None:
        event(f"resume refused: {reason}")
        if reason == "history_truncated" and self.pb.session.settings.overflow == "truncate":
            call.lost, call.conn = True, None  # explicit, and only where truncation is allowed
            return
        if reason == "unknown_stream" and self._evicted(call):
            call.lost, call.conn = True, None  # explicit: it made room for a newer stream
            return
        pytest.fail(f"resume refused: {reason}")

    def _evicted(self, call: Call) -> bool:
        """The call's (finished) stream was dropped to make room under max_streams."""
        assert call.last_id is not None
        number = int(call.last_id.split(".")[1])
        return number not in self.pb.session.stream_numbers()

    @precondition(lambda self: bool(self._waiting()))
    @rule(data=st.data(), seed_protocol=st.booleans())
    def client_resumes(self, data: st.DataObject, seed_protocol: bool) -> None:
        waiting = self._waiting()
        call = data.draw(st.sampled_from(waiting))
        assert call.last_id is not None
        conn = self.pb.conn()
        call.conn = conn
        if seed_protocol and call.ref is not None:
            self.resumes += 1
            rid = f"res-{self.resumes}"
            params = {**call.ref, "lastEventId": call.last_id}
            before = self._session_state()
            try:
                out = self.pb.feed(ClientPost(conn, [classify(req(rid, "stream/resume", params))]))
            except Overloaded as exc:  # no room for the resume request's own stream
                call.conn = None
                self._overloaded(exc, before)
                return
            event("resume by stream/resume")
            errors = [m for m in payloads(out, conn) if m.get("id") == rid and "error" in m]
            if errors:
                self._refused(call, errors[0]["error"]["data"]["reason"])
                return
        else:
            event("resume by GET")
            try:
                out = self.pb.get(conn, call.last_id)
            except ResumeError as exc:
                self._refused(call, exc.reason or "")
                return
        self._route(out)

    @precondition(lambda self: any(c.ref is not None and c.last_id for c in self.calls))
    @rule(data=st.data())
    def client_polls(self, data: st.DataObject) -> None:
        call = data.draw(st.sampled_from([c for c in self.calls if c.ref and c.last_id]))
        conn = self.pb.conn()
        params = {**call.ref, "lastEventId": call.last_id}  # type: ignore[dict-item]
        before = self._session_state()
        try:
            out = self.pb.feed(ClientPost(conn, [classify(req("poll", "stream/poll", params))]))
        except Overloaded as exc:
            self._overloaded(exc, before)
            return
        (reply,) = payloads(out, conn)
        if "error" in reply:
            reason = reply["error"]["data"]["reason"]
            assert reason == "history_truncated" or (
                reason == "unknown_stream" and self._evicted(call)
            ), reason
        else:
            assert reply["result"]["streamId"] == call.ref["streamId"]  # type: ignore[index]

    @invariant()
    def note_pauses(self) -> None:
        if self.pb.session.upstream_paused:
            event("server paused (block)")

    @invariant()
    def logs_stay_within_their_bounds(self) -> None:
        limit = self.pb.session.settings.stream_max_events
        for number in self.pb.session.stream_numbers():
            held = self.pb.session._streams[number].log
            assert len(held) <= max(limit, 1000) + 1

    @rule(data=st.data())
    def client_reads(self, data: st.DataObject) -> None:
        reading = [c for c in self.calls if c.wire]
        if reading:
            call = data.draw(st.sampled_from(reading))
            self._read(call, data.draw(st.integers(1, len(call.wire))))

    @rule(dt=st.floats(0, 5))
    def time_passes(self, dt: float) -> None:
        self._route(self.pb.tick(dt))

    @invariant()
    def each_client_holds_a_prefix_of_its_call(self) -> None:
        for call in self.calls:
            mine = call.mine()
            assert mine == call.emitted[: len(mine)], (mine, call.emitted)

    def teardown(self) -> None:
        if not hasattr(self, "calls"):
            return
        for call in self.calls:
            if not call.answered:
                msg = ok(call.upstream_id, {"n": len(call.emitted)})
                call.emitted.append({**msg, "id": call.rid})
                call.answered = True
                self._route(self.pb.upstream(msg))
        for call in self.calls:
            if call.lost:
                continue
            for _ in range(3):
                if call.conn is not None:
                    self._read(call, len(call.wire))
                if call.finished:
                    break
                if call.conn is None:
                    call.conn = self.pb.conn()
                    try:
                        self._route(self.pb.get(call.conn, call.last_id or ""))
                    except ResumeError as exc:
                        self._refused(call, exc.reason or "")
                        break
            if call.lost:
                continue
            assert call.mine() == call.emitted, (call.rid, call.mine(), call.emitted)


SessionMachine.TestCase.settings = settings(max_examples=250, stateful_step_count=40, deadline=None)
TestSessionMachine = SessionMachine.TestCase
