"""Two proxy replicas on one real Redis: any replica serves any client.

B does not hold the session (A runs its server). A client cut from A resumes on B, which
serves the stream from the shared log, its replay and then its live tail (blocking reads,
no polling), until the call A runs completes: ``GET`` + ``Last-Event-ID`` with A's session
id, and the seed's ``stream/resume``. A request posted to B for A's session is forwarded
to A through Redis and its answer comes back through B. When A dies, its lease lapses:
its calls end with ``owner_lost`` for clients following them on B, its session is gone.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import redis.asyncio as aioredis
import yaml
from mcp.client import Client

from proxy.core.sse import SSEDecoder
from tests.downstream.sse_client import RawSession, messages, read_events
from tests.e2e.sdk_client import text_of
from tests.fixtures.http_harness import cut_mid_call_and_resume
from tests.proxy_lives import lives, progress_of, read_some, shared
from tests.redis_server import RedisServer
from tests.support import ROOT, eventually, run_proxy_on, tool_call

_namespaces = itertools.count()  # the shipped config's namespace, one per test


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


async def test_requests_posted_to_the_other_replica_reach_the_owner(
    tmp_path: Path, redis_url: str
) -> None:
    async with lives(tmp_path, shared(redis_url)) as (proxies, http):
        a, b = await proxies.start(), await proxies.start()
        client = RawSession(http, a.url)
        await client.initialize()
        on_b = RawSession(http, b.url, session_id=client.session_id)
        echo_call = tool_call(8, "echo", {"text": "via B"})
        echo = messages(await on_b.request(8, "tools/call", echo_call["params"]))
        assert [m["id"] for m in echo] == [8]
        assert echo[0]["result"]["content"][0]["text"] == "via B"
        call = tool_call(9, "slow", {"steps": 5, "delay": 0.01}, "q")
        events = await on_b.request(9, "tools/call", call["params"])
        assert progress_of(messages(events)) == [1, 2, 3, 4, 5]
        assert all(e.id for e in events if e.data)  # resumable: each has its id
        await on_b.notify("notifications/roots/list_changed")  # 202, through A
        assert len(a.upstream_pids()) == 1 and b.upstream_pids() == []
        # What A refuses is refused through B alike (a batch, in 2025-11-25).
        batch = [tool_call(10, "echo", {"text": "1"}), tool_call(11, "echo", {"text": "2"})]
        refused = await http.post(b.url, json=batch, headers=client.headers())
        assert refused.status == 400
        deleted = await http.delete(b.url, headers=client.headers())
        assert deleted.status == 200
        after = tool_call(12, "echo", {"text": "x"})
        gone = await http.post(a.url, json=after, headers=client.headers())
        assert gone.status == 404


async def test_a_dead_owner_ends_its_calls_with_owner_lost_within_the_lease(
    tmp_path: Path, redis_url: str
) -> None:
    lease = 1.5
    async with lives(tmp_path, shared(redis_url, lease)) as (proxies, http):
        a, b = await proxies.start(), await proxies.start()
        client = RawSession(http, a.url)
        await client.initialize()
        call = tool_call(7, "slow", {"steps": 600, "delay": 0.05}, "t")  # 30 s: outlives A
        resp = await http.post(a.url, json=call, headers=client.headers())
        received, last_id = await read_some(resp, 3)
        resp.close()
        follow = await http.get(b.url, headers=client.headers(**{"Last-Event-ID": last_id}))
        assert follow.status == 200
        await proxies.kill(a)
        loop = asyncio.get_running_loop()
        killed = loop.time()
        rest = messages(await read_events(follow))  # ends once a reaper ends the stream
        waited = loop.time() - killed
        # A lease to lapse, then missing at two of B's looks half a lease apart.
        assert waited < lease * 4, waited
        progress = progress_of(received + rest)
        assert progress == list(range(1, len(progress) + 1))
        assert rest[-1]["id"] == 7 and rest[-1]["error"]["data"] == {"reason": "owner_lost"}
        after = tool_call(8, "echo", {"text": "x"})
        gone = await http.post(b.url, json=after, headers=client.headers())
        assert gone.status == 404
        # The ended stream stays resumable from any replica until its retention ends.
        again = await http.get(b.url, headers=client.headers(**{"Last-Event-ID": last_id}))
        assert messages(await read_events(again)) == rest


async def test_a_flushed_redis_gives_explicit_errors_and_the_proxies_go_on(
    tmp_path: Path, redis_url: str
) -> None:
    lease = 1.5
    async with lives(tmp_path, shared(redis_url, lease)) as (proxies, http):
        a, b = await proxies.start(), await proxies.start()
        client = RawSession(http, a.url)
        await client.initialize()
        call = tool_call(7, "slow", {"steps": 20, "delay": 0.05}, "t")
        resp = await http.post(a.url, json=call, headers=client.headers())
        received, last_id = await read_some(resp, 3)
        resp.close()
        flusher = aioredis.from_url(redis_url)
        try:
            await flusher.flushall()
        finally:
            await flusher.aclose()
        # B has only what came after the flush: a resume from before it is refused, whole.
        on_b = await http.get(b.url, headers=client.headers(**{"Last-Event-ID": last_id}))
        assert on_b.status in (404, 410), await on_b.text()
        if on_b.status == 410:
            assert (await on_b.json())["error"]["data"]["reason"] == "history_truncated"
        # A holds the session and its log in memory: its client loses nothing.
        on_a = await http.get(a.url, headers=client.headers(**{"Last-Event-ID": last_id}))
        rest = messages(await read_events(on_a))
        assert progress_of(received + rest) == list(range(1, 21))
        assert rest[-1]["id"] == 7 and "result" in rest[-1]

        async def says_lost() -> bool:
            health = await (await http.get(b.url.replace("/mcp", "/healthz"))).json()
            return health["store"]["history_lost_at"] is not None

        await eventually(says_lost, what="B's /healthz to report the flush")
        fresh = RawSession(http, b.url)
        await fresh.initialize()  # new sessions go on
        echo = messages(
            await fresh.request(2, "tools/call", {"name": "echo", "arguments": {"text": "k"}})
        )
        assert echo[0]["result"]["content"][0]["text"] == "k"


async def test_a_redis_restart_mid_call_holds_the_wire_and_loses_nothing(tmp_path: Path) -> None:
    """While Redis is down the owner's commits retry; the client's events wait, none is
    skipped, and the stream goes on once Redis is back (empty: nothing was persisted)."""
    with RedisServer(tmp_path / "redis") as server:
        store = {"kind": "redis", "url": server.url, "namespace": "restart", "lease_seconds": 5}
        async with lives(tmp_path, store) as (proxies, http):
            a = await proxies.start()
            client = RawSession(http, a.url)
            await client.initialize()
            call = tool_call(7, "slow", {"steps": 30, "delay": 0.03}, "t")
            resp = await http.post(a.url, json=call, headers=client.headers())
            received, _ = await read_some(resp, 3)
            server.stop()

            async def says_failing() -> bool:
                health = await (await http.get(a.url.replace("/mcp", "/healthz"))).json()
                return health["store"]["last_error"] is not None

            await eventually(says_failing, what="/healthz to report the store's error")
            server.start()
            received += messages(await read_events(resp))
            assert progress_of(received) == list(range(1, 31))
            assert received[-1]["id"] == 7 and "result" in received[-1]


async def test_config_replicas_yaml_as_shipped(tmp_path: Path, redis_url: str) -> None:
    """Two replicas from ``config/replicas.yaml`` (only the ports and the Redis URL
    changed, the secret from the environment, as the file says): the SDK client works
    through one, and a call cut on one is resumed on the other."""
    config = yaml.safe_load((ROOT / "config" / "replicas.yaml").read_text())
    config["listen"]["port"] = 0
    config["store"]["url"] = redis_url
    config["store"]["namespace"] = f"shipped{next(_namespaces)}"
    env = {"MCP_RESUME_PROXY_TOKEN_SECRET": "a-secret-shared-by-the-replicas"}
    async with (
        run_proxy_on(tmp_path, config, env) as a,
        run_proxy_on(tmp_path, config, env) as b,
    ):
        with anyio.fail_after(60):
            async with Client(b.url) as client:
                assert text_of(await client.call_tool("echo", {"text": "hi"})) == "hi"
        await cut_mid_call_and_resume(
            a.url,
            a.base + "/healthz",
            tool="countdown",
            steps=8,
            result="liftoff after 8 steps",
            resume_url=b.url,
        )


async def read_until_quiet(
    resp: aiohttp.ClientResponse, quiet: float
) -> tuple[list[Any], str | None, bool]:
    """Whole events until the stream ends or nothing comes for ``quiet`` seconds: the
    messages, the last event id, and whether the stream ended."""
    dec = SSEDecoder()
    got: list[Any] = []
    last_id = None
    while True:
        try:
            chunk = await asyncio.wait_for(resp.content.readany(), quiet)
        except TimeoutError:
            return got, last_id, False
        if not chunk:
            return got, last_id, True
        for event in dec.feed(chunk):
            last_id = event.id or last_id
            if event.data:
                got.append(json.loads(event.data))


async def test_acknowledgements_given_to_the_other_replica_let_the_owner_go_on(
    tmp_path: Path, redis_url: str
) -> None:
    """``overflow: block`` on A holds the server back until the client acknowledges; the
    client acknowledges only on B (each reconnect's Last-Event-ID): A must hear of it."""
    steps = 40
    sessions = {"stream_max_events": 8, "overflow": "block"}
    async with lives(tmp_path, shared(redis_url), sessions=sessions) as (proxies, http):
        a, b = await proxies.start(), await proxies.start()
        client = RawSession(http, a.url)
        await client.initialize()
        call = tool_call(7, "slow", {"steps": steps, "delay": 0.005}, "t")
        resp = await http.post(a.url, json=call, headers=client.headers())
        received, last_id = await read_some(resp, 2)
        resp.close()
        for _ in range(40):
            again = await http.get(b.url, headers=client.headers(**{"Last-Event-ID": last_id}))
            assert again.status == 200, await again.text()
            got, newest, ended = await read_until_quiet(again, 0.5)
            again.close()
            received += got
            last_id = newest or last_id
            if ended:
                break
        progress = progress_of(received)
        assert progress == list(range(1, steps + 1)), progress
        assert received[-1]["id"] == 7 and "result" in received[-1]
