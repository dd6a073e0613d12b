"""Initializing an MCP server on the proxy's behalf: the one driver.

Used by the stdio respawn and the HTTP upstream's re-initialize after a 404 (with the
client's own params, :func:`proxy.core.handshake.client_params`), and by whatever
initializes for the proxy itself (:func:`proxy.core.handshake.proxy_params`). Each
transport supplies how to ask (a request of the proxy's own, whose answer it keeps) and
how to send; the order and the checks are here (2025-11-25 basic/lifecycle
§Initialization).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from proxy.core import jsonrpc
from proxy.core.errors import UpstreamStartFailed
from proxy.core.handshake import (
    INITIALIZE,
    INITIALIZED,
    HandshakeStep,
    client_params,
    initialize_result,
    initialized_notification,
)
from proxy.core.jsonrpc import Kind, Message

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


async def answer_within(future: asyncio.Future[Message], method: str, timeout: float) -> Message:
    """The answer to a request of the proxy's own; ``UpstreamStartFailed`` when none came
    within ``timeout`` seconds."""
    try:
        async with asyncio.timeout(timeout):
            return await future
    except TimeoutError:
        raise UpstreamStartFailed(
            f"the MCP server did not answer {method} within {timeout:g} s"
        ) from None


class OwnRequests:
    """Requests of the proxy's own on one upstream session (``initialize``, ``ping``)
    and their answers, so that :func:`initialize` can drive any :class:`Upstream`.

    ``send`` writes one message upstream with its handshake mark; the transport's
    ``on_message`` hands each response to :meth:`answered` first.
    """

    def __init__(self, send: Callable[[bytes, HandshakeStep | None], None], prefix: str) -> None:
        self._send = send
        self._prefix = prefix  # ids of the proxy's own: strings, never the core's ints
        self._count = 0
        self._waiting: dict[str, asyncio.Future[Message]] = {}

    async def ask(self, method: str, params: dict[str, Any], timeout: float) -> Message:
        self._count += 1
        request_id = f"{self._prefix}{self._count}"
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        step = HandshakeStep.INITIALIZE if method == INITIALIZE else None
        request = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        self._send(jsonrpc.encode(request), step)
        try:
            return await answer_within(future, method, timeout)
        finally:
            self._waiting.pop(request_id, None)

    def notify(self, message: dict[str, Any]) -> None:
        step = HandshakeStep.INITIALIZED if message.get("method") == INITIALIZED else None
        self._send(jsonrpc.encode(message), step)

    def answered(self, msg: Message) -> bool:
        """Whether ``msg`` answers one of the proxy's own requests (it is taken here)."""
        if msg.kind is not Kind.RESPONSE or not isinstance(msg.id, str):
            return False
        future = self._waiting.get(msg.id)
        if future is None:
            return False
        if not future.done():
            future.set_result(msg)
        return True

    def gone(self, reason: str) -> None:
        """The upstream session is over: nothing asked will be answered."""
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(UpstreamStartFailed(f"the MCP server went away: {reason}"))


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
