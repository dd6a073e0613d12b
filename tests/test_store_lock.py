"""One proxy per SQLite file, enforced (issue 19 item 5; docs/stores.md).

Real proxy processes on one file: a second one started while the first serves exits 2
with one line naming the file and the first's pid, before it reads the store or binds a
port, and the first's live stream is left whole (every event once, one answer, also when
read again after a restart). The lock dies with its holder: after SIGKILL of the first a
new proxy starts on the file at once.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from tests.downstream.sse_client import RawSession, messages, read_events
from tests.proxy_lives import lives, progress_of
from tests.support import DEADLINE_S, ROOT, log_events, tool_call

STEPS = 40


async def test_a_second_proxy_on_the_file_exits_2_and_leaves_the_first_whole(
    tmp_path: Path,
) -> None:
    async with lives(tmp_path) as (proxies, http):
        first = await proxies.start()
        client = RawSession(http, first.url)
        await client.initialize()
        resp = await http.post(
            first.url,
            json=tool_call(7, "slow", {"steps": STEPS, "delay": 0.05}, "t"),
            headers=client.headers(),
        )
        assert resp.status == 200
        head = await resp.content.readuntil(b"\n\n")  # the call runs: its stream is live

        # The same config file: the same store.path, and port 0 would bind fine.
        second = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "proxy", "--config", str(tmp_path / "proxy-1.yaml")),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(ROOT),
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        out, err = await asyncio.wait_for(second.communicate(), DEADLINE_S)
        path = tmp_path / "store.db"
        assert second.returncode == 2, err.decode()
        assert out == b""
        assert err.decode().splitlines() == [
            f"mcp-resume-proxy: store.path {path} is in use by another proxy "
            f"(pid {first.process.pid}); one proxy per SQLite file"
        ]

        # The first serves on: the call streams to its end, once.
        events = await read_events(resp)
        got = messages(events)
        assert progress_of(got) == list(range(1, STEPS + 1))
        answers = [m for m in got if "result" in m or "error" in m]
        assert answers == [got[-1]] and got[-1]["result"]["content"][0]["text"] == f"done {STEPS}"
        ids = [e.id for e in events if e.data]
        assert head.startswith(b"id: ") and not log_events(
            first.log_path.read_text(), "store_orphans_ended"
        )

        # The lock goes with its holder, also on SIGKILL: the next proxy starts at once and
        # its history is the first's, whole (nothing ended twice by an intruder).
        await proxies.kill(first)
        third = await proxies.start()
        again = await http.get(third.url, headers=client.headers(**{"Last-Event-ID": ids[0]}))
        assert again.status == 200, await again.text()
        assert messages(await read_events(again)) == got[1:]
