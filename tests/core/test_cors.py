"""CORS header rules (proxy/core/cors.py): a preflight allows every MCP request header,
``Mcp-Param-*`` included, and nothing else; responses expose what clients read."""

from __future__ import annotations

from proxy.core.cors import EXPOSED_HEADERS, REQUEST_HEADERS, allowed_request_headers


def names(value: str) -> list[str]:
    return [part.strip() for part in value.split(",")]


def test_every_fixed_mcp_header_is_allowed_whatever_was_requested() -> None:
    for requested in (None, "", "content-type"):
        assert names(allowed_request_headers(requested)) == list(REQUEST_HEADERS)
    for name in ("Mcp-Session-Id", "MCP-Protocol-Version", "Last-Event-ID", "Mcp-Name"):
        assert name in REQUEST_HEADERS


def test_requested_mcp_param_headers_are_echoed_and_others_are_not() -> None:
    requested = "mcp-method, Mcp-Param-Region,mcp-param-x_y , x-custom, mcp-param-, mcp-param-a b"
    allowed = names(allowed_request_headers(requested))
    assert allowed == [*REQUEST_HEADERS, "Mcp-Param-Region", "mcp-param-x_y"]
    assert "x-custom" not in allowed and "mcp-param-" not in allowed


def test_what_clients_read_is_exposed() -> None:
    exposed = names(EXPOSED_HEADERS)
    for name in ("Mcp-Session-Id", "MCP-Protocol-Version", "WWW-Authenticate", "Retry-After"):
        assert name in exposed
