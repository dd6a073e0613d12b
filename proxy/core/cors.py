"""Which headers a browser client of an allowed origin may send and read (Fetch §CORS).

A preflight (``OPTIONS`` with ``Access-Control-Request-Headers``) names the headers the
real request will carry; the answer's ``Access-Control-Allow-Headers`` must name each of
them or the browser never sends it. MCP's request headers are a fixed set plus, since
2026-07-28, one ``Mcp-Param-{Name}`` per ``x-mcp-header`` tool parameter (SEP-2243): names
no list can hold, so a requested header is allowed when it is in the set or has that
prefix, and echoed as the browser spelled it. Anything else is not an MCP header and is
not allowed (the browser then refuses to send it).

A response's headers beyond the CORS-safelisted ones are hidden from the page unless
``Access-Control-Expose-Headers`` names them: the session id, the negotiated version,
an auth challenge and a back-off are what MCP clients read.
"""

from __future__ import annotations

import re

# Every header an MCP client sends (2025-03-26 … 2026-07-28 transports), as the specs
# spell them.
REQUEST_HEADERS = (
    "Content-Type",
    "Accept",
    "Authorization",
    "Mcp-Session-Id",
    "MCP-Protocol-Version",
    "Last-Event-ID",
    "Mcp-Method",
    "Mcp-Name",
)
PARAM_HEADER_PREFIX = "mcp-param-"  # 2026-07-28: Mcp-Param-{Name} (SEP-2243)
_KNOWN = frozenset(name.lower() for name in REQUEST_HEADERS)
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 §5.6.2: a field name

# What a client reads from a response: the session (2025-03-26 §Session Management), the
# protocol version, the auth challenge of a 401 (RFC 6750; 2025-06-18 authorization),
# the back-off of a 429 or 503.
EXPOSED_HEADERS = "Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate, Retry-After"


def is_mcp_request_header(name: str) -> bool:
    lowered = name.strip().lower()
    if lowered in _KNOWN:
        return True
    return (
        lowered.startswith(PARAM_HEADER_PREFIX)
        and len(lowered) > len(PARAM_HEADER_PREFIX)
        and _TOKEN.fullmatch(lowered) is not None
    )


def allowed_request_headers(requested: str | None) -> str:
    """``Access-Control-Allow-Headers`` for a preflight that asked for ``requested``
    (the ``Access-Control-Request-Headers`` value): every MCP header, and those of the
    requested ones that are MCP headers but not in the fixed set (``Mcp-Param-*``)."""
    allowed = list(REQUEST_HEADERS)
    seen = set(_KNOWN)
    for name in (requested or "").split(","):
        name = name.strip()
        if name and name.lower() not in seen and is_mcp_request_header(name):
            allowed.append(name)
            seen.add(name.lower())
    return ", ".join(allowed)
