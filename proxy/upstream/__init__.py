"""Upstream transports: how the proxy talks to the MCP server it fronts (DESIGN.md §2)."""

from __future__ import annotations

from proxy.config import UpstreamConfig
from proxy.upstream.base import OnClosed, OnMessage, Upstream, UpstreamHealth


def open_upstream(
    config: UpstreamConfig,
    *,
    session_id: str,
    on_message: OnMessage,
    on_closed: OnClosed,
    health: UpstreamHealth,
) -> Upstream:
    """The transport ``config`` names, not yet started (the caller awaits ``start``)."""
    kind = config.kind
    cls: type[Upstream]
    if kind == "stdio":
        from proxy.upstream.stdio import StdioUpstream

        cls = StdioUpstream
    elif kind == "streamable-http":
        from proxy.upstream.http import HttpUpstream

        cls = HttpUpstream
    elif kind == "sse":
        from proxy.upstream.sse import SseUpstream

        cls = SseUpstream
    elif kind == "websocket":
        from proxy.upstream.websocket import WebSocketUpstream

        cls = WebSocketUpstream
    else:  # pragma: no cover - config validation refuses other values
        raise ValueError(f"unknown upstream transport {kind!r}")
    return cls(
        config,
        session_id=session_id,
        on_message=on_message,
        on_closed=on_closed,
        health=health,
    )
