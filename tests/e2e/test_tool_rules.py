"""An operator's tool, prompt and resource rules (docs/tools.md) through both eras, with the
official Python SDK client (``mcp`` 2.3.0: ``mode="legacy"``, initialize and a session;
``mode="2026-07-28"``, stateless through the façade) and a real stdio server
(``tests/fixtures/modern_probe_server.py``, which logs what it was asked).

The rules hide ``hang*`` and ``events``, rename ``echo`` to ``say``, prefix the rest with
``probe_``, rename the prompt ``greet`` to ``hello`` and hide the resource
``probe://counter``. Each era must list exactly what the rules leave, by the new names;
reach the server by the old names; refuse what is hidden as the server refuses what it
does not have; and still deliver ``notifications/tools/list_changed``.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import aiohttp
import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ToolsListChanged

from tests.jwt_issuer import Issuer, jwt_auth
from tests.support import ROOT

from .servers import RunningServer, ServerFactory, proxy_launcher

PROBE: Final = ROOT / "tests" / "fixtures" / "modern_probe_server.py"
MODES: Final = ("legacy", "2026-07-28")
RULES: Final = {
    "tools": {"deny": ["hang*", "events"], "rename": {"echo": "say"}, "prefix": "probe_"},
    "prompts": {"rename": {"greet": "hello"}},
    "resources": {"deny": ["probe://counter"]},
}
SHOWN_TOOLS: Final = {"say", "probe_ask", "probe_add_tool", "probe_bump"}
DEADLINE_S: Final = 30.0


@pytest.fixture
def launcher() -> Any:
    return proxy_launcher


def config(state: Path, rules: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "upstream": {
            "command": [sys.executable, str(PROBE), "--state", str(state)],
            "stop_grace_seconds": 3,
            **rules,
        },
        "modern": {"pool": {"size": 1, "spare": 0}},
        **extra,
    }


@asynccontextmanager
async def client(
    server: RunningServer, mode: str, token: str | None = None, **options: Any
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(timeout=DEADLINE_S, headers=headers) as http:
        transport = streamable_http_client(server.url, http_client=http)
        async with Client(transport, mode=mode, read_timeout_seconds=DEADLINE_S, **options) as c:
            yield c


def text_of(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


def asked(state: Path, method: str) -> list[dict[str, Any]]:
    """Every ``method`` request the fixture server received (with the name or uri it named)."""
    path = state / "events.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [e for e in lines if e.get("event") == "received" and e.get("method") == method]


async def refused(call: Any) -> MCPError:
    with pytest.raises(MCPError) as caught:
        await call
    return caught.value


@pytest.mark.parametrize("mode", MODES)
async def test_rules_list_call_and_refuse_in_both_eras(
    server_factory: ServerFactory, tmp_path: Path, mode: str
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    async with server_factory.start(config(state, RULES)) as server, client(server, mode) as c:
        assert c.protocol_version == ("2025-11-25" if mode == "legacy" else mode)
        listed = await c.list_tools(cache_mode="refresh")
        assert {t.name for t in listed.tools} == SHOWN_TOOLS
        said = await c.call_tool("say", {"text": "renamed"})
        assert text_of(said) == "renamed" and not said.is_error
        calls = [p.get("name") for p in asked(state, "tools/call")]
        assert calls == ["echo"]  # the server's own name
        # Hidden, old and unknown names: refused as the server refuses an unknown tool.
        for name in ("echo", "probe_hang", "hang", "probe_events", "nope"):
            error = await refused(c.call_tool(name, {}))
            assert (error.code, error.message) == (-32602, f"Unknown tool: {name}"), name
        assert [p.get("name") for p in asked(state, "tools/call")] == ["echo"]  # none reached it
        # The server's own refusal looks the same.
        server_says = await refused(c.call_tool("probe_nope", {}))
        assert (server_says.code, server_says.message) == (-32602, "Unknown tool: nope")

        prompts = await c.list_prompts(cache_mode="refresh")
        assert [p.name for p in prompts.prompts] == ["hello"]
        got = await c.get_prompt("hello", {"name": "Ada"})
        assert [
            m.content.text for m in got.messages if isinstance(m.content, types.TextContent)
        ] == ["Hello, Ada!"]
        error = await refused(c.get_prompt("greet", {"name": "Ada"}))
        assert (error.code, error.message) == (-32602, "Unknown prompt: greet")

        resources = await c.list_resources(cache_mode="refresh")
        assert [str(r.uri) for r in resources.resources] == ["probe://readme"]
        error = await refused(c.read_resource("probe://counter", cache_mode="refresh"))
        if mode == "legacy":
            assert (error.code, error.data) == (-32002, {"uri": "probe://counter"})
        else:  # as a legacy server's -32002 reaches a modern client (docs/modern.md)
            assert (error.code, error.data) == (
                -32602,
                {"uri": "probe://counter", "upstreamCode": -32002},
            )
        assert asked(state, "resources/read") == []


async def test_list_changed_still_flows_and_the_new_tool_is_listed_by_its_new_name(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    name = f"extra_{uuid.uuid4().hex[:6]}"
    seen: list[Any] = []
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        seen.append(message)
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with server_factory.start(config(state, RULES)) as server:
        async with client(server, "legacy", message_handler=on_message) as c:
            await c.call_tool("probe_add_tool", {"name": name})
            with anyio.fail_after(DEADLINE_S):
                await changed.wait()
            listed = await c.list_tools(cache_mode="refresh")
            assert {t.name for t in listed.tools} == SHOWN_TOOLS | {f"probe_{name}"}
            added = await c.call_tool(f"probe_{name}", {})
            assert text_of(added) == f"{name} was added"
        async with client(server, "2026-07-28") as c:
            uris = ["probe://counter", "probe://readme"]
            async with c.listen(tools_list_changed=True, resource_subscriptions=uris) as sub:
                assert sub.honored.resource_subscriptions == ["probe://readme"]  # not the hidden
                await c.call_tool("probe_add_tool", {"name": f"{name}2"})
                with anyio.fail_after(DEADLINE_S):
                    async for event in sub:
                        if isinstance(event, ToolsListChanged):
                            break
            listed = await c.list_tools(cache_mode="refresh")
            assert f"probe_{name}2" in {t.name for t in listed.tools}
            assert "hang" not in {t.name for t in listed.tools}


@pytest.mark.parametrize("mode", MODES)
async def test_scopes_decide_what_a_jwt_lists_and_calls(
    server_factory: ServerFactory, tmp_path: Path, mode: str
) -> None:
    """``require``: ``add_tool`` and ``bump`` need the scope ``probe:admin``. A JWT without
    it does not list them and is refused them as unknown tools; one with it (``scope`` or
    ``scp``) has them; a static token carries no scopes and is limited by no scope rule."""
    state = tmp_path / "state"
    state.mkdir()
    issuer = Issuer()
    kid = issuer.rsa("k1")
    auth = jwt_auth(jwks_file=issuer.write_jwks(tmp_path / "jwks.json", kid))
    auth["tokens"] = [{"token": "static-token-for-the-operator", "principal": "operator"}]
    rules = {
        "tools": {
            "deny": ["hang*"],
            "require": [{"scope": "probe:admin", "names": ["add_tool", "bump"]}],
        }
    }
    everything = {"echo", "ask", "add_tool", "bump", "events"}
    reader = issuer.token(kid, "bob", scope="probe:read other")
    admins = (
        issuer.token(kid, "alice", scope="probe:read probe:admin"),
        issuer.token(kid, "carol", scp=["probe:admin"]),
        "static-token-for-the-operator",
    )
    async with server_factory.start(config(state, rules, auth=auth)) as server:
        async with client(server, mode, reader) as c:
            listed = await c.list_tools(cache_mode="refresh")
            assert {t.name for t in listed.tools} == everything - {"add_tool", "bump"}
            for name in ("add_tool", "bump"):
                error = await refused(c.call_tool(name, {"name": "x"}))
                assert (error.code, error.message) == (-32602, f"Unknown tool: {name}")
            assert text_of(await c.call_tool("echo", {"text": "read"})) == "read"
        assert [e.get("name") for e in asked(state, "tools/call")] == ["echo"]
        for token in admins:
            async with client(server, mode, token) as c:
                listed = await c.list_tools(cache_mode="refresh")
                assert {t.name for t in listed.tools} == everything
                assert text_of(await c.call_tool("bump", {})).isdigit()


async def test_over_websocket_a_session_keeps_the_scopes_of_its_credential(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    """``/ws`` sessions take the scopes of the socket's credential, as ``/mcp`` ones do."""
    state = tmp_path / "state"
    state.mkdir()
    issuer = Issuer()
    kid = issuer.rsa("k1")
    auth = jwt_auth(jwks_file=issuer.write_jwks(tmp_path / "jwks.json", kid))
    rules = {"tools": {"require": [{"scope": "probe:admin", "names": ["add_tool", "bump"]}]}}
    init = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    }
    async with server_factory.start(config(state, rules, auth=auth)) as server:
        url = server.url.replace("http://", "ws://").removesuffix("/mcp") + "/ws"
        listed = {}
        for scope in ("probe:read", "probe:admin"):
            headers = {"Authorization": f"Bearer {issuer.token(kid, 'ann', scope=scope)}"}
            async with (
                aiohttp.ClientSession() as http,
                http.ws_connect(url, headers=headers, protocols=("mcp",)) as ws,
            ):
                await ws.send_json(
                    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}
                )
                await ws.send_json({"jsonrpc": "2.0", "method": "notifications/initialized"})
                await ws.send_json({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
                with anyio.fail_after(DEADLINE_S):
                    while True:
                        frame = json.loads((await ws.receive()).data)
                        if frame.get("id") == 2:
                            break
                listed[scope] = {t["name"] for t in frame["result"]["tools"]}
    assert {"add_tool", "bump"} <= listed["probe:admin"]
    assert listed["probe:read"] == listed["probe:admin"] - {"add_tool", "bump"}
