"""A real HAProxy in front of proxy replicas: round robin, no stickiness (issue 19).

:class:`Balancer` writes an ``haproxy.cfg`` into a directory of its own and runs
``haproxy -db`` (foreground, our child) on a reserved 127.0.0.1 port in front of the
replicas' ports. Every request is balanced on its own (round robin, no cookie, no
``prefer-last-server``), so a client's consecutive requests land on different replicas.

- Streams live long: ``timeout client``/``server``/``tunnel`` are an hour, so an SSE
  stream, a long poll or a WebSocket is never cut by the balancer (the test cuts them).
- Connections are kept alive (no ``http-server-close``); WebSocket upgrades pass through.
- The balancer health-checks ``GET /readyz`` every :data:`CHECK_MS` ms: a replica that is
  down, paused or draining (``/readyz`` red) leaves the rotation, and comes back once it
  answers 200 again. A request whose connection is refused is retried on another replica
  (``option redispatch``): nothing was sent, so nothing is sent twice.

:meth:`Balancer.servers_up` reads the stats socket (``show stat``) to tell which replicas
are in rotation. ``scripts/install-haproxy.sh`` installs ``haproxy`` (``scripts/test``
runs it); without it the balancer fails the test, never skips it.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import shutil
import signal
import subprocess
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path

import pytest

from tests.support import (
    STARTUP_S,
    ReservedPort,
    eventually,
    reserved_port,
    tail,
    wait_accepting,
)

MISSING = "haproxy is not installed: run scripts/install-haproxy.sh (scripts/test does)"
CHECK_MS = 300  # health-check interval: a dead or draining replica leaves within ~2 checks
# A check's answer may take this long: a replica slowed by a loaded machine (a CI box with
# two cores running four test workers) stays in rotation; a paused one leaves in ~2 of these.
CHECK_TIMEOUT_S = 2
STREAM_TIMEOUT = "1h"  # SSE streams, long polls and WebSockets outlive any test
STOP_S = 10.0


def haproxy_binary() -> str:
    """The path of ``haproxy`` (on PATH, else /usr/sbin); fails the test when missing."""
    found = shutil.which("haproxy")
    if found is None and Path("/usr/sbin/haproxy").is_file():
        found = "/usr/sbin/haproxy"
    if found is None:
        pytest.fail(MISSING, pytrace=False)
    return found


def haproxy_config(port: int, backends: Sequence[int], stats_socket: Path) -> str:
    """The config: one HTTP frontend on ``port``, round robin over ``backends``."""
    servers = "\n".join(
        f"    server r{i} 127.0.0.1:{backend} check" for i, backend in enumerate(backends)
    )
    return f"""\
global
    maxconn 4096
    stats socket {stats_socket} mode 600 level admin
    log stdout format raw local0 info

defaults
    mode http
    log global
    option httplog
    option redispatch
    retries 3
    timeout connect 5s
    timeout http-request 30s
    timeout client {STREAM_TIMEOUT}
    timeout server {STREAM_TIMEOUT}
    timeout tunnel {STREAM_TIMEOUT}
    timeout client-fin 5s
    timeout server-fin 5s

frontend mcp
    bind 127.0.0.1:{port}
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk
    timeout check {CHECK_TIMEOUT_S}s
    http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host 127.0.0.1
    http-check expect status 200
    default-server inter {CHECK_MS} fastinter {CHECK_MS} downinter {CHECK_MS} fall 2 rise 1
{servers}
"""


class Balancer:
    """One ``haproxy`` child in front of the replicas listening on ``backends``."""

    def __init__(self, directory: Path, backends: Sequence[int]) -> None:
        self.directory = directory
        self.backends = list(backends)
        self.config_path = directory / "haproxy.cfg"
        self.log_path = directory / "haproxy.log"
        self.stats_socket = directory / "admin.sock"
        self._reservation: ReservedPort | None = None
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The MCP endpoint through the balancer."""
        return self.base + "/mcp"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    async def start(self) -> None:
        """Start haproxy and wait until it accepts connections."""
        binary = haproxy_binary()
        self.directory.mkdir(parents=True, exist_ok=True)
        self._reservation = reserved_port()
        self.port = self._reservation.__enter__()
        self.config_path.write_text(haproxy_config(self.port, self.backends, self.stats_socket))
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [binary, "-db", "-f", str(self.config_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        await wait_accepting(self._process, self.port, self.log_path, "haproxy")
        # haproxy binds its stats socket as admin.sock.<pid>.tmp and renames it once bound:
        # its frontend's port may accept first (seen: `show stat` met no socket).
        process = self._process

        def stats_ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(
                    f"haproxy exited ({process.returncode}):\n{tail(self.log_path)}"
                )
            return self.stats_socket.exists()

        await eventually(stats_ready, timeout=STARTUP_S, what=f"haproxy's {self.stats_socket}")

    async def stop(self) -> None:
        """End haproxy (SIGTERM, then SIGKILL), reap it and release its port."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(process.wait, STOP_S)
            except subprocess.TimeoutExpired:
                process.kill()
                await asyncio.to_thread(process.wait)
        if self._reservation is not None:
            self._reservation.__exit__(None, None, None)
            self._reservation = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def stats(self) -> list[dict[str, str]]:
        """The stats socket's ``show stat`` rows (one per frontend, server, backend)."""
        reader, writer = await asyncio.open_unix_connection(str(self.stats_socket))
        try:
            writer.write(b"show stat\n")
            await writer.drain()
            text = (await reader.read()).decode()
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        return list(csv.DictReader(io.StringIO(text.lstrip("# "))))

    async def servers_up(self) -> set[int]:
        """The backend ports in rotation now: status ``UP``, and also ``UP 1/2`` (a check
        failed, not yet ``fall`` of them: haproxy still sends it requests)."""
        return await self._servers(lambda status: status.startswith("UP"))

    async def servers_down(self) -> set[int]:
        """The backend ports out of rotation now (``DOWN``, or ``DOWN 1/1`` coming back)."""
        return await self._servers(lambda status: status.startswith("DOWN"))

    async def _servers(self, keep: Callable[[str], bool]) -> set[int]:
        found = set()
        for row in await self.stats():
            name = row.get("svname", "")
            if name.startswith("r") and name[1:].isdigit() and keep(row.get("status", "")):
                found.add(self.backends[int(name[1:])])
        return found

    async def wait_up(self, ports: Sequence[int] | None = None, timeout: float = 60.0) -> None:
        """Wait until every one of ``ports`` (default: every backend) is in rotation."""
        wanted = set(self.backends if ports is None else ports)

        async def check() -> bool:
            # Exactly UP: "UP 1/2" is one failed check from leaving.
            return wanted <= await self._servers(lambda status: status == "UP")

        await eventually(
            check,
            timeout=timeout,
            interval=0.05,
            what=lambda: f"replicas {sorted(wanted)} in rotation:\n{tail(self.log_path)}",
        )

    async def wait_down(self, port: int, timeout: float = 60.0) -> None:
        """Wait until the replica on ``port`` has left the rotation."""

        async def check() -> bool:
            return port in await self.servers_down()

        await eventually(
            check, timeout=timeout, interval=0.05, what=f"replica {port} out of rotation"
        )


@contextlib.asynccontextmanager
async def balancer(directory: Path, backends: Sequence[int]) -> AsyncIterator[Balancer]:
    """A started :class:`Balancer`, always stopped on the way out."""
    running = Balancer(directory, backends)
    try:
        await running.start()
        yield running
    finally:
        await running.stop()
