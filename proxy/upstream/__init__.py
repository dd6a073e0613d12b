"""Upstream transports: how the proxy talks to the MCP server it fronts (DESIGN.md §2)."""

from __future__ import annotations

from typing import cast

from proxy import tracing
from proxy.upstream.base import Upstream, UpstreamContext

__all__ = ["UpstreamContext", "open_upstream"]


def open_upstream(context: UpstreamContext) -> Upstream:
    """The transport ``context.config`` names, not yet started (the caller awaits
    ``start``)."""
    kind = context.config.kind
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
    return cast(Upstream, tracing.wrap_upstream(context, cls))
