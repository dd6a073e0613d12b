"""The proxy's one error hierarchy, and the error answers it writes in a server's place.

Every ``ProxyError`` subclass in the package, wherever it is defined (code / HTTP status)::

    ProxyError                      every error the proxy raises on purpose  -32603 / 500
    ├── ProtocolError               the peer sent something we refuse        -32600 / 400
    │   ├── ParseError              body is not JSON                         -32700 / 400
    │   ├── InvalidMessage          JSON but not JSON-RPC 2.0                 -32600 / 400
    │   ├── BadRequest              HTTP-level misuse (headers, batch)        -32600 / 400
    │   ├── NotAcceptable           Accept header lacks a needed type         -32600 / 406
    │   ├── UnsupportedMediaType    Content-Type is not JSON                  -32600 / 415
    │   ├── PayloadTooLarge         message over the size limit               -32600 / 413
    │   ├── ForbiddenOrigin         Origin not allowed (DNS rebinding)        -32600 / 403
    │   ├── Unauthorized            no valid bearer credential (inbound auth) -32600 / 401
    │   ├── Forbidden               only ``auth.operators`` may read this     -32600 / 403
    │   ├── InsufficientScope       a JWT lacks a scope the path requires     -32600 / 403
    │   ├── MisdirectedHost         Host not allowed (DNS rebinding)          -32600 / 421
    │   ├── RequestTimeout          request not received in time              -32600 / 408
    │   ├── MethodNotAllowed        HTTP method not served                    -32600 / 405
    │   ├── UnknownServer           a path that names no configured server    -32600 / 404
    │   │   └── ServerRemoved       a server a reload removed, draining       -32600 / 404
    │   └── SSEDecodeError          (core/sse.py) an SSE stream we cannot read -32600 / 400
    ├── SessionNotFound             unknown or ended session                  -32001 / 404
    ├── Conflict                    e.g. a second standalone GET stream       -32600 / 409
    ├── Overloaded                  a configured limit refuses new work       -32000 / 503
    ├── RateLimited                 a principal resumes or polls too fast     -32000 / 429
    ├── Draining                    a draining replica takes no new work      -32000 / 503
    ├── UpstreamStartFailed         upstream cannot start or be reached       -32603 / 502
    │   └── UpstreamUnauthorized    (upstream/oauth.py) the upstream refuses the proxy
    │                               (401/403) and it cannot cure that: ``data`` names
    │                               the server and the action                 -32000 / 502
    ├── ResumeError                 a resume that cannot be served whole      -32602 / 400|410
    │       (``reason`` says why: malformed_event_id, wrong_session, unknown_stream,
    │       unknown_position, history_truncated, abandoned, stream_completed,
    │       invalid_token, busy)
    ├── IllegalTransition           (core/stream.py) a stream state change the
    │                               table forbids: a bug, never the peer's    -32603 / 500
    ├── IllegalCallTransition       (core/call.py) a modern call's status change the
    │                               table forbids: a bug, never the peer's    -32603 / 500
    ├── ModernError                 (core/era.py) a 2026-07-28 request refused with the
    │                               spec's code and ``data``: -32020 header mismatch,
    │                               -32021 missing capability, -32022 unsupported
    │                               version, -32601, -32602                   code / given (400)
    ├── DiscoveryError              (upstream/oauth_meta.py) an upstream's OAuth
    │                               metadata or token endpoint cannot be had; the
    │                               OAuth client answers it as UpstreamStartFailed
    ├── TokenRefused                (upstream/oauth_meta.py) a token endpoint's
    │                               refusal (``error``); answered as
    │                               UpstreamUnauthorized
    ├── TokenFileError              (upstream/oauth_tokens.py) the token file cannot
    │                               be read or written; answered as
    │                               UpstreamUnauthorized
    ├── LoginError                  (upstream/oauth_login.py) ``login`` cannot
    │                               complete: printed, exit 1, never on the wire
    ├── OwnerUnreachable            (replicas.py) the replica owning a session
    │                               cannot be reached                         -32000 / 503
    └── StoreUnavailable            the store (Redis, SQLite) did not answer within
                                    store.unavailable_wait_seconds            -32000 / 503

Each error knows its JSON-RPC code and HTTP status; transports turn it into wire form at
exactly one place (``ProxyError.to_jsonrpc``). The codes are named in
:mod:`proxy.core.protocol`.

The other answers the proxy writes are not refusals of the client's request but answers
in place of the server's (its request can no longer be answered) and answers to the
server's own requests. They are built here too: :func:`error_object` and
:func:`error_message` for any code, :func:`lost_error` and :func:`lost_answer` for a
request whose answer is lost, whose ``data.reason`` is one of the closed set
:class:`LostReason`::

    LostReason                      code -32000 (SERVER_ERROR), data {"reason": ...}
    ├── proxy_shutdown              the proxy stops (core/lifetime.py, modern)
    ├── upstream_closed             the server exited or its session ended (modern)
    ├── upstream_restarted          the stdio server was restarted (core/lifetime.py)
    ├── owner_lost                  the replica running it died (store/open.py, tasks)
    ├── proxy_restarted             the proxy restarted while it ran (store/open.py, tasks)
    ├── task_cancelled              its task was cancelled (modern/legacy_tasks.py)
    └── upstream_message_too_large  an answer over upstream.max_line_bytes (stdio.py;
                                    ``data.limit`` too)
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from proxy.core.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    JSONRPC_VERSION,
    PARSE_ERROR,
    SERVER_ERROR,
    SESSION_NOT_FOUND,
)


class LostReason(StrEnum):
    """``data.reason`` of an answer the proxy writes in the server's place: the request
    can no longer be answered by it. A closed set: a new reason is a new member here."""

    PROXY_SHUTDOWN = "proxy_shutdown"
    UPSTREAM_CLOSED = "upstream_closed"
    UPSTREAM_RESTARTED = "upstream_restarted"
    OWNER_LOST = "owner_lost"
    PROXY_RESTARTED = "proxy_restarted"
    TASK_CANCELLED = "task_cancelled"
    UPSTREAM_MESSAGE_TOO_LARGE = "upstream_message_too_large"


def error_object(code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error object (JSON-RPC 2.0 §5.1); ``data`` only when given."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return error


def error_message(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error response to ``request_id`` (JSON-RPC 2.0 §5: ``id`` null when the
    request's id cannot be known)."""
    return answer_with_error(request_id, error_object(code, message, data))


def answer_with_error(request_id: Any, error: dict[str, Any]) -> dict[str, Any]:
    """A JSON-RPC error response carrying an error object as it is (one a peer wrote, or
    one of :func:`error_object`, :func:`lost_error`) to ``request_id``."""
    return {"jsonrpc": JSONRPC_VERSION, "id": request_id, "error": error}


def lost_error(reason: LostReason, message: str) -> dict[str, Any]:
    """The error object of an answer written in the server's place (DESIGN.md §3: each
    request ends with exactly one response, the server's or one the proxy writes)."""
    return error_object(SERVER_ERROR, message, {"reason": reason.value})


def lost_answer(request_id: Any, reason: LostReason, message: str) -> dict[str, Any]:
    """The error response written in the server's place to ``request_id``."""
    return error_message(request_id, SERVER_ERROR, message, {"reason": reason.value})


class ProxyError(Exception):
    """Root of every error the proxy raises on purpose."""

    jsonrpc_code: int = INTERNAL_ERROR
    http_status: int = 500
    reason: str | None = None
    data: Any = None
    retry_after: float | None = None  # seconds: HTTP says when to come back (Retry-After)

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        http_status: int | None = None,
        request_id: Any = None,
        data: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason
        if http_status is not None:
            self.http_status = http_status
        self.request_id = request_id
        if data is not None:
            self.data = data

    def to_jsonrpc(self, request_id: Any = None) -> dict[str, Any]:
        """The JSON-RPC error response for this error: to ``request_id``, else to the
        request the error names, else ``id`` null (JSON-RPC 2.0 §5). Its ``data`` is the
        one given, else ``{"reason": reason}`` when the error has a reason."""
        data = self.data
        if data is None and self.reason is not None:
            data = {"reason": self.reason}
        rid = self.request_id if request_id is None else request_id
        return error_message(rid, self.jsonrpc_code, self.message, data)


class ProtocolError(ProxyError):
    jsonrpc_code = INVALID_REQUEST
    http_status = 400


class ParseError(ProtocolError):
    jsonrpc_code = PARSE_ERROR
    reason = "parse_error"


class InvalidMessage(ProtocolError):
    reason = "invalid_message"


class BadRequest(ProtocolError):
    reason = "bad_request"


class NotAcceptable(ProtocolError):
    http_status = 406
    reason = "not_acceptable"


class UnsupportedMediaType(ProtocolError):
    http_status = 415
    reason = "unsupported_media_type"


class PayloadTooLarge(ProtocolError):
    http_status = 413
    reason = "payload_too_large"


class ForbiddenOrigin(ProtocolError):
    http_status = 403
    reason = "forbidden_origin"


class Unauthorized(ProtocolError):
    """No valid bearer credential (inbound auth): ``401`` with ``WWW-Authenticate``."""

    http_status = 401
    reason = "unauthorized"


class Forbidden(ProtocolError):
    """An authenticated principal asks for what only ``auth.operators`` may read."""

    http_status = 403
    reason = "forbidden"


class InsufficientScope(ProtocolError):
    """A valid JWT without a scope the path requires (``auth.jwt.required_scopes``,
    ``servers.NAME.required_scopes``): ``403`` with ``error="insufficient_scope"``."""

    http_status = 403
    reason = "insufficient_scope"


class MisdirectedHost(ProtocolError):
    http_status = 421
    reason = "misdirected_host"


class RequestTimeout(ProtocolError):
    """A request's headers or body did not arrive in time (a slow or stalled client)."""

    http_status = 408
    reason = "request_timeout"


class MethodNotAllowed(ProtocolError):
    http_status = 405
    reason = "method_not_allowed"


class UnknownServer(ProtocolError):
    """A path that names no configured server (or ``/mcp`` with several configured)."""

    http_status = 404
    reason = "unknown_server"


class SessionNotFound(ProxyError):
    jsonrpc_code = SESSION_NOT_FOUND
    http_status = 404
    reason = "session_not_found"


class Conflict(ProxyError):
    jsonrpc_code = INVALID_REQUEST
    http_status = 409
    reason = "conflict"


class Overloaded(ProxyError):
    """A configured limit (sessions, streams) refuses new work; existing work goes on."""

    jsonrpc_code = SERVER_ERROR
    http_status = 503
    reason = "overloaded"


class RateLimited(ProxyError):
    """A principal resumes or polls faster than ``auth.per_principal.resumes_per_minute``:
    ``429`` with ``Retry-After`` (RFC 9110 §10.2.3); nothing else of it is refused."""

    jsonrpc_code = SERVER_ERROR
    http_status = 429
    reason = "rate_limited"

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Draining(ProxyError):
    """This replica drains before it stops (SIGTERM, ``listen.drain_seconds``): no new
    session and no new call, so that a balancer or the client takes them to another
    replica: ``503`` with ``Retry-After`` (RFC 9110 §15.6.4, §10.2.3). What finishes work
    already here (answers, resumes, polls, task reads) is still served."""

    jsonrpc_code = SERVER_ERROR
    http_status = 503
    reason = "proxy_draining"
    retry_after = 1.0

    def __init__(
        self, message: str = "the proxy is draining: send this to another replica"
    ) -> None:
        super().__init__(message)


class ServerRemoved(UnknownServer):
    """A reload removed this server from the config (proxy/reload.py): it takes no new
    session and no new call while what is in flight finishes, then its sessions end."""

    reason = "server_removed"

    def __init__(
        self, message: str = "Not Found: this server was removed from the proxy's config"
    ) -> None:
        super().__init__(message)


class StoreUnavailable(ProxyError):
    """The store could not be read or written for a request within the bounded wait
    (``store.unavailable_wait_seconds``): ``503`` with ``Retry-After``. Nothing of the
    request was done that the client could miss; it may send it again."""

    jsonrpc_code = SERVER_ERROR
    http_status = 503
    reason = "store_unavailable"

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class UpstreamStartFailed(ProxyError):
    """The upstream cannot be had for a new session: its command does not start, its URL
    cannot be reached, or its configured headers cannot be resolved."""

    jsonrpc_code = INTERNAL_ERROR
    http_status = 502
    reason = "upstream_start_failed"


# ``data.reason`` of an error for an upstream that refuses the proxy (401, 403) when no
# credentials the proxy has cure it (proxy/upstream/oauth.py; docs/errors.md).
UPSTREAM_UNAUTHORIZED = "upstream_unauthorized"
UPSTREAM_FORBIDDEN = "upstream_forbidden"
UPSTREAM_REFUSALS = (UPSTREAM_UNAUTHORIZED, UPSTREAM_FORBIDDEN)


class ResumeError(ProxyError):
    """A resume that cannot be served whole. Never a partial replay (DESIGN.md §3)."""

    jsonrpc_code = INVALID_PARAMS
    http_status = 400

    # Reasons whose history is gone for good answer 410 Gone; the rest are 400.
    _GONE = frozenset({"unknown_stream", "history_truncated", "abandoned", "stream_completed"})

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message, reason=reason, http_status=410 if reason in self._GONE else 400)
