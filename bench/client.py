"""A raw aiohttp MCP client for the benchmark (not the SDK: the client must not be the
bottleneck), the probes that read a process's CPU time and RSS from ``/proc``, and what the
phase scripts (``load.py``, ``memory.py``) share: their command line and their output."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import aiohttp

# The phase scripts run as ``python bench/NAME.py``: the repository root is not on the path.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.sse_wire import SseEvent, SseSplitter

PROTOCOL_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
ACCEPT = "application/json, text/event-stream"
SESSION_HEADER = "Mcp-Session-Id"
CLK_TCK = os.sysconf("SC_CLK_TCK")


async def sse_events(resp: aiohttp.ClientResponse) -> AsyncIterator[SseEvent]:
    """The events of an SSE body, each with the id it was sent with (see tests/sse_wire.py)."""
    splitter = SseSplitter()
    async for chunk in resp.content.iter_any():
        for event in splitter.feed(chunk):
            yield event


async def until_healthy(http: aiohttp.ClientSession, port: int, tries: int = 600) -> None:
    """Wait until the proxy on ``port`` answers ``/healthz`` with 200 (``tries`` looks,
    0.2 s apart); RuntimeError if it never does."""
    for _ in range(tries):
        try:
            async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError(f"no proxy answered /healthz on port {port}")


def http_client(total_s: float) -> aiohttp.ClientSession:
    """An HTTP client with no limit on its connections (each session may hold several open),
    whose requests fail after ``total_s`` seconds."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=total_s)
    )


class McpSession:
    """One MCP session over Streamable HTTP."""

    def __init__(self, http: aiohttp.ClientSession, url: str) -> None:
        self.http = http
        self.url = url
        self.session_id: str | None = None
        self._ids = itertools.count(1)

    def headers(self, accept: str = ACCEPT) -> dict[str, str]:
        headers = {"Accept": accept, "MCP-Protocol-Version": PROTOCOL_VERSION}
        if self.session_id is not None:
            headers[SESSION_HEADER] = self.session_id
        return headers

    async def initialize(self) -> None:
        rid = next(self._ids)
        body = {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "initialize",
            "params": {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "bench-load", "version": "1"},
            },
        }
        async with self.http.post(self.url, json=body, headers=self.headers()) as resp:
            resp.raise_for_status()
            self.session_id = resp.headers.get(SESSION_HEADER)
            await self._response(resp, rid)
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with self.http.post(self.url, json=note, headers=self.headers()) as resp:
            if resp.status != 202:
                raise RuntimeError(f"notifications/initialized: HTTP {resp.status}")

    async def close(self) -> None:
        if self.session_id is not None:
            async with self.http.delete(self.url, headers=self.headers()):
                pass
            self.session_id = None

    def call_body(self, tool: str, args: dict[str, Any], token: int | None) -> dict[str, Any]:
        params: dict[str, Any] = {"name": tool, "arguments": args}
        if token is not None:
            params["_meta"] = {"progressToken": token}
        return {"jsonrpc": "2.0", "id": next(self._ids), "method": "tools/call", "params": params}

    async def call(
        self,
        tool: str,
        args: dict[str, Any],
        *,
        token: int | None = None,
        on_notification: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        body = self.call_body(tool, args, token)
        async with self.http.post(self.url, json=body, headers=self.call_headers(tool)) as resp:
            resp.raise_for_status()
            return await self._response(resp, body["id"], on_notification)

    def call_headers(self, tool: str) -> dict[str, str]:
        return self.headers()

    async def _response(
        self,
        resp: aiohttp.ClientResponse,
        rid: int,
        on_notification: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        if resp.content_type == "application/json":
            msg: dict[str, Any] = await resp.json()
            return msg
        async for event in sse_events(resp):
            if not event.data:
                continue  # priming event
            msg = json.loads(event.data)
            if msg.get("id") == rid and "method" not in msg:
                if "error" in msg:
                    raise RuntimeError(f"JSON-RPC error: {msg['error']}")
                return msg
            if on_notification is not None and "method" in msg:
                on_notification(msg)
        raise RuntimeError(f"stream ended without the response to {rid}")


class ModernSession(McpSession):
    """A 2026-07-28 client: no ``initialize``, no session. Each request is its own POST
    with the ``_meta`` envelope and the mirrored ``Mcp-Method`` / ``Mcp-Name`` headers
    (2026-07-28 transports, Streamable HTTP); it declares no client capability, so no call
    becomes a task. The load phases use it exactly as they use :class:`McpSession`."""

    async def initialize(self) -> None:
        return None  # stateless: nothing to set up

    async def close(self) -> None:
        return None

    def headers(self, accept: str = ACCEPT) -> dict[str, str]:
        return {"Accept": accept, "MCP-Protocol-Version": MODERN_VERSION}

    def call_body(self, tool: str, args: dict[str, Any], token: int | None) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        if token is not None:
            meta["progressToken"] = token
        params = {"name": tool, "arguments": args, "_meta": meta}
        return {"jsonrpc": "2.0", "id": next(self._ids), "method": "tools/call", "params": params}

    def call_headers(self, tool: str) -> dict[str, str]:
        return self.headers() | {"Mcp-Method": "tools/call", "Mcp-Name": tool}

    async def call(
        self,
        tool: str,
        args: dict[str, Any],
        *,
        token: int | None = None,
        on_notification: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        msg = await super().call(tool, args, token=token, on_notification=on_notification)
        if "error" in msg:  # a JSON answer (the SSE path raises by itself)
            raise RuntimeError(f"JSON-RPC error: {msg['error']}")
        return msg


SESSION_KINDS: dict[str, type[McpSession]] = {"legacy": McpSession, "modern": ModernSession}


# --- process probes ---------------------------------------------------------------------------


def cpu_seconds(pid: int | None) -> float:
    """utime + stime of ``pid`` (not of its children), in seconds; 0 without a pid."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mb(pid: int | None) -> float:
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class PhaseFailed(Exception):
    """The endpoint cannot do what a phase asks (the reason goes in the table as n/a)."""


@dataclass
class PhaseResult:
    name: str
    wall_s: float = 0.0
    client_cpu_share: float = 0.0
    server_cpu_s: float = 0.0
    server_rss_mb: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None  # why the phase could not be measured


async def measured(
    name: str, pid: int | None, body: Callable[[], Awaitable[dict[str, float]]]
) -> PhaseResult:
    """Run one phase, probing ``pid`` around it; a failure becomes ``error``, not a crash."""
    cpu0, own0, t0 = cpu_seconds(pid), time.process_time(), time.perf_counter()
    error: str | None = None
    try:
        metrics = await body()
    except (PhaseFailed, aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
        metrics, error = {}, f"{type(exc).__name__}: {exc}"[:300]
    wall = time.perf_counter() - t0
    return PhaseResult(
        name=name,
        wall_s=wall,
        client_cpu_share=(time.process_time() - own0) / wall,
        server_cpu_s=cpu_seconds(pid) - cpu0,
        server_rss_mb=rss_mb(pid),
        metrics=metrics,
        error=error,
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# --- the command line of the phase scripts (load.py, memory.py) ---------------------------

OptionsT = TypeVar("OptionsT")


def parse_options(
    parser: argparse.ArgumentParser, options: type[OptionsT]
) -> tuple[OptionsT, bool]:
    """``options`` (a dataclass whose fields are the parser's options) from the command line,
    and whether ``--json`` was given; exits unless ``--url`` is on 127.0.0.1."""
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if not args.url.startswith(("http://127.0.0.1:", "http://localhost:")):
        sys.exit(f"{parser.prog} only talks to 127.0.0.1")
    given = vars(args)
    values = {f.name: given[f.name] for f in fields(options)}  # type: ignore[arg-type]
    return options(**values), args.json


def print_results(
    results: list[PhaseResult], as_json: bool, more: Callable[[PhaseResult], str] | None = None
) -> None:
    """One JSON object, or a line per phase: its metrics (or why it has none), its wall time,
    and ``more(result)``."""
    if as_json:
        print(json.dumps([r.__dict__ for r in results]))
        return
    for r in results:
        metrics = ", ".join(f"{k}={v:.3f}" for k, v in r.metrics.items())
        line = f"{r.name:10} {metrics or r.error} | wall {r.wall_s:.2f}s"
        print(line + (more(r) if more is not None else ""))
