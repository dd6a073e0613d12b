"""The seed's stream protocol (D2) over Streamable HTTP, with a raw client."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from proxy.core.sse import SSEDecoder, SSEEvent
from tests.downstream.sse_client import RawSession, messages, read_events
from tests.support import eventually, run_proxy, wait_for_log

CAPS = {"streams": {}}


async def seeded(http: aiohttp.ClientSession, url: str) -> RawSession:
    s = RawSession(http, url)
    body = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": s.version, "capabilities": CAPS, "clientInfo": {}},
    }
    async with http.post(url, json=body, headers=s.headers()) as resp:
        s.session_id = resp.headers["Mcp-Session-Id"]
        await resp.read()
    await s.notify("notifications/initialized")
    return s


def countdown(rid: int, steps: int, delay: float) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": rid,
        "method": "tools/call",
        "params": {
            "name": "countdown",
            "arguments": {"steps": steps, "delay": delay},
            "_meta": {"progressToken": "c"},
        },
    }


async def buffered_bytes(http: aiohttp.ClientSession, base: str) -> int:
    """What the proxy holds for all streams of all sessions (``/healthz``)."""
    async with http.get(base + "/healthz") as resp:
        return int((await resp.json())["buffered_bytes"])


async def local(
    http: aiohttp.ClientSession, s: RawSession, method: str, params: dict[str, Any], **headers: str
) -> list[SSEEvent]:
    body = {"jsonrpc": "2.0", "id": 50, "method": method, "params": params}
    async with http.post(s.url, json=body, headers=s.headers(**headers)) as resp:
        assert resp.status == 200
        return await read_events(resp)


async def test_create_poll_resume_end_over_http(tmp_path: Path) -> None:
    async with run_proxy(tmp_path) as proxy, aiohttp.ClientSession() as http:
        s = await seeded(http, proxy.url)
        dec, seen = SSEDecoder(), []
        async with http.post(proxy.url, json=countdown(1, 8, 0.15), headers=s.headers()) as resp:
            async for chunk in resp.content.iter_any():
                seen += dec.feed(chunk)
                if len(messages(seen)) >= 3:  # create + 2 progress: then hang up
                    break
        create = messages(seen)[0]
        assert create["method"] == "notifications/stream/create"
        ref = {k: create["params"]["stream"][k] for k in ("streamId", "resumeToken")}
        assert create["params"]["stream"]["requestId"] == 1
        last = [e.id for e in seen if e.id][-1]
        assert last is not None
        # Progress piles up while the client is away: wait until the proxy has stored more.
        stored = await buffered_bytes(http, proxy.base)

        async def grew() -> bool:
            return await buffered_bytes(http, proxy.base) > stored

        await eventually(grew, what="the proxy to store progress while the client is away")
        poll = messages(await local(http, s, "stream/poll", ref, **{"Last-Event-ID": last}))
        assert poll[-1]["result"]["status"] == "live"
        assert poll[-1]["result"]["pendingMessages"] is True
        rest = messages(await local(http, s, "stream/resume", ref, **{"Last-Event-ID": last}))
        got = messages(seen)[1:] + rest
        progress = [
            m["params"]["progress"] for m in got if m.get("method") == "notifications/progress"
        ]
        assert progress == list(range(1, 9))
        assert [m.get("method") or m["id"] for m in got[-3:]] == [
            1,
            "notifications/stream/end",
            50,
        ], got[-4:]
        assert got[-1]["result"] == {}
        # the stream is over: a poll says so, with nothing pending past the end
        end_id = f"{last.rsplit('.', 1)[0]}.{1 + 8 + 2}"  # create, 8 progress, result, end
        poll = messages(await local(http, s, "stream/poll", {**ref, "lastEventId": end_id}))
        assert poll[-1]["result"]["status"] == "completed"
        assert poll[-1]["result"]["pendingMessages"] is False
        wrong = messages(await local(http, s, "stream/poll", {**ref, "resumeToken": "x"}))
        assert wrong[-1]["error"]["data"]["reason"] == "invalid_token"


async def test_detach_after_create_and_abandonment(tmp_path: Path) -> None:
    streams = {"detach_after_create": True, "resume_interval": {"min": 0, "max": 0.5}}
    async with run_proxy(tmp_path, streams=streams) as proxy, aiohttp.ClientSession() as http:
        s = await seeded(http, proxy.url)
        async with http.post(proxy.url, json=countdown(1, 50, 0.1), headers=s.headers()) as resp:
            got = messages(await read_events(resp))
        assert [m["method"] for m in got] == ["notifications/stream/create"]
        ref = {k: got[0]["params"]["stream"][k] for k in ("streamId", "resumeToken")}
        # Nobody polls or resumes (a poll would reset the timer): abandoned after 0.5 s.
        await wait_for_log(proxy, "stream_abandoned")
        reply = messages(await local(http, s, "stream/poll", ref))[-1]
        assert reply["error"]["data"]["reason"] == "abandoned", reply
