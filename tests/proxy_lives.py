"""Proxy processes that come and go on one store (tests/test_restart.py, the replicas,
the store chaos, principals' streams, the modern tasks): :func:`lives` starts as many as a
test asks for on a SQLite file (default) or a shared Redis (:func:`shared`), kills one
with SIGKILL when told (its server processes must die with it), and stops the rest on
the way out. :func:`read_some` and :func:`progress_of` read what a cut client received.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from proxy.core.sse import SSEDecoder
from tests.redis_server import RedisServer
from tests.support import (
    FIXTURE,
    ROOT,
    alive,
    eventually,
    log_events,
    stop_proxy,
    tail,
    wait_listening,
)

SECRET = "a-test-secret-of-some-length"


@dataclass
class Proxy:
    """One life of a proxy process on the store file."""

    process: asyncio.subprocess.Process
    url: str
    log_path: Path

    def upstream_pids(self) -> list[int]:
        text = self.log_path.read_text(errors="replace")
        return [int(e["pid"]) for e in log_events(text, "upstream_started")]


@dataclass
class Lives:
    tmp_path: Path
    streams: dict[str, Any] = field(default_factory=dict)
    count: int = 0
    command: list[str] = field(default_factory=lambda: list(FIXTURE))
    store: dict[str, Any] = field(default_factory=dict)  # default: sqlite in tmp_path
    sessions: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # more sections (modern, tasks)
    env: dict[str, str] = field(default_factory=dict)  # added to each process's environment

    def config(self) -> dict[str, Any]:
        return self.extra | {
            "listen": {"host": "127.0.0.1", "port": 0},
            "upstream": {"command": self.command, "stop_grace_seconds": 1},
            "store": self.store or {"kind": "sqlite", "path": str(self.tmp_path / "store.db")},
            "streams": {"token_secret": SECRET, **self.streams},
            "sessions": self.sessions,
            "log": {"format": "json", "level": "debug"},
        }

    async def start(self) -> Proxy:
        self.count += 1
        config_path = self.tmp_path / f"proxy-{self.count}.yaml"
        config_path.write_text(yaml.safe_dump(self.config()))
        log_path = self.tmp_path / f"proxy-{self.count}.log"
        with log_path.open("wb") as log_file:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                *("-m", "proxy", "--config", str(config_path)),
                stdout=log_file,
                stderr=log_file,
                cwd=str(ROOT),
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
            )
        port = await wait_listening(proc, log_path, "the proxy")
        return Proxy(proc, f"http://127.0.0.1:{port}/mcp", log_path)

    async def kill(self, proxy: Proxy) -> None:
        """SIGKILL: no shutdown runs; the server processes must die with it all the same."""
        pids = proxy.upstream_pids()
        proxy.process.kill()
        await proxy.process.wait()
        await eventually(
            lambda: not any(alive(pid) for pid in pids),
            what=lambda: f"server processes {pids} to die with the killed proxy",
        )


@asynccontextmanager
async def lives(
    tmp_path: Path,
    store: dict[str, Any] | None = None,
    *,
    sessions: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    **streams: Any,
) -> AsyncIterator[tuple[Lives, aiohttp.ClientSession]]:
    """Proxy processes on one store (``store``: its config; default a SQLite file), with
    ``sessions`` and ``streams`` config sections and ``env`` in their environment."""
    made = Lives(tmp_path, streams, store=store or {}, sessions=sessions or {}, env=env or {})
    running: list[Proxy] = []
    original = made.start

    async def start() -> Proxy:
        proxy = await original()
        running.append(proxy)
        return proxy

    made.start = start  # type: ignore[method-assign]
    async with aiohttp.ClientSession() as http:
        try:
            yield made, http
        finally:
            # Every one is stopped (killed if it hangs) before the first failure is raised:
            # a proxy left running would outlive the test.
            failures = []
            for proxy in running:
                try:
                    code = await stop_proxy(proxy.process)
                except TimeoutError:
                    failures.append(f"proxy did not stop on SIGTERM:\n{tail(proxy.log_path)}")
                    continue
                if code not in (0, -9):
                    failures.append(f"proxy exited {code}:\n{tail(proxy.log_path)}")
            assert not failures, "\n".join(failures)


async def read_some(
    resp: aiohttp.ClientResponse, n: int, dec: SSEDecoder | None = None
) -> tuple[list[dict[str, Any]], str]:
    """Read whole events until ``n`` messages came (or the answer ended); return them and
    the last event id. ``dec``: the decoder to go on with (a later read of the same
    answer passes the same one: an event cut between two reads is not lost)."""
    dec = SSEDecoder() if dec is None else dec
    got: list[dict[str, Any]] = []
    last_id = ""
    async for chunk in resp.content.iter_any():
        for event in dec.feed(chunk):
            if event.id:
                last_id = event.id
            if event.data:
                got.append(json.loads(event.data))
        if len(got) >= n:
            break
    return got, last_id


def progress_of(received: list[dict[str, Any]]) -> list[int]:
    return [
        int(m["params"]["progress"]) for m in received if m.get("method", "").endswith("progress")
    ]


_namespaces = itertools.count()


@contextmanager
def restartable_redis(tmp_path: Path, **extra: Any) -> Iterator[tuple[RedisServer, dict[str, Any]]]:
    """A ``redis-server`` of the test's own that keeps its data when restarted (a test
    stops and starts it under the replicas), and the store config of replicas on it:
    :func:`shared`'s, with ``extra`` (``unavailable_wait_seconds``, say)."""
    with RedisServer(tmp_path / "redis", durable=True) as server:
        yield server, {**shared(server.url), **extra}


def shared(redis_url: str, lease: float = 10.0) -> dict[str, Any]:
    """The store config of replicas sharing the Redis at ``redis_url``, under a key
    namespace of this test's own, with owners' leases of ``lease`` seconds."""
    namespace = f"replicas{next(_namespaces)}"
    return {"kind": "redis", "url": redis_url, "namespace": namespace, "lease_seconds": lease}
