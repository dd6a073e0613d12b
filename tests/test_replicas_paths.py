"""Every client path behind a balancer with no stickiness (issue 19, items 1-3): two
replicas on one real Redis, and each request sent to the replica that does not hold what
it names works exactly as on the holder.

- MRTR retries (2026-07-28): the official SDK client behind round robin
  (tests/e2e/round_robin_client.py), each retry reaching the replica that does not hold
  the call, gets every answer; a retry whose holder is gone, ``owner_lost``; the call's
  progress reaches a forwarded retry's client as it comes, once each, before the answer;
- legacy 2025-11-25 tasks of a session held by A, served by B;
- ``/ws`` on B for a session A holds, and a resume token of A's on a ``/ws`` of B's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import aiohttp

from tests.downstream.sse_client import RawSession, live_messages
from tests.downstream.ws_client import Client, initialize, request, socket_beside, tool
from tests.modern.client import Answer, Modern, body, read_answer, request_headers
from tests.modern.support import SERVER
from tests.proxy_lives import lives, restartable_redis, shared
from tests.redis_server import RedisServer
from tests.support import ROOT, eventually


async def ask(client: RawSession, rid: int, method: str, **params: Any) -> Answer:
    message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
    async with client.http.post(client.url, json=message, headers=client.headers()) as resp:
        return await read_answer(resp)


async def legacy(http: aiohttp.ClientSession, url: str, caps: dict[str, Any]) -> RawSession:
    client = RawSession(http, url)
    await client.initialize_with(caps)
    return client


ACCEPT = {"action": "accept", "content": {"answer": "yes"}}


def _retry(state: str, key: str, answer: str) -> dict[str, object]:
    return {
        "name": "ask_twice",
        "arguments": {},
        "requestState": state,
        "inputResponses": {key: {"action": "accept", "content": {"answer": answer}}},
    }


async def test_an_mrtr_retry_for_a_dead_holder_gets_owner_lost(
    tmp_path: Path, redis_url: str
) -> None:
    """Sent while the dead holder's lease still holds, the retry waits on it until it
    lapses; sent after, it is answered at once. Either way: ``owner_lost``, not -32602."""
    lease = 3.0  # lapses 2-3 s after the kill: the first retry is sent well before
    async with lives(tmp_path, shared(redis_url, lease)) as (proxies, http):
        proxies.command = SERVER
        a, b = await asyncio.gather(proxies.start(), proxies.start())
        on_a, on_b = Modern(http, a.url), Modern(http, b.url)
        parked = await asyncio.gather(*(on_a.call("ask_twice") for _ in range(2)))
        await proxies.kill(a)
        loop = asyncio.get_running_loop()
        for first in parked:
            (key,) = first.result["inputRequests"]
            started = loop.time()
            lost = await on_b.send("tools/call", _retry(first.result["requestState"], key, "A"))
            assert lost.error["code"] == -32000, lost.body
            assert lost.error["data"] == {"reason": "owner_lost"}
            assert loop.time() - started < lease * 3  # not the 30 s forwarding timeout
        assert "mrtr_holder_lost" in b.log_path.read_text()  # the first: while it waited
        assert "mrtr_holder_gone" in b.log_path.read_text()  # the second: at once


async def _sse_messages(resp: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    async for line in resp.content:
        if line.startswith(b"data: ") and line[6:].strip():
            yield json.loads(line[6:])


async def test_a_forwarded_retry_gets_the_calls_progress_as_it_comes(
    tmp_path: Path, redis_url: str
) -> None:
    """The holder's progress reaches the client of a retry sent to the other replica
    while the call runs there, not with its answer: the tool answers only once the test
    has read every progress note (it waits for a file the test makes then), so notes
    that came with the answer would never come. Each comes once, in order, then the
    answer."""
    steps, gate = 6, tmp_path / "gate"
    async with lives(tmp_path, shared(redis_url)) as (proxies, http):
        proxies.command = SERVER
        a, b = await asyncio.gather(proxies.start(), proxies.start())
        caps = {"elicitation": {}}  # no Tasks extension: the retry cannot become a task
        arguments = {"question": "q", "then_progress": steps, "pace": 0.2, "gate": str(gate)}
        call = {"name": "ask", "arguments": arguments, "_meta": {"progressToken": "p1"}}
        first = await Modern(http, a.url, caps).send("tools/call", call)
        (key,) = first.result["inputRequests"]
        retry = body(
            "tools/call",
            {
                **call,
                "requestState": first.result["requestState"],
                "inputResponses": {key: ACCEPT},
                "_meta": {"progressToken": "p2"},
            },
            2,
            caps,
        )
        headers = request_headers("tools/call", retry["params"])
        async with http.post(b.url, json=retry, headers=headers) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            messages = _sse_messages(resp)
            notes: list[dict[str, Any]] = []
            async with asyncio.timeout(60):
                while len(notes) < steps:
                    message = await anext(messages)
                    assert "method" in message, f"an answer before the progress: {message}"
                    notes.append(message)
            gate.touch()  # now the tool may answer
            rest = [m async for m in messages]
        assert [n["method"] for n in notes] == ["notifications/progress"] * steps
        assert [n["params"]["progress"] for n in notes] == list(range(1, steps + 1))
        assert {n["params"]["progressToken"] for n in notes} == {"p2"}  # the retry's own
        (answer,) = rest  # the answer alone: no note twice
        assert answer["id"] == 2, answer
        assert json.loads(answer["result"]["content"][0]["text"]) == ACCEPT
        assert b.upstream_pids() == []  # served by A's call, through B


async def test_legacy_tasks_of_a_session_on_a_are_served_by_b(
    tmp_path: Path, redis_url: str
) -> None:
    async with lives(tmp_path, shared(redis_url)) as (proxies, http):
        proxies.command = SERVER
        a, b = await asyncio.gather(proxies.start(), proxies.start())
        on_a, elsewhere = await asyncio.gather(
            legacy(http, a.url, {"tasks": {}, "elicitation": {}}),
            legacy(http, a.url, {"tasks": {}}),
        )
        on_b = RawSession(http, b.url, session_id=on_a.session_id)
        # Created through B (the holder runs it), then read through B from the store.
        created = await ask(
            on_b, 3, "tools/call", name="ask", arguments={"question": "Q?"}, task={}
        )
        task_id = created.result["task"]["taskId"]
        got = await ask(on_b, 4, "tasks/get", taskId=task_id)
        assert got.result["taskId"] == task_id and got.result["status"] != "failed", got.body
        listed = await ask(on_b, 5, "tasks/list")
        assert [t["taskId"] for t in listed.result["tasks"]] == [task_id]
        # tasks/result on B: the question comes on its stream, the answer goes to B too.
        body = {"jsonrpc": "2.0", "id": 6, "method": "tasks/result", "params": {"taskId": task_id}}
        async with http.post(b.url, json=body, headers=on_b.headers()) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            final = None
            async for message in live_messages(resp):
                if message.get("method") == "elicitation/create":
                    related = message["params"]["_meta"]["io.modelcontextprotocol/related-task"]
                    assert related == {"taskId": task_id}
                    answer = {"jsonrpc": "2.0", "id": message["id"], "result": ACCEPT}
                    async with http.post(b.url, json=answer, headers=on_b.headers()) as posted:
                        assert posted.status == 202
                elif message.get("id") == 6:
                    final = message
                    break
        assert final is not None, "tasks/result ended without its answer"
        assert json.loads(final["result"]["content"][0]["text"])["content"] == {"answer": "yes"}
        assert (await ask(on_b, 7, "tasks/get", taskId=task_id)).result["status"] == "completed"
        # Cancel through B reaches the replica running the task; a finished one is refused.
        slow = await ask(on_b, 8, "tools/call", name="wait", arguments={"seconds": 30}, task={})
        slow_id = slow.result["task"]["taskId"]
        cancelled = await ask(on_b, 9, "tasks/cancel", taskId=slow_id)
        assert cancelled.result["status"] == "cancelled", cancelled.body
        result = await ask(on_b, 10, "tasks/result", taskId=slow_id)
        assert result.error["data"]["reason"] == "task_cancelled"
        assert (await ask(on_b, 11, "tasks/cancel", taskId=task_id)).error["code"] == -32602
        # Another session sees none of them, on either replica.
        other = RawSession(http, b.url, session_id=elsewhere.session_id)
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            assert (await ask(other, 12, method, taskId=task_id)).error["code"] == -32602
        assert (await ask(other, 13, "tasks/list")).result["tasks"] == []
        assert b.upstream_pids() == []


def the_whole_call(got: list[dict[str, Any]], steps: int) -> None:
    """``got`` is call 1's stream of ``slow`` with ``steps``: every progress once, in
    order, then its answer (then the stream's end)."""
    progress = [m["params"]["progress"] for m in got if m.get("method") == "notifications/progress"]
    assert progress == list(range(1, steps + 1))
    assert got[-2]["id"] == 1 and got[-2]["result"]["content"][0]["text"] == f"done {steps}"


async def streams_session(url: str) -> str:
    """A ``/ws`` session (the seed's streams declared) on the replica at ``url``; its
    socket closed, the session goes on."""
    async with socket_beside(url) as c:
        return await initialize(c, "2025-06-18", caps={"streams": {}})


def meta_id(msg: dict[str, Any]) -> str:
    body = msg.get("params") if "method" in msg else msg.get("result")
    assert isinstance(body, dict), msg
    return str(body["_meta"]["io.github.mcp-resume-proxy/eventId"])


def _stream_of(msg: dict[str, Any]) -> str:
    return meta_id(msg).rsplit(".", 1)[0]


async def _until(c: Client, rid: int) -> list[dict[str, Any]]:
    """Frames up to and with the answer to ``rid``."""
    got = []
    while not got or got[-1].get("id") != rid or "method" in got[-1]:
        got.append(await c.recv())
    return got


async def test_ws_on_the_other_replica_continues_the_session_and_its_streams(
    tmp_path: Path, redis_url: str
) -> None:
    steps = 20
    async with (
        lives(tmp_path, shared(redis_url), event_id_in_meta=True) as (proxies, _),
        contextlib.AsyncExitStack() as sockets,
    ):
        a, b = await asyncio.gather(proxies.start(), proxies.start())
        c = await sockets.enter_async_context(socket_beside(a.url))
        own = await sockets.enter_async_context(socket_beside(b.url))  # a session of B's own
        session_id, _ = await asyncio.gather(
            initialize(c, "2025-06-18", caps={"streams": {}}),
            initialize(own, "2025-06-18", caps={"streams": {}}),
        )
        await c.send(request(1, "tools/call", tool("slow", {"steps": steps, "delay": 0.03}, "p")))
        first = [await c.recv() for _ in range(4)]  # create, then progress 1..3
        await c.ws.close()
        create = first[0]["params"]["stream"]
        ref = {"streamId": create["streamId"], "resumeToken": create["resumeToken"]}
        # The socket reconnects to B: the session goes on there (A holds it).
        async with socket_beside(b.url, session_id) as c:
            echo, _ = await c.call(2, "tools/call", tool("echo", {"text": "via B"}))
            assert echo["result"]["content"][0]["text"] == "via B", echo
            await c.send(request(3, "stream/resume", {**ref, "lastEventId": meta_id(first[-1])}))
            rest = await _until(c, 3)
        assert rest[-1] == {"jsonrpc": "2.0", "id": 3, "result": {}}
        # (the echo's stream ends on this socket too: only the call's stream is compared)
        got = first + [m for m in rest[:-1] if _stream_of(m) == ref["streamId"]]
        the_whole_call(got, steps)
        seqs = [int(meta_id(m).rsplit(".", 1)[1]) for m in got]
        assert seqs == list(range(1, len(got) + 1))
        assert len(b.upstream_pids()) == 1  # B's own session's: A's answered through B
        # B's own session resumes A's stream with its token, as an HTTP session there does.
        polled, _ = await own.call(4, "stream/poll", ref)
        assert polled["result"]["status"] == "completed", polled
        await own.send(request(5, "stream/resume", {**ref, "lastEventId": meta_id(got[9])}))
        again = await _until(own, 5)
        assert again[:-1] == got[10:]


async def test_the_sdk_client_behind_round_robin_answers_every_question(
    tmp_path: Path, redis_url: str
) -> None:
    """The official SDK client, each POST to the next replica: every MRTR retry reaches
    the replica that does not hold the call, and every call ends with its answer."""
    async with lives(tmp_path, shared(redis_url)) as (proxies, _):
        proxies.command = SERVER
        a, b = await asyncio.gather(proxies.start(), proxies.start())
        client = await asyncio.create_subprocess_exec(
            sys.executable,
            str(ROOT / "tests" / "e2e" / "round_robin_client.py"),
            a.url,
            b.url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=ROOT,
        )
        try:
            async with asyncio.timeout(60):
                out, err = await client.communicate()
        finally:
            if client.returncode is None:
                client.kill()
                await client.wait()
        assert client.returncode == 0, err.decode()[-3000:]
    run = json.loads(out)
    assert run["asked"] == ["Q1", "one", "two", "?"]
    assert [json.loads(text) for text in run["answers"]] == [
        {"action": "accept", "content": {"answer": "re Q1"}},
        [
            {"action": "accept", "content": {"answer": "re one"}},
            {"action": "accept", "content": {"answer": "re two"}},
        ],
        {"action": "accept", "content": {"answer": "re ?"}},
    ]
    assert len(set(run["ports"])) == 2  # both replicas were asked


async def test_ws_for_a_session_nobody_can_place_is_told_to_come_back(tmp_path: Path) -> None:
    """Redis down at the upgrade: the session named may be live on another replica, so
    the socket is closed 1013 (try again), not 4404 (ended); with Redis back, an unknown
    session is 4404."""
    with RedisServer(tmp_path / "redis") as server:
        store = {"kind": "redis", "url": server.url, "namespace": "ws1013", "lease_seconds": 5}
        async with lives(tmp_path, store) as (proxies, _):
            a = await proxies.start()
            server.stop()
            async with socket_beside(a.url, "some-session-elsewhere") as c:
                assert (await c.closed_with())[0] == 1013
            server.start()
            async with socket_beside(a.url, "some-session-elsewhere") as c:
                assert await c.closed_with() == (4404, "Session not found")


async def test_a_forwarded_retry_whose_client_leaves_cancels_the_call(
    tmp_path: Path, redis_url: str
) -> None:
    """As on the holder: closing the retry's response cancels the call (it was no task)."""
    async with lives(tmp_path, shared(redis_url)) as (proxies, http):
        proxies.command = SERVER
        a, b = await asyncio.gather(proxies.start(), proxies.start())
        arguments = {"question": "q", "then_wait": 60}
        caps = {"elicitation": {}}  # no Tasks extension: the call cannot become a task
        first = await Modern(http, a.url, caps).call("ask", arguments)
        (key,) = first.result["inputRequests"]
        retry = {
            "name": "ask",
            "arguments": arguments,
            "requestState": first.result["requestState"],
            "inputResponses": {key: ACCEPT},
        }

        async def modern_on_a() -> dict[str, Any]:
            async with http.get(a.url.removesuffix("/mcp") + "/healthz") as resp:
                return dict((await resp.json())["modern"])

        leaving = asyncio.create_task(Modern(http, b.url, caps).send("tools/call", retry))
        try:  # A took the answer and runs the call on (60 s to go)
            await eventually(
                lambda: _is(modern_on_a(), awaiting_input=0, calls=1),
                what="A to continue the call",
            )
        finally:
            leaving.cancel()  # the client leaves B
            await asyncio.gather(leaving, return_exceptions=True)
        await eventually(lambda: _is(modern_on_a(), calls=0), what="A to cancel the call")


async def _is(health: Awaitable[dict[str, Any]], **expected: int) -> bool:
    got = await health
    return all(got[k] == v for k, v in expected.items())


async def test_an_answer_sent_through_the_other_replica_outlives_a_store_restart(
    tmp_path: Path,
) -> None:
    """A client on B answers a question of A's server (over ``/ws``, then by ``POST``)
    while Redis restarts: the answer is sent on until the store is back (the holder drops
    one it already had), and each call ends with it. Nemesis seed 3697101155 lost one."""
    with restartable_redis(tmp_path) as (server, store):
        async with lives(tmp_path, store) as (proxies, http):
            a, b = await asyncio.gather(proxies.start(), proxies.start())
            on_a = await legacy(http, a.url, {"elicitation": {}})

            async def restart_store() -> None:
                server.stop()
                await asyncio.sleep(1.0)
                server.start()

            # Over /ws on B: the answer is a frame of its own.
            async with socket_beside(b.url, on_a.session_id) as c:
                await c.send(request(1, "tools/call", tool("ask", {"question": "by ws?"})))
                question = await c.recv()
                while question.get("method") != "elicitation/create":
                    question = await c.recv()
                restarting = asyncio.create_task(restart_store())
                await asyncio.sleep(0.2)  # (the store is down)
                await c.send({"jsonrpc": "2.0", "id": question["id"], "result": ACCEPT})
                frames = [await c.recv()]
                while frames[-1].get("id") != 1:
                    frames.append(await c.recv())
                await restarting
            refusals = [f for f in frames if "error" in f]
            assert refusals == [] and "yes" in json.dumps(frames[-1]["result"]), frames
            # By POST on B: the answer's POST is accepted once the store is back.
            on_b = RawSession(http, b.url, session_id=on_a.session_id)
            body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call"}
            body["params"] = {"name": "ask", "arguments": {"question": "by post?"}}
            async with http.post(b.url, json=body, headers=on_b.headers()) as resp:
                final = None
                async for message in live_messages(resp):
                    if message.get("method") == "elicitation/create":
                        restarting = asyncio.create_task(restart_store())
                        await asyncio.sleep(0.2)
                        answer = {"jsonrpc": "2.0", "id": message["id"], "result": ACCEPT}
                        async with http.post(b.url, json=answer, headers=on_b.headers()) as got:
                            assert got.status == 202, await got.text()
                        await restarting
                    elif message.get("id") == 2:
                        final = message
                        break
            assert final is not None and "yes" in json.dumps(final["result"]), final


async def test_ws_following_a_stream_the_store_cannot_read_is_closed_1013(
    tmp_path: Path,
) -> None:
    """A socket on B follows a call A runs; Redis stays down past
    ``unavailable_wait_seconds``: the socket is closed 1013 (try again later), not left
    silent, and once Redis is back a socket on B resumes the rest, once each."""
    steps = 40
    with restartable_redis(tmp_path, unavailable_wait_seconds=0.5) as (server, store):
        async with lives(tmp_path, store, event_id_in_meta=True) as (proxies, _):
            a, b = await asyncio.gather(proxies.start(), proxies.start())
            session_id = await streams_session(a.url)
            async with socket_beside(b.url, session_id) as c:
                params = tool("slow", {"steps": steps, "delay": 0.1}, "p")
                await c.send(request(1, "tools/call", params))
                got = [await c.recv() for _ in range(3)]  # create, then progress 1, 2
                server.stop()
                code, _ = await c.closed_with()
            assert code == 1013
            server.start()
            create = got[0]["params"]["stream"]
            ref = {"streamId": create["streamId"], "resumeToken": create["resumeToken"]}
            async with socket_beside(b.url, session_id) as c:
                await c.send(request(2, "stream/resume", {**ref, "lastEventId": meta_id(got[-1])}))
                rest = await _until(c, 2)
    assert rest[-1] == {"jsonrpc": "2.0", "id": 2, "result": {}}
    got += [m for m in rest[:-1] if _stream_of(m) == ref["streamId"]]
    the_whole_call(got, steps)


async def test_ws_resume_of_another_sessions_stream_the_store_cannot_read_is_answered(
    tmp_path: Path,
) -> None:
    """A ``stream/resume`` over ``/ws`` naming another session's stream while Redis is
    down past ``unavailable_wait_seconds`` is answered (its id, ``store_unavailable``),
    not left without an answer; once Redis is back the same request replays it."""
    with restartable_redis(tmp_path, unavailable_wait_seconds=0.3) as (server, store):
        async with (
            lives(tmp_path, store, event_id_in_meta=True) as (proxies, _),
            contextlib.AsyncExitStack() as sockets,
        ):
            a = await proxies.start()
            maker = await sockets.enter_async_context(socket_beside(a.url))
            other = await sockets.enter_async_context(socket_beside(a.url))
            await initialize(maker, "2025-06-18", caps={"streams": {}})
            await initialize(other, "2025-06-18", caps={"streams": {}})
            made = await maker.call(1, "tools/call", tool("slow", {"steps": 3, "delay": 0}, "p"))
            create = next(m for m in made[1] if m.get("method") == "notifications/stream/create")
            ref = {
                "streamId": create["params"]["stream"]["streamId"],
                "resumeToken": create["params"]["stream"]["resumeToken"],
            }
            server.stop()
            refused, _ = await other.call(2, "stream/resume", ref)
            assert refused["error"]["code"] == -32000, refused
            assert refused["error"]["data"]["reason"] == "store_unavailable", refused
            server.start()
            await other.send(request(3, "stream/resume", ref))
            again = await _until(other, 3)
    assert again[-1] == {"jsonrpc": "2.0", "id": 3, "result": {}}
    answers = [m for m in again if m.get("id") == 1]
    assert [m["result"]["content"][0]["text"] for m in answers] == ["done 3"], again


async def test_frames_a_socket_on_b_wrote_but_its_client_lost_are_resumed_on_a(
    tmp_path: Path, redis_url: str
) -> None:
    """A socket on B follows A's call and writes frames its client never reads (the
    socket is cut with them in flight); resumed on A from the last frame the client had,
    the call's stream goes on from there: B's writes are no acknowledgement (a write
    proves nothing), so A has not moved past them. Nemesis seed 3020932248 (ws-0#2)."""
    steps = 30
    async with lives(tmp_path, shared(redis_url), event_id_in_meta=True) as (proxies, _):
        a, b = await asyncio.gather(proxies.start(), proxies.start())
        session_id = await streams_session(a.url)
        async with socket_beside(b.url, session_id) as c:
            params = tool("slow", {"steps": steps, "delay": 0.05}, "p")
            await c.send(request(1, "tools/call", params))
            got = [await c.recv() for _ in range(4)]  # create, then progress 1..3
            await asyncio.sleep(1.5)  # B writes more (and would tell A) while unread
            c.ws.transport.abort()  # cut, the unread frames with it
        create = got[0]["params"]["stream"]
        ref = {"streamId": create["streamId"], "resumeToken": create["resumeToken"]}
        async with socket_beside(a.url, session_id) as c:
            await c.send(request(2, "stream/resume", {**ref, "lastEventId": meta_id(got[-1])}))
            rest = await _until(c, 2)
    got += [m for m in rest[:-1] if _stream_of(m) == ref["streamId"]]
    the_whole_call(got, steps)
