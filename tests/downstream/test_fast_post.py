"""proxy/downstream/fast_post.py: the common legacy POST served from the connection's
bytes answers byte for byte as aiohttp's path does (but ``Date``); whatever it does not
serve whole (a stream, a refusal, pipelined or early requests) is answered as before.

End-to-end against the real proxy (its ``ConnectionGuard`` holds the fast path), raw
sockets on one side, the flood fixture behind it.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.sse import SSEDecoder
from proxy.downstream.fast_post import FastPosts, _headers
from proxy.downstream.handoff import Handoff
from tests.support import FIXTURE, ROOT, RunningProxy, run_proxy

FLOOD = [sys.executable, str(ROOT / "tests" / "fixtures" / "flood_server.py")]
DEADLINE = 10.0  # generous; every wait below ends on a condition long before
END = b"0\r\n\r\n"  # a chunked body's end


async def _session(proxy: RunningProxy) -> str:
    """A new initialized session's id."""
    headers = {"Accept": "application/json, text/event-stream"}
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    async with aiohttp.ClientSession() as http:
        async with http.post(proxy.url, json=init, headers=headers) as resp:
            assert resp.status == 200
            session = resp.headers["Mcp-Session-Id"]
            await resp.read()
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        headers["Mcp-Session-Id"] = session
        async with http.post(proxy.url, json=note, headers=headers) as resp:
            assert resp.status == 202
    return session


def _call(session: str, rid: int, tool: str = "echo", path: str = "/mcp", **args: Any) -> bytes:
    params: dict[str, Any] = {"name": tool, "arguments": args or {"text": f"t{rid}"}}
    if tool in ("flood", "slow"):
        params["_meta"] = {"progressToken": rid}
    body = json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
        f"MCP-Protocol-Version: 2025-11-25\r\nMcp-Session-Id: {session}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body.encode()


async def _exchange(port: int, sends: list[bytes], answers: int, end: bytes = END) -> bytes:
    """Send each of ``sends`` in turn on one connection (the next once the proxy had a
    moment to read it); what came back once ``answers`` responses ended with ``end``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for data in sends:
            writer.write(data)
            await writer.drain()
        got = b""
        async with asyncio.timeout(DEADLINE):
            while got.count(end) < answers:
                chunk = await reader.read(65536)
                assert chunk, f"closed early: {got!r}"
                got += chunk
        return got
    finally:
        writer.close()


def _comparable(raw: bytes) -> bytes:
    """``raw`` but its ``Date`` and its event ids (each call has a stream of its own)."""
    raw = re.sub(rb"\r\nDate: [^\r]*\r\n", b"\r\nDate: -\r\n", raw)
    return re.sub(rb"(^|\n)id: [^\n]*\n", rb"\1id: -\n", raw)


@pytest.fixture
async def proxy(tmp_path: Path) -> Any:
    async with run_proxy(tmp_path, FLOOD, log={"format": "json", "level": "info"}) as running:
        yield running


async def test_a_call_is_answered_as_aiohttp_answers_it(proxy: RunningProxy) -> None:
    session = await _session(proxy)
    fast = await _exchange(proxy.port, [_call(session, 1), _call(session, 2)], 2)
    # A query string is no path the fast POST serves: aiohttp's path answers this one.
    slow = await _exchange(
        proxy.port, [_call(session, 1, path="/mcp?q"), _call(session, 2, path="/mcp?q")], 2
    )
    assert _comparable(fast) == _comparable(slow)
    assert fast.count(b"HTTP/1.1 200 OK\r\n") == 2
    assert b'"text":"t1"' in fast and fast.index(b'"id":1') < fast.index(b'"id":2')


def _dechunked(raw: bytes) -> tuple[bytes, bytes]:
    """A response's head, and its body's bytes once its chunks are undone (as far as
    they came whole)."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    body = b""
    while b"\r\n" in rest:
        size, _, after = rest.partition(b"\r\n")
        n = int(size, 16)
        if len(after) < n + 2:
            break
        body, rest = body + after[:n], after[n + 2 :]
    return head, body


async def test_a_stream_is_written_as_aiohttp_writes_it_and_a_refusal_answered_as_ever(
    proxy: RunningProxy,
) -> None:
    session = await _session(proxy)
    # Notifications before the answer: no whole answer; the fast path writes the stream
    # (fast_stream.py), and then serves the next call on the same connection.
    streamed = await _exchange(
        proxy.port, [_call(session, 7, "flood", n=50, size=50), _call(session, 8)], 2
    )
    assert streamed.count(b"notifications/progress") == 50
    assert streamed.count(b'"id":7') == 1 and streamed.endswith(END)
    stream, answer = streamed.split(END, 1)
    assert b'"id":8' in answer and answer.startswith(b"HTTP/1.1 200 OK\r\n")
    # aiohttp's path (a query: not the fast path's) writes the same head and events.
    theirs = await _exchange(proxy.port, [_call(session, 7, "flood", "/mcp?q", n=50, size=50)], 1)
    ours_head, ours_body = _dechunked(stream + END)
    theirs_head, theirs_body = _dechunked(theirs)
    assert _comparable(ours_head + b"\r\n") == _comparable(theirs_head + b"\r\n")
    assert _comparable(ours_body) == _comparable(theirs_body)
    # An unknown session: aiohttp's path refuses it (404), and then the next call is served.
    refused = await _exchange(proxy.port, [_call("no-such-session", 8), _call(session, 9)], 1)
    assert refused.startswith(b"HTTP/1.1 404 ")
    assert b'"id":9' in refused


async def test_a_stream_cut_by_its_client_goes_on_and_is_resumed(proxy: RunningProxy) -> None:
    n = 3000
    session = await _session(proxy)
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    try:
        writer.write(_call(session, 7, "flood", n=n, size=100))
        got, events = b"", []
        async with asyncio.timeout(DEADLINE):
            while not any(e.data and "progress" in e.data for e in events):
                more = await reader.read(65536)
                assert more, f"closed early: {got!r}"
                got += more
                events = SSEDecoder().feed(_dechunked(got)[1])
    finally:
        writer.close()  # the client goes: the call goes on, its events logged
    before = sum(1 for e in events if e.data and "progress" in e.data)
    last_id = [e.id for e in events if e.id][-1]
    assert before < n  # (cut before its end)
    headers = {
        "Accept": "text/event-stream",
        "Mcp-Session-Id": session,
        "MCP-Protocol-Version": "2025-11-25",
        "Last-Event-ID": last_id,
    }
    after, answered = 0, False
    async with aiohttp.ClientSession() as http, http.get(proxy.url, headers=headers) as resp:
        assert resp.status == 200
        decoder = SSEDecoder()
        async with asyncio.timeout(DEADLINE):
            async for chunk in resp.content.iter_any():
                for event in decoder.feed(chunk):
                    after += bool(event.data and "progress" in event.data)
                    answered = answered or bool(event.data and '"id":7' in event.data)
                if answered:
                    break
    assert answered and before + after == n


async def test_pipelined_and_early_requests_are_answered_in_order(proxy: RunningProxy) -> None:
    session = await _session(proxy)
    # Two requests in one write (pipelined: aiohttp's path), then one sent before the
    # answer to the one before came (waits for it).
    both = _call(session, 1) + _call(session, 2)
    got = await _exchange(proxy.port, [both, _call(session, 3), _call(session, 4)], 4)
    ids = [int(m) for m in re.findall(rb'"id":(\d+)', got)]
    assert ids == [1, 2, 3, 4]


async def test_fast_calls_are_counted_in_the_metrics(proxy: RunningProxy) -> None:
    session = await _session(proxy)
    await _exchange(proxy.port, [_call(session, n) for n in range(1, 4)], 3)
    async with aiohttp.ClientSession() as http, http.get(f"{proxy.base}/metrics") as resp:
        text = await resp.text()
    line = next(
        line
        for line in text.splitlines()
        if line.startswith("mcp_resume_proxy_request_duration_seconds_count")
        and 'method="tools/call"' in line
    )
    assert float(line.rsplit(" ", 1)[1]) == 3


async def test_an_answer_later_than_the_window_streams_after_the_window(tmp_path: Path) -> None:
    # The hold's window runs from the priming event on (a fast POST held by callbacks
    # once forgot to start it: the headers then waited for the answer).
    sse = {"json_answer_window_ms": 50}
    async with run_proxy(tmp_path, FIXTURE, sse=sse) as proxy:
        session = await _session(proxy)
        call = _call(session, 5, "slow", steps=1, delay=600)  # answers in 10 minutes
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        try:
            writer.write(call)
            async with asyncio.timeout(DEADLINE):  # (the window is 50 ms: long before)
                head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"Content-Type: text/event-stream" in head
        finally:
            writer.close()


async def test_a_stream_longer_than_the_keepalive_timeout_is_not_cut(tmp_path: Path) -> None:
    # aiohttp sees the connection idle while the fast path writes a stream: its keep-alive
    # timer must not close it (each liveness check and write pushes it on), and once the
    # stream ended the connection serves the next request, then is closed when idle.
    listen = {"keepalive_timeout_seconds": 0.5}
    async with run_proxy(tmp_path, FIXTURE, listen=listen) as proxy:
        session = await _session(proxy)
        call = _call(session, 5, "slow", steps=4, delay=0.4)  # ~1.6 s, three timeouts long
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        try:
            writer.write(call)  # alone in its write: the fast path's (not pipelined)
            async with asyncio.timeout(DEADLINE):
                got = await reader.readuntil(b"\r\n\r\n")
                writer.write(_call(session, 6))  # (sent early: it waits for the stream)
                while got.count(END) < 2:
                    more = await reader.read(65536)
                    assert more, f"closed early: {got!r}"
                    got += more
                assert await reader.read(65536) == b""  # then idle: closed by the proxy
        finally:
            writer.close()
    assert got.count(b"notifications/progress") == 4 and b"done 4" in got
    assert got.index(b'"id":5') < got.index(b'"id":6')


def test_a_handoff_never_taken_is_abandoned_once() -> None:
    abandoned: list[int] = []
    fast = FastPosts({}, lambda: False, None, "/mcp")
    transport = object()

    async def finish(request: Any) -> Any:
        raise AssertionError("not taken")

    fast.handoffs[transport] = Handoff(finish, lambda: abandoned.append(1), "tools/call", 0.0)
    fast.forget(transport)
    fast.forget(transport)
    assert abandoned == [1] and not fast.handoffs


REQUEST = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: application/json, text/event-stream\r\n"
    b"mcp-session-id:  abc \t\r\nContent-Length: 2\r\n\r\n{}"
)


def test_the_header_block_is_read_as_aiohttp_reads_it() -> None:
    assert _headers(REQUEST) == {
        "host": "127.0.0.1",
        "accept": "application/json, text/event-stream",
        "mcp-session-id": "abc",
        "content-length": "2",
    }


@pytest.mark.parametrize(
    "request_bytes",
    [
        REQUEST.replace(b"POST", b"GET"),
        REQUEST.replace(b"HTTP/1.1", b"HTTP/1.0"),
        REQUEST.replace(b"Host:", b"Host :"),  # whitespace before the colon
        REQUEST.replace(b"\r\nAccept", b"\r\n Accept"),  # a folded line
        REQUEST.replace(b"127.0.0.1", b"127.0.0.1\r"),  # a bare CR
        REQUEST.replace(b"127.0.0.1", b"127.\n0.0.1"),  # a bare LF
        REQUEST.replace(b"127.0.0.1", b"127.0.0.\x001"),  # a control character
        REQUEST.replace(b"127.0.0.1", "127.0.0.1\u00e9".encode()),  # not ASCII
        REQUEST.replace(b"mcp-session-id", b"Host"),  # a header twice
        REQUEST.replace(b"Host: 127.0.0.1", b"NoColon"),
        REQUEST[:40],  # incomplete headers
    ],
)
def test_what_aiohttp_may_read_otherwise_is_left_to_it(request_bytes: bytes) -> None:
    assert _headers(request_bytes) is None


def test_only_an_endpoints_own_path_is_served_here() -> None:
    endpoint: Any = object()
    fast = FastPosts({"a": endpoint, "b%": endpoint}, lambda: False, "a", "/mcp")
    assert fast._endpoint("/mcp") is endpoint
    assert fast._endpoint("/servers/a/mcp") is endpoint
    for path in ("/mcp?x=1", "/m%63p", "/mcp/", "/servers/b%/mcp", "/servers/a/b/mcp", "/x"):
        assert fast._endpoint(path) is None, path  # (aiohttp's router decides)


@given(st.binary(max_size=300))
def test_any_bytes_give_headers_or_none(data: bytes) -> None:
    for candidate in (data, REQUEST[:60] + data, REQUEST.replace(b"\r\n\r\n", data)):
        result = _headers(candidate)
        assert result is None or all(k == k.lower() for k in result)
