"""mcp-resume-proxy: resumable Streamable HTTP in front of legacy MCP servers."""

from __future__ import annotations

__all__ = ["__version__"]
__version__ = "0.1.0"
