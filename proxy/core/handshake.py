"""Initializing an MCP server on the proxy's behalf: the pure parts.

2025-11-25 basic/lifecycle §Initialization: the client sends ``initialize``, the server
answers with its capabilities, the client then sends ``notifications/initialized``. The
proxy does this itself in two cases, with one driver
(:func:`proxy.upstream.handshake.initialize`):

- again for a client, on a new upstream session the client never sees (a stdio server
  restarted, an HTTP server that forgot the session): with the client's own params;
- for itself (the 2026-07-28 pool's sessions, ``/readyz``'s probe): with
  :func:`proxy_params`.

The core marks the client's own handshake messages as it forwards them
(:class:`HandshakeStep` on :class:`~proxy.core.events.SendUpstream`), so that no transport
has to recognise them in the bytes it sends.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from proxy.core.errors import UPSTREAM_REFUSALS, UpstreamStartFailed
from proxy.core.jsonrpc import Message
from proxy.core.protocol import JSONRPC_VERSION

PROXY_PROTOCOL_VERSION = "2025-11-25"
"""The revision the proxy asks a legacy server for when it initializes for itself."""

INITIALIZE = "initialize"
INITIALIZED = "notifications/initialized"


class HandshakeStep(Enum):
    """Which message of the client's own handshake a forwarded payload is."""

    INITIALIZE = "initialize"  # the client's initialize request (id already rewritten)
    INITIALIZED = "initialized"  # the client's notifications/initialized


def proxy_params(version: str) -> dict[str, Any]:
    """The params of the proxy's own ``initialize``: everything a server may ask a client
    for is declared (the proxy passes questions on, or refuses them itself), and
    ``clientInfo`` names the proxy at ``version``."""
    return {
        "protocolVersion": PROXY_PROTOCOL_VERSION,
        "capabilities": {
            "elicitation": {"form": {}, "url": {}},
            "sampling": {},
            "roots": {},
        },
        "clientInfo": {"name": "mcp-resume-proxy", "version": version},
    }


def client_params(request: dict[str, Any]) -> dict[str, Any]:
    """The params of the client's ``initialize`` as it went upstream (to replay them)."""
    params = request.get("params")
    return params if isinstance(params, dict) else {}


def initialize_result(answer: Message) -> dict[str, Any]:
    """The ``InitializeResult`` of a server's answer; :class:`UpstreamStartFailed` if it
    refused (an error) or answered with something that is not an object."""
    result = answer.raw.get("result")
    error = answer.raw.get("error")
    if isinstance(error, dict) and _proxy_refusal(error):  # says what is wrong already
        raise UpstreamStartFailed(error["message"])
    if answer.is_error or not isinstance(result, dict):
        raise UpstreamStartFailed(f"the MCP server refused initialize: {error}")
    return result


def _proxy_refusal(error: dict[str, Any]) -> bool:
    """An error the proxy wrote for an upstream that refuses it (401/403:
    proxy/upstream/oauth.py), which names the server and what to do."""
    if not isinstance(error.get("message"), str):
        return False
    data = error.get("data")
    return isinstance(data, dict) and data.get("reason") in UPSTREAM_REFUSALS


def initialized_notification() -> dict[str, Any]:
    """``notifications/initialized``, sent once the server answered ``initialize``."""
    return {"jsonrpc": JSONRPC_VERSION, "method": INITIALIZED}
