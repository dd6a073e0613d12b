"""What the tests of the URL upstreams share (test_sse_upstream.py, test_ws_upstream.py):
a fixture server subprocess on a reserved port that a test may kill and start again
(:func:`running`), the proxy's ``/healthz`` (:func:`health`, :func:`wait_health`), and the
scenarios both transports must pass: the SDK client end to end, a client cut at seeded
random offsets that resumes the exact sequence, and an upstream lost then back."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types

from proxy.core.sse import SSEDecoder
from tests.downstream.sse_client import RawSession
from tests.e2e.sdk_client import connect, text_of
from tests.support import (
    ROOT,
    RunningProxy,
    eventually,
    initialize_request,
    log_events,
    reserved_port,
    tool_call,
    wait_accepting,
)

FIXTURES = ROOT / "tests" / "fixtures"
TOOLS = {"echo", "slow", "burst", "ask", "crash", "big"}
DEADLINE = 60.0  # generous: everything here happens within seconds
INITIALIZE = initialize_request(version="2025-06-18")


class ServerProcess:
    """A test server subprocess on a fixed port that a test may kill and start again.

    The port is reserved for the test (:func:`tests.support.reserved_port`), so that no
    other process takes it while the server is down.
    """

    def __init__(self, args: list[str], port: int, log_path: Path) -> None:
        self.args = args
        self.port = port
        self.log_path = log_path
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with self.log_path.open("ab") as log_file:
            self.proc = await asyncio.create_subprocess_exec(
                *self.args, stdout=log_file, stderr=log_file, cwd=str(ROOT)
            )
        await wait_accepting(self.proc, self.port, self.log_path, "the test server")

    async def kill(self) -> None:
        """SIGKILL: the server vanishes without a word, and its connections with it."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.proc.wait(), 15)
        except TimeoutError:
            await self.kill()


@contextlib.asynccontextmanager
async def running(
    args_for_port: Callable[[int], list[str]], tmp_path: Path
) -> AsyncIterator[ServerProcess]:
    """The server ``args_for_port(port)`` starts, on a port reserved for the test."""
    with reserved_port() as port:
        server = ServerProcess(args_for_port(port), port, tmp_path / f"server-{port}.log")
        try:
            await server.start()
            yield server
        finally:
            await server.stop()


async def health(http: aiohttp.ClientSession, base: str) -> tuple[int, dict[str, Any]]:
    async with http.get(base + "/healthz") as resp:
        return resp.status, await resp.json()


async def wait_health(http: aiohttp.ClientSession, base: str, state: str) -> dict[str, Any]:
    """Wait for /healthz to show the upstream ``state``; the proxy itself stays 200."""

    async def shows_state() -> dict[str, Any] | None:
        got, body = await health(http, base)
        assert got == 200 and body["status"] == "ok", f"/healthz of a serving proxy: {got} {body}"
        return body if body["upstream"]["state"] == state else None

    found: dict[str, Any] = await eventually(
        shows_state, timeout=DEADLINE, what=f"/healthz to show upstream {state}"
    )
    return found


# ---------------------------------------------------------------------- shared scenarios
async def sdk_client_session(proxy_url: str) -> None:
    """The official SDK client: initialize, tools/list, echo, slow with progress."""
    values: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        values.append(progress)

    async with connect(proxy_url) as conn:
        listed = await conn.session.list_tools()
        assert {tool.name for tool in listed.tools} == TOOLS
        assert text_of(await conn.session.call_tool("echo", {"text": "hello"})) == "hello"
        result = await conn.session.call_tool(
            "slow", {"steps": 8, "delay": 0.02}, progress_callback=on_progress
        )
        assert isinstance(result, types.CallToolResult) and text_of(result) == "done 8"
        # Progress callbacks run as tasks: let them drain.
        await eventually(lambda: len(values) >= 8, what=lambda: f"8 progress values: {values}")
        assert values == [float(i) for i in range(1, 9)]


async def cut_and_resume(proxy_url: str, n: int, cuts: int, seed: int) -> None:
    """A burst of ``n`` progress notifications read over connections cut at seeded random
    byte offsets (also mid-event), each resumed with GET + Last-Event-ID from the last
    whole event: the client ends up with exactly the produced sequence, then the result."""
    rng = random.Random(seed)
    print(f"cut seed={seed}")
    offsets = sorted(rng.randrange(200, n * 200) for _ in range(cuts))
    async with aiohttp.ClientSession() as http:
        s = RawSession(http, proxy_url)
        await s.initialize()
        received: list[dict[str, Any]] = []
        last_id: str | None = None
        read = 0
        first = True
        done = False
        while not done:
            if first:
                body = tool_call(1, "burst", {"n": n, "size": 200}, token="cut")
                resp = await http.post(proxy_url, json=body, headers=s.headers())
            else:
                assert last_id is not None, f"seed {seed}: cut before the first event id"
                resp = await http.get(proxy_url, headers=s.headers(**{"Last-Event-ID": last_id}))
            first = False
            assert resp.status == 200, (seed, resp.status, await resp.text())
            decoder = SSEDecoder()
            try:
                async for chunk in resp.content.iter_any():
                    cut = offsets[0] if offsets else None
                    if cut is not None and read + len(chunk) >= cut:
                        chunk = chunk[: max(0, cut - read)]
                    read += len(chunk)
                    for event in decoder.feed(chunk):
                        last_id = event.id or last_id
                        if event.data:
                            received.append(json.loads(event.data))
                    if cut is not None and read >= cut:
                        offsets.pop(0)
                        break  # hang up, maybe in the middle of an event
                else:
                    done = True
            finally:
                resp.close()
    progress = [m["params"]["progress"] for m in received if m.get("method")]
    assert progress == list(range(1, n + 1)), f"seed {seed}: not the produced sequence"
    assert received[-1]["id"] == 1, f"seed {seed}: the response comes last"
    assert received[-1]["result"]["content"][0]["text"] == f"burst {n}"
    assert not offsets, f"seed {seed}: {len(offsets)} cuts did not land"


async def call_fails_when_the_upstream_goes(
    proxy_url: str, http: aiohttp.ClientSession, s: RawSession, drop: Any
) -> list[dict[str, Any]]:
    """A slow call whose progress has begun, then ``drop()``: its response stream ends
    with a JSON-RPC error. Returns the messages the call's stream carried."""
    body = tool_call(7, "slow", {"steps": 500, "delay": 0.05}, token="lost")
    received: list[dict[str, Any]] = []
    async with http.post(proxy_url, json=body, headers=s.headers()) as resp:
        assert resp.status == 200
        decoder = SSEDecoder()
        dropped = False
        async for chunk in resp.content.iter_any():
            for event in decoder.feed(chunk):
                if event.data:
                    received.append(json.loads(event.data))
            if not dropped and any(m.get("method") for m in received):
                dropped = True
                await drop()
    assert received[-1]["id"] == 7 and received[-1]["error"]["code"] == -32000, received[-1]
    assert "connection lost" in received[-1]["error"]["message"]
    return received


async def upstream_lost_then_back(
    proxy: RunningProxy,
    drop: Callable[[aiohttp.ClientSession, RawSession], Awaitable[None]],
    restore: Callable[[], Awaitable[None]],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A client session's call fails when ``drop(http, session)`` loses the upstream
    (:func:`call_fails_when_the_upstream_goes`) and /healthz says ``failing``; after
    ``restore()`` the proxy reconnects by itself, re-initializes the upstream, and the same
    client session works again. Returns the failed call's messages and the ``failing``
    /healthz body."""
    async with aiohttp.ClientSession() as http:
        s = RawSession(http, proxy.url)
        await s.initialize()
        received = await call_fails_when_the_upstream_goes(
            proxy.url, http, s, lambda: drop(http, s)
        )
        failing = await wait_health(http, proxy.base, "failing")
        await restore()
        await wait_health(http, proxy.base, "ok")
        events = await s.request(8, "tools/call", tool_call(8, "echo", {"text": "again"})["params"])
        answer = json.loads(events[-1].data)
        assert answer["result"]["content"][0]["text"] == "again", answer
    reconnected = log_events(proxy.log_text(), "upstream_reconnected")
    assert reconnected and reconnected[-1]["reinitialized"] is True
    return received, failing
