"""The 2024-11-05 HTTP+SSE upstream (DESIGN.md U3).

2024-11-05 transports §HTTP with SSE: the client opens an SSE stream with ``GET``; the
server's first event is ``endpoint``, a URI to which every client message is then sent
with ``POST``; server messages arrive as SSE ``message`` events whose data is JSON. That
revision has no resumption: the ``GET`` stream *is* the upstream session (see
:mod:`proxy.upstream.channel` for what happens when it drops).
"""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

import aiohttp

from proxy.core.sse import SSEDecoder, SSEEvent
from proxy.upstream.base import UpstreamContext
from proxy.upstream.channel import (
    ChannelUpstream,
    ConnectFailed,
    DeliveryFailed,
    describe_error,
    log,
    redact_url,
)

_POST_ERROR_CHARS = 200  # of a refused POST's body, in its error message


class SseUpstream(ChannelUpstream):
    """A 2024-11-05 HTTP+SSE server: ``GET`` the stream, ``POST`` to its ``endpoint``."""

    transport = "sse"

    def __init__(self, context: UpstreamContext) -> None:
        super().__init__(context)
        self._http: aiohttp.ClientSession | None = None
        self._stream: aiohttp.ClientResponse | None = None
        self._decoder = SSEDecoder(context.config.max_line_bytes)
        self._early: list[SSEEvent] = []  # events read along with the endpoint event
        self._endpoint: str | None = None

    async def _connect(self) -> None:
        if self._http is None:
            # trust_env off: like every other upstream, no proxy from the environment.
            self._http = aiohttp.ClientSession(headers=self._headers)
        try:
            self._stream = await self._http.get(
                self._url,
                headers={"Accept": "text/event-stream", "Cache-Control": "no-cache"},
                timeout=aiohttp.ClientTimeout(total=None),
            )
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            raise ConnectFailed(f"GET failed: {describe_error(exc)}") from None
        stream = self._stream
        if stream.status != 200:
            raise ConnectFailed(f"GET answered HTTP {stream.status}")
        if stream.content_type != "text/event-stream":
            raise ConnectFailed(f"GET answered {stream.content_type!r}, not text/event-stream")
        self._decoder = SSEDecoder(self._context.config.max_line_bytes)
        self._early = []
        self._endpoint = None
        while self._endpoint is None:
            if (error := self._decoder.error) is not None:
                raise ConnectFailed(
                    f"SSE stream broken before the endpoint event: {describe_error(error)}"
                )
            try:
                chunk = await stream.content.readany()
            except (aiohttp.ClientError, OSError) as exc:
                raise ConnectFailed(
                    f"SSE stream broken before the endpoint event: {describe_error(exc)}"
                ) from None
            if not chunk:
                raise ConnectFailed("SSE stream ended before the endpoint event")
            # The events before a bad line: an endpoint among them connects, and the
            # error is met by _receive after the early events are delivered.
            for event in self._decoder.feed(chunk):
                if self._endpoint is None and event.event == "endpoint":
                    self._endpoint = self._resolve_endpoint(event.data)
                else:
                    self._early.append(event)

    def _secret_urls(self) -> list[str]:
        # The endpoint's query names the server's session: a bearer secret of its own.
        return [self._url, *([self._endpoint] if self._endpoint else [])]

    def _resolve_endpoint(self, data: str) -> str:
        """The ``endpoint`` URI, relative to the SSE URL; refused on another origin, since
        the configured headers (credentials) go with every POST."""
        endpoint = urljoin(self._url, data.strip())
        mine, theirs = urlsplit(self._url), urlsplit(endpoint)
        if (mine.scheme, mine.hostname, mine.port) != (theirs.scheme, theirs.hostname, theirs.port):
            raise ConnectFailed(f"endpoint event names another origin: {redact_url(endpoint)}")
        return endpoint

    async def _receive(self) -> str:
        stream = self._stream
        assert stream is not None
        for event in self._early:
            self._event(event)
        self._early = []
        try:
            while (error := self._decoder.error) is None:
                await self._readable.wait()
                chunk = await stream.content.readany()
                if not chunk:
                    return "the SSE stream ended"
                for event in self._decoder.feed(chunk):  # those before a bad line, if any
                    await self._readable.wait()  # a pause holds back the rest, too
                    self._event(event)
        except (aiohttp.ClientError, OSError) as exc:
            return f"the SSE stream broke off: {describe_error(exc)}"
        return f"SSE stream unreadable: {error.message}"

    def _event(self, event: SSEEvent) -> None:
        if event.event == "message":
            self._received_data(event.data)
        else:  # a repeated endpoint, or an event type 2024-11-05 does not define
            log.debug("upstream_event_skipped", session=self._context.label, sse_event=event.event)

    async def _deliver(self, payload: bytes) -> None:
        if self._http is None or self._endpoint is None:
            raise DeliveryFailed("not connected")
        try:
            async with self._http.post(
                self._endpoint,
                data=payload,
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=self._context.config.connect_timeout_seconds),
            ) as response:
                body = await response.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise DeliveryFailed(f"POST failed: {describe_error(exc)}") from None
        if not 200 <= response.status < 300:
            text = body[:_POST_ERROR_CHARS].decode(errors="replace")
            raise DeliveryFailed(f"POST answered HTTP {response.status}: {text}")

    async def _disconnect(self) -> None:
        # (The endpoint stays known until the next connection: a late POST to it fails.)
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    async def _shutdown(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
