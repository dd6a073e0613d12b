"""Running the server under test as a real subprocess on a free 127.0.0.1 port.

``ServerFactory.start(extra_config)`` writes the YAML config (the defaults below, deep-merged
with ``extra_config``) to the test's directory, starts the server with a ``Launcher``, waits
until the port accepts TCP connections (no fixed sleeps), and on the way out sends SIGTERM,
then SIGKILL after a deadline, and checks that the process exited with status 0 and left no
child process behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
LEGACY_SERVER = REPO_ROOT / "tests" / "fixtures" / "legacy_server.py"
REFERENCE_SERVER = Path(__file__).resolve().with_name("sdk_reference_server.py")

STARTUP_DEADLINE_S = 30.0
STOP_DEADLINE_S = 15.0
CHILDREN_GONE_DEADLINE_S = 15.0
START_ATTEMPTS = 3  # a free port can be taken by someone else before the server binds it
LOG_TAIL_CHARS = 6000

Launcher = Callable[[Path], list[str]]
"""Builds the command line that starts a server from the path of its YAML config."""


def proxy_launcher(config_path: Path) -> list[str]:
    """The proxy's console script next to this interpreter, else ``python -m proxy``."""
    script = Path(sys.executable).with_name("mcp-resume-proxy")
    if script.exists():
        return [str(script), "--config", str(config_path)]
    return [sys.executable, "-m", "proxy", "--config", str(config_path)]


def sdk_reference_launcher(config_path: Path) -> list[str]:
    """The SDK's own Streamable HTTP server with an in-memory event store."""
    return [sys.executable, str(REFERENCE_SERVER), "--config", str(config_path)]


LAUNCHERS: dict[str, Launcher] = {"proxy": proxy_launcher, "sdk": sdk_reference_launcher}


def default_config(port: int) -> dict[str, Any]:
    """The proxy config every test starts from (see the proxy's README for the keys)."""
    return {
        "listen": {"host": "127.0.0.1", "port": port},
        "upstream": {"command": [sys.executable, str(LEGACY_SERVER)]},
        "sse": {"keepalive_seconds": 15, "max_stream_seconds": None, "retry_ms": 1000},
    }


def deep_merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` updated by ``extra``; nested mappings are merged, anything else replaced."""
    merged = copy.deepcopy(dict(base))
    for key, value in extra.items():
        current = merged.get(key)
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            merged[key] = deep_merge(current, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _parent_pids() -> dict[int, int]:
    """pid -> parent pid for every live (non-zombie) process, from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Field 2 (comm) may contain spaces and parentheses: split after its last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields and fields[0] != "Z":
            parents[int(entry.name)] = int(fields[1])
    return parents


def descendants(pid: int) -> set[int]:
    """Live descendants of ``pid`` (empty where /proc is not available)."""
    if not Path("/proc").is_dir():
        return set()
    children: dict[int, list[int]] = {}
    for child, parent in _parent_pids().items():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    return pid in _parent_pids()


async def wait_until(
    condition: Callable[[], bool], *, timeout: float, interval: float = 0.02
) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout`` seconds pass (False)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not condition():
        if loop.time() >= end:
            return False
        await asyncio.sleep(interval)
    return True


@dataclass(frozen=True)
class RunningServer:
    """A started server: where it listens and where its output goes."""

    url: str
    host: str
    port: int
    config: dict[str, Any]
    config_path: Path
    log_path: Path
    process: asyncio.subprocess.Process

    def log_tail(self) -> str:
        return _tail(self.log_path)


def _tail(path: Path) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "<no log>"
    return text[-LOG_TAIL_CHARS:]


async def _port_accepts(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=1.0)
    except (TimeoutError, OSError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _wait_ready(process: asyncio.subprocess.Process, host: str, port: int) -> bool:
    """True once the port accepts connections; False if the process exits first."""
    loop = asyncio.get_running_loop()
    end = loop.time() + STARTUP_DEADLINE_S
    while loop.time() < end:
        if process.returncode is not None:
            return False
        if await _port_accepts(host, port):
            return True
        await asyncio.sleep(0.05)
    raise TimeoutError(f"port {host}:{port} did not accept connections in {STARTUP_DEADLINE_S}s")


def _kill_group(process: asyncio.subprocess.Process) -> None:
    # The server runs in its own session, so its group holds it and whatever it did not
    # move into a group of its own.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


async def _stop(process: asyncio.subprocess.Process) -> list[str]:
    """SIGTERM, then SIGKILL after a deadline; returns what went wrong (empty = clean)."""
    problems: list[str] = []
    children = descendants(process.pid) if process.returncode is None else set()
    if process.returncode is not None:
        problems.append(f"exited by itself with status {process.returncode} before SIGTERM")
    else:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout=STOP_DEADLINE_S)
        except TimeoutError:
            problems.append(f"did not exit within {STOP_DEADLINE_S}s of SIGTERM; killed")
            _kill_group(process)
            await process.wait()
        if process.returncode != 0:
            problems.append(f"exit status {process.returncode} after SIGTERM (expected 0)")
    if not await wait_until(
        lambda: not any(_alive(pid) for pid in children), timeout=CHILDREN_GONE_DEADLINE_S
    ):
        left = sorted(pid for pid in children if _alive(pid))
        problems.append(f"child processes {left} still running after the server exited; killed")
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    return problems


class ServerFactory:
    """Starts servers for one test: ``async with factory.start({"sse": {...}}) as server``."""

    def __init__(self, launcher: Launcher, workdir: Path) -> None:
        self._launcher = launcher
        self._workdir = workdir
        self._counter = itertools.count(1)
        self._live: list[asyncio.subprocess.Process] = []

    @contextlib.asynccontextmanager
    async def start(
        self, extra_config: Mapping[str, Any] | None = None
    ) -> AsyncIterator[RunningServer]:
        server = await self._spawn(extra_config or {})
        try:
            yield server
        except BaseException as exc:
            problems = await _stop(server.process)
            exc.add_note(f"server log ({server.log_path}):\n{server.log_tail()}")
            for problem in problems:
                exc.add_note(f"while stopping the server: {problem}")
            raise
        else:
            problems = await _stop(server.process)
            if problems:
                pytest.fail(
                    "server did not stop cleanly: "
                    + "; ".join(problems)
                    + f"\nserver log ({server.log_path}):\n{server.log_tail()}"
                )
        finally:
            # A stop interrupted by cancellation leaves it to `kill_leftovers`.
            if server.process.returncode is not None:
                self._live.remove(server.process)

    async def _spawn(self, extra_config: Mapping[str, Any]) -> RunningServer:
        for attempt in range(1, START_ATTEMPTS + 1):
            number = next(self._counter)
            port = free_port()
            config = deep_merge(default_config(port), extra_config)
            host = str(config["listen"]["host"])
            config_path = self._workdir / f"server-{number}.yaml"
            config_path.write_text(yaml.safe_dump(config, sort_keys=False))
            log_path = self._workdir / f"server-{number}.log"
            with log_path.open("wb") as log:
                process = await asyncio.create_subprocess_exec(
                    *self._launcher(config_path),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=REPO_ROOT,
                    start_new_session=True,
                )
            self._live.append(process)
            try:
                ready = await _wait_ready(process, host, port)
            except BaseException as exc:
                await _stop(process)
                self._live.remove(process)
                exc.add_note(f"server log ({log_path}):\n{_tail(log_path)}")
                raise
            if ready:
                return RunningServer(
                    url=f"http://{host}:{port}/mcp",
                    host=host,
                    port=port,
                    config=config,
                    config_path=config_path,
                    log_path=log_path,
                    process=process,
                )
            await process.wait()
            self._live.remove(process)
            if attempt == START_ATTEMPTS:
                raise RuntimeError(
                    f"server exited with status {process.returncode} before listening on "
                    f"{host}:{port}; command {self._launcher(config_path)}\n{_tail(log_path)}"
                )
        raise AssertionError("unreachable")

    def kill_leftovers(self) -> list[int]:
        """Last resort for a test that never closed its ``start()``; returns the killed pids."""
        killed = []
        for process in self._live:
            if process.returncode is None:
                for pid in descendants(process.pid):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
                _kill_group(process)
                killed.append(process.pid)
        self._live.clear()
        return killed
