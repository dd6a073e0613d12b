"""The protocol's names and numbers that more than one module uses: header names and
every JSON-RPC error code the proxy writes, each named once.

Transport rules built on them live in :mod:`proxy.core.httprules`; the errors the proxy
raises, each with its code and HTTP status, and the builders of the error answers it
writes in a server's place, in :mod:`proxy.core.errors`.
"""

from __future__ import annotations

JSONRPC_VERSION = "2.0"

# Streamable HTTP headers (2025-03-26 and later basic/transports).
SESSION_HEADER = "Mcp-Session-Id"  # §Session Management
VERSION_HEADER = "MCP-Protocol-Version"  # 2025-06-18 §Protocol Version Header
LAST_EVENT_ID = "Last-Event-ID"  # §Resumability and Redelivery (WHATWG SSE)

# JSON-RPC 2.0 §5.1: the pre-defined errors.
PARSE_ERROR = -32700
"""Invalid JSON was received."""
INVALID_REQUEST = -32600
"""The JSON sent is not a valid Request object (the proxy also uses it for HTTP-level
misuse: headers, batches, sizes)."""
METHOD_NOT_FOUND = -32601
"""The method does not exist or is not available."""
INVALID_PARAMS = -32602
"""Invalid method parameters (a resume the proxy cannot serve whole, a bad task id)."""
INTERNAL_ERROR = -32603
"""Internal JSON-RPC error (an upstream that cannot be had, a refusal with no code)."""

# MCP basic/utilities/cancellation: the answer to a request the proxy cancelled.
REQUEST_CANCELLED = -32800

# JSON-RPC 2.0 §5.1: -32000 to -32099 are reserved for implementation-defined server
# errors. The proxy's own answers in place of an upstream's use these two.
SERVER_ERROR = -32000
"""A request whose answer can no longer come: the server exited or cannot be reached, the
proxy shuts down, the answer is over a limit, a configured limit refuses new work."""
SESSION_NOT_FOUND = -32001
"""The session is unknown or has ended (HTTP 404): the client re-initializes."""

# MCP 2026-07-28 basic/transports/streamable-http.mdx §Server Validation.
HEADER_MISMATCH = -32020
"""A mirrored header (``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name``,
``Mcp-Param-*``) is missing or differs from the body."""
MISSING_CAPABILITY = -32021
"""The request needs a client capability its ``_meta`` does not declare."""
UNSUPPORTED_VERSION = -32022
"""The request's protocol version is not one the proxy serves."""
