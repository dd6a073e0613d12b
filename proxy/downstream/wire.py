"""What both client endpoints (``/mcp`` and ``/ws``) put on HTTP alike.

:func:`error_response` is the one place a :class:`~proxy.core.errors.ProxyError` becomes
an HTTP response (``/ws`` refuses an upgrade with it too); ``guard.raw_error_response``
writes the same bytes where aiohttp has no request to answer.
"""

from __future__ import annotations

import math
from typing import Any

from aiohttp import web

from proxy.core.errors import Draining, ProxyError, RateLimited


def error_response(error: ProxyError, headers: dict[str, str] | None = None) -> web.Response:
    """The one place a :class:`ProxyError` becomes HTTP: its status and a JSON-RPC body
    (and ``Retry-After``, in whole seconds, when it says when to come back)."""
    if isinstance(error, RateLimited | Draining):
        headers = {**(headers or {}), "Retry-After": str(max(1, math.ceil(error.retry_after)))}
    return web.json_response(error.to_jsonrpc(), status=error.http_status, headers=headers)


def forwarded_refusal(status: int, error: dict[str, Any]) -> web.Response:
    """A refusal that the replica holding the session sent back (``Refused``), written as
    :func:`error_response` wrote it there: a draining holder's with ``Retry-After``."""
    data = error.get("error", {}).get("data") if isinstance(error.get("error"), dict) else None
    headers = None
    if isinstance(data, dict) and data.get("reason") == Draining.reason:
        headers = {"Retry-After": str(max(1, math.ceil(Draining.retry_after)))}
    return web.json_response(error, status=status, headers=headers)
