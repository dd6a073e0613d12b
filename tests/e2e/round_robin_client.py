"""The official `mcp` Python SDK client (2026-07-28 mode) behind a round-robin balancer.

Run as ``python tests/e2e/round_robin_client.py URL_A URL_B`` against two proxy replicas
in front of ``tests/fixtures/task_server.py``. Every POST the SDK makes goes to the next
replica in turn (an ``httpx2`` transport that rewrites the port: a balancer with no
stickiness), so each MRTR retry (``call_tool`` answering ``input_required`` through its
``elicitation_callback``) reaches the replica that does not hold the call. Prints one JSON
object: the answers, the questions asked, and the ports each POST went to.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client


class RoundRobin(httpx2.AsyncBaseTransport):
    """Each request to the next of ``ports``, whatever port it named."""

    def __init__(self, ports: list[int]) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.ports = itertools.cycle(ports)
        self.sent: list[int] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        port = next(self.ports)
        self.sent.append(port)
        request.url = request.url.copy_with(port=port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def main(url_a: str, url_b: str) -> None:
    ports = [httpx2.URL(url_a).port or 80, httpx2.URL(url_b).port or 80]
    asked: list[str] = []

    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"answer": f"re {params.message}"})

    balancer = RoundRobin(ports)
    answers: list[str] = []
    async with httpx2.AsyncClient(transport=balancer, timeout=httpx2.Timeout(30.0)) as http:
        transport = streamable_http_client(url_a, http_client=http)
        async with Client(
            transport, mode="2026-07-28", elicitation_callback=elicit, read_timeout_seconds=30
        ) as client:
            for tool, args in (("ask", {"question": "Q1"}), ("ask_twice", {}), ("ask", {})):
                result = await client.call_tool(tool, args)
                answers.append(
                    "".join(b.text for b in result.content if isinstance(b, types.TextContent))
                )
    out: dict[str, Any] = {"answers": answers, "asked": asked, "ports": balancer.sent}
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
