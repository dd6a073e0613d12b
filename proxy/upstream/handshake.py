"""Initializing an MCP server on the proxy's behalf: the one driver.

Used by the stdio respawn and the HTTP upstream's re-initialize after a 404 (with the
client's own params, :func:`proxy.core.handshake.client_params`), and by whatever
initializes for the proxy itself (:func:`proxy.core.handshake.proxy_params`). Each
transport supplies how to ask (a request of the proxy's own, whose answer it keeps) and
how to send; the order and the checks are here (2025-11-25 basic/lifecycle
§Initialization).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from proxy.core import jsonrpc
from proxy.core.handshake import (
    INITIALIZE,
    HandshakeStep,
    client_params,
    initialize_result,
    initialized_notification,
)
from proxy.core.jsonrpc import Message

INITIALIZE_TIMEOUT_SECONDS = 30.0
"""How long a server has to answer the proxy's own ``initialize``."""

Ask = Callable[[str, dict[str, Any], float], Awaitable[Message]]
"""``ask(method, params, timeout)``: send a request of the proxy's own and return its
answer; raise :class:`~proxy.core.errors.UpstreamStartFailed` when none comes in time."""
Send = Callable[[dict[str, Any]], "Awaitable[None] | None"]
"""``send(message)``: one message to the server (awaited when the transport must)."""


async def initialize(
    ask: Ask, send: Send, params: dict[str, Any], timeout: float
) -> dict[str, Any]:
    """``initialize`` with ``params``, its answer checked, then ``notifications/initialized``;
    returns the server's ``InitializeResult`` (raises ``UpstreamStartFailed`` otherwise)."""
    answer = await ask(INITIALIZE, params, timeout)
    result = initialize_result(answer)
    sent = send(initialized_notification())
    if inspect.isawaitable(sent):
        await sent
    return result


class ClientHandshake:
    """The client's own handshake as it went upstream, as the core marked it: what a new
    upstream session is initialized with."""

    def __init__(self) -> None:
        self.request: dict[str, Any] | None = None  # the client's initialize, ids rewritten
        self.initialized = False  # the client sent notifications/initialized after it

    def sent(self, step: HandshakeStep | None, payload: bytes) -> None:
        if step is HandshakeStep.INITIALIZE:
            self.request = jsonrpc.decode(payload)
        elif step is HandshakeStep.INITIALIZED and self.request is not None:
            self.initialized = True

    @property
    def params(self) -> dict[str, Any]:
        """The client's initialize params (empty before it)."""
        return client_params(self.request or {})
