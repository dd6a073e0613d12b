"""A large answer on a replica that does not hold the session (issue 20, large results).

The holder answers a lone request's large answer as ``application/json`` when it comes
within ``sse.json_answer_window_ms`` (proxy/core/lone_answer.py): the official Python SDK
caps an SSE event at 1 MiB. Behind a balancer the POST may reach the other replica, which
serves the call's stream from the shared log: it must choose the same way, or the same
client fails there. Two real replicas on a real Redis, A holding the session, the POST to B.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.downstream.sse_client import RawSession, messages, read_events
from tests.fixtures.big_text import big_text
from tests.proxy_lives import lives, shared
from tests.support import tool_call

SIZE = 2_000_000  # over the SDK's 1 MiB cap and json_answer_min_bytes (256 KiB)
SSE_FIRST = "text/event-stream, application/json;q=0.9"  # the shim's: it resumes a cut


async def test_a_large_answer_through_the_other_replica_is_json_as_on_the_holder(
    tmp_path: Path, redis_url: str
) -> None:
    async with lives(tmp_path, shared(redis_url)) as (proxies, http):
        a, b = await proxies.start(), await proxies.start()
        client = RawSession(http, a.url)
        await client.initialize()

        call = tool_call(5, "big", {"size": SIZE}, None)
        async with http.post(b.url, json=call, headers=client.headers()) as resp:
            assert resp.status == 200, await resp.text()
            assert resp.content_type == "application/json"
            answer = json.loads(await resp.read())
        assert answer["id"] == 5
        assert answer["result"]["content"][0]["text"] == big_text(SIZE)

        # A client that asks for SSE first gets the stream, the answer as its one event.
        call = tool_call(6, "big", {"size": SIZE}, None)
        headers = client.headers(Accept=SSE_FIRST)
        async with http.post(b.url, json=call, headers=headers) as resp:
            assert resp.content_type == "text/event-stream"
            (streamed,) = messages(await read_events(resp))
        assert streamed["id"] == 6
        assert streamed["result"]["content"][0]["text"] == big_text(SIZE)

        # A small answer, or one after progress, stays SSE there too.
        call = tool_call(7, "slow", {"steps": 3, "delay": 0.01}, "p")
        async with http.post(b.url, json=call, headers=client.headers()) as resp:
            assert resp.content_type == "text/event-stream"
            got = messages(await read_events(resp))
        assert [m.get("id") for m in got] == [None, None, None, 7]
