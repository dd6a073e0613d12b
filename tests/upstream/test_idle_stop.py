"""Sessions nobody closes cost nothing for long (issue 20, item 5): with
``upstream.stop_idle_seconds`` an idle session's stdio process is stopped, the session and
its streams kept; its next request starts the process again, re-initialized with the
client's own ``initialize`` (the respawn's machinery). A real proxy in front of the idle
fixture (``tests/fixtures/idle_server.py``: the legacy fixture plus ``whoami``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.config_upstream import UpstreamConfig
from proxy.core import jsonrpc
from proxy.core.handshake import HandshakeStep
from proxy.core.jsonrpc import Message
from proxy.core.sse import SSEDecoder
from proxy.upstream.base import UpstreamContext
from proxy.upstream.stdio import StdioUpstream
from tests.downstream.sse_client import RawSession, messages, read_events
from tests.support import (
    ROOT,
    RunningProxy,
    alive,
    descendants,
    eventually,
    initialize_request,
    log_events,
    run_proxy,
    run_proxy_on,
    tool_call,
)

IDLE_FIXTURE = [sys.executable, str(ROOT / "tests" / "fixtures" / "idle_server.py")]
IDLE_S = 0.5  # short: the tests wait on conditions, never on this
QUICK_STOP = {"stop_idle_seconds": IDLE_S, "stop_grace_seconds": 1}


async def whoami(client: RawSession, rid: int) -> tuple[dict[str, Any], str]:
    """What the session's server process says it is, and the id of the stream's priming
    event (2025-11-25: an id before any message), to resume after."""
    events = await client.request(rid, "tools/call", tool_call(rid, "whoami", {})["params"])
    answer = next(m for m in messages(events) if m.get("id") == rid)
    primed = events[0].id
    assert primed is not None and not events[0].data
    return json.loads(answer["result"]["content"][0]["text"]), primed


async def status(http: aiohttp.ClientSession, proxy: RunningProxy) -> dict[str, Any]:
    async with http.get(proxy.base + "/status.json") as resp:
        body: dict[str, Any] = await resp.json()
        return body


def servers_of(proxy: RunningProxy) -> set[int]:
    """The live processes under the proxy: its server processes."""
    return descendants(proxy.process.pid)


async def test_idle_sessions_lose_their_processes_then_a_call_starts_one_again(
    tmp_path: Path,
) -> None:
    sessions = 3
    async with (
        run_proxy(tmp_path, IDLE_FIXTURE, upstream=QUICK_STOP) as proxy,
        aiohttp.ClientSession() as http,
    ):
        clients, first = [], []
        for _ in range(sessions):  # short sessions that never send DELETE
            client = RawSession(http, proxy.url)
            await client.initialize()
            first.append(await whoami(client, 2))
            clients.append(client)
        await eventually(lambda: not servers_of(proxy), what="every server process stopped")

        async def all_shown_stopped() -> bool:  # the stop's bookkeeping ends after the exit
            page = await status(http, proxy)
            assert page["sessions_total"] == sessions
            return all(s["stopped_idle"] and s["upstream_pid"] is None for s in page["sessions"])

        await eventually(all_shown_stopped, what="/status.json to show every process stopped")
        async with http.get(proxy.base + "/status") as resp:
            assert (await resp.text()).count("process stopped (idle)") == sessions

        # The session's stored stream is still readable, without a process.
        (before, primed) = first[0]
        resume = clients[0].headers(**{"Last-Event-ID": primed})
        async with http.get(proxy.url, headers=resume) as resp:
            assert resp.status == 200, await resp.text()
            (replayed,) = messages(await read_events(resp))
        assert json.loads(replayed["result"]["content"][0]["text"]) == before

        # An open GET stream keeps the session from idling (and starts nothing by itself),
        # so that what follows is not stopped again under the test.
        standalone = await http.get(proxy.url, headers=clients[0].headers())
        assert standalone.status == 200, await standalone.text()
        try:
            # The next call starts the process again: a new pid, initialized by the
            # client's own initialize (the SDK server answers nothing before it).
            after, _ = await whoami(clients[0], 3)
            assert after["pid"] != before["pid"] and alive(after["pid"])
            assert after["client"] == before["client"] == "raw"
            assert after["protocolVersion"] == before["protocolVersion"]
            assert servers_of(proxy) == {after["pid"]}
            page = await status(http, proxy)
            woken = next(s for s in page["sessions"] if s["upstream_pid"] == after["pid"])
            assert not woken["stopped_idle"]
            async with http.get(proxy.base + "/metrics") as resp:
                metrics = await resp.text()
            log = proxy.log_text()
        finally:
            standalone.close()
    assert 'mcp_resume_proxy_upstream_idle_stops_total{upstream="default"} 3.0' in metrics
    assert 'upstream_starts_total{for="idle_restart",upstream="default"} 1.0' in metrics
    assert len(log_events(log, "upstream_idle_stopped")) == sessions
    assert [e["pid"] for e in log_events(log, "upstream_idle_restarted")] == [after["pid"]]
    assert log_events(log, "upstream_restarted") == []  # not a crash: nothing failed


async def test_a_request_in_flight_keeps_its_process_however_long(tmp_path: Path) -> None:
    steps, delay = 8, 0.25  # a call four times as long as the idle time
    async with (
        run_proxy(tmp_path, IDLE_FIXTURE, upstream=QUICK_STOP) as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = RawSession(http, proxy.url)
        await client.initialize()
        body = tool_call(2, "slow", {"steps": steps, "delay": delay}, "p")
        resp = await http.post(proxy.url, json=body, headers=client.headers())
        decoder, progress = SSEDecoder(), None
        async for chunk in resp.content.iter_any():  # the first progress, then hang up
            progress = next((e.id for e in decoder.feed(chunk) if "progress" in e.data), None)
            if progress is not None:
                break
        resp.close()
        assert progress is not None
        (pid,) = servers_of(proxy)

        async def finished() -> bool:
            page = await status(http, proxy)
            (session,) = page["sessions"]
            if all(s["state"] == "completed" for s in session["streams"] if s["id"]):
                return True  # idle from now on: its process may be stopped
            assert not session["stopped_idle"], "stopped with a request in flight"
            return False

        await eventually(finished, what="the call done, its client away")
        resumed = client.headers(**{"Last-Event-ID": progress})
        async with http.get(proxy.url, headers=resumed) as resp:
            assert resp.status == 200, await resp.text()
            rest = messages(await read_events(resp))
        assert rest[-1]["result"]["content"][0]["text"] == f"done {steps}"
        stopped = log_events(proxy.log_text(), "upstream_idle_stopped")
        assert [e["pid"] for e in stopped] in ([], [pid])
        # Idle now: stopped like any other.
        await eventually(lambda: not servers_of(proxy), what="the process stopped after it")


async def test_only_the_servers_with_the_setting_stop_their_processes(tmp_path: Path) -> None:
    """``upstream.stop_idle_seconds`` is a default for every server; a server sets its own
    (null: never). The session without it, idle as long, keeps its process."""
    config = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "upstream": QUICK_STOP,
        "servers": {
            "keeps": {"command": IDLE_FIXTURE, "stop_idle_seconds": None},
            "stops": {"command": IDLE_FIXTURE},
        },
        "log": {"format": "json", "level": "debug"},
    }
    async with run_proxy_on(tmp_path, config) as proxy, aiohttp.ClientSession() as http:
        kept = RawSession(http, proxy.base + "/servers/keeps/mcp")
        await kept.initialize()  # idle first: longer than the other
        (kept_pid,) = servers_of(proxy)
        stops = RawSession(http, proxy.base + "/servers/stops/mcp")
        await stops.initialize()
        await eventually(
            lambda: len(log_events(proxy.log_text(), "upstream_idle_stopped")) == 1,
            what="the session of 'stops' idle-stopped",
        )
        assert servers_of(proxy) == {kept_pid}
        page = await status(http, proxy)
        by_server = {s["upstream"]: s for s in page["sessions"]}
        assert by_server["stops"]["stopped_idle"] and not by_server["keeps"]["stopped_idle"]
        assert by_server["keeps"]["upstream_pid"] == kept_pid
        answer, _ = await whoami(kept, 2)
        assert answer["pid"] == kept_pid


@pytest.mark.parametrize("restart", [True, False], ids=["restart", "no-restart"])
async def test_a_process_that_fails_to_start_again_is_an_exit_like_any_other(
    tmp_path: Path, restart: bool
) -> None:
    """The command works once, then exits at start. With ``upstream.restart`` (and
    ``restart_max: 1``) the request that woke it gets ``upstream_restarted`` and the next
    failed start is a crash loop that ends the session; without, the session ends at once
    and the request gets "MCP server gone"."""
    once = tmp_path / "started"
    fixture = " ".join(IDLE_FIXTURE)
    command = ["sh", "-c", f"test -e {once} && exit 7; touch {once}; exec {fixture}"]
    upstream = {**QUICK_STOP, "restart_max": 1, "restart": restart}
    async with (
        run_proxy(tmp_path, command, upstream=upstream) as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = RawSession(http, proxy.url)
        await client.initialize()
        await eventually(lambda: not servers_of(proxy), what="the process stopped, idle")
        echo = tool_call(2, "echo", {"text": "x"})["params"]
        events = await client.request(2, "tools/call", echo)
        (answer,) = [m for m in messages(events) if m.get("id") == 2]
        if restart:
            assert answer["error"]["data"]["reason"] == "upstream_restarted", answer
        else:
            assert answer["error"]["message"].startswith("MCP server gone"), answer

        async def ended() -> bool:
            body = tool_call(3, "echo", {"text": "y"})
            async with http.post(proxy.url, json=body, headers=client.headers()) as resp:
                return resp.status == 404

        await eventually(ended, what="the session ended")
        assert bool(log_events(proxy.log_text(), "upstream_crash_loop")) is restart


async def test_a_message_sent_as_the_stop_begins_waits_for_the_next_process() -> None:
    """The transport alone: a request queued right after ``stop_idle`` (before the stop
    has run at all) never goes to the process being stopped; it is answered by the next
    one, which got the client's initialize first, and nothing counts as a crash."""
    got: asyncio.Queue[Message] = asyncio.Queue()
    restarted: list[str] = []
    up = StdioUpstream(
        UpstreamContext(
            UpstreamConfig(command=IDLE_FIXTURE, stop_grace_seconds=1),
            "idle-transport-session",
            on_message=lambda msg, origin: got.put_nowait(msg),
            on_closed=lambda reason: None,
            on_restarted=restarted.append,
        )
    )

    async def answer(rid: int) -> dict[str, Any]:
        msg = await asyncio.wait_for(got.get(), 30)
        assert msg.id == rid, msg.raw
        return msg.raw

    def send(message: dict[str, Any], step: HandshakeStep | None = None) -> None:
        up.send(jsonrpc.encode(message), step)

    await up.start()
    try:
        init = initialize_request(1, client="direct")
        send(init, HandshakeStep.INITIALIZE)
        await answer(1)
        send({"jsonrpc": "2.0", "method": "notifications/initialized"}, HandshakeStep.INITIALIZED)
        send(tool_call(2, "whoami", {}))
        first = json.loads((await answer(2))["result"]["content"][0]["text"])

        up.stop_idle()
        send(tool_call(3, "whoami", {}))
        second = json.loads((await answer(3))["result"]["content"][0]["text"])
        assert second["pid"] != first["pid"] and second["client"] == "direct"
        assert not alive(first["pid"]) and restarted == []
    finally:
        await up.stop()


async def test_a_stop_while_a_restart_is_launching_its_process_ends_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server crashed and its restart is inside the launch of the new process (held
    there: a slow fork, a fault the test cannot cause otherwise) when the session stops.
    The stop cancels the launch and ends: it never waits for a process that was not
    started (it once awaited the exit of that process forever)."""
    loop = asyncio.get_running_loop()
    launching, launch = asyncio.Event(), loop.subprocess_exec
    launches = 0

    async def slow_launch(*args: Any, **kwargs: Any) -> Any:
        nonlocal launches
        launches += 1
        if launches > 1:  # the restart's: held until cancelled
            launching.set()
            await asyncio.Event().wait()
        return await launch(*args, **kwargs)

    monkeypatch.setattr(loop, "subprocess_exec", slow_launch)
    got: asyncio.Queue[Message] = asyncio.Queue()
    up = StdioUpstream(
        UpstreamContext(
            UpstreamConfig(command=IDLE_FIXTURE, stop_grace_seconds=1),
            "launching-session",
            on_message=lambda msg, origin: got.put_nowait(msg),
            on_closed=lambda reason: None,
            on_restarted=lambda reason: None,
        )
    )
    await up.start()
    try:
        up.send(jsonrpc.encode(initialize_request(1, client="direct")), HandshakeStep.INITIALIZE)
        await asyncio.wait_for(got.get(), 30)
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        up.send(jsonrpc.encode(initialized), HandshakeStep.INITIALIZED)
        up.send(jsonrpc.encode(tool_call(2, "whoami", {})))
        first = json.loads(
            (await asyncio.wait_for(got.get(), 30)).raw["result"]["content"][0]["text"]
        )
        os.kill(first["pid"], signal.SIGKILL)  # a crash: the restart begins
        await asyncio.wait_for(launching.wait(), 30)
    finally:
        await asyncio.wait_for(up.stop(), 10)
    assert not alive(first["pid"])
