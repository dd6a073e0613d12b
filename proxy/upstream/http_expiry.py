"""The HTTP upstream's session when it breaks: unreachable, or forgotten (DESIGN.md U2).

2025-11-25 basic/transports §Session Management: a ``404`` to a request carrying
``Mcp-Session-Id`` means the session is gone. With no other request in flight the proxy
starts a new upstream session by itself (the client's cached ``initialize`` under an id of
its own, whose answer it keeps, then ``notifications/initialized``) and re-sends the
message; with work in flight that work is lost, so it gets errors and the client session
ends. A server unreachable for ``reconnect_max_seconds`` ends it too.

:class:`SessionExpiry` owns that policy and its state. It is held by
:class:`~proxy.upstream.http.HttpUpstream`, whose requests it shares the
:class:`~proxy.upstream.http_endpoint.Endpoint` with, and asks it for the rest through
:class:`SessionHost`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol

import structlog

from proxy.core import jsonrpc
from proxy.core.errors import ProxyError
from proxy.core.handshake import client_params
from proxy.core.jsonrpc import Kind, Message
from proxy.core.protocol import SESSION_HEADER
from proxy.upstream.base import InFlight, UpstreamContext
from proxy.upstream.handshake import INITIALIZE_TIMEOUT_SECONDS, initialize
from proxy.upstream.http_body import (
    EXPIRED,
    NETWORK_ERRORS,
    POST_ACCEPT,
    SSE,
    BadBody,
    Cursor,
    answers,
    setter,
    why_failed,
)
from proxy.upstream.http_endpoint import Endpoint

log = structlog.get_logger("proxy.upstream.http")


class SessionHost(Protocol):
    """What :class:`SessionExpiry` needs of the transport that holds it."""

    def spawn(
        self, coro: Coroutine[Any, Any, Any], what: str, msg: Message | None = None
    ) -> asyncio.Task[Any]:
        """Run ``coro`` as a task of the transport (``stop`` ends it); a failure is logged
        and, if ``msg`` is a request, answered with an error."""
        ...

    async def post(self, payload: bytes, msg: Message, written: asyncio.Event | None) -> None:
        """POST one message and read its answer; ``written`` is set once its body is out."""
        ...

    def listen(self) -> None:
        """(Re)open the standalone GET stream (on a new session)."""
        ...

    def lost(self, msg: Message, why: str) -> None:
        """``msg`` will never reach the server: a request gets an error."""
        ...


class SessionExpiry:
    """Whether the upstream session lives on: re-initializes it when the server forgot it,
    ends it when that cannot be done or the server stays unreachable.

    It keeps what those decisions need: the client's ``initialize``, the requests the
    session holds, the re-initialization under way and the loop guard, since when the
    server is unreachable, and why the session is over.
    """

    def __init__(
        self, host: SessionHost, endpoint: Endpoint, context: UpstreamContext, inflight: InFlight
    ) -> None:
        self._host = host
        self._endpoint = endpoint
        self._context = context
        self._inflight = inflight
        # The client's initialize as sent (bytes: a third of the parsed dicts' memory, and
        # read again only to re-initialize).
        self._init: bytes | None = None
        self._init_id: Any = None
        self._accepted: set[Any] = set()  # requests whose POST the server took (2xx)
        self._reinit: asyncio.Task[Any] | None = None
        self._reinits = 0
        self._reinit_streak = 0  # re-inits with no accepted POST since: a loop guard
        self._unreachable_since: float | None = None
        self._closed: str | None = None

    @property
    def closed(self) -> str | None:
        """Why the upstream session is over for good; None while it lives."""
        return self._closed

    @property
    def initialize_id(self) -> Any:
        """The id of the client's ``initialize`` as sent upstream (None before it)."""
        return self._init_id

    # ------------------------------------------------------------------ told by the host
    def client_initialize(self, msg: Message, payload: bytes) -> None:
        """The client's ``initialize`` (``payload``) is going upstream: keep it, to replay
        it."""
        self._init, self._init_id = payload, msg.id

    def accepted(self, msg: Message) -> None:
        """The server took a POST (2xx): the session is alive, a request is now its work."""
        self._reinit_streak = 0
        if msg.kind is Kind.REQUEST:
            self._accepted.add(msg.id)

    def settled(self, request_id: Any) -> None:
        """A request was answered, by the server or with our error."""
        self._accepted.discard(request_id)

    async def reinitialized(self) -> None:
        """Returns once no re-initialization is under way (later messages go to the new
        session)."""
        if self._reinit is not None:
            await asyncio.shield(self._reinit)

    def unreachable(self, why: str) -> None:
        """The server cannot be reached; unreachable for too long ends the session."""
        now = asyncio.get_running_loop().time()
        if self._unreachable_since is None:
            self._unreachable_since = now
            log.warning("upstream_unreachable", session=self._context.label, error=why)
        self._context.health.failing(f"upstream {self._endpoint.describe()}: {why}")
        limit = self._context.config.reconnect_max_seconds
        if now - self._unreachable_since > limit:
            self.end(f"upstream unreachable for over {limit:g} s", why)

    def reachable(self) -> None:
        if self._unreachable_since is not None:
            log.info("upstream_reachable", session=self._context.label)
        self._unreachable_since = None
        if self._context.health.state != "ok":
            self._context.health.ok()

    async def expired(self, msg: Message, payload: bytes, used: str) -> None:
        """404 to ``msg``, POSTed with session id ``used`` (§Session Management 3-4)."""
        host, endpoint = self._host, self._endpoint
        if endpoint.session_id == used and self._reinit is None and self._closed is None:
            others = self._accepted & set(self._inflight.ids) - {msg.id}
            if others:
                self.end(EXPIRED, "the MCP server ended the session with requests in flight")
            elif self._init is None or self._reinit_streak >= 2:
                self.end(EXPIRED, "the MCP server keeps refusing the session")
            else:
                self._reinit_streak += 1
                self._reinit = host.spawn(self._reinitialize(payload, msg), "reinit")
                return
        await self.reinitialized()
        if self._closed is None and endpoint.session_id not in (None, used):
            await host.post(payload, msg, None)  # it went to the stale session: again
        else:
            host.lost(msg, self._closed or EXPIRED)

    def end(self, reason: str, detail: str) -> None:
        """The upstream session is over for good: errors for its work, then on_closed."""
        self._inflight.fail_all(f"{reason}: {detail}")
        if self._closed is None:
            self._closed = f"{reason}: {detail}"
            log.warning(
                "upstream_session_over", session=self._context.label, reason=reason, error=detail
            )
            self._context.on_closed(reason)

    # ------------------------------------------------------------------ internals
    async def _reinitialize(self, payload: bytes, msg: Message) -> None:
        """A new upstream session the client never sees: the client's initialize params
        under an id of our own, ``notifications/initialized`` (the one driver,
        :func:`proxy.upstream.handshake.initialize`), then the message that met the 404."""
        assert self._init is not None
        self._reinits += 1
        log.info("upstream_reinitializing", session=self._context.label)
        try:
            init = jsonrpc.decode(self._init)
            params = client_params(init if isinstance(init, dict) else {})
            await initialize(
                self._ask_new_session, self._notify, params, INITIALIZE_TIMEOUT_SECONDS
            )
        except (BadBody, ProxyError, *NETWORK_ERRORS) as exc:
            self._reinit = None
            self.end(EXPIRED, f"re-initializing the upstream session failed: {why_failed(exc)}")
            self._host.lost(msg, self._closed or EXPIRED)
            return
        log.info("upstream_reinitialized", session=self._context.label)
        self._host.listen()
        written = asyncio.Event()
        post = self._host.spawn(self._host.post(payload, msg, written), f"post-{msg.id}", msg)
        post.add_done_callback(setter(written))
        await written.wait()
        self._reinit = None

    async def _ask_new_session(
        self, method: str, params: dict[str, Any], timeout: float
    ) -> Message:
        """A request of the proxy's own that opens a new session (Lifecycle
        §Initialization): its answer, kept here; raises if none comes."""
        rid = f"mcp-resume-proxy-reinit-{self._reinits}"
        body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        endpoint = self._endpoint
        endpoint.forget_session()
        headers = endpoint.headers(POST_ACCEPT, new_session=True)
        got: list[Message] = []
        async with asyncio.timeout(timeout):
            resp = await endpoint.post(jsonrpc.encode(body), headers)
            try:
                if resp.status != 200:
                    raise BadBody(f"HTTP {resp.status}")
                endpoint.adopt_session(resp.headers.get(SESSION_HEADER))
                if resp.content_type == SSE:
                    await endpoint.sse(resp, Cursor(), got.append, lambda: answers(got, rid))
                else:
                    got = await endpoint.json(resp)
            finally:
                resp.close()
        for answer in got:
            if answers([answer], rid):
                return answer
        raise BadBody(f"{method} was not answered")

    async def _notify(self, message: dict[str, Any]) -> None:
        """A notification of the proxy's own on the new session."""
        resp = await self._endpoint.post(
            jsonrpc.encode(message), self._endpoint.headers(POST_ACCEPT)
        )
        async with resp as r:
            if r.status >= 300:
                raise BadBody(f"{message.get('method')} refused: HTTP {r.status}")
