"""What both client endpoints (``/mcp`` and ``/ws``) put on HTTP alike.

:func:`error_response` is the one place a :class:`~proxy.core.errors.ProxyError` becomes
an HTTP response (``/ws`` refuses an upgrade with it too); ``guard.raw_error_response``
writes the same bytes where aiohttp has no request to answer.
"""

from __future__ import annotations

import math

from aiohttp import web

from proxy.core.errors import ProxyError


def error_response(error: ProxyError, headers: dict[str, str] | None = None) -> web.Response:
    """The one place a :class:`ProxyError` becomes HTTP: its status and a JSON-RPC body
    (and ``Retry-After``, in whole seconds, when it says when to come back)."""
    if error.retry_after is not None:
        headers = {**(headers or {}), "Retry-After": str(max(1, math.ceil(error.retry_after)))}
    return web.json_response(error.to_jsonrpc(), status=error.http_status, headers=headers)
