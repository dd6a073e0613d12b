"""SIGTERM drains: calls in flight finish, new work is refused so that it goes elsewhere.

End to end, real proxy processes in front of the legacy stdio fixture (its ``ask`` tool
keeps a call in flight until the client answers its question, so the test, not a clock,
decides when the call ends). ``listen.drain_seconds`` comes from the environment of each
proxy here (tests/conftest.py sets 0 for every other test). Proved here: a call in flight
finishes with its real answer while ``/readyz`` is 503 and new sessions and calls get
503 ``proxy_draining``; the deadline ends what is left with ``proxy_shutdown``; a second
signal ends the drain at once; 0 (and Ctrl-C) keep the stop without a drain; with replicas on one
Redis, a call on the draining replica is followed, answered and finished from the other.
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
import pytest

from proxy.core.sse import SSEDecoder
from tests.downstream.sse_client import RawSession, messages, read_events
from tests.downstream.ws_client import request, socket
from tests.modern.client import Modern
from tests.proxy_lives import lives, shared
from tests.support import (
    DEADLINE_S,
    FIXTURE,
    MCP_HEADERS,
    RunningProxy,
    eventually,
    initialize_request,
    log_events,
    run_proxy_on,
    tool_call,
    wait_for_log,
)

DRAIN = "MCP_RESUME_PROXY_DRAIN_SECONDS"


def _config() -> dict[str, Any]:
    return {
        "listen": {"host": "127.0.0.1", "port": 0},
        "upstream": {"command": FIXTURE, "stop_grace_seconds": 1},
        "log": {"format": "json", "level": "debug"},
    }


async def _asked(resp: aiohttp.ClientResponse) -> tuple[SSEDecoder, dict[str, Any], str]:
    """Read a call's stream until the server's question comes; the question and its id."""
    decoder = SSEDecoder()
    async with asyncio.timeout(DEADLINE_S):
        async for chunk in resp.content.iter_any():
            for event in decoder.feed(chunk):
                if event.data and "elicitation/create" in event.data:
                    return decoder, json.loads(event.data), event.id or ""
    raise AssertionError("the call's stream ended before its question")


async def _rest(resp: aiohttp.ClientResponse, decoder: SSEDecoder) -> list[dict[str, Any]]:
    """The messages of a stream from here to its end."""
    found: list[dict[str, Any]] = []
    async with asyncio.timeout(DEADLINE_S):
        async for chunk in resp.content.iter_any():
            found += [json.loads(e.data) for e in decoder.feed(chunk) if e.data]
    return found


def _answer(question: dict[str, Any], text: str) -> dict[str, Any]:
    result = {"action": "accept", "content": {"answer": text}}
    return {"jsonrpc": "2.0", "id": question["id"], "result": result}


async def _status(http: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, Any]]:
    async with http.get(url) as resp:
        return resp.status, await resp.json()


async def _refused_as_draining(resp: aiohttp.ClientResponse, rid: Any) -> None:
    body = await resp.json()
    assert resp.status == 503, body
    assert resp.headers["Retry-After"] == "1"
    assert body["id"] == rid and body["error"]["code"] == -32000, body
    assert body["error"]["data"] == {"reason": "proxy_draining"}, body


@contextlib.asynccontextmanager
async def _proxy(
    tmp_path: Path, drain_seconds: str, config: dict[str, Any] | None = None
) -> AsyncIterator[RunningProxy]:
    """A proxy with ``listen.drain_seconds`` from its environment; on the way out (a test
    that failed half-way) stopped with SIGINT, which does not wait for a drain."""
    async with run_proxy_on(tmp_path, config or _config(), env={DRAIN: drain_seconds}) as proxy:
        try:
            yield proxy
        finally:
            if proxy.process.returncode is None:
                proxy.process.send_signal(signal.SIGINT)


async def _exits(proxy: RunningProxy) -> int:
    return await asyncio.wait_for(proxy.process.wait(), DEADLINE_S)


async def test_a_call_in_flight_finishes_while_new_work_is_refused(tmp_path: Path) -> None:
    async with (
        _proxy(tmp_path, "600") as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = RawSession(http, proxy.url)
        await client.initialize()
        call = await http.post(
            proxy.url, json=tool_call(7, "ask", {"question": "?"}), headers=client.headers()
        )
        decoder, question, _ = await _asked(call)
        modern = Modern(http, proxy.url)
        parked = await modern.call("ask", {"question": "m?"}, caps={"elicitation": {}})
        state = parked.result["requestState"]  # a modern call in flight, awaiting its retry

        proxy.process.send_signal(signal.SIGTERM)
        await wait_for_log(proxy, "proxy_draining")
        (draining,) = log_events(proxy.log_text(), "proxy_draining")
        assert draining["drain_seconds"] == 600 and draining["calls_in_flight"] == 2, draining
        status, ready = await _status(http, proxy.base + "/readyz")
        assert status == 503 and ready["status"] == "draining", ready
        status, health = await _status(http, proxy.base + "/healthz")
        assert status == 200 and health["status"] == "draining", health

        # New work is refused, so that a balancer or the client takes it elsewhere ...
        async with http.post(proxy.url, json=initialize_request(0), headers=MCP_HEADERS) as resp:
            await _refused_as_draining(resp, 0)
        new_call = tool_call(8, "echo", {"text": "x"})
        async with http.post(proxy.url, json=new_call, headers=client.headers()) as resp:
            await _refused_as_draining(resp, 8)
        refused = await modern.call("echo", {"text": "x"})
        assert refused.status == 503 and refused.error["data"] == {"reason": "proxy_draining"}
        async with socket(proxy) as ws:
            await ws.send(request(0, "initialize", initialize_request(0)["params"]))
            frame = await ws.recv()
            assert frame["id"] == 0 and frame["error"]["data"] == {"reason": "proxy_draining"}

        # ... while what finishes the calls in flight is served: an answer, a retry.
        await client.notify("notifications/roots/list_changed")  # 202, as ever
        async with http.post(proxy.url, json=_answer(question, "yes"), headers=client.headers()):
            pass
        rest = await _rest(call, decoder)
        assert rest[-1]["id"] == 7 and rest[-1]["result"]["content"][0]["text"] == "yes", rest
        (key,) = parked.result["inputRequests"]
        retry = {
            "name": "ask",
            "arguments": {"question": "m?"},
            "requestState": state,
            "inputResponses": {key: {"action": "accept", "content": {"answer": "m"}}},
        }
        done = await modern.send("tools/call", retry, caps={"elicitation": {}})
        assert done.result["content"][0]["text"] == "m", done.body

        # Nothing left in flight: the drain ends, the proxy stops by itself.
        assert await _exits(proxy) == 0
    log = proxy.log_text()
    (drained,) = log_events(log, "proxy_drained")
    assert drained["reason"] == "idle" and drained["calls_in_flight"] == 0, drained
    assert "proxy_shutdown" not in log


async def test_the_deadline_ends_what_is_left_with_proxy_shutdown(tmp_path: Path) -> None:
    async with (
        _proxy(tmp_path, "0.5") as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = RawSession(http, proxy.url)
        await client.initialize()
        call = await http.post(
            proxy.url, json=tool_call(7, "ask", {"question": "?"}), headers=client.headers()
        )
        decoder, _, _ = await _asked(call)  # never answered
        proxy.process.send_signal(signal.SIGTERM)
        rest = await _rest(call, decoder)
        assert rest[-1]["id"] == 7 and rest[-1]["error"]["data"] == {"reason": "proxy_shutdown"}
        assert await _exits(proxy) == 0
    (drained,) = log_events(proxy.log_text(), "proxy_drained")
    assert drained["reason"] == "deadline" and drained["seconds"] >= 0.5, drained
    assert drained["calls_in_flight"] == 1, drained


async def test_a_second_signal_ends_the_drain_at_once(tmp_path: Path) -> None:
    async with (
        _proxy(tmp_path, "3600") as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = RawSession(http, proxy.url)
        await client.initialize()
        call = await http.post(
            proxy.url, json=tool_call(7, "ask", {"question": "?"}), headers=client.headers()
        )
        decoder, _, _ = await _asked(call)
        proxy.process.send_signal(signal.SIGTERM)
        await wait_for_log(proxy, "proxy_draining")
        proxy.process.send_signal(signal.SIGINT)
        rest = await _rest(call, decoder)
        assert rest[-1]["id"] == 7 and rest[-1]["error"]["data"] == {"reason": "proxy_shutdown"}
        assert await _exits(proxy) == 0
    (drained,) = log_events(proxy.log_text(), "proxy_drained")
    assert drained["reason"] == "signal" and drained["seconds"] < 60, drained


@pytest.mark.parametrize(
    ("drain_seconds", "sig"),
    [
        pytest.param("0", signal.SIGTERM, id="drain_seconds_0"),  # the stop as it always was
        pytest.param("3600", signal.SIGINT, id="ctrl_c"),  # Ctrl-C does not drain
    ],
)
async def test_no_drain_stops_at_once(tmp_path: Path, drain_seconds: str, sig: int) -> None:
    config = _config()
    config["listen"]["drain_seconds"] = 60  # the environment wins over the file
    async with (
        _proxy(tmp_path, drain_seconds, config) as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = RawSession(http, proxy.url)
        await client.initialize()
        call = await http.post(
            proxy.url, json=tool_call(7, "ask", {"question": "?"}), headers=client.headers()
        )
        decoder, _, _ = await _asked(call)
        proxy.process.send_signal(sig)
        rest = await _rest(call, decoder)
        assert rest[-1]["id"] == 7 and rest[-1]["error"]["data"] == {"reason": "proxy_shutdown"}
        assert await _exits(proxy) == 0
    log = proxy.log_text()
    assert not log_events(log, "proxy_draining") and not log_events(log, "proxy_drained")


async def test_a_call_on_a_draining_replica_is_finished_from_the_other(
    tmp_path: Path, redis_url: str
) -> None:
    async with lives(tmp_path, shared(redis_url), env={DRAIN: "600"}) as (proxies, http):
        a, b = await proxies.start(), await proxies.start()
        try:
            await _finish_from_b(a.url, a.process, a.log_path, b.url, http)
        finally:  # a failure half-way: no drain on the way out
            if a.process.returncode is None:
                a.process.send_signal(signal.SIGINT)
    (drained,) = log_events(a.log_path.read_text(), "proxy_drained")
    assert drained["reason"] == "idle", drained


async def _finish_from_b(
    a_url: str,
    a_process: asyncio.subprocess.Process,
    a_log: Path,
    b_url: str,
    http: aiohttp.ClientSession,
) -> None:
    client = RawSession(http, a_url)
    await client.initialize()
    call = await http.post(
        a_url, json=tool_call(7, "ask", {"question": "?"}), headers=client.headers()
    )
    _, question, last_id = await _asked(call)
    call.close()  # the client is cut from A ...
    a_process.send_signal(signal.SIGTERM)  # ... and A is told to go
    await eventually(lambda: log_events(a_log.read_text(), "proxy_draining"))
    status, ready = await _status(http, a_url.rsplit("/", 1)[0] + "/readyz")
    assert status == 503 and ready["status"] == "draining", ready

    on_b = RawSession(http, b_url, session_id=client.session_id)
    # A new call for A's session, through B: A refuses it, B says so with Retry-After.
    new_call = tool_call(8, "echo", {"text": "x"})
    async with http.post(b_url, json=new_call, headers=on_b.headers()) as resp:
        await _refused_as_draining(resp, 8)
    # The call A runs: followed from B, answered through B, finished on A.
    follow = await http.get(b_url, headers=on_b.headers(**{"Last-Event-ID": last_id}))
    assert follow.status == 200, await follow.text()
    async with http.post(b_url, json=_answer(question, "via B"), headers=on_b.headers()) as r:
        assert r.status == 202, await r.text()
    rest = messages(await asyncio.wait_for(read_events(follow), DEADLINE_S))
    answers = [m for m in rest if m.get("id") == 7]
    assert len(answers) == 1 and answers[0]["result"]["content"][0]["text"] == "via B", rest
    assert await asyncio.wait_for(a_process.wait(), DEADLINE_S) == 0
