"""Load client for one Streamable HTTP MCP endpoint, on raw aiohttp (not the SDK).

``python bench/load.py --url http://127.0.0.1:PORT/mcp [--pid PID] [--json]`` runs the phases
below against the endpoint and prints the results (``--json``: one JSON object on stdout).

1. ``latency``: ``--calls`` ``tools/call echo`` one at a time on one session → p50 / p99 ms.
2. ``throughput``: ``--sessions`` sessions, each calling ``echo`` in a loop for ``--seconds``
   → calls/s (sessions are initialized before the clock starts).
3. ``burst``: one call of ``--burst-tool`` emitting ``--notifications`` progress notifications
   of about ``--size`` bytes → notifications/s over the whole call, and ms to the first one.
4. ``replay`` (``--replay``): start the same call, read only its first event (the 2025-11-25
   priming event), drop the connection, wait until the server has surely finished
   (``max(1 s, 3 * the burst phase's duration)``, at most 10 s), then ``GET`` with
   ``Last-Event-ID: <priming id>`` → ms until the replayed response arrives, and the count.

With ``--pid`` it also reads that process's CPU time (``/proc/PID/stat`` utime+stime) around
each phase and its RSS (``/proc/PID/status`` VmRSS) after each phase. For every phase it reports
the load client's own CPU share (process time / wall time): near 100 % means the client, not
the endpoint, was the bottleneck.

Only ever point it at 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

PROTOCOL_VERSION = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
SESSION_HEADER = "Mcp-Session-Id"
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class SseEvent:
    id: str | None
    data: str


async def sse_events(resp: aiohttp.ClientResponse) -> AsyncIterator[SseEvent]:
    """The events of an SSE body (``\\n`` or ``\\r\\n`` line ends; comments skipped)."""
    buf = b""
    async for chunk in resp.content.iter_any():
        buf = (buf + chunk).replace(b"\r\n", b"\n")
        *blocks, buf = buf.split(b"\n\n")
        for block in blocks:
            event_id: str | None = None
            data: list[str] = []
            for raw in block.split(b"\n"):
                line = raw.decode()
                if not line or line.startswith(":"):
                    continue
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "id":
                    event_id = value
                elif name == "data":
                    data.append(value)
            if event_id is not None or data:
                yield SseEvent(event_id, "\n".join(data))


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
        async with self.http.post(self.url, json=body, headers=self.headers()) as resp:
            resp.raise_for_status()
            return await self._response(resp, body["id"], on_notification)

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


@dataclass
class PhaseResult:
    name: str
    wall_s: float = 0.0
    client_cpu_share: float = 0.0
    server_cpu_s: float = 0.0
    server_rss_mb: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)


async def measured(
    name: str, pid: int | None, body: Callable[[], Awaitable[dict[str, float]]]
) -> PhaseResult:
    cpu0, own0, t0 = cpu_seconds(pid), time.process_time(), time.perf_counter()
    metrics = await body()
    wall = time.perf_counter() - t0
    return PhaseResult(
        name=name,
        wall_s=wall,
        client_cpu_share=(time.process_time() - own0) / wall,
        server_cpu_s=cpu_seconds(pid) - cpu0,
        server_rss_mb=rss_mb(pid),
        metrics=metrics,
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


# --- phases ------------------------------------------------------------------------------------


async def phase_latency(session: McpSession, calls: int) -> dict[str, float]:
    samples: list[float] = []
    for i in range(calls):
        t0 = time.perf_counter()
        await session.call("echo", {"text": f"ping {i}"})
        samples.append((time.perf_counter() - t0) * 1000)
    return {
        "calls": calls,
        "p50_ms": statistics.median(samples),
        "p99_ms": percentile(samples, 0.99),
        "mean_ms": statistics.fmean(samples),
    }


async def phase_throughput(sessions: list[McpSession], seconds: float) -> dict[str, float]:
    deadline = time.perf_counter() + seconds

    async def worker(session: McpSession) -> int:
        done = 0
        while time.perf_counter() < deadline:
            await session.call("echo", {"text": "x"})
            done += 1
        return done

    t0 = time.perf_counter()
    counts = await asyncio.gather(*(worker(s) for s in sessions))
    wall = time.perf_counter() - t0
    return {"sessions": len(sessions), "calls": sum(counts), "calls_per_s": sum(counts) / wall}


async def phase_burst(session: McpSession, tool: str, n: int, size: int) -> dict[str, float]:
    seen = 0
    first: float | None = None

    def on_notification(msg: dict[str, Any]) -> None:
        nonlocal seen, first
        if msg.get("method") == "notifications/progress":
            seen += 1
            if first is None:
                first = time.perf_counter()

    t0 = time.perf_counter()
    await session.call(tool, {"n": n, "size": size}, token=1, on_notification=on_notification)
    wall = time.perf_counter() - t0
    if seen != n:
        raise RuntimeError(f"burst: expected {n} notifications, got {seen}")
    return {
        "notifications": seen,
        "wall_ms": wall * 1000,
        "notif_per_s": seen / wall,
        "first_ms": ((first or t0) - t0) * 1000,
    }


async def phase_replay(
    session: McpSession, tool: str, n: int, size: int, settle_s: float
) -> dict[str, float]:
    body = session.call_body(tool, {"n": n, "size": size}, token=2)
    async with session.http.post(session.url, json=body, headers=session.headers()) as resp:
        resp.raise_for_status()
        priming = await anext(sse_events(resp))
        if priming.id is None or priming.data:
            raise RuntimeError(f"replay: first event is not a priming event: {priming}")
        resp.close()  # drop the connection; the call goes on without us
    await asyncio.sleep(settle_s)

    seen = 0
    t0 = time.perf_counter()
    headers = session.headers("text/event-stream") | {"Last-Event-ID": priming.id}
    async with session.http.get(session.url, headers=headers) as resp:
        resp.raise_for_status()
        first: float | None = None
        async for event in sse_events(resp):
            if not event.data:
                continue
            msg = json.loads(event.data)
            if msg.get("method") == "notifications/progress":
                seen += 1
                first = first or time.perf_counter()
            elif msg.get("id") == body["id"]:
                break
        else:
            raise RuntimeError("replay: stream ended without the response")
    wall = time.perf_counter() - t0
    if seen != n:
        raise RuntimeError(f"replay: expected {n} notifications, got {seen}")
    return {
        "notifications": seen,
        "replay_ms": wall * 1000,
        "first_ms": ((first or t0) - t0) * 1000,
        "settle_s": settle_s,
    }


@dataclass
class Options:
    url: str
    pid: int | None
    calls: int
    sessions: int
    seconds: float
    burst_tool: str
    notifications: int
    size: int
    replay: bool


async def run(opts: Options) -> list[PhaseResult]:
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
        primary = McpSession(http, opts.url)
        await primary.initialize()
        await primary.call("echo", {"text": "warm-up"})
        results = [await measured("latency", opts.pid, lambda: phase_latency(primary, opts.calls))]

        pool = [McpSession(http, opts.url) for _ in range(opts.sessions)]
        await asyncio.gather(*(s.initialize() for s in pool))
        await asyncio.gather(*(s.call("echo", {"text": "warm-up"}) for s in pool))
        results.append(
            await measured("throughput", opts.pid, lambda: phase_throughput(pool, opts.seconds))
        )
        await asyncio.gather(*(s.close() for s in pool))

        burst = await measured(
            "burst",
            opts.pid,
            lambda: phase_burst(primary, opts.burst_tool, opts.notifications, opts.size),
        )
        results.append(burst)
        if opts.replay:
            settle = min(10.0, max(1.0, 3 * burst.wall_s))
            results.append(
                await measured(
                    "replay",
                    opts.pid,
                    lambda: phase_replay(
                        primary, opts.burst_tool, opts.notifications, opts.size, settle
                    ),
                )
            )
        await primary.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", required=True, help="http://127.0.0.1:PORT/mcp")
    parser.add_argument("--pid", type=int, help="process to probe for CPU and RSS")
    parser.add_argument("--calls", type=int, default=500, help="latency phase calls")
    parser.add_argument("--sessions", type=int, default=8, help="throughput phase sessions")
    parser.add_argument("--seconds", type=float, default=5.0, help="throughput phase length")
    parser.add_argument("--burst-tool", default="burst", help="tool taking n and size")
    parser.add_argument("--notifications", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--replay", action="store_true", help="run the replay phase")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    if not args.url.startswith(("http://127.0.0.1:", "http://localhost:")):
        sys.exit("load.py only talks to 127.0.0.1")
    opts = Options(
        url=args.url,
        pid=args.pid,
        calls=args.calls,
        sessions=args.sessions,
        seconds=args.seconds,
        burst_tool=args.burst_tool,
        notifications=args.notifications,
        size=args.size,
        replay=args.replay,
    )
    results = asyncio.run(run(opts))
    if args.json:
        print(json.dumps([r.__dict__ for r in results]))
        return
    for r in results:
        metrics = ", ".join(f"{k}={v:.3f}" for k, v in r.metrics.items())
        print(
            f"{r.name:10} {metrics} | wall {r.wall_s:.2f}s client CPU {r.client_cpu_share:.0%}"
            f" | server CPU {r.server_cpu_s:.3f}s RSS {r.server_rss_mb:.1f} MB"
        )


if __name__ == "__main__":
    main()
