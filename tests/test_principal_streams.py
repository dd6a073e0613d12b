"""Durable streams and resume tokens belong to the principal whose session made them
(issue 12: inbound auth and isolation).

Real proxy processes with bearer tokens for alice and bob. After a restart on SQLite (the
session is gone, its streams are in the file) and on two replicas sharing Redis (the
session is on the other replica), bob never reads alice's stream: ``GET`` +
``Last-Event-ID`` with her session id is ``404``, ``stream/poll`` / ``stream/resume`` with
her real resume token is ``unknown_stream`` (exactly what a stream that never existed
gets), and requests for her session forwarded to its replica are refused there. Alice,
meanwhile, resumes as before.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from tests.downstream.sse_client import RawSession, messages, read_events
from tests.proxy_lives import Lives, Proxy, lives, progress_of, read_some, shared
from tests.support import bearer, tool_call

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef00"
AUTH = {"tokens": [{"token": ALICE, "principal": "alice"}, {"token": BOB, "principal": "bob"}]}


@asynccontextmanager
async def authenticated(
    tmp_path: Path, store: dict[str, Any] | None = None
) -> AsyncIterator[tuple[Lives, aiohttp.ClientSession, aiohttp.ClientSession]]:
    """Proxy lives with ``auth`` on, and an HTTP client for each of alice and bob."""
    async with (
        lives(tmp_path, store) as (proxies, _),
        aiohttp.ClientSession(headers=bearer(ALICE)) as as_alice,
        aiohttp.ClientSession(headers=bearer(BOB)) as as_bob,
    ):
        proxies.extra = {"auth": AUTH}
        yield proxies, as_alice, as_bob


async def alice_calls(
    as_alice: aiohttp.ClientSession, proxy: Proxy, steps: int
) -> tuple[RawSession, list[dict[str, Any]], str, dict[str, Any]]:
    """Alice's seeded session on ``proxy`` and a slow call she is cut from after its
    announcement and three progress notifications: (session, received, last event id,
    the stream's reference for ``stream/poll`` / ``stream/resume``)."""
    alice = RawSession(as_alice, proxy.url)
    await alice.initialize_with({"streams": {}})
    call = tool_call(3, "slow", {"steps": steps, "delay": 0.03}, "p")
    resp = await as_alice.post(proxy.url, json=call, headers=alice.headers())
    assert resp.status == 200, await resp.text()
    received, last_id = await read_some(resp, 4)  # create + 3 progress
    resp.close()
    create = received[0]["params"]["stream"]
    ref = {"streamId": create["streamId"], "resumeToken": create["resumeToken"]}
    return alice, received, last_id, ref


async def refusal(session: RawSession, rid: int, method: str, params: dict[str, Any]) -> Any:
    (answer,) = messages(await session.request(rid, method, params))
    assert answer["id"] == rid
    return answer["error"]


async def assert_not_bobs(
    bob: RawSession, ref: dict[str, Any], last_id: str, rid: int = 10
) -> None:
    """Bob's poll and resume of alice's stream, with her real token, are refused exactly
    as those of a stream that never existed: nothing says "exists, but not yours"."""
    epoch = ref["streamId"].rpartition(".")[0]
    never = {"streamId": f"{epoch}.999", "resumeToken": ref["resumeToken"]}
    for method in ("stream/poll", "stream/resume"):
        stolen = await refusal(bob, rid, method, {**ref, "lastEventId": last_id})
        unknown = await refusal(bob, rid, method, never)
        assert stolen["data"]["reason"] == "unknown_stream", stolen
        assert stolen == unknown
        rid += 1


async def test_after_a_restart_only_alice_resumes_her_stored_stream(tmp_path: Path) -> None:
    steps = 300
    async with authenticated(tmp_path) as (proxies, as_alice, as_bob):
        first = await proxies.start()
        alice, received, last_id, ref = await alice_calls(as_alice, first, steps)

        # In the same process (the stream is live, its session held here): bob's own
        # session naming alice's stream is refused too.
        bob_first = RawSession(as_bob, first.url)
        await bob_first.initialize_with({"streams": {}})
        await assert_not_bobs(bob_first, ref, last_id)

        await proxies.kill(first)
        second = await proxies.start()

        # GET + Last-Event-ID with alice's session id: her session is gone, her stream is
        # in the file; bob gets what an unknown session gets.
        resume = alice.headers(**{"Last-Event-ID": last_id})
        resp = await as_bob.get(second.url, headers=resume)
        assert resp.status == 404, await resp.text()
        resp.close()
        resp = await as_alice.get(second.url, headers=resume)
        assert resp.status == 200, await resp.text()
        replayed = messages(await read_events(resp))
        progress = progress_of(received + replayed)
        assert progress == list(range(1, len(progress) + 1))
        assert next(m for m in replayed if m.get("id") == 3)["error"]["data"] == {
            "reason": "proxy_restarted"
        }

        # The seed's protocol from new sessions: bob cannot, even with alice's real token.
        bob = RawSession(as_bob, second.url)
        await bob.initialize_with({"streams": {}})
        await assert_not_bobs(bob, ref, last_id)
        fresh = RawSession(as_alice, second.url)
        await fresh.initialize_with({"streams": {}})
        rest = messages(await fresh.request(4, "stream/resume", {**ref, "lastEventId": last_id}))
        assert rest == [*replayed, {"jsonrpc": "2.0", "id": 4, "result": {}}]


async def test_on_replicas_bob_never_reaches_alices_session_or_streams(
    tmp_path: Path, redis_url: str
) -> None:
    """The refusals of forwarded requests (``post``, ``get``, ``delete``) are the holder's
    (:meth:`Registry.serve_forwarded` checks the ``principal`` they carry)."""
    steps = 200
    async with authenticated(tmp_path, shared(redis_url)) as (proxies, as_alice, as_bob):
        a, b = await proxies.start(), await proxies.start()
        alice, received, last_id, ref = await alice_calls(as_alice, a, steps)

        # Forwarded to A (the holder), which refuses bob: POST, GET, DELETE.
        on_b = alice.headers()
        echo = tool_call(8, "echo", {"text": "mine?"})
        resp = await as_bob.post(b.url, json=echo, headers=on_b)
        assert resp.status == 404, await resp.text()
        resp.close()
        resp = await as_bob.get(b.url, headers=on_b)
        assert resp.status == 404, await resp.text()
        resp.close()
        resp = await as_bob.delete(b.url, headers=on_b)
        assert resp.status == 404, await resp.text()
        resp.close()

        # Served by B from the shared log: bob's resume of alice's stream, by GET with
        # her session id, and by the seed's protocol with her real token.
        resp = await as_bob.get(b.url, headers=alice.headers(**{"Last-Event-ID": last_id}))
        assert resp.status == 404, await resp.text()
        resp.close()
        bob = RawSession(as_bob, b.url)
        await bob.initialize_with({"streams": {}})
        await assert_not_bobs(bob, ref, last_id)

        # Alice, through B, as before: her session answers, her stream resumes.
        mine = messages(
            await RawSession(as_alice, b.url, alice.session_id).request(
                8, "tools/call", echo["params"]
            )
        )
        answer = next(m for m in mine if m.get("id") == 8)
        assert answer["result"]["content"][0]["text"] == "mine?"
        resp = await as_alice.get(b.url, headers=alice.headers(**{"Last-Event-ID": last_id}))
        assert resp.status == 200, await resp.text()
        rest = messages(await read_events(resp))
        assert progress_of(received + rest) == list(range(1, steps + 1))
        assert rest[-2]["id"] == 3 and rest[-2]["result"]["content"][0]["text"] == f"done {steps}"
        assert rest[-1]["method"] == "notifications/stream/end"
