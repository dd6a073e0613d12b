"""Load client for one Streamable HTTP MCP endpoint, on raw aiohttp (not the SDK).

``python bench/load.py --url http://127.0.0.1:PORT/mcp [--pid PID] [--json]`` runs the phases
below against the endpoint and prints the results (``--json``: one JSON object on stdout).

1. ``latency``: ``--calls`` ``tools/call echo`` one at a time on one session → p50 / p99 ms.
2. ``throughput``: ``--sessions`` sessions, each calling ``echo`` in a loop for ``--seconds``
   → calls/s (sessions are initialized before the clock starts). Every answer must carry
   its own call's text (an endpoint that hands one caller another's answer gets n/a).
3. ``long`` (``--long-calls`` > 0): that many ``echo`` calls one at a time on one fresh
   session → p50 of the first and of the last 500 (does a session slow down as it ages?).
4. ``burst``: ``--burst-reps`` (3) calls of ``--burst-tool``, each emitting ``--notifications``
   progress notifications of about ``--size`` bytes → the median of notifications/s over the
   whole call (request sent → response received), and of ms to the first one.
5. ``replay`` (``--replay``): start the same call, read up to its first event that carries an
   id (the 2025-11-25 priming event, or the first message), drop the connection, wait until
   the server has surely finished (``max(1 s, 3 * the burst phase's duration)``, at most
   90 s: a burst into FastMCP's event store takes ~40 s), then ``GET`` with
   ``Last-Event-ID: <that id>`` → ms until the replayed response arrives; every
   notification must arrive exactly once over the two connections.

A phase the endpoint cannot do (no event ids, notifications not relayed, an HTTP error) is
reported with its ``error`` and no metrics, and the next phase runs.

With ``--pid`` it also reads that process's CPU time (``/proc/PID/stat`` utime+stime) around
each phase and its RSS (``/proc/PID/status`` VmRSS) after each phase. For every phase it reports
the load client's own CPU share (process time / wall time): near 100 % means the client, not
the endpoint, was the bottleneck.

``--era modern``: the same phases with a stateless 2026-07-28 client (``client.ModernSession``:
no ``initialize``, no session, the ``_meta`` envelope and ``Mcp-Method`` / ``Mcp-Name`` on
every POST); a "session" is then just one of the concurrent callers.

Only ever point it at 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

from client import (
    SESSION_KINDS,
    McpSession,
    PhaseFailed,
    PhaseResult,
    http_client,
    measured,
    parse_options,
    percentile,
    print_results,
    sse_events,
)

LONG_WINDOW = 500  # calls at each end of the long phase


async def echo_round_trips_ms(session: McpSession, calls: int, label: str) -> list[float]:
    """``calls`` echo calls, one at a time: how long each took, in ms."""
    samples: list[float] = []
    for i in range(calls):
        t0 = time.perf_counter()
        await session.call("echo", {"text": f"{label} {i}"})
        samples.append((time.perf_counter() - t0) * 1000)
    return samples


async def phase_latency(session: McpSession, calls: int) -> dict[str, float]:
    samples = await echo_round_trips_ms(session, calls, "ping")
    return {
        "calls": calls,
        "p50_ms": statistics.median(samples),
        "p99_ms": percentile(samples, 0.99),
        "mean_ms": statistics.fmean(samples),
    }


async def phase_throughput(sessions: list[McpSession], seconds: float) -> dict[str, float]:
    deadline = time.perf_counter() + seconds

    samples: list[float] = []  # every call's round trip, ms: p50 / p99 under the callers
    wrong: list[str] = []  # answers that carry another call's text

    async def worker(session: McpSession, k: int) -> int:
        done = 0
        while (t0 := time.perf_counter()) < deadline:
            text = f"{k} {done}"
            reply = await session.call("echo", {"text": text})
            samples.append((time.perf_counter() - t0) * 1000)
            if _echoed(reply) != text:
                wrong.append(f"{text!r} answered {_echoed(reply)!r}")
            done += 1
        return done

    t0 = time.perf_counter()
    counts = await asyncio.gather(*(worker(s, k) for k, s in enumerate(sessions)))
    wall = time.perf_counter() - t0
    if wrong:  # a count of wrong answers is no throughput
        raise PhaseFailed(
            f"{len(wrong):,} of {sum(counts):,} echo answers were another call's "
            f"(first: {wrong[0]})"
        )
    return {
        "sessions": len(sessions),
        "calls": sum(counts),
        "calls_per_s": sum(counts) / wall,
        "p50_ms": statistics.median(samples) if samples else 0.0,
        "p99_ms": percentile(samples, 0.99) if samples else 0.0,
    }


def _echoed(reply: dict[str, Any]) -> Any:
    """The text an echo answer carries."""
    content = reply.get("result", {}).get("content") or [{}]
    return content[0].get("text")


async def phase_long(session: McpSession, calls: int) -> dict[str, float]:
    """Sequential calls on one session: does the per-call cost grow with its history?"""
    samples = await echo_round_trips_ms(session, calls, "long")
    window = min(LONG_WINDOW, calls // 2)
    first = statistics.median(samples[:window])
    last = statistics.median(samples[-window:])
    return {"calls": calls, "first_p50_ms": first, "last_p50_ms": last, "drift": last / first}


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
        raise PhaseFailed(f"{seen:,} of {n:,} notifications reached the client before the response")
    return {
        "notifications": seen,
        "wall_ms": wall * 1000,
        "notif_per_s": seen / wall,
        "first_ms": ((first or t0) - t0) * 1000,
    }


async def phase_bursts(
    session: McpSession, tool: str, n: int, size: int, reps: int
) -> dict[str, float]:
    """``reps`` bursts one after the other: the median rate (a shared machine is noisy)."""
    runs = [await phase_burst(session, tool, n, size) for _ in range(reps)]
    return {
        "notifications": n * reps,
        "bursts": reps,
        "wall_ms": statistics.median(r["wall_ms"] for r in runs),
        "notif_per_s": statistics.median(r["notif_per_s"] for r in runs),
        "first_ms": statistics.median(r["first_ms"] for r in runs),
    }


async def phase_replay(
    session: McpSession, tool: str, n: int, size: int, settle_s: float
) -> dict[str, float]:
    body = session.call_body(tool, {"n": n, "size": size}, token=2)
    before = 0  # notifications read before the drop
    last_id: str | None = None
    async with session.http.post(session.url, json=body, headers=session.headers()) as resp:
        resp.raise_for_status()
        if resp.content_type != "text/event-stream":
            raise PhaseFailed(f"the call is answered with {resp.content_type}, not a stream")
        async for event in sse_events(resp):
            if event.data and json.loads(event.data).get("method") == "notifications/progress":
                before += 1
            if event.id is not None:
                last_id = event.id
                break
        if last_id is None:
            raise PhaseFailed("no event of the call's stream carries an id: nothing to resume")
        resp.close()  # drop the connection; the call goes on without us
    await asyncio.sleep(settle_s)

    seen = 0
    t0 = time.perf_counter()
    headers = session.headers("text/event-stream") | {"Last-Event-ID": last_id}
    async with session.http.get(session.url, headers=headers) as resp:
        if resp.status != 200:
            raise PhaseFailed(f"GET with Last-Event-ID answered HTTP {resp.status}")
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
            raise PhaseFailed(f"the resumed stream ended without the response ({seen:,} events)")
    wall = time.perf_counter() - t0
    if before + seen != n:
        raise PhaseFailed(f"{before + seen:,} of {n:,} notifications after the resume")
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
    long_calls: int
    burst_tool: str
    notifications: int
    burst_reps: int
    size: int
    replay: bool
    era: str
    warmup: int


async def run(opts: Options) -> list[PhaseResult]:
    session_kind = SESSION_KINDS[opts.era]
    async with http_client(total_s=120) as http:
        primary = session_kind(http, opts.url)
        await primary.initialize()
        for _ in range(opts.warmup):  # untimed; a JIT (Node) needs thousands to settle
            await primary.call("echo", {"text": "warm-up"})
        results = [await measured("latency", opts.pid, lambda: phase_latency(primary, opts.calls))]

        pool = [session_kind(http, opts.url) for _ in range(opts.sessions)]
        await asyncio.gather(*(s.initialize() for s in pool))
        await asyncio.gather(*(s.call("echo", {"text": "warm-up"}) for s in pool))
        results.append(
            await measured("throughput", opts.pid, lambda: phase_throughput(pool, opts.seconds))
        )
        await asyncio.gather(*(s.close() for s in pool))

        if opts.long_calls > 0:
            aging = session_kind(http, opts.url)
            await aging.initialize()
            results.append(
                await measured("long", opts.pid, lambda: phase_long(aging, opts.long_calls))
            )
            await aging.close()

        burst = await measured(
            "burst",
            opts.pid,
            lambda: phase_bursts(
                primary, opts.burst_tool, opts.notifications, opts.size, opts.burst_reps
            ),
        )
        results.append(burst)
        if opts.replay:
            one_burst_s = burst.metrics.get("wall_ms", 1000.0) / 1000
            settle = min(90.0, max(1.0, 3 * one_burst_s))  # a slow peer: fastmcp-proxy-es
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
    parser.add_argument("--long-calls", type=int, default=0, help="long phase calls (0: skip)")
    parser.add_argument("--burst-tool", default="burst", help="tool taking n and size")
    parser.add_argument("--notifications", type=int, default=10_000)
    parser.add_argument("--burst-reps", type=int, default=3, help="bursts (median rate)")
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--replay", action="store_true", help="run the replay phase")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls before latency")
    parser.add_argument(
        "--era",
        choices=sorted(SESSION_KINDS),
        default="legacy",
        help="legacy: 2025-11-25 sessions; modern: stateless 2026-07-28 requests",
    )
    opts, as_json = parse_options(parser, Options)
    print_results(
        asyncio.run(run(opts)),
        as_json,
        lambda r: (
            f" client CPU {r.client_cpu_share:.0%} | server CPU {r.server_cpu_s:.3f}s "
            f"RSS {r.server_rss_mb:.1f} MB"
        ),
    )


if __name__ == "__main__":
    main()
