"""Streams served from the store, for sessions this process does not hold.

After a restart (sqlite) the session that made a stream is gone, yet its stream is in the
store until its retention ends. This serves it:

- ``GET`` + ``Last-Event-ID`` with the stream's session id: the events after that id
  with their original ids, then (if the stream is still live somewhere) its live tail;
- ``stream/poll`` and ``stream/resume`` (the seed's protocol) naming a stream of another
  session, from a session of this process (a client that re-initialized): checked
  against the resume token, which is bound to the stream's own session and principal.

Inbound authentication: a stream is served only to the principal its session belongs to
(the record's ``principal``; None when authentication was off), read from the request
(:func:`~proxy.downstream.auth.principal_of`), and only at the path of the server its
session was made at (the record's ``server``; :func:`~proxy.core.stream_access.may_read`).
A stream of another principal or server is refused exactly as a stream that does not
exist (404, ``unknown_stream``), before anything else is looked at: nothing tells
"exists, but not yours" from "no such stream".

The errors are the core's: 404 for a session id the stream does not belong to,
``unknown_stream`` / ``history_truncated`` / ``unknown_position`` otherwise. Nothing here
writes to the store; a handler owns its tail (:mod:`proxy.store.log_tail`) and ends it
when its client goes. A store that does not answer is waited for a bounded time, then the
request is refused with 503 ``store_unavailable`` (:mod:`proxy.store.unavailable`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import operator
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from proxy.config_sections import SseConfig
from proxy.core import jsonrpc, lone_answer, seed
from proxy.core.errors import ResumeError, SessionNotFound, StoreUnavailable
from proxy.core.eventid import event_id_prefix, format_event_id, parse_event_id
from proxy.core.eventrun import EventRun, in_chunks
from proxy.core.jsonrpc import Message
from proxy.core.protocol import SESSION_HEADER
from proxy.core.resume_rules import HeldIn, check_resume
from proxy.core.session_state import STANDALONE
from proxy.core.sse import encode_event
from proxy.core.stream_access import may_read
from proxy.core.tokens import token_matches
from proxy.downstream.auth import principal_of
from proxy.servers import Server
from proxy.sse_writer import SseWriter
from proxy.standalone_seat import StandaloneHold
from proxy.store.base import (
    COMPLETED,
    Entry,
    Store,
    StoreError,
    StreamRecord,
    check_read,
    read_to_end,
)
from proxy.store.log_tail import END, LogTail, Tails, ends_tail
from proxy.store.unavailable import patiently

log = structlog.get_logger("proxy.stored")

REPLAY_CHUNK = 1000  # entries read (and written) at a time


@dataclass(frozen=True)
class JsonHold:
    """A lone request's large answer as ``application/json``, as the holder sends it
    (:mod:`proxy.core.lone_answer`): how long the response headers wait for it
    (``sse.json_answer_window_ms``) and its least size (``sse.json_answer_min_bytes``)."""

    window_seconds: float
    min_bytes: int

    @staticmethod
    def of(sse: SseConfig) -> JsonHold | None:
        """The hold ``sse`` configures; None (SSE at once) for a window of 0."""
        window = sse.json_answer_window_ms
        return JsonHold(window / 1000, sse.json_answer_min_bytes) if window > 0 else None


class StoredStreams:
    """Serves what the store holds of streams whose session is not in this process."""

    def __init__(
        self,
        store: Store,
        token_secret: bytes,
        server: Server,
        *,
        sole_server: bool,
        tails: Tails | None = None,
    ) -> None:
        self.store = store
        self.tails = tails  # the process's (ended when it stops)
        self._secret = token_secret
        self._settings = server  # its config is read at each response: a reload replaces it
        self.server = server.name  # the server whose path this serves
        self._sole_server = sole_server  # the proxy fronts no other

    def readable(self, record: StreamRecord, principal: str | None) -> bool:
        """Whether the request's principal may read ``record``'s stream at this path."""
        return may_read(
            record.principal, record.server, principal, self.server, sole_server=self._sole_server
        )

    @property
    def keepalive(self) -> float:
        """``sse.keepalive_seconds`` as configured now (the next response follows a reload)."""
        return self._settings.config.sse.keepalive_seconds

    @property
    def enabled(self) -> bool:
        return self.store.durable

    # ------------------------------------------------------------------ GET
    async def get(
        self, request: web.Request, session_id: str, last_event_id: str
    ) -> web.StreamResponse:
        pos = parse_event_id(last_event_id)
        key = f"{pos.epoch}.{pos.stream}"
        now = time.time()
        # The record and the first entries in one read; a position check_resume lets
        # through is one the snapshot read entries for (it checks that and more).
        record, entries = await self._snapshot(key, pos.seq, now)
        if (
            record is None
            or record.session_id != session_id
            or not self.readable(record, principal_of(request))
        ):
            raise SessionNotFound("Session not found")
        check_resume(
            pos.seq,
            first_kept=record.first_seq,
            last=record.last_seq,
            held_in=HeldIn.STORE,
            completed=record.state == COMPLETED,
            standalone=pos.stream == STANDALONE,
        )
        log.info("stored_stream_resumed", stream=key, after=pos.seq, state=record.state)
        return await self._serve(request, session_id, record, pos.seq, entries, None)

    async def follow(
        self,
        request: web.Request,
        session_id: str,
        key: str,
        after: int,
        opening: bytes = b"",
        hold: JsonHold | None = None,
        listen: StandaloneHold | None = None,
    ) -> web.StreamResponse:
        """Stream ``key`` after ``after`` until it completes (a request another replica
        runs: the events reach this replica through the store). ``opening``: the priming
        event the holder gave the stream, written before anything else. ``hold``: first
        wait for a lone large answer, sent as ``application/json`` instead, as the holder
        would (:meth:`_hold`); else the stream goes on from the same tail. ``listen``: a
        ``GET``'s hold of the standalone stream: each event is written under it, and the
        response ends once it is stopped (a newer listener takes the stream).

        A primed stream whose first read fails (the store restarting) is answered with
        its priming event alone: the holder runs the request and committed the stream
        before replying, so the client is better off holding an id to resume from (on
        any replica, after ``retry:``) than an error for a call that goes on."""
        now = time.time()
        try:
            # The record and the first entries in one read (the holder names the stream
            # and where its client starts); the entries are used once the record allows.
            record, entries = await self._snapshot(key, after, now)
            if record is None or not self.readable(record, principal_of(request)):
                raise ResumeError(
                    "the stream has expired or never existed", reason="unknown_stream"
                )
            check_read(record, after)
        except (StoreError, StoreUnavailable) as exc:
            if not opening:
                raise
            log.warning("stored_stream_primed_only", stream=key, error=str(exc))
            return await self._writer(request, session_id).end(opening)
        if hold is None:
            return await self._serve(
                request, session_id, record, after, entries, None, opening, listen=listen
            )
        tail = self._tail(record, entries[-1].seq if entries else after)
        try:
            answer = await self._hold(record, entries, tail, hold)
        except BaseException:
            await tail.end()
            raise
        if answer is not None:
            await tail.end()
            log.debug("answered_as_json", stream=key, size=len(answer))
            headers = {SESSION_HEADER: session_id}
            return web.Response(body=answer, content_type="application/json", headers=headers)
        return await self._serve(request, session_id, record, after, entries, None, opening, tail)

    async def _hold(
        self, record: StreamRecord, entries: list[Entry], tail: LogTail, hold: JsonHold
    ) -> bytes | None:
        """Up to ``hold.window_seconds``, take what ``tail`` reads into ``entries``: the
        lone answer's bytes if the stream is that answer alone and it is large enough,
        else None (``entries`` holds every entry taken; the end of the stream, if taken,
        is put back for the SSE response). The same rule as the holder's
        (:func:`proxy.core.lone_answer.verdict`)."""
        deadline = asyncio.get_running_loop().time() + hold.window_seconds
        while True:
            frames = [self._frames(record, [entry]) for entry in entries]
            # A request's stream ends with its answer: an answer that came alone is the
            # whole stream, whether or not the tail has read the end yet.
            verdict = lone_answer.verdict(frames, True, min_bytes=hold.min_bytes)
            if isinstance(verdict, bytes):
                return verdict
            if lone_answer.verdict(frames, False, min_bytes=hold.min_bytes) is lone_answer.SSE:
                return None  # a message that is not a large lone answer
            try:
                async with asyncio.timeout_at(deadline):
                    item = await tail.queue.get()
            except TimeoutError:
                return None
            if not isinstance(item, list):
                tail.queue.put_nowait(item)  # the last item there will be: still the last
                return None
            entries.extend(item)

    # ------------------------------------------------------------------ stream/poll, stream/resume
    @staticmethod
    def foreign(messages: list[Message], epoch: str) -> Message | None:
        """A lone ``stream/poll`` / ``stream/resume`` naming another session's stream."""
        if len(messages) != 1 or messages[0].method not in (seed.POLL, seed.RESUME):
            return None
        stream_id = messages[0].params.get("streamId")
        if not isinstance(stream_id, str) or "." not in stream_id:
            return None
        return messages[0] if stream_id.rpartition(".")[0] != epoch else None

    async def post(
        self, request: web.Request, session_id: str, msg: Message, header_id: str | None
    ) -> web.StreamResponse:
        try:
            record, after = await self.target(msg, header_id, principal_of(request))
            now = time.time()
            if msg.method == seed.POLL:
                rest = await patiently(
                    self.store, "read a stream", lambda: self.store.summary(record.key, after, now)
                )
                done = record.state == COMPLETED
                result = seed.poll_result(record.key, done, rest)
                return await self._answer(request, session_id, jsonrpc.ok_response(msg.id, result))
            entries = await self._read(record.key, after, now)
        except ResumeError as exc:
            return await self._answer(request, session_id, exc.to_jsonrpc(msg.id))
        log.info("stored_stream_resumed", stream=record.key, after=after, state=record.state)
        reply = jsonrpc.ok_response(msg.id, {})
        return await self._serve(request, session_id, record, after, entries, reply)

    async def target(
        self, msg: Message, header_id: str | None, principal: str | None
    ) -> tuple[StreamRecord, int]:
        """The stream a ``stream/poll`` / ``stream/resume`` names and the position to serve
        it from, checked (token, principal, server, position); ``ResumeError`` if it may
        not be."""
        ref = seed.read_ref(msg.params)
        record = await self._record(ref.stream_id, time.time())
        if record is None or not self.readable(record, principal):
            # Another principal's (or server's) stream is refused as one that does not
            # exist: even its real token (bound to the principal too) tells nothing more.
            raise ResumeError("the stream has expired or never existed", reason="unknown_stream")
        if not token_matches(
            self._secret, record.session_id, ref.stream_id, ref.token, principal=principal
        ):
            raise ResumeError("the resume token does not match the stream", reason="invalid_token")
        after = 0
        for given in (header_id, ref.last_event_id):
            if given is None:
                continue
            pos = parse_event_id(given)
            if f"{pos.epoch}.{pos.stream}" != record.key or pos.seq > record.last_seq:
                raise ResumeError(
                    "the last event id names another stream or position",
                    reason="unknown_position",
                )
            after = max(after, pos.seq)
        return record, after

    # ------------------------------------------------------------------ store reads
    async def _record(self, key: str, now: float) -> StreamRecord | None:
        return await patiently(
            self.store, "read a stream record", lambda: self.store.get_stream(key, now)
        )

    async def _snapshot(
        self, key: str, after: int, now: float
    ) -> tuple[StreamRecord | None, list[Entry]]:
        """The record and the first chunk after ``after``, in one read (Store.snapshot)."""
        return await patiently(
            self.store,
            "read a stream",
            lambda: self.store.snapshot(key, after, now, REPLAY_CHUNK),
        )

    async def _read(self, key: str, after: int, now: float) -> list[Entry]:
        return await patiently(
            self.store, "read a stream", lambda: self.store.read(key, after, now, REPLAY_CHUNK)
        )

    def _tail(self, record: StreamRecord, after: int) -> LogTail:
        """The log's tail after ``after``, the last entry read; nothing to read when
        ``record``, read before those entries, says the stream ended there (completed:
        its last entry is final)."""
        ended = read_to_end(record, after)
        return LogTail(self.store, record.key, after, self.tails, ended=ended)

    # ------------------------------------------------------------------ writing
    def _writer(self, request: web.Request, session_id: str) -> SseWriter:
        return SseWriter(request, self.keepalive, {SESSION_HEADER: session_id})

    async def _answer(
        self, request: web.Request, session_id: str, message: dict[str, Any]
    ) -> web.StreamResponse:
        writer = self._writer(request, session_id)
        await writer.open()
        return await writer.end(encode_event(jsonrpc.encode(message)))

    async def _serve(
        self,
        request: web.Request,
        session_id: str,
        record: StreamRecord,
        after: int,
        entries: list[Entry],
        reply: dict[str, Any] | None,
        opening: bytes = b"",
        tail: LogTail | None = None,
        listen: StandaloneHold | None = None,
    ) -> web.StreamResponse:
        """``opening`` (a priming event, or nothing), ``entries`` (the first chunk after
        ``after``, read before the response began so that a refusal is still an HTTP
        error), the rest and the live tail until the stream completes, then ``reply`` (a
        ``stream/resume``'s own answer), then the end. Each chunk is written as it is
        read: the first event never waits for the last. ``tail``: the reader of the log
        after ``entries`` already running (a hold's), else one started here before anything
        is written; ended here."""
        writer = self._writer(request, session_id)
        if tail is None:
            # The rest, in chunks as read (a tail of a completed stream ends at its end),
            # read from now on: its first read is on its way while ``entries`` are written.
            tail = self._tail(record, entries[-1].seq if entries else after)
        try:
            await writer.open()
            with contextlib.suppress(ConnectionError):
                if opening or entries:
                    await self._write(
                        writer, [opening, *self._runs(record, [entries])], entries, listen
                    )
                if listen is not None:
                    listen.on_stop(functools.partial(tail.queue.put_nowait, END))
                if await self._follow(writer, record, tail, listen):
                    end = encode_event(jsonrpc.encode(reply)) if reply is not None else b""
                    await writer.end(end)
        finally:
            await tail.end()
        return writer.response

    @staticmethod
    async def _write(
        writer: SseWriter,
        items: Sequence[bytes | EventRun],
        entries: list[Entry],
        listen: StandaloneHold | None,
    ) -> None:
        """Write ``items`` (``entries``' events), under ``listen`` if given: nothing once
        it is stopped, and its position moved past them once written."""
        if listen is None:
            await _write_chunked(writer, items)
            return
        async with listen.lock:
            if not listen.stopped:
                await _write_chunked(writer, items)
                if entries:
                    listen.written = entries[-1].seq

    async def _follow(
        self, writer: SseWriter, record: StreamRecord, tail: LogTail, listen: StandaloneHold | None
    ) -> bool:
        """Write what ``tail`` reads, the stream's live tail (keepalives and liveness
        checks by ``writer``); False when the client went first."""
        while True:
            items = await writer.next_batch(tail.queue, ends_tail)
            if not items:
                return False
            batches = [i for i in items if isinstance(i, list)]
            if any(batches):
                await self._write(
                    writer, self._runs(record, batches), [e for b in batches for e in b], listen
                )
            last = items[-1]
            if isinstance(last, ResumeError):
                # Gone while followed: end the response; the client's next resume
                # gets the explicit error.
                log.info("stored_stream_lost", stream=record.key, reason=last.reason)
                return True
            if last is END or isinstance(last, StoreError):  # (a store that failed: resumed)
                return True

    @staticmethod
    def _frames(record: StreamRecord, entries: list[Entry]) -> bytes:
        epoch, number = record.epoch, record.number
        return b"".join(
            encode_event(e.payload, event_id=format_event_id(epoch, number, e.seq)) for e in entries
        )

    @staticmethod
    def _runs(record: StreamRecord, batches: list[list[Entry]]) -> list[EventRun]:
        """Batches of the log (consecutive entries, as a read or a tail gives them) as runs
        of events, framed when written. A batch whose seqs are its first's and the next
        ones (compared as lists, in C: a replay's 1,000-entry batches) is one run; else it
        is split at each gap (none is expected), entry by entry."""
        prefix = event_id_prefix(record.epoch, record.number)
        runs: list[EventRun] = []
        for entries in batches:
            if not entries:
                continue
            first = entries[0].seq
            if list(map(_seq, entries)) == list(range(first, first + len(entries))):
                runs.append(EventRun(prefix, first, list(map(_payload, entries))))
                continue
            start = 0
            for i in range(1, len(entries) + 1):
                if i == len(entries) or entries[i].seq != entries[i - 1].seq + 1:
                    part = entries[start:i]
                    runs.append(EventRun(prefix, part[0].seq, [e.payload for e in part]))
                    start = i
        return runs


_seq = operator.itemgetter(0)  # an Entry's seq (Entry.seq, as a C call)
_payload = operator.itemgetter(1)  # an Entry's payload


async def _write_chunked(writer: SseWriter, items: Sequence[bytes | EventRun]) -> None:
    """Write ``items`` in chunks of bounded size (:func:`~proxy.core.eventrun.in_chunks`),
    letting the event loop run between them: a long replay never holds it for long."""
    first = True
    for chunk in in_chunks(item for item in items if item):
        if not first:
            await asyncio.sleep(0)
        first = False
        await writer.write(chunk)
