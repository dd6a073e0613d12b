"""A long replay is written in chunks (proxy/core/eventrun.py): over the wire every event
comes once, in order, with its id, across the chunk edges; from the session a replica holds
and from the store (a restarted replica)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import aiohttp

from proxy.core.eventrun import CHUNK_BYTES
from proxy.core.sse import SSEDecoder, SSEEvent
from tests.downstream.sse_client import RawSession, proxy_session, read_events
from tests.proxy_lives import lives
from tests.support import ROOT, eventually, stop_proxy, tool_call

FLOOD = [sys.executable, str(ROOT / "tests" / "fixtures" / "flood_server.py")]

N = 3000
SIZE = 300  # N events of ~330 bytes on the wire: ~1 MB, about 15 chunks


async def start_and_leave(http: aiohttp.ClientSession, s: RawSession) -> str:
    """Start a flood of ``N``, read its priming event, hang up: that event's id."""
    body = tool_call(1, "flood", {"n": N, "size": SIZE}, token=1)
    async with http.post(s.url, json=body, headers=s.headers()) as resp:
        dec = SSEDecoder()
        async for chunk in resp.content.iter_any():
            for event in dec.feed(chunk):
                if event.id is not None:
                    assert not event.data, "the first event with an id is the priming event"
                    return event.id
    raise AssertionError("no event with an id")


def check_replay(events: list[SSEEvent], primed: str) -> None:
    """After the priming event: progress 1..N, each once, in order, each with the next id
    of the stream; then the call's answer."""
    epoch, stream, seq = primed.split(".")[:3]
    data = [e for e in events if e.data]
    ids = [e.id for e in data]
    assert ids == [f"{epoch}.{stream}.{n}" for n in range(int(seq) + 1, int(seq) + N + 2)]
    received = [json.loads(e.data) for e in data]
    progress = [m["params"]["progress"] for m in received if "method" in m]
    assert progress == list(range(1, N + 1))
    assert received[-1]["result"]["content"][0]["text"] == f"flood {N}"


async def buffered(http: aiohttp.ClientSession, base: str) -> int:
    async with http.get(base + "/healthz") as resp:
        return int((await resp.json())["buffered_bytes"])


async def test_a_replay_longer_than_many_chunks_comes_whole_and_in_order(tmp_path: Path) -> None:
    async with proxy_session(tmp_path, command=FLOOD) as (proxy, http, s):
        primed = await start_and_leave(http, s)
        await eventually(
            lambda: _at_least(buffered(http, proxy.base), N * (SIZE - 10)),
            what="the flood buffered",
        )
        headers = s.headers(**{"Last-Event-ID": primed})
        async with http.get(s.url, headers=headers) as resp:
            assert resp.status == 200
            events = await read_events(resp)
        assert N * SIZE > 10 * CHUNK_BYTES, "the replay spans many chunks"
        check_replay(events, primed)


async def test_a_stored_replay_longer_than_many_chunks_comes_whole(tmp_path: Path) -> None:
    """The stream served from the store by a restarted replica (StoredStreams): read in
    batches, written in chunks."""
    async with lives(tmp_path) as (proxies, http):
        proxies.command = FLOOD
        first = await proxies.start()
        s = RawSession(http, first.url)
        await s.initialize()
        primed = await start_and_leave(http, s)
        await eventually(
            lambda: _at_least(buffered(http, first.url.replace("/mcp", "")), N * (SIZE - 10)),
            what="the flood buffered",
        )
        assert await stop_proxy(first.process) == 0  # graceful: the stream stays in the store
        second = await proxies.start()
        headers = s.headers(**{"Last-Event-ID": primed})
        async with http.get(second.url, headers=headers) as resp:
            assert resp.status == 200
            events = await read_events(resp)
        check_replay(events, primed)


async def _at_least(value: Any, least: int) -> bool:
    return bool(await value >= least)
