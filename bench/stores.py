"""The stores behind the ``proxy+sqlite`` / ``proxy+redis`` contenders, and their probes.

- :class:`RedisServer`: one ``redis-server`` the benchmark starts itself on a free
  127.0.0.1 port and on a Unix socket in its temporary directory (``--save ''
  --appendonly no``: nothing on disk), in its own process group, stopped (SIGTERM to the
  group, then SIGKILL) when the run ends. Store kind ``redis`` reaches it through the
  Unix socket (``unix://``: what a proxy with a Redis sidecar on its host uses),
  ``redis-tcp`` through the port (``redis://127.0.0.1:PORT/0``); both go through the
  store's own connections (``proxy/store/redis_wire.py``).
- :func:`prepared`: what one start of a proxy needs for its store: the ``store:`` section
  of its config file (sqlite: a fresh file in a fresh temporary directory,
  ``synchronous: normal``; redis: a fresh namespace on the bench's server), the
  environment (the token secret: ``MCP_RESUME_PROXY_TOKEN_SECRET``), and a probe.
- A probe (a string, so it can be handed to a phase script on its command line:
  ``sqlite:PATH`` or ``redis://HOST:PORT/0#NAMESPACE``, TCP whichever way the proxy
  talks to the server) tells what the store holds
  (:func:`footprint`: bytes used, events, their payload bytes) and a stream's state
  (:func:`stream_state`), read from outside the proxy.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import socket
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis  # the proxy's own dependency

from proxy.store.redis_layout import Layout

HOST = "127.0.0.1"
KINDS = ("memory", "sqlite", "redis", "redis-tcp")
REDIS_KINDS = ("redis", "redis-tcp")  # the same server: its Unix socket, its TCP port
TOKEN_SECRET = "bench-token-secret-0123456789"  # >= 16 characters; a benchmark, not a secret
STOP_S = 15.0

_namespaces = itertools.count(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=2.0) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` child in a temporary directory: :meth:`start`, :meth:`stop`."""

    def __init__(self) -> None:
        self.port = 0
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server over TCP (127.0.0.1)."""
        return f"redis://{HOST}:{self.port}/0"

    @property
    def socket_path(self) -> str:
        assert self._dir is not None
        return str(Path(self._dir.name) / "redis.sock")

    @property
    def unix_url(self) -> str:
        """The server over its Unix socket."""
        return f"unix://{self.socket_path}?db=0"

    @property
    def pid(self) -> int:
        assert self._proc is not None
        return self._proc.pid

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (scripts/install-redis.sh)")
        self._dir = tempfile.TemporaryDirectory(prefix="bench-redis-")
        self.port = _free_port()
        argv = [
            binary,
            *("--port", str(self.port), "--bind", HOST),
            *("--unixsocket", self.socket_path, "--unixsocketperm", "700"),
            *("--save", "", "--appendonly", "no", "--daemonize", "no"),
            *("--dir", self._dir.name, "--logfile", ""),
        ]
        log = Path(self._dir.name) / "redis.log"
        with log.open("wb") as out:
            self._proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + 30
        while not _answers_ping(self.port):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start: {log.read_text()[-500:]}")
            time.sleep(0.02)

    def flush(self) -> None:
        """Delete every key of every namespace (FLUSHALL)."""
        client = redis.Redis.from_url(self.url)
        with contextlib.closing(client):
            client.flushall()

    def stop(self) -> None:
        """SIGTERM to its process group, then SIGKILL; the directory goes too."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, 15)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=STOP_S)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            proc.wait(timeout=5)
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None


class Backends:
    """The run's shared store servers: Redis is started on first use, stopped by
    :meth:`close` (``with backends():`` around the whole run)."""

    def __init__(self) -> None:
        self._redis: RedisServer | None = None

    def redis(self) -> RedisServer:
        if self._redis is None:
            server = RedisServer()
            server.start()
            self._redis = server
        return self._redis

    def close(self) -> None:
        server, self._redis = self._redis, None
        if server is not None:
            server.stop()


BACKENDS = Backends()


@contextlib.contextmanager
def backends() -> Iterator[Backends]:
    try:
        yield BACKENDS
    finally:
        BACKENDS.close()


@dataclass(frozen=True)
class StoreSetup:
    """One start's store: its config section, environment and probe ("" for memory)."""

    kind: str
    sections: str = ""
    env: dict[str, str] = field(default_factory=dict)
    probe: str = ""


def redis_setup(namespace: str | None = None, kind: str = "redis") -> StoreSetup:
    """A redis store on the bench's server (``redis``: its Unix socket, ``redis-tcp``: its
    port); a fresh namespace unless one is given (two replicas of one deployment share
    theirs)."""
    server = BACKENDS.redis()
    ns = namespace or f"bench{os.getpid()}-{next(_namespaces)}"
    url = server.url if kind == "redis-tcp" else server.unix_url
    sections = f"store:\n  kind: redis\n  url: {url}\n  namespace: {ns}\n"
    env = {"MCP_RESUME_PROXY_TOKEN_SECRET": TOKEN_SECRET}
    return StoreSetup(kind, sections, env, f"{server.url}#{ns}")


@contextlib.contextmanager
def prepared(kind: str, *, alone: bool = False) -> Iterator[StoreSetup]:
    """The store for one start of a proxy (sqlite: its directory is deleted afterwards).

    ``alone``: redis is flushed first, so that nothing of earlier starts (keys expiring
    meanwhile) moves ``used_memory`` while a phase measures it.
    """
    if kind == "memory":
        yield StoreSetup("memory")
    elif kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="bench-sqlite-") as directory:
            path = Path(directory) / "streams.db"
            sections = f"store:\n  kind: sqlite\n  path: {path}\n  synchronous: normal\n"
            env = {"MCP_RESUME_PROXY_TOKEN_SECRET": TOKEN_SECRET}
            yield StoreSetup("sqlite", sections, env, f"sqlite:{path}")
    elif kind in REDIS_KINDS:
        if alone:
            BACKENDS.redis().flush()
        yield redis_setup(kind=kind)
    else:
        raise ValueError(kind)


# ---------------------------------------------------------------- probes (from outside)


@dataclass(frozen=True)
class Footprint:
    used_bytes: int  # sqlite: db + wal file sizes; redis: INFO memory used_memory
    events: int  # entries stored, over every log
    payload_bytes: int  # their payloads' lengths, summed
    # sqlite: the database's own size (page_count x page_size, as read through the WAL),
    # whatever the WAL file's high-water mark; redis: MEMORY USAGE of the namespace's keys
    data_bytes: int


def _sqlite(path: str) -> sqlite3.Connection:
    # Read-only; WAL lets it read while the proxy writes.
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=10)


def _redis(probe: str) -> tuple[redis.Redis, Layout]:
    """A client for a ``redis://…#NAMESPACE`` probe, and the namespace's key layout."""
    url, _, ns = probe.partition("#")
    return redis.Redis.from_url(url), Layout(ns)


def _file_bytes(path: str) -> int:
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def footprint(probe: str) -> Footprint:
    """What the store holds now (the whole store: a Redis is shared by its namespaces)."""
    if probe.startswith("sqlite:"):
        path = probe.removeprefix("sqlite:")
        with contextlib.closing(_sqlite(path)) as db:
            events, payload = db.execute(
                "SELECT count(*), coalesce(sum(length(payload)), 0) FROM events"
            ).fetchone()
            pages = db.execute("PRAGMA page_count").fetchone()[0]
            page_size = db.execute("PRAGMA page_size").fetchone()[0]
        return Footprint(_file_bytes(path), int(events), int(payload), pages * page_size)
    client, layout = _redis(probe)
    events = payload = data = 0
    with contextlib.closing(client):
        used = int(client.info("memory")["used_memory"])
        for key in client.scan_iter(match=f"{layout.prefix}*", count=1000):
            data += int(client.memory_usage(key, samples=0) or 0)
        for log in client.scan_iter(match=f"{layout.prefix}{{b*}}:log:*", count=1000):
            start = "-"
            while True:
                chunk = client.xrange(log, min=start, max="+", count=10_000)
                for _, fields in chunk:
                    events += 1
                    payload += len(fields[b"p"])
                if len(chunk) < 10_000:
                    break
                start = "(" + chunk[-1][0].decode()
    return Footprint(used, events, payload, data)


def used_bytes(probe: str) -> int:
    """Only the size figure of :func:`footprint` (cheap: for waiting until it settles)."""
    if probe.startswith("sqlite:"):
        return _file_bytes(probe.removeprefix("sqlite:"))
    client, _ = _redis(probe)
    with contextlib.closing(client):
        return int(client.info("memory")["used_memory"])


def stream_state(probe: str, key: str) -> str | None:
    """``live`` / ``completed`` for the stream ``key`` (``<epoch>.<number>``), or None."""
    if probe.startswith("sqlite:"):
        with contextlib.closing(_sqlite(probe.removeprefix("sqlite:"))) as db:
            row = db.execute("SELECT state FROM streams WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])
    client, layout = _redis(probe)
    with contextlib.closing(client):
        state = client.hget(layout.stream(key).record, "state")
    return None if state is None else bytes(state).decode()


def command_stats() -> dict[str, str]:
    """The bench Redis server's ``INFO commandstats`` (calls, usec, usec_per_call, ...)."""
    client = redis.Redis.from_url(BACKENDS.redis().url)
    with contextlib.closing(client):
        stats = client.info("commandstats")
    return {name: ", ".join(f"{k}={v}" for k, v in value.items()) for name, value in stats.items()}
