"""The official SDK's own Streamable HTTP server, serving the fixture tools: a reference target.

The end-to-end tests are written against the proxy, but they can be pointed at this server
(``MCP_E2E_TARGET=sdk``) to check that a test expects what a resumable server built with the
`mcp` SDK actually does. It reads the same YAML file as the proxy and honours the keys the
tests use:

- ``listen.host`` / ``listen.port`` (``0``: the system picks one; either way, once it
  listens, it prints ``{"event": "fixture_listening", "port": N, "url": ...}`` on stdout,
  which tests/support.py ``listening_port`` reads);
- ``sse.retry_ms`` → the SDK's ``retry_interval`` (sent with each priming event);
- ``sse.max_stream_seconds`` → while ``slow`` or ``burst`` runs, its response stream is
  closed every that many seconds (SEP-1699 polling, ``ctx.close_sse_stream()``), which the SDK
  only does for clients at protocol 2025-11-25 or later.

The tools mirror ``tests/fixtures/legacy_server.py`` (echo, slow, burst, ask, crash). A stdio
server's ``crash`` kills the process and the proxy then forgets the session; here ``crash``
ends its own session with a ``DELETE`` (so later requests get 404) and fails the call.

Run: ``python tests/e2e/sdk_reference_server.py --config FILE.yaml``; SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import uvicorn
import yaml
from mcp.server.mcpserver import AcceptedElicitation, Context, MCPServer
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, JSONRPCMessage
from pydantic import BaseModel

SESSION_HEADER = "mcp-session-id"


@dataclass(frozen=True)
class _StoredEvent:
    event_id: int
    stream_id: StreamId
    message: JSONRPCMessage | None  # None marks a priming event


class MemoryEventStore(EventStore):
    """Every event of every stream, in one list; ids are one process-wide counter.

    Replay sends the stored messages of the stream that ``last_event_id`` belongs to, after
    it, in order, skipping priming events (they carry no message).
    """

    def __init__(self) -> None:
        self._events: list[_StoredEvent] = []
        self._by_id: dict[int, _StoredEvent] = {}
        self._ids = itertools.count(1)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event = _StoredEvent(next(self._ids), stream_id, message)
        self._events.append(event)
        self._by_id[event.event_id] = event
        return str(event.event_id)

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        try:
            last = self._by_id[int(last_event_id)]
        except (KeyError, ValueError):
            return None
        for event in list(self._events):
            if event.stream_id != last.stream_id or event.event_id <= last.event_id:
                continue
            if event.message is not None:
                await send_callback(EventMessage(event.message, str(event.event_id)))
        return last.stream_id


class Answer(BaseModel):
    answer: str


def build_server(*, url: str, max_stream_seconds: float | None) -> MCPServer:
    """An MCPServer with the fixture tools."""
    server = MCPServer("sdk-reference")

    @asynccontextmanager
    async def stream_limit(ctx: Context) -> AsyncIterator[None]:
        """Close the current response stream every ``max_stream_seconds`` while the body runs."""

        async def close_periodically() -> None:
            assert max_stream_seconds is not None
            while True:
                await asyncio.sleep(max_stream_seconds)
                await ctx.close_sse_stream()

        if not max_stream_seconds:
            yield
            return
        closer = asyncio.create_task(close_periodically())
        try:
            yield
        finally:
            closer.cancel()

    @server.tool()
    async def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    async def slow(ctx: Context, steps: int = 5, delay: float = 0.2) -> str:
        """Report one progress notification per step, ``delay`` seconds apart."""
        async with stream_limit(ctx):
            for step in range(1, steps + 1):
                await asyncio.sleep(delay)
                await ctx.report_progress(step, steps)
        return f"done {steps}"

    @server.tool()
    async def burst(ctx: Context, n: int = 100, size: int = 200) -> str:
        """Report ``n`` progress notifications as fast as possible, each with a message."""
        async with stream_limit(ctx):
            for step in range(1, n + 1):
                await ctx.report_progress(step, n, "x" * size)
        return f"burst {n}"

    @server.tool()
    async def ask(ctx: Context, question: str) -> str:
        """Ask the client (form elicitation) and return its answer."""
        result = await ctx.elicit(question, Answer)
        if not isinstance(result, AcceptedElicitation):
            return f"no answer ({result.action})"
        return result.data.answer

    @server.tool()
    async def crash(ctx: Context) -> str:
        """End this session (later requests on it get 404) and fail the call."""
        headers = ctx.headers or {}
        session_id = headers.get(SESSION_HEADER)
        if session_id is not None:
            async with httpx2.AsyncClient() as http:
                await http.delete(url, headers={SESSION_HEADER: session_id})
        raise MCPError(code=INTERNAL_ERROR, message="upstream server exited")

    return server


def load_config(path: Path) -> dict[str, Any]:
    loaded = yaml.safe_load(path.read_text())
    if not isinstance(loaded, dict):
        raise SystemExit(f"{path}: the config must be a mapping")
    return loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    args = parser.parse_args()
    config = load_config(args.config)
    listen = config.get("listen") or {}
    sse = config.get("sse") or {}
    host = str(listen.get("host", "127.0.0.1"))
    retry_ms = sse.get("retry_ms")
    max_stream_seconds = sse.get("max_stream_seconds")
    # Bound here, not by uvicorn, to know the port (``listen.port: 0``) before serving.
    # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on such sockets' connections.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, int(listen["port"])))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    port = sock.getsockname()[1]
    url = f"http://{host}:{port}/mcp"

    server = build_server(
        url=url,
        max_stream_seconds=float(max_stream_seconds) if max_stream_seconds else None,
    )
    app = server.streamable_http_app(
        event_store=MemoryEventStore(),
        retry_interval=int(retry_ms) if retry_ms is not None else None,
        session_idle_timeout=None,
    )
    logging.basicConfig(level=logging.INFO)
    # uvicorn shuts down gracefully on SIGTERM and then re-raises the signal with the handler
    # it found installed; make that one a no-op so a SIGTERM stop exits with status 0.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    print(json.dumps({"event": "fixture_listening", "port": port, "url": url}), flush=True)
    config_ = uvicorn.Config(app, log_level="info", timeout_graceful_shutdown=2)
    uvicorn.Server(config_).run(sockets=[sock])


if __name__ == "__main__":
    main()
