"""Helpers of the end-to-end tests: start the real proxy as a subprocess (and always stop
it), wait on conditions (:func:`eventually`, never fixed sleeps), learn the port a server
bound (``listen.port: 0``, then the port it logs), hold a port for a program that must be
told one up front (:func:`reserved_port`), read the proxy's JSON log (:func:`log_events`),
see processes through ``/proc`` (:func:`alive`, :func:`children_of`, :func:`descendants`)
and build the JSON-RPC requests the raw clients send (:func:`initialize_request`,
:func:`tool_call`)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEMO = [sys.executable, "-m", "proxy.demo"]
FIXTURE = [sys.executable, str(ROOT / "tests" / "fixtures" / "legacy_server.py")]
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
DEADLINE_S = 60.0  # generous: what the tests wait for happens within seconds
STARTUP_S = 60.0  # a server process on a busy machine (2 shared cores) can be slow to start
LOG_TAIL_CHARS = 4000

T = TypeVar("T")


async def eventually(
    check: Callable[[], T | Awaitable[T]],
    *,
    timeout: float = DEADLINE_S,
    what: str | Callable[[], str] = "the condition",
    interval: float = 0.02,
) -> T:
    """Call ``check`` (sync or async) every ``interval`` seconds until it returns something
    truthy, and return that; after ``timeout`` seconds fail with ``what`` and the last value.

    ``what`` may be a function, called only on failure (say, to show a log tail). An
    exception raised by ``check`` ends the wait at once: raise one when waiting is useless
    (the process being waited on has exited).
    """
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if loop.time() >= end:
            described = what() if callable(what) else what
            raise AssertionError(
                f"timed out after {timeout:g}s waiting for {described}; last value: {value!r}"
            )
        await asyncio.sleep(interval)


def read_log(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return "<no log>"


def tail(path: Path, limit: int = LOG_TAIL_CHARS) -> str:
    return read_log(path)[-limit:]


def log_events(log_text: str, event: str) -> list[dict[str, Any]]:
    """The entries of a JSON log (``log.format: json``) whose ``event`` is ``event``."""
    found = []
    for line in log_text.splitlines():
        if event in line:  # cheap: most lines are other events
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict) and entry.get("event") == event:
                    found.append(entry)
    return found


# -------------------------------------------------------------------- JSON-RPC requests
def initialize_request(
    rid: int = 1, *, version: str = "2025-11-25", client: str = "test"
) -> dict[str, Any]:
    """An ``initialize`` request offering ``version``, with no capabilities."""
    params = {
        "protocolVersion": version,
        "capabilities": {},
        "clientInfo": {"name": client, "version": "0"},
    }
    return {"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": params}


def tool_call(
    rid: Any, name: str, arguments: dict[str, Any], token: str | int | None = None
) -> dict[str, Any]:
    """A ``tools/call`` request; with ``token``, its progress goes to that progress token."""
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


# -------------------------------------------------------------------- processes (/proc)
def _state_and_parent(pid: int | str) -> tuple[str, int] | None:
    """The state letter and parent pid of process ``pid``, or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone (ENOENT), or gone between the open and the read (ESRCH)
        return None
    # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after the
    # last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[0], int(fields[1])


def process_table() -> dict[int, tuple[str, int]]:
    """pid -> (state letter, parent pid) of every process on the machine (Linux /proc)."""
    table: dict[int, tuple[str, int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (found := _state_and_parent(entry.name)) is not None:
            table[int(entry.name)] = found
    return table


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: it exists and is no zombie (a zombie still answers kill(0))."""
    found = _state_and_parent(pid)
    return found is not None and found[0] != "Z"


def children_of(pid: int) -> list[int]:
    """The direct children of ``pid``, a child that exited but is not reaped yet included."""
    return [child for child, (_, parent) in process_table().items() if parent == pid]


def descendants(pid: int) -> set[int]:
    """The live descendants of ``pid`` (empty where /proc is not available)."""
    if not Path("/proc").is_dir():
        return set()
    children: dict[int, list[int]] = {}
    for child, (state, parent) in process_table().items():
        if state != "Z":
            children.setdefault(parent, []).append(child)
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


# -------------------------------------------------------------------- ports
class ReservedPort:
    """A port held bound, see :func:`reserved_port`; ``with`` or ``async with`` it."""

    def __init__(self) -> None:
        self._holder: socket.socket | None = None

    def __enter__(self) -> int:
        holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            holder.bind(("127.0.0.1", 0))
        except OSError:
            holder.close()
            raise
        self._holder = holder
        return int(holder.getsockname()[1])

    def __exit__(self, *exc_info: object) -> None:
        if self._holder is not None:
            self._holder.close()
            self._holder = None

    async def __aenter__(self) -> int:
        return self.__enter__()

    async def __aexit__(self, *exc_info: object) -> None:
        self.__exit__(*exc_info)


def reserved_port() -> ReservedPort:
    """A 127.0.0.1 port for a program that must be told its port up front, or for a test
    that needs a port where nothing listens (yet).

    Prefer ``port: 0`` and the port the server reports (:func:`wait_listening`); this is
    for what cannot report one: a third-party server (server-everything reads ``$PORT``
    and logs the number it was given), a fixture server restarted on the same port, an
    address the test wants refused. Instead of a port that was free a moment ago (which
    another process may take before ours binds it), the port stays bound here, with
    ``SO_REUSEADDR`` and without listening, until the block ends: connecting to it is
    refused and the system gives it to no one else, while a server that sets
    ``SO_REUSEADDR`` itself (aiohttp, asyncio, uvicorn, websockets, Node) can still listen
    on it.
    """
    return ReservedPort()


_SERVING = re.compile(r"serving https?://\S+:(\d+)/")
LISTENING_EVENTS = ("proxy_listening", "fixture_listening")


def listening_port(log_text: str) -> int | None:
    """The port a server said it bound, or None yet: the proxy's ``proxy_listening`` event
    (``log.format: json``), the ``serving URL`` line it prints with ``log.format: console``,
    or the ``fixture_listening`` line of a test fixture server."""
    for line in log_text.splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict) and entry.get("event") in LISTENING_EVENTS:
                    return int(entry["port"])
        elif found := _SERVING.search(line):
            return int(found.group(1))
    return None


def fixture_listening(port: int, url: str) -> None:
    """What a fixture server bound to port 0 prints once it listens (see listening_port)."""
    print(json.dumps({"event": "fixture_listening", "port": port, "url": url}), flush=True)


Process = asyncio.subprocess.Process | subprocess.Popen[bytes]


def _not_exited(process: Process, log_path: Path, what: str) -> None:
    """Fail at once, with the log's tail, if ``process`` has exited: waiting is useless."""
    exited = process.poll() if isinstance(process, subprocess.Popen) else process.returncode
    if exited is not None:
        raise AssertionError(f"{what} exited with {exited} before listening:\n{tail(log_path)}")


async def wait_listening(
    process: Process, log_path: Path, what: str, timeout: float = STARTUP_S
) -> int:
    """The port ``process`` reports in ``log_path`` (see :func:`listening_port`); fails
    with the log's tail if it exits first or says nothing within ``timeout`` seconds."""

    def check() -> int | None:
        port = listening_port(read_log(log_path))
        if port is None:
            _not_exited(process, log_path, what)
        return port

    return await eventually(
        check, timeout=timeout, what=lambda: f"{what} to listen; its log:\n{tail(log_path)}"
    )


async def port_accepts(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a TCP connection to ``host:port`` is accepted now."""
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 5.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def wait_accepting(
    process: Process, port: int, log_path: Path, what: str, timeout: float = STARTUP_S
) -> None:
    """Wait until ``process``, told to listen on ``port`` (see :func:`reserved_port`),
    accepts connections there; fails with its log's tail if it exits first."""

    async def check() -> bool:
        _not_exited(process, log_path, what)
        return await port_accepts(port)

    await eventually(
        check,
        timeout=timeout,
        interval=0.05,
        what=lambda: f"{what} to listen on {port}; its log:\n{tail(log_path)}",
    )


# -------------------------------------------------------------------- the proxy
@dataclass
class RunningProxy:
    url: str
    base: str
    process: asyncio.subprocess.Process
    log_path: Path

    @property
    def port(self) -> int:
        return int(self.base.rsplit(":", 1)[1])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def upstream_pids(self) -> list[int]:
        """The pids of the server processes it started, in order (its ``upstream_started``)."""
        return [int(entry["pid"]) for entry in log_events(self.log_text(), "upstream_started")]


async def wait_for_log(
    proxy: RunningProxy, text: str, *, timeout: float = DEADLINE_S, what: str | None = None
) -> None:
    """Wait until the proxy's log contains ``text`` (an event name, say)."""
    await eventually(
        lambda: text in proxy.log_text(), timeout=timeout, what=what or f"{text!r} in the log"
    )


async def stop_proxy(proc: asyncio.subprocess.Process, timeout: float = 30.0) -> int:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
    return proc.returncode if proc.returncode is not None else -1


@contextlib.asynccontextmanager
async def run_proxy(
    tmp_path: Path, command: list[str] | None = None, **sections: dict[str, Any]
) -> AsyncIterator[RunningProxy]:
    """Run ``mcp-resume-proxy`` with a config made of ``sections`` on a port of its own
    (see :func:`run_proxy_on`)."""
    config: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "upstream": {"command": command or DEMO, "stop_grace_seconds": 3},
        "log": {"format": "json", "level": "debug"},
    }
    for key, value in sections.items():
        config.setdefault(key, {}).update(value)
    if config["upstream"].get("url"):  # a URL upstream instead of the command
        config["upstream"].pop("command", None)
    async with run_proxy_on(tmp_path, config) as proxy:
        yield proxy


@contextlib.asynccontextmanager
async def run_proxy_on(
    tmp_path: Path,
    config: dict[str, Any],
    env: dict[str, str] | None = None,
    file: Path | None = None,
) -> AsyncIterator[RunningProxy]:
    """Run ``mcp-resume-proxy --config`` on ``config`` as it is (or on ``file``, which
    holds it, as written), with ``env`` added to the environment; on the way out, stop it
    and check that it exited with status 0.

    With ``listen.port: 0`` the port comes from its ``proxy_listening`` log line, so no
    other process can take the port between choosing and binding it.
    """
    number = 1 + len(list(tmp_path.glob("proxy-*.yaml")))
    config_path = file or tmp_path / f"proxy-{number}.yaml"
    if file is None:
        config_path.write_text(yaml.safe_dump(config))
    log_path = tmp_path / f"proxy-{number}.log"
    with log_path.open("wb") as log_file:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "proxy",
            "--config",
            str(config_path),
            stdout=log_file,
            stderr=log_file,
            cwd=str(ROOT),
            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
    try:
        port = await wait_listening(proc, log_path, "the proxy")
        base = f"http://127.0.0.1:{port}"
        running = RunningProxy(base + config["listen"].get("path", "/mcp"), base, proc, log_path)
        yield running
    finally:
        code = await stop_proxy(proc)
        assert code == 0, f"proxy exited {code}:\n{tail(log_path)}"


def bearer(token: str) -> dict[str, str]:
    """The ``Authorization`` header presenting ``token`` (inbound auth)."""
    return {"Authorization": f"Bearer {token}"}
