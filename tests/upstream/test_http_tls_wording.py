"""A failed TLS handshake is worded once (``proxy/upstream/http_body.py``: ``tls_failure``),
whichever path meets it: the HTTP upstream's POSTs (aiohttp wraps the ``ssl`` error), its
standalone ``GET`` (``http_listen.py``: the ``ssl`` error bare) and the legacy SSE and
WebSocket channels (``channel.describe_error``, ``websocket.py``). The wording names
OpenSSL's reason and why the certificate is not trusted, never the host, the URL or the
server's bytes."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from proxy.config_upstream import UpstreamConfig
from proxy.core.errors import UpstreamStartFailed
from proxy.upstream.base import UpstreamContext, UpstreamHealth
from proxy.upstream.channel import ChannelUpstream, describe_error
from proxy.upstream.http_body import tls_failure, why_failed
from proxy.upstream.sse import SseUpstream
from proxy.upstream.websocket import WebSocketUpstream
from tests.fixtures.http_harness import INIT, upstream
from tests.fixtures.http_scripted_server import ScriptedServer
from tests.support import eventually
from tests.upstream.listen_support import self_signed

UNTRUSTED = "TLS failed (CERTIFICATE_VERIFY_FAILED: self-signed certificate)"


@pytest.fixture
async def untrusted(tmp_path: Path) -> AsyncIterator[ScriptedServer]:
    """A scripted server over https with a certificate no CA of the process vouches for."""
    cert, key = self_signed(tmp_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    server = ScriptedServer(tls=tls)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_the_post_and_the_standalone_get_word_an_untrusted_certificate_alike(
    untrusted: ScriptedServer,
) -> None:
    async with upstream(untrusted.url) as h:
        h.send(INIT)
        error, _ = await h.answer(1)
        posted = error.raw["error"]["message"]
        assert posted.endswith(f"upstream unreachable: {UNTRUSTED}"), posted
        h.up.listen()
        await eventually(
            lambda: "TLS failed" in (h.health.last_error or ""),
            what=lambda: f"the GET's TLS error in the health: {h.health.last_error}",
        )
        got = h.health.last_error or ""
        assert got.endswith(f"/mcp: {UNTRUSTED}"), got
        assert got.partition("/mcp: ")[2] == posted.partition("upstream unreachable: ")[2]
    assert untrusted.seen == []


async def test_every_helper_words_the_wrapped_and_the_bare_ssl_error_alike(
    untrusted: ScriptedServer,
) -> None:
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientConnectorCertificateError) as wrapped:
            await http.get(untrusted.url)
    with pytest.raises(ssl.SSLCertVerificationError) as bare:
        await asyncio.open_connection("127.0.0.1", untrusted.port, ssl=ssl.create_default_context())
    for exc in (wrapped.value, bare.value):
        assert tls_failure(exc) == why_failed(exc) == describe_error(exc) == UNTRUSTED
    assert tls_failure(ConnectionRefusedError(111, "Connection refused")) is None


@pytest.mark.parametrize(
    ("kind", "scheme", "said"),
    [
        (SseUpstream, "https", "GET failed"),
        (WebSocketUpstream, "wss", "WebSocket handshake failed"),
    ],
)
async def test_the_legacy_channels_word_an_untrusted_certificate_alike(
    untrusted: ScriptedServer, kind: type[ChannelUpstream], scheme: str, said: str
) -> None:
    up = kind(
        UpstreamContext(
            UpstreamConfig(url=f"{scheme}://127.0.0.1:{untrusted.port}/mcp"),
            "test-session-id",
            on_message=lambda msg, origin: None,
            on_closed=lambda reason: None,
            health=UpstreamHealth(),
        )
    )
    try:
        with pytest.raises(UpstreamStartFailed) as info:
            await up.start()
    finally:
        await up.stop()
    assert info.value.message.endswith(f"{said}: {UNTRUSTED}"), info.value.message
