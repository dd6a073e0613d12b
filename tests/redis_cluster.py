"""A real local Redis Cluster for the tests: :class:`LocalCluster` (three masters, no
replicas by default; one may be killed and started again, empty; with ``replicas=1`` each
master has a replica, promoted when its master is killed: :meth:`LocalCluster.failed_over`),
and the session fixtures ``redis_cluster`` and ``redis_cluster_url`` (registered in
``tests/conftest.py``).

Each master is ``redis-server --cluster-enabled yes`` in the foreground as our child, on
two 127.0.0.1 ports held by :func:`tests.support.reserved_port` for its whole life: its
client port and its cluster bus port (``--cluster-port``, so the bus does not need
``port + 10000`` free). ``redis-cli --cluster create … --cluster-replicas N
--cluster-yes`` spreads the 16384 slots over the three (and gives each N replicas); the
fixture waits until every node reports ``cluster_state:ok``. Nothing is kept on disk
but each node's ``nodes.conf`` in its own directory under the test's tmp path. Starting
it takes 2 to 4 s (most of it ``redis-cli`` waiting for the nodes to agree).

Like :mod:`tests.redis_server`, a missing ``redis-server`` or ``redis-cli`` fails the test
(never skips).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.redis_server import MISSING, STOP_S, answers_ping
from tests.support import STARTUP_S, reserved_port, tail

MASTERS = 3


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(MISSING, pytrace=False)
    return found


def _cli(port: int, *args: str) -> str:
    """``redis-cli -p port args…``'s output (raises when it fails)."""
    command = [_binary("redis-cli"), "-h", "127.0.0.1", "-p", str(port), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=STARTUP_S)
    if done.returncode != 0:
        raise AssertionError(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def _info(port: int, field: str) -> int:
    """A number from ``INFO replication`` of the node on ``port`` (0 if it has none)."""
    for line in _cli(port, "info", "replication").splitlines():
        name, _, value = line.strip().partition(":")
        if name == field:
            return int(value)
    return 0


class LocalCluster:
    """Three cluster-enabled ``redis-server`` children, joined into one cluster.

    Use it as a context manager: every process is stopped and every port released on
    exit, also when the start failed half-way.
    """

    def __init__(
        self,
        directory: Path,
        masters: int = MASTERS,
        replicas: int = 0,
        node_timeout_ms: int | None = None,
    ) -> None:
        self.directory = directory
        self.masters = masters
        self.replicas = replicas  # of each master
        self.node_timeout_ms = node_timeout_ms  # cluster-node-timeout (None: Redis's 15 s)
        self.ports: list[int] = []
        self._processes: list[subprocess.Popen[bytes]] = []
        self._commands: list[list[str]] = []
        self._stack = ExitStack()

    @property
    def url(self) -> str:
        """A URL naming one node: the cluster client discovers the others from it."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def start(self) -> None:
        binary = _binary("redis-server")
        for n in range(self.masters * (1 + self.replicas)):
            port = self._stack.enter_context(reserved_port())
            bus = self._stack.enter_context(reserved_port())
            home = self.directory / f"node{n}"
            home.mkdir(parents=True, exist_ok=True)
            command = [
                binary,
                *("--port", str(port), "--bind", "127.0.0.1"),
                *("--cluster-enabled", "yes", "--cluster-port", str(bus)),
                *("--cluster-config-file", str(home / "nodes.conf")),
                *("--save", "", "--appendonly", "no", "--daemonize", "no"),
                *("--dir", str(home)),
            ]
            if self.node_timeout_ms is not None:
                command += ["--cluster-node-timeout", str(self.node_timeout_ms)]
            self._commands.append(command)
            self._processes.append(self._spawn(n))
            self.ports.append(port)
        self._wait(lambda: all(answers_ping(p) for p in self.ports), "answer PING")
        nodes = [f"127.0.0.1:{p}" for p in self.ports]
        replicas = str(self.replicas)
        _cli(
            self.ports[0],
            "--cluster",
            "create",
            *nodes,
            "--cluster-replicas",
            replicas,
            "--cluster-yes",
        )
        self._wait(self._ok, "report cluster_state:ok")
        self._wait(lambda: len(self.master_ports()) == self.masters, "settle their roles")

    def _spawn(self, n: int) -> subprocess.Popen[bytes]:
        with (self.directory / f"node{n}" / "redis-server.log").open("ab") as log:
            return subprocess.Popen(self._commands[n], stdout=log, stderr=subprocess.STDOUT)

    def holder_of(self, key: str) -> int:
        """The port of the master holding ``key`` (which must exist)."""
        masters = self.master_ports()
        (port,) = [p for p in masters if _cli(p, "--scan", "--pattern", key).strip()]
        return port

    def live_ports(self) -> list[int]:
        return [
            p for p, proc in zip(self.ports, self._processes, strict=True) if proc.poll() is None
        ]

    def master_ports(self) -> list[int]:
        """The ports of the running nodes that are masters now (``ROLE``)."""
        return [p for p in self.live_ports() if _cli(p, "role").startswith("master")]

    def replicas_of(self, port: int) -> list[int]:
        """The ports of the running replicas of the master on ``port``."""
        return [
            p
            for p in self.live_ports()
            if (role := _cli(p, "role").split()) and role[0] == "slave" and role[2] == str(port)
        ]

    def synced(self, port: int) -> bool:
        """Whether every replica of the master on ``port`` has what it had written when
        asked (``INFO replication`` offsets)."""
        offset = _info(port, "master_repl_offset")
        return all(_info(r, "slave_repl_offset") >= offset for r in self.replicas_of(port))

    def failed_over(self) -> bool:
        """Whether the running nodes say the cluster is whole with ``masters`` masters
        (a killed master's replica promoted in its place)."""
        return self._ok() and len(self.master_ports()) == self.masters

    def kill(self, port: int) -> None:
        """SIGKILL the master on ``port`` (what it held is gone: nothing is on disk)."""
        process = self._processes[self.ports.index(port)]
        process.kill()
        process.wait()

    def restart(self, port: int) -> None:
        """Start the master on ``port`` again (empty, with its slots: its nodes.conf),
        and wait until the cluster says it is whole."""
        n = self.ports.index(port)
        self._processes[n] = self._spawn(n)
        self._wait(lambda: answers_ping(port), "answer PING")
        self._wait(self._ok, "report cluster_state:ok")

    def _ok(self) -> bool:
        return all("cluster_state:ok" in _cli(p, "cluster", "info") for p in self.live_ports())

    def wait(self, ready: object, what: str) -> None:
        """Wait (up to a start's bound) until ``ready()``; fail with ``what`` past it."""
        self._wait(ready, what, crashed_ok=True)

    def _wait(self, ready: object, what: str, crashed_ok: bool = False) -> None:
        assert callable(ready)
        deadline = time.monotonic() + STARTUP_S
        while not ready():
            for n, process in enumerate(self._processes):
                if process.poll() is not None and not (crashed_ok and process.returncode == -9):
                    log = self.directory / f"node{n}" / "redis-server.log"
                    raise AssertionError(
                        f"cluster node {n} exited with {process.returncode}:\n{tail(log)}"
                    )
            if time.monotonic() > deadline:
                raise AssertionError(f"the cluster's nodes did not {what} within {STARTUP_S:g}s")
            time.sleep(0.05)

    def keys_per_node(self, pattern: str) -> dict[int, int]:
        """How many keys matching ``pattern`` each master holds (``redis-cli --scan``)."""
        found: dict[int, int] = {}
        for port in self.master_ports():
            out = _cli(port, "--scan", "--pattern", pattern)
            found[port] = len([line for line in out.splitlines() if line])
        return found

    def close(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL), reap it, release its ports."""
        processes, self._processes = self._processes, []
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.terminate()
        for process in processes:
            try:
                process.wait(STOP_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self._stack.close()

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A three-master cluster shared by the whole session (on one xdist worker: its
    modules); tests use their own key namespaces in it."""
    with LocalCluster(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def redis_cluster_url(redis_cluster: LocalCluster) -> str:
    return redis_cluster.url
