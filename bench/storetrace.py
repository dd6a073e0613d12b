"""Run ``mcp-resume-proxy`` with its store commits and its wire gate timed (bench only).

``python bench/storetrace.py PROXY-ARGS...`` is ``mcp-resume-proxy PROXY-ARGS...`` with
two wrappers installed from outside (no proxy code changes):

- each ``Store.commit`` (or ``Store.commit_now``) the group commit
  (``proxy.store.persist.Persister``) makes: its wall time, its events, its new stream
  records and completions;
- each ``ClientConn.stored()`` that had to wait (the wire held behind the store): how
  long it waited;
- each event-loop callback (a task's step, a timer, a reader) that held the loop for more
  than 2 ms, with what ran (a task's coroutine, a callback's name), and per 10 ms of
  the clock how long the loop ran callbacks at all; each garbage collection's pause;
  each turn of the loop longer than 1 ms (its wait for I/O included)
  (``BENCH_STORETRACE_LOOP=0``: none of these loop figures, they cost CPU per callback);
- each POST's handling, and each round trip to a stdio server (a message sent, the next
  one back).

The timelines carry monotonic start times, comparable with ``bench/stall.py --dump``'s.

When the proxy exits (SIGTERM: it stops gracefully) the figures go as JSON to the file
named by ``BENCH_STORETRACE_OUT``. ``bench/profile_store.py --trace`` uses it.
"""

from __future__ import annotations

import asyncio
import asyncio.base_events
import dataclasses
import gc
import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy import cli, runtime
from proxy.store import persist
from proxy.store.base import Batch

commits: list[tuple[float, int, int, int]] = []  # (seconds, events, streams, completed)
waits: list[float] = []  # seconds a connection's writer waited for the store
# (monotonic start, seconds, events, sessions) of each commit; (start, seconds) of each wait
commit_times: list[tuple[float, float, int, int]] = []
wait_times: list[tuple[float, float]] = []
gate_checks = [0]  # stored() calls, waiting or not


def _timed_commit(
    commit: Callable[[Batch, float], Awaitable[None]],
) -> Callable[[Batch, float], Awaitable[None]]:
    async def timed(batch: Batch, now: float) -> None:
        t0 = time.perf_counter()
        m0 = time.monotonic()
        await commit(batch, now)
        took = time.perf_counter() - t0
        commits.append((took, batch.events(), len(batch.streams), len(batch.completed)))
        commit_times.append((m0, took, batch.events(), _sessions(batch)))

    return timed


def _sessions(batch: Batch) -> int:
    """How many sessions' events the batch holds (keys are ``epoch.number``)."""
    return len({key.split(".")[0] for key in batch.appends})


_persister_init = persist.Persister.__init__


def _timed_commit_now(commit_now: Callable[[Batch, float], Any]) -> Callable[[Batch, float], Any]:
    def timed(batch: Batch, now: float) -> Any:
        t0 = time.perf_counter()
        m0 = time.monotonic()
        refused = commit_now(batch, now)
        took = time.perf_counter() - t0
        commits.append((took, batch.events(), len(batch.streams), len(batch.completed)))
        commit_times.append((m0, took, batch.events(), _sessions(batch)))
        return refused

    return timed


def _init(self: persist.Persister, *args: Any, **kwargs: Any) -> None:
    _persister_init(self, *args, **kwargs)
    store = self.store
    if store.commits_at_once:  # commits made on the loop, without an await
        store.commit_now = _timed_commit_now(store.commit_now)  # type: ignore[method-assign]
    else:
        store.commit = _timed_commit(store.commit)  # type: ignore[method-assign]


_stored = runtime.ClientConn.stored


async def _gated(self: runtime.ClientConn) -> None:
    gate_checks[0] += 1
    gate = self.gate
    if gate is not None and not gate.landed(self.ticket, self.lane):
        t0 = time.perf_counter()
        m0 = time.monotonic()
        await _stored(self)
        waits.append(time.perf_counter() - t0)
        wait_times.append((m0, waits[-1]))


slow_callbacks: list[tuple[float, float, str]] = []  # (monotonic start, seconds, what)
busy: dict[int, float] = {}  # 10 ms bin of the monotonic clock -> seconds the loop ran callbacks
busy_cpu: dict[int, float] = {}  # the same, in the loop thread's CPU seconds
SLOW_S = float(os.environ.get("BENCH_STORETRACE_SLOW_MS", "2")) / 1000
_handle_run = asyncio.events.Handle._run


def _what(handle: asyncio.events.Handle) -> str:
    """The coroutine of a task's step, else the callback's name."""
    callback = handle._callback  # type: ignore[attr-defined]
    owner = getattr(callback, "__self__", None)
    if isinstance(owner, asyncio.Task):
        # where the step stopped: the chain of coroutines the task now waits in
        names, coro = [], owner.get_coro()
        while coro is not None and len(names) < 12:
            names.append(getattr(coro, "__qualname__", type(coro).__name__).split(".")[-1])
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        return "task " + ">".join(names)
    return getattr(callback, "__qualname__", repr(callback))[:200]


def _timed_run(self: asyncio.events.Handle) -> None:
    """A loop callback (a task's step, a reader's wake-up) that held the loop for long."""
    t0 = time.perf_counter()
    c0 = time.thread_time()
    _handle_run(self)
    took = time.perf_counter() - t0
    cpu = time.thread_time() - c0
    end = time.monotonic()
    slot = int(end * 100)
    busy[slot] = busy.get(slot, 0.0) + took
    busy_cpu[slot] = busy_cpu.get(slot, 0.0) + cpu
    if took > SLOW_S:
        slow_callbacks.append((end - took, took, f"{_what(self)} (cpu {cpu * 1000:.1f} ms)"))


gc_pauses: list[tuple[float, float, int]] = []  # (monotonic start, seconds, generation)
_gc_start = [0.0]


def _gc_timed(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _gc_start[0] = time.monotonic()
    else:
        gc_pauses.append((_gc_start[0], time.monotonic() - _gc_start[0], info["generation"]))


turns: list[tuple[float, float]] = []  # (monotonic start, seconds) of each loop turn over 1 ms
_run_once = asyncio.base_events.BaseEventLoop._run_once


def _timed_once(self: asyncio.base_events.BaseEventLoop) -> None:
    """One turn of the loop (its wait for I/O included: only turns over 1 ms are kept)."""
    t0 = time.monotonic()
    _run_once(self)  # type: ignore[attr-defined]
    took = time.monotonic() - t0
    if took > 0.001:
        turns.append((t0, took))


posts: list[tuple[float, float]] = []  # (monotonic start, seconds) of each POST handled
upstream_trips: list[tuple[float, float]] = []  # (sent, seconds to the next message back)
_sent: dict[int, float] = {}  # id(upstream) -> when a message went to it, none back yet


def _install_request_timers() -> None:
    from proxy.downstream import http
    from proxy.upstream import stdio

    post = http.StreamableHttp._post

    async def timed_post(self: Any, request: Any) -> Any:
        t0 = time.monotonic()
        try:
            return await post(self, request)
        finally:
            posts.append((t0, time.monotonic() - t0))

    http.StreamableHttp._post = timed_post  # type: ignore[method-assign]
    send = stdio.StdioUpstream.send

    def timed_send(self: Any, payload: bytes, handshake: Any = None) -> None:
        _sent.setdefault(id(self), time.monotonic())
        send(self, payload, handshake)

    stdio.StdioUpstream.send = timed_send  # type: ignore[method-assign]
    spawn = stdio.StdioUpstream._spawn

    async def timed_spawn(self: Any) -> None:
        await spawn(self)
        on_message = self._context.on_message

        def noted(msg: Any, origin: Any) -> None:
            sent = _sent.pop(id(self), None)
            if sent is not None:
                upstream_trips.append((sent, time.monotonic() - sent))
            on_message(msg, origin)

        self._context = dataclasses.replace(self._context, on_message=noted)

    stdio.StdioUpstream._spawn = timed_spawn  # type: ignore[method-assign]


def _quantiles(values: list[float], scale: float) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]  # noqa: E731
    return {
        "n": len(values),
        "p50": pick(0.5) * scale,
        "p90": pick(0.9) * scale,
        "p99": pick(0.99) * scale,
        "mean": statistics.fmean(values) * scale,
    }


def report() -> dict[str, Any]:
    return {
        "commits": len(commits),
        "commit_us": _quantiles([c[0] for c in commits], 1e6),
        "events_per_commit": _quantiles([float(c[1]) for c in commits], 1.0),
        "commits_with_new_streams": sum(1 for c in commits if c[2]),
        "commits_with_completions": sum(1 for c in commits if c[3]),
        "events": sum(c[1] for c in commits),
        "commit_seconds": sum(c[0] for c in commits),
        "gate_checks": gate_checks[0],
        "gate_wait_us": _quantiles(waits, 1e6),
        # the timeline (monotonic seconds: comparable with the bench clients' on one host)
        "commit_timeline": commit_times,
        "wait_timeline": wait_times,
        "slow_callbacks": slow_callbacks,
        "loop_busy_10ms": sorted(busy.items()),
        "loop_cpu_10ms": sorted(busy_cpu.items()),
        "gc_pauses": gc_pauses,
        "turns": turns,
        "posts": posts,
        "upstream_trips": upstream_trips,
    }


def main() -> int:
    persist.Persister.__init__ = _init  # type: ignore[method-assign]
    runtime.ClientConn.stored = _gated  # type: ignore[method-assign]
    if os.environ.get("BENCH_STORETRACE_LOOP", "1") == "1":  # the costly part: each callback
        asyncio.events.Handle._run = _timed_run  # type: ignore[method-assign]
        asyncio.base_events.BaseEventLoop._run_once = _timed_once  # type: ignore[attr-defined]
        gc.callbacks.append(_gc_timed)
    if os.environ.get("BENCH_STORETRACE_CALLS", "1") == "1":
        _install_request_timers()
    status = cli.main(sys.argv[1:])
    out = os.environ.get("BENCH_STORETRACE_OUT")
    if out:
        Path(out).write_text(json.dumps(report(), indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main())
