"""A call behind a round-robin balancer: on the replica that holds its session, and sent
through another (forwarded: :mod:`proxy.replicas`), side by side in one run.

Two replicas of one deployment on the bench's redis-server (one namespace), in front of
the raw emitter (``flood``'s ``echo``). One session is initialized on A; then echo calls,
one at a time, alternate between A (``held``: the holder serves the call itself) and B
(``forwarded``: B finds the holder, sends the request to its inbox and follows the call's
stream from the shared log). Both replicas run with ``--log-level warning``.

    .venv/bin/python bench/forwarded.py [--calls 500] [--reps 3]

Prints, per repetition (fresh replicas each time) and over all of them, the p50, p90,
p99 and mean of each path in ms, and the forwarded path's extra p50.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time

import contenders as C
import stores
from client import McpSession, http_client, percentile, until_healthy
from contenders import RAW, Contender

PATHS = ("held", "forwarded")


def commands() -> dict[str, int]:
    """Calls per command so far on the bench's redis-server (``INFO commandstats``)."""
    return {
        name.removeprefix("cmdstat_"): int(dict(kv.split("=") for kv in v.split(", "))["calls"])
        for name, v in stores.command_stats().items()
    }


async def commands_per_call(session: McpSession, path: str, calls: int) -> dict[str, float]:
    """Redis commands per call on one path: ``calls`` calls alone, the server's counts
    before and after."""
    before = commands()
    for i in range(calls):
        await session.call("echo", {"text": f"{path} {i}"})
    after = commands()
    return {
        name: round((n - before.get(name, 0)) / calls, 2)
        for name, n in sorted(after.items())
        if n - before.get(name, 0) >= calls // 10
    }


async def measure(
    url_a: str, url_b: str, port_a: int, port_b: int, calls: int, count_commands: bool
) -> dict[str, list[float]]:
    """``calls`` echo calls on each path, alternated; the warm-up's are not counted.
    ``count_commands``: then the Redis commands of each path's calls, printed."""
    times: dict[str, list[float]] = {path: [] for path in PATHS}
    async with http_client(30) as http:
        await until_healthy(http, port_a)
        await until_healthy(http, port_b)
        held = McpSession(http, url_a)
        await held.initialize()
        forwarded = McpSession(http, url_b)
        forwarded.session_id = held.session_id  # the same session, through the other replica
        forwarded._ids = held._ids  # one id space: the session sees one client
        try:
            for i in range(calls + 20):
                for path, session in (("held", held), ("forwarded", forwarded)):
                    start = time.perf_counter()
                    answer = await session.call("echo", {"text": f"{path} {i}"})
                    elapsed = (time.perf_counter() - start) * 1e3
                    text = answer["result"]["content"][0]["text"]
                    if text != f"{path} {i}":
                        raise RuntimeError(f"{path} call {i} answered {text!r}")
                    if i >= 20:
                        times[path].append(elapsed)
            if count_commands:
                for path, session in (("held", held), ("forwarded", forwarded)):
                    counted = await commands_per_call(session, path, 200)
                    print(f"{path}: redis commands per call {counted}")
        finally:
            await held.close()
    return times


def run_once(calls: int, count_commands: bool) -> dict[str, list[float]]:
    """Fresh replicas A and B on a fresh namespace; the calls; the replicas stopped."""
    proxy = Contender("proxy", "proxy", RAW, "flood")
    with stores.prepared("redis") as store, contextlib.ExitStack() as stack:
        config = C.config_file(store.sections)
        stack.callback(config.unlink)
        ports = [C.free_port(), C.free_port()]
        for port in ports:
            stack.enter_context(
                C.running(proxy.argv(port, ["--config", str(config)]), port, store.env)
            )
        urls = [f"http://{C.HOST}:{port}/mcp" for port in ports]
        return asyncio.run(measure(urls[0], urls[1], ports[0], ports[1], calls, count_commands))


def row(label: str, values: list[float]) -> str:
    return (
        f"| {label} | {len(values)} | {statistics.median(values):.3f} "
        f"| {percentile(values, 0.9):.3f} | {percentile(values, 0.99):.3f} "
        f"| {statistics.fmean(values):.3f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="calls per path per repetition")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--commands", action="store_true", help="also count Redis commands per call, each path"
    )
    args = parser.parse_args()
    every: dict[str, list[float]] = {path: [] for path in PATHS}
    extra: list[float] = []
    print("| run | path | calls | p50 ms | p90 ms | p99 ms | mean ms |")
    print("|---|---|--:|--:|--:|--:|--:|")
    with stores.backends():  # the bench's redis-server, stopped at the end
        for rep in range(args.reps):
            times = run_once(args.calls, args.commands and rep == 0)
            for path in PATHS:
                every[path] += times[path]
                print(f"| {rep + 1} " + row(path, times[path]))
            extra.append(statistics.median(times["forwarded"]) - statistics.median(times["held"]))
    for path in PATHS:
        print("| all " + row(path, every[path]))
    print(f"forwarded p50 over held p50, per run: {', '.join(f'+{x:.3f}' for x in extra)} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
