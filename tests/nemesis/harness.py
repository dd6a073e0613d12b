"""The nemesis run (issue 19): three replicas behind HAProxy on one Redis (or, with
``Settings.store = "sqlite"``, one replica on a SQLite file), clients of every kind, a
seeded schedule of faults, then the audit and the checker.

:func:`run_nemesis` starts a Redis of its own, the replicas (each life with
``MCP_RESUME_PROXY_DRAIN_SECONDS`` set, so SIGTERM drains where drain is built), the
balancer, and a cutter (tests/cut_proxy.py) in front of the balancer for each legacy,
WebSocket and shim client. The clients run calls until ``seconds`` have passed; the
faults (tests/nemesis/schedule.py) run meanwhile, one after the other. Then every
replica runs again, each call gets up to ``bound`` seconds to end, the store is audited,
the sessions are deleted, everything is stopped, and what is left (keys without a TTL,
processes) is collected. :class:`Report` holds the figures and the checker's verdict.

Used by tests/nemesis/test_nemesis.py (bounded, in the test command) and by
bench/nemesis.py (longer, more faults).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from tests.balanced import Cluster, cluster
from tests.cut_proxy import CutProxy
from tests.modern.client import Modern
from tests.nemesis.audit import (
    audit_legacy,
    audit_task,
    keys_without_ttl,
    leftover_processes,
)
from tests.nemesis.checker import Violation, check_run
from tests.nemesis.failover import RedisPair
from tests.nemesis.history import Audit, Call
from tests.nemesis.http_clients import LegacyClient, ModernClient
from tests.nemesis.links import RedisLink
from tests.nemesis.schedule import KINDS, Fault, make_schedule
from tests.nemesis.stream_clients import ShimClient, WsClient
from tests.nemesis.timeline import Timeline
from tests.redis_server import RedisServer
from tests.replica_set import DRAIN_ENV
from tests.support import MCP_HEADERS, descendants

Log = Callable[[str], None]


@dataclass
class Settings:
    seconds: float = 30.0  # clients start calls this long
    faults: int = 6
    kinds: tuple[str, ...] = KINDS
    clients: dict[str, int] = field(
        default_factory=lambda: {"legacy": 2, "modern": 1, "ws": 1, "shim": 1}
    )
    lease: float = 2.0
    bound: float = 25.0  # every call ends within this (s)
    drain_seconds: float = 5.0
    store: str = "redis"  # or "sqlite": one replica on a SQLite file (no redis fault)

    @property
    def replicas(self) -> int:
        return 3 if self.store == "redis" else 1


@dataclass
class Report:
    seed: int
    schedule: list[Fault]
    calls: list[Call]
    audits: dict[str, Audit]
    violations: list[Violation]
    faults_done: Counter[str]
    fault_spans: list[tuple[float, float, str]] = field(default_factory=list)
    timeline: Timeline = field(default_factory=Timeline)

    def faults_during(self, label: str) -> str:
        """The kinds of the faults that overlapped a call's life (a hint at a cause)."""
        call = next((c for c in self.calls if c.label == label), None)
        if call is None:
            return ""
        end = call.ended if call.ended is not None else float("inf")
        kinds = sorted(
            {k for start, stop, k in self.fault_spans if start <= end and stop >= call.started}
        )
        return ",".join(kinds) or "none"

    def figures(self) -> str:
        outcomes: Counter[str] = Counter(f"{c.kind}/{c.tool} {c.outcome}" for c in self.calls)
        ended = [c.ended - c.started for c in self.calls if c.ended is not None]
        rules = Counter(v.rule for v in self.violations)
        gone = sum(1 for a in self.audits.values() if a.gone)
        lines = [
            f"seed={self.seed} (replay: --seed {self.seed})",
            f"calls: {len(self.calls)} "
            + " ".join(f"{k}={n}" for k, n in sorted(Counter(c.kind for c in self.calls).items())),
            "faults: " + " ".join(f"{k}={n}" for k, n in sorted(self.faults_done.items())),
            "outcomes: " + ", ".join(f"{k}: {n}" for k, n in sorted(outcomes.items())),
            f"max time-to-end: {max(ended, default=0.0):.1f}s",
            f"audited: {len(self.audits)} streams ({gone} gone from the store)",
            f"violations: {len(self.violations)} "
            + " ".join(f"{k}={n}" for k, n in sorted(rules.items())),
            "where the time went:",
            self.timeline.describe(),
        ]
        return "\n".join(lines)

    def details(self, limit: int = 40) -> str:
        shown = [
            f"{v} [faults during: {self.faults_during(v.label)}]" for v in self.violations[:limit]
        ]
        more = len(self.violations) - limit
        return "\n".join(shown + ([f"... {more} more"] if more > 0 else []))


class FaultRunner:
    """Carries out a schedule, one fault after the other, at (or after) its time."""

    def __init__(
        self,
        c: Cluster,
        pair: RedisPair | None,
        cutters: list[CutProxy],
        log: Log,
        timeline: Timeline,
    ):
        self.c, self.pair, self.cutters, self.log = c, pair, cutters, log
        self.timeline = timeline
        self.done: Counter[str] = Counter()
        self.spans: list[tuple[float, float, str]] = []

    async def run(self, schedule: list[Fault], clock: Callable[[], float]) -> None:
        for fault in schedule:
            wait = fault.at - clock()
            if wait > 0:
                await asyncio.sleep(wait)  # the schedule's own timing, not a synchronisation
            self.log(f"nemesis: {fault.describe()}")
            began = clock()
            with self.timeline.phase(f"fault {fault.describe().strip()}"):
                await self.apply(fault)
            # a cut lands on the next bytes; the others act while apply runs
            self.spans.append((began, clock() + (2.0 if fault.kind == "cut" else 0.0), fault.kind))
            self.done[fault.kind] += 1

    async def apply(self, fault: Fault) -> None:
        replica = self.c.replicas.replicas[fault.target]
        if fault.kind == "cut":
            for cutter in self.cutters:
                cutter.schedule_cuts([int(fault.value)])
        elif fault.kind == "kill":
            await replica.kill()
            await asyncio.sleep(fault.value)
            await replica.start()
        elif fault.kind == "pause":
            replica.pause()
            try:
                await asyncio.sleep(fault.value)
            finally:
                replica.resume()
        elif fault.kind == "redis":  # the master (its replica goes on replicating after)
            assert self.pair is not None, "a redis fault needs the redis store"
            master = self.pair.current
            master.stop()
            await asyncio.sleep(fault.value)
            await asyncio.to_thread(master.start)
        elif fault.kind == "stall":
            assert self.pair is not None, "a stall needs the redis store"
            master = self.pair.current
            master.pause()
            try:
                await asyncio.sleep(fault.value)
            finally:
                master.resume()
        elif fault.kind == "failover":
            assert self.pair is not None, "a failover needs the redis store"
            await self.pair.failover(self.log)
        elif fault.kind == "drain":
            await replica.stop()
            await replica.start()
        elif fault.kind in ("partition", "blackhole"):
            assert self.pair is not None, "a partition needs the redis store"
            link = self.pair.links[fault.target]  # replica i's own link to Redis
            if fault.kind == "partition":
                link.down()
            else:
                link.hang()
            try:
                await asyncio.sleep(fault.value)
            finally:
                await link.up()

    async def heal(self) -> None:
        """Every replica running and not paused, Redis up, every replica in rotation."""
        for replica in self.c.replicas.replicas:
            replica.resume()
            if not replica.running:
                await replica.start()
        if self.pair is not None:
            for server in self.pair.servers:
                server.resume()
        if self.pair is not None and not self.pair.current.running:
            await asyncio.to_thread(self.pair.current.start)
        for link in self.pair.links if self.pair is not None else []:
            await link.up()
        await self.c.lb.wait_up()


async def run_nemesis(
    directory: Path,
    seed: int,
    settings: Settings,
    log: Log = print,
    timeline: Timeline | None = None,
) -> Report:
    """One run; ``timeline`` (one of the caller's, to read if the run hangs) says where
    its time went."""
    timeline = timeline if timeline is not None else Timeline()
    rng = random.Random(seed)
    schedule = make_schedule(
        seed,
        seconds=settings.seconds,
        count=settings.faults,
        kinds=settings.kinds,
        replicas=settings.replicas,
        lease=settings.lease,
    )
    log(f"nemesis: seed={seed}; schedule:\n  " + "\n  ".join(f.describe() for f in schedule))
    calls: list[Call] = []
    audits: dict[str, Audit] = {}
    leftovers: list[str] = []
    loose_keys: list[str] = []
    env = {DRAIN_ENV: f"{settings.drain_seconds:g}"}
    sections: dict[str, dict[str, Any]] = {
        "tasks": {"mode": "after_ms", "after_ms": 300},
        "streams": {"event_id_in_meta": True},
        "sse": {"keepalive_seconds": 1.0},
    }
    # What ran before (another test's session-wide Redis on this worker) is not ours.
    before = descendants(os.getpid())
    async with contextlib.AsyncExitStack() as outer:
        pair: RedisPair | None = None
        links: list[RedisLink] = []
        if settings.store == "redis":
            # A restart keeps the keys (an append-only file synced on every write), as a
            # Redis deployed with persistence does; one that loses them is test_replicas'
            # flush. The master has a replica, for failovers (tests/nemesis/failover.py).
            servers = [
                outer.enter_context(RedisServer(directory / name, durable=True))
                for name in ("redis", "redis-replica")
            ]
            # Each replica reaches Redis through a link of its own (a partition cuts one).
            for _ in range(settings.replicas):
                link = RedisLink(servers[0].port)
                await link.up()
                outer.push_async_callback(link.close)
                links.append(link)
            pair = RedisPair(servers, links)
            await pair.replicate()
            stores: list[dict[str, Any]] = [
                {
                    "kind": "redis",
                    "url": link.url(),
                    "namespace": "nemesis",
                    "lease_seconds": settings.lease,
                }
                for link in links
            ]
        else:  # one replica: a SQLite file has one writer; a kill restarts it on the file
            stores = [{"kind": "sqlite", "path": str(directory / "store.db")}]
        async with contextlib.AsyncExitStack() as stack:
            with timeline.phase("starting the replicas and the balancer"):
                c = await stack.enter_async_context(
                    cluster(directory, stores, settings.replicas, env, **sections)
                )
            calls, audits, faults, crashed = await drive(
                c, pair, directory, rng, schedule, settings, log, timeline
            )
            with timeline.phase("stopping the replicas and the balancer"):
                await stack.aclose()
        loose_keys = await keys_without_ttl(pair.current.url) if pair is not None else []
        ours = [s._process.pid for s in pair.servers if s._process] if pair is not None else []
        leftovers = leftover_processes(before | set(ours))
    violations = [Violation("client_crashed", name, "see the log") for name in crashed]
    violations += check_run(
        calls,
        audits,
        bound=settings.bound,
        keys_without_ttl=loose_keys,
        leftover_processes=leftovers,
    )
    return Report(seed, schedule, calls, audits, violations, faults.done, faults.spans, timeline)


async def drive(
    c: Cluster,
    pair: RedisPair | None,
    directory: Path,
    rng: random.Random,
    schedule: list[Fault],
    settings: Settings,
    log: Log,
    timeline: Timeline,
) -> tuple[list[Call], dict[str, Audit], FaultRunner, list[str]]:
    loop = asyncio.get_running_loop()
    t0 = loop.time()

    def clock() -> float:
        return loop.time() - t0

    cutters: list[CutProxy] = []
    clients: list[Any] = []
    crashed: list[str] = []
    timeout = aiohttp.ClientTimeout(total=None, connect=10)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        try:
            for kind, count in settings.clients.items():
                for i in range(count):
                    name = f"{kind}-{i}"
                    child = random.Random(rng.random())
                    if kind == "modern":
                        clients.append(
                            ModernClient(name, http, c.lb.url, child, clock, settings.bound)
                        )
                        continue
                    cutter = CutProxy(c.lb.port)
                    await cutter.start()
                    cutters.append(cutter)
                    if kind == "legacy":
                        clients.append(
                            LegacyClient(name, http, cutter.url(), child, clock, settings.bound)
                        )
                    elif kind == "ws":
                        ws_url = cutter.url("/ws").replace("http://", "ws://")
                        clients.append(WsClient(name, ws_url, child, clock, settings.bound))
                    elif kind == "shim":
                        shim_log = directory / f"{name}.log"
                        clients.append(
                            ShimClient(name, cutter.url(), shim_log, child, clock, settings.bound)
                        )
            faults = FaultRunner(c, pair, cutters, log, timeline)
            running = [asyncio.create_task(client.run(settings.seconds)) for client in clients]
            with timeline.phase(f"the {len(schedule)} faults (and healing)"):
                await faults.run(schedule, clock)
                await faults.heal()
            log(f"nemesis: t={clock():.1f}s faults done, waiting for the calls to end")
            left = max(0.0, settings.seconds - clock()) + settings.bound + 5
            with timeline.phase("the clients' last calls ending"):
                _, pending = await asyncio.wait(running, timeout=left)
            for task in pending:  # a client past every bound: its calls stay open
                task.cancel()
            ends = await asyncio.gather(*running, return_exceptions=True)
            for client, end in zip(clients, ends, strict=True):
                if isinstance(end, asyncio.CancelledError):
                    continue  # given up past every bound: its open call says so
                if isinstance(end, BaseException):  # a bug of the client: say so, loudly
                    crash = "".join(traceback.format_exception(end)[-3:])
                    log(f"nemesis: client {client.name} crashed: {crash}")
                    crashed.append(f"{client.name}: {end!r}")
            for cutter in cutters:
                cutter.schedule_cuts([])
            await faults.heal()
            calls = [call for client in clients for call in client.calls]
            log(f"nemesis: t={clock():.1f}s calls ended, auditing the store")
            with timeline.phase("the audit"):
                audits = await audit_all(http, c.lb.url, calls)
                await delete_sessions(http, c.lb.url, clients)
            log(f"nemesis: t={clock():.1f}s audited, stopping")
            return calls, audits, faults, crashed
        finally:
            for cutter in cutters:
                await cutter.stop()


AUDITS_AT_ONCE = 8


async def audit_all(http: aiohttp.ClientSession, url: str, calls: list[Call]) -> dict[str, Audit]:
    """Every call's stream (or task record) read back from the store, a few at a time
    (each read is bounded: a stream left open is reported, not waited for)."""
    modern = Modern(http, url)
    audits: dict[str, Audit] = {}
    room = asyncio.Semaphore(AUDITS_AT_ONCE)

    async def audit(call: Call) -> None:
        assert call.stream is not None
        async with room:
            if call.kind in ("legacy", "ws") and "event" in call.stream:  # /ws's on /mcp too
                audits[call.label] = await audit_legacy(http, url, call)
            elif call.kind == "modern":
                audits[call.label] = await audit_task(modern, call)

    await asyncio.gather(*(audit(call) for call in calls if call.stream is not None))
    return audits


async def delete_sessions(http: aiohttp.ClientSession, url: str, clients: list[Any]) -> None:
    for client in clients:
        if isinstance(client, LegacyClient) and client.session_id:
            with contextlib.suppress(aiohttp.ClientError):
                async with http.delete(url, headers=client.headers()):
                    pass
        if isinstance(client, WsClient) and client.session_id:
            headers = {**MCP_HEADERS, "Mcp-Session-Id": client.session_id}
            with contextlib.suppress(aiohttp.ClientError):
                async with http.delete(url, headers=headers):
                    pass
