"""A SQLite store whose file cannot grow (its disk full), a real proxy process: the file
size limit of the proxy's process (RLIMIT_FSIZE) is lowered under it, just above what
its files hold, then lifted (as space freed on a full disk).

Calls made meanwhile are forwarded and answered by the server, but their answers wait
for the store (docs/stores.md: the wire never runs ahead of it; a batch the store
refuses is retried until it lands): none is written to its client while the store
refuses, nothing crashes, and once the file can grow every answer arrives, each once and
the right one. The log says ``store_unavailable`` (SQLite's own error) and then
``store_available``.
"""

from __future__ import annotations

import asyncio
import resource
from pathlib import Path

from tests.downstream.sse_client import RawSession, messages, read_events
from tests.proxy_lives import lives
from tests.support import eventually, log_events, tool_call

CALLS = 12


async def test_calls_wait_for_a_full_disk_and_all_end_once_it_has_room(tmp_path: Path) -> None:
    store = {"kind": "sqlite", "path": str(tmp_path / "store.db")}
    async with lives(tmp_path, store) as (proxies, http):
        proxy = await proxies.start()
        pid = proxy.process.pid
        client = RawSession(http, proxy.url)
        await client.initialize()
        biggest = max(p.stat().st_size for p in tmp_path.iterdir() if p.is_file())
        limit = (biggest + 4096, resource.RLIM_INFINITY)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, limit)
        try:

            async def call(i: int) -> str:
                body = tool_call(10 + i, "echo", {"text": f"{i}:" + "x" * 8000})
                resp = await http.post(proxy.url, json=body, headers=client.headers())
                assert resp.status == 200, await resp.text()
                got = messages(await read_events(resp))
                (answer,) = [m for m in got if "id" in m]
                return str(answer["result"]["content"][0]["text"]).split(":")[0]

            calls = [asyncio.ensure_future(call(i)) for i in range(CALLS)]
            await eventually(
                lambda: log_events(proxy.log_path.read_text(), "store_unavailable"),
                what="the store to refuse a commit",
            )
            # (The first commits may fit: the WAL file is written again from its start.)
            ended = sum(c.done() for c in calls)
            await asyncio.sleep(1.0)
            assert sum(c.done() for c in calls) == ended < CALLS, "answered while refused"
        finally:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
        answers = await asyncio.wait_for(asyncio.gather(*calls), 30)
        assert answers == [str(i) for i in range(CALLS)]
        echo = tool_call(99, "echo", {"text": "after"})["params"]
        got = messages(await client.request(99, "tools/call", echo))
        assert got[-1]["result"]["content"][0]["text"] == "after"
        assert log_events(proxy.log_path.read_text(), "store_available")
        assert proxy.process.returncode is None
