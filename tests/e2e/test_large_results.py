"""Large tool results through the proxy, for each real client with its default settings
(issue 20; docs/clients.md "Large results").

The proxy (its defaults) fronts the legacy fixture, whose ``big(size, delay)`` tool returns
``size`` characters (:func:`big_text`). A 5 MB and a 20 MB result must reach:

- the official Python SDK 2.x (``mcp.Client``) in both eras it speaks: ``mode="legacy"``
  (initialize, 2025-11-25) and its default ``mode="auto"`` (2026-07-28 here). It caps an
  SSE event at 1 MiB, so the proxy answers a lone large answer as ``application/json``
  (``sse.json_answer_window_ms`` / ``json_answer_min_bytes``; modern answers are JSON
  whenever nothing was streamed first);
- the TypeScript SDK 1.x and 2.x (``ts/big_result_client.mjs``);
- the ``connect`` shim, driven over its pipes as a host would.

And a cut in the middle of a large result that is streamed (it came after the window: SSE
with a priming event id) is resumed by every client that resumes: the TypeScript SDKs, the
shim (it prefers SSE, so it is streamed even when fast) and the Python SDK once its event
cap is lifted (``max_sse_event_size=None``, the documented setting); with its cap, the
Python SDK fails a streamed large result with an error naming it. A JSON body cut in
transfer cannot be resumed: the Python SDK gets an error, not a hang.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.cut_proxy import CutProxy
from tests.fixtures.big_text import big_text
from tests.support import FIXTURE, ROOT, initialize_request, run_proxy

from .node_tools import node_binary, node_modules, ts_client2_modules

MB: Final = 1_000_000
SIZES: Final = (5 * MB, 20 * MB)
CALL_DEADLINE_S: Final = 120.0  # generous: 20 MB take seconds on a loaded machine
TS_CLIENT: Final = Path(__file__).with_name("ts") / "big_result_client.mjs"
# Cut tests: a short window and a slower tool, so the answer is streamed (SSE), and a cut
# halfway through the 5 MB event.
CUT_SSE: Final = {"json_answer_window_ms": 200}
CUT_DELAY_S: Final = 0.6
CUT_SIZE: Final = 5 * MB
CUT_AT: Final = CUT_SIZE // 2


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


EXPECTED: Final = {size: digest(big_text(size)) for size in (*SIZES, CUT_SIZE)}


def text_of(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def python_calls(
    url: str, mode: str, calls: list[tuple[int, float]], *, max_event: int | None = 1024 * 1024
) -> tuple[str, list[str]]:
    """The Python SDK's ``Client`` (``mode``; its default event cap unless told) calling
    ``big``: the era it spoke and each result's digest."""
    server: Any = url
    if max_event != 1024 * 1024:
        server = streamable_http_client(url, max_sse_event_size=max_event)
    digests = []
    with anyio.fail_after(CALL_DEADLINE_S * len(calls)):
        async with Client(server, mode=mode) as client:
            for size, delay in calls:
                result = await client.call_tool("big", {"size": size, "delay": delay})
                assert not result.is_error, text_of(result)[:300]
                digests.append(digest(text_of(result)))
            return client.protocol_version, digests


async def ts_calls(sdk: str, url: str, calls: list[tuple[int, float]]) -> list[dict[str, Any]]:
    """``ts/big_result_client.mjs`` with SDK ``sdk`` ("1" or "2"): its output lines."""
    env = {
        **os.environ,
        "MCP_TOOLS_NODE_MODULES": str(node_modules()),
        "MCP_TS_CLIENT2_MODULES": str(ts_client2_modules()),
    }
    arg = json.dumps([{"size": size, "delay": delay} for size, delay in calls])
    process = await asyncio.create_subprocess_exec(
        str(node_binary()),
        str(TS_CLIENT),
        sdk,
        url,
        arg,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(CALL_DEADLINE_S * len(calls)):
            out, err = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    lines = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
    assert process.returncode == 0, f"{lines}\n{err.decode()[-3000:]}"
    return [*lines, {"stderr": err.decode()}]


async def shim_calls(tmp_path: Path, url: str, calls: list[tuple[int, float]]) -> list[str]:
    """``mcp-resume-proxy connect URL`` driven over its pipes: initialize, then ``big``
    per call; each result's digest."""
    with (tmp_path / "shim.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "proxy", "connect", url, "--log-level", "debug"),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            cwd=ROOT,
            limit=64 * 1024 * 1024,
            start_new_session=True,
        )
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout

    async def exchange(message: dict[str, Any]) -> dict[str, Any]:
        stdin.write(json.dumps(message).encode() + b"\n")
        await stdin.drain()
        while True:
            answer: dict[str, Any] = json.loads(await stdout.readline())
            if answer.get("id") == message["id"]:
                return answer

    try:
        async with asyncio.timeout(CALL_DEADLINE_S * (1 + len(calls))):
            await exchange(initialize_request(0))
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            stdin.write(json.dumps(note).encode() + b"\n")
            digests = []
            for n, (size, delay) in enumerate(calls, 1):
                call = {"name": "big", "arguments": {"size": size, "delay": delay}}
                answer = await exchange(
                    {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": call}
                )
                assert "result" in answer, str(answer)[:500]
                digests.append(digest(answer["result"]["content"][0]["text"]))
            return digests
    finally:
        stdin.close()
        try:
            async with asyncio.timeout(15):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()


# ---------------------------------------------------------------------- reach
@pytest.mark.parametrize(("mode", "era"), [("legacy", "2025-11-25"), ("auto", "2026-07-28")])
async def test_the_python_sdk_gets_large_results_in_each_era(
    tmp_path: Path, mode: str, era: str
) -> None:
    async with run_proxy(tmp_path, FIXTURE) as proxy:
        spoke, digests = await python_calls(proxy.url, mode, [(size, 0) for size in SIZES])
    assert spoke == era
    assert digests == [EXPECTED[size] for size in SIZES]


@pytest.mark.parametrize("sdk", ["1", "2"])
async def test_the_typescript_sdks_get_large_results(tmp_path: Path, sdk: str) -> None:
    async with run_proxy(tmp_path, FIXTURE) as proxy:
        lines = await ts_calls(sdk, proxy.url, [(size, 0) for size in SIZES])
    got = [
        (line["size"], line.get("sha256"), line.get("error")) for line in lines if "size" in line
    ]
    assert got == [(size, EXPECTED[size], None) for size in SIZES], lines[-1]
    assert lines[0] == {"era": "2025-11-25"}  # (2.x too: its default probes, then initializes)


async def test_the_shim_gets_large_results(tmp_path: Path) -> None:
    async with run_proxy(tmp_path, FIXTURE) as proxy:
        digests = await shim_calls(tmp_path, proxy.url, [(size, 0) for size in SIZES])
    assert digests == [EXPECTED[size] for size in SIZES]


# ---------------------------------------------------------------------- cuts
@asynccontextmanager
async def cut_rig(tmp_path: Path, sse: dict[str, Any]) -> AsyncIterator[CutProxy]:
    """The proxy behind a relay that cuts the first connection halfway through the answer
    (the handshake before it is small)."""
    async with run_proxy(tmp_path, FIXTURE, sse=sse) as proxy:
        cut = CutProxy(proxy.port)
        await cut.start()
        try:
            cut.schedule_cuts([CUT_AT])
            yield cut
        finally:
            await cut.stop()


@pytest.mark.parametrize("client", ["ts1", "ts2", "shim", "python-uncapped"])
async def test_a_cut_in_the_middle_of_a_streamed_large_result_is_resumed(
    tmp_path: Path, client: str
) -> None:
    calls = [(CUT_SIZE, CUT_DELAY_S)]
    async with cut_rig(tmp_path, CUT_SSE) as cut:  # (streamed: it comes after the window)
        if client.startswith("ts"):
            lines = await ts_calls(client[2:], cut.url(), calls)
            got = [line.get("sha256") for line in lines if "size" in line]
            assert got == [EXPECTED[CUT_SIZE]], lines
            requests = lines[-1]["stderr"].splitlines()
            assert any(r.startswith("GET last-event-id=") and "=null" not in r for r in requests)
        elif client == "shim":
            assert await shim_calls(tmp_path, cut.url(), calls) == [EXPECTED[CUT_SIZE]]
            assert "stream_resumed" in (tmp_path / "shim.log").read_text(errors="replace")
        else:
            _, digests = await python_calls(cut.url(), "legacy", calls, max_event=None)
            assert digests == [EXPECTED[CUT_SIZE]]
        assert cut.cuts == 1 and cut.cuts_pending == 0


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


async def test_a_json_answer_cut_in_transfer_is_an_error_for_the_python_sdk(
    tmp_path: Path,
) -> None:
    """The price of JSON: no event id to resume from. The SDK fails (its connection with
    the call), it does not hang. (The default window: the answer comes in it.)"""
    async with cut_rig(tmp_path, {}) as cut:
        with pytest.raises(BaseExceptionGroup) as caught:  # the SDK's task group re-raises
            await python_calls(cut.url(), "legacy", [(CUT_SIZE, 0)])
        leaves = _leaves(caught.value)
        assert any(isinstance(leaf, httpx2.RemoteProtocolError) for leaf in leaves), leaves
        assert cut.cuts == 1


async def test_a_streamed_large_result_fails_the_python_sdk_with_its_default_cap(
    tmp_path: Path,
) -> None:
    """What the window cannot help (docs/clients.md): an answer after it is streamed, and
    the SDK's 1 MiB event cap fails the call with an error naming the cap."""
    async with run_proxy(tmp_path, FIXTURE, sse=CUT_SSE) as proxy:
        with pytest.raises(BaseExceptionGroup) as caught:  # the SDK's task group re-raises
            await python_calls(proxy.url, "legacy", [(CUT_SIZE, CUT_DELAY_S)])
    errors = [str(e) for e in _leaves(caught.value) if isinstance(e, MCPError)]
    assert errors and "1048576 byte limit" in errors[0], _leaves(caught.value)
