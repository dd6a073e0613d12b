"""A Redis Cluster master fails over to its replica under a live call (issue 19): two proxy
replicas on a cluster of three masters with one replica each
(:class:`tests.redis_cluster.LocalCluster`, ``cluster-node-timeout`` 1 s).

The call runs on A; its client follows it on B from the shared log. The master holding
the call's stream (once its replica has what it wrote) is SIGKILLed and never started
again; its replica is promoted after about the node timeout. Both clients end with the
call's result, or a documented error (a resume refused with ``410 history_truncated``:
Redis replicates asynchronously, so what the master took in its last moment may not
have reached its replica), each progress once and in order, never an HTTP 500 (a resume
meanwhile may get a documented ``503 store_unavailable``). Then the proxies' cluster
clients follow the new topology: the session answers a call through either replica
(its record, A's lease and the new master's slots: A kept its session), and new
sessions work through both.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from tests.downstream.sse_client import RawSession, messages, read_events
from tests.proxy_lives import lives, progress_of, read_some, shared
from tests.redis_cluster import LocalCluster
from tests.store_refusals import answers, serves, store_unavailable
from tests.support import tool_call

NODE_TIMEOUT_MS = 1000
STEPS = 100  # 5 s: the failover happens while it runs
BOUND_S = 60.0  # every wait in this test (a failover takes a few seconds)


async def follow_to_the_end(
    http: aiohttp.ClientSession, client: RawSession, url: str, last_id: str
) -> tuple[list[dict[str, Any]], int]:
    """Follow the stream after ``last_id`` on ``url``, resuming where each response ended
    until the call's answer came; what came, and the status that ended it (200, or 410)."""
    got: list[dict[str, Any]] = []
    while not any("id" in m for m in got):
        async with http.get(url, headers=client.headers(**{"Last-Event-ID": last_id})) as resp:
            if resp.status == 503:  # the store failing over: documented, try again
                await store_unavailable(resp, None)
                await asyncio.sleep(0.2)
                continue
            if resp.status == 410:
                body = await resp.json()
                assert body["error"]["data"]["reason"] == "history_truncated", body
                return got, 410
            assert resp.status == 200, (resp.status, await resp.text())
            events = await read_events(resp)
        last_id = next((e.id for e in reversed(events) if e.id), last_id)
        got += messages(events)
    return got, 200


async def test_a_master_failing_over_to_its_replica_loses_no_call_and_no_session(
    tmp_path: Path,
) -> None:
    with LocalCluster(tmp_path / "cluster", replicas=1, node_timeout_ms=NODE_TIMEOUT_MS) as cluster:
        store = shared(cluster.url, 5) | {"cluster": True, "unavailable_wait_seconds": 2}
        namespace = store["namespace"]
        async with lives(tmp_path, store) as (proxies, http):
            a, b = await asyncio.gather(proxies.start(), proxies.start())
            client = RawSession(http, a.url)
            await client.initialize()
            call = tool_call(7, "slow", {"steps": STEPS, "delay": 0.05}, "t")
            resp = await http.post(a.url, json=call, headers=client.headers())
            received, last_id = await read_some(resp, 3)
            on_b = asyncio.create_task(follow_to_the_end(http, client, b.url, last_id))
            master = cluster.holder_of(f"mrp:{namespace}:*:log:*")
            cluster.wait(lambda: cluster.synced(master), "replicate what the master wrote")
            cluster.kill(master)
            async with asyncio.timeout(BOUND_S):
                rest = messages(await read_events(resp))  # A's own client: from A's memory
                followed, status = await on_b
            everything = received + rest
            assert progress_of(everything) == list(range(1, STEPS + 1))
            assert [m for m in everything if "id" in m] == [everything[-1]]
            assert everything[-1]["result"]["content"][0]["text"] == f"done {STEPS}"
            if status == 200:  # on B: the rest, once, in order, the same answer last
                assert progress_of(received + followed) == list(range(1, STEPS + 1))
                assert [m for m in followed if "id" in m] == [followed[-1]] == [everything[-1]]
            cluster.wait(cluster.failed_over, "promote the killed master's replica")
            assert master not in cluster.live_ports()
            async with asyncio.timeout(BOUND_S):
                for proxy in (b, a):  # the old session, through either replica
                    while not await answers(http, proxy.url, client.session_id):
                        await asyncio.sleep(0.2)
                for proxy in (b, a):  # new sessions
                    while not await serves(http, proxy.url):
                        await asyncio.sleep(0.2)
        for proxy in (a, b):
            text = proxy.log_path.read_text(errors="replace")
            assert "aiohttp.server" not in text and "Error handling request" not in text, text
            assert '"lease_lost"' not in text, text
