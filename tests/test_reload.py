"""Reload without a restart (proxy/reload.py, docs/reference.md#reload), end to end: real
proxy processes whose config file is rewritten under live calls, then SIGHUP (or, with
``listen.watch_config``, nothing). The legacy fixture's ``ask`` tool keeps a call in
flight until the test answers its question, so the test, not a clock, decides when it
ends. Proved here: a server added serves at once; a token replaced is refused at once
while a call started with it completes untouched; a server removed refuses new sessions
and calls (404 ``server_removed``) while its call in flight finishes, then stops; a
server whose command changed serves new sessions with the new one while an open session
keeps the old; a broken file, and one changing what needs a restart, are refused whole
with the old config serving; /status.json and the metric show each outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from proxy.core.sse import SSEDecoder
from tests.downstream.sse_client import RawSession, messages, read_events
from tests.modern.client import Modern
from tests.support import (
    DEADLINE_S,
    DEMO,
    FIXTURE,
    MCP_HEADERS,
    RunningProxy,
    bearer,
    eventually,
    initialize_request,
    log_events,
    run_proxy_on,
    tool_call,
    wait_for_log,
)

DRAIN = "MCP_RESUME_PROXY_DRAIN_SECONDS"
T1 = "first-token-of-alice"
T2 = "second-token-of-alice"


def _config(servers: dict[str, list[str]], **extra: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "servers": {
            name: {"command": cmd, "stop_grace_seconds": 1} for name, cmd in servers.items()
        },
        "log": {"format": "json", "level": "debug"},
    }
    config.update(extra)
    return config


@contextlib.asynccontextmanager
async def _proxy(
    tmp_path: Path, config: dict[str, Any], drain: str = "0"
) -> AsyncIterator[tuple[RunningProxy, Path]]:
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump(config))
    async with run_proxy_on(tmp_path, config, env={DRAIN: drain}, file=path) as proxy:
        yield proxy, path


async def _reload(proxy: RunningProxy, path: Path, config: dict[str, Any] | str) -> dict[str, Any]:
    """Write ``config`` (a mapping, or raw text) and send SIGHUP; the reload's log entry."""
    path.write_text(config if isinstance(config, str) else yaml.safe_dump(config))
    return await _signalled(proxy)


async def _signalled(proxy: RunningProxy, signalled: bool = True) -> dict[str, Any]:
    before = _reloads(proxy)
    if signalled:
        proxy.process.send_signal(signal.SIGHUP)
    await eventually(lambda: len(_reloads(proxy)) > len(before), what="a reload in the log")
    return _reloads(proxy)[-1]


def _reloads(proxy: RunningProxy) -> list[dict[str, Any]]:
    log = proxy.log_text()
    found = log_events(log, "config_reloaded") + log_events(log, "config_reload_refused")
    return sorted(found, key=lambda e: e["timestamp"])


async def _asked(resp: aiohttp.ClientResponse) -> tuple[SSEDecoder, dict[str, Any]]:
    """Read a call's stream until the server's question comes."""
    decoder = SSEDecoder()
    async with asyncio.timeout(DEADLINE_S):
        async for chunk in resp.content.iter_any():
            for event in decoder.feed(chunk):
                if event.data and "elicitation/create" in event.data:
                    return decoder, json.loads(event.data)
    raise AssertionError("the call's stream ended before its question")


async def _answered(
    http: aiohttp.ClientSession,
    client: RawSession,
    call: aiohttp.ClientResponse,
    decoder: SSEDecoder,
    question: dict[str, Any],
    **headers: str,
) -> dict[str, Any]:
    """Answer the question; the call's last message (its answer)."""
    answer = {
        "jsonrpc": "2.0",
        "id": question["id"],
        "result": {"action": "accept", "content": {"answer": "yes"}},
    }
    async with http.post(client.url, json=answer, headers=client.headers(**headers)) as resp:
        assert resp.status == 202, await resp.text()
    found: list[dict[str, Any]] = []
    async with asyncio.timeout(DEADLINE_S):
        async for chunk in call.content.iter_any():
            found += [json.loads(e.data) for e in decoder.feed(chunk) if e.data]
    return found[-1]


async def _tools(client: RawSession, rid: int = 50) -> list[str]:
    (answer,) = [m for m in messages(await client.request(rid, "tools/list")) if "id" in m]
    return sorted(tool["name"] for tool in answer["result"]["tools"])


async def _status(http: aiohttp.ClientSession, proxy: RunningProxy, **headers: str) -> Any:
    async with http.get(proxy.base + "/status.json", headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def _metric(http: aiohttp.ClientSession, proxy: RunningProxy, outcome: str) -> float:
    async with http.get(proxy.base + "/metrics", headers=bearer(T2)) as resp:
        text = await resp.text()
    line = f'mcp_resume_proxy_config_reloads_total{{outcome="{outcome}"}}'
    values = [float(row.split()[-1]) for row in text.splitlines() if row.startswith(line)]
    return values[0] if values else 0.0


async def test_a_server_added_and_a_token_replaced_apply_at_once_while_a_call_goes_on(
    tmp_path: Path,
) -> None:
    tokens = {"tokens": [{"token": T1, "principal": "alice"}]}
    config = _config({"a": FIXTURE}, auth=tokens)
    async with _proxy(tmp_path, config) as (proxy, path), aiohttp.ClientSession() as http:
        a = RawSession(http, proxy.base + "/servers/a/mcp")
        async with http.post(
            a.url, json=initialize_request(0), headers={**MCP_HEADERS, **bearer(T1)}
        ) as resp:
            assert resp.status == 200
            a.session_id = resp.headers["Mcp-Session-Id"]
            await read_events(resp)
        call = await http.post(
            a.url, json=tool_call(7, "ask", {"question": "?"}), headers=a.headers(**bearer(T1))
        )
        decoder, question = await _asked(call)
        pids = proxy.upstream_pids()

        config = _config(
            {"a": FIXTURE, "b": DEMO}, auth={"tokens": [{"token": T2, "principal": "alice"}]}
        )
        reloaded = await _reload(proxy, path, config)
        assert reloaded["event"] == "config_reloaded", reloaded
        assert reloaded["added"] == ["b"] and reloaded["removed"] == [], reloaded
        assert reloaded["settings"] == ["auth.tokens"], reloaded
        assert T2 not in proxy.log_text() and T1 not in json.dumps(reloaded)

        # The old token is refused from now on; the new one is taken, also by server b.
        async with http.post(
            a.url, json=tool_call(8, "echo", {"text": "x"}), headers=a.headers(**bearer(T1))
        ) as resp:
            assert resp.status == 401
        b = RawSession(http, proxy.base + "/servers/b/mcp")
        async with http.post(
            b.url, json=initialize_request(0), headers={**MCP_HEADERS, **bearer(T2)}
        ) as resp:
            assert resp.status == 200, await resp.text()
            b.session_id = resp.headers["Mcp-Session-Id"]
            await read_events(resp)
        b_tools = await _tools_as(b, T2)
        assert "countdown" in b_tools, b_tools

        # The call started before the reload was not touched: same process, real answer.
        last = await _answered(http, a, call, decoder, question, **bearer(T2))
        assert last["id"] == 7 and last["result"]["content"][0]["text"] == "yes", last
        assert proxy.upstream_pids()[: len(pids)] == pids
        status = await _status(http, proxy, **bearer(T2))
        assert status["reload"]["outcome"] == "applied", status["reload"]
        assert status["reload"]["trigger"] == "sighup"
        assert status["reload"]["changes"]["added"] == ["b"]
        assert [u["name"] for u in status["upstreams"]] == ["a", "b"]
        assert await _metric(http, proxy, "applied") == 1.0


async def _tools_as(client: RawSession, token: str) -> list[str]:
    body = {"jsonrpc": "2.0", "id": 50, "method": "tools/list"}
    async with client.http.post(
        client.url, json=body, headers=client.headers(**bearer(token))
    ) as resp:
        assert resp.status == 200, await resp.text()
        (answer,) = [m for m in messages(await read_events(resp)) if "id" in m]
    return sorted(tool["name"] for tool in answer["result"]["tools"])


async def test_a_removed_server_drains_its_call_in_flight_then_stops(tmp_path: Path) -> None:
    config = _config({"a": DEMO, "b": FIXTURE})
    async with (
        _proxy(tmp_path, config, drain="600") as (proxy, path),
        aiohttp.ClientSession() as http,
    ):
        b = RawSession(http, proxy.base + "/servers/b/mcp")
        await b.initialize()
        call = await http.post(
            b.url, json=tool_call(7, "ask", {"question": "?"}), headers=b.headers()
        )
        decoder, question = await _asked(call)

        reloaded = await _reload(proxy, path, _config({"a": DEMO}))
        assert reloaded["removed"] == ["b"], reloaded
        await wait_for_log(proxy, "server_removed")

        # No new session and no new call while it drains ...
        async with http.post(b.url, json=initialize_request(0), headers=MCP_HEADERS) as resp:
            body = await resp.json()
            assert resp.status == 404 and body["error"]["data"]["reason"] == "server_removed"
        async with http.post(
            b.url, json=tool_call(8, "echo", {"text": "x"}), headers=b.headers()
        ) as resp:
            body = await resp.json()
            assert resp.status == 404 and body["error"]["data"]["reason"] == "server_removed"
        # ... while the call in flight finishes with its real answer, and server a serves.
        a = RawSession(http, proxy.base + "/servers/a/mcp")
        await a.initialize()
        last = await _answered(http, b, call, decoder, question)
        assert last["id"] == 7 and last["result"]["content"][0]["text"] == "yes", last

        # Then it is gone: its session ended, its path names no server.
        await wait_for_log(proxy, "server_drained")
        async with http.post(b.url, json=initialize_request(0), headers=MCP_HEADERS) as resp:
            body = await resp.json()
            assert resp.status == 404 and body["error"]["data"]["reason"] == "unknown_server"
        status = await _status(http, proxy)
        assert [u["name"] for u in status["upstreams"]] == ["a"]
        assert all(s["upstream"] == "a" for s in status["sessions"]), status["sessions"]
        assert await _tools(a) == ["countdown", "echo"]


async def test_a_changed_server_serves_new_sessions_with_its_new_settings(tmp_path: Path) -> None:
    async with (
        _proxy(tmp_path, _config({"a": FIXTURE})) as (proxy, path),
        aiohttp.ClientSession() as http,
    ):
        old = RawSession(http, proxy.base + "/servers/a/mcp")
        await old.initialize()
        before = await _tools(old)
        assert "ask" in before
        modern = Modern(http, proxy.base + "/servers/a/mcp")
        assert "ask" in await _modern_tools(modern)

        reloaded = await _reload(proxy, path, _config({"a": DEMO}))
        assert reloaded["changed"] == ["a"], reloaded
        new = RawSession(http, proxy.base + "/servers/a/mcp")
        await new.initialize()
        assert await _tools(new) == ["countdown", "echo"]
        assert await _tools(old, 51) == before  # the open session keeps its server
        assert await _modern_tools(modern) == ["countdown", "echo"]  # the pool's new sessions


async def _modern_tools(modern: Modern) -> list[str]:
    answer = await modern.send("tools/list", {})
    return sorted(tool["name"] for tool in answer.result["tools"])


async def test_a_broken_file_and_a_restart_only_change_are_refused_whole(tmp_path: Path) -> None:
    async with (
        _proxy(tmp_path, _config({"a": DEMO})) as (proxy, path),
        aiohttp.ClientSession() as http,
    ):
        refused = await _reload(proxy, path, "servers: {a: [unclosed\n")
        assert refused["event"] == "config_reload_refused", refused
        assert refused["errors"], refused

        moved = _config({"a": DEMO, "b": FIXTURE})
        moved["listen"]["port"] = proxy.port + 1
        moved["store"] = {"kind": "sqlite", "path": str(tmp_path / "x.db")}
        moved["streams"] = {"token_secret": "a-secret-of-enough-length"}
        refused = await _reload(proxy, path, moved)
        assert refused["event"] == "config_reload_refused", refused
        (error,) = refused["errors"]
        assert "listen.port" in error and "store.kind" in error and "store.path" in error, error
        assert "a-secret-of-enough-length" not in proxy.log_text()

        # The old config serves on: server a only, at the same port.
        a = RawSession(http, proxy.base + "/servers/a/mcp")
        await a.initialize()
        async with http.post(
            proxy.base + "/servers/b/mcp", json=initialize_request(0), headers=MCP_HEADERS
        ) as resp:
            assert resp.status == 404
        status = await _status(http, proxy)
        assert status["reload"]["outcome"] == "refused", status["reload"]
        assert await _metric(http, proxy, "refused") == 2.0


async def test_a_watched_file_reloads_when_written(tmp_path: Path) -> None:
    config = _config({"a": DEMO})
    config["listen"]["watch_config"] = True
    async with (
        _proxy(tmp_path, config) as (proxy, path),
        aiohttp.ClientSession() as http,
    ):
        await wait_for_log(proxy, "proxy_listening")
        added = _config({"a": DEMO, "b": DEMO})
        added["listen"]["watch_config"] = True
        path.write_text(yaml.safe_dump(added))
        reloaded = await _signalled(proxy, signalled=False)
        assert reloaded["added"] == ["b"] and reloaded["trigger"] == "watch", reloaded
        b = RawSession(http, proxy.base + "/servers/b/mcp")
        await b.initialize()


async def test_a_reloaded_json_answer_bound_applies_to_the_next_call(tmp_path: Path) -> None:
    """``sse.*`` is reloaded at once: a lone answer under ``sse.json_answer_min_bytes``
    goes as SSE; once a reload lowers the bound, the same call's answer goes as JSON."""
    config = _config({"a": DEMO})
    async with _proxy(tmp_path, config) as (proxy, path), aiohttp.ClientSession() as http:
        client = RawSession(http, proxy.base + "/servers/a/mcp")
        await client.initialize()

        async def content_type(rid: int) -> str:
            call = tool_call(rid, "echo", {"text": "x" * 2000})
            async with http.post(client.url, json=call, headers=client.headers()) as resp:
                assert resp.status == 200, await resp.text()
                await resp.read()
                return resp.content_type

        assert await content_type(2) == "text/event-stream"
        reloaded = await _reload(proxy, path, {**config, "sse": {"json_answer_min_bytes": 100}})
        assert reloaded["event"] == "config_reloaded", reloaded
        assert await content_type(3) == "application/json"
