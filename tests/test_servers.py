"""Several named servers behind one proxy: each at /servers/NAME/mcp and /servers/NAME/ws,
with its own sessions, limits, health, readiness and metrics; one that crashes or
crash-loops leaves the others serving; the ``mcpServers`` JSON file of desktop hosts is
read as it is."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.config import ConfigError, load_config
from tests.downstream.sse_client import RawSession, messages
from tests.support import (
    DEMO,
    FIXTURE,
    initialize_request,
    log_events,
    run_proxy_on,
    tool_call,
)

ACCEPT = {"Accept": "application/json, text/event-stream"}


def two_servers(**b: Any) -> dict[str, Any]:
    return {
        "listen": {"host": "127.0.0.1", "port": 0},
        "upstream": {"stop_grace_seconds": 3},  # defaults for both servers
        "servers": {"a": {"command": FIXTURE}, "b": {"command": DEMO, **b}},
        "log": {"format": "json", "level": "debug"},
    }


async def call(client: RawSession, rid: int, tool: str, args: dict[str, Any]) -> dict[str, Any]:
    events = await client.request(rid, "tools/call", tool_call(rid, tool, args)["params"])
    return next(m for m in messages(events) if m.get("id") == rid)


async def test_two_servers_side_by_side(tmp_path: Path) -> None:
    async with (
        run_proxy_on(tmp_path, two_servers()) as proxy,
        aiohttp.ClientSession() as http,
    ):
        a = RawSession(http, proxy.base + "/servers/a/mcp")
        b = RawSession(http, proxy.base + "/servers/b/mcp")
        await a.initialize()
        await b.initialize()
        assert a.init_result["serverInfo"]["name"] != b.init_result["serverInfo"]["name"]
        echoed = await call(a, 2, "echo", {"text": "to a"})
        assert echoed["result"]["content"][0]["text"] == "to a"
        # A session is found only at its own server's path.
        wrong = {**b.headers(), "Mcp-Session-Id": a.session_id}
        body = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
        async with http.post(b.url, json=body, headers=wrong) as resp:
            assert resp.status == 404
        # With two servers there is no /mcp nor /ws (which would it be?), and a path that
        # names no server says which there are.
        for path in ("/mcp", "/ws", "/servers/c/mcp", "/servers/a/sse", "/servers/a"):
            async with http.post(
                proxy.base + path, json=initialize_request(), headers=ACCEPT
            ) as resp:
                assert resp.status == 404, path
                error = (await resp.json())["error"]
            assert error["data"]["reason"] == "unknown_server"
            assert "/servers/a/mcp, /servers/b/mcp" in error["message"]
        # Over WebSocket too, at /servers/NAME/ws.
        ws_url = proxy.base.replace("http", "ws") + "/servers/b/ws"
        async with http.ws_connect(ws_url, protocols=("mcp",)) as ws:
            await ws.send_json(initialize_request(1))
            reply = await ws.receive_json(timeout=30)
            assert reply["result"]["serverInfo"] == b.init_result["serverInfo"]
        async with http.get(proxy.base + "/healthz") as resp:
            health = await resp.json()
        async with http.get(proxy.base + "/readyz") as resp:
            assert resp.status == 200
            ready = await resp.json()
        async with http.get(proxy.base + "/metrics") as resp:
            metrics = await resp.text()
    assert set(health["upstreams"]) == {"a", "b"} and "upstream" not in health
    assert health["upstreams"]["a"]["sessions"] == 1
    assert ready["upstreams"] == {"a": "ready", "b": "ready"}
    for name in ("a", "b"):
        assert f'mcp_resume_proxy_upstream_starts_total{{for="session",upstream="{name}"}}' in (
            metrics
        )
    # Every line about a session names its server: the runner's, the transport's (its
    # tasks keep the context they started in) and the endpoint's.
    for event in ("session_created", "upstream_started", "upstream_stopped"):
        entries = log_events(proxy.log_text(), event)
        assert {e.get("upstream") for e in entries} == {"a", "b"}, (event, entries)
    listening = json.loads(
        next(line for line in proxy.log_text().splitlines() if "proxy_listening" in line)
    )
    assert listening["servers"] == {
        "a": proxy.base + "/servers/a/mcp",
        "b": proxy.base + "/servers/b/mcp",
    }


async def test_one_server_crash_looping_leaves_the_other_serving(tmp_path: Path) -> None:
    config = two_servers()
    config["servers"]["b"] = {"command": FIXTURE, "restart_max": 1}
    async with run_proxy_on(tmp_path, config) as proxy, aiohttp.ClientSession() as http:
        a = RawSession(http, proxy.base + "/servers/a/mcp")
        b = RawSession(http, proxy.base + "/servers/b/mcp")
        await a.initialize()
        await b.initialize()
        slow = asyncio.ensure_future(call(a, 2, "slow", {"steps": 10, "delay": 0.1}))
        first = await call(b, 2, "crash", {})
        assert first["error"]["data"]["reason"] == "upstream_restarted"
        second = await call(b, 3, "crash", {})
        assert "crash loop" in second["error"]["message"]
        done = await slow  # a's call went on through all of it
        assert done["result"]["content"][0]["text"] == "done 10"
        assert (await call(a, 3, "echo", {"text": "still"}))["result"]["content"][0]["text"] == (
            "still"
        )
        async with http.get(proxy.base + "/readyz") as resp:
            assert resp.status == 503
            ready = await resp.json()
        async with http.get(proxy.base + "/healthz") as resp:
            health = await resp.json()
        async with http.get(proxy.base + "/metrics") as resp:
            metrics = await resp.text()
    assert ready["upstreams"]["a"] == "ready"
    assert "crash-looping" in ready["upstreams"]["b"]
    assert ready["reasons"][0].startswith("b: ")
    assert health["upstreams"]["a"]["state"] == "ok" and health["upstreams"]["a"]["restarts"] == 0
    assert health["upstreams"]["b"]["crash_loop"]
    assert 'mcp_resume_proxy_upstream_restarts_total{upstream="b"} 1.0' in metrics
    assert 'upstream_restarts_total{upstream="a"}' not in metrics


async def test_each_server_has_its_own_session_limit(tmp_path: Path) -> None:
    async with (
        run_proxy_on(tmp_path, two_servers(max_sessions=1)) as proxy,
        aiohttp.ClientSession() as http,
    ):
        await RawSession(http, proxy.base + "/servers/b/mcp").initialize()
        async with http.post(
            proxy.base + "/servers/b/mcp", json=initialize_request(), headers=ACCEPT
        ) as resp:
            assert resp.status == 503
            error = (await resp.json())["error"]
        for _ in range(2):  # the other server is not limited by it
            await RawSession(http, proxy.base + "/servers/a/mcp").initialize()
    assert error["data"]["reason"] == "too_many_sessions"
    assert "servers.b.max_sessions=1" in error["message"]


async def test_one_named_server_is_also_at_mcp(tmp_path: Path) -> None:
    config = two_servers()
    del config["servers"]["b"]
    async with run_proxy_on(tmp_path, config) as proxy, aiohttp.ClientSession() as http:
        plain = RawSession(http, proxy.url)
        await plain.initialize()
        # The same session at its named path: one server, two paths.
        named = RawSession(http, proxy.base + "/servers/a/mcp", session_id=plain.session_id)
        assert (await call(named, 2, "echo", {"text": "x"}))["result"]["content"][0]["text"] == "x"


async def test_mcp_servers_file_as_desktop_hosts_write_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "servers.json"
    file.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "fixture": {
                        "command": FIXTURE[0],
                        "args": FIXTURE[1:],
                        "env": {"FIXTURE_NOTE": "${NOTE:-unset}"},
                        "autoApprove": [],
                    },
                    "demo": {"command": DEMO[0], "args": DEMO[1:]},
                    "off": {"command": "no-such-program", "disabled": True},
                },
                "listen": {"host": "127.0.0.1", "port": 0},
                "log": {"format": "json", "level": "debug"},
            }
        )
    )
    monkeypatch.setenv("NOTE", "from the environment")
    other_hosts = tmp_path / "other.json"
    other_hosts.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "a": {"serverUrl": "https://a.example/mcp"},
                    "b": {"httpUrl": "https://b.example/stream"},
                    "c": {"url": "https://c.example/sse"},
                }
            }
        )
    )
    kinds = {name: s.kind for name, s in load_config(other_hosts).servers.items()}
    assert kinds == {"a": "streamable-http", "b": "streamable-http", "c": "sse"}
    config = load_config(file)
    assert list(config.servers) == ["fixture", "demo"]
    assert config.servers["fixture"].command == FIXTURE
    assert config.servers["fixture"].env == {"FIXTURE_NOTE": "from the environment"}
    # The proxy started on that very file (--config servers.json), serving both.
    async with (
        run_proxy_on(tmp_path, json.loads(file.read_text()), file=file) as proxy,
        aiohttp.ClientSession() as http,
    ):
        for name in ("fixture", "demo"):
            client = RawSession(http, f"{proxy.base}/servers/{name}/mcp")
            await client.initialize()
            assert client.init_result["serverInfo"]["name"]


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ({"x": {"command": "py", "args": "-m"}}, "mcpServers.x.args: expected a list"),
        ({"x": {"command": "py", "comand": 1}}, "mcpServers.x.comand: unknown key"),
        ({"x": {"url": "ftp://h/"}}, "mcpServers.x.url: expected an http(s)://"),
        ({"x": {"url": "http://h/mcp", "type": "carrier-pigeon"}}, "mcpServers.x.type: expected"),
        ({"x": {"env": {}}}, "mcpServers.x: give a command (stdio) or a url"),
        ({"bad name": {"command": "py"}}, "mcpServers.bad name: a server name is"),
        ({"x": {"command": "py", "disabled": True}}, "mcpServers: no server"),
        ({"x": {"url": "http://h/mcp", "headers": {"A": "${UNSET_FOR_TEST}"}}}, None),
    ],
)
def test_mcp_servers_errors_name_the_key_as_the_file_has_it(
    tmp_path: Path, servers: dict[str, Any], message: str | None
) -> None:
    file = tmp_path / "servers.json"
    file.write_text(json.dumps({"mcpServers": servers}))
    if message is None:  # headers are read at start, not at load: no error yet
        assert load_config(file).servers["x"].headers == {"A": "${UNSET_FOR_TEST}"}
        return
    with pytest.raises(ConfigError) as info:
        load_config(file)
    assert str(info.value).startswith(message), str(info.value)


def test_check_reads_an_mcp_servers_file(tmp_path: Path) -> None:
    import subprocess

    file = tmp_path / "servers.json"
    file.write_text(json.dumps({"mcpServers": {"x": {"url": "http://h/mcp", "type": "http"}}}))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"mcpServers": {"x": {"url": "h", "headers": {"A": "${NO_VAR_}"}}}}))
    out = subprocess.run(
        [sys.executable, "-m", "proxy", "check", str(file), str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    assert f"{file}: ok" in out.stdout
    assert "mcpServers.x.url: expected an http(s)://" in out.stderr


def test_servers_and_a_command_on_the_command_line_conflict(tmp_path: Path) -> None:
    import subprocess

    file = tmp_path / "servers.json"
    file.write_text(json.dumps({"mcpServers": {"x": {"url": "http://h/mcp"}}}))
    out = subprocess.run(
        [sys.executable, "-m", "proxy", "--config", str(file), "--", "python", "s.py"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2 and "servers: the config file names its servers" in out.stderr


async def test_a_task_is_known_only_at_its_servers_path(tmp_path: Path) -> None:
    from tests.modern.client import Modern
    from tests.modern.support import SERVER as TASK_SERVER

    config = two_servers()
    config["servers"] = {"a": {"command": TASK_SERVER}, "b": {"command": TASK_SERVER}}
    config["tasks"] = {"mode": "always"}
    async with run_proxy_on(tmp_path, config) as proxy, aiohttp.ClientSession() as http:
        at_a = Modern(http, proxy.base + "/servers/a/mcp")
        at_b = Modern(http, proxy.base + "/servers/b/mcp")
        task_id = (await at_a.call("wait", {"seconds": 0.2})).result["taskId"]
        assert (await at_b.task("tasks/get", task_id)).error["code"] == -32602
        assert (await at_a.task("tasks/get", task_id)).status == 200
