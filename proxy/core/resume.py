"""Resuming streams: by ``GET`` + ``Last-Event-ID`` (D1) and by the seed's ``stream/poll``
and ``stream/resume`` (D2), with announcement, acknowledgement and abandonment.

:class:`Resumer` owns what only resuming needs (the streams given up as abandoned) and
works through explicit parts of its session: the stream table, the :class:`Delivery`
that attaches connections, the id map, and a :class:`StreamHost` of four operations
that stay with the session (making, completing, stamping and dropping streams) and whom
the session belongs to: resume tokens are bound to that principal (:mod:`proxy.core.tokens`).
"""

from __future__ import annotations

from typing import Any, Protocol

from proxy.core import jsonrpc, seed
from proxy.core.delivery import Delivery
from proxy.core.errors import ResumeError
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
from proxy.core.resume_rules import HeldIn, check_position, check_unfinished
from proxy.core.session_state import STANDALONE, SessionSettings, StreamSlot, StreamTable
from proxy.core.stream import StreamEvent, StreamState, transition
from proxy.core.tokens import resume_token_for, token_matches


class StreamHost(Protocol):
    """What resuming needs its session to do (:class:`~proxy.core.session.Session`)."""

    # Who the session belongs to (inbound auth; None: nobody). Read at each use: the
    # runtime sets it after the session is made, before any client message reaches it.
    principal: str | None

    def new_stream(self) -> StreamSlot:
        """A new request stream (room made by eviction), or ``Overloaded``."""
        ...

    def complete(self, stream: StreamSlot, out: list[Command]) -> None:
        """The stream's last message is logged: end it (and what waits on it)."""
        ...

    def stamped(self, stream: StreamSlot, payload: bytes) -> bytes:
        """``payload`` as logged on ``stream`` (with its event id, if configured)."""
        ...

    def drop_stream(self, stream: StreamSlot) -> None:
        """Forget a stream and free its log."""
        ...


class Resumer:
    """The resume side of one session."""

    def __init__(
        self,
        session_id: str,
        epoch: str,
        settings: SessionSettings,
        streams: StreamTable,
        delivery: Delivery,
        ids: IdMap,
        host: StreamHost,
    ) -> None:
        self._session_id = session_id
        self._epoch = epoch
        self._settings = settings
        self._streams = streams
        self._delivery = delivery
        self._ids = ids
        self._host = host
        self.abandoned: set[int] = set()  # numbers of streams given up: never resumable

    def answer_waiting(self, number: int, response: dict[str, Any], now: float) -> None:
        """Log a waiting stream/resume request's answer; its connection arrives after."""
        reply = self._streams.get(number)
        if reply is not None and reply.state is StreamState.LIVE:
            answer = {**response, "id": reply.request_id}
            reply.log.append(jsonrpc.encode(answer), seed.poll_mark(answer))
            reply.state = transition(reply.state, StreamEvent.COMPLETE)
            reply.done_at = now

    def _reply(self, stream: StreamSlot, response: dict[str, Any], out: list[Command]) -> None:
        """Answer a request the proxy serves itself, on its own stream."""
        answer = {**response, "id": stream.request_id}
        stream.log.append(jsonrpc.encode(answer), seed.poll_mark(answer))
        self._host.complete(stream, out)

    # ------------------------------------------------------------------ seed protocol (D2)
    def announce(self, stream: StreamSlot, now: float, out: list[Command]) -> None:
        """``notifications/stream/create`` for a request stream, as a message of it."""
        s = self._settings
        stream.create_at = None
        stream.stream_id = seed.stream_id_for(self._epoch, stream.number)
        if self._streams.journal is not None:
            self._streams.journal.announced.append(stream.number)
        token = resume_token_for(
            s.token_secret, self._session_id, stream.stream_id, principal=self._host.principal
        )
        create = seed.create_notification(
            shape=s.notification_shape,
            stream_id=stream.stream_id,
            token=token,
            request_id=stream.request_id,
            interval_min=s.resume_interval_min,
            interval_max=s.resume_interval_max,
        )
        stream.log.append(self._host.stamped(stream, jsonrpc.encode(create)))
        stream.touched = now
        conn = stream.conn
        self._delivery.flush(stream, now, out)
        if s.detach_after_create and conn is not None and stream.conn == conn:
            # "Fire now, resume later": the POST ends with the announcement.
            self._delivery.detach(conn, now)
            out.append(CloseClient(conn))

    def serve(
        self,
        conn: ConnId,
        msg: Message,
        last_event_id: str | None,
        now: float,
        out: list[Command],
    ) -> None:
        """``stream/poll`` and ``stream/resume``: served here, never forwarded upstream."""
        reply = self._host.new_stream()
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
            self._delivery.attach(reply, conn, now, out)
            error = exc.to_jsonrpc(msg.id)
            self._reply(reply, error, out)
            return
        if target.conn is None and now - target.touched < self._settings.resume_interval_min:
            # Served all the same (refusing would only make the client retry sooner);
            # logged so an operator can see who ignores resumeInterval.min.
            out.append(
                LogNote(
                    "resumed_early",
                    {
                        "stream": target.number,
                        "method": msg.method,
                        "after_seconds": round(now - target.touched, 3),
                    },
                )
            )
        target.touched = now
        if msg.method == seed.POLL:
            self._delivery.attach(reply, conn, now, out)
            done = target.state is StreamState.COMPLETED
            result = seed.poll_result(ref.stream_id, done, rest)
            self._reply(reply, jsonrpc.ok_response(msg.id, result), out)
            return
        out.append(LogNote("stream_resumed", {"stream": target.number, "after": target.acked}))
        self._delivery.take_over(target, now, out)
        self._delivery.continuation[conn] = reply.number
        if target.state is StreamState.COMPLETED:
            self.answer_waiting(reply.number, jsonrpc.ok_response(msg.id, {}), now)
        else:
            target.waiting.append(reply.number)
        self._delivery.attach(target, conn, now, out, start=target.acked)

    def _target(self, ref: seed.StreamRef) -> StreamSlot:
        number = seed.stream_number_of(self._epoch, ref.stream_id)
        if number is None:
            raise ResumeError("no such stream in this session", reason="unknown_stream")
        if not token_matches(
            self._settings.token_secret,
            self._session_id,
            ref.stream_id,
            ref.token,
            principal=self._host.principal,
        ):
            raise ResumeError("the resume token does not match the stream", reason="invalid_token")
        if number in self.abandoned:
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
        if pos.epoch != self._epoch or pos.stream != stream.number:
            raise ResumeError("the last event id names another stream", reason="unknown_position")
        if pos.seq > stream.log.last_seq:
            raise ResumeError(
                "the last event id names a position the stream never reached",
                reason="unknown_position",
            )
        stream.log.acknowledge(pos.seq)

    def abandon(self, stream: StreamSlot, now: float, out: list[Command]) -> None:
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
        abandoned = ResumeError("the stream was abandoned", reason="abandoned").to_jsonrpc()
        for number in stream.waiting:
            self.answer_waiting(number, abandoned, now)
        self._host.drop_stream(stream)
        self.abandoned.add(stream.number)
        out.append(LogNote("stream_abandoned", {"stream": stream.number}))

    # ------------------------------------------------------------------ resume by GET (D1)
    def resume_by_get(
        self, ev: ClientGet, last_event_id: str, now: float, out: list[Command]
    ) -> None:
        """2025-11-25 transports §Resumability: replay after ``Last-Event-ID``, then live."""
        pos = parse_event_id(last_event_id)
        if pos.epoch != self._epoch:
            raise ResumeError("Last-Event-ID was issued by another session", reason="wrong_session")
        found = self._streams.get(pos.stream)
        if pos.stream in self.abandoned:
            raise ResumeError(
                "the stream was abandoned: nobody resumed it within resumeInterval.max",
                reason="abandoned",
            )
        if found is None or found.state is StreamState.EXPIRED:
            raise ResumeError(
                "the stream Last-Event-ID names has expired or never existed",
                reason="unknown_stream",
            )
        log = found.log
        # Before any effect: the replay must be whole.
        check_position(
            pos.seq, first_kept=log.first_kept_seq, last=log.last_seq, held_in=HeldIn.BUFFER
        )
        # A position the stream reached is acknowledged even when nothing is left to give.
        log.acknowledge(pos.seq)
        check_unfinished(
            pos.seq,
            last=log.last_seq,
            completed=found.state is StreamState.COMPLETED,
            standalone=found.number == STANDALONE,
        )
        self._delivery.take_over(found, now, out)
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
        self._delivery.attach(found, ev.conn, now, out, start=pos.seq)
