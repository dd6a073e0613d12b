"""The README's first quick-start command, as a newcomer runs it.

``scripts/demo --port 0`` installs the proxy and serves the bundled demo server on a port
the system picks; an official SDK client connects to the URL it prints, uses the tools,
drops mid-``countdown`` and a new client resumes the call with the SDK's resumption token:
every progress notification and the result arrive exactly once, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
from mcp.client import Client

from tests.e2e.sdk_client import (
    CALL_DEADLINE_S,
    LeavingClient,
    assert_exactly_once_in_order,
    call_and_leave,
    call_tool_request,
    resume_left_call,
    text_of,
)
from tests.support import eventually, tail

ROOT = Path(__file__).resolve().parents[2]


@contextlib.asynccontextmanager
async def demo(tmp_path: Path) -> AsyncIterator[str]:
    log_path = tmp_path / "demo.log"
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            "bash",
            str(ROOT / "scripts" / "demo"),
            "--port",
            "0",  # any free port: the URL it prints says which
            stdout=log,
            stderr=log,
            start_new_session=True,
        )

    def printed_url() -> str | None:
        found = re.search(r"serving (http://\S+)", log_path.read_text(errors="replace"))
        assert found or proc.returncode is None, f"scripts/demo exited:\n{tail(log_path)}"
        return found.group(1) if found else None

    try:
        url = await eventually(
            printed_url,
            timeout=180,  # it installs first
            interval=0.1,
            what=lambda: f"scripts/demo to print its URL:\n{tail(log_path)}",
        )
        # The install is quiet: no build-backend deprecation flood on the first screen
        # (setuptools warned about the TOML-table form of project.license).
        first_screen = log_path.read_text(errors="replace")
        assert "project.license" not in first_screen, first_screen[-3000:]
        yield url
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C, as the README says
        try:
            code = await asyncio.wait_for(proc.wait(), 30)
        except TimeoutError:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
        assert code == 0, log_path.read_text()[-3000:]


async def test_the_demo_serves_an_sdk_client_that_survives_a_drop(tmp_path: Path) -> None:
    async with demo(tmp_path) as url:
        assert url.startswith("http://127.0.0.1:")
        with anyio.fail_after(CALL_DEADLINE_S):
            async with Client(url) as client:  # the SDK's default: probe, then initialize
                tools = await client.list_tools()
                assert {t.name for t in tools.tools} == {"echo", "countdown"}
                assert text_of(await client.call_tool("echo", {"text": "hi"})) == "hi"

        steps = 12
        request = call_tool_request("countdown", {"steps": steps, "delay": 0.15})
        first = LeavingClient(leave_after=4)
        with anyio.fail_after(CALL_DEADLINE_S):
            left = await call_and_leave(url, request, first)  # the connection drops mid-call
        assert first.resume_from is not None

        with anyio.fail_after(CALL_DEADLINE_S):
            rest = await resume_left_call(
                url, left, request, first.resume_from, steps - len(first.seen)
            )
        assert text_of(rest.result) == f"liftoff after {steps} steps"
        assert_exactly_once_in_order(first.seen + rest.progress.values, steps)
