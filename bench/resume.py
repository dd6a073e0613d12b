"""Resume a finished burst, on the replica that ran it or on another one (raw aiohttp).

``python bench/resume.py --url http://127.0.0.1:A/mcp [--url-b http://127.0.0.1:B/mcp]
[--probe sqlite:PATH | --probe redis://HOST:PORT/0#NS] [--json]``

On a session of replica A (``--url``), ``--resumes`` + 1 times: a ``tools/call`` of
``--tool`` emitting ``--notifications`` progress notifications of about ``--size`` bytes;
the client reads the call's first event (the priming event, which carries an id), hangs
up, waits until the call has finished (``--probe``: until the store says the stream is
``completed``; without one, until A's ``/healthz`` ``buffered_bytes`` stops changing),
then sends ``GET`` + ``Mcp-Session-Id`` + ``Last-Event-ID`` to replica B (``--url-b``,
default A) and times, from sending the GET: the response headers, the first replayed
event, the ``--notifications``-th, and the call's response. The first round is reported
apart (``cold``: the replica's first resume), the others are the samples.

The client only splits the body into events and looks for a byte string in each while
the clock runs (no JSON decoding); afterwards it checks that every notification arrived
exactly once, in order, and the response after them. Only ever point it at 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
import stores
from client import McpSession, PhaseFailed, http_client, sse_events

PROGRESS = b"notifications/progress"
DEADLINE_S = 120.0


@dataclass
class Options:
    url: str
    url_b: str | None
    probe: str
    tool: str
    notifications: int
    size: int
    resumes: int


async def wait_finished(http: aiohttp.ClientSession, opts: Options, key: str) -> float:
    """Wait until the call's stream is over on A; the seconds it took."""
    t0 = time.monotonic()
    deadline = t0 + DEADLINE_S
    if opts.probe:
        while await asyncio.to_thread(stores.stream_state, opts.probe, key) != "completed":
            if time.monotonic() > deadline:
                raise PhaseFailed(f"stream {key} not completed in the store after {DEADLINE_S} s")
            await asyncio.sleep(0.01)
        return time.monotonic() - t0
    health = opts.url.rsplit("/", 1)[0] + "/healthz"
    readings: list[int] = []
    while len(readings) < 3 or len(set(readings[-3:])) != 1:
        if time.monotonic() > deadline:
            raise PhaseFailed(f"buffered_bytes still changing after {DEADLINE_S} s")
        async with http.get(health) as resp:
            readings.append(int((await resp.json())["buffered_bytes"]))
        await asyncio.sleep(0.1)
    return time.monotonic() - t0


async def start_and_leave(session: McpSession, opts: Options) -> tuple[int, str]:
    """Start the call, read its first event, hang up: (the request id, that event's id)."""
    body = session.call_body(opts.tool, {"n": opts.notifications, "size": opts.size}, 7)
    async with session.http.post(session.url, json=body, headers=session.headers()) as resp:
        resp.raise_for_status()
        if resp.content_type != "text/event-stream":
            raise PhaseFailed(f"the call is answered with {resp.content_type}, not a stream")
        async for event in sse_events(resp):
            if event.id is None:
                continue
            if event.data:
                raise PhaseFailed(f"the call's first event with an id carries data: {event.id}")
            resp.close()  # away: the call goes on without us
            return int(body["id"]), event.id
    raise PhaseFailed("no event of the call's stream carries an id: nothing to resume")


def check(blocks: list[bytes], rid: int, n: int) -> None:
    """Every notification exactly once and in order, then the response to ``rid``."""
    progress: list[int] = []
    answered = False
    for block in blocks:
        data = b"\n".join(
            line.removeprefix(b"data:").removeprefix(b" ")
            for line in block.split(b"\n")
            if line.startswith(b"data:")
        )
        if not data:
            continue
        msg = json.loads(data)
        if msg.get("method") == "notifications/progress":
            progress.append(int(msg["params"]["progress"]))
        elif msg.get("id") == rid and "result" in msg:
            answered = True
    if progress != list(range(1, n + 1)) or not answered:
        raise PhaseFailed(
            f"{len(progress):,} of {n:,} notifications replayed "
            f"(in order: {progress == sorted(set(progress))}), response: {answered}"
        )


async def resume_once(session: McpSession, opts: Options) -> dict[str, float]:
    rid, last_id = await start_and_leave(session, opts)
    epoch, number = last_id.split(".")[:2]  # <epoch>.<stream>.<seq>[.<attach>]
    key = f"{epoch}.{number}"
    settle_s = await wait_finished(session.http, opts, key)
    url_b = opts.url_b or opts.url
    headers = session.headers("text/event-stream") | {"Last-Event-ID": last_id}
    n = opts.notifications
    blocks: list[bytes] = []
    seen = 0
    first = nth = done = 0.0
    buffer = b""
    t0 = time.perf_counter()
    async with session.http.get(url_b, headers=headers) as resp:
        head = time.perf_counter()
        if resp.status != 200:
            raise PhaseFailed(f"GET with Last-Event-ID answered HTTP {resp.status}")
        async for chunk in resp.content.iter_any():
            *complete, buffer = (buffer + chunk).split(b"\n\n")
            for block in complete:
                blocks.append(block)
                if PROGRESS in block:
                    seen += 1
                    if seen == 1:
                        first = time.perf_counter()
                    if seen == n:
                        nth = time.perf_counter()
                elif b'"result"' in block:
                    done = time.perf_counter()
            if done:
                break
    if not done:
        raise PhaseFailed(f"the resumed stream ended without the response ({seen:,} events)")
    check(blocks, rid, n)
    return {
        "headers_ms": (head - t0) * 1000,
        "first_ms": (first - t0) * 1000,
        "nth_ms": (nth - t0) * 1000,
        "response_ms": (done - t0) * 1000,
        "settle_s": settle_s,
    }


async def run(opts: Options) -> dict[str, Any]:
    own0, t0 = time.process_time(), time.perf_counter()
    async with http_client(total_s=DEADLINE_S) as http:
        session = McpSession(http, opts.url)
        await session.initialize()
        await session.call("echo", {"text": "warm-up"})
        cold = await resume_once(session, opts)
        samples = [await resume_once(session, opts) for _ in range(opts.resumes)]
        await session.close()
    wall = time.perf_counter() - t0
    keys = ("headers_ms", "first_ms", "nth_ms", "response_ms")
    return {
        "cold": cold,
        "samples": samples,
        "median": {k: statistics.median(s[k] for s in samples) for k in keys},
        "max": {k: max(s[k] for s in samples) for k in keys},
        "client_cpu_share": (time.process_time() - own0) / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--url", required=True, help="replica A: http://127.0.0.1:PORT/mcp")
    parser.add_argument("--url-b", help="replica B, where the client resumes (default: A)")
    parser.add_argument("--probe", default="", help="the store: sqlite:PATH or redis://…#NS")
    parser.add_argument("--tool", default="flood", help="tool taking n and size")
    parser.add_argument("--notifications", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--resumes", type=int, default=5, help="timed resumes (after a cold one)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    for url in (args.url, args.url_b or args.url):
        if not url.startswith(("http://127.0.0.1:", "http://localhost:")):
            sys.exit(f"{parser.prog} only talks to 127.0.0.1")
    opts = Options(**{k: v for k, v in vars(args).items() if k != "json"})
    try:
        result = asyncio.run(run(opts))
    except (PhaseFailed, aiohttp.ClientError, TimeoutError, RuntimeError) as exc:
        result = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    if args.json:
        print(json.dumps(result))
        return
    if "error" in result:
        print(result["error"])
        return
    for label in ("median", "max"):
        print(label, ", ".join(f"{k}={v:.1f}" for k, v in result[label].items()))
    print("cold", ", ".join(f"{k}={v:.1f}" for k, v in result["cold"].items()))


if __name__ == "__main__":
    main()
