"""``@modelcontextprotocol/server-everything`` (npm) behind the proxy, in its three transports.

A real third-party server, written with the TypeScript SDK, that knows nothing about the
proxy (issue 5, DESIGN.md §2):

- U1: ``server-everything stdio`` as the proxy's stdio command (one process per session);
- U2: ``server-everything streamableHttp`` on a port of its own, proxy ``upstream.url``
  ``http://127.0.0.1:PORT/mcp`` (Streamable HTTP);
- U3: ``server-everything sse`` on a port of its own, proxy ``upstream.url``
  ``http://127.0.0.1:PORT/sse`` (the 2024-11-05 HTTP+SSE transport: ``GET /sse``, then
  ``POST`` to the ``endpoint`` event's URL).

Each runs the same checks through the proxy:

1. the official ``mcp`` Python SDK client lists the tools and calls the long-running tool
   (``trigger-long-running-operation {duration, steps}``, which sends
   ``notifications/progress`` ``i`` of ``steps`` when the call carries a ``progressToken``):
   every progress arrives once, in order, then the result;
2. a raw client (it sees every byte) calls it again and hangs up twice mid-call, each time in
   the middle of an SSE event and at seeded random points; it stays away a seeded while and
   resumes with ``GET`` + ``Last-Event-ID`` (2025-11-25 transports, "Resumability and
   Redelivery"): the resumed streams carry exactly the rest, every progress once and in order,
   then the result, once.

Replay a run with the seed it printed: ``pytest --seed <seed>`` (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import mcp_types as types
import pytest

from proxy.core.sse import SSEDecoder
from tests.downstream.sse_client import RawSession
from tests.support import alive, descendants, eventually, run_proxy

from .node_tools import run_server_everything, server_everything
from .sdk_client import connect, text_of

LONG_TOOL = "trigger-long-running-operation"
TOOLS = {"echo", "get-sum", LONG_TOOL}
SDK_STEPS, SDK_DURATION = 4, 0.4
RAW_STEPS, RAW_DURATION = 10, 2
CUTS = 2
CALL_DEADLINE_S = 60.0
CALLBACKS_SETTLE_S = 10.0
GONE_DEADLINE_S = 15.0


def _done_text(duration: float, steps: int) -> str:
    return f"Long running operation completed. Duration: {duration} seconds, Steps: {steps}."


async def _sdk_checks(url: str) -> None:
    """tools/list and a long-running call with progress, with the official Python SDK."""
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        assert total == SDK_STEPS, total
        seen.append(progress)

    with anyio.fail_after(CALL_DEADLINE_S):
        async with connect(url) as conn:
            listed = await conn.session.list_tools()
            names = {tool.name for tool in listed.tools}
            assert names >= TOOLS, f"tools/list through the proxy: {sorted(names)}"
            result = await conn.session.call_tool(
                LONG_TOOL,
                {"duration": SDK_DURATION, "steps": SDK_STEPS},
                progress_callback=on_progress,
            )
            assert isinstance(result, types.CallToolResult) and not result.is_error, result
            assert text_of(result) == _done_text(SDK_DURATION, SDK_STEPS)
            await eventually(
                lambda: len(seen) >= SDK_STEPS,
                timeout=CALLBACKS_SETTLE_S,
                what=lambda: f"{SDK_STEPS} progress callbacks; got {seen}",
            )
    assert seen == list(range(1, SDK_STEPS + 1)), f"progress seen: {seen}"


async def _cut_and_resume(url: str, rng: random.Random) -> None:
    """A call cut ``CUTS`` times mid-event and resumed with ``GET`` + ``Last-Event-ID``."""
    # Cut after the client has this many progress notifications (never before the first
    # event id, which a resume needs), on the next chunk the proxy sends.
    cut_after = sorted(rng.sample(range(1, RAW_STEPS - 1), CUTS))
    print(f"cut after progress {cut_after}")
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": LONG_TOOL,
            "arguments": {"duration": RAW_DURATION, "steps": RAW_STEPS},
            "_meta": {"progressToken": "everything"},
        },
    }
    received: list[dict[str, Any]] = []
    resumed_from: list[str] = []
    cuts = 0  # made: a planned cut is armed only if another chunk comes after the count
    last_id: str | None = None
    done = False
    async with aiohttp.ClientSession() as http:
        session = RawSession(http, url)
        await session.initialize()
        while not done:
            if last_id is None:
                assert not received, "cut before the first event id"
                resp = await http.post(url, json=body, headers=session.headers())
            else:
                # Away for a while: the server goes on, the proxy keeps what it says.
                await asyncio.sleep(rng.uniform(0.0, 0.5))
                resumed_from.append(last_id)
                resp = await http.get(url, headers=session.headers(**{"Last-Event-ID": last_id}))
            try:
                assert resp.status == 200, (resp.status, await resp.text(), last_id)
                decoder = SSEDecoder()
                armed = False
                async for chunk in resp.content.iter_any():
                    if armed:  # hang up inside this chunk: its last event is never whole
                        chunk = chunk[: rng.randrange(len(chunk))]
                    for event in decoder.feed(chunk):
                        if event.id is not None:
                            last_id = event.id
                        if event.data:
                            received.append(json.loads(event.data))
                    if armed:
                        cuts += 1
                        break
                    got = sum(1 for m in received if m.get("method") == "notifications/progress")
                    if cut_after and got >= cut_after[0]:
                        cut_after.pop(0)
                        armed = True
                else:
                    done = True  # the proxy ended the stream after the response
            finally:
                resp.close()
    progress = [m["params"] for m in received if m.get("method") == "notifications/progress"]
    values = [p["progress"] for p in progress]
    assert values == list(range(1, RAW_STEPS + 1)), f"gap or duplicate: {values}"
    assert all(p["progressToken"] == "everything" and p["total"] == RAW_STEPS for p in progress)
    answers = [m for m in received if "result" in m or "error" in m]
    assert len(answers) == 1 and answers[0]["id"] == 7, answers
    assert answers[0]["result"]["content"][0]["text"] == _done_text(RAW_DURATION, RAW_STEPS)
    assert received[-1] is answers[0], "the response comes last"
    # A replay may bring the rest of the call in one chunk, leaving a later planned cut no
    # chunk to fall in: every cut made is resumed once, and at least the first is made.
    assert cuts >= 1 and len(resumed_from) == cuts, (resumed_from, cuts)


async def _all_checks(url: str, seed: int) -> None:
    rng = random.Random(seed)
    await _sdk_checks(url)
    await _cut_and_resume(url, rng)


async def test_u1_server_everything_over_stdio(tmp_path: Path, seed: int) -> None:
    command = [str(server_everything()), "stdio"]
    children: set[int] = set()
    async with run_proxy(tmp_path, command=command) as proxy:
        await _all_checks(proxy.url, seed)
        children = descendants(proxy.process.pid)
        assert children, "no server-everything process under the proxy"
    await eventually(
        lambda: not any(alive(pid) for pid in children),
        timeout=GONE_DEADLINE_S,
        what=f"the server-everything processes {children} to exit after the proxy stopped",
    )


@pytest.mark.parametrize(
    ("mode", "path"),
    [("streamableHttp", "/mcp"), ("sse", "/sse")],
    ids=["u2_streamable_http", "u3_legacy_sse"],
)
async def test_server_everything_at_a_url(tmp_path: Path, seed: int, mode: str, path: str) -> None:
    """U2 (Streamable HTTP) and U3 (2024-11-05 HTTP+SSE): the server at a URL."""
    async with run_server_everything(mode, tmp_path) as everything:
        upstream = {"url": f"{everything.base}{path}"}
        async with run_proxy(tmp_path, upstream=upstream) as proxy:
            try:
                await _all_checks(proxy.url, seed)
            except BaseException:
                print(f"server-everything log:\n{everything.log_text()[-3000:]}")
                print(f"proxy log:\n{proxy.log_text()[-6000:]}")
                raise
