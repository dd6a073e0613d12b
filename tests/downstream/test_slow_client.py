"""A client that stops reading costs its connection, never unbounded memory or a message."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp

from proxy.core.sse import SSEDecoder
from tests.downstream.sse_client import RawSession, proxy_session
from tests.support import ROOT, eventually, run_proxy, tool_call, wait_for_log

FLOOD = [sys.executable, str(ROOT / "tests" / "fixtures" / "flood_server.py")]
MAX_EVENTS = 2000  # sessions.stream_max_events, where a test bounds a stream


def flood_call(n: int) -> dict[str, Any]:
    """tools/call of the flood fixture: ``n`` progress notifications of ~500 bytes."""
    return tool_call(1, "flood", {"n": n, "size": 500}, token=1)


async def assert_held_within_the_stream_bound(http: aiohttp.ClientSession, base: str) -> None:
    """What the proxy buffers (its /healthz) stays within ``MAX_EVENTS`` events of ~600
    bytes on the wire, plus some slack."""
    async with http.get(base + "/healthz") as health:
        held = (await health.json())["buffered_bytes"]
    assert held < MAX_EVENTS * 600 + 64 * 1024, f"{held} bytes held past the stream bound"


class Collector:
    """What a client keeps of one call's SSE events over its connections."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.last_id: str | None = None
        self._dec = SSEDecoder()

    def new_connection(self) -> None:
        self._dec = SSEDecoder()  # a cut-off event of the old connection is not dispatched

    def take(self, chunk: bytes) -> None:
        for event in self._dec.feed(chunk):
            self.last_id = event.id or self.last_id
            if event.data:
                self.received.append(json.loads(event.data))

    async def resume_until_result(self, http: aiohttp.ClientSession, s: RawSession) -> None:
        """Reconnect with Last-Event-ID, as SDK clients do, until the response is in."""
        for _ in range(500):
            assert self.last_id is not None
            self.new_connection()
            headers = s.headers(**{"Last-Event-ID": self.last_id})
            async with http.get(s.url, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                async for chunk in resp.content.iter_any():
                    self.take(chunk)
            if self.received and "result" in self.received[-1]:
                return
        raise AssertionError("the response never came")

    def progress(self) -> list[int]:
        return [m["params"]["progress"] for m in self.received if "method" in m]


async def test_a_stalled_reader_is_cut_loose_and_resumes_exactly(tmp_path: Path) -> None:
    n = 40_000  # ~20 MB: more than the socket buffers between us can hide
    sse = {"max_queued_bytes": 256 * 1024}
    async with proxy_session(tmp_path, command=FLOOD, sse=sse) as (proxy, http, s):
        call = Collector()
        async with http.post(proxy.url, json=flood_call(n), headers=s.headers()) as resp:
            call.take(await resp.content.read(1024))
            # we stall; the proxy notices
            await wait_for_log(proxy, "client_too_slow", what="the proxy to give up on the reader")
            async for chunk in resp.content.iter_any():  # what was in flight, then the end
                call.take(chunk)
        assert not any("result" in m for m in call.received), "cut before the response"
        await call.resume_until_result(http, s)
        assert call.progress() == list(range(1, n + 1))
        assert call.received[-1]["result"]["content"][0]["text"] == f"flood {n}"


async def test_overflow_block_pauses_the_server_and_loses_nothing(tmp_path: Path) -> None:
    n = 40_000
    sessions = {"stream_max_events": MAX_EVENTS, "overflow": "block"}
    async with proxy_session(tmp_path, command=FLOOD, sessions=sessions) as (proxy, http, s):
        call = Collector()
        resp = await http.post(proxy.url, json=flood_call(n), headers=s.headers())
        call.take(await resp.content.readuntil(b"\n\n"))  # the priming event
        resp.close()  # the client is gone before anything else arrives
        await wait_for_log(proxy, "upstream_paused", what="the server to be held back")
        await assert_held_within_the_stream_bound(http, proxy.base)
        await call.resume_until_result(http, s)
        assert call.progress() == list(range(1, n + 1)), "overflow: block must lose nothing"
        assert "upstream_resumed" in proxy.log_text()


async def test_a_stalled_flood_never_stalls_another_session(tmp_path: Path) -> None:
    """Session A floods a client that stopped reading (its server is held back, its
    connection cut); session B keeps answering all the while."""
    sessions = {"stream_max_events": MAX_EVENTS, "overflow": "block"}
    sse = {"max_queued_bytes": 256 * 1024}
    async with (
        run_proxy(tmp_path, command=FLOOD, sessions=sessions, sse=sse) as proxy,
        aiohttp.ClientSession() as http,
    ):
        a, b = RawSession(http, proxy.url), RawSession(http, proxy.url)
        await a.initialize()
        await b.initialize()
        body = flood_call(100_000)
        stalled = await http.post(proxy.url, json=body, headers=a.headers())
        try:
            await stalled.content.read(100)  # then A stops reading
            loop = asyncio.get_running_loop()
            latencies = []
            for i in range(100):
                start = loop.time()
                async with asyncio.timeout(10):  # liveness, not speed: bench/ measures speed
                    await b.request(100 + i, "ping")
                latencies.append(loop.time() - start)
            # overflow: block holds A's server back once A's stream is over its bound,
            # whichever ends A's connection first: the bound itself, or A's queue over
            # sse.max_queued_bytes (client_too_slow, only where the socket buffers hold
            # less than the bound), after which the unread log fills up to the bound.
            await wait_for_log(proxy, "upstream_paused", what="A's server held back")
            latencies.sort()
            print(f"session B ping while A is stalled: p50 {latencies[50] * 1000:.1f} ms")
        finally:
            stalled.close()


async def test_overflow_truncate_keeps_memory_bounded_and_says_what_was_lost(
    tmp_path: Path,
) -> None:
    n = 40_000
    sessions = {"stream_max_events": MAX_EVENTS, "overflow": "truncate"}
    async with proxy_session(tmp_path, command=FLOOD, sessions=sessions) as (proxy, http, s):
        body = flood_call(n)
        resp = await http.post(proxy.url, json=body, headers=s.headers())
        (priming,) = SSEDecoder().feed(await resp.content.readuntil(b"\n\n"))
        resp.close()  # gone at once

        async def gone() -> str | None:
            """The refusal's reason once the priming event is no longer kept."""
            headers = s.headers(**{"Last-Event-ID": priming.id or ""})
            async with http.get(proxy.url, headers=headers) as again:
                if again.status == 410:
                    reason: str = (await again.json())["error"]["data"]["reason"]
                    return reason
                again.close()
                return None

        # The server runs on; the oldest events go.
        reason = await eventually(gone, interval=0.05, what="the oldest events to be dropped")
        assert reason == "history_truncated"
        await assert_held_within_the_stream_bound(http, proxy.base)
        assert "upstream_paused" not in proxy.log_text()
