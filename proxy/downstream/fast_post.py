"""The common legacy POST served straight from the connection's bytes, beside aiohttp.

Nearly every request a legacy client sends is the same: ``POST /mcp`` over HTTP/1.1 kept
alive, one JSON-RPC request for a session this process holds, whose answer comes within
the JSON-answer hold (``sse.json_answer_window_ms``) and goes out whole
(:mod:`proxy.downstream.whole_response`). aiohttp spends about as many instructions on
such a request (its parser's objects, ``BaseRequest``, the app's middleware and router, a
response object, its signals and keep-alive bookkeeping) as the proxy does on the call
itself (bench/README.md, issue 23's fourth pass). :class:`FastPosts` serves that request
from the bytes :class:`~proxy.downstream.guard.ConnectionGuard` receives, with the same
checks, in the same order, through the same functions as :class:`StreamableHttp`'s POST.

Anything else goes to aiohttp untouched, before anything happened: another method or
path, HTTP/1.0, ``Connection``, ``Origin`` (CORS), ``Expect``, ``Upgrade``, chunked or
incomplete or pipelined bytes, a duplicate or unusual header, a query, authentication or
tracing on, a batch, a modern (2026-07-28) message, an ``initialize``, a poll, a session
held by another replica or absent, a refusal (aiohttp's path raises it again, with its
wire form). Once the session was fed, a stream is written here too
(:mod:`proxy.downstream.fast_stream`); any other response that does not go out whole (a
large answer sent as JSON, a refusal by the session, ``202``, a fenced session's empty
``200``) is *handed off*: the request's bytes go to aiohttp after all, and
``StreamableHttp`` finds the :class:`Handoff` waiting for it and writes the response as it
always has.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web
from structlog.contextvars import bind_contextvars

from proxy import tracing
from proxy.core import httprules, jsonrpc, lone_answer, seed
from proxy.core.admission import INITIALIZE
from proxy.core.era import is_modern
from proxy.core.errors import ProxyError
from proxy.core.jsonrpc import Kind
from proxy.downstream.fast_call import FastCall
from proxy.downstream.handoff import Handoff
from proxy.metrics import method_label
from proxy.servers import SERVERS_PREFIX

if TYPE_CHECKING:
    from proxy.downstream.http import StreamableHttp
    from proxy.runtime import SessionRunner

_POLLS = frozenset({seed.POLL, seed.RESUME, "tasks/get", "tasks/result"})
# What a header block may hold here: RFC 9110 §5.1 tokens, values of visible ASCII, space
# and tab; aiohttp is left whatever it would refuse. (A path is served only if it is one
# of the endpoints' own, as it is: nothing to decode.)
_HEADER_BYTES = bytes(range(0x20, 0x7F)) + b"\t"
_CRLF = b"\r\n"
_TOKEN = frozenset("!#$%&'*+.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-")
_NAMES: dict[str, str] = {}  # header names as sent -> lower case (the same few each time)
# Headers that send the request to aiohttp as they are.
_NOT_HERE = frozenset(
    {"origin", "transfer-encoding", "expect", "upgrade", "content-encoding", "authorization"}
)


@functools.lru_cache(maxsize=256)  # per request, the same few values (bounded)
def _holds_for(accept: str | None) -> bool:
    """Whether a POST with ``accept`` is acceptable and its answer held (its ``Accept``
    prefers JSON, :func:`lone_answer.prefers_json`); raises if it is refused."""
    httprules.check_post_accept(accept)
    return lone_answer.prefers_json(accept)


@functools.lru_cache(maxsize=256)
def _json_body(content_type: str | None) -> bool:
    httprules.check_content_type(content_type)  # (raises if refused)
    return True


def _headers(data: bytes) -> dict[str, str] | None:
    """The header fields of ``data`` if it begins with a ``POST`` this path may serve
    (by lower-case name), else None: a line aiohttp could read otherwise or refuse, a
    header twice."""
    end = data.find(b"\r\n\r\n")
    line_end = data.find(b"\r\n")
    if end < 0 or not data.startswith(b"POST /") or data[line_end - 9 : line_end] != b" HTTP/1.1":
        return None
    block = data[line_end + 2 : end + 2]
    # What is left once visible ASCII, space and tab are taken out: one CRLF per line.
    rest = block.translate(None, _HEADER_BYTES)
    if rest != _CRLF * (len(rest) // 2):
        return None
    fields = block.decode().split("\r\n")
    fields.pop()
    if len(fields) != len(rest) // 2:  # (a bare CR and LF)
        return None
    headers: dict[str, str] = {}
    for field in fields:
        name, colon, value = field.partition(":")
        key = _NAMES.get(name)
        if key is None:
            if not colon or not name or not _TOKEN.issuperset(name):
                return None
            key = name.lower()
            if len(_NAMES) < 256:  # (bounded: names are the client's to choose)
                _NAMES[name] = key
        if key in headers:
            return None
        headers[key] = value.strip(" \t")
    return headers


class FastPosts:
    """The fast POSTs of one application (see the module's docstring)."""

    def __init__(
        self,
        endpoints: dict[str, StreamableHttp],
        auth_on: Callable[[], bool],
        fixed: str | None,
        listen_path: str,
    ) -> None:
        """``endpoints``: the app's endpoints by server name (a reload changes the dict);
        ``auth_on``: whether its authenticator of the moment checks requests."""
        self.endpoints = endpoints
        self.auth_on = auth_on
        self.fixed = fixed  # the server ``listen.path`` serves, if there is one
        self.listen_path = listen_path
        self.handoffs: dict[object, Handoff] = {}  # by transport, until aiohttp takes it
        self._log_contexts: dict[str, contextvars.Context] = {}
        self._hosts: dict[str, object] = {}  # Host values served, by the listen section

    def _endpoint(self, path: str) -> StreamableHttp | None:
        endpoints = self.endpoints
        if path == self.listen_path:
            return endpoints.get(self.fixed) if self.fixed is not None else None
        if not path.startswith(SERVERS_PREFIX) or not path.endswith("/mcp"):
            return None
        name = path[len(SERVERS_PREFIX) : -4]
        return endpoints.get(name) if name and "/" not in name and "%" not in name else None

    def prepare(self, data: bytes, transport: asyncio.Transport) -> FastCall | None:
        """The fast POST of ``data`` (every byte received while the connection was idle)
        if it is one whole request this path serves, not begun (:meth:`FastCall.start`);
        None: nothing happened, aiohttp serves it."""
        if self.auth_on() or tracing.on():
            return None
        headers = _headers(data)
        if headers is None or not _NOT_HERE.isdisjoint(headers):
            return None
        connection = headers.get("connection")
        if connection is not None and connection.lower() != "keep-alive":
            return None
        length = headers.get("content-length")
        end = data.find(b"\r\n\r\n") + 4
        if length is None or not length.isdigit() or len(data) - end != int(length):
            return None
        endpoint = self._endpoint(data[5 : data.find(b" HTTP/1.1\r\n")].decode())
        if endpoint is None:
            return None
        body = data[end:]
        try:
            served = self._admit(endpoint, headers, body)
        except (ProxyError, ValueError):
            return None  # aiohttp's path refuses it, in its wire form
        if served is None:
            return None
        name = endpoint.server.name
        context = self._log_contexts.get(name)
        if context is None:  # the log context ``endpoint_entry`` binds, built once
            context = self._log_contexts[name] = contextvars.Context()
            context.run(bind_contextvars, upstream=name, principal=None)
        return FastCall(self.handoffs, endpoint, transport, context.copy(), *served)

    def _admit(
        self, endpoint: StreamableHttp, headers: dict[str, str], body: bytes
    ) -> tuple[SessionRunner, list[jsonrpc.Message], str | None, str] | None:
        """``StreamableHttp``'s checks of a POST, in its order, up to feeding the session:
        what to feed (the runner, the messages, ``Last-Event-ID``, the metrics' method), or
        None when aiohttp's path must serve it. Raises what that path would refuse with."""
        config = endpoint.config
        listen = config.listen
        host = headers.get("host", "")
        if self._hosts.get(host) is not listen:  # (checked for this listen section before)
            httprules.check_host(host or None, listen.allowed_hosts)  # (no Origin here)
            if len(self._hosts) >= 256:  # (bounded: hosts are the client's to choose)
                self._hosts.clear()
            self._hosts[host] = listen
        holds = _holds_for(headers.get("accept"))
        _json_body(headers.get("content-type"))
        if len(body) > config.sessions.max_message_bytes:
            return None
        messages, batch = jsonrpc.parse_body(body)
        message = messages[0]
        version = headers.get("mcp-protocol-version")
        existing = headers.get("mcp-session-id")
        registry = endpoint.registry
        if (
            batch
            or message.kind is not Kind.REQUEST
            or message.method in _POLLS
            or not existing
            or is_modern(message.raw, version, existing)
            or endpoint.responder.holds is None
            or not holds
        ):
            return None
        # admit_post's refusals (an initialize again; draining, or the server removed by a
        # reload) are aiohttp's path's to answer; what passes it goes to its session.
        server = endpoint.server
        if message.method == INITIALIZE or endpoint.context.draining or server.removed:
            return None
        runner = registry.get(existing, None, server)  # (unknown: SessionNotFound)
        httprules.check_protocol_version(version)
        if endpoint.modern is not None and runner.session.offers_tasks:
            return None
        if endpoint.stored.enabled and endpoint.stored.foreign(messages, runner.session.epoch):
            return None
        if runner.upstream.pending_bytes > config.upstream.max_pending_bytes:
            return None  # (check_session_reading refuses it on aiohttp's path)
        return runner, messages, headers.get("last-event-id"), method_label(message.method)

    def forget(self, transport: object) -> None:
        """A handoff aiohttp never took (its connection ended, or it refused the request
        before it reached the endpoint): the session forgets the connection."""
        handoff = self.handoffs.pop(transport, None)
        if handoff is not None:
            handoff.abandon()


def fast_posts(app: web.Application) -> FastPosts | None:
    """The app's fast POSTs (None when the app has none: aiohttp serves every request)."""
    return app.get(FAST_KEY)


FAST_KEY: web.AppKey[FastPosts] = web.AppKey("mcp_resume_proxy.fast_posts", FastPosts)
