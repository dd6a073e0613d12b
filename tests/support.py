"""Start the real proxy as a subprocess for end-to-end tests, and always stop it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEMO = [sys.executable, "-m", "proxy.demo"]
FIXTURE = [sys.executable, str(ROOT / "tests" / "fixtures" / "legacy_server.py")]
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RunningProxy:
    url: str
    base: str
    process: asyncio.subprocess.Process
    log_path: Path

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")


async def wait_for_port(port: int, deadline: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            return
        except OSError:
            if loop.time() > end:
                raise TimeoutError(f"proxy did not listen on {port} within {deadline}s") from None
            await asyncio.sleep(0.05)


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
    """Run ``mcp-resume-proxy`` with a config made of ``sections`` on a free port."""
    port = free_port()
    config: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": port},
        "upstream": {"command": command or DEMO, "stop_grace_seconds": 3},
        "log": {"format": "json", "level": "debug"},
    }
    for key, value in sections.items():
        config.setdefault(key, {}).update(value)
    if config["upstream"].get("url"):  # a URL upstream instead of the command
        config["upstream"].pop("command", None)
    config_path = tmp_path / f"proxy-{port}.yaml"
    config_path.write_text(yaml.safe_dump(config))
    log_path = tmp_path / f"proxy-{port}.log"
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
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    running = RunningProxy(
        f"http://127.0.0.1:{port}/mcp", f"http://127.0.0.1:{port}", proc, log_path
    )
    try:
        await wait_for_port(port)
        yield running
    finally:
        code = await stop_proxy(proc)
        assert code == 0, f"proxy exited {code}:\n{running.log_text()[-3000:]}"
