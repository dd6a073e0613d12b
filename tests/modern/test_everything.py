"""A modern (2026-07-28) client in front of a real third-party legacy server:
``@modelcontextprotocol/server-everything`` (npm, TypeScript SDK) over stdio and over
Streamable HTTP, where a server→client request is tied to its call by the response stream
it came on."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from tests.e2e.node_tools import run_server_everything, server_everything
from tests.modern.client import Modern
from tests.support import run_proxy

LONG_TOOL = "trigger-long-running-operation"


async def _checks(url: str) -> None:
    async with aiohttp.ClientSession() as http:
        # Sampling only: server-everything asks every new session for its roots 350 ms
        # after initialize, unrelated to any call; over stdio nothing tells that from a
        # call's own question, so a client that declares roots gets it as an input request
        # of whichever call runs then (docs/modern.md §The pool). Without roots it is
        # refused upstream and the calls are undisturbed.
        client = Modern(http, url, caps={"sampling": {}})
        discovered = (await client.send("server/discover")).result
        assert "tools" in discovered["capabilities"]
        assert discovered["_meta"]["io.modelcontextprotocol/serverInfo"]["name"]
        names = {t["name"] for t in (await client.send("tools/list")).result["tools"]}
        assert {"echo", LONG_TOOL, "trigger-sampling-request"} <= names
        echo = await client.call("echo", {"message": "hi"})
        assert "hi" in echo.result["content"][0]["text"]
        progress = await client.send(
            "tools/call",
            {
                "name": LONG_TOOL,
                "arguments": {"duration": 0.3, "steps": 3},
                "_meta": {"progressToken": "p"},
            },
        )
        assert [n["params"]["progress"] for n in progress.notes] == [1, 2, 3]
        assert progress.result["resultType"] == "complete"
        first = await client.call("trigger-sampling-request", {"prompt": "hello", "maxTokens": 5})
        ((key, request),) = first.result["inputRequests"].items()
        assert request["method"] == "sampling/createMessage"
        reply = {
            "role": "assistant",
            "content": {"type": "text", "text": "sampled-by-the-test"},
            "model": "test-model",
            "stopReason": "endTurn",
        }
        done = await client.send(
            "tools/call",
            {
                "name": "trigger-sampling-request",
                "arguments": {"prompt": "hello", "maxTokens": 5},
                "requestState": first.result["requestState"],
                "inputResponses": {key: reply},
            },
        )
        assert "sampled-by-the-test" in str(done.result["content"])


async def test_over_stdio(tmp_path: Path) -> None:
    async with run_proxy(tmp_path, command=[str(server_everything()), "stdio"]) as proxy:
        await _checks(proxy.url)


@pytest.mark.parametrize("mode", ["streamableHttp"])
async def test_over_streamable_http(tmp_path: Path, mode: str) -> None:
    async with run_server_everything(mode, tmp_path) as everything:
        upstream = {"url": f"{everything.base}/mcp"}
        async with run_proxy(tmp_path, upstream=upstream) as proxy:
            await _checks(proxy.url)
