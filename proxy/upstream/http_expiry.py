"""The HTTP upstream's session when it breaks: unreachable, or forgotten (DESIGN.md U2).

2025-11-25 basic/transports §Session Management: a ``404`` to a request carrying
``Mcp-Session-Id`` means the session is gone. With no other request in flight the proxy
starts a new upstream session by itself (the client's cached ``initialize`` under an id of
its own, whose answer it keeps, then ``notifications/initialized``) and re-sends the
message; with work in flight that work is lost, so it gets errors and the client session
ends. A server unreachable for ``reconnect_max_seconds`` ends it too. A mixin of
:class:`proxy.upstream.http.HttpUpstream`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import aiohttp
import structlog
from yarl import URL

from proxy.config import UpstreamConfig
from proxy.core import jsonrpc
from proxy.core.errors import ProxyError
from proxy.core.jsonrpc import Message
from proxy.upstream.base import InFlight, OnClosed, UpstreamHealth
from proxy.upstream.http_body import (
    EXPIRED,
    NETWORK_ERRORS,
    POST_ACCEPT,
    SESSION_HEADER,
    SSE,
    VERSION_HEADER,
    BadBody,
    Cursor,
    Sink,
    answers,
    read_json,
    setter,
    why_failed,
)

log = structlog.get_logger("proxy.upstream.http")


class SessionExpiry:
    """Re-initializing, or ending, the upstream session."""

    # What HttpUpstream provides.
    _config: UpstreamConfig
    _prefix: str
    _http: aiohttp.ClientSession | None
    _inflight: InFlight
    _session: str | None
    _init: dict[str, Any] | None
    _accepted: set[Any]
    _reinit: asyncio.Task[Any] | None
    _reinits: int
    _reinit_streak: int
    _listener: asyncio.Task[Any] | None
    _closed: str | None
    _url: URL
    _health: UpstreamHealth
    _on_closed: OnClosed
    _unreachable_since: float | None

    if TYPE_CHECKING:  # provided by HttpUpstream; declared here for the type checker

        def describe(self) -> str: ...

        def _spawn(
            self, coro: Coroutine[Any, Any, Any], what: str, msg: Message | None = None
        ) -> asyncio.Task[Any]: ...

        def _headers(
            self, accept: str | None = None, last_event_id: str | None = None
        ) -> dict[str, str]: ...

        async def _post(
            self, payload: bytes, msg: Message, written: asyncio.Event | None
        ) -> None: ...

        def _adopt_session(self, session: str | None) -> None: ...

        def _lost(self, msg: Message, why: str) -> None: ...

        def _reader(self, resp: aiohttp.ClientResponse) -> Callable[[], Awaitable[bytes]]: ...

        async def _sse(
            self,
            resp: aiohttp.ClientResponse,
            cursor: Cursor,
            sink: Sink,
            done: Callable[[], bool],
        ) -> None: ...

        async def _listen(self) -> None: ...

    async def _expired(self, msg: Message, payload: bytes, used: str) -> None:
        """404 for our session id (§Session Management 3-4)."""
        if self._session == used and self._reinit is None and self._closed is None:
            others = self._accepted & set(self._inflight.ids) - {msg.id}
            if others:
                self._end(EXPIRED, "the MCP server ended the session with requests in flight")
            elif self._init is None or self._reinit_streak >= 2:
                self._end(EXPIRED, "the MCP server keeps refusing the session")
            else:
                self._reinit_streak += 1
                self._reinit = self._spawn(self._reinitialize(payload, msg), "reinit")
                return
        if self._reinit is not None:
            await asyncio.shield(self._reinit)
        if self._closed is None and self._session not in (None, used):
            await self._post(payload, msg, None)  # it went to the stale session: again
        else:
            self._lost(msg, self._closed or EXPIRED)

    async def _reinitialize(self, payload: bytes, msg: Message) -> None:
        """A new upstream session the client never sees: the cached initialize under an
        id of our own, ``notifications/initialized``, then the message that met the 404."""
        assert self._init is not None
        self._reinits += 1
        rid = f"mcp-resume-proxy-reinit-{self._reinits}"
        log.info("upstream_reinitializing", session=self._prefix)
        try:
            await self._handshake({**self._init, "id": rid}, rid)
        except (BadBody, ProxyError, *NETWORK_ERRORS) as exc:
            self._reinit = None
            self._end(EXPIRED, f"re-initializing the upstream session failed: {why_failed(exc)}")
            self._lost(msg, self._closed or EXPIRED)
            return
        log.info("upstream_reinitialized", session=self._prefix)
        if self._listener is not None:
            self._listener.cancel()
        self._listener = self._spawn(self._listen(), "listen")
        written = asyncio.Event()
        post = self._spawn(self._post(payload, msg, written), f"post-{msg.id}", msg)
        post.add_done_callback(setter(written))
        await written.wait()
        self._reinit = None

    async def _handshake(self, body: dict[str, Any], rid: str) -> None:
        assert self._http is not None
        self._session = None
        headers = self._headers(POST_ACCEPT)
        headers.pop(VERSION_HEADER, None)
        got: list[Message] = []
        resp = await self._http.post(self._url, data=jsonrpc.encode(body), headers=headers)
        try:
            if resp.status != 200:
                raise BadBody(f"HTTP {resp.status}")
            self._adopt_session(resp.headers.get(SESSION_HEADER))
            if resp.content_type == SSE:
                await self._sse(resp, Cursor(), got.append, lambda: answers(got, rid))
            else:
                got = await read_json(self._reader(resp), self._config.max_line_bytes)
        finally:
            resp.close()
        if not any(answers([m], rid) and "result" in m.raw for m in got):
            raise BadBody("initialize was not answered with a result")
        note = jsonrpc.encode({"jsonrpc": "2.0", "method": "notifications/initialized"})
        async with self._http.post(self._url, data=note, headers=self._headers(POST_ACCEPT)) as r:
            if r.status >= 300:
                raise BadBody(f"notifications/initialized refused: HTTP {r.status}")

    def _failure(self, why: str) -> None:
        """The server cannot be reached; unreachable for too long ends the session."""
        now = asyncio.get_running_loop().time()
        if self._unreachable_since is None:
            self._unreachable_since = now
            log.warning("upstream_unreachable", session=self._prefix, error=why)
        self._health.failing(f"upstream {self.describe()}: {why}")
        limit = self._config.reconnect_max_seconds
        if now - self._unreachable_since > limit:
            self._end(f"upstream unreachable for over {limit:g} s", why)

    def _reachable(self) -> None:
        if self._unreachable_since is not None:
            log.info("upstream_reachable", session=self._prefix)
        self._unreachable_since = None
        if self._health.state != "ok":
            self._health.ok()

    def _end(self, reason: str, detail: str) -> None:
        """The upstream session is over for good: errors for its work, then on_closed."""
        self._inflight.fail_all(f"{reason}: {detail}")
        if self._closed is None:
            self._closed = f"{reason}: {detail}"
            log.warning("upstream_session_over", session=self._prefix, reason=reason, error=detail)
            self._on_closed(reason)
