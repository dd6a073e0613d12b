"""The WebSocket downstream (``/ws``) against the real proxy in front of the SDK fixture,
with a real WebSocket client (the ``websockets`` library, not the server's aiohttp)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Origin

from proxy.downstream.websocket import SESSION_META
from tests.downstream.ws_client import Client, initialize, request, socket, tool, ws_base
from tests.support import FIXTURE, ROOT, run_proxy, stop_proxy, wait_for_log

FLOOD = [sys.executable, str(ROOT / "tests" / "fixtures" / "flood_server.py")]
EVENT_META = "io.github.mcp-resume-proxy/eventId"


# ---------------------------------------------------------------------- basics
async def test_initialize_list_and_echo(tmp_path: Path) -> None:
    async with run_proxy(tmp_path, FIXTURE) as proxy, socket(proxy) as c:
        session_id = await initialize(c)
        assert len(session_id) >= 32
        listed, _ = await c.call(1, "tools/list")
        assert {"echo", "slow", "burst", "ask"} <= {t["name"] for t in listed["result"]["tools"]}
        echoed, _ = await c.call("two", "tools/call", tool("echo", {"text": "héllo"}))
        assert echoed["result"]["content"][0]["text"] == "héllo"
        assert "_meta" not in echoed["result"] or SESSION_META not in echoed["result"]["_meta"]
        # each request has its own virtual connection: a quick answer overtakes a slow one
        await c.send(request(3, "tools/call", tool("slow", {"steps": 2, "delay": 0.5})))
        quick, _ = await c.call(4, "tools/call", tool("echo", {"text": "first"}))
        assert quick["result"]["content"][0]["text"] == "first"
        slow = await c.recv()
        assert slow["id"] == 3 and slow["result"]["content"][0]["text"] == "done 2"


async def test_server_request_answered_over_the_socket(tmp_path: Path) -> None:
    async with run_proxy(tmp_path, FIXTURE) as proxy, socket(proxy) as c:
        await initialize(c, caps={"elicitation": {}})
        await c.send(request(1, "tools/call", tool("ask", {"question": "colour?"})))
        ask = await c.recv()
        assert ask["method"] == "elicitation/create", ask
        answer = {"action": "accept", "content": {"answer": "blue"}}
        await c.send({"jsonrpc": "2.0", "id": ask["id"], "result": answer})
        reply = await c.recv()
        assert reply["id"] == 1 and reply["result"]["content"][0]["text"] == "blue"


# ---------------------------------------------------------------------- D2: cut, resume
def meta_id(msg: dict[str, Any]) -> str:
    body = msg.get("params") if "method" in msg else msg.get("result")
    assert isinstance(body, dict), msg
    event_id: str = body["_meta"][EVENT_META]
    return event_id


@pytest.mark.parametrize(
    ("name", "via", "polling"),
    [("burst", "header", None), ("slow", "query", None), ("slow", "header", 0.2)],
)
async def test_d2_cut_and_resumed_is_exact(
    tmp_path: Path, seed: int, name: str, via: str, polling: float | None
) -> None:
    """Cut at seeded random points; with ``polling`` the proxy also ends the virtual
    connections (SEP-1699 closes), the resume's own included: the pump re-attaches."""
    rng = random.Random(seed)
    n = 800 if name == "burst" else 40
    delay = 0.05 if polling else 0.02
    args = {"n": n, "size": 200} if name == "burst" else {"steps": n, "delay": delay}
    got: list[dict[str, Any]] = []  # the call's messages, as received

    async def read(c: Client, count: int | None, resume_id: int | None = None) -> bool:
        """Read the call's messages until ``count`` more came (then cut) or ``{}``."""
        while count is None or count > 0:
            msg = await c.recv()
            if resume_id is not None and msg.get("id") == resume_id:
                assert msg["result"] == {}, msg
                return True
            got.append(msg)
            count = None if count is None else count - 1
        if rng.random() < 0.5:
            c.ws.transport.abort()  # the network dies
        else:
            await c.ws.close()  # the client leaves
        return False

    streams = {"event_id_in_meta": True}
    sse = {"max_stream_seconds": polling}
    async with run_proxy(tmp_path, FIXTURE, streams=streams, sse=sse) as proxy:
        async with socket(proxy) as c:
            version = "2025-11-25" if polling else "2025-06-18"
            session_id = await initialize(c, version, caps={"streams": {}})
            await c.send(request(1, "tools/call", tool(name, args, token="p")))
            await read(c, rng.randint(1, n))
        create = got[0]["params"]["stream"]
        ref = {"streamId": create["streamId"], "resumeToken": create["resumeToken"]}
        for attempt in range(10):
            async with socket(proxy, session_id, via) as c:
                params = {**ref, "lastEventId": meta_id(got[-1])}
                await c.send(request(100 + attempt, "stream/resume", params))
                cut = rng.randint(1, n) if attempt < 2 else None
                if await read(c, cut, resume_id=100 + attempt):
                    break
        else:
            raise AssertionError("the resume never completed")
        if polling:
            assert "ws_reattached" in proxy.log_text()
    assert got[0]["method"] == "notifications/stream/create"
    progress = [m["params"]["progress"] for m in got[1:-2]]
    assert progress == list(range(1, n + 1)), f"seed {seed}"
    assert got[-2]["id"] == 1 and got[-2]["result"]["content"][0]["text"].endswith(str(n))
    assert got[-1] == {**got[-1], "method": "notifications/stream/end"}
    assert got[-1]["params"]["streamId"] == ref["streamId"]
    seqs = [int(meta_id(m).rsplit(".", 1)[1]) for m in got]
    assert seqs == list(range(1, len(got) + 1)), f"gap or duplicate, seed {seed}"


# ---------------------------------------------------------------------- server-side closes
async def test_without_streams_the_answer_survives_polling_closes(tmp_path: Path) -> None:
    sse = {"max_stream_seconds": 0.3}
    async with run_proxy(tmp_path, FIXTURE, sse=sse) as proxy, socket(proxy) as c:
        await initialize(c, version="2025-11-25")
        args = {"steps": 12, "delay": 0.1}
        resp, before = await c.call(1, "tools/call", tool("slow", args, token="s"))
        assert [m["params"]["progress"] for m in before] == list(range(1, 13))
        assert resp["result"]["content"][0]["text"] == "done 12"
        log = proxy.log_text()
        assert "stream_polling_close" in log and "ws_reattached" in log


async def test_overflow_block_is_acknowledged_by_the_reattach(tmp_path: Path) -> None:
    """A stream full of unacknowledged events asks its client to reconnect (overflow:
    block); on a socket the pump does, and that acknowledges what it wrote."""
    sessions = {"stream_max_bytes": 32 * 1024}
    async with run_proxy(tmp_path, FIXTURE, sessions=sessions) as proxy, socket(proxy) as c:
        await initialize(c)
        n = 1000  # ~200 kB through a 32 kB stream bound
        resp, before = await c.call(1, "tools/call", tool("burst", {"n": n}, token="b"))
        assert [m["params"]["progress"] for m in before] == list(range(1, n + 1))
        assert resp["result"]["content"][0]["text"] == f"burst {n}"
        log = proxy.log_text()
        assert "ack_solicited" in log and "ws_reattached" in log


async def test_a_stalled_reader_is_cut_and_reattached_without_loss(tmp_path: Path) -> None:
    n = 40_000  # ~20 MB: more than the socket buffers between us can hide
    sse = {"max_queued_bytes": 256 * 1024}
    async with (
        run_proxy(tmp_path, FLOOD, sse=sse) as proxy,
        socket(proxy, max_queue=1) as c,
    ):
        await initialize(c)
        await c.send(request(1, "tools/call", tool("flood", {"n": n, "size": 500}, token=1)))
        await wait_for_log(proxy, "client_too_slow")  # we read nothing meanwhile
        progress = []
        while True:
            msg = await c.recv()
            if msg.get("id") == 1:
                break
            progress.append(msg["params"]["progress"])
        assert progress == list(range(1, n + 1))
        assert msg["result"]["content"][0]["text"] == f"flood {n}"
        assert "ws_reattached" in proxy.log_text()


# ---------------------------------------------------------------------- refusals
async def test_bad_frames_get_errors_and_the_socket_keeps_serving(tmp_path: Path) -> None:
    sessions = {"max_message_bytes": 64 * 1024}
    async with run_proxy(tmp_path, FIXTURE, sessions=sessions) as proxy, socket(proxy) as c:

        async def refused(frame: str | bytes) -> dict[str, Any]:
            await c.ws.send(frame)
            msg = await c.recv()
            assert "error" in msg, msg
            return msg

        binary = await refused(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
        assert binary["id"] is None and binary["error"]["code"] == -32600
        assert binary["error"]["data"]["reason"] == "invalid_message"
        garbage = await refused("{not json")
        assert garbage["id"] is None and garbage["error"]["code"] == -32700
        assert (await refused("[]"))["error"]["data"]["reason"] == "invalid_message"
        early = await refused(json.dumps(request(7, "tools/list")))
        assert early["id"] == 7 and early["error"]["data"]["reason"] == "missing_session"
        await initialize(c)  # 2025-06-18: no batches
        batch = await refused(json.dumps([request(8, "ping"), request(9, "ping")]))
        assert batch["error"]["data"]["reason"] == "bad_request"
        again = await refused(json.dumps(request(10, "initialize", {})))
        assert again["id"] == 10 and again["error"]["data"]["reason"] == "bad_request"
        wrong = await refused(json.dumps({"jsonrpc": "1.0", "id": 11, "method": "ping"}))
        assert wrong["id"] == 11 and wrong["error"]["code"] == -32600
        listed, _ = await c.call(12, "tools/list")  # still serving
        assert listed["result"]["tools"]
        await c.ws.send("x" * (65 * 1024))
        assert (await c.closed_with())[0] == 1009


async def test_batches_where_the_revision_allows_them(tmp_path: Path) -> None:
    async with run_proxy(tmp_path, FIXTURE) as proxy, socket(proxy) as c:
        await initialize(c, version="2025-03-26")
        await c.send([request(1, "tools/call", tool("echo", {"text": "a"})), request(2, "ping")])
        replies = {m["id"]: m for m in [await c.recv(), await c.recv()]}
        assert replies[1]["result"]["content"][0]["text"] == "a"
        assert replies[2]["result"] == {}


@pytest.mark.parametrize("via", ["header", "query"])
async def test_unknown_session_is_closed_4404(tmp_path: Path, via: str) -> None:
    async with run_proxy(tmp_path, FIXTURE) as proxy, socket(proxy, "no-such", via) as c:
        assert await c.closed_with() == (4404, "Session not found")


async def test_upgrade_refusals(tmp_path: Path) -> None:
    async with run_proxy(tmp_path, FIXTURE) as proxy:
        with pytest.raises(InvalidStatus) as info:
            async with connect(ws_base(proxy), origin=Origin("http://evil.example"), proxy=None):
                pass
        assert info.value.response.status_code == 403
        body = json.loads(info.value.response.body or b"{}")
        assert body["error"]["data"]["reason"] == "forbidden_origin"
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.WSServerHandshakeError) as hs:
                await http.ws_connect(ws_base(proxy), headers={"Host": "evil.example"})
            assert hs.value.status == 421
            async with http.get(proxy.base + "/ws") as resp:
                assert resp.status == 426
                assert (await resp.json())["error"]["data"]["reason"] == "upgrade_required"


# ---------------------------------------------------------------------- session life
async def test_reconnect_takes_over_and_a_crash_ends_the_socket(tmp_path: Path) -> None:
    no_restart = {"restart": False}  # (restarted servers: tests/upstream/test_respawn.py)
    async with run_proxy(tmp_path, FIXTURE, upstream=no_restart) as proxy, socket(proxy) as first:
        session_id = await initialize(first)
        async with socket(proxy, session_id) as second:
            await wait_for_log(proxy, "ws_standalone_taken_over")
            resp, _ = await second.call(1, "tools/call", tool("crash", {}))
            assert resp["error"]["code"] == -32000
            assert await second.closed_with() == (4404, "Session not found: it has ended")
        assert (await first.call(2, "ping"))[0]["error"]["data"]["reason"] == "session_not_found"


async def test_shutdown_closes_every_socket_going_away(tmp_path: Path) -> None:
    async with (
        run_proxy(tmp_path, FIXTURE) as proxy,
        socket(proxy) as bound,
        socket(proxy) as bare,
    ):
        await initialize(bound)
        assert await stop_proxy(proxy.process) == 0
        assert (await bound.closed_with())[0] == 1001
        assert (await bare.closed_with())[0] == 1001
