"""The proxy's one error hierarchy.

::

    ProxyError                      every error the proxy raises on purpose
    ├── ProtocolError               the peer sent something we refuse
    │   ├── ParseError              body is not JSON                    -32700 / 400
    │   ├── InvalidMessage          JSON but not JSON-RPC 2.0            -32600 / 400
    │   ├── BadRequest              HTTP-level misuse (headers, batch)   -32600 / 400
    │   ├── NotAcceptable           Accept header lacks a needed type    -32600 / 406
    │   ├── UnsupportedMediaType    Content-Type is not JSON             -32600 / 415
    │   ├── PayloadTooLarge         message over the size limit          -32600 / 413
    │   ├── ForbiddenOrigin         Origin not allowed (DNS rebinding)   -32600 / 403
    │   ├── MisdirectedHost         Host not allowed (DNS rebinding)     -32600 / 421
    │   ├── RequestTimeout          request not received in time         -32600 / 408
    │   └── MethodNotAllowed        HTTP method not served               -32600 / 405
    ├── SessionNotFound             unknown or ended session             -32001 / 404
    ├── Conflict                    e.g. a second standalone GET stream  -32600 / 409
    ├── Overloaded                  a configured limit refuses new work  -32000 / 503
    ├── UpstreamStartFailed         upstream cannot start or be reached  -32603 / 502
    └── ResumeError                 a resume that cannot be served whole -32602 / 400|410
            (``reason`` says why: malformed_event_id, wrong_session, unknown_stream,
            unknown_position, history_truncated, abandoned, stream_completed,
            invalid_token, busy)

Each error knows its JSON-RPC code and HTTP status; transports turn it into wire form at
exactly one place (``ProxyError.to_jsonrpc``).
"""

from __future__ import annotations

from typing import Any

from proxy.core.protocol import SERVER_ERROR, SESSION_NOT_FOUND


class ProxyError(Exception):
    """Root of every error the proxy raises on purpose."""

    jsonrpc_code: int = -32603
    http_status: int = 500
    reason: str | None = None

    def __init__(
        self,
        message: str,
        *,
        reason: str | None = None,
        http_status: int | None = None,
        request_id: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if reason is not None:
            self.reason = reason
        if http_status is not None:
            self.http_status = http_status
        self.request_id = request_id

    def to_jsonrpc(self, request_id: Any = None) -> dict[str, Any]:
        """The JSON-RPC error response for this error: to ``request_id``, else to the
        request the error names, else ``id`` null (JSON-RPC 2.0 §5)."""
        error: dict[str, Any] = {"code": self.jsonrpc_code, "message": self.message}
        if self.reason is not None:
            error["data"] = {"reason": self.reason}
        rid = self.request_id if request_id is None else request_id
        return {"jsonrpc": "2.0", "id": rid, "error": error}


class ProtocolError(ProxyError):
    jsonrpc_code = -32600
    http_status = 400


class ParseError(ProtocolError):
    jsonrpc_code = -32700
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
    jsonrpc_code = -32600
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


class UpstreamStartFailed(ProxyError):
    """The upstream cannot be had for a new session: its command does not start, its URL
    cannot be reached, or its configured headers cannot be resolved."""

    jsonrpc_code = -32603
    http_status = 502
    reason = "upstream_start_failed"


class ResumeError(ProxyError):
    """A resume that cannot be served whole. Never a partial replay (DESIGN.md §3)."""

    jsonrpc_code = -32602
    http_status = 400

    # Reasons whose history is gone for good answer 410 Gone; the rest are 400.
    _GONE = frozenset({"unknown_stream", "history_truncated", "abandoned", "stream_completed"})

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message, reason=reason, http_status=410 if reason in self._GONE else 400)
