"""Resuming streams: by ``GET`` + ``Last-Event-ID`` (D1) and by the seed's ``stream/poll``
and ``stream/resume`` (D2), with announcement, acknowledgement and abandonment.

A mixin of :class:`~proxy.core.session.Session`: it works on the session's streams and
calls back into the session for attaching, flushing and answering.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.core import jsonrpc, seed
from proxy.core.errors import Conflict, ResumeError, SessionNotFound
from proxy.core.eventid import parse_event_id
from proxy.core.events import (
    ClientGet,
    CloseClient,
    Command,
    ConnId,
    LogNote,
    SendUpstream,
    StartSse,
)
from proxy.core.idmap import IdMap
from proxy.core.jsonrpc import Message
from proxy.core.session_state import STANDALONE, SessionSettings, StreamSlot
from proxy.core.stream import StreamEvent, StreamState, transition
from proxy.core.tokens import resume_token_for, token_matches


class ResumeMixin:
    # What the session provides (see proxy.core.session.Session).
    session_id: str
    epoch: str
    settings: SessionSettings
    closed: bool
    _streams: dict[int, StreamSlot]
    _abandoned: set[int]
    _continue: dict[ConnId, int]
    _ids: IdMap
    _now: float

    if TYPE_CHECKING:  # provided by Session; declared here for the type checker

        def _attach(
            self,
            stream: StreamSlot,
            conn: ConnId,
            out: list[Command],
            *,
            start: int = 0,
            prime: bool = True,
        ) -> None: ...

        def _detach(self, conn: ConnId) -> None: ...

        def _flush(self, stream: StreamSlot, out: list[Command]) -> None: ...

        def _new_stream(self) -> StreamSlot: ...

        def _complete(self, stream: StreamSlot, out: list[Command]) -> None: ...

        def _stamped(self, stream: StreamSlot, payload: bytes) -> bytes: ...

        def _drop_stream(self, stream: StreamSlot) -> None: ...

    def _answer_resume(self, number: int, response: dict[str, Any]) -> None:
        """Log a waiting stream/resume request's answer; its connection arrives after."""
        reply = self._streams.get(number)
        if reply is not None and reply.state is StreamState.LIVE:
            answer = {**response, "id": reply.request_id}
            reply.log.append(jsonrpc.encode(answer), seed.poll_mark(answer))
            reply.state = transition(reply.state, StreamEvent.COMPLETE)
            reply.done_at = self._now

    def _reply(self, stream: StreamSlot, response: dict[str, Any], out: list[Command]) -> None:
        """Answer a request the proxy serves itself, on its own stream."""
        answer = {**response, "id": stream.request_id}
        stream.log.append(jsonrpc.encode(answer), seed.poll_mark(answer))
        self._complete(stream, out)

    # ------------------------------------------------------------------ seed protocol (D2)
    def _announce(self, stream: StreamSlot, out: list[Command]) -> None:
        """``notifications/stream/create`` for a request stream, as a message of it."""
        s = self.settings
        stream.create_at = None
        stream.stream_id = seed.stream_id_for(self.epoch, stream.number)
        token = resume_token_for(s.token_secret, self.session_id, stream.stream_id)
        create = seed.create_notification(
            shape=s.notification_shape,
            stream_id=stream.stream_id,
            token=token,
            request_id=stream.request_id,
            interval_min=s.resume_interval_min,
            interval_max=s.resume_interval_max,
        )
        stream.log.append(self._stamped(stream, jsonrpc.encode(create)))
        stream.touched = self._now
        conn = stream.conn
        self._flush(stream, out)
        if s.detach_after_create and conn is not None and stream.conn == conn:
            # "Fire now, resume later": the POST ends with the announcement.
            self._detach(conn)
            out.append(CloseClient(conn))

    def _local_request(
        self, conn: ConnId, msg: Message, last_event_id: str | None, out: list[Command]
    ) -> None:
        """``stream/poll`` and ``stream/resume``: served here, never forwarded upstream."""
        reply = self._new_stream()
        reply.request_id = msg.id
        out.append(StartSse(conn))
        try:
            ref = seed.read_ref(msg.params)
            target = self._target(ref)
            for given in (last_event_id, ref.last_event_id):
                if given is not None:
                    self._ack(target, given)
            rest = target.log.unacknowledged()  # raises unless the rest is still whole
        except ResumeError as exc:
            self._attach(reply, conn, out)
            error = jsonrpc.error_response(
                msg.id, exc.jsonrpc_code, exc.message, {"reason": exc.reason}
            )
            self._reply(reply, error, out)
            return
        if target.conn is None and self._now - target.touched < self.settings.resume_interval_min:
            # Served all the same (refusing would only make the client retry sooner);
            # logged so an operator can see who ignores resumeInterval.min.
            out.append(
                LogNote(
                    "resumed_early",
                    {
                        "stream": target.number,
                        "method": msg.method,
                        "after_seconds": round(self._now - target.touched, 3),
                    },
                )
            )
        target.touched = self._now
        if msg.method == seed.POLL:
            self._attach(reply, conn, out)
            done = target.state is StreamState.COMPLETED
            result = seed.poll_result(ref.stream_id, done, rest)
            self._reply(reply, jsonrpc.ok_response(msg.id, result), out)
            return
        out.append(LogNote("stream_resumed", {"stream": target.number, "after": target.acked}))
        self._take_over(target, out)
        self._continue[conn] = reply.number
        if target.state is StreamState.COMPLETED:
            self._answer_resume(reply.number, jsonrpc.ok_response(msg.id, {}))
        else:
            target.waiting.append(reply.number)
        self._attach(target, conn, out, start=target.acked)

    def _target(self, ref: seed.StreamRef) -> StreamSlot:
        number = seed.stream_number_of(self.epoch, ref.stream_id)
        if number is None:
            raise ResumeError("no such stream in this session", reason="unknown_stream")
        if not token_matches(self.settings.token_secret, self.session_id, ref.stream_id, ref.token):
            raise ResumeError("the resume token does not match the stream", reason="invalid_token")
        if number in self._abandoned:
            raise ResumeError(
                "the stream was abandoned: nobody resumed or polled it within resumeInterval.max",
                reason="abandoned",
            )
        stream = self._streams.get(number)
        if stream is None or stream.stream_id != ref.stream_id:
            raise ResumeError("the stream has expired or never existed", reason="unknown_stream")
        return stream

    def _ack(self, stream: StreamSlot, last_event_id: str) -> None:
        pos = parse_event_id(last_event_id)
        if pos.epoch != self.epoch or pos.stream != stream.number:
            raise ResumeError("the last event id names another stream", reason="unknown_position")
        if pos.seq > stream.log.last_seq:
            raise ResumeError(
                "the last event id names a position the stream never reached",
                reason="unknown_position",
            )
        self._acknowledge(stream, pos.seq)

    def _acknowledge(self, stream: StreamSlot, seq: int) -> None:
        """The client has everything up to ``seq``: that much may now be dropped."""
        stream.log.acknowledge(seq)

    def _abandon(self, stream: StreamSlot, out: list[Command]) -> None:
        """Nobody came back in time: cancel the upstream work and free the buffer."""
        for upstream_id in sorted(stream.pending):
            cancel = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": upstream_id, "reason": "stream abandoned by the client"},
            }
            out.append(SendUpstream(jsonrpc.encode(cancel)))
            self._ids.finish(upstream_id)
        stream.pending.clear()
        abandoned = jsonrpc.error_response(
            None, -32602, "the stream was abandoned", {"reason": "abandoned"}
        )
        for number in stream.waiting:
            self._answer_resume(number, abandoned)
        self._drop_stream(stream)
        self._abandoned.add(stream.number)
        out.append(LogNote("stream_abandoned", {"stream": stream.number}))

    def _abandon_at(self, stream: StreamSlot) -> float | None:
        """DESIGN.md §6: a request stream nobody resumed or polled for resumeInterval.max."""
        if stream.number == STANDALONE or stream.conn is not None or not stream.pending:
            return None
        if stream.state is not StreamState.LIVE:
            return None
        return stream.touched + self.settings.resume_interval_max

    # ------------------------------------------------------------------ resume by GET (D1)
    def _on_get(self, ev: ClientGet, out: list[Command]) -> None:
        if ev.last_event_id is None:
            if self.closed:
                raise SessionNotFound("Session not found: it has ended")
            stream = self._streams[STANDALONE]
            if stream.conn is not None:
                raise Conflict("the session's standalone stream is already open")
            out.append(StartSse(ev.conn))
            self._attach(stream, ev.conn, out, start=stream.sent_upto)
            return
        pos = parse_event_id(ev.last_event_id)
        if pos.epoch != self.epoch:
            raise ResumeError("Last-Event-ID was issued by another session", reason="wrong_session")
        found = self._streams.get(pos.stream)
        if pos.stream in self._abandoned:
            raise ResumeError(
                "the stream was abandoned: nobody resumed it within resumeInterval.max",
                reason="abandoned",
            )
        if found is None or found.state is StreamState.EXPIRED:
            raise ResumeError(
                "the stream Last-Event-ID names has expired or never existed",
                reason="unknown_stream",
            )
        found.log.after(pos.seq)  # raises before any effect if the replay cannot be whole
        self._acknowledge(found, pos.seq)
        if found.state is StreamState.COMPLETED and pos.seq == found.log.last_seq:
            # The client has it all and nothing more will come. A 200 that only primes and
            # closes would invite it to poll again until retention ends; say it is over.
            if found.number == STANDALONE:
                raise SessionNotFound("Session not found: it has ended")
            raise ResumeError(
                "the stream is complete and the client already has all of it",
                reason="stream_completed",
            )
        self._take_over(found, out)
        out.append(StartSse(ev.conn))
        out.append(
            LogNote(
                "stream_resumed",
                {
                    "stream": found.number,
                    "after": pos.seq,
                    "replay": found.log.last_seq - pos.seq,
                    "state": found.state.value,
                },
            )
        )
        self._attach(found, ev.conn, out, start=pos.seq)

    def _take_over(self, stream: StreamSlot, out: list[Command]) -> None:
        """A resume takes a stream over: its old connection is presumed dead."""
        if stream.conn is not None:
            old = stream.conn
            self._detach(old)
            out.append(CloseClient(old))
