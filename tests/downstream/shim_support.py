"""The `connect` shim under test (tests/downstream/test_shim*.py): its command line, the
official SDK stdio client launching it, the cutting forwarder in front of the proxy, and
the shim's processes and log."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from mcp.client.session import ClientSession, ElicitationFnT
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.cut_proxy import CutProxy
from tests.support import ROOT, RunningProxy, eventually, process_table


def shim_processes(url: str) -> list[int]:
    """Pids of live processes whose command line names ``url`` (a shim of this test)."""
    pids = []
    for pid, (state, _) in process_table().items():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:  # gone since
            continue
        if url.encode() in argv and b"connect" in argv and state != "Z":
            pids.append(pid)
    return pids


def shim_argv(url: str, *extra: str) -> list[str]:
    return ["-m", "proxy", "connect", url, "--log-level", "debug", *extra]


@asynccontextmanager
async def forwarder(proxy: RunningProxy) -> AsyncIterator[CutProxy]:
    cut = CutProxy(proxy.port)
    await cut.start()
    try:
        yield cut
    finally:
        await cut.stop()
        await eventually(
            lambda: not shim_processes(cut.url()), what="the shim to be gone", timeout=15.0
        )


@asynccontextmanager
async def sdk_host(
    tmp_path: Path, url: str, *extra: str, elicitation: ElicitationFnT | None = None
) -> AsyncIterator[ClientSession]:
    """The official SDK stdio client launching the shim, initialized."""
    params = StdioServerParameters(
        command=sys.executable,
        args=shim_argv(url, *extra),
        cwd=str(ROOT),
        env={"PYTHONUNBUFFERED": "1"},
    )
    with (tmp_path / "shim.log").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, elicitation_callback=elicitation) as session,
        ):
            await session.initialize()
            yield session


def shim_log(tmp_path: Path) -> str:
    return (tmp_path / "shim.log").read_text(errors="replace")


async def spawn_shim(errlog: Any, url: str, *extra: str) -> asyncio.subprocess.Process:
    """The shim on ``url`` as a subprocess whose stdin and stdout are the test's; its log
    goes to ``errlog``."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *shim_argv(url, *extra),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=errlog,
        cwd=str(ROOT),
    )
