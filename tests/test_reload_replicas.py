"""A reload (proxy/reload.py) reaches what a replica serves for sessions it does not hold.

Two proxy replicas on one real Redis: A holds the client's session, B serves A's streams
from the shared log (``StoredStreams``) and forwards requests to A (``RemoteSessions``).
B's config file is rewritten, then SIGHUP: the next response B serves follows
``sse.keepalive_seconds`` and ``sse.json_answer_window_ms`` / ``json_answer_min_bytes``
(issue 23: both read the values B started with, whatever a reload said).
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from proxy.core.sse import SSEDecoder, SSEEvent
from tests.downstream.sse_client import RawSession
from tests.proxy_lives import Lives, Proxy, lives, shared
from tests.support import DEADLINE_S, eventually, log_events, tool_call

KEEPALIVE_COMMENT = b": keepalive"


async def _reload(proxies: Lives, proxy: Proxy, number: int, sse: dict[str, Any]) -> None:
    """Rewrite the config of ``proxy`` (the ``number``-th started) with ``sse`` on top of
    the last, SIGHUP it, and wait until its log says the reload was applied."""

    def reloads() -> list[dict[str, Any]]:
        text = proxy.log_path.read_text(errors="replace")
        return log_events(text, "config_reloaded") + log_events(text, "config_reload_refused")

    before = len(reloads())
    proxies.extra = {**proxies.extra, "sse": {**proxies.extra.get("sse", {}), **sse}}
    (proxies.tmp_path / f"proxy-{number}.yaml").write_text(yaml.safe_dump(proxies.config()))
    proxy.process.send_signal(signal.SIGHUP)
    await eventually(lambda: len(reloads()) > before, what="the reload in the log")
    assert reloads()[-1]["event"] == "config_reloaded", reloads()[-1]


async def _until(
    resp: aiohttp.ClientResponse, decoder: SSEDecoder, wanted: Any
) -> tuple[list[SSEEvent], bytes]:
    """Read ``resp`` until ``wanted(events, raw)`` holds; what was read."""
    events: list[SSEEvent] = []
    raw = b""
    async with asyncio.timeout(DEADLINE_S):
        async for chunk in resp.content.iter_any():
            raw += chunk
            events += decoder.feed(chunk)
            if wanted(events, raw):
                return events, raw
    raise AssertionError(f"the stream ended first: {raw[-300:]!r}")


def _answer(events: list[SSEEvent], rid: int) -> dict[str, Any] | None:
    found = [json.loads(e.data) for e in events if e.data]
    return next((m for m in found if m.get("id") == rid and "method" not in m), None)


def _question(events: list[SSEEvent]) -> SSEEvent | None:
    return next((e for e in events if "elicitation/create" in e.data), None)


async def test_a_reloaded_keepalive_applies_to_the_next_stream_served_from_the_log(
    tmp_path: Path, redis_url: str
) -> None:
    async with lives(tmp_path, shared(redis_url)) as (proxies, http):
        proxies.extra = {"sse": {"keepalive_seconds": 600.0}}
        a, b = await proxies.start(), await proxies.start()
        client = RawSession(http, a.url)
        await client.initialize()
        call = await http.post(
            a.url, json=tool_call(7, "ask", {"question": "?"}), headers=client.headers()
        )
        events, _ = await _until(call, SSEDecoder(), lambda got, _: _question(got))
        asked = _question(events)
        assert asked is not None and asked.id is not None
        call.close()

        await _reload(proxies, b, 2, {"keepalive_seconds": 0.2})
        # B serves A's stream from the log: after the question, nothing until answered.
        headers = client.headers(Accept="text/event-stream", **{"Last-Event-ID": asked.id})
        async with http.get(b.url, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            decoder = SSEDecoder()
            await _until(resp, decoder, lambda _, raw: KEEPALIVE_COMMENT in raw)
            question = json.loads(asked.data)
            answer = {
                "jsonrpc": "2.0",
                "id": question["id"],
                "result": {"action": "accept", "content": {"answer": "yes"}},
            }
            async with http.post(a.url, json=answer, headers=client.headers()) as answered:
                assert answered.status == 202, await answered.text()
            got, _ = await _until(resp, decoder, lambda got, _: _answer(got, 7))
        answer = _answer(got, 7)
        assert answer is not None and "result" in answer, answer


async def test_a_reloaded_json_answer_window_and_bound_apply_to_the_next_forwarded_call(
    tmp_path: Path, redis_url: str
) -> None:
    async with lives(tmp_path, shared(redis_url)) as (proxies, http):
        proxies.extra = {"sse": {"json_answer_window_ms": 0, "json_answer_min_bytes": 100}}
        a, b = await proxies.start(), await proxies.start()
        client = RawSession(http, a.url)
        await client.initialize()

        async def content_type(rid: int) -> str:
            """A call posted to B (forwarded to A): how B answers it."""
            call = tool_call(rid, "echo", {"text": "x" * 2000})
            async with http.post(b.url, json=call, headers=client.headers()) as resp:
                assert resp.status == 200, await resp.text()
                body = await resp.read()
            assert b"x" * 2000 in body
            return resp.content_type

        assert await content_type(2) == "text/event-stream"  # a window of 0: SSE at once
        await _reload(proxies, b, 2, {"json_answer_window_ms": 15_000})
        assert await content_type(3) == "application/json"
        await _reload(proxies, b, 2, {"json_answer_min_bytes": 1_000_000})
        assert await content_type(4) == "text/event-stream"
