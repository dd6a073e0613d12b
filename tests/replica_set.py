"""Proxy replicas on fixed ports, for a balancer in front of them (tests/balancer.py).

A balancer's config names its backends' ports up front, so each :class:`Replica` holds a
reserved port (:func:`tests.support.reserved_port`) for its whole life and every life of
its process listens there: a replica SIGKILLed and started again is back in the same
backend slot. Each life logs to a file of its own (``replica-<i>-<life>.log``).

The faults a nemesis needs act on one replica: :meth:`Replica.kill` (SIGKILL),
:meth:`Replica.pause` / :meth:`Replica.resume` (SIGSTOP / SIGCONT),
and drain: :meth:`Replica.stop` (SIGTERM) of a life started with
:data:`DRAIN_ENV` (``MCP_RESUME_PROXY_DRAIN_SECONDS``) in its env drains where drain is
built, instead of stopping at once; then :meth:`Replica.start` again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support import (
    FIXTURE,
    ROOT,
    ReservedPort,
    alive,
    descendants,
    eventually,
    log_events,
    reserved_port,
    tail,
    wait_listening,
)

SECRET = "a-secret-shared-by-the-replicas"
DRAIN_ENV = "MCP_RESUME_PROXY_DRAIN_SECONDS"
STOP_S = 30.0


def replica_config(port: int, store: dict[str, Any], **sections: dict[str, Any]) -> dict[str, Any]:
    """A replica's config: the legacy fixture server, the shared store, JSON logs."""
    config: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": port},
        "upstream": {"command": list(FIXTURE), "stop_grace_seconds": 1},
        "store": store,
        "streams": {"token_secret": SECRET},
        "log": {"format": "json", "level": "debug"},
    }
    for key, value in sections.items():
        config.setdefault(key, {}).update(value)
    return config


@dataclass(eq=False)
class Replica:
    """One replica slot: a port held for it and the process of its current life."""

    index: int
    directory: Path
    config: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    lives: int = 0
    process: asyncio.subprocess.Process | None = None
    log_path: Path | None = None
    pids_seen: set[int] = field(default_factory=set)  # every pid of it and its servers
    _reservation: ReservedPort | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def reserve(self) -> None:
        if self._reservation is None:
            self._reservation = reserved_port()
            self.port = self._reservation.__enter__()
            self.config["listen"]["port"] = self.port

    def release(self) -> None:
        if self._reservation is not None:
            self._reservation.__exit__(None, None, None)
            self._reservation = None

    async def start(self, env: dict[str, str] | None = None) -> None:
        """Start a new life on the replica's port; wait until it listens."""
        self.reserve()
        self.lives += 1
        name = f"replica-{self.index}-{self.lives}"
        config_path = self.directory / f"{name}.yaml"
        config_path.write_text(yaml.safe_dump(self.config))
        self.log_path = self.directory / f"{name}.log"
        with self.log_path.open("wb") as log_file:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                *("-m", "proxy", "--config", str(config_path)),
                stdout=log_file,
                stderr=log_file,
                cwd=str(ROOT),
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env, **(env or {})},
            )
        self.pids_seen.add(self.process.pid)
        await wait_listening(self.process, self.log_path, f"replica {self.index}")

    def note_pids(self) -> None:
        """Remember the live pids of this life and its descendants (for the leak check)."""
        if self.running and self.process is not None:
            self.pids_seen.add(self.process.pid)
            self.pids_seen |= descendants(self.process.pid)

    def upstream_pids(self) -> list[int]:
        if self.log_path is None:
            return []
        text = self.log_path.read_text(errors="replace")
        return [int(e["pid"]) for e in log_events(text, "upstream_started")]

    async def kill(self) -> None:
        """SIGKILL: no shutdown runs (the server processes must die with it all the same)."""
        if self.process is None or not self.running:
            return
        self.note_pids()
        self.process.send_signal(signal.SIGCONT)
        self.process.kill()
        await self.process.wait()

    def pause(self) -> None:
        if self.running and self.process is not None:
            self.note_pids()
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.running and self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    async def stop(self, timeout: float = STOP_S) -> int:
        """SIGTERM (after SIGCONT), then SIGKILL past ``timeout``; the exit code."""
        process = self.process
        if process is None:
            return 0
        if process.returncode is None:
            self.note_pids()
            process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), timeout)
            except TimeoutError:
                process.kill()
                await process.wait()
        return process.returncode if process.returncode is not None else -1

    def log_tail(self) -> str:
        return tail(self.log_path) if self.log_path is not None else "<never started>"


@dataclass
class ReplicaSet:
    """``count`` replica slots on one store, each on its own reserved port."""

    directory: Path
    replicas: list[Replica]

    @property
    def ports(self) -> list[int]:
        return [r.port for r in self.replicas]

    def leftovers(self) -> list[int]:
        """Pids ever seen for these replicas (proxies, servers) that still run."""
        for replica in self.replicas:
            replica.note_pids()
        running = {r.process.pid for r in self.replicas if r.running and r.process is not None}
        return sorted(
            pid for r in self.replicas for pid in r.pids_seen if pid not in running and alive(pid)
        )


@contextlib.asynccontextmanager
async def replica_set(
    directory: Path,
    count: int,
    store: dict[str, Any] | list[dict[str, Any]],
    env: dict[str, str] | None = None,
    **sections: dict[str, Any],
) -> AsyncIterator[ReplicaSet]:
    """``count`` replicas on ``store`` (or replica i on ``store[i]``: one store reached
    by each through its own link), started; stopped (and their ports released) on the
    way out, with their server processes checked gone."""
    directory.mkdir(parents=True, exist_ok=True)
    stores = store if isinstance(store, list) else [store] * count
    replicas = [
        Replica(i, directory, replica_config(0, stores[i], **sections), dict(env or {}))
        for i in range(count)
    ]
    made = ReplicaSet(directory, replicas)
    try:
        for replica in replicas:
            replica.reserve()
        await asyncio.gather(*(r.start() for r in replicas))
        yield made
    finally:
        for replica in replicas:
            replica.note_pids()
        codes = await asyncio.gather(*(r.stop() for r in replicas), return_exceptions=True)
        for replica in replicas:
            replica.release()
        await eventually(
            lambda: not made.leftovers(),
            timeout=15.0,
            what=lambda: f"the replicas' processes to end: {made.leftovers()}",
        )
        for replica, code in zip(replicas, codes, strict=True):
            assert code in (0, -9), f"replica {replica.index} exited {code}:\n{replica.log_tail()}"
