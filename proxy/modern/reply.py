"""One request's HTTP answer: JSON when the answer comes first, else an SSE stream."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from aiohttp import web

from proxy.core import jsonrpc
from proxy.core.sse import encode_comment, encode_event

_SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}


class Reply:
    """One request's HTTP answer: JSON until something must be streamed, then SSE."""

    def __init__(
        self, request: web.Request, keepalive: float, headers: dict[str, str] | None = None
    ) -> None:
        self.request = request
        self.headers = headers or {}
        self.sse: web.StreamResponse | None = None
        self.keepalive = keepalive
        self.last_write = time.monotonic()

    @property
    def gone(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    async def stream(self, messages: list[dict[str, Any]]) -> None:
        if self.sse is None:
            self.sse = web.StreamResponse(status=200, headers={**_SSE_HEADERS, **self.headers})
            await self.sse.prepare(self.request)
        data = b"".join(encode_event(jsonrpc.encode(m)) for m in messages)
        await self.sse.write(data or encode_comment("keepalive"))
        self.last_write = time.monotonic()

    def due(self) -> float:
        return self.last_write + self.keepalive - time.monotonic()

    async def finish(self, message: dict[str, Any], status: int = 200) -> web.StreamResponse:
        if self.sse is None:
            return web.Response(
                body=jsonrpc.encode(message),
                status=status,
                content_type="application/json",
                headers=self.headers,
            )
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.sse.write_eof(encode_event(jsonrpc.encode(message)))
        return self.sse


def dumps(obj: Any) -> str:
    return jsonrpc.encode(obj).decode()
