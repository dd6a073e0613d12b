"""Running the server under test as a real subprocess on a 127.0.0.1 port of its own.

``ServerFactory.start(extra_config)`` writes the YAML config (the defaults below, deep-merged
with ``extra_config``) to the test's directory, starts the server with a ``Launcher``, waits
until it says which port it bound (``listen.port: 0``; no fixed sleeps, no port another
process could take first), and on the way out sends SIGTERM, then SIGKILL after a deadline,
and checks that the process exited with status 0 and left no child process behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import alive, descendants, eventually, tail, wait_listening

REPO_ROOT = Path(__file__).resolve().parents[2]
LEGACY_SERVER = REPO_ROOT / "tests" / "fixtures" / "legacy_server.py"
REFERENCE_SERVER = Path(__file__).resolve().with_name("sdk_reference_server.py")

STARTUP_DEADLINE_S = 60.0
STOP_DEADLINE_S = 15.0
CHILDREN_GONE_DEADLINE_S = 15.0
LOG_TAIL_CHARS = 6000

Launcher = Callable[[Path], list[str]]
"""Builds the command line that starts a server from the path of its YAML config. The server
must bind ``listen.port`` (0: any free port) and say which port it bound, as
``tests.support.listening_port`` reads it."""


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


def default_config() -> dict[str, Any]:
    """The proxy config every test starts from (see the proxy's README for the keys)."""
    return {
        "listen": {"host": "127.0.0.1", "port": 0},
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


@dataclass(frozen=True)
class RunningServer:
    """A started server: where it listens and where its output goes."""

    url: str
    host: str
    port: int
    config: dict[str, Any]  # as written: ``listen.port`` 0, the bound one is ``port``
    config_path: Path
    log_path: Path
    process: asyncio.subprocess.Process

    def log_tail(self) -> str:
        return tail(self.log_path, LOG_TAIL_CHARS)


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
    try:
        await eventually(
            lambda: not any(alive(pid) for pid in children),
            timeout=CHILDREN_GONE_DEADLINE_S,
            what="the server's child processes to exit",
        )
    except AssertionError:
        left = sorted(pid for pid in children if alive(pid))
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
        number = next(self._counter)
        config = deep_merge(default_config(), extra_config)
        host = str(config["listen"]["host"])
        config_path = self._workdir / f"server-{number}.yaml"
        config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        log_path = self._workdir / f"server-{number}.log"
        command = self._launcher(config_path)
        with log_path.open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                *command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=REPO_ROOT,
                start_new_session=True,
            )
        self._live.append(process)
        try:
            port = await wait_listening(
                process, log_path, f"the server ({' '.join(command)})", STARTUP_DEADLINE_S
            )
        except BaseException:
            await _stop(process)
            self._live.remove(process)
            raise
        return RunningServer(
            url=f"http://{host}:{port}/mcp",
            host=host,
            port=port,
            config=config,
            config_path=config_path,
            log_path=log_path,
            process=process,
        )

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
