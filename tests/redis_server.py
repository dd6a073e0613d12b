"""A real ``redis-server`` for the tests: :class:`RedisServer`, and the session fixture
``redis_url`` (registered in ``tests/conftest.py``).

The server runs in the foreground as our child on a 127.0.0.1 port held by
:func:`tests.support.reserved_port` for the server's whole life, so :meth:`RedisServer.restart`
gets the same port back (a client's URL stays valid) and no other process takes it while
the server is down. By default it keeps nothing on disk (``--save '' --appendonly no``): a
restart loses every key, as a flushed or replaced Redis would. ``durable=True`` keeps an
append-only file synced on every write (``--appendonly yes --appendfsync always``): a
restart keeps every key, as a Redis deployed with persistence does.

``scripts/install-redis.sh`` installs ``redis-server`` (``scripts/test`` runs it); without
it the fixtures fail, never skip, so a machine missing it cannot pass silently.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import STARTUP_S, ReservedPort, reserved_port, tail

STOP_S = 30.0
MISSING = "redis-server is not installed: run scripts/install-redis.sh (scripts/test does)"


def redis_server_binary() -> str:
    """The path of ``redis-server``; fails the test (not skips) when it is missing."""
    found = shutil.which("redis-server")
    if found is None:
        pytest.fail(MISSING, pytrace=False)
    return found


def answers_ping(port: int) -> bool:
    """Whether a Redis on 127.0.0.1:``port`` answers PING now (or asks for a password)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2.0) as conn:
            conn.sendall(b"PING\r\n")
            return conn.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


class RedisServer:
    """One ``redis-server`` child process in ``directory``; start, stop, restart, pause.

    Use it as a context manager (``with RedisServer(tmp_path) as server:``) so that it is
    always stopped and its port released.
    """

    def __init__(
        self, directory: Path, *, durable: bool = False, args: tuple[str, ...] = ()
    ) -> None:
        self.directory = directory
        self.durable = durable
        self.args = args  # more of redis-server's options (a Unix socket, a password)
        self.log_path = directory / "redis-server.log"
        self._reservation: ReservedPort | None = None
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the Redis server was never started")
        return self._port

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Start the server (on the port it had, if it ran before); wait until it answers
        PING."""
        binary = redis_server_binary()
        if self.running:
            return
        if self._reservation is None:
            self._reservation = reserved_port()
            self._port = self._reservation.__enter__()
        self.directory.mkdir(parents=True, exist_ok=True)
        command = [
            binary,
            *("--port", str(self.port), "--bind", "127.0.0.1"),
            *("--save", "", "--daemonize", "no"),
            *(
                ("--appendonly", "yes", "--appendfsync", "always")
                if self.durable
                else ("--appendonly", "no")
            ),
            *("--dir", str(self.directory)),
            *self.args,
        ]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_S
        while not answers_ping(self.port):
            if self._process is not None and self._process.poll() is not None:
                raise AssertionError(
                    f"redis-server exited with {self._process.returncode}:\n{tail(self.log_path)}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"redis-server did not answer PING on {self.port} within {STARTUP_S:g}s:"
                    f"\n{tail(self.log_path)}"
                )
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and reap it; the port stays reserved."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
            process.terminate()
            try:
                process.wait(STOP_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def restart(self) -> None:
        """Stop and start again on the same port (with no data: nothing is persisted)."""
        self.stop()
        self.start()

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections stay open but nothing is answered."""
        if self._process is not None:
            self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self._process is not None:
            self._process.send_signal(signal.SIGCONT)

    def close(self) -> None:
        """Stop the server and release its port."""
        self.stop()
        if self._reservation is not None:
            self._reservation.__exit__(None, None, None)
            self._reservation = None

    def __enter__(self) -> RedisServer:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a ``redis-server`` shared by the whole session (tests use their own key
    namespaces in it)."""
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server.url
