"""Memory and many-sessions phases against one Streamable HTTP MCP endpoint (raw aiohttp).

``python bench/memory.py --url http://127.0.0.1:PORT/mcp --pid PID [--json]``

RSS is the endpoint process's own ``VmRSS`` (``/proc/PID/status``): the children it spawns
(one stdio server per session) are separate processes and are not counted.

1. ``buffered`` (``--buffer-mb`` > 0): ``--buffer-calls`` calls of ``--flood-tool`` on one
   session, each emitting notifications of ``--size`` bytes; the client reads only the call's
   first event that carries an id and hangs up, so everything is buffered for a later resume.
   Once the process's RSS (and, with ``--health``, its ``buffered_bytes``) stops growing →
   RSS growth / payload bytes. Target (issue 4): ≤ 1.5. With ``--probe`` (a persistent
   store, see ``stores.py``) it also waits for the store's size to settle and reports its
   growth per event stored against the events' payload: sqlite, the file (db + wal);
   redis, ``INFO memory`` ``used_memory``.
2. ``idle`` (``--idle-sessions`` > 0): open that many sessions (``initialize`` +
   ``notifications/initialized``) and leave them idle → RSS growth per session. Target:
   ≤ 50 KB.
3. ``concurrent`` (``--concurrent`` > 0): that many sessions open at once, then each makes
   ``--concurrent-calls`` ``echo`` calls, all sessions together → every call answered?
   calls/s. Target: works. With ``--era modern`` the callers are stateless 2026-07-28
   clients (``client.ModernSession``: nothing to open or end), all served by the endpoint's
   pooled upstream sessions; only this phase means anything for them.

Sessions are ended with ``DELETE`` after each phase. Only ever point it at 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import stores
from client import (
    SESSION_KINDS,
    McpSession,
    PhaseFailed,
    PhaseResult,
    http_client,
    measured,
    parse_options,
    print_results,
    rss_mb,
    sse_events,
)

BATCH = 50  # sessions opened at once (each starts a process behind the endpoint)


def raise_nofile() -> int:
    """Raise this process's open-file limit to its hard limit (10,000 sessions: the client
    pools its connections, but a contender may hold one each); return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def settle(probe: Callable[[], Awaitable[Any]], *, quiet_s: float = 1.0) -> Any:
    """Wait until ``probe()`` stops changing (3 equal readings ``quiet_s / 3`` apart; at
    most 120 s) and return the last reading."""
    deadline = time.monotonic() + 120
    readings = [await probe()]
    while time.monotonic() < deadline:
        await asyncio.sleep(quiet_s / 3)
        readings.append(await probe())
        if len(readings) >= 3 and readings[-1] == readings[-2] == readings[-3]:
            break
    return readings[-1]


def rss_of(pid: int) -> Callable[[], Awaitable[float]]:
    async def probe() -> float:
        return rss_mb(pid)

    return probe


async def open_sessions(
    http: aiohttp.ClientSession, url: str, n: int, kind: type[McpSession] = McpSession
) -> list[McpSession]:
    sessions: list[McpSession] = []
    for start in range(0, n, BATCH):
        batch = [kind(http, url) for _ in range(min(BATCH, n - start))]
        await asyncio.gather(*(s.initialize() for s in batch))
        sessions += batch
    return sessions


async def close_sessions(sessions: list[McpSession]) -> None:
    for start in range(0, len(sessions), BATCH):
        await asyncio.gather(*(s.close() for s in sessions[start : start + BATCH]))


async def phase_buffered(
    http: aiohttp.ClientSession, opts: Options, health: str | None
) -> dict[str, float]:
    session = McpSession(http, opts.url)
    await session.initialize()
    await session.call("echo", {"text": "warm-up"})
    before = await settle(rss_of(opts.pid))
    probe = opts.probe
    stored0 = await asyncio.to_thread(stores.footprint, probe) if probe else None
    per_call = max(1, round(opts.buffer_mb * 1e6 / opts.buffer_calls / opts.size))
    for i in range(opts.buffer_calls):
        body = session.call_body(opts.flood_tool, {"n": per_call, "size": opts.size}, 100 + i)
        async with http.post(opts.url, json=body, headers=session.headers()) as resp:
            resp.raise_for_status()
            async for event in sse_events(resp):
                if event.id is not None:
                    break
            resp.close()  # away: the rest is buffered for a resume that never comes

    async def buffered_bytes() -> float:
        if health is None:
            return 0.0
        async with http.get(health) as resp:
            return float((await resp.json())["buffered_bytes"])

    async def store_bytes() -> int:
        return await asyncio.to_thread(stores.used_bytes, probe) if probe else 0

    async def all_three() -> tuple[float, float, int]:
        return rss_mb(opts.pid), await buffered_bytes(), await store_bytes()

    after, held, _ = await settle(all_three, quiet_s=1.5)
    stored = await store_growth(stored0, probe)
    held = held or per_call * opts.size * opts.buffer_calls  # without /healthz: nominal
    if held < 0.9 * per_call * opts.size * opts.buffer_calls:
        raise PhaseFailed(f"only {held / 1e6:.1f} MB buffered")
    await session.close()
    freed = await settle(rss_of(opts.pid))
    return {
        "payload_mb": held / 2**20,
        "rss_before_mb": before,
        "rss_after_mb": after,
        "rss_per_payload": (after - before) / (held / 2**20),
        "rss_after_delete_mb": freed,
        **stored,
    }


async def store_growth(before: stores.Footprint | None, probe: str) -> dict[str, float]:
    """The store's growth per event since ``before``, and the events' own payload."""
    if before is None:
        return {}
    after = await asyncio.to_thread(stores.footprint, probe)
    events = after.events - before.events
    if events <= 0:
        raise PhaseFailed(f"the store holds {after.events:,} events, {before.events:,} before")
    per_event = (after.used_bytes - before.used_bytes) / events
    payload = (after.payload_bytes - before.payload_bytes) / events
    return {
        "store_events": events,
        "store_mb": (after.used_bytes - before.used_bytes) / 2**20,
        "store_bytes_per_event": per_event,
        "store_payload_per_event": payload,
        "store_overhead_per_event": per_event - payload,
        "store_data_per_event": (after.data_bytes - before.data_bytes) / events,
    }


async def phase_idle(http: aiohttp.ClientSession, opts: Options) -> dict[str, float]:
    warm = await open_sessions(http, opts.url, 5)  # first-use costs out of the measure
    await close_sessions(warm)
    before = await settle(rss_of(opts.pid))
    t0 = time.perf_counter()
    sessions = await open_sessions(http, opts.url, opts.idle_sessions)
    opened_s = time.perf_counter() - t0
    after = await settle(rss_of(opts.pid))
    fds = len(os.listdir(f"/proc/{opts.pid}/fd"))  # its connections among them
    await close_sessions(sessions)
    return {
        "sessions": len(sessions),
        "open_s": opened_s,
        "open_fds": fds,
        "rss_before_mb": before,
        "rss_after_mb": after,
        "kb_per_session": (after - before) * 1024 / len(sessions),
    }


async def phase_concurrent(http: aiohttp.ClientSession, opts: Options) -> dict[str, float]:
    t0 = time.perf_counter()
    sessions = await open_sessions(http, opts.url, opts.concurrent, SESSION_KINDS[opts.era])
    if opts.era == "modern":  # what opening is to sessions: the endpoint's pool fills up
        await asyncio.gather(*(s.call("echo", {"text": "warm-up"}) for s in sessions))
    opened_s = time.perf_counter() - t0
    failures: list[str] = []

    async def worker(session: McpSession, k: int) -> int:
        done = 0
        for i in range(opts.concurrent_calls):
            try:
                reply = await session.call("echo", {"text": f"s{k} c{i}"})
            except (aiohttp.ClientError, RuntimeError, TimeoutError) as exc:
                failures.append(repr(exc)[:200])
                continue
            text = reply.get("result", {}).get("content", [{}])[0].get("text")
            if text == f"s{k} c{i}":
                done += 1
            else:  # another call's answer (or none)
                failures.append(f"'s{k} c{i}' answered {text!r}")
        return done

    t1 = time.perf_counter()
    answered = sum(await asyncio.gather(*(worker(s, k) for k, s in enumerate(sessions))))
    wall = time.perf_counter() - t1
    rss = rss_mb(opts.pid)
    await close_sessions(sessions)
    expected = len(sessions) * opts.concurrent_calls
    if answered != expected:
        raise PhaseFailed(
            f"{answered} of {expected} calls answered right; first errors {failures[:3]}"
        )
    return {
        "sessions": len(sessions),
        "open_s": opened_s,
        "calls": answered,
        "calls_per_s": answered / wall,
        "rss_mb": rss,
    }


@dataclass
class Options:
    url: str
    pid: int
    health: bool
    buffer_mb: float
    buffer_calls: int
    flood_tool: str
    size: int
    idle_sessions: int
    concurrent: int
    concurrent_calls: int
    probe: str
    era: str


async def run(opts: Options) -> list[PhaseResult]:
    if opts.era != "legacy" and (opts.buffer_mb > 0 or opts.idle_sessions > 0):
        raise SystemExit(
            "--era modern: only the concurrent phase (--buffer-mb 0 --idle-sessions 0)"
        )
    health = opts.url.rsplit("/", 1)[0] + "/healthz" if opts.health else None
    results: list[PhaseResult] = []
    async with http_client(total_s=300) as http:
        if opts.buffer_mb > 0:
            results.append(
                await measured("buffered", opts.pid, lambda: phase_buffered(http, opts, health))
            )
        if opts.idle_sessions > 0:
            results.append(await measured("idle", opts.pid, lambda: phase_idle(http, opts)))
        if opts.concurrent > 0:
            results.append(
                await measured("concurrent", opts.pid, lambda: phase_concurrent(http, opts))
            )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", required=True, help="http://127.0.0.1:PORT/mcp")
    parser.add_argument("--pid", type=int, required=True, help="the endpoint's process")
    parser.add_argument("--health", action="store_true", help="read buffered_bytes at /healthz")
    parser.add_argument("--buffer-mb", type=float, default=50.0, help="0: skip")
    parser.add_argument("--buffer-calls", type=int, default=5)
    parser.add_argument("--flood-tool", default="flood")
    parser.add_argument("--size", type=int, default=200, help="bytes per notification")
    parser.add_argument("--idle-sessions", type=int, default=200, help="0: skip")
    parser.add_argument("--concurrent", type=int, default=100, help="sessions; 0: skip")
    parser.add_argument("--concurrent-calls", type=int, default=20, help="calls per session")
    parser.add_argument("--probe", default="", help="the store: sqlite:PATH or redis://…#NS")
    parser.add_argument(
        "--era", choices=sorted(SESSION_KINDS), default="legacy", help="the concurrent callers"
    )
    opts, as_json = parse_options(parser, Options)
    raise_nofile()
    print_results(asyncio.run(run(opts)), as_json)


if __name__ == "__main__":
    main()
