"""Following the SSE streams of a shim session: each request's response stream, and the
session's standalone ``GET`` stream, each resumed after every drop.

MCP 2025-11-25 basic/transports §Resumability and Redelivery: after a disconnection
(network failure or server-initiated close) the client resumes with ``GET`` and
``Last-Event-ID`` of the last event it received on that stream; the server replays what
followed, on that stream only. A server-initiated close is preceded by ``retry:``, which
the client waits before reconnecting (§Sending Messages to the Server, item 6).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from proxy.backoff import Backoff
from proxy.core.protocol import SERVER_ERROR, SESSION_NOT_FOUND
from proxy.shim.http import GaveUp, Lost, ProxyLink, Refused, SseReader
from proxy.shim.stdio import HostPipe

log = structlog.get_logger("proxy.shim")

# JSON-RPC codes of the errors the shim itself answers with (data.reason names the case).
SESSION_EXPIRED_CODE = SESSION_NOT_FOUND  # as the proxy's own 404 session_not_found
UNAVAILABLE_CODE = SERVER_ERROR
SESSION_EXPIRED = "session expired at the proxy"


@dataclass
class Call:
    """A request sent to the proxy whose answer has not reached the host yet."""

    id: Any
    method: str
    session_id: str | None = None  # the proxy session it was sent in
    internal: bool = False  # the shim's own replayed initialize: the answer is kept here
    cancelled: bool = False  # the host sent notifications/cancelled for it
    answer: dict[str, Any] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def answered(self) -> bool:
        return self.answer is not None


@dataclass
class Cursor:
    """Where one stream stands: the last event id received and the server's ``retry``."""

    backoff: Backoff = field(default_factory=Backoff)
    last_id: str | None = None
    retry_ms: int | None = None

    def wait_after(self, clean: bool) -> float | None:
        """The delay before resuming: ``retry`` after a server's close, else backoff."""
        return self.retry_ms / 1000 if clean and self.retry_ms is not None else None


class StreamOwner(Protocol):
    """What following a stream needs of its shim session (``ShimSession`` is one)."""

    pipe: HostPipe
    link: ProxyLink
    budget: float

    def from_proxy(self, data: str) -> None: ...

    def answer_error(self, call: Call, code: int, message: str, reason: str) -> None: ...

    def session_gone(self, session_id: str | None, why: str) -> None: ...


def unknown_outcome(cause: object = None) -> str:
    because = f" ({cause})" if cause else ""
    return (
        f"the connection to the proxy broke before it confirmed the request{because}; "
        "its outcome is unknown and it was not sent again"
    )


async def pump(
    session: StreamOwner,
    reader: SseReader,
    cursor: Cursor,
    done: Callable[[], bool],
    label: str,
) -> bool:
    """Write every message of one response to the host, in order, until it ends (True
    if the server ended it, False if the connection broke) or ``done()`` holds."""
    try:
        while (events := await reader.read()) is not None:
            for event in events:
                if event.id is not None:  # the id of an event received whole
                    cursor.last_id = event.id
                    cursor.backoff.reset()
                if event.retry is not None:
                    cursor.retry_ms = event.retry
                if event.data:
                    session.from_proxy(event.data)
            if done():
                return True
            await session.pipe.drain()
        return True
    except Lost as exc:
        log.info("stream_dropped", session=session.link.session_label, stream=label, error=str(exc))
        return False
    finally:
        reader.response.close()


async def follow_request(session: StreamOwner, call: Call, reader: SseReader) -> None:
    """Read a request's stream to its answer, resuming after every drop; answer the
    request with an error when that cannot be done."""
    cursor = Cursor()
    label = f"request {call.id}"
    try:
        while True:
            clean = await pump(session, reader, cursor, lambda: call.answered, label)
            if call.answered or call.cancelled:
                return
            if cursor.last_id is None:  # nothing to resume from, and no re-send
                session.answer_error(call, UNAVAILABLE_CODE, unknown_outcome(), "outcome_unknown")
                return
            try:
                response = await session.link.resume(
                    cursor.last_id,
                    first_delay=cursor.wait_after(clean),
                    budget=session.budget,
                    backoff=cursor.backoff,
                    label=label,
                )
            except GaveUp as exc:
                session.answer_error(call, UNAVAILABLE_CODE, str(exc), "connection_lost")
                return
            except Refused as exc:
                if exc.status == 404:
                    session.session_gone(call.session_id, "404 on resume")
                message = f"the proxy refused to resume the request's stream: {exc.message}"
                session.answer_error(call, UNAVAILABLE_CODE, message, exc.reason)
                return
            reader = SseReader(response)
    finally:
        call.done.set()


async def follow_standalone(session: StreamOwner, session_id: str) -> None:
    """Keep the session's standalone stream open (§Listening for Messages from the
    Server) until the session ends, the proxy has none (405) or reconnecting fails for
    the whole budget (the next host message starts it again)."""
    cursor = Cursor()
    wait: float | None = 0.0
    while True:
        try:
            response = await session.link.resume(
                cursor.last_id,
                first_delay=wait,
                budget=session.budget,
                backoff=cursor.backoff,
                label="standalone",
            )
        except GaveUp as exc:
            log.warning("standalone_lost", session=session.link.session_label, error=str(exc))
            return
        except Refused as exc:
            if exc.status == 404:
                session.session_gone(session_id, "404 on the standalone stream")
            elif exc.status == 410 and cursor.last_id is not None:
                # The proxy's bounds dropped server messages we had not received: say so
                # and go on with a fresh stream (no request waits on this one).
                log.error("standalone_history_lost", reason=exc.reason)
                cursor.last_id, wait = None, 0.0
                continue
            else:
                log.info("standalone_refused", status=exc.status, reason=exc.reason)
            return
        clean = await pump(session, SseReader(response), cursor, lambda: False, "standalone")
        wait = cursor.wait_after(clean)
