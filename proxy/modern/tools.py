"""What the proxy knows of the upstream's tools: their ``inputSchema`` (for the
``x-mcp-header`` checks) and ``execution.taskSupport`` (a ``required`` tool needs the
Tasks extension; a ``forbidden`` one never becomes a task).

Fetched once with ``tools/list`` (every page) on a pooled session when first needed, and
again after the server says ``notifications/tools/list_changed``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from proxy.core.era import header_params
from proxy.core.errors import ProxyError
from proxy.modern.pool import UpstreamPool

log = structlog.get_logger("proxy.modern")

_PAGES = 100
_TIMEOUT_SECONDS = 30.0


class ToolIndex:
    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.tools: dict[str, dict[str, Any]] | None = None
        self._fetching: asyncio.Task[dict[str, dict[str, Any]]] | None = None
        self._annotated: dict[str, list[tuple[tuple[str, ...], str]]] = {}

    def invalidate(self) -> None:
        self.tools = None
        self._annotated.clear()

    def header_params(self, tool: dict[str, Any]) -> list[tuple[tuple[str, ...], str]]:
        """The tool's ``x-mcp-header`` annotations, worked out once per listing."""
        name = str(tool.get("name"))
        found = self._annotated.get(name)
        if found is None:
            found = self._annotated[name] = header_params(tool.get("inputSchema"))
        return found

    async def get(self) -> dict[str, dict[str, Any]]:
        if self.tools is not None:
            return self.tools
        if self._fetching is None or self._fetching.done():
            self._fetching = asyncio.ensure_future(self._fetch())
        return await asyncio.shield(self._fetching)

    async def _fetch(self) -> dict[str, dict[str, Any]]:
        tools: dict[str, dict[str, Any]] = {}
        session = await self.pool.acquire()
        try:
            cursor: Any = None
            for _ in range(_PAGES):
                answer = await session.ask(
                    "tools/list", {"cursor": cursor} if cursor else {}, _TIMEOUT_SECONDS
                )
                result = answer.raw.get("result")
                if not isinstance(result, dict):
                    break  # no tools (or no answer): nothing to check against
                for tool in result.get("tools") or []:
                    if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                        tools[tool["name"]] = tool
                cursor = result.get("nextCursor")
                if not cursor:
                    break
        except ProxyError as exc:
            log.warning("tool_index_not_fetched", error=exc.message)
            return tools  # not cached: the next call tries again
        finally:
            if self.pool.per_request:
                self.pool.idle(session)
        self.tools = tools
        return tools


def task_support(tool: dict[str, Any] | None) -> str | None:
    """``execution.taskSupport`` of a listed tool (2025-11-25 Tool field), if any."""
    execution = tool.get("execution") if tool else None
    support = execution.get("taskSupport") if isinstance(execution, dict) else None
    return support if isinstance(support, str) else None
