"""The no-stall phase (issue 23): echo callers beside a long resume and a burst.

``python bench/stall.py --url http://127.0.0.1:P/mcp [--probe sqlite:PATH | --probe
redis://HOST:PORT/0#NS] [--json]``

1. Session R: a ``flood`` of ``--resume-events`` (50,000) notifications of ~200 bytes;
   the client reads the priming event, hangs up and waits until the call is over
   (``--probe``, else ``/healthz`` ``buffered_bytes`` steady: ``resume.wait_finished``).
2. A second process (``--role callers``, so the readers of the resume and the burst never
   delay its clock) opens ``--callers`` (8) sessions; each calls ``echo`` back to back and
   records every call's latency, and a probe ``GET /healthz``s every 5 ms (the proxy's
   loop lag plus an HTTP round trip: it works for any version of the proxy) while a timer
   every 5 ms measures the callers process's own loop lag (a stall of the client itself,
   not of the proxy).
3. After ``--settle`` seconds of calls, at once: ``GET`` + ``Last-Event-ID`` of R's stream
   (read to its last event) and, on session B, a ``flood`` of ``--burst`` (10,000)
   notifications. Calls *started* between the moment both begin and the moment both are
   done are the window's; the window is reported with the two operations' own times.

Target (issue 23): no echo call in the window slower than 20 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from client import McpSession, PhaseFailed, http_client, percentile
from resume import Options as ResumeOptions
from resume import start_and_leave, wait_finished

PROGRESS = b"notifications/progress"
TICK_S = 0.005


@dataclass
class Options:
    url: str
    probe: str
    resume_events: int
    burst: int
    size: int
    callers: int
    settle: float
    dump: str = ""


# ------------------------------------------------------------------ the callers' process
async def callers_role(url: str, n: int, stop_file: str) -> dict[str, Any]:
    """``n`` echo callers, a /healthz probe and a loop-lag timer until ``stop_file``
    appears: every call as (start, ms), every probe as (start, ms), every lag (at, ms)."""
    calls: list[tuple[float, float]] = []
    probes: list[tuple[float, float]] = []
    lags: list[tuple[float, float]] = []
    health = url.rsplit("/", 1)[0] + "/healthz"
    stop = asyncio.Event()
    async with http_client(total_s=120) as http:
        sessions = [McpSession(http, url) for _ in range(n)]
        for s in sessions:
            await s.initialize()
            await s.call("echo", {"text": "warm-up"})
        # The started heap (aiohttp, the sessions) out of the collector's full passes, as
        # the proxy does its own (cli_serve.settle_heap): a full pass over it stopped this
        # process 20-45 ms once a run, which its lag timer saw and every call then open
        # counted as the proxy's (the measuring client must not be what is measured).
        gc.collect()
        gc.freeze()

        async def caller(s: McpSession) -> None:
            while not stop.is_set():
                t0 = time.monotonic()
                await s.call("echo", {"text": "hi"})
                calls.append((t0, (time.monotonic() - t0) * 1000))

        async def prober() -> None:
            while not stop.is_set():
                t0 = time.monotonic()
                async with http.get(health) as resp:
                    await resp.read()
                probes.append((t0, (time.monotonic() - t0) * 1000))
                await asyncio.sleep(TICK_S)

        async def lagger() -> None:
            while not stop.is_set():
                due = time.monotonic() + TICK_S
                await asyncio.sleep(TICK_S)
                lags.append((due, (time.monotonic() - due) * 1000))

        async def watch() -> None:
            print("ready", flush=True)
            while not os.path.exists(stop_file):
                await asyncio.sleep(0.05)
            stop.set()

        await asyncio.gather(*(caller(s) for s in sessions), prober(), lagger(), watch())
        for s in sessions:
            await s.close()
    return {"calls": calls, "probes": probes, "lags": lags}


# ------------------------------------------------------------------ the main process
async def resume_stream(http: aiohttp.ClientSession, s: McpSession, last_id: str, n: int) -> float:
    """GET + Last-Event-ID, read to the n-th notification and the response: ms."""
    headers = s.headers("text/event-stream") | {"Last-Event-ID": last_id}
    seen, buffer, done = 0, b"", False
    t0 = time.monotonic()
    async with http.get(s.url, headers=headers) as resp:
        if resp.status != 200:
            raise PhaseFailed(f"GET with Last-Event-ID answered HTTP {resp.status}")
        async for chunk in resp.content.iter_any():
            *complete, buffer = (buffer + chunk).split(b"\n\n")
            for block in complete:
                if PROGRESS in block:
                    seen += 1
                elif b'"result"' in block:
                    done = True
            if done:
                break
    if seen != n or not done:
        raise PhaseFailed(f"the resume gave {seen:,} of {n:,} notifications (response: {done})")
    return (time.monotonic() - t0) * 1000


async def burst(s: McpSession, n: int, size: int) -> float:
    got = 0

    def count(_: dict[str, Any]) -> None:
        nonlocal got
        got += 1

    t0 = time.monotonic()
    await s.call("flood", {"n": n, "size": size}, token=1, on_notification=count)
    if got != n:
        raise PhaseFailed(f"the burst gave {got:,} of {n:,} notifications")
    return (time.monotonic() - t0) * 1000


def window_stats(samples: list[tuple[float, float]], start: float, end: float) -> dict[str, Any]:
    inside = [ms for t, ms in samples if start <= t <= end]
    if not inside:
        return {"n": 0}
    return {
        "n": len(inside),
        "p50": statistics.median(inside),
        "p99": percentile(inside, 0.99),
        "max": max(inside),
    }


async def run(opts: Options, stop_file: str) -> dict[str, Any]:
    ropts = ResumeOptions(opts.url, None, opts.probe, "flood", opts.resume_events, opts.size, 0)
    async with http_client(total_s=300) as http:
        r, b = McpSession(http, opts.url), McpSession(http, opts.url)
        await r.initialize()
        await b.initialize()
        _, last_id = await start_and_leave(r, ropts)
        epoch, number = last_id.split(".")[:2]
        await wait_finished(http, ropts, f"{epoch}.{number}")
        callers = await asyncio.create_subprocess_exec(
            sys.executable,
            __file__,
            *("--role", "callers", "--url", opts.url, "--callers", str(opts.callers)),
            *("--stop-file", stop_file),
            stdout=asyncio.subprocess.PIPE,
        )
        try:
            assert callers.stdout is not None
            if (await callers.stdout.readline()).strip() != b"ready":
                raise PhaseFailed("the callers process did not start")
            await asyncio.sleep(opts.settle)
            start = time.monotonic()
            resumed_ms, burst_ms = await asyncio.gather(
                resume_stream(http, r, last_id, opts.resume_events),
                burst(b, opts.burst, opts.size),
            )
            end = time.monotonic()
            await asyncio.sleep(opts.settle)
        finally:
            with open(stop_file, "w"):
                pass
            out, _ = await callers.communicate()
            os.unlink(stop_file)
        await r.close()
        await b.close()
    seen = json.loads(out.splitlines()[-1])
    if opts.dump:  # every call and probe with its start (monotonic: one clock per host)
        with open(opts.dump, "w") as f:
            json.dump({"start": start, "end": end, **seen}, f)
    return {
        "resume_ms": resumed_ms,
        "burst_ms": burst_ms,
        "window_ms": (end - start) * 1000,
        "calls": window_stats(seen["calls"], start, end),
        "calls_before": window_stats(seen["calls"], 0, start),
        "probe": window_stats(seen["probes"], start, end),
        "client_lag": window_stats(seen["lags"], start, end),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--pid", type=int, help="(ignored: the runner passes it)")
    parser.add_argument("--probe", default="", help="the store: sqlite:PATH or redis://…#NS")
    parser.add_argument("--resume-events", type=int, default=50_000)
    parser.add_argument("--burst", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--settle", type=float, default=0.3, help="seconds of calls around")
    parser.add_argument("--role", choices=("main", "callers"), default="main")
    parser.add_argument("--stop-file", default="")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--dump", default="", help="write every call's (start, ms) to this file")
    args = parser.parse_args()
    if not args.url.startswith(("http://127.0.0.1:", "http://localhost:")):
        sys.exit(f"{parser.prog} only talks to 127.0.0.1")
    if args.role == "callers":
        print(json.dumps(asyncio.run(callers_role(args.url, args.callers, args.stop_file))))
        return
    opts = Options(
        args.url,
        args.probe,
        args.resume_events,
        args.burst,
        args.size,
        args.callers,
        args.settle,
        args.dump,
    )
    stop_file = f"/tmp/bench-stall-{os.getpid()}.stop"
    try:
        result = asyncio.run(run(opts, stop_file))
    except (PhaseFailed, aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    if args.json:
        print(json.dumps([{"name": "stall", **result}]))
        return
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
