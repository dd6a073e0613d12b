"""The README's uses, each from its own example config, with a real server and real clients.

``config/local-stdio.yaml`` (local wrapper), ``config/sidecar.yaml`` (sidecar container)
and ``config/retrofit.yaml`` (a remote server) are loaded as shipped; the test changes only
what must differ on a test machine: the port, and for the retrofit the URL of the remote
server (the SDK fixture served over Streamable HTTP by the SDK itself). The retrofit's
``Authorization: Bearer ${MCP_UPSTREAM_TOKEN}`` header is resolved from the environment,
as a user would run it.

For each: the official ``mcp`` SDK client lists the tools and calls one; then a raw client
starts a call with progress, hangs up after two progress events, and resumes with ``GET``
+ ``Last-Event-ID``: every progress value arrives once, in order, then the result.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
import yaml
from mcp.client import Client

from proxy.core.sse import SSEDecoder
from tests.downstream.sse_client import RawSession
from tests.e2e.sdk_client import text_of
from tests.fixtures.http_harness import sdk_http_server
from tests.support import ROOT, free_port, stop_proxy, wait_for_port

DEADLINE = 60.0
STEPS = 8


async def cut_and_resume(url: str, tool: str, args: dict[str, Any], result: str) -> None:
    async with aiohttp.ClientSession() as http:
        s = RawSession(http, url)
        await s.initialize()
        body = {
            "jsonrpc": "2.0",
            "id": 5,
            "method": "tools/call",
            "params": {"name": tool, "arguments": args, "_meta": {"progressToken": "t"}},
        }
        received: list[dict[str, Any]] = []
        last_id: str | None = None
        resp = await http.post(url, json=body, headers=s.headers())
        assert resp.status == 200, await resp.text()
        decoder = SSEDecoder()
        try:
            while sum("method" in m for m in received) < 2:
                chunk = await asyncio.wait_for(resp.content.readany(), DEADLINE)
                assert chunk, "the stream ended before the cut"
                for event in decoder.feed(chunk):
                    last_id = event.id or last_id
                    if event.data:
                        received.append(json.loads(event.data))
        finally:
            resp.close()  # the client's connection drops; the server's work goes on
        assert last_id is not None
        async with http.get(url, headers=s.headers(**{"Last-Event-ID": last_id})) as again:
            assert again.status == 200, await again.text()
            decoder = SSEDecoder()
            async for chunk in again.content.iter_any():
                received += [json.loads(e.data) for e in decoder.feed(chunk) if e.data]
        async with http.delete(url, headers=s.headers()) as gone:
            assert gone.status == 200
    values = [m["params"]["progress"] for m in received if m.get("method")]
    answers = [m for m in received if "id" in m]
    assert values == list(range(1, STEPS + 1)), values
    assert len(answers) == 1 and answers[-1] is received[-1]
    assert answers[0]["result"]["content"][0]["text"] == result


async def run_with(tmp_path: Path, example: str, upstream_url: str | None = None) -> str:
    """Start the proxy on the example config (port and URL adjusted); return its log."""
    config = yaml.safe_load((ROOT / "config" / example).read_text())
    port = free_port()
    config["listen"]["port"] = port
    if upstream_url is not None:
        config["upstream"]["url"] = upstream_url
    path = tmp_path / example
    path.write_text(yaml.safe_dump(config))
    log_path = tmp_path / f"{example}.log"
    env = {**os.environ, "MCP_UPSTREAM_TOKEN": "test-token-not-a-secret"}
    with log_path.open("wb") as log_file:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "proxy",
            "--config",
            str(path),
            cwd=str(ROOT),
            env=env,
            stdout=log_file,
            stderr=log_file,
        )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        await wait_for_port(port)
        with anyio.fail_after(DEADLINE):
            async with Client(url) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                assert "echo" in names, names
                assert text_of(await client.call_tool("echo", {"text": "hi"})) == "hi"
        if upstream_url is None:  # the bundled demo server
            await cut_and_resume(
                url, "countdown", {"steps": STEPS, "delay": 0.1}, f"liftoff after {STEPS} steps"
            )
        else:  # tests/fixtures/legacy_server.py
            await cut_and_resume(url, "slow", {"steps": STEPS, "delay": 0.1}, f"done {STEPS}")
    finally:
        code = await stop_proxy(proc)
        text = log_path.read_text(errors="replace")
        assert code == 0, text[-3000:]
    assert "test-token-not-a-secret" not in text, "a header value reached the log"
    return text


@pytest.mark.parametrize("example", ["local-stdio.yaml", "sidecar.yaml"])
async def test_the_stdio_uses_work_as_shipped(tmp_path: Path, example: str) -> None:
    log = await run_with(tmp_path, example)
    assert "session_created" in log


async def test_the_retrofit_of_a_remote_server_works_as_shipped(tmp_path: Path) -> None:
    async with sdk_http_server() as remote:
        log = await run_with(tmp_path, "retrofit.yaml", upstream_url=remote)
    assert "streamable-http" in log
