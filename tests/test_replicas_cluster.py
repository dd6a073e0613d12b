"""Two proxy replicas on a real local three-master Redis Cluster (``store.cluster: true``,
:mod:`tests.redis_cluster`): a call cut on the replica that holds its session resumes on
the other, live to its end; a request posted to the other replica reaches the holder
through the cluster (its inbox); and the deployment's keys are spread over the masters."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.downstream.sse_client import RawSession, messages, read_events
from tests.proxy_lives import lives, progress_of, read_some, shared
from tests.redis_cluster import LocalCluster
from tests.support import tool_call

SESSIONS = 3  # so that the deployment's keys have 8 or more random slots


async def test_two_replicas_on_a_cluster_resume_a_cut_call_on_the_other(
    tmp_path: Path, redis_cluster: LocalCluster
) -> None:
    steps = 30
    store = shared(redis_cluster.url) | {"cluster": True}
    async with lives(tmp_path, store) as (proxies, http):
        a, b = await proxies.start(), await proxies.start()
        clients = [RawSession(http, (a, b)[n % 2].url) for n in range(SESSIONS)]
        await asyncio.gather(*(made.initialize() for made in clients))
        client = clients[0]  # held by A
        call = tool_call(7, "slow", {"steps": steps, "delay": 0.03}, "t")
        resp = await http.post(a.url, json=call, headers=client.headers())
        received, last_id = await read_some(resp, 5)
        resp.close()  # the cut
        resp = await http.get(b.url, headers=client.headers(**{"Last-Event-ID": last_id}))
        assert resp.status == 200, await resp.text()
        received += messages(await read_events(resp))
        assert progress_of(received) == list(range(1, steps + 1))
        answers = [m for m in received if "id" in m]
        assert answers == [received[-1]]
        assert answers[0]["result"]["content"][0]["text"] == f"done {steps}"

        on_b = RawSession(http, b.url, session_id=client.session_id)
        echo = messages(
            await on_b.request(8, "tools/call", {"name": "echo", "arguments": {"text": "via B"}})
        )
        assert echo[0]["result"]["content"][0]["text"] == "via B", echo

        # Each session's record and streams, each replica's lease, the epoch: in slots
        # of their own, so on more than one master (all on one: (1/3)^8, 1 run in 6,500).
        spread = redis_cluster.keys_per_node(f"mrp:{store['namespace']}:*")
        assert sum(1 for count in spread.values() if count) > 1, spread
