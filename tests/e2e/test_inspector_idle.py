"""The MCP Inspector CLI never sends ``DELETE`` (issue 20, item 5): each call leaves a
session behind. With ``upstream.stop_idle_seconds`` those sessions' server processes are
stopped once idle, and the next call works.

The Inspector 2.12 CLI (``.tools/inspector``, scripts/install-inspector.sh) on the Node 22
of ``.tools``, as its README runs it: ``mcp-inspector --cli URL --method tools/call
--tool-name whoami``, in front of the idle fixture (``tests/fixtures/idle_server.py``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support import ROOT, descendants, eventually, log_events, run_proxy

INSPECTOR = ROOT / ".tools" / "inspector" / "node_modules" / ".bin" / "mcp-inspector"
NODE_BIN = ROOT / ".tools" / "node_modules" / ".bin"
IDLE_FIXTURE = [sys.executable, str(ROOT / "tests" / "fixtures" / "idle_server.py")]
CALL_DEADLINE_S = 60.0
CALLS = 3


async def inspector_call(url: str, tool: str) -> dict[str, Any]:
    """One Inspector CLI ``tools/call``: its result (a process that ends by itself)."""
    if not INSPECTOR.exists() or not (NODE_BIN / "node").exists():
        pytest.fail(
            "the Inspector CLI or Node 22 is missing; run scripts/install-node-tools.sh and "
            "scripts/install-inspector.sh",
            pytrace=False,
        )
    env = {**os.environ, "PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    argv = [str(INSPECTOR), "--cli", url, "--method", "tools/call", "--tool-name", tool]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), CALL_DEADLINE_S)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode(errors="replace")[-2000:]
    result: dict[str, Any] = json.loads(out)
    return result


async def test_inspector_calls_leave_no_process_once_idle_and_the_next_call_works(
    tmp_path: Path,
) -> None:
    upstream = {"stop_idle_seconds": 0.5, "stop_grace_seconds": 1}
    async with (
        run_proxy(tmp_path, IDLE_FIXTURE, upstream=upstream) as proxy,
        aiohttp.ClientSession() as http,
    ):
        pids = []
        for _ in range(CALLS):
            result = await inspector_call(proxy.url, "whoami")
            seen = json.loads(result["content"][0]["text"])
            assert seen["client"] == "inspector-cli", seen
            pids.append(seen["pid"])
        assert len(set(pids)) == CALLS  # a session, and a process, per call

        await eventually(
            lambda: not descendants(proxy.process.pid), what="every server process stopped"
        )
        async with http.get(proxy.base + "/status.json") as resp:
            page = await resp.json()
        assert page["sessions_total"] == CALLS, "the sessions stay (no DELETE came)"
        assert all(s["stopped_idle"] for s in page["sessions"])

        result = await inspector_call(proxy.url, "whoami")
        assert json.loads(result["content"][0]["text"])["client"] == "inspector-cli"
        stopped = log_events(proxy.log_text(), "upstream_idle_stopped")
    assert {e["pid"] for e in stopped} >= set(pids)  # the last call's may be stopped too
