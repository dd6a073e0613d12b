"""The protocol's names and numbers that more than one module uses: header names and the
JSON-RPC error codes the proxy itself answers with.

Transport rules built on them live in :mod:`proxy.core.httprules`; the errors the proxy
raises, each with its code and HTTP status, in :mod:`proxy.core.errors`.
"""

from __future__ import annotations

# Streamable HTTP headers (2025-03-26 and later basic/transports).
SESSION_HEADER = "Mcp-Session-Id"  # §Session Management
VERSION_HEADER = "MCP-Protocol-Version"  # 2025-06-18 §Protocol Version Header
LAST_EVENT_ID = "Last-Event-ID"  # §Resumability and Redelivery (WHATWG SSE)

# JSON-RPC 2.0 §5.1: -32000 to -32099 are reserved for implementation-defined server
# errors. The proxy's own answers in place of an upstream's use these two.
SERVER_ERROR = -32000
"""A request whose answer can no longer come: the server exited or cannot be reached, the
proxy shuts down, the answer is over a limit, a configured limit refuses new work."""
SESSION_NOT_FOUND = -32001
"""The session is unknown or has ended (HTTP 404): the client re-initializes."""
