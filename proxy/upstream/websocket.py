"""A WebSocket MCP server (DESIGN.md U4), with the ``websockets`` library's asyncio API.

MCP defines no WebSocket transport of its own (2025-11-25 transports §Custom Transports:
"preserve the JSON-RPC message format and lifecycle requirements"); this one is the
convention of the SDKs' WebSocket transports: subprotocol ``mcp``, one JSON-RPC message
(or batch) per text frame, both ways. A binary frame, or a text frame that is not
JSON-RPC, is logged and skipped; the session goes on.

The socket is the upstream session: when it drops, the loss, reconnection and
re-initialization policy of :class:`~proxy.upstream.sse.ChannelUpstream` applies.
``pause`` stops reading frames (``websockets`` then stops reading the socket once its
queue is full, and TCP holds the server back); keepalive pings go on, but while paused
their answers are not awaited, since they queue behind the unread frames.
"""

from __future__ import annotations

import contextlib
from typing import Any

import structlog
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.typing import Subprotocol

from proxy.upstream.base import UpstreamContext
from proxy.upstream.channel import ChannelUpstream, ConnectFailed, DeliveryFailed
from proxy.upstream.http_body import tls_failure

log = structlog.get_logger("proxy.upstream")

SUBPROTOCOL = Subprotocol("mcp")
_PING_TIMEOUT = 20.0  # websockets' default: a silent peer is dropped after it
_CLOSE_TIMEOUT = 2.0


class WebSocketUpstream(ChannelUpstream):
    """One WebSocket connection per client session."""

    transport = "websocket"

    def __init__(self, context: UpstreamContext) -> None:
        super().__init__(context)
        self._ws: ClientConnection | None = None

    async def _connect(self) -> None:
        try:
            self._ws = await connect(
                self._url,
                subprotocols=[SUBPROTOCOL],
                additional_headers=self._headers,
                open_timeout=None,  # the caller bounds the whole attempt
                ping_timeout=None if not self._readable.is_set() else _PING_TIMEOUT,
                close_timeout=_CLOSE_TIMEOUT,
                max_size=self._context.config.max_line_bytes,
                proxy=None,  # like the HTTP upstreams: no proxy from the environment
            )
        except (OSError, WebSocketException, ValueError) as exc:
            raise ConnectFailed(f"WebSocket handshake failed: {tls_failure(exc) or exc}") from None
        if self._ws.subprotocol != SUBPROTOCOL:
            log.info(
                "upstream_subprotocol_missing",
                session=self._context.label,
                subprotocol=self._ws.subprotocol,
            )

    async def _receive(self) -> str:
        ws = self._ws
        assert ws is not None
        try:
            while True:
                frame = await ws.recv()
                # Paused while the frame was awaited: keep it until resumed.
                await self._readable.wait()
                if isinstance(frame, bytes):
                    log.warning(
                        "upstream_frame_skipped",
                        session=self._context.label,
                        error="binary frame (MCP messages are text frames)",
                        size=len(frame),
                    )
                    continue
                self._received_data(frame)
        except ConnectionClosed as exc:
            return f"WebSocket closed ({_close_reason(exc)})"

    async def _deliver(self, payload: bytes) -> None:
        if self._ws is None:
            raise DeliveryFailed("not connected")
        try:
            await self._ws.send(payload.decode())
        except ConnectionClosed as exc:
            raise DeliveryFailed(f"WebSocket closed ({_close_reason(exc)})") from None

    def pause(self) -> None:
        super().pause()
        if self._ws is not None:
            self._ws.ping_timeout = None

    def resume(self) -> None:
        super().resume()
        if self._ws is not None:
            self._ws.ping_timeout = _PING_TIMEOUT

    async def _disconnect(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            # A close frame with 1000 is the goodbye; the socket goes even if unanswered.
            with contextlib.suppress(Exception):
                await ws.close()


def _close_reason(exc: ConnectionClosed) -> str:
    frame: Any = exc.rcvd or exc.sent
    if frame is None:
        return "no close frame"
    return f"{frame.code} {frame.reason}".strip()
