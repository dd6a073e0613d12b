"""One fast POST (:mod:`proxy.downstream.fast_post`) once admitted: the session fed,
then the JSON-answer hold by callbacks, not a task (:meth:`ConnQueue.listen`); its
answer written whole, its stream written here (:mod:`proxy.downstream.fast_stream`), or
the request handed off to aiohttp's handler (a JSON answer, a refusal, ``202``, fenced).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Protocol

import structlog
from aiohttp import web

from proxy.client_conn import Item
from proxy.core import jsonrpc
from proxy.core.errors import ProxyError
from proxy.core.events import ClientPost
from proxy.core.protocol import SESSION_HEADER
from proxy.downstream.conn_response import HOLD_ON, ConnResponder, Hold, Taken, whole_body
from proxy.downstream.fast_stream import TransportSse, Wire
from proxy.downstream.handoff import Handoff
from proxy.downstream.whole_response import sse_head, write_whole_to

if TYPE_CHECKING:
    from proxy.metrics import Metrics
    from proxy.runtime import ClientConn, SessionRunner

log = structlog.get_logger("proxy.http")


class Endpoint(Protocol):
    """What a call needs of its :class:`~proxy.downstream.http.StreamableHttp` (named
    here, not imported: that module leads to this one)."""

    @property
    def responder(self) -> ConnResponder: ...

    @property
    def metrics(self) -> Metrics: ...


class FastCall:
    """One fast POST: the session fed, then the hold (``sse.json_answer_window_ms``) by
    callbacks, not a task: the answer written whole, or the request handed off to
    aiohttp. Steps run in the request's log context."""

    __slots__ = (
        "_done",
        "_hold",
        "_stream_task",
        "conn",
        "context",
        "endpoint",
        "frames",
        "handoffs",
        "header_id",
        "held",
        "messages",
        "method",
        "runner",
        "started",
        "transport",
        "wire",
    )

    def __init__(
        self,
        handoffs: dict[object, Handoff],
        endpoint: Endpoint,
        transport: asyncio.Transport,
        context: contextvars.Context,
        runner: SessionRunner,
        messages: list[jsonrpc.Message],
        header_id: str | None,
        method: str,
    ) -> None:
        self.handoffs = handoffs  # the app's, by transport, until aiohttp takes each
        self.endpoint = endpoint
        self.transport = transport
        self.context = context
        self.runner = runner
        self.messages = messages
        self.header_id = header_id
        self.method = method
        self.started = 0.0
        self.conn: ClientConn | None = None
        self.held: list[Item] = []
        self.frames: list[bytes] = []
        self._hold: Hold | None = None
        self._done: Callable[[bool], None] = _ignore
        self.wire: Wire | None = None
        self._stream_task: asyncio.Task[None] | None = None

    def start(self, done: Callable[[bool], None], wire: Wire | None = None) -> None:
        """Feed the session; ``done`` is called once the call is over: True, answered;
        False, handed off (give aiohttp the request's bytes). Maybe before this returns.
        ``wire``: the connection, for a stream written here (without it, handed off)."""
        self._done = done
        self.wire = wire
        self.context.run(self._feed)

    def lost(self) -> None:
        """The connection is lost: a stream being written notices at once, not at its
        next liveness check (the call goes on; its client may resume the stream)."""
        if self._stream_task is not None and self.conn is not None:
            self.conn.queue.wake()

    def _feed(self) -> None:
        self.started = time.monotonic()
        runner = self.runner
        messages = self.messages
        conn = runner.open_conn("sse")
        try:
            runner.feed(ClientPost(conn.id, messages, False, self.header_id))
        except ProxyError as exc:
            runner.conn_gone(conn)
            if exc.request_id is None:  # (JSON-RPC 2.0 §5: a lone request's refusal)
                exc.request_id = messages[0].id
            self._hand_off(_raise(exc), _ignore)
            return
        except BaseException:
            runner.conn_gone(conn)
            raise
        if conn.outcome != "sse":
            runner.conn_gone(conn)
            accepted = web.Response(status=202, headers={SESSION_HEADER: runner.session_id})
            self._hand_off(_return(accepted), _ignore)
            return
        self.conn = conn
        self._step()

    def _woken(self) -> None:
        self.context.run(self._step)

    def _step(self) -> None:
        conn = self.conn
        assert conn is not None
        try:
            hold = self._hold
            if hold is not None and hold.expired:
                return self._after_hold(None)
            if not conn.queue.empty():
                verdict = self.endpoint.responder.take_held(conn, self.held, self.frames)
                if verdict is not HOLD_ON:
                    return self._after_hold(verdict)
            if hold is None:  # (the window runs from the first wait, as in ``hold``)
                clock = self.endpoint.responder.holds
                if clock is None:  # (a reload ended the holds: as ``respond`` would)
                    return self._after_hold(None)
                self._hold = clock.begin(conn.queue)
            conn.queue.listen(self._woken)
            return None
        except BaseException:
            self._end_hold()
            self.runner.conn_gone(conn)
            self.transport.close()  # nobody answers it: the client must not wait
            self._done(True)
            raise

    def _end_hold(self) -> None:
        hold = self._hold
        if hold is not None:
            self._hold = None
            clock = self.endpoint.responder.holds
            if clock is not None:
                clock.finish(hold)
            else:
                hold.done = True

    def _after_hold(self, answer: bytes | None) -> None:
        self._end_hold()
        conn = self.conn
        assert conn is not None
        runner = self.runner
        whole = whole_body(self.held, self.frames) if answer is None else None
        if whole is None and answer is None and self.wire is not None:
            task = asyncio.get_running_loop().create_task(self._stream(self.wire, conn.ticket))
            self._stream_task = task
            task.add_done_callback(_retrieved)
            return None
        if whole is None:  # a JSON answer (or no wire for a stream): aiohttp's path writes it
            taken: Taken = (answer, self.held, self.frames, conn.ticket)
            responder = self.endpoint.responder

            def finish(request: web.Request) -> Awaitable[web.StreamResponse]:
                return responder.respond(request, runner, conn, taken=taken)

            return self._hand_off(finish, lambda: runner.conn_gone(conn))
        gate = conn.gate
        if gate is not None and not conn.fenced and not gate.land_now(conn.ticket, conn.lane):
            # Written from the commit's landing (the wire never runs ahead of the store),
            # not by a task waiting for it: no wake-up turn, task step or done callback.
            gate.when_landed(conn.ticket, conn.lane, partial(self._landed, whole))
            return None
        return self._write(whole)

    async def _stream(self, wire: Wire, held_ticket: int) -> None:
        """Write the stream the hold began (its held events first, once their batch is
        stored) until the core ends it or the client goes; the call goes on either way."""
        conn = self.conn
        assert conn is not None
        runner = self.runner
        responder = self.endpoint.responder
        keepalive = responder.config.sse.keepalive_seconds
        writer = TransportSse(self.transport, wire, sse_head(runner.session_id), keepalive)
        ended = False
        wire.streaming()
        try:
            await responder.write_stream(writer, conn, self.held, held_ticket)
            ended = True
        except (ConnectionError, RuntimeError) as exc:
            # Nothing is lost: every event is in the stream's log and a GET with
            # Last-Event-ID resumes it. (Fenced: the response ends, as aiohttp's would.)
            log.debug("client_gone", session=runner.session_id[:8], conn=conn.id, error=repr(exc))
            await writer.end()
            ended = True
        finally:
            self._stream_task = None
            runner.conn_gone(conn)
            if not ended:  # (cancelled, or a fault: the response cannot be finished)
                self.transport.close()
            wire.idle()  # from the end of the response on
            seconds = time.monotonic() - self.started
            self.endpoint.metrics.request_seconds(self.method, "legacy").observe(seconds)
            self._done(True)

    def _landed(self, whole: bytes, stored: bool) -> None:
        """The answer's batch is in the store (:meth:`Persister.when_landed`): write it,
        in the request's log context; fenced meanwhile, nothing of it (:meth:`_write`).
        Not ``stored``: the persister closed first; the call ends unanswered."""
        self.context.run(self._write_landed, whole, stored)

    def _write_landed(self, whole: bytes, stored: bool) -> None:
        if not stored:
            conn = self.conn
            assert conn is not None
            self.runner.conn_gone(conn)
            self._done(True)
            return
        try:
            self._write(whole)
        except Exception as exc:  # (as a task's fault would be: logged, not raised)
            log.debug("fast_post_ended", error=repr(exc))

    def _write(self, whole: bytes) -> None:
        conn = self.conn
        assert conn is not None
        runner = self.runner
        if conn.fenced:
            return self._fenced()
        try:
            write_whole_to(self.transport, sse_head(runner.session_id), whole)
        except (ConnectionError, RuntimeError) as exc:
            log.debug("client_gone", session=runner.session_id[:8], conn=conn.id, error=repr(exc))
        finally:
            runner.conn_gone(conn)
        seconds = time.monotonic() - self.started
        self.endpoint.metrics.request_seconds(self.method, "legacy").observe(seconds)
        self._done(True)

    def _fenced(self) -> None:
        """The session was lost to another replica while the answer waited for the store:
        nothing of it is written, and the response is the empty one ``respond`` gives."""
        conn = self.conn
        assert conn is not None
        runner = self.runner
        log.debug("client_gone", session=runner.session_id[:8], conn=conn.id, error="fenced")
        runner.conn_gone(conn)
        gone = web.Response(status=200, headers={SESSION_HEADER: runner.session_id})
        self._hand_off(_return(gone), _ignore)

    def _hand_off(
        self,
        finish: Callable[[web.Request], Awaitable[web.StreamResponse]],
        abandon: Callable[[], None],
    ) -> None:
        """Leave the request to aiohttp's handler (its bytes given to it), or, the connection
        closing, ``abandon`` it: no request will come to take it."""
        if self.transport.is_closing():
            abandon()
            self._done(True)  # (nothing to answer)
            return
        self.handoffs[self.transport] = Handoff(finish, abandon, self.method, self.started)
        self._done(False)


def _ignore(*_: object) -> None:
    return None


def _retrieved(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("fast_post_ended", error=repr(task.exception()))


def _raise(exc: ProxyError) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def finish(request: web.Request) -> web.StreamResponse:
        raise exc

    return finish


def _return(
    response: web.StreamResponse,
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def finish(request: web.Request) -> web.StreamResponse:
        return response

    return finish
