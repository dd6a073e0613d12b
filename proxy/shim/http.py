"""The proxy side of the stdio shim: Streamable HTTP requests to the proxy (aiohttp).

MCP 2025-11-25 basic/transports §Streamable HTTP: every message is a POST (``Accept``
lists ``application/json`` and ``text/event-stream``); the session id from the
``initialize`` response and the negotiated ``MCP-Protocol-Version`` go on every later
request; a dropped SSE stream is resumed with ``GET`` + ``Last-Event-ID``
(§Resumability and Redelivery), after waiting the stream's ``retry`` when the server
closed it on purpose (§Sending Messages to the Server, item 6).

Whether the proxy got a POST is knowable only in one case: the connection was never
made. Every request uses a new connection (no keep-alive pool), so a connect error or a
connect timeout (:class:`NotSent`: refused, unresolvable, unroutable, a SYN never
answered) proves the message was not sent; any later failure (:class:`Lost`) leaves it
unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import structlog

from proxy.backoff import Backoff
from proxy.core.errors import error_object
from proxy.core.protocol import LAST_EVENT_ID, SERVER_ERROR, SESSION_HEADER, VERSION_HEADER
from proxy.core.sse import SSEDecodeError, SSEDecoder, SSEEvent

log = structlog.get_logger("proxy.shim")

# SSE preferred (q): the proxy then streams even a large lone answer, which the shim can
# resume when cut mid-transfer; a JSON body cannot be (docs/clients.md "Large results").
ACCEPT_POST = "text/event-stream, application/json;q=0.9"
ACCEPT_GET = "text/event-stream"
# No byte for this long on a stream: the connection is presumed dead and resumed. The
# proxy writes a keepalive comment after 15 s of silence by default (sse.keepalive_seconds).
READ_IDLE_SECONDS = 60.0
DELETE_SECONDS = 2.0
# HTTP statuses after which a resume GET is simply tried again (the proxy, or something
# in front of it, is briefly unable; 409: it has not yet noticed our previous GET died).
_RETRY_STATUSES = frozenset({409, 502, 503, 504})


class NotSent(Exception):
    """No connection to the proxy could be made: the message certainly never reached it."""


class Lost(Exception):
    """The connection broke after it was made: the proxy may have received the message."""


class GaveUp(Exception):
    """Reconnecting failed for longer than the reconnect budget."""


@dataclass
class Refused(Exception):
    """The proxy answered a resume with an error status (404: the session is gone)."""

    status: int
    reason: str
    message: str


class SseReader:
    """The SSE events of one response, in the chunks they arrive in."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self._decoder = SSEDecoder()

    async def read(self) -> list[SSEEvent] | None:
        """The next events (maybe none, for a comment); None when the server ended the
        response cleanly. Raises :class:`Lost` when the connection broke mid-stream."""
        try:
            if (error := self._decoder.error) is not None:  # the last read met a bad line
                raise error
            chunk = await self.response.content.readany()
            if not chunk:
                return None
            return self._decoder.feed(chunk)  # the events before a bad line, if any
        except (aiohttp.ClientError, TimeoutError, SSEDecodeError) as exc:
            raise Lost(f"{type(exc).__name__}: {exc}") from None


def is_sse(response: aiohttp.ClientResponse) -> bool:
    return response.content_type == "text/event-stream"


def error_of(status: int, body: bytes) -> dict[str, Any]:
    """The JSON-RPC ``error`` object of a refusal body, or one naming the HTTP status."""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if isinstance(error, dict) and isinstance(error.get("code"), int):
        return error
    message = f"the proxy answered HTTP {status}"
    return error_object(SERVER_ERROR, message, {"reason": "http_error", "status": status})


# A balancer's own answers (no JSON-RPC body) when the replica it chose broke off (502)
# or did not answer in time (504) after the request left for it: the request may have
# run there, so its outcome is unknown (docs/errors.md).
GATEWAY_LOST = frozenset({502, 504})


def balancer_lost(status: int, error: dict[str, Any]) -> bool:
    """Whether ``error`` (:func:`error_of` a refusal) is a balancer's own 502/504, not
    the proxy's answer: the replica it chose may have received the message."""
    return status in GATEWAY_LOST and reason_of(error) == "http_error"


async def read_released(response: aiohttp.ClientResponse) -> bytes:
    """The body of ``response`` (empty when it cannot be read), the response released
    (a later ``read()`` gets the same bytes from memory)."""
    try:
        body = await response.read()
    except (aiohttp.ClientError, TimeoutError):
        body = b""
    response.release()
    return body


# Refusals that say the request was not run, so it may be sent again (to the same URL: a
# balancer takes it to another replica): a replica draining before it stops, a store that
# did not answer in time (docs/errors.md). A 503 with no JSON-RPC body is not the proxy's
# (a balancer with no replica in rotation) and ran nothing either. Any other 503
# (owner_unreachable: the holder may have run it) is an answer.
_NOT_RUN_REASONS = frozenset({"proxy_draining", "store_unavailable"})
MAX_RETRY_AFTER_SECONDS = 5.0


def retry_after_refusal(status: int, body: bytes, retry_after: str | None) -> float | None:
    """Seconds to wait before sending again a request refused with ``status``/``body``
    before it ran, or None when the refusal is the request's answer."""
    if status != 503:
        return None
    error = error_of(status, body)
    if reason_of(error) not in _NOT_RUN_REASONS and "status" not in (error.get("data") or {}):
        return None
    try:
        wait = float(retry_after) if retry_after is not None else 0.0
    except ValueError:
        wait = 0.0
    return min(max(wait, 0.0), MAX_RETRY_AFTER_SECONDS)


def reason_of(error: dict[str, Any]) -> str:
    data = error.get("data")
    reason = data.get("reason") if isinstance(data, dict) else None
    return reason if isinstance(reason, str) else "http_error"


class ProxyLink:
    """One HTTP client to the proxy's MCP endpoint, with the session's headers."""

    def __init__(self, url: str, headers: dict[str, str], *, connect_timeout: float = 5.0) -> None:
        self.url = url
        self._extra = headers  # e.g. Authorization to the proxy: never logged
        self._connect_timeout = connect_timeout
        self._http: aiohttp.ClientSession | None = None
        self.session_id: str | None = None
        self.protocol_version: str | None = None

    @property
    def session_label(self) -> str:
        """For logs: a prefix only, session ids are bearer secrets."""
        return self.session_id[:8] if self.session_id else "-"

    async def open(self) -> None:
        self._http = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True, limit=0),
            timeout=aiohttp.ClientTimeout(
                total=None, connect=self._connect_timeout, sock_read=READ_IDLE_SECONDS
            ),
            auto_decompress=False,
        )

    def _timeout(self, connect: float | None) -> aiohttp.ClientTimeout:
        """The timeouts of one request: making its connection may take ``connect``
        seconds (at most the link's connect timeout), its stream may idle for
        :data:`READ_IDLE_SECONDS`."""
        limit = self._connect_timeout if connect is None else min(connect, self._connect_timeout)
        return aiohttp.ClientTimeout(
            total=None, connect=max(limit, 0.001), sock_read=READ_IDLE_SECONDS
        )

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    def headers(self, accept: str, last_event_id: str | None = None) -> dict[str, str]:
        headers = dict(self._extra)
        headers["Accept"] = accept
        if self.session_id is not None:
            headers[SESSION_HEADER] = self.session_id
        if self.protocol_version is not None:
            headers[VERSION_HEADER] = self.protocol_version
        if last_event_id is not None:
            headers[LAST_EVENT_ID] = last_event_id
        return headers

    async def _request(
        self,
        method: str,
        headers: dict[str, str],
        body: bytes | None = None,
        connect: float | None = None,
    ) -> aiohttp.ClientResponse:
        assert self._http is not None, "open() first"
        try:
            return await self._http.request(
                method, self.url, headers=headers, data=body, timeout=self._timeout(connect)
            )
        except aiohttp.ClientConnectorError as exc:  # refused, unresolvable, unroutable
            raise NotSent(f"{type(exc).__name__}: {exc}") from None
        except aiohttp.ConnectionTimeoutError:  # the connection was never made
            limit = self._timeout(connect).connect or 0.0
            raise NotSent(f"no connection to the proxy within {limit:g} s") from None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise Lost(f"{type(exc).__name__}: {exc}") from None

    async def post(
        self, body: bytes, *, fresh: bool = False, connect: float | None = None
    ) -> aiohttp.ClientResponse:
        """POST one message (``fresh``: without session headers, for a new initialize),
        allowing ``connect`` seconds (at most the link's connect timeout) to connect."""
        headers = self.headers(ACCEPT_POST)
        if fresh:
            headers.pop(SESSION_HEADER, None)
            headers.pop(VERSION_HEADER, None)
        headers["Content-Type"] = "application/json"
        return await self._request("POST", headers, body, connect)

    async def get(self, last_event_id: str | None) -> aiohttp.ClientResponse:
        return await self._request("GET", self.headers(ACCEPT_GET, last_event_id))

    async def delete(self) -> int | None:
        """End the session at the proxy (§Session Management, item 5); best effort."""
        if self.session_id is None or self._http is None:
            return None
        try:
            async with asyncio.timeout(DELETE_SECONDS):
                response = await self._request("DELETE", self.headers(ACCEPT_POST))
                response.release()
                return response.status
        except (NotSent, Lost, TimeoutError) as exc:
            log.info("delete_failed", session=self.session_label, error=str(exc))
            return None

    async def resume(
        self,
        last_event_id: str | None,
        *,
        first_delay: float | None,
        budget: float,
        backoff: Backoff,
        label: str,
    ) -> aiohttp.ClientResponse:
        """GET (+ ``Last-Event-ID``) until the proxy serves the stream again.

        Waits ``first_delay`` (the stream's ``retry``) or a backoff step before each try;
        raises :class:`GaveUp` once ``budget`` seconds have passed, :class:`Refused` on an
        error status that retrying cannot cure (404: the session is gone).
        """
        started = time.monotonic()
        delay = first_delay if first_delay is not None else backoff.next_delay()
        attempt = 0
        while True:
            if time.monotonic() - started + delay > budget:
                raise GaveUp(f"could not reconnect to the proxy within {budget:g} s")
            await asyncio.sleep(delay)
            attempt += 1
            delay = backoff.next_delay()
            try:
                response = await self.get(last_event_id)
            except (NotSent, Lost) as exc:
                log.debug("resume_failed", session=self.session_label, stream=label, error=str(exc))
                continue
            if response.status == 200 and is_sse(response):
                log.info(
                    "stream_resumed" if last_event_id is not None else "stream_opened",
                    session=self.session_label,
                    stream=label,
                    attempt=attempt,
                    last_event_id=last_event_id,
                )
                return response
            body = b""
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                body = await response.read()
            response.release()
            if response.status in _RETRY_STATUSES:
                log.debug("resume_retry", session=self.session_label, status=response.status)
                continue
            error = error_of(response.status, body)
            raise Refused(response.status, reason_of(error), str(error.get("message", "")))
