"""Leases that fence (proxy/store/fencing.py): two replicas on one real Redis.

The owner of a live call is paused (SIGSTOP) past its lease; the other replica ends the
call (``owner_lost``) by taking its stream over. The owner is resumed (SIGCONT) while its
server still runs the call and has written more progress into the pipe: whatever it does
first (commit that progress, or renew its lease), the store refuses it and the owner
learns that it lost the session: it logs ``lease_lost``, stops the server, and the log
read from the start holds every event once and exactly one answer, ``owner_lost``.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from websockets.asyncio.client import connect
from websockets.typing import Subprotocol

from proxy.core.sse import SSEDecoder
from tests.downstream.sse_client import RawSession, messages, read_events
from tests.downstream.ws_client import Client, initialize, request, tool
from tests.proxy_lives import Proxy, lives, progress_of, read_some, shared
from tests.support import alive, eventually, log_events, tool_call

LEASE = 1.5


async def test_a_paused_owner_is_fenced_and_never_writes_a_second_answer(
    tmp_path: Path, redis_url: str
) -> None:
    async with lives(tmp_path, shared(redis_url, LEASE)) as (proxies, http):
        a, b = await proxies.start(), await proxies.start()
        client = RawSession(http, a.url)
        await client.initialize()
        call = tool_call(7, "slow", {"steps": 600, "delay": 0.05}, "t")  # 30 s: outlives all
        resp = await http.post(a.url, json=call, headers=client.headers())
        received, last_id = await read_some(resp, 3)
        resp.close()
        start = last_id.rpartition(".")[0] + ".0"  # the stream from its first event
        ws_url = a.url.replace("http://", "ws://").replace("/mcp", "/ws")
        async with connect(ws_url, subprotocols=[Subprotocol("mcp")], proxy=None) as ws:
            on_ws = Client(ws)
            await initialize(on_ws)  # a WebSocket session on A is lost alike
            await on_ws.send(
                request(9, "tools/call", tool("slow", {"steps": 600, "delay": 0.05}, "w"))
            )
            assert (await on_ws.recv())["method"] == "notifications/progress"
            pids = a.upstream_pids()
            assert len(pids) == 2 and all(alive(pid) for pid in pids)
            rest = await _pause_past_the_lease(a, b, http, client, last_id)
            # Its call in flight is told how the store ended it, then the socket closes.
            while "id" not in (last := await on_ws.recv()):
                assert last["method"] == "notifications/progress"
            assert last["id"] == 9 and last["error"]["data"] == {"reason": "owner_lost"}
            assert await on_ws.closed_with() == (4404, "Session not found: it has ended")
        for pid in pids:
            await eventually(lambda p=pid: not alive(p), what=f"the owner to stop server {pid}")
        # From the start, on either replica: every event once, one answer, last.
        for url in (b.url, a.url):
            again = await http.get(url, headers=client.headers(**{"Last-Event-ID": start}))
            assert again.status == 200, await again.text()
            log = messages(await read_events(again))
            progress = progress_of(log)
            assert progress == list(range(1, len(progress) + 1))
            assert progress_of(received + rest) == progress
            answers = [m for m in log if "id" in m]
            assert answers == [log[-1]] and log[-1] == rest[-1]
        # The session is gone everywhere (its client initializes again).
        for url in (a.url, b.url):
            echo = await http.post(
                url, json=tool_call(8, "echo", {"text": "x"}), headers=client.headers()
            )
            assert echo.status == 404, await echo.text()
        # The owner goes on serving new sessions, under its new token.
        fresh = RawSession(http, a.url)
        await fresh.initialize()
        echo = messages(
            await fresh.request(2, "tools/call", {"name": "echo", "arguments": {"text": "k"}})
        )
        assert echo[0]["result"]["content"][0]["text"] == "k"


async def _ended_by(
    b: Proxy, http: aiohttp.ClientSession, client: RawSession, last_id: str
) -> list[dict[str, Any]]:
    """What ``b`` serves of call 7's stream after ``last_id``: it ends once ``b`` ended
    the stream (``owner_lost``), the owner being paused past its lease."""
    follow = await http.get(b.url, headers=client.headers(**{"Last-Event-ID": last_id}))
    assert follow.status == 200, await follow.text()
    rest = messages(await read_events(follow))
    assert rest[-1]["id"] == 7 and rest[-1]["error"]["data"] == {"reason": "owner_lost"}
    return rest


async def _pause_past_the_lease(
    a: Proxy, b: Proxy, http: aiohttp.ClientSession, client: RawSession, last_id: str
) -> list[dict[str, Any]]:
    """SIGSTOP ``a`` until ``b`` ended its call (what ``b`` served after ``last_id``),
    then SIGCONT; return once ``a`` logged ``lease_lost``."""
    a.process.send_signal(signal.SIGSTOP)
    try:
        rest = await _ended_by(b, http, client, last_id)
        assert all(alive(pid) for pid in a.upstream_pids())  # the call runs on, A is paused
    finally:
        a.process.send_signal(signal.SIGCONT)
    await eventually(
        lambda: log_events(a.log_path.read_text(errors="replace"), "lease_lost"),
        what="the resumed owner to log lease_lost",
    )
    return rest


async def test_an_owner_stopping_when_it_learns_it_was_fenced_writes_nothing_refused(
    tmp_path: Path, redis_url: str
) -> None:
    """The nemesis's case (seed 1713577961): the owner is paused past its lease while its
    server finishes the call into the pipe, and a drain (SIGTERM) is queued meanwhile.
    Resumed, it reads the call's last progress and its answer, commits them (refused:
    the other replica ended the stream) and stops its sessions, in whatever order. The
    client's POST, still open, gets nothing the store does not hold: no progress past
    what B served, never the call's own answer."""
    async with lives(tmp_path, shared(redis_url, LEASE)) as (proxies, http):
        a, b = await proxies.start(), await proxies.start()
        client = RawSession(http, a.url)
        await client.initialize()
        call = tool_call(7, "slow", {"steps": 40, "delay": 0.05}, "t")  # 2 s
        started = time.monotonic()
        resp = await http.post(a.url, json=call, headers=client.headers())
        dec = SSEDecoder()
        received, last_id = await read_some(resp, 3, dec)
        a.process.send_signal(signal.SIGSTOP)
        try:
            rest = await _ended_by(b, http, client, last_id)
            await asyncio.sleep(max(0.0, started + 3.0 - time.monotonic()))  # the call ran out
            a.process.send_signal(signal.SIGTERM)  # a drain, queued while paused
        finally:
            a.process.send_signal(signal.SIGCONT)
        received += (await read_some(resp, sys.maxsize, dec))[0]  # the POST, to its end
        stored = progress_of(rest)
        assert set(progress_of(received)) <= set(progress_of(received[:3]) + stored)
        assert not [m for m in received if "result" in m], received[-3:]
        await asyncio.wait_for(a.process.wait(), 30)
