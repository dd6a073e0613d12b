"""A Hypothesis state machine over the core session: many calls, drops and resumes.

Clients drop at any moment, keeping any prefix of what was in flight on the wire, and
resume with the id of the last event they kept. Whatever the interleaving, each call's
messages reach its client as a prefix of what the server sent (never a gap, never a
duplicate), and once everything is collected, exactly all of it followed by the result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from proxy.core.errors import ResumeError
from proxy.core.events import ClientDetached, CloseClient, Command, ConnId, SendToClient
from proxy.core.session import SessionSettings
from tests.core.playbook import Playbook, note, ok, progress, req, upstream_sent


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
    lost: bool = False  # dropped before any event id arrived: nothing to resume from


class SessionMachine(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.pb = Playbook(settings=SessionSettings(completed_retention=1e9, idle_timeout=1e9))
        self.pb.initialize()
        self.calls: list[Call] = []

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
            call.last_id = ev.event_id
            if ev.payload is not None:
                msg = json.loads(ev.payload)
                call.received.append(msg)
                if "result" in msg:
                    call.finished = True
        del call.wire[:n]

    @rule()
    def client_calls(self) -> None:
        rid = len(self.calls) + 1
        conn = self.pb.conn()
        params = {"name": "slow", "_meta": {"progressToken": f"t{rid}"}}
        out = self.pb.post(conn, req(rid, "tools/call", params))
        call = Call(rid, upstream_sent(out)[0]["id"], conn)
        self.calls.append(call)
        self._route(out)

    @precondition(lambda self: any(not c.answered for c in self.calls))
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

    @precondition(lambda self: bool(self._waiting()))
    @rule(data=st.data())
    def client_resumes(self, data: st.DataObject) -> None:
        waiting = self._waiting()
        call = data.draw(st.sampled_from(waiting))
        assert call.last_id is not None
        conn = self.pb.conn()
        call.conn = conn
        try:
            out = self.pb.get(conn, call.last_id)
        except ResumeError as exc:
            pytest.fail(f"resume refused: {exc.reason}")
        self._route(out)

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
            mine = [m for m in call.received if m.get("method") != "notifications/message"]
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
                    self._route(self.pb.get(call.conn, call.last_id or ""))
            mine = [m for m in call.received if m.get("method") != "notifications/message"]
            assert mine == call.emitted, (call.rid, mine, call.emitted)


SessionMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestSessionMachine = SessionMachine.TestCase
