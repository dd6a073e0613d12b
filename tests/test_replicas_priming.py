"""A POST answered through a replica that does not hold the session opens with the same
priming event the holder's own answer opens with (issue 19, item 10; 2025-11-25
transports §Resumability: an event id, empty data, first), so a client whose stream
breaks before its first event still holds an id, and resumes from it on either replica.

Two replicas on one real Redis: A holds the session, B forwards to it. The client posts
a call to B, keeps only the first event (the cut comes right after it), and resumes
with ``GET`` + ``Last-Event-ID`` = that id, on B and on A: each replays the call's
events and exactly one answer. Sessions of revisions before 2025-11-25 get no priming
event on either path; a standalone ``GET`` forwarded to A is primed like A's own.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp

from proxy.core.eventid import parse_event_id
from proxy.core.sse import SSEDecoder, SSEEvent
from tests.downstream.sse_client import RawSession, messages, read_events
from tests.proxy_lives import lives, progress_of, shared
from tests.support import tool_call


async def first_event(resp: aiohttp.ClientResponse) -> SSEEvent:
    """The response's first whole event; the connection is cut right after it."""
    assert resp.status == 200, await resp.text()
    dec = SSEDecoder()
    try:
        async for chunk in resp.content.iter_any():
            events = dec.feed(chunk)
            if events:
                return events[0]
        raise AssertionError("the stream ended before its first event")
    finally:
        resp.close()


async def test_a_post_through_the_non_owner_is_primed_and_resumable_anywhere(
    tmp_path: Path, redis_url: str
) -> None:
    steps = 10
    async with lives(tmp_path, shared(redis_url)) as (proxies, http):
        a, b = await proxies.start(), await proxies.start()
        client = RawSession(http, a.url)
        await client.initialize()

        # What A writes for its own session's POST: the priming event, first.
        echo = tool_call(2, "echo", {"text": "on A"})
        own = await first_event(await http.post(a.url, json=echo, headers=client.headers()))
        assert own.id and own.data == ""

        call = tool_call(7, "slow", {"steps": steps, "delay": 0.02}, "t")
        primed = await first_event(await http.post(b.url, json=call, headers=client.headers()))
        assert primed.id and primed.data == "", primed
        assert primed.retry == own.retry
        assert parse_event_id(primed.id).seq == 0  # before every event of the call

        for replica in (b, a):  # the one that forwarded, then the holder
            resume = client.headers(**{"Last-Event-ID": primed.id})
            async with http.get(replica.url, headers=resume) as resp:
                assert resp.status == 200, await resp.text()
                got = messages(await read_events(resp))
            assert progress_of(got) == list(range(1, steps + 1)), replica.url
            answers = [m for m in got if "id" in m]
            assert answers == [got[-1]]
            assert answers[0]["id"] == 7
            assert answers[0]["result"]["content"][0]["text"] == f"done {steps}"

        # The standalone GET forwarded to A is primed too, as A's own would be.
        standalone = await first_event(await http.get(b.url, headers=client.headers()))
        assert standalone.id and standalone.data == ""
        assert parse_event_id(standalone.id).stream == 0

        # Before 2025-11-25 nobody primes: the first event is the answer, on A and via B.
        older = RawSession(http, a.url, version="2025-06-18")
        await older.initialize()
        for replica in (a, b):
            reply = tool_call(3, "echo", {"text": "old"})
            got = await first_event(
                await http.post(replica.url, json=reply, headers=older.headers())
            )
            assert got.id and got.data, (replica.url, got)
