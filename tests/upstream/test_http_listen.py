"""The standalone ``GET`` stream of the Streamable HTTP upstream, read by callbacks
(``proxy/upstream/http_listen.py``, issue 23: 10,000 idle sessions each with one open).

Against the scripted server (``tests/fixtures/http_scripted_server.py``) on real sockets: an
open stream runs no task; its ``GET`` carries what ``aiohttp`` sends with the other requests;
what ``aiohttp`` alone reads (a redirect, a compressed body) is read through it; a paused
session reads nothing more of it until resumed; a stream cut (behind the TCP forwarder of
``tests/cut_proxy.py``) or unreadable is opened again from its last event id; over https it
is verified against the CAs the HTTP client trusts. A garbled answer head (from the raw
front of ``listen_support.py``) and a certificate nobody trusts are each a clear error in
the health, the ``GET`` is tried again and the session goes on. End to end, what the
server sends on it while the client has no ``GET`` open reaches the client's next one.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import zlib
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.core.sse import encode_event
from tests.downstream.sse_client import RawSession
from tests.fixtures.http_harness import (
    DEADLINE,
    INIT,
    buffered_bytes,
    cut_proxy,
    our_tasks,
    ping,
    upstream,
)
from tests.fixtures.http_scripted_server import ScriptedServer, open_sse, send_event
from tests.support import eventually, run_proxy, run_proxy_on
from tests.upstream.listen_support import garbled_gets, self_signed


def note(n: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": {"n": n}}


class Notes:
    """An ``on_get`` whose stream sends ``note(n)`` (id ``g-n``) each time :meth:`send` is
    called, and holds; ``first`` is sent at once."""

    def __init__(self, server: ScriptedServer, first: int | None = 1) -> None:
        self._server = server
        self._first = first
        self._queue: asyncio.Queue[int] = asyncio.Queue()
        self.streams = 0

    def send(self, n: int) -> None:
        self._queue.put_nowait(n)

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        self.streams += 1
        resp = await open_sse(request)
        if self._first is not None and self.streams == 1:
            await send_event(resp, note(self._first), event_id=f"g-{self._first}")
        while True:
            n = await self._queue.get()
            await send_event(resp, note(n), event_id=f"g-{n}")


def event(msg: dict[str, Any], event_id: str) -> bytes:
    return encode_event(json.dumps(msg).encode(), event_id=event_id)


def notes_got(got: list[tuple[Any, Any]]) -> list[tuple[int, Any]]:
    return [(m.raw["params"]["n"], o) for m, o in got if m.raw.get("method") == note(0)["method"]]


async def test_an_open_standalone_stream_runs_no_task(server: ScriptedServer) -> None:
    notes = Notes(server)
    server.on_get = notes
    async with upstream(server.url) as h:
        await h.handshake(server)
        await eventually(lambda: notes_got(h.got) == [(1, None)])
        assert not our_tasks(), "an open standalone stream is read by callbacks"
        notes.send(2)
        await eventually(lambda: notes_got(h.got) == [(1, None), (2, None)])
        assert not our_tasks()
        assert len(server.requests_of("GET")) == 1


async def test_the_get_carries_what_aiohttp_sends(
    server: ScriptedServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.set_cookie = True
    server.on_get = Notes(server)
    monkeypatch.setenv("HTTP_LISTEN_TEST_KEY", "k3y")
    url = server.url.replace("http://", "http://us%20er:p%40ss@")  # userinfo: Basic auth
    async with upstream(url, headers={"X-Key": "${HTTP_LISTEN_TEST_KEY}"}) as h:
        await h.handshake(server)
        await eventually(lambda: bool(notes_got(h.got)))
        h.send(ping(2))
        await h.answer(2)
    (get,) = server.requests_of("GET")
    post = next(s for s in server.requests_of("POST") if s.body.get("id") == 2)
    same = ["authorization", "x-key", "cookie", "mcp-session-id", "mcp-protocol-version", "host"]
    assert {k: get.headers.get(k) for k in same} == {k: post.headers.get(k) for k in same}
    assert get.headers["authorization"] == "Basic " + base64.b64encode(b"us er:p@ss").decode()
    assert (get.headers["cookie"], get.session) == ("lb=sess-1", "sess-1")
    assert get.headers["accept"] == "text/event-stream"
    assert "last-event-id" not in get.headers


@pytest.mark.parametrize("answer", ["redirect", "gzip"])
async def test_what_only_aiohttp_reads_is_read_through_it(
    server: ScriptedServer, answer: str, log: Any
) -> None:
    async def on_get(request: web.Request) -> web.StreamResponse:
        if answer == "redirect" and "moved" not in request.query:
            raise web.HTTPTemporaryRedirect("/mcp?moved=1")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        event = encode_event(json.dumps(note(1)).encode(), event_id="g-1")
        if answer == "gzip":  # each event flushed (aiohttp's own compression holds them)
            resp.headers["Content-Encoding"] = "gzip"
            gzip = zlib.compressobj(wbits=31)
            event = gzip.compress(event) + gzip.flush(zlib.Z_SYNC_FLUSH)
        await resp.prepare(request)
        await resp.write(event)
        await server.hold()
        return resp

    server.on_get = on_get
    async with upstream(server.url) as h:
        await h.handshake(server)
        await eventually(lambda: notes_got(h.got) == [(1, None)])
    assert [e["event"] for e in log.entries if "standalone" in e["event"]] == [
        "upstream_standalone_via_aiohttp"
    ]


async def test_a_paused_session_reads_its_standalone_stream_once_resumed(
    server: ScriptedServer,
) -> None:
    notes = Notes(server)
    server.on_get = notes
    async with upstream(server.url) as h:
        await h.handshake(server)
        await eventually(lambda: notes_got(h.got) == [(1, None)])
        h.up.pause()
        notes.send(2)
        with pytest.raises(TimeoutError):  # sent, but not read while paused
            await asyncio.wait_for(eventually(lambda: len(notes_got(h.got)) > 1), 1.0)
        h.up.resume()
        await eventually(lambda: notes_got(h.got) == [(1, None), (2, None)])


async def test_a_cut_stream_is_opened_again_from_its_last_event_id(
    server: ScriptedServer,
) -> None:
    notes = Notes(server)
    server.on_get = notes
    async with cut_proxy(server.port) as cutter, upstream(cutter.url("/mcp")) as h:
        await h.handshake(server)
        await eventually(lambda: notes_got(h.got) == [(1, None)])
        assert cutter.cut_all() >= 1
        await server.wait_for(lambda: len(server.requests_of("GET")) == 2, "a second GET")
        notes.send(2)
        await eventually(lambda: notes_got(h.got) == [(1, None), (2, None)])
    assert [g.headers.get("last-event-id") for g in server.requests_of("GET")] == [None, "g-1"]
    assert h.health.state != "failing"


async def test_an_unreadable_stream_is_opened_again_from_its_last_event_id(
    server: ScriptedServer,
) -> None:
    async def on_get(request: web.Request) -> web.StreamResponse:
        resp = await open_sse(request)
        after = request.headers.get("Last-Event-ID")
        if after is None:  # a note, then a line longer than max_line_bytes
            await send_event(resp, note(1), event_id="g-1")
            await resp.write(b"data: " + b"x" * 4096)
        else:
            await send_event(resp, note(2), event_id="g-2")
        await server.hold()
        return resp

    server.on_get = on_get
    async with upstream(server.url, max_line_bytes=1024) as h:
        await h.handshake(server)
        await eventually(lambda: notes_got(h.got) == [(1, None), (2, None)])
    assert [g.headers.get("last-event-id") for g in server.requests_of("GET")] == [None, "g-1"]


async def test_the_notes_before_an_unreadable_line_are_delivered_and_resumed_after(
    server: ScriptedServer,
) -> None:
    """Issue 23: the notes read in the same chunk as a bad line were lost, and the stream
    was opened again from before them."""

    async def on_get(request: web.Request) -> web.StreamResponse:
        resp = await open_sse(request)
        if request.headers.get("Last-Event-ID") is None:  # in one write: one chunk
            await resp.write(event(note(1), "g-1") + event(note(2), "g-2") + b"data: \xff\n\n")
        else:
            await send_event(resp, note(3), event_id="g-3")
        await server.hold()
        return resp

    server.on_get = on_get
    async with upstream(server.url) as h:
        await h.handshake(server)
        await eventually(lambda: [n for n, _ in notes_got(h.got)] == [1, 2, 3])
    assert [g.headers.get("last-event-id") for g in server.requests_of("GET")] == [None, "g-2"]


async def test_what_the_server_sends_while_no_client_listens_reaches_its_next_get(
    tmp_path: Path, server: ScriptedServer
) -> None:
    notes = Notes(server, first=None)
    server.on_get = notes
    async with (
        run_proxy(tmp_path, upstream={"url": server.url}) as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = RawSession(http, proxy.url)
        await client.initialize()
        await server.wait_for(lambda: notes.streams == 1, "the proxy's GET")
        before = await buffered_bytes(http, proxy.base + "/healthz")
        notes.send(1)

        async def kept() -> bool:
            return await buffered_bytes(http, proxy.base + "/healthz") > before

        await eventually(kept, what="the proxy to keep the note")
        headers = client.headers(Accept="text/event-stream")
        async with http.get(proxy.url, headers=headers) as resp:
            assert resp.status == 200
            async for line in resp.content:
                if line.startswith(b"data: {"):
                    assert json.loads(line[6:]) == note(1)
                    break
    assert len(server.requests_of("GET")) == 1


async def test_stop_closes_the_stream(server: ScriptedServer) -> None:
    closed = asyncio.Event()

    async def on_get(request: web.Request) -> web.StreamResponse:
        resp = await open_sse(request)
        await send_event(resp, note(1))
        try:
            await server.hold()
        finally:  # aiohttp cancels the handler when its client hangs up
            closed.set()
        return resp

    server.on_get = on_get
    async with upstream(server.url) as h:
        await h.handshake(server)
        await eventually(lambda: bool(notes_got(h.got)))
    await asyncio.wait_for(closed.wait(), DEADLINE)


async def test_an_https_stream_is_read_over_tls_verified_by_the_systems_cas(
    tmp_path: Path,
) -> None:
    """Over TLS, verified against the CAs the HTTP client trusts (the system's: here the
    test's own, named by ``SSL_CERT_FILE``); end to end, so that both read it at start."""
    cert, key = self_signed(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    server = ScriptedServer(tls=tls)
    server.on_get = Notes(server)
    await server.start()
    config = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "upstream": {"url": server.url},
        "log": {"format": "json", "level": "debug"},
    }
    try:
        async with (
            run_proxy_on(tmp_path, config, {"SSL_CERT_FILE": str(cert)}) as proxy,
            aiohttp.ClientSession() as http,
        ):
            client = RawSession(http, proxy.url)
            await client.initialize()
            headers = client.headers(Accept="text/event-stream")
            async with http.get(proxy.url, headers=headers) as resp:
                async for line in resp.content:
                    if line.startswith(b"data: {"):
                        assert json.loads(line[6:]) == note(1)
                        break
            assert server.url.startswith("https://")
            assert len(server.requests_of("GET")) == 1
            assert "upstream_standalone_via_aiohttp" not in proxy.log_text()
    finally:
        await server.stop()


GARBLED = {  # the head, and the reason the health gives (none of the server's bytes)
    "not http": (b"garbage s3cret\r\n\r\n", "illegal status line"),
    "a bad header line": (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nBearer s3cret\r\n\r\n",
        "illegal header line",
    ),
    "a head over h11's bound": (
        b"HTTP/1.1 200 OK\r\nX-Pad: s3cret" + b"x" * (64 * 1024),
        "Receive buffer too long",
    ),
    "cut in the head": (b"HTTP/1.1 200 OK\r\nX-s3cret", "peer unexpectedly closed connection"),
}


@pytest.mark.parametrize("garbled", GARBLED)
async def test_a_garbled_answer_head_is_a_clear_error_and_the_session_goes_on(
    server: ScriptedServer, garbled: str, log: Any
) -> None:
    """Said in the health and the log in a few words: a garbled head may be long, and
    holds what the server (or something before it) sent, never to be echoed."""
    head, reason = GARBLED[garbled]
    close_after = garbled == "cut in the head"
    async with (
        garbled_gets(server.port, head, close_after=close_after) as front,
        upstream(front.url()) as h,
    ):
        await h.handshake(server)
        await eventually(lambda: front.gets >= 2, what="the GET tried again")
        error = h.health.last_error or ""
        assert error.endswith(f"/mcp: bad HTTP answer ({reason})"), error
        h.send(ping(2))  # POSTs are answered all the while
        assert "result" in (await h.answer(2))[0].raw
        assert not h.closed
    assert [e["event"] for e in log.entries if "standalone" in e["event"]] == []
    assert "s3cret" not in repr(log.entries)
    assert front.gets >= 2 and server.requests_of("GET") == []


async def test_an_untrusted_certificate_is_a_clear_tls_error_and_nothing_is_left(
    tmp_path: Path, log: Any
) -> None:
    """Over https with a certificate no CA of the process vouches for: the standalone
    ``GET`` fails its TLS handshake, said so in the health; it is tried again (a new
    handshake each time), nothing reaches the server, and stop leaves nothing running."""
    cert, key = self_signed(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    handshakes = 0

    def counted(*_: Any) -> None:
        nonlocal handshakes
        handshakes += 1

    tls.sni_callback = counted
    server = ScriptedServer(tls=tls)
    await server.start()
    try:
        async with upstream(server.url) as h:
            h.send(INIT)  # its POST fails the same way: a clear error for the request
            error, _ = await h.answer(1)
            assert "upstream unreachable" in error.raw["error"]["message"], error.raw
            h.up.listen()
            await eventually(
                lambda: (h.health.last_error or "").endswith(
                    "/mcp: TLS failed (CERTIFICATE_VERIFY_FAILED: self-signed certificate)"
                ),
                what=lambda: f"the TLS error in the health: {h.health.last_error}",
            )
            tried = handshakes
            await eventually(lambda: handshakes > tried, what="the GET tried again")
            assert not h.closed
        assert server.seen == []
    finally:
        await server.stop()
