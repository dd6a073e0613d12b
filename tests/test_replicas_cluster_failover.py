"""A Redis Cluster master lost, then back (issue 19): two replicas on a three-master
cluster of their own (:class:`tests.redis_cluster.LocalCluster`, no replicas of masters),
the master holding a session's record SIGKILLed.

While it is down, a request for that session on the replica that does not hold it (which
must read the record to find the holder) waits ``store.unavailable_wait_seconds`` and
is refused with 503, ``Retry-After`` and JSON-RPC -32000 ``store_unavailable``, never a
500. Started again (empty: nothing is on disk), the cluster serves again: a new session
through either replica answers a call (retried while the replicas settle; every answer
meanwhile is 200, 404 or a documented 503; a replica whose lease key was on that master
finds it gone after the outage and takes it again: proxy/replica_lease.py), and the
lost record's session is ``404`` (its client initializes again), as after a flush
(docs/stores.md).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.downstream.sse_client import RawSession
from tests.proxy_lives import lives, shared
from tests.redis_cluster import LocalCluster
from tests.store_refusals import ECHO, serves, store_unavailable

WAIT = 1.0  # store.unavailable_wait_seconds


async def test_a_lost_master_is_store_unavailable_then_the_cluster_serves_again(
    tmp_path: Path,
) -> None:
    with LocalCluster(tmp_path / "cluster") as cluster:
        store = shared(cluster.url, 5) | {"cluster": True, "unavailable_wait_seconds": WAIT}
        async with lives(tmp_path, store) as (proxies, http):
            a, b = await asyncio.gather(proxies.start(), proxies.start())
            client = RawSession(http, a.url)
            await client.initialize()
            lost = cluster.holder_of(f"mrp:{store['namespace']}:{{session:{client.session_id}}}")
            cluster.kill(lost)
            loop = asyncio.get_running_loop()
            began = loop.time()
            async with http.post(b.url, json=ECHO, headers=client.headers()) as resp:
                await store_unavailable(resp, 8)
            assert loop.time() - began >= WAIT  # it waited for the store first
            cluster.restart(lost)
            async with asyncio.timeout(60):
                for proxy in (b, a):
                    while not await serves(http, proxy.url):
                        await asyncio.sleep(0.2)
            async with http.post(b.url, json=ECHO, headers=client.headers()) as resp:
                assert resp.status == 404, await resp.text()  # its record went with the master
        for proxy in (a, b):
            text = proxy.log_path.read_text(errors="replace")
            assert "aiohttp.server" not in text and "Error handling request" not in text, text
