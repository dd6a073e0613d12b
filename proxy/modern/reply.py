"""One request's HTTP answer: JSON when the answer comes first, else an SSE stream."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from aiohttp import web

from proxy.core import jsonrpc
from proxy.core.sse import encode_event
from proxy.sse_writer import SseWriter

T = TypeVar("T")


class Reply:
    """One request's HTTP answer: JSON until something must be streamed, then SSE
    (written by :class:`~proxy.sse_writer.SseWriter`: headers, keepalive, liveness)."""

    def __init__(
        self, request: web.Request, keepalive: float, headers: dict[str, str] | None = None
    ) -> None:
        self.request = request
        self.headers = headers or {}
        self.keepalive = keepalive
        self._writer = SseWriter(request, keepalive, self.headers)

    def add_headers(self, headers: dict[str, str]) -> None:
        """Headers for the answer, JSON or SSE (before anything is written)."""
        self.headers.update(headers)
        self._writer.response.headers.update(headers)

    @property
    def sse(self) -> web.StreamResponse | None:
        """The SSE response, once streaming began (else None: the answer is still JSON)."""
        return self._writer.response if self._writer.opened else None

    @property
    def gone(self) -> bool:
        return self._writer.gone

    async def stream(self, messages: list[dict[str, Any]]) -> None:
        """Write ``messages`` as events (none: a keepalive), opening the stream if need be."""
        if messages:
            await self._writer.write(b"".join(encode_event(jsonrpc.encode(m)) for m in messages))
        else:
            await self._writer.write_keepalive()

    def due(self) -> float:
        """Seconds until a keepalive is due (≤ 0: due now)."""
        return self._writer.due()

    async def next_batch(self, queue: asyncio.Queue[T], last: Callable[[T], bool]) -> list[T]:
        """:meth:`SseWriter.next_batch` on this reply's stream (empty: the client is gone)."""
        return await self._writer.next_batch(queue, last)

    async def finish(self, message: dict[str, Any], status: int = 200) -> web.StreamResponse:
        if not self._writer.opened:
            return web.Response(
                body=jsonrpc.encode(message),
                status=status,
                content_type="application/json",
                headers=self.headers,
            )
        return await self._writer.end(encode_event(jsonrpc.encode(message)))
