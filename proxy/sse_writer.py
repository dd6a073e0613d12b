"""The one writer of Server-Sent Events responses to clients, in both eras.

Every SSE answer the proxy gives (a POST's stream and a GET's on ``/mcp``, a stream served
from the store, a 2026-07-28 request's answer once it must stream, a
``subscriptions/listen`` stream) is written by :class:`SseWriter`:

- **Headers.** ``Content-Type: text/event-stream`` (2025-11-25 transports §Streamable
  HTTP), ``Cache-Control: no-cache, no-transform`` and ``X-Accel-Buffering: no`` so no
  cache or reverse proxy holds events back, plus the caller's (the session id, …).
- **Keepalive.** A ``: keepalive`` comment after ``sse.keepalive_seconds`` without a
  write, so idle intermediaries do not cut a quiet stream (comments are ignored by every
  SSE parser: WHATWG HTML §9.2.6).
- **Liveness.** While nothing is queued the writer looks at its client every
  :data:`LIVENESS_SECONDS`: a client that hung up is noticed without waiting for a write.
- **Batching.** What is queued at once is written in one write (one syscall, one TCP
  segment when it fits), the busy case without timer or task. The status line and headers
  go out with the first write, unless :meth:`SseWriter.open` sends them first: a call
  answered at once costs one ``send``, not two.
- **Merging a burst.** While a burst goes on (this batch and the last one both held at
  least :data:`BURST_ITEMS` items), the writer lets the event loop turn and takes what
  came meanwhile, up to :data:`MERGE_ITEMS` items or until a turn adds fewer than
  :data:`BURST_ITEMS`: a burst read 64 lines a turn goes out in a few large writes, not
  one per turn (issue 23: each transport write costs a ``send`` and a wake-up of the
  client). The first large batch and any small one (a call's answer) are not delayed.
- **The end.** The last events and the end of the response in one write; a client
  already gone is no error there.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from aiohttp import web

from proxy.core.sse import LIVENESS_SECONDS, encode_comment

SSE_HEADERS: Mapping[str, str] = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache, no-transform",
    "X-Accel-Buffering": "no",
}

KEEPALIVE = encode_comment("keepalive")

BURST_ITEMS = 32
"""A batch of at least this many items, after another one, means a burst is going on."""
MERGE_ITEMS = 512
"""The most items a burst's batch is grown to (turns of the loop, each adding to it)."""

T = TypeVar("T")


class _Response(web.StreamResponse):
    # Headers wait for the first bytes and go out with them (aiohttp >= 3.11 reads this;
    # an older one sends them at prepare, as before).
    _send_headers_immediately = False


class SseWriter:
    """One SSE response to ``request``: opened on the first write (or :meth:`open`)."""

    def __init__(
        self, request: web.Request, keepalive: float, headers: Mapping[str, str] | None = None
    ) -> None:
        self.request = request
        self.keepalive = keepalive
        self.response: web.StreamResponse = _Response(
            status=200, headers={**SSE_HEADERS, **(headers or {})}
        )
        self.opened = False
        self._last_write = time.monotonic()
        self._bursting = False  # the last batch held BURST_ITEMS items or more

    @property
    def gone(self) -> bool:
        """Whether the client hung up (its transport is closed or closing)."""
        transport = self.request.transport
        return transport is None or transport.is_closing()

    async def open(self) -> web.StreamResponse:
        """Send the status line and headers now (once), before any event."""
        if not self.opened:
            await self._prepare()
            await self.response.write(b"")  # the headers alone
        return self.response

    async def _prepare(self) -> None:
        """The status line and headers, held for the first write (once)."""
        if not self.opened:
            await self.response.prepare(self.request)
            self.opened = True
            self._last_write = time.monotonic()

    def due(self) -> float:
        """Seconds until a keepalive is due (≤ 0: due now)."""
        return self._last_write + self.keepalive - time.monotonic()

    async def write(self, data: bytes) -> None:
        """Write encoded events (or comments); raises ``ConnectionError`` if the client went."""
        await self._prepare()
        await self.response.write(data)
        self._last_write = time.monotonic()

    async def write_keepalive(self) -> None:
        await self.write(KEEPALIVE)

    async def end(self, data: bytes = b"") -> web.StreamResponse:
        """Write ``data`` (the last events) and end the response, in one write (with the
        headers, when none were sent yet)."""
        await self._prepare()
        with contextlib.suppress(ConnectionError, RuntimeError):
            await self.response.write_eof(data)
        return self.response

    async def next_batch(self, queue: asyncio.Queue[T], last: Callable[[T], bool]) -> list[T]:
        """Wait for ``queue``'s next items, keeping the stream alive meanwhile (keepalive
        comments, liveness checks); return every item queued now, up to and including the
        first for which ``last`` holds (the end of the stream). An empty list: the client
        is gone."""
        item: T
        if not queue.empty():  # the busy case: no timer, no task
            item = queue.get_nowait()
        else:
            while True:
                try:
                    async with asyncio.timeout(min(LIVENESS_SECONDS, max(0.0, self.due()))):
                        item = await queue.get()
                    break
                except TimeoutError:
                    if self.gone:
                        return []
                    if self.due() <= 0:
                        await self.write_keepalive()
        batch = [item]
        while not last(item) and not queue.empty():
            item = queue.get_nowait()
            batch.append(item)
        if len(batch) < BURST_ITEMS:
            self._bursting = False
        elif not self._bursting:
            self._bursting = True  # the first large batch goes at once
        else:
            await self._merge(batch, queue, last)
        return batch

    @staticmethod
    async def _merge(batch: list[T], queue: asyncio.Queue[T], last: Callable[[T], bool]) -> None:
        """Grow a burst's ``batch`` with what the next turns of the loop queue."""
        while len(batch) < MERGE_ITEMS and not last(batch[-1]):
            await asyncio.sleep(0)
            before = len(batch)
            while not queue.empty():
                item = queue.get_nowait()
                batch.append(item)
                if last(item):
                    return
            if len(batch) - before < BURST_ITEMS:
                return
