"""No descendant of a server outlives its session or the proxy, daemons included (issue 19
item 7; proxy/upstream/lineage.py, proxy/upstream/subreaper.py; docs/reference.md).

A real proxy in front of tests/fixtures/daemonizing_server.py, whose tool leaves daemons
behind (fork, setsid, fork, the middle one exits): they are adopted by the proxy (their
parent is the proxy, not init), and they end, SIGTERM-deaf ones too, when their session
is deleted, when their server crashes, and when the proxy stops (a daemon that dropped
its environment among them); the proxy reaps them all (no zombie left under it), and
never a server process's exit, which asyncio reads.
"""

from __future__ import annotations

import sys
from pathlib import Path

import aiohttp

from tests.downstream.sse_client import RawSession, messages
from tests.support import (
    ROOT,
    alive,
    children_of,
    eventually,
    process_table,
    run_proxy,
    stop_proxy,
    tool_call,
)

SERVER = [sys.executable, str(ROOT / "tests" / "fixtures" / "daemonizing_server.py")]


async def _daemons(client: RawSession, rid: int, **kinds: int) -> list[int]:
    """Have the session's server start daemons of ``kinds``; their pids."""
    events = await client.request(rid, "tools/call", tool_call(rid, "daemonize", kinds)["params"])
    text = messages(events)[-1]["result"]["content"][0]["text"]
    return [int(pid) for pid in text.split()]


async def _all_gone(pids: list[int], what: str) -> None:
    await eventually(
        lambda: not any(alive(pid) for pid in pids),
        what=lambda: f"{what}: still alive {[pid for pid in pids if alive(pid)]}",
    )


async def test_daemons_end_with_their_session_their_server_and_the_proxy(
    tmp_path: Path,
) -> None:
    upstream = {"command": SERVER, "stop_grace_seconds": 0.3}
    async with run_proxy(tmp_path, **{"upstream": upstream}) as proxy:
        proxy_pid = proxy.process.pid
        async with aiohttp.ClientSession() as http:
            # DELETE: an obeying and a SIGTERM-deaf daemon, both adopted by the proxy.
            deleted = RawSession(http, proxy.url)
            await deleted.initialize()
            first = await _daemons(deleted, 2, obeying=1, stubborn=1)
            table = process_table()
            assert all(alive(pid) and table[pid][1] == proxy_pid for pid in first), table
            async with http.delete(proxy.url, headers=deleted.headers()) as resp:
                assert resp.status == 200
            await _all_gone(first, "the deleted session's daemons")

            # The server crashes (and is started again): what it left is ended at once.
            crashed = RawSession(http, proxy.url)
            await crashed.initialize()
            second = await _daemons(crashed, 2, stubborn=1)
            await crashed.request(3, "tools/call", tool_call(3, "exit", {})["params"])
            await _all_gone(second, "the crashed server's daemons")
            await eventually(
                lambda: not [c for c in children_of(proxy_pid) if not alive(c)],
                what=lambda: f"the proxy to reap its zombies: {children_of(proxy_pid)}",
            )

            # The proxy stops: one with its environment gone is ended all the same.
            stopped = RawSession(http, proxy.url)
            await stopped.initialize()
            third = await _daemons(stopped, 2, obeying=1, scrubbed=1)
            assert all(alive(pid) for pid in third)
        assert await stop_proxy(proxy.process) == 0
        await _all_gone(third, "the stopped proxy's daemons")
        assert "descendants_survive" not in proxy.log_text()
        # The reaper took no exit status of asyncio's: the crash's code was read.
        assert "exited with code 3" in proxy.log_text()
