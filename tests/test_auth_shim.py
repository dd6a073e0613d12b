"""``mcp-resume-proxy connect URL --header 'Authorization: Bearer ...'`` against a proxy
with authentication on: the official ``mcp`` SDK stdio client launches the shim, which
carries the header on every request (POSTs, the session's GET stream, the final DELETE);
without it the host's ``initialize`` fails with a clear error, not a hang."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from tests.jwt_issuer import Issuer, jwt_auth
from tests.support import ROOT, eventually, log_events, run_proxy

ALICE = "alice-token-0123456789abcdef"
TIMEOUT = 60.0


@asynccontextmanager
async def shim_host(
    tmp_path: Path, url: str, *extra: str, env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    """The SDK stdio client running ``connect url *extra`` (not yet initialized)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "proxy", "connect", url, "--log-level", "debug", *extra],
        cwd=str(ROOT),
        env={"PYTHONUNBUFFERED": "1", **(env or {})},
    )
    with (tmp_path / "shim.log").open("w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            yield session


def echoed(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


@pytest.mark.parametrize("kind", ["static token", "jwt"])
async def test_the_shim_passes_its_header_on_every_request(tmp_path: Path, kind: str) -> None:
    if kind == "jwt":
        issuer = Issuer()
        issuer.rsa("k1")
        auth = jwt_auth(jwks_file=issuer.write_jwks(tmp_path / "jwks.json"))
        token = issuer.token("k1", "alice")
    else:
        auth, token = {"tokens": [{"token": ALICE, "principal": "alice"}]}, ALICE
    header = "Authorization: Bearer ${SHIM_TOKEN}"  # expanded by the shim, not the shell
    async with run_proxy(tmp_path, auth=auth) as proxy:
        async with shim_host(
            tmp_path, proxy.url, "--header", header, env={"SHIM_TOKEN": token}
        ) as host:
            await asyncio.wait_for(host.initialize(), TIMEOUT)
            tools = await asyncio.wait_for(host.list_tools(), TIMEOUT)
            assert "echo" in {tool.name for tool in tools.tools}
            result = await asyncio.wait_for(host.call_tool("echo", {"text": "hi"}), TIMEOUT)
            assert "hi" in echoed(result)
        # The host is gone: the shim deleted its session, with the header too.
        await eventually(lambda: log_events(proxy.log_text(), "session_ended"), what="DELETE")
        log_text = proxy.log_text()
    shim_log = (tmp_path / "shim.log").read_text()
    deleted = [line for line in shim_log.splitlines() if "session_deleted" in line]
    assert deleted and "status=200" in deleted[0], shim_log[-2000:]
    assert not log_events(log_text, "request_refused"), log_text[-2000:]
    assert token not in log_text
    assert token not in shim_log


async def test_without_the_header_the_host_gets_a_clear_error(tmp_path: Path) -> None:
    auth = {"tokens": [{"token": ALICE, "principal": "alice"}]}
    async with run_proxy(tmp_path, auth=auth) as proxy:
        async with shim_host(tmp_path, proxy.url) as host:
            with pytest.raises(MCPError) as info:
                await asyncio.wait_for(host.initialize(), TIMEOUT)
        refused = log_events(proxy.log_text(), "request_refused")
    assert "Unauthorized" in str(info.value), info.value
    assert refused and refused[0]["status"] == 401 and refused[0]["why"] == "missing"
