"""A Streamable HTTP server's MCP endpoint, as one client session talks to it (DESIGN.md U2).

2025-11-25 basic/transports §Streamable HTTP: one URL takes every ``POST`` and ``GET``.
Requests carry the configured headers, the ``Mcp-Session-Id`` the server gave
(§Session Management) and the negotiated ``MCP-Protocol-Version`` (§Protocol Version
Header), and with ``upstream.oauth`` an access token (:mod:`proxy.upstream.oauth`).
:class:`Endpoint` keeps those and the ``aiohttp`` client, and reads response bodies,
holding back while paused. It never logs URLs or headers (secrets).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from http.cookies import BaseCookie
from typing import Any

import aiohttp
import structlog
from yarl import URL

from proxy.config import ConfigError
from proxy.core.errors import UpstreamStartFailed
from proxy.core.jsonrpc import Message
from proxy.core.protocol import LAST_EVENT_ID, SESSION_HEADER, VERSION_HEADER
from proxy.upstream import http_client
from proxy.upstream.base import UpstreamContext
from proxy.upstream.http_body import (
    NETWORK_ERRORS,
    POST_ACCEPT,
    SSE,
    Cursor,
    Sink,
    is_safe_header,
    read_json,
    read_sse,
)
from proxy.upstream.oauth import UpstreamCredentials, credentials_for

log = structlog.get_logger("proxy.upstream.http")

_DELETE_SECONDS = 2.0


@functools.lru_cache(maxsize=16)
def _timeout(connect: float | None) -> aiohttp.ClientTimeout:
    """No overall limit (a stream may last for hours), ``connect`` to connect."""
    return aiohttp.ClientTimeout(total=None, connect=connect)


class Endpoint:
    """The server's URL and what requests to it carry; ``open`` before use."""

    def __init__(self, context: UpstreamContext) -> None:
        self._context = context
        self._url = URL(context.config.url or "")
        self._static: dict[str, str] = {}  # the configured headers, resolved by open()
        self._http: aiohttp.ClientSession | None = None  # shared: http_client.acquire()
        self._timeout = _timeout(None)
        self._cookies: aiohttp.CookieJar | None = None  # made for the first Set-Cookie
        self._session: str | None = None  # the Mcp-Session-Id the server gave
        self._version: str | None = None  # the negotiated protocol revision
        # Made by pause() (readers stop consuming until resume()); None while reading.
        self._paused: asyncio.Event | None = None
        # upstream.oauth: the server's tokens (shared by its sessions), and the one sent.
        self.credentials: UpstreamCredentials | None = credentials_for(
            context.server, context.config
        )
        self.bearer: str | None = None

    @property
    def url(self) -> URL:
        """The configured URL (its userinfo, query and all: never logged)."""
        return self._url

    @property
    def connect_timeout(self) -> float:
        return self._context.config.connect_timeout_seconds

    @property
    def max_line_bytes(self) -> int:
        return self._context.config.max_line_bytes

    @property
    def paused(self) -> bool:
        """Between :meth:`pause` and :meth:`resume`."""
        return self._paused is not None

    @property
    def session_id(self) -> str | None:
        """The ``Mcp-Session-Id`` the server gave, if any (requests carry it)."""
        return self._session

    def describe(self) -> str:
        url = self._url.with_user(None).with_password(None).with_fragment(None)
        return str(url.with_query(None)) + ("?…" if url.query_string else "")

    async def open(self) -> None:
        """Resolve the configured headers and take the shared client; nothing connects yet."""
        config = self._context.config
        try:
            self._static = config.resolved_headers()
        except ConfigError as exc:
            self._context.health.failing(str(exc))
            raise UpstreamStartFailed(str(exc)) from None
        self._timeout = _timeout(config.connect_timeout_seconds)
        self._http = http_client.acquire()

    async def authorize(self, stale: str | None = None) -> None:
        """With ``upstream.oauth``: a usable access token for the next requests (a new
        one when ``stale`` was refused); ``UpstreamUnauthorized`` when none can be had."""
        if self.credentials is not None:
            assert self._http is not None
            self.bearer = await self.credentials.bearer(self._http, stale)

    async def close(self) -> bool:
        """Say goodbye (``DELETE``, §Session Management 5) and close the client; False if
        it was never opened."""
        http, self._http = self._http, None
        if http is None:
            return False
        if self._session is not None:
            with contextlib.suppress(*NETWORK_ERRORS):
                timeout = aiohttp.ClientTimeout(total=_DELETE_SECONDS)
                delete = http.delete(
                    self._url, headers=self.headers(), timeout=timeout, cookies=self._cookie()
                )
                async with delete as r:
                    log.info(
                        "upstream_session_deleted", session=self._context.label, status=r.status
                    )
        await http_client.release(http)
        return True

    # ------------------------------------------------------------------ requests
    def headers(
        self,
        accept: str | None = None,
        last_event_id: str | None = None,
        *,
        new_session: bool = False,
    ) -> dict[str, str]:
        """What a request carries; for a ``new_session`` neither a session id nor a
        revision (the server has given neither yet)."""
        headers = dict(self._static)
        if self.bearer is not None:  # RFC 6750 §2.1; never the client's own token
            for name in [n for n in headers if n.lower() == "authorization"]:
                del headers[name]  # a configured one, in whatever case: replaced
            headers["Authorization"] = f"Bearer {self.bearer}"
        if accept is not None:
            headers["Accept"] = accept
        if accept == POST_ACCEPT:
            headers["Content-Type"] = "application/json"
        if self._session is not None and not new_session:
            headers[SESSION_HEADER] = self._session
        if self._version is not None and not new_session:
            headers[VERSION_HEADER] = self._version
        if last_event_id is not None:
            headers[LAST_EVENT_ID] = last_event_id
        return headers

    async def post(
        self, data: bytes, headers: dict[str, str], written: asyncio.Event | None = None
    ) -> aiohttp.ClientResponse:
        """A ``POST``'s response (the caller closes it); ``written`` is set once its body
        is out."""
        assert self._http is not None
        resp = await self._http.post(
            self._url,
            data=data,
            headers=headers,
            timeout=self._timeout,
            cookies=self._cookie(),
            trace_request_ctx=written,
        )
        self._keep_cookies(resp)
        return resp

    async def get(self, last_event_id: str | None) -> aiohttp.ClientResponse:
        """A ``GET`` for an SSE stream, resuming after ``last_event_id`` if given."""
        assert self._http is not None
        resp = await self._http.get(
            self._url,
            headers=self.headers(SSE, last_event_id),
            timeout=self._timeout,
            cookies=self._cookie(),
        )
        self._keep_cookies(resp)
        return resp

    def cookie_header(self) -> str | None:
        """:meth:`_cookie` as a ``Cookie`` header's value, as ``aiohttp`` writes it."""
        cookies = self._cookie()
        return cookies.output(header="", sep=";").strip() if cookies else None

    def keep_cookies(self, set_cookie: list[str]) -> None:
        """What ``Set-Cookie`` headers of a response read without ``aiohttp`` say."""
        if set_cookie:
            if self._cookies is None:
                self._cookies = aiohttp.CookieJar(unsafe=True)
            self._cookies.update_cookies_from_headers(set_cookie, self._url)

    def _cookie(self) -> BaseCookie[str] | None:
        """The cookies this session's server set, for the next request (the shared
        client keeps none: one session's are never sent for another)."""
        return None if self._cookies is None else self._cookies.filter_cookies(self._url)

    def _keep_cookies(self, resp: aiohttp.ClientResponse) -> None:
        """What ``Set-Cookie`` says, kept for this session only (e.g. a load balancer's
        sticky cookie); the jar is made on the first one."""
        set_cookie = resp.headers.getall("Set-Cookie", ())
        if set_cookie:
            if self._cookies is None:
                self._cookies = aiohttp.CookieJar(unsafe=True)  # an IP address too
            self._cookies.update_cookies_from_headers(set_cookie, resp.url)

    # ------------------------------------------------------------------ the session
    def adopt_session(self, session: str | None) -> None:
        """The ``Mcp-Session-Id`` of an ``initialize`` answer, if it can be sent back."""
        # §Session Management 1: visible ASCII only; anything else cannot be sent back.
        if session and is_safe_header(session) and " " not in session:
            self._session = session
        elif session:
            log.warning("upstream_bad_session_id", session=self._context.label)

    def forget_session(self) -> None:
        """A new session is being initialized: the old id is no longer sent."""
        self._session = None

    def negotiated(self, result: dict[str, Any]) -> None:
        """The client's ``initialize`` result: its revision goes with later requests."""
        version = result.get("protocolVersion")
        self._version = version if isinstance(version, str) else None

    # ------------------------------------------------------------------ reading
    def pause(self) -> None:
        if self._paused is None:
            self._paused = asyncio.Event()

    def resume(self) -> None:
        paused, self._paused = self._paused, None
        if paused is not None:
            paused.set()

    async def json(self, resp: aiohttp.ClientResponse) -> list[Message]:
        """A JSON response body: one message or a batch."""
        return await read_json(self._reader(resp), self._context.config.max_line_bytes)

    async def sse(
        self, resp: aiohttp.ClientResponse, cursor: Cursor, sink: Sink, done: Callable[[], bool]
    ) -> None:
        """Hand each message of an SSE body to ``sink`` until it ends or ``done()``."""
        limit = self._context.config.max_line_bytes
        await read_sse(self._reader(resp), limit, self._context.label, cursor, sink, done)

    def _reader(self, resp: aiohttp.ClientResponse) -> Callable[[], Awaitable[bytes]]:
        return lambda: self._chunk(resp)

    async def _chunk(self, resp: aiohttp.ClientResponse) -> bytes:
        """The next bytes of a body (b"" at its end); waits while paused."""
        while (paused := self._paused) is not None:
            await paused.wait()
        return await resp.content.readany()
