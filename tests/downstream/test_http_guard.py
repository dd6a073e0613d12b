"""Reading requests is bounded (proxy/downstream/guard.py) and /healthz describes the proxy.

End-to-end against the real proxy: raw sockets play the slow, stalled and greedy clients
that an HTTP client library would never be.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp.test_utils import TestClient

from proxy.config import Config
from proxy.config_sections import ListenConfig
from proxy.context import ProxyContext
from proxy.downstream.app import build_app
from proxy.downstream.guard import ConnectionGuard
from proxy.registry import Registry
from tests.downstream.sse_client import RawSession, messages
from tests.support import RunningProxy, eventually, run_proxy

DEADLINE = 10.0  # generous; every wait below ends on a condition long before


# ---------------------------------------------------------------------- raw HTTP
async def connect(proxy: RunningProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", urlsplit(proxy.base).port)


def post_head(length: int | None, path: str = "/mcp") -> bytes:
    """A POST's request line and headers; ``length`` None: a chunked body."""
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Accept: application/json, text/event-stream",
        "Content-Type: application/json",
        f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked",
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def read_until_closed(reader: asyncio.StreamReader, within: float = DEADLINE) -> bytes:
    """Everything the proxy sends until it closes the connection; fails if it does not."""
    got = bytearray()
    try:
        async with asyncio.timeout(within):
            while True:
                try:
                    data = await reader.read(65536)
                except ConnectionError:
                    break
                if not data:
                    break
                got += data
    except TimeoutError:
        pytest.fail(f"the proxy kept the connection open for {within}s (got {bytes(got)!r})")
    return bytes(got)


async def read_response(
    reader: asyncio.StreamReader, within: float = DEADLINE
) -> tuple[int, dict[str, str], bytes]:
    """One response with a Content-Length body: status, headers (lower-case), body."""
    try:
        async with asyncio.timeout(within):
            head = await reader.readuntil(b"\r\n\r\n")
            status_line, *header_lines = head.decode("latin-1").split("\r\n")
            headers = {}
            for line in header_lines:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
    except TimeoutError:
        pytest.fail(f"no response within {within}s")
    return int(status_line.split()[1]), headers, body


def parse_response(data: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def reason(body: dict[str, Any]) -> str:
    return str(body["error"]["data"]["reason"])


async def healthz_served(proxy: RunningProxy) -> bool:
    """Whether a new connection is served (200 on /healthz), not refused."""
    reader, writer = await connect(proxy)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    status, _, _ = await read_response(reader)
    await close(writer)
    return status == 200


async def close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


# ---------------------------------------------------------------------- header timeout
async def test_slow_or_missing_headers_are_cut_after_the_header_timeout(tmp_path: Path) -> None:
    async with run_proxy(tmp_path, listen={"header_timeout_seconds": 0.5}) as proxy:
        loop = asyncio.get_running_loop()
        reader, writer = await connect(proxy)

        async def slowloris() -> None:
            head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 500
            with contextlib.suppress(ConnectionError):
                for i in range(len(head)):
                    writer.write(head[i : i + 1])
                    await writer.drain()
                    await asyncio.sleep(0.02)

        trickle = asyncio.create_task(slowloris())
        silent_reader, silent_writer = await connect(proxy)  # sends nothing at all
        start = loop.time()
        try:
            got = await read_until_closed(reader)
            assert loop.time() - start < 5, "cut long after the header timeout"
            status, body = parse_response(got)
            assert status == 408 and reason(body) == "request_timeout", got
            assert not trickle.done(), "cut while still sending, not after giving up"
            got = await read_until_closed(silent_reader)
            assert got == b"", "a connection that asked nothing is closed without an answer"
        finally:
            trickle.cancel()
            await close(writer)
            await close(silent_writer)


async def test_idle_keepalive_and_long_responses_are_not_cut(tmp_path: Path) -> None:
    """The timeouts cover reading a request only: not an idle keep-alive connection, not
    an SSE response that lasts longer than both."""
    listen = {"header_timeout_seconds": 0.5, "body_timeout_seconds": 0.5}
    async with run_proxy(tmp_path, listen=listen) as proxy, aiohttp.ClientSession() as http:
        reader, writer = await connect(proxy)
        try:
            request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            writer.write(request)
            assert (await read_response(reader))[0] == 200
            await asyncio.sleep(1.5)  # idle, three header timeouts long
            writer.write(request)
            assert (await read_response(reader))[0] == 200, "idle keep-alive was cut"
        finally:
            await close(writer)
        s = RawSession(http, proxy.url)
        await s.initialize()
        args = {"name": "countdown", "arguments": {"steps": 5, "delay": 0.4}}
        got = messages(await s.request(1, "tools/call", {**args, "_meta": {"progressToken": "t"}}))
        assert got[-1]["result"]["content"][0]["text"] == "liftoff after 5 steps"
        assert len(got) == 6, "every progress notification of a 2 s response arrived"


# ---------------------------------------------------------------------- body timeout
async def test_a_stalled_body_gets_408_and_the_connection_closes(tmp_path: Path) -> None:
    async with run_proxy(tmp_path, listen={"body_timeout_seconds": 0.5}) as proxy:
        for partial in (post_head(1000) + b"{" + b" " * 99, post_head(None) + chunk(b"{  ")):
            reader, writer = await connect(proxy)
            try:
                writer.write(partial)
                got = await read_until_closed(reader, within=5)  # not after lingering 10 s
                status, body = parse_response(got)
                assert status == 408 and reason(body) == "request_timeout", got
                assert body["error"]["code"] == -32600
            finally:
                await close(writer)
        assert "request_body_timeout" in proxy.log_text()


# ---------------------------------------------------------------------- in-flight bytes
async def test_body_bytes_in_flight_are_capped(tmp_path: Path) -> None:
    """Five half-sent 400 kB bodies against a 1 MB cap: two are admitted, three get 503
    before their bodies are read; a normal client still works; a chunked body counts as
    it arrives; bytes are given back when a connection goes."""
    size = 400_000
    listen = {"max_inflight_body_bytes": 1_000_000, "body_timeout_seconds": 60}
    async with run_proxy(tmp_path, listen=listen) as proxy, aiohttp.ClientSession() as http:
        conns = [await connect(proxy) for _ in range(5)]
        try:
            for _, writer in conns:
                writer.write(post_head(size) + b" " * (size // 2))
            answers = {asyncio.create_task(read_response(r)): w for r, w in conns}
            await eventually(
                lambda: sum(t.done() for t in answers) >= 3,
                timeout=DEADLINE,
                what="503 for the bodies beyond the cap",
            )
            refused = [t for t in answers if t.done()]
            for task in refused:
                status, _, body = task.result()
                assert status == 503 and reason(json.loads(body)) == "too_many_body_bytes"
            # A normal client is not held back by the greedy ones.
            s = RawSession(http, proxy.url)
            await s.initialize()
            assert messages(await s.request(1, "ping"))[-1]["result"] == {}
            assert sum(t.done() for t in answers) == 3, "only what passes the cap is refused"

            # 800 kB are held: a chunked body passing 1 MB is refused as it arrives.
            reader, writer = await connect(proxy)
            conns.append((reader, writer))
            writer.write(post_head(None) + b"".join(chunk(b" " * 50_000) for _ in range(6)))
            status, _, body = await read_response(reader)
            assert status == 503 and reason(json.loads(body)) == "too_many_body_bytes"

            # The admitted two go away: their bytes are given back.
            for task, writer in answers.items():
                if not task.done():
                    task.cancel()
                    await close(writer)

            async def admitted() -> bool:
                big = b"x" * 900_000  # not JSON: read whole, then refused as such
                async with http.post(proxy.url, data=big, headers=s.headers()) as resp:
                    if resp.status == 503:
                        return False
                    assert resp.status == 400
                    assert reason(await resp.json()) == "parse_error"
                    return True

            await eventually(admitted, timeout=DEADLINE, what="the held bytes to be given back")
        finally:
            for _, writer in conns:
                await close(writer)


# ---------------------------------------------------------------------- connections
async def test_connections_beyond_the_cap_are_refused_and_open_ones_go_on(
    tmp_path: Path,
) -> None:
    listen = {"max_connections": 3, "header_timeout_seconds": 60}
    async with (
        run_proxy(tmp_path, listen=listen) as proxy,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as http,
    ):
        s = RawSession(http, proxy.url)
        await s.initialize()  # connection 1, kept alive
        held = [await connect(proxy) for _ in range(2)]  # connections 2 and 3
        try:
            reader, writer = await connect(proxy)
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            got = await read_until_closed(reader)
            await close(writer)
            status, body = parse_response(got)
            assert status == 503 and reason(body) == "too_many_connections", got
            # The open session goes on over its connection.
            assert messages(await s.request(1, "ping"))[-1]["result"] == {}
            # One goes: a new connection is served again.
            await close(held.pop()[1])

            await eventually(
                lambda: healthz_served(proxy), timeout=DEADLINE, what="a freed slot reused"
            )
        finally:
            for _, w in held:
                await close(w)


# ---------------------------------------------------------------------- /healthz
async def test_healthz_checks_host_and_origin(tmp_path: Path) -> None:
    async with run_proxy(tmp_path) as proxy, aiohttp.ClientSession() as http:
        url = proxy.base + "/healthz"
        async with http.get(url) as resp:
            assert resp.status == 200
        async with http.get(url, headers={"Host": "evil.example"}) as resp:
            assert resp.status == 421 and reason(await resp.json()) == "misdirected_host"
        async with http.get(url, headers={"Origin": "http://evil.example"}) as resp:
            assert resp.status == 403 and reason(await resp.json()) == "forbidden_origin"
            assert "upstream" not in await resp.text()
        async with http.get(url, headers={"Origin": "http://localhost:3000"}) as resp:
            assert resp.status == 200


async def test_healthz_describes_the_proxy_not_the_upstream(
    aiohttp_client: Any,
) -> None:
    """A failing upstream shows in the body only; 503 only when the proxy cannot serve."""
    context = ProxyContext(Config())
    client: TestClient[Any, Any] = await aiohttp_client(build_app(context, Registry(context)))
    context.servers["default"].health.failing("MCP server gone: exited with code 3")
    async with client.get("/healthz") as resp:
        body = await resp.json()
        assert resp.status == 200 and body["status"] == "ok", body
        assert body["upstream"]["state"] == "failing"
        assert "exited with code 3" in body["upstream"]["last_error"]
    context.accepting = False  # shutting down
    async with client.get("/healthz") as resp:
        body = await resp.json()
        assert resp.status == 503 and body["status"] == "stopping", body


async def test_an_idle_keepalive_connection_gives_its_slot_back(tmp_path: Path) -> None:
    """listen.keepalive_timeout_seconds: a connection idle after its request is closed,
    so idle connections cannot hold every max_connections slot (aiohttp waits an hour)."""
    listen = {"max_connections": 2, "keepalive_timeout_seconds": 0.5}
    async with run_proxy(tmp_path, listen=listen) as proxy:
        idle = [await connect(proxy) for _ in range(2)]
        try:
            for reader, writer in idle:  # one request each, then silence
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                assert (await read_response(reader))[0] == 200
            for reader, _ in idle:
                await read_until_closed(reader)  # the proxy closes each idle one

            await eventually(
                lambda: healthz_served(proxy), timeout=DEADLINE, what="a slot freed when idle"
            )
        finally:
            for _, writer in idle:
                await close(writer)


# ---------------------------------------------------------------------- a fast stream
class _Handler:
    """aiohttp's protocol inside the guard, for what a fast stream asks of the guard."""

    _request_count = 0

    def connection_made(self, transport: object) -> None:
        return None

    def pause_writing(self) -> None:
        return None

    def resume_writing(self) -> None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        return None


class _Transport(asyncio.Transport):
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


async def test_a_fast_stream_waits_while_writing_is_paused_until_resumed_or_lost() -> None:
    guard = ConnectionGuard(_Handler, ListenConfig())  # type: ignore[arg-type]
    connection: Any = guard()
    connection.connection_made(_Transport())
    await asyncio.wait_for(connection.drained(), DEADLINE)  # not paused: at once
    connection.pause_writing()
    waiting = asyncio.ensure_future(connection.drained())
    await asyncio.sleep(0)
    assert not waiting.done()  # the client reads slowly: the stream waits
    connection.resume_writing()
    await asyncio.wait_for(waiting, DEADLINE)
    connection.pause_writing()
    waiting = asyncio.ensure_future(connection.drained())
    await asyncio.sleep(0)
    connection.connection_lost(None)
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(waiting, DEADLINE)
    with pytest.raises(ConnectionResetError):
        await connection.drained()  # (lost: no waiting any more)
