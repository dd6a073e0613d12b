"""Two proxy replicas on one real Redis: a client cut from replica A resumes on B.

B does not hold the session (A runs its server): it serves the stream from the shared
log, its replay and then its live tail (blocking reads, no polling), until the call A
runs completes. Both ways of resuming: ``GET`` + ``Last-Event-ID`` with A's session id,
and the seed's ``stream/resume`` from a session the client opened on B.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from tests.downstream.sse_client import RawSession, messages, read_events
from tests.support import tool_call
from tests.test_restart import lives, progress_of, read_some

_namespaces = itertools.count()


def shared(redis_url: str) -> dict[str, Any]:
    return {"kind": "redis", "url": redis_url, "namespace": f"replicas{next(_namespaces)}"}


async def test_get_resume_on_the_other_replica_follows_the_call_live(
    tmp_path: Path, redis_url: str
) -> None:
    steps = 40
    async with lives(tmp_path, shared(redis_url)) as (proxies, http):
        a, b = await proxies.start(), await proxies.start()
        client = RawSession(http, a.url)
        await client.initialize()
        call = tool_call(7, "slow", {"steps": steps, "delay": 0.03}, "t")
        resp = await http.post(a.url, json=call, headers=client.headers())
        received, last_id = await read_some(resp, 5)
        resp.close()
        resp = await http.get(b.url, headers=client.headers(**{"Last-Event-ID": last_id}))
        assert resp.status == 200, await resp.text()
        received += messages(await read_events(resp))
        assert progress_of(received) == list(range(1, steps + 1))
        answers = [m for m in received if "id" in m]
        assert answers == [received[-1]]
        assert answers[0]["result"]["content"][0]["text"] == f"done {steps}"
        # B does not hold the session: a request for it there is not B's to run (yet).
        echo = await http.post(
            b.url, json=tool_call(8, "echo", {"text": "x"}), headers=client.headers()
        )
        assert echo.status == 404


async def test_stream_resume_on_the_other_replica(tmp_path: Path, redis_url: str) -> None:
    steps = 30
    async with lives(tmp_path, shared(redis_url)) as (proxies, http):
        a, b = await proxies.start(), await proxies.start()
        client = RawSession(http, a.url)
        await client.initialize_with({"streams": {}})
        call = tool_call(3, "slow", {"steps": steps, "delay": 0.03}, "p")
        resp = await http.post(a.url, json=call, headers=client.headers())
        received, last_id = await read_some(resp, 3)
        resp.close()
        create = received[0]["params"]["stream"]
        ref = {"streamId": create["streamId"], "resumeToken": create["resumeToken"]}
        on_b = RawSession(http, b.url)
        await on_b.initialize_with({"streams": {}})
        rest = messages(await on_b.request(9, "stream/resume", {**ref, "lastEventId": last_id}))
        assert progress_of(received + rest) == list(range(1, steps + 1))
        assert rest[-3]["id"] == 3 and rest[-3]["result"]["content"][0]["text"] == f"done {steps}"
        assert rest[-2]["method"] == "notifications/stream/end"
        assert rest[-1] == {"jsonrpc": "2.0", "id": 9, "result": {}}
