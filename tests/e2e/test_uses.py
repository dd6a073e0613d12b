"""The README's uses, each from its own example config, with a real server and real clients.

``config/local-stdio.yaml`` (local wrapper), ``config/sidecar.yaml`` (sidecar container)
and ``config/retrofit.yaml`` (a remote server) are loaded as shipped; the test changes only
what must differ on a test machine: the port (0: the proxy binds a free one and says which
in its log, as it does in either log format), and for the retrofit the URL of the remote
server (the SDK fixture served over Streamable HTTP by the SDK itself). The retrofit's
``Authorization: Bearer ${MCP_UPSTREAM_TOKEN}`` header is resolved from the environment,
as a user would run it.

For each: the official ``mcp`` SDK client lists the tools and calls one; then a raw client
starts a call with progress, hangs up after two progress events, waits until the proxy has
kept more of the call, and resumes with ``GET`` + ``Last-Event-ID``: every progress value
arrives once, in order, then the result.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
import yaml
from mcp.client import Client

from tests.e2e.sdk_client import text_of
from tests.fixtures.http_harness import cut_mid_call_and_resume, sdk_http_server
from tests.support import ROOT, run_proxy_on

DEADLINE = 60.0
STEPS = 8


async def run_with(tmp_path: Path, example: str, upstream_url: str | None = None) -> str:
    """Start the proxy on the example config (port and URL adjusted); return its log."""
    config = yaml.safe_load((ROOT / "config" / example).read_text())
    config["listen"]["port"] = 0
    if upstream_url is not None:
        config["upstream"]["url"] = upstream_url
    env = {"MCP_UPSTREAM_TOKEN": "test-token-not-a-secret"}
    async with run_proxy_on(tmp_path, config, env) as proxy:
        with anyio.fail_after(DEADLINE):
            async with Client(proxy.url) as client:
                names = {t.name for t in (await client.list_tools()).tools}
                assert "echo" in names, names
                assert text_of(await client.call_tool("echo", {"text": "hi"})) == "hi"
        healthz = proxy.base + "/healthz"
        if upstream_url is None:  # the bundled demo server
            done = f"liftoff after {STEPS} steps"
            await cut_mid_call_and_resume(
                proxy.url, healthz, tool="countdown", steps=STEPS, result=done
            )
        else:  # tests/fixtures/legacy_server.py
            await cut_mid_call_and_resume(proxy.url, healthz, steps=STEPS)
    text = proxy.log_text()
    assert "test-token-not-a-secret" not in text, "a header value reached the log"
    return text


@pytest.mark.parametrize("example", ["local-stdio.yaml", "sidecar.yaml"])
async def test_the_stdio_uses_work_as_shipped(tmp_path: Path, example: str) -> None:
    log = await run_with(tmp_path, example)
    assert "session_created" in log


async def test_the_retrofit_of_a_remote_server_works_as_shipped(tmp_path: Path) -> None:
    async with sdk_http_server(tmp_path) as remote:
        log = await run_with(tmp_path, "retrofit.yaml", upstream_url=remote)
    assert "streamable-http" in log
