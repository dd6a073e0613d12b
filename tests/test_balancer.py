"""Every client kind through a real balancer (issue 19): three replicas on one Redis
behind HAProxy, round robin, no stickiness (tests/balancer.py). Each request of a client
may land on any replica, so each path that is bound to the replica holding a session or
a call has to be served across replicas: the legacy HTTP client's calls, cuts and
``Last-Event-ID`` resumes; a 2026-07-28 client's tasks and MRTR retries; legacy
2025-11-25 tasks; ``/ws`` sessions resumed on another socket; the stdio shim.
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types
from mcp.client.session import ClientRequestContext

from proxy.downstream.ws_socket import SESSION_META
from tests.balanced import cluster, shim_host, ws_connect
from tests.downstream.sse_client import RawSession, messages, read_events
from tests.downstream.ws_client import request, tool
from tests.e2e.sdk_client import text_of
from tests.modern.client import Answer, Modern, read_answer
from tests.proxy_lives import progress_of, read_some
from tests.support import eventually, tool_call

_namespaces = itertools.count()
DEADLINE = 60.0
EVENT_META = "io.github.mcp-resume-proxy/eventId"
TASKS = {"mode": "after_ms", "after_ms": 300}


def store(redis_url: str) -> dict[str, Any]:
    namespace = f"balanced{next(_namespaces)}"
    return {"kind": "redis", "url": redis_url, "namespace": namespace, "lease_seconds": 3}


async def test_a_paused_replica_leaves_the_rotation_and_comes_back(
    tmp_path: Path, redis_url: str
) -> None:
    """The health check (``GET /readyz``) takes a replica that does not answer out of
    the rotation: new sessions and their requests all land on the others meanwhile."""
    async with cluster(tmp_path, store(redis_url)) as c, aiohttp.ClientSession() as http:
        paused = c.replicas.replicas[0]
        paused.pause()
        try:
            await c.lb.wait_down(paused.port)
            client = RawSession(http, c.lb.url)
            await asyncio.wait_for(client.initialize(), DEADLINE)
            for rid in range(4):
                params = {"name": "echo", "arguments": {"text": f"{rid}"}}
                got = await asyncio.wait_for(client.request(rid, "tools/call", params), DEADLINE)
                assert messages(got)[-1]["result"]["content"][0]["text"] == f"{rid}"
        finally:
            paused.resume()
        await c.lb.wait_up()


async def test_legacy_client_cut_and_resumed_through_the_balancer(
    tmp_path: Path, redis_url: str
) -> None:
    """initialize, a call streaming progress, cut four times, each resume a ``GET`` with
    ``Last-Event-ID`` that the balancer sends to whichever replica: every progress once,
    in order, and one answer; the client's requests spread over every replica."""
    steps = 40
    async with cluster(tmp_path, store(redis_url)) as c, aiohttp.ClientSession() as http:
        client = RawSession(http, c.lb.url)
        await client.initialize()
        call = tool_call(7, "slow", {"steps": steps, "delay": 0.03}, "t")
        resp = await http.post(c.lb.url, json=call, headers=client.headers())
        assert resp.status == 200, await resp.text()
        received, last_id = await read_some(resp, 3)
        resp.close()
        for _ in range(3):
            again = await http.get(c.lb.url, headers=client.headers(**{"Last-Event-ID": last_id}))
            assert again.status == 200, await again.text()
            got, newest = await read_some(again, 4)
            again.close()
            received += got
            last_id = newest or last_id
        rest = await http.get(c.lb.url, headers=client.headers(**{"Last-Event-ID": last_id}))
        assert rest.status == 200, await rest.text()
        received += messages(await asyncio.wait_for(read_events(rest), DEADLINE))
        assert progress_of(received) == list(range(1, steps + 1))
        answers = [m for m in received if "id" in m]
        assert answers == [received[-1]]
        assert answers[0]["result"]["content"][0]["text"] == f"done {steps}"
        # Round robin with no stickiness: this one client's requests reached every replica.
        served = {
            row["svname"]: int(row["stot"])
            for row in await c.lb.stats()
            if row["svname"].startswith("r")
        }
        assert len(served) == 3 and all(served.values()), served


async def test_modern_client_task_polled_through_the_balancer(
    tmp_path: Path, redis_url: str
) -> None:
    """A 2026-07-28 call that outlives ``tasks.after_ms`` becomes a task; ``tasks/get``
    on whichever replica reads the shared record until it completes."""
    async with (
        cluster(tmp_path, store(redis_url), tasks=TASKS) as c,
        aiohttp.ClientSession() as http,
    ):
        client = Modern(http, c.lb.url)
        created = await client.call("slow", {"steps": 10, "delay": 0.1})
        assert created.result["resultType"] == "task", created.body
        task_id = created.result["taskId"]

        async def completed() -> dict[str, Any] | None:
            got = await client.task("tasks/get", task_id)
            assert got.result["status"] in ("working", "completed"), got.body
            return got.result if got.result["status"] == "completed" else None

        done = await eventually(completed, timeout=DEADLINE, interval=0.1)
        assert done["result"]["content"][0]["text"] == "done 10"


async def test_modern_client_mrtr_retries_through_the_balancer(
    tmp_path: Path, redis_url: str
) -> None:
    """An ``input_required`` answer and its retry are two requests: round robin sends
    the retry to any replica, and the same upstream call must go on (fails until the
    retry is forwarded to the replica that holds the call: w-paths)."""
    async with cluster(tmp_path, store(redis_url)) as c, aiohttp.ClientSession() as http:
        client = Modern(http, c.lb.url)
        for n in range(3):  # with 3 replicas, at least one retry lands elsewhere
            first = await client.call("ask", {"question": f"q{n}"})
            assert first.result["resultType"] == "input_required", first.body
            (key,) = first.result["inputRequests"]
            answer = {key: {"action": "accept", "content": {"answer": f"a{n}"}}}
            done = await client.send(
                "tools/call",
                {
                    "name": "ask",
                    "arguments": {"question": f"q{n}"},
                    "requestState": first.result["requestState"],
                    "inputResponses": answer,
                },
            )
            assert done.status == 200, done.body
            assert done.result["content"][0]["text"] == f"a{n}"


async def test_legacy_tasks_through_the_balancer(tmp_path: Path, redis_url: str) -> None:
    """A 2025-11-25 client's task (``tools/call`` with ``params.task``): ``tasks/get``
    and ``tasks/result`` through round robin reach the façade, never the upstream's
    ``-32601`` (fails until legacy tasks are served across replicas: w-paths)."""
    async with cluster(tmp_path, store(redis_url)) as c, aiohttp.ClientSession() as http:
        client = RawSession(http, c.lb.url)
        await client.initialize_with({"tasks": {}})

        async def ask(rid: int, method: str, **params: Any) -> Answer:
            body = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
            async with http.post(c.lb.url, json=body, headers=client.headers()) as resp:
                return await read_answer(resp)

        args = {"steps": 5, "delay": 0.1}
        created = await ask(1, "tools/call", name="slow", arguments=args, task={})
        assert "task" in created.result, created.body  # not run as a plain call
        task_id = created.result["task"]["taskId"]
        for rid in range(2, 5):  # lands on every replica
            got = await ask(rid, "tasks/get", taskId=task_id)
            assert got.result["taskId"] == task_id, got.body
        result = await ask(9, "tasks/result", taskId=task_id)
        assert result.result["content"][0]["text"] == "done 5", result.body


async def test_websocket_session_resumed_on_another_socket(tmp_path: Path, redis_url: str) -> None:
    """``/ws``: a call streaming progress, the socket cut, the session resumed on new
    sockets (each may reach another replica) with ``stream/resume``: every progress once
    and one answer (fails until /ws is served across replicas: w-paths)."""
    steps = 30
    got: list[dict[str, Any]] = []
    streams = {"event_id_in_meta": True}
    async with cluster(tmp_path, store(redis_url), streams=streams) as c:
        async with ws_connect(c.lb) as ws:
            params = {
                "protocolVersion": "2025-06-18",
                "capabilities": {"streams": {}},
                "clientInfo": {"name": "ws", "version": "0"},
            }
            init, _ = await ws.call(0, "initialize", params)
            session_id = init["result"]["_meta"][SESSION_META]
            await ws.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            args = {"steps": steps, "delay": 0.03}
            await ws.send(request(1, "tools/call", tool("slow", args, "p")))
            while len(got) < 4:
                got.append(await ws.recv())
            ws.ws.transport.abort()
        create = got[0]["params"]["stream"]
        ref = {"streamId": create["streamId"], "resumeToken": create["resumeToken"]}
        for attempt in range(3):
            async with ws_connect(c.lb, session_id) as ws:
                last = got[-1]["params"]["_meta"][EVENT_META]
                resume = {**ref, "lastEventId": last}
                await ws.send(request(100 + attempt, "stream/resume", resume))
                ended = False
                while True:
                    msg = await ws.recv()
                    if msg.get("id") == 100 + attempt:
                        assert "result" in msg, msg
                        ended = True
                        break
                    got.append(msg)
                    if attempt < 2 and len(got) % 5 == 0:
                        ws.ws.transport.abort()
                        break
                if ended:
                    break
    progress = progress_of(got)
    assert progress == list(range(1, steps + 1)), progress
    answers = [m for m in got if m.get("id") == 1]
    assert len(answers) == 1 and answers[0]["result"]["content"][0]["text"] == f"done {steps}"


async def test_shim_through_the_balancer(tmp_path: Path, redis_url: str) -> None:
    """The stdio shim in front of the balancer URL: a call streaming progress, and a
    question (elicitation) answered by the host, each request on any replica."""

    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"answer": "from the host"})

    async with (
        cluster(tmp_path, store(redis_url)) as c,
        shim_host(tmp_path / "shim.log", c.lb.url, elicit) as host,
    ):
        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        result = await asyncio.wait_for(
            host.call_tool("slow", {"steps": 20, "delay": 0.03}, progress_callback=on_progress),
            DEADLINE,
        )
        assert text_of(result) == "done 20"
        await eventually(lambda: len(seen) >= 20, what="every progress", timeout=10)
        assert seen == [float(i) for i in range(1, 21)]
        for n in range(3):
            asked = await asyncio.wait_for(host.call_tool("ask", {"question": f"q{n}"}), DEADLINE)
            assert text_of(asked) == "from the host"
