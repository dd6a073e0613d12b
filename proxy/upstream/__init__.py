"""Clients of the legacy servers the proxy fronts (stdio now; HTTP, SSE, WebSocket later)."""
