"""A legacy connection written out as one HTTP response: ``/mcp``'s POST and GET answers.

:class:`ConnResponder` writes what the core queues for a :class:`~proxy.client_conn.ClientConn`
as SSE through the one :class:`~proxy.sse_writer.SseWriter`, until the core ends it (a
``CloseMarker``). A POST that carries one request first holds its headers for
``sse.json_answer_window_ms`` (:mod:`proxy.core.lone_answer`): a lone large answer goes
out as ``application/json``. Every POST holds, so the holds share one timer
(:class:`HoldClock`), not one each.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections import deque
from typing import Protocol, cast

import structlog
from aiohttp import web

from proxy.client_conn import ClientConn, CloseMarker, ConnQueue, Frame, Item
from proxy.config import Config
from proxy.core import lone_answer
from proxy.core.eventrun import CHUNK_BYTES, EventRun, in_chunks
from proxy.core.protocol import SESSION_HEADER
from proxy.core.sse import LIVENESS_SECONDS, encode_retry
from proxy.downstream.whole_response import can_write_whole, sse_head, write_whole
from proxy.metrics import Metrics
from proxy.runtime import SessionRunner
from proxy.sse_writer import SseWriter

log = structlog.get_logger("proxy.http")


class HoldOn(enum.Enum):
    HOLD_ON = "hold on"


HOLD_ON = HoldOn.HOLD_ON  # a hold goes on: nothing decided yet


class StreamOut(Protocol):
    """Where :meth:`ConnResponder.write_stream` writes a stream: an :class:`SseWriter`
    (aiohttp's response), or a fast POST's own (:mod:`proxy.downstream.fast_stream`)."""

    @property
    def gone(self) -> bool:
        """Whether the client hung up."""
        ...

    def due(self) -> float:
        """Seconds until a keepalive comment is due (≤ 0: due now)."""
        ...

    async def open(self) -> object: ...

    async def write(self, data: bytes) -> None: ...

    async def write_keepalive(self) -> None: ...

    async def end(self, data: bytes = b"") -> object: ...


# What a hold gave: the lone answer's bytes (or None), the items taken, their frames.
Taken = tuple[bytes | None, list[Item], list[bytes], int]


class Hold:
    """One POST holding its headers: the queue it waits on, until when, how it ended."""

    __slots__ = ("deadline", "done", "expired", "queue")

    def __init__(self, queue: ConnQueue[Item], deadline: float) -> None:
        self.queue = queue
        self.deadline = deadline
        self.done = False
        self.expired = False


class HoldClock:
    """The deadlines of the POSTs holding their headers. Every hold has the same window,
    so they end in the order they began: a FIFO, and one timer for the oldest unfinished
    one (re-armed when it fires), not a timer armed and cancelled per POST."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._holds: deque[Hold] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def begin(self, queue: ConnQueue[Item]) -> Hold:
        """A hold of ``queue`` from now: woken (``expired``) when its window has passed."""
        loop = asyncio.get_running_loop()
        hold = Hold(queue, loop.time() + self.window)
        self._holds.append(hold)
        if self._timer is None:
            self._timer = loop.call_at(hold.deadline, self._expire)
        return hold

    def finish(self, hold: Hold) -> None:
        """``hold`` ended (an answer, a stream, or its window): it is no longer woken."""
        hold.done = True
        holds = self._holds
        while holds and holds[0].done:
            holds.popleft()

    def _expire(self) -> None:
        self._timer = None
        holds = self._holds
        loop = asyncio.get_running_loop()
        now = loop.time()
        while holds and (holds[0].done or holds[0].deadline <= now):
            hold = holds.popleft()
            if not hold.done:
                hold.done = hold.expired = True
                hold.queue.wake()
        if holds:
            self._timer = loop.call_at(holds[0].deadline, self._expire)


class ConnResponder:
    """Writes legacy connections out as HTTP responses, for one endpoint."""

    def __init__(self, config: Config, metrics: Metrics) -> None:
        self.metrics = metrics
        self.holds: HoldClock | None = None
        self.retarget(config)

    def retarget(self, config: Config) -> None:
        """Follow ``config`` from the next response on (a reload: ``sse.*`` applies at
        once). Holds under way keep their clock and end by it."""
        self.config = config
        window = config.sse.json_answer_window_ms / 1000
        if window <= 0:
            self.holds = None
        elif self.holds is None or self.holds.window != window:
            self.holds = HoldClock(window)

    async def respond(
        self,
        request: web.Request,
        runner: SessionRunner,
        conn: ClientConn,
        hold: bool = False,
        taken: Taken | None = None,
    ) -> web.StreamResponse:
        """Write ``conn``'s queue out as SSE until the core ends it (a ``CloseMarker``).

        ``hold``: first wait up to ``sse.json_answer_window_ms`` for a lone large answer,
        sent as ``application/json`` instead (:mod:`proxy.core.lone_answer`). ``taken``:
        what such a hold already gave (:meth:`hold`'s answer, items and frames: a fast POST
        handed off, :mod:`proxy.downstream.fast_post`)."""
        headers = {SESSION_HEADER: runner.session_id}
        writer: SseWriter | None = None
        try:
            held: list[Item] = []
            # The batch the held items wait for: more may be queued (and wait for a later
            # batch) before this writer runs; the held ones go as soon as theirs landed.
            held_ticket: int | None = None
            holds = self.holds
            if taken is not None or (hold and holds is not None):
                frames: list[bytes] = []  # those of ``held``, framed
                if taken is not None:
                    answer, held, frames, held_ticket = taken
                else:
                    assert holds is not None
                    answer = await self.hold(conn, held, frames, holds)
                    held_ticket = conn.ticket
                if answer is not None:
                    await conn.stored()  # the wire never runs ahead of the store
                    log.debug("answered_as_json", session=runner.session_id[:8], size=len(answer))
                    return web.Response(
                        body=answer, content_type="application/json", headers=headers
                    )
                whole = whole_body(held, frames)
                if whole is not None and can_write_whole(request):
                    await conn.stored()  # the wire never runs ahead of the store
                    return write_whole(request, sse_head(runner.session_id), whole)
            writer = SseWriter(
                request, self.config.sse.keepalive_seconds, {"Connection": "keep-alive", **headers}
            )
            await self.write_stream(writer, conn, held, held_ticket)
        except (ConnectionError, asyncio.CancelledError, RuntimeError) as exc:
            # The client went away. Nothing is lost: every event is in the stream's log
            # and a GET with Last-Event-ID resumes it.
            log.debug("client_gone", session=runner.session_id[:8], conn=conn.id, error=repr(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            runner.conn_gone(conn)
        if writer is None:  # (gone before anything was written)
            return web.Response(status=200, headers=headers)
        return writer.response

    async def write_stream(
        self, writer: StreamOut, conn: ClientConn, held: list[Item], held_ticket: int | None
    ) -> None:
        """Write ``conn``'s queue to ``writer`` until the core ends it (a ``CloseMarker``)
        or the client is gone. ``held``: what a hold took first (counted as written when
        taken), which waits only for batch ``held_ticket``. Raises ``ConnectionError`` (or
        aiohttp's ``RuntimeError``) when the client went or the session was fenced."""
        queue = conn.queue
        if not held and queue.empty():
            await writer.open()  # headers now; else they go with the first events
        while True:
            items = held or await _next_batch(writer, queue)
            if not items:  # the client hung up
                break
            close = items[-1] if isinstance(items[-1], CloseMarker) else None
            if close is not None:
                items.pop()
            counted = bool(held)  # (held items were counted as written when taken)
            upto = held_ticket if held else None
            held = []
            # A replay is framed and written in chunks of bounded size, the event loop
            # free between them; the last chunk goes on as one batch always did.
            last = b""
            for chunk in in_chunks(_sse_items(items)):
                if last:
                    await _write_chunk(writer, conn, last, counted)
                last = chunk
            if not counted:
                conn.written(len(last))
            if conn.replay_clock is not None and not conn.replay_left:
                self.metrics.replay_seconds.observe(time.monotonic() - conn.replay_clock)
                conn.replay_clock = None
            if close is not None and close.retry_ms is not None:
                last += encode_retry(close.retry_ms)
            await conn.stored(upto)  # the wire never runs ahead of the store
            if close is not None:  # the last events and the end in one write
                await writer.end(last)
                break
            if last:
                await writer.write(last)

    async def hold(
        self, conn: ClientConn, held: list[Item], frames: list[bytes], clock: HoldClock
    ) -> bytes | None:
        """Hold the response headers for ``sse.json_answer_window_ms``, taking what the
        core queues into ``held``: the lone answer's bytes if it came alone in time and
        is large enough to go as JSON, else None (stream ``held``, framed in ``frames``,
        as SSE).

        What is taken counts as written at once, so a large answer behind the unsent
        priming event is no slow reader (``sse.max_queued_bytes``); the hold ends at the
        first message, so it keeps only what the core queued at once, before it."""
        queue = conn.queue
        waiting: Hold | None = None
        try:
            while True:
                if queue.empty():
                    if waiting is None:
                        waiting = clock.begin(queue)
                    await queue.wait()
                    if waiting.expired:
                        return None
                    continue
                verdict = self.take_held(conn, held, frames)
                if verdict is not HOLD_ON:
                    return verdict
        finally:
            if waiting is not None:
                clock.finish(waiting)

    def take_held(
        self, conn: ClientConn, held: list[Item], frames: list[bytes]
    ) -> bytes | HoldOn | None:
        """One step of :meth:`hold`, with something queued: take it; the hold's verdict
        (the answer's bytes, None: as SSE), or :data:`HOLD_ON` (hold on for more)."""
        taken = conn.queue.take()  # (a CloseMarker is always the last item queued)
        held.extend(taken)
        size = 0
        for item in taken:
            if not isinstance(item, CloseMarker):
                for frame in _sse_frames(item):
                    frames.append(frame)
                    size += len(frame)
        conn.written(size)
        close = held[-1] if isinstance(held[-1], CloseMarker) else None
        ended = close is not None and close.retry_ms is None
        min_bytes = self.config.sse.json_answer_min_bytes
        verdict = lone_answer.verdict(frames, ended, min_bytes=min_bytes)
        if isinstance(verdict, bytes):
            return verdict
        if verdict is lone_answer.SSE or close is not None:
            return None
        return HOLD_ON


def whole_body(held: list[Item], frames: list[bytes]) -> bytes | None:
    """The whole body of a response the hold ended with (its events, then the ``retry:``
    of a close that asks for a reconnect), if it fits one write; else None."""
    if not held or not isinstance(held[-1], CloseMarker):
        return None  # the stream goes on
    body = b"".join(frames)
    retry_ms = held[-1].retry_ms
    if retry_ms is not None:
        body += encode_retry(retry_ms)
    return body if len(body) <= CHUNK_BYTES else None  # (a larger one: in chunks, as ever)


async def _next_batch(writer: StreamOut, queue: ConnQueue[Item]) -> list[Item]:
    """Every item queued now (a ``CloseMarker`` last, if any), waiting for the first while
    keeping the stream alive as :meth:`SseWriter.next_batch` does (keepalive comments,
    liveness checks every ``LIVENESS_SECONDS``). An empty list: the client is gone."""
    while queue.empty():
        loop = asyncio.get_running_loop()
        timer = loop.call_later(min(LIVENESS_SECONDS, max(0.0, writer.due())), queue.wake)
        try:
            await queue.wait()
        finally:
            timer.cancel()
        if queue.empty():
            if writer.gone:
                return []
            if writer.due() <= 0:
                await writer.write_keepalive()
    return queue.take()


async def _write_chunk(writer: StreamOut, conn: ClientConn, data: bytes, counted: bool) -> None:
    """One chunk of a long batch (a replay), then a turn of the event loop for the other
    sessions: a replay never holds it longer than one chunk's framing."""
    if not counted:
        conn.written(len(data))
    await conn.stored()  # the wire never runs ahead of the store
    await writer.write(data)
    await asyncio.sleep(0)


def _sse_items(items: list[Item]) -> list[bytes | EventRun]:
    """A batch of framing "sse" (its CloseMarker taken off): frames and runs only."""
    return cast("list[bytes | EventRun]", items)


def _sse_frames(item: Item) -> list[bytes]:
    """The frame of each event of ``item`` (framing "sse"): a run's events one by one, so
    that the lone answer's verdict sees each (a held response: the rare case)."""
    if isinstance(item, EventRun):
        return [item.encode(i, i + 1) for i in range(len(item))]
    assert not isinstance(item, Frame | CloseMarker)
    return [item]
