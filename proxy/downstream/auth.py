"""Inbound authentication: static bearer tokens, each naming a principal.

With ``auth.tokens`` set, every route but ``/healthz`` (and CORS preflights, which
browsers send without credentials) needs ``Authorization: Bearer TOKEN``; otherwise
``401`` with ``WWW-Authenticate: Bearer`` and a JSON-RPC error body. The principal the
token names is put on the request (``request[PRINCIPAL]``): sessions, streams, tasks and
MRTR states are bound to it, and another principal gets ``404`` / ``-32602`` for them,
never their data. Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from proxy.config import AuthConfig
from proxy.core.errors import ProxyError
from proxy.downstream.wire import error_response

log = structlog.get_logger("proxy.auth")

PRINCIPAL = "mcp_resume_proxy.principal"
_OPEN = frozenset({"/healthz"})


class Unauthorized(ProxyError):
    jsonrpc_code = -32600
    http_status = 401
    reason = "unauthorized"


def principal_of(request: web.Request) -> str | None:
    """Who the request comes from (None: authentication is off)."""
    found = request.get(PRINCIPAL)
    return found if isinstance(found, str) else None


class Authenticator:
    """Who a request comes from. Owned by the app: :meth:`start` on startup, :meth:`close`
    on cleanup (whatever it fetched or holds ends there)."""

    def __init__(self, settings: AuthConfig) -> None:
        self.settings = settings
        self._tokens = [(t.token.encode(), t.principal) for t in settings.tokens]

    @property
    def enabled(self) -> bool:
        return bool(self._tokens)

    async def start(self, app: web.Application | None = None) -> None:
        """Load what authentication needs before the first request."""

    async def close(self, app: web.Application | None = None) -> None:
        """Release what :meth:`start` took."""

    def principal_for(self, presented: str) -> str | None:
        """The principal a bearer credential names, or None."""
        given = presented.encode()
        principal = None
        for token, name in self._tokens:  # every token is compared: no early exit
            if hmac.compare_digest(token, given):
                principal = name
        return principal

    @web.middleware
    async def middleware(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        if not self.enabled or request.path in _OPEN or request.method == "OPTIONS":
            return await handler(request)
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        principal = None
        if scheme.lower() == "bearer" and presented.strip():
            principal = self.principal_for(presented.strip())
        if principal is None:
            error = Unauthorized("Unauthorized: a valid bearer token is required")
            log.info("request_refused", path=request.path, status=401, reason=error.reason)
            challenge = 'Bearer realm="mcp-resume-proxy"'
            if presented:
                challenge += ', error="invalid_token"'
            return error_response(error, {"WWW-Authenticate": challenge})
        request[PRINCIPAL] = principal
        return await handler(request)
