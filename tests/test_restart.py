"""The proxy survives its own restart on a SQLite store (issue 10).

A real proxy process in front of the legacy stdio fixture, killed with SIGKILL at a
seeded random moment of a long call, then started again on the same file. The client
resumes from the last event it received whole, as an SSE client does: every event it had
been sent is still there, nothing is repeated, the stream ends cleanly (the result, once,
if the call finished before the kill; else an error with ``data.reason:
proxy_restarted``), and no server process outlives the proxy that started it.

Replay a failure with its seed: ``pytest --seed N tests/test_restart.py``.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from pathlib import Path

import yaml

from tests.downstream.sse_client import RawSession, messages, read_events
from tests.modern.client import Modern
from tests.modern.support import SERVER as MODERN_SERVER
from tests.proxy_lives import lives, progress_of, read_some
from tests.support import (
    ROOT,
    stop_proxy,
    tool_call,
)


async def test_sigkill_at_a_random_moment_then_restart_on_the_same_file(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    steps = 30
    async with lives(tmp_path) as (proxies, http):
        first = await proxies.start()
        client = RawSession(http, first.url)
        await client.initialize()
        read_first = rng.randint(1, 12)
        resp = await http.post(
            first.url,
            json=tool_call(7, "slow", {"steps": steps, "delay": 0.03}, "t"),
            headers=client.headers(),
        )
        received, last_id = await read_some(resp, read_first)
        resp.close()  # the client is cut here ...
        await asyncio.sleep(rng.uniform(0, 1.4))  # ... and the proxy dies here: mid-call or after
        await proxies.kill(first)

        second = await proxies.start()
        post = await http.post(
            second.url, json=tool_call(8, "echo", {"text": "x"}), headers=client.headers()
        )
        assert post.status == 404, await post.text()  # the session is gone: re-initialize
        resp = await http.get(second.url, headers=client.headers(**{"Last-Event-ID": last_id}))
        assert resp.status == 200, await resp.text()
        rest = messages(await read_events(resp))
        received += rest
        progress = progress_of(received)
        assert progress == list(range(1, len(progress) + 1)), f"seed {seed}: {progress}"
        answers = [m for m in received if "result" in m or "error" in m]
        assert len(answers) == 1 and answers[0]["id"] == 7 and received[-1] is answers[0], received
        if "result" in answers[0]:
            assert len(progress) == steps
            assert answers[0]["result"]["content"][0]["text"] == f"done {steps}"
        else:
            assert answers[0]["error"]["data"] == {"reason": "proxy_restarted"}
        # The stream has ended: resuming from its last event says so, explicitly.
        ids_seen = [e for e in rest]
        assert ids_seen
        again = await http.get(second.url, headers=client.headers(**{"Last-Event-ID": last_id}))
        assert again.status == 200
        assert messages(await read_events(again)) == rest  # the same, exactly


async def test_stream_resume_from_a_new_session_after_restart(tmp_path: Path) -> None:
    """The seed's protocol: the announced stream is resumed by a re-initialized client."""
    async with lives(tmp_path) as (proxies, http):
        first = await proxies.start()
        client = RawSession(http, first.url)
        await client.initialize_with({"streams": {}})
        resp = await http.post(
            first.url,
            json=tool_call(3, "slow", {"steps": 400, "delay": 0.05}, "p"),
            headers=client.headers(),
        )
        received, last_id = await read_some(resp, 4)  # create + 3 progress
        resp.close()
        create = received[0]["params"]["stream"]
        await proxies.kill(first)

        second = await proxies.start()
        fresh = RawSession(http, second.url)
        await fresh.initialize_with({"streams": {}})
        bad = {"streamId": create["streamId"], "resumeToken": "forged"}
        refused = messages(await fresh.request(1, "stream/poll", bad))
        assert refused[0]["error"]["data"]["reason"] == "invalid_token"
        ref = {"streamId": create["streamId"], "resumeToken": create["resumeToken"]}
        poll = messages(await fresh.request(2, "stream/poll", {**ref, "lastEventId": last_id}))
        assert poll[0]["result"]["status"] == "completed"
        assert poll[0]["result"]["hasError"] is True
        events = await fresh.request(4, "stream/resume", {**ref, "lastEventId": last_id})
        rest = messages(events)
        progress = progress_of(received + rest)
        assert progress == list(range(1, len(progress) + 1))
        error = next(m for m in rest if m.get("id") == 3)
        assert error["error"]["data"] == {"reason": "proxy_restarted"}
        assert rest[-2] == {
            "jsonrpc": "2.0",
            "method": "notifications/stream/end",
            "params": {"streamId": create["streamId"]},
        }
        assert rest[-1] == {"jsonrpc": "2.0", "id": 4, "result": {}}


async def test_a_graceful_restart_keeps_completed_streams_resumable(tmp_path: Path) -> None:
    async with lives(tmp_path) as (proxies, http):
        first = await proxies.start()
        client = RawSession(http, first.url)
        await client.initialize()
        events = await client.request(
            5, "tools/call", tool_call(5, "slow", {"steps": 5, "delay": 0.01}, "g")["params"]
        )
        whole = messages(events)
        ids = [e.id for e in events if e.data]
        assert await stop_proxy(first.process) == 0
        second = await proxies.start()
        health = await (await http.get(second.url.replace("/mcp", "/healthz"))).json()
        assert health["store"]["kind"] == "sqlite" and health["store"]["last_error"] is None
        resp = await http.get(second.url, headers=client.headers(**{"Last-Event-ID": ids[1]}))
        assert resp.status == 200
        assert messages(await read_events(resp)) == whole[2:]
        # A position the stream never reached, an id of no stream: explicit errors.
        for wrong, status in ((ids[-1] + "9", 400), ("ffffff.1.1", 404)):
            resp = await http.get(second.url, headers=client.headers(**{"Last-Event-ID": wrong}))
            assert resp.status == status, (wrong, await resp.text())


async def test_a_lost_store_file_gives_explicit_errors_never_a_replay(tmp_path: Path) -> None:
    async with lives(tmp_path) as (proxies, http):
        first = await proxies.start()
        client = RawSession(http, first.url)
        await client.initialize()
        events = await client.request(
            5, "tools/call", tool_call(5, "echo", {"text": "hi"})["params"]
        )
        last = next(e.id for e in events if e.id)
        assert await stop_proxy(first.process) == 0
        for suffix in ("", "-wal", "-shm"):
            Path(f"{tmp_path / 'store.db'}{suffix}").unlink(missing_ok=True)
        second = await proxies.start()
        resp = await http.get(second.url, headers=client.headers(**{"Last-Event-ID": last}))
        assert resp.status == 404, await resp.text()


async def test_a_persistent_store_refuses_to_start_without_a_token_secret(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"store": {"kind": "sqlite", "path": str(tmp_path / "s.db")}}))
    env = {k: v for k, v in os.environ.items() if k != "MCP_RESUME_PROXY_TOKEN_SECRET"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        "--config",
        str(config),
        "--",
        "true",
        stderr=asyncio.subprocess.PIPE,
        cwd=str(ROOT),
        env=env,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2
    assert b"streams.token_secret" in err and b"MCP_RESUME_PROXY_TOKEN_SECRET" in err


STUBBORN = r"""
import json, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("method") == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {},
                  "serverInfo": {"name": "stubborn", "version": "0"}}
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
while True:  # stdin closed: a badly made server lives on
    time.sleep(1)
"""


async def test_children_die_with_a_sigkilled_proxy_even_if_they_ignore_eof(
    tmp_path: Path,
) -> None:
    """PR_SET_PDEATHSIG: a server that ignores both SIGTERM and the end of its input
    still dies with the proxy that started it."""
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    async with lives(tmp_path) as (proxies, http):
        proxies.command = [sys.executable, str(script)]
        first = await proxies.start()
        client = RawSession(http, first.url)
        await client.initialize()
        assert len(first.upstream_pids()) == 1
        await proxies.kill(first)  # fails unless the server process is gone


async def test_an_mrtr_retry_after_a_restart_gets_proxy_restarted(tmp_path: Path) -> None:
    """A 2026-07-28 call waiting for its client's input dies with the proxy (SIGKILL); the
    client's retry reaches the proxy started again on the same file (the same secret, so
    its ``requestState`` verifies): ``-32000 proxy_restarted``, as a task of that life
    gets, and the request sent anew is served. Was: ``-32602`` (the nemesis on SQLite)."""
    async with lives(tmp_path) as (proxies, http):
        proxies.command = MODERN_SERVER
        first = await proxies.start()
        asked = await Modern(http, first.url).call("ask_twice")
        (key,) = asked.result["inputRequests"]
        await proxies.kill(first)
        second = await proxies.start()
        again = Modern(http, second.url)
        answer = {key: {"action": "accept", "content": {"answer": "A"}}}
        retry = {"name": "ask_twice", "arguments": {}, "inputResponses": answer}
        retry["requestState"] = asked.result["requestState"]
        lost = await again.send("tools/call", retry)
        assert lost.error["code"] == -32000, lost.body
        assert lost.error["data"] == {"reason": "proxy_restarted"}
        assert "mrtr_holder_restarted" in second.log_path.read_text()
        anew = await again.call("ask_twice")
        assert anew.result["resultType"] == "input_required", anew.body
