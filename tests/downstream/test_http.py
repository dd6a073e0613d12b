"""Streamable HTTP edge cases against the real proxy process and a real stdio server."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import warnings
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.web_exceptions import NotAppKeyWarning

from proxy.config import config_from_mapping
from proxy.context import ProxyContext
from proxy.downstream.app import build_app
from proxy.registry import Registry
from tests.downstream.sse_client import RawSession, messages, proxy_session, read_events
from tests.support import FIXTURE, MCP_HEADERS, alive, bearer, eventually, run_proxy, tool_call


async def test_status_codes_and_the_session_keeps_working(tmp_path: Path) -> None:
    async with proxy_session(tmp_path) as (proxy, http, s):
        assert s.init_result["serverInfo"]["name"] == "mcp-resume-proxy-demo"
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}

        async def status(method: str, **kw: object) -> tuple[int, dict[str, object] | None]:
            async with http.request(method, proxy.url, **kw) as resp:  # type: ignore[arg-type]
                text = await resp.text()
                return resp.status, json.loads(text) if text.startswith("{") else None

        # 406: Accept lacks text/event-stream
        code, body = await status("POST", json=ping, headers=s.headers(Accept="application/json"))
        assert code == 406 and body and body["error"]["code"] == -32600
        # 415
        code, _ = await status(
            "POST", data=b"x", headers=s.headers(**{"Content-Type": "text/plain"})
        )
        assert code == 415
        # -32700 / 400
        code, body = await status("POST", data=b"{bad json", headers=s.headers())
        assert code == 400 and body and body["error"]["code"] == -32700
        # -32600 / 400
        code, body = await status("POST", json={"hello": 1}, headers=s.headers())
        assert code == 400 and body and body["error"]["code"] == -32600
        # batch not allowed for 2025-11-25
        code, body = await status("POST", json=[ping, ping], headers=s.headers())
        assert code == 400
        # missing session → 400; unknown → 404
        h = dict(MCP_HEADERS)
        code, body = await status("POST", json=ping, headers=h)
        assert code == 400 and body and body["error"]["data"]["reason"] == "missing_session"
        assert body["id"] == 1, "a lone request's refusal carries its id"
        code, body = await status("POST", json=ping, headers={**h, "Mcp-Session-Id": "nope"})
        assert code == 404 and body and body["error"]["code"] == -32001
        # unsupported protocol version → 400
        code, body = await status(
            "POST", json=ping, headers=s.headers(**{"MCP-Protocol-Version": "1999-01-01"})
        )
        assert (
            code == 400
            and body
            and body["error"]["data"]["reason"] == "unsupported_protocol_version"
        )
        # Origin → 403, Host → 421
        code, _ = await status("POST", json=ping, headers=s.headers(Origin="http://evil.example"))
        assert code == 403
        code, _ = await status("POST", json=ping, headers=s.headers(Host="evil.example"))
        assert code == 421
        # other methods → 405
        code, _ = await status("PUT", json=ping, headers=s.headers())
        assert code == 405
        # GET without event-stream accept → 406
        code, _ = await status(
            "GET", headers={"Accept": "application/json", "Mcp-Session-Id": s.session_id}
        )
        assert code == 406
        # too large → 413
        big = {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"x": "y" * 5_000_000}}
        code, _ = await status("POST", json=big, headers=s.headers())
        assert code == 413
        # and after all that the session still answers
        assert messages(await s.request(3, "ping")) == [{"jsonrpc": "2.0", "id": 3, "result": {}}]
        tools = messages(await s.request(4, "tools/list"))[-1]["result"]["tools"]
        assert {t["name"] for t in tools} == {"echo", "countdown"}


async def test_priming_keepalive_and_headers(tmp_path: Path) -> None:
    async with proxy_session(tmp_path, sse={"keepalive_seconds": 0.2}) as (proxy, http, s):
        body = tool_call(1, "countdown", {"steps": 3, "delay": 0.3}, "p")
        async with http.post(proxy.url, json=body, headers=s.headers()) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            assert resp.headers["X-Accel-Buffering"] == "no"
            raw = await resp.read()
        assert raw.startswith(b"id: "), raw[:60]
        first = raw.split(b"\n\n", 1)[0]
        assert first.endswith(b"data: "), "priming event: an id and empty data"
        assert b": keepalive" in raw
        msgs = [json.loads(e.data) for e in read_sse(raw) if e.data]
        assert [m.get("params", {}).get("progress") for m in msgs[:-1]] == [1, 2, 3]
        assert msgs[-1]["result"]["content"][0]["text"] == "liftoff after 3 steps"


def read_sse(raw: bytes):  # type: ignore[no-untyped-def]
    from proxy.core.sse import SSEDecoder

    return SSEDecoder().feed(raw)


async def test_older_revisions_get_no_priming_and_2025_03_26_may_batch(tmp_path: Path) -> None:
    async with run_proxy(tmp_path) as proxy, aiohttp.ClientSession() as http:
        s = RawSession(http, proxy.url, version="2025-03-26")
        await s.initialize()
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        ]
        async with http.post(proxy.url, json=batch, headers=s.headers()) as resp:
            assert resp.status == 200
            events = await read_events(resp)
        assert all(e.data for e in events), "no priming event before 2025-11-25"
        assert sorted(m["id"] for m in messages(events)) == [1, 2]
        only_notes = [{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}]
        async with http.post(proxy.url, json=only_notes, headers=s.headers()) as resp:
            assert resp.status == 202


async def test_resume_by_last_event_id_and_its_errors(tmp_path: Path) -> None:
    async with proxy_session(tmp_path) as (proxy, http, s):
        body = tool_call(5, "countdown", {"steps": 6, "delay": 0.15}, "r")
        from proxy.core.sse import SSEDecoder

        dec = SSEDecoder()
        seen = []
        async with http.post(proxy.url, json=body, headers=s.headers()) as resp:
            async for chunk in resp.content.iter_any():
                seen += dec.feed(chunk)
                if len([e for e in seen if e.data]) >= 2:
                    break  # hang up mid-call
        last = seen[-1].id
        assert last is not None
        async with http.get(proxy.url, headers=s.headers(**{"Last-Event-ID": last})) as resp:
            assert resp.status == 200
            rest = await read_events(resp)
        got = [m.get("params", {}).get("progress", m.get("id")) for m in messages(seen + rest)]
        assert got == [1, 2, 3, 4, 5, 6, 5], got
        # the client has it all: a poll-back is told the stream is over, not primed again
        end = [e.id for e in rest if e.id][-1]
        async with http.get(proxy.url, headers=s.headers(**{"Last-Event-ID": end})) as resp:
            assert resp.status == 410
            assert (await resp.json())["error"]["data"]["reason"] == "stream_completed"
        # errors: malformed, foreign, unknown stream
        for bad, status, reason in [
            ("garbage", 400, "malformed_event_id"),
            ("0123abcd.2.1", 400, "wrong_session"),
            (last.rsplit(".", 2)[0] + ".99.1", 410, "unknown_stream"),
        ]:
            async with http.get(proxy.url, headers=s.headers(**{"Last-Event-ID": bad})) as resp:
                assert resp.status == status, (bad, await resp.text())
                assert (await resp.json())["error"]["data"]["reason"] == reason


async def test_delete_ends_the_session_and_its_process(tmp_path: Path) -> None:
    async with proxy_session(tmp_path) as (proxy, http, s):
        pid = proxy.upstream_pids()[-1]
        async with http.delete(proxy.url, headers=s.headers()) as resp:
            assert resp.status == 200
        assert not alive(pid)
        async with http.post(
            proxy.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=s.headers()
        ) as resp:
            assert resp.status == 404


async def test_upstream_crash_fails_the_call_then_404(tmp_path: Path) -> None:
    """With ``upstream.restart: false`` (tests/upstream/test_respawn.py: the default)."""
    no_restart = {"restart": False}
    async with proxy_session(tmp_path, command=FIXTURE, upstream=no_restart) as (proxy, http, s):
        events = await s.request(1, "tools/call", {"name": "crash", "arguments": {}})
        (err,) = messages(events)
        assert err["id"] == 1 and err["error"]["code"] == -32000
        assert "MCP server gone: exited with code 3" in err["error"]["message"]
        async with http.post(
            proxy.url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=s.headers()
        ) as resp:
            assert resp.status == 404
        # Health says so in its body (the proxy itself serves: 200) until a server works again.
        async with http.get(proxy.base + "/healthz") as resp:
            health = await resp.json()
            assert resp.status == 200 and health["status"] == "ok", health
            assert health["upstream"]["state"] == "failing", health
            assert health["upstream"]["transport"] == "stdio"
            assert "exited with code 3" in health["upstream"]["last_error"]
        await RawSession(http, proxy.url).initialize()
        async with http.get(proxy.base + "/healthz") as resp:
            assert resp.status == 200 and (await resp.json())["upstream"]["state"] == "ok"


async def test_bad_upstream_lines_are_skipped(tmp_path: Path) -> None:
    script = tmp_path / "noisy.py"
    script.write_text(
        "import sys, json\n"
        "for line in sys.stdin:\n"
        "    m = json.loads(line)\n"
        "    if 'id' in m and 'method' in m:\n"
        "        print('this is not json', flush=True)\n"
        "        print(json.dumps({'not': 'jsonrpc'}), flush=True)\n"
        "        r = {'protocolVersion': '2025-11-25', 'capabilities': {},\n"
        "             'serverInfo': {'name': 'n', 'version': '1'}}\n"
        "        r = r if m['method'] == 'initialize' else {}\n"
        "        note = {'jsonrpc': '2.0', 'method': 'notifications/message',\n"
        "                'params': {'level': 'info', 'data': m['method']}}\n"
        "        print(json.dumps([note, 'junk in a batch']), flush=True)\n"
        "        print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': r}), flush=True)\n"
    )
    async with proxy_session(tmp_path, command=[sys.executable, str(script)]) as (proxy, http, s):
        got = messages(await s.request(1, "ping"))
        assert got[-1] == {"jsonrpc": "2.0", "id": 1, "result": {}}
        assert got[0]["params"]["data"] == "ping", "a batch line's good messages are kept"
        assert proxy.log_text().count("upstream_line_skipped") >= 3


async def test_sigterm_ends_sessions_and_children_exit_0(tmp_path: Path) -> None:
    async with run_proxy(tmp_path) as proxy, aiohttp.ClientSession() as http:
        pids = []
        for _ in range(3):
            s = RawSession(http, proxy.url)
            await s.initialize()
        pids = proxy.upstream_pids()
        assert len(pids) == 3 and all(alive(p) for p in pids)
        # a call in flight while the signal arrives: its first progress has come
        body = tool_call(1, "countdown", {"steps": 50, "delay": 0.1}, "t")
        with_resp = await http.post(proxy.url, json=body, headers=s.headers())
        seen = b""
        while b"notifications/progress" not in seen:
            chunk = await asyncio.wait_for(with_resp.content.readany(), 30)
            assert chunk, f"the call's stream ended before any progress: {seen!r}"
            seen += chunk
        proxy.process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proxy.process.wait(), 30) == 0
        with_resp.close()
    assert not any(alive(p) for p in pids)


async def test_max_stream_seconds_sends_retry_then_closes_and_get_resumes(tmp_path: Path) -> None:
    sse = {"max_stream_seconds": 0.4, "retry_ms": 50}
    async with proxy_session(tmp_path, sse=sse) as (proxy, http, s):
        body = tool_call(1, "countdown", {"steps": 8, "delay": 0.1}, "m")
        async with http.post(proxy.url, json=body, headers=s.headers()) as resp:
            raw = await resp.read()
        assert raw.rstrip().endswith(b"retry: 50"), raw[-80:]
        events = read_sse(raw)
        got = messages(events)
        assert got and all("method" in m for m in got), "closed before the response"
        last = [e.id for e in events if e.id][-1]
        while True:  # poll back as a 2025-11-25 client does
            async with http.get(proxy.url, headers=s.headers(**{"Last-Event-ID": last})) as resp:
                assert resp.status == 200
                events = read_sse(await resp.read())
            got += messages(events)
            last = [e.id for e in events if e.id][-1]
            if "result" in got[-1]:
                break
        assert [m.get("params", {}).get("progress") for m in got[:-1]] == list(range(1, 9))


async def test_idle_session_expires_and_its_process_stops(tmp_path: Path) -> None:
    async with proxy_session(tmp_path, sessions={"idle_timeout_seconds": 0.5}) as (proxy, http, s):
        pid = proxy.upstream_pids()[-1]
        await eventually(lambda: not alive(pid), what="the idle session to expire")
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        async with http.post(proxy.url, json=ping, headers=s.headers()) as resp:
            assert resp.status == 404


async def test_a_large_body_sent_in_many_chunks_is_read_whole(tmp_path: Path) -> None:
    async with proxy_session(tmp_path) as (proxy, http, s):
        text = "z" * 1_000_000
        raw = json.dumps(tool_call(1, "echo", {"text": text})).encode()

        async def chunks():  # type: ignore[no-untyped-def]
            for i in range(0, len(raw), 4096):
                yield raw[i : i + 4096]

        async with http.post(proxy.url, data=chunks(), headers=s.headers()) as resp:
            assert resp.status == 200
            (result,) = messages(await read_events(resp))
        assert result["result"]["content"][0]["text"] == text


async def test_browser_clients_of_allowed_origins_get_cors_headers(tmp_path: Path) -> None:
    async with run_proxy(tmp_path) as proxy, aiohttp.ClientSession() as http:
        origin = "http://localhost:6274"
        pre = {
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            # What a 2026-07-28 browser client asks for (SEP-2243's Mcp-Param-*).
            "Access-Control-Request-Headers": "content-type,mcp-method,mcp-name,"
            "mcp-param-region,mcp-protocol-version,x-not-mcp",
        }
        async with http.options(proxy.url, headers=pre) as resp:
            assert resp.status == 204
            assert resp.headers["Access-Control-Allow-Origin"] == origin
            allowed = {
                h.strip().lower() for h in resp.headers["Access-Control-Allow-Headers"].split(",")
            }
            requested = pre["Access-Control-Request-Headers"].split(",")
            assert set(requested) - allowed == {"x-not-mcp"}
            for name in ("mcp-session-id", "last-event-id", "authorization", "accept"):
                assert name in allowed
        s = RawSession(http, proxy.url)
        body = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {}},
        }
        async with http.post(proxy.url, json=body, headers=s.headers(Origin=origin)) as resp:
            assert resp.status == 200
            assert resp.headers["Access-Control-Allow-Origin"] == origin
            exposed = resp.headers["Access-Control-Expose-Headers"]
            assert exposed == "Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate, Retry-After"
            await resp.read()
        evil = {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
        async with http.options(proxy.url, headers=evil) as resp:
            assert resp.status == 403 and "Access-Control-Allow-Origin" not in resp.headers


async def test_session_limit_refuses_new_sessions_with_503_and_keeps_the_others(
    tmp_path: Path,
) -> None:
    async with (
        run_proxy(tmp_path, sessions={"max_sessions": 2}) as proxy,
        aiohttp.ClientSession() as http,
    ):
        first, second = RawSession(http, proxy.url), RawSession(http, proxy.url)
        await first.initialize()
        await second.initialize()
        third = RawSession(http, proxy.url)
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
        async with http.post(proxy.url, json=body, headers=third.headers()) as resp:
            assert resp.status == 503
            error = (await resp.json())["error"]
            assert (
                error["data"]["reason"] == "too_many_sessions"
                and "max_sessions" in error["message"]
            )
        assert messages(await first.request(1, "ping"))[-1]["result"] == {}
        async with http.delete(proxy.url, headers=second.headers()) as resp:
            assert resp.status == 200
        await third.initialize()  # room again


async def test_a_server_that_stops_reading_gets_503_not_unbounded_memory(tmp_path: Path) -> None:
    deaf = tmp_path / "deaf.py"
    deaf.write_text(
        "import json, sys, time\n"
        "m = json.loads(sys.stdin.readline())\n"
        "r = {'protocolVersion': '2025-11-25', 'capabilities': {},\n"
        "     'serverInfo': {'name': 'deaf', 'version': '1'}}\n"
        "print(json.dumps({'jsonrpc': '2.0', 'id': m['id'], 'result': r}), flush=True)\n"
        "time.sleep(600)  # and never reads stdin again\n"
    )
    upstream = {"max_pending_bytes": 2 * 1024 * 1024}
    async with proxy_session(tmp_path, command=[sys.executable, str(deaf)], upstream=upstream) as (
        proxy,
        http,
        s,
    ):
        note = {"jsonrpc": "2.0", "method": "notifications/x", "params": {"pad": "y" * 1_000_000}}
        statuses = []
        for _ in range(8):
            async with http.post(proxy.url, json=note, headers=s.headers()) as resp:
                statuses.append(resp.status)
                if resp.status == 503:
                    body = await resp.json()
                    assert body["error"]["data"]["reason"] == "upstream_busy"
        assert statuses[0] == 202 and statuses[-1] == 503, statuses


@pytest.mark.parametrize("tokens", [None, [{"token": "t" * 32, "principal": "alice"}]])
async def test_request_state_uses_typed_keys_no_not_app_key_warning(
    aiohttp_client: Any, tokens: list[dict[str, str]] | None
) -> None:
    """What the proxy puts on a request (principal, scopes, authenticator, era) goes under
    aiohttp ``RequestKey``s: a str key warns ``NotAppKeyWarning`` (here an error: a 500)."""
    web.BaseRequest._seen_str_keys.clear()  # aiohttp warns once per key and process
    config = config_from_mapping({"auth": {"tokens": tokens}} if tokens else {})
    context = ProxyContext(config)
    client = await aiohttp_client(build_app(context, Registry(context)))
    headers = {**MCP_HEADERS, **(bearer("t" * 32) if tokens else {})}
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotAppKeyWarning)
        async with client.get("/healthz") as resp:
            assert resp.status == 200, await resp.text()
        async with client.post("/mcp", json=ping, headers=headers) as resp:  # no session
            body = await resp.json()
            assert resp.status == 400 and body["error"]["data"]["reason"] == "missing_session"
