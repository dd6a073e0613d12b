"""What the proxy serves to clients (Streamable HTTP now; WebSocket and stdio shim later)."""
