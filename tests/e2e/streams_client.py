"""The official `mcp` SDK client (v2) speaking the seed's stream protocol, for the e2e tests.

Everything goes through the SDK's public API; nothing of the SDK is patched:

- ``capabilities.streams``: ``ClientCapabilities`` ignores unknown fields, so a subclass
  declares ``streams``; ``initialize`` is then sent with ``send_request`` and installed with
  ``adopt``, the same public calls ``ClientSession.initialize()`` makes.
- ``stream/poll`` / ``stream/resume`` are ``types.Request`` subclasses sent with
  ``send_request``; their params carry the extension param ``lastEventId``.
- ``notifications/stream/create`` / ``end`` are unknown to the core tables, so the session
  hands them to ``NotificationBinding`` handlers (its ``message_handler`` never sees them).
- ``MessageTap`` wraps the transport's read stream (``streamable_http_client`` yields the
  pair) and records every message in the order the transport hands it to the session.
- ``WireLog`` is the ``httpx2`` transport of the ``http_client`` given to
  ``streamable_http_client``: it records each POST body and the SSE events of each response
  as the SDK reads them, untouched. It is the only place where the JSON-RPC id of a
  response is seen as sent: the SDK's Streamable HTTP transport replaces the id of any
  response that arrives on a POST's SSE stream with the id of that POST's request before
  handing it over (``StreamableHTTPTransport._handle_sse_event``), and stops reading the
  stream there.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Protocol

import anyio
import httpx2
import mcp_types as types
from mcp.client.extension import NotificationBinding
from mcp.client.session import ClientSession, MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from tests.sse_wire import SseEvent, SseSplitter

from .sdk_client import CLIENT_INFO, HTTP_TIMEOUT, PROTOCOL_VERSION_HEADER, SESSION_HEADER

CREATE = "notifications/stream/create"
END = "notifications/stream/end"


# --- capabilities.streams -----------------------------------------------------------------


class StreamsClientCapabilities(types.ClientCapabilities):
    streams: dict[str, Any] | None = None


class StreamsInitializeRequestParams(types.InitializeRequestParams):
    capabilities: StreamsClientCapabilities


class StreamsInitializeRequest(types.InitializeRequest):
    params: StreamsInitializeRequestParams


# --- stream/poll, stream/resume -----------------------------------------------------------


class StreamRefParams(types.RequestParams):
    stream_id: str
    resume_token: str
    last_event_id: str | None = None
    """Extension param: the SSE event id of the last event the client received."""


class StreamPollRequest(types.Request[StreamRefParams, Literal["stream/poll"]]):
    method: Literal["stream/poll"] = "stream/poll"
    params: StreamRefParams


class StreamResumeRequest(types.Request[StreamRefParams, Literal["stream/resume"]]):
    method: Literal["stream/resume"] = "stream/resume"
    params: StreamRefParams


class StreamPollResult(types.Result):
    stream_id: str
    status: Literal["live", "completed"]
    pending_messages: bool
    has_request: bool
    has_error: bool


class AnyResult(types.Result):
    """Whatever result came back, every field kept (``wire()`` gives it as sent)."""

    model_config = ConfigDict(extra="allow")

    def wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, mode="json", exclude_none=True)


# --- notifications/stream/create, notifications/stream/end ----------------------------------


class _WireModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class ResumeInterval(_WireModel):
    min: float
    max: float


class StreamInfo(_WireModel):
    stream_id: str
    resume_token: str
    request_id: str | int
    resume_interval: ResumeInterval


class StreamCreateParams(types.NotificationParams):
    stream: StreamInfo


class StreamEndParams(types.NotificationParams):
    stream_id: str


# --- observation ---------------------------------------------------------------------------


class _Receiver(Protocol):
    async def receive(self) -> SessionMessage | Exception: ...
    async def aclose(self) -> None: ...


class MessageTap:
    """A read stream that records each message as the session takes it from the transport."""

    def __init__(self, inner: _Receiver) -> None:
        self._inner = inner
        self.messages: list[types.JSONRPCMessage] = []

    @property
    def last_context(self) -> Any:  # the dispatcher restores the sender's contextvars from it
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        item = await self._inner.receive()
        if isinstance(item, SessionMessage):
            self.messages.append(item.message)
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> MessageTap:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> MessageTap:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def since(self, start: int) -> list[dict[str, Any]]:
        """The messages from index ``start`` on, as JSON-RPC dicts."""
        return [
            m.model_dump(by_alias=True, mode="json", exclude_none=True)
            for m in self.messages[start:]
        ]


@dataclass
class WireExchange:
    """One HTTP request and the SSE events of its response, as far as the SDK read them."""

    method: str
    headers: dict[str, str]
    body: dict[str, Any] | None
    status: int
    content_type: str
    events: list[SseEvent] = field(default_factory=list)

    @property
    def sent(self) -> dict[str, Any]:
        """The JSON-RPC message POSTed."""
        assert self.body is not None, f"{self.method} carried no JSON body"
        return self.body

    def messages(self) -> list[dict[str, Any]]:
        """The JSON-RPC messages of the response's SSE events (priming events left out)."""
        return [m for e in self.events if (m := e.message) is not None]

    def describe(self) -> str:
        lines = [f"{self.method} {json.dumps(self.body)} -> {self.status} {self.content_type}"]
        lines += [f"    id: {e.id}  data: {e.data}" for e in self.events]
        return "\n".join(lines)


class _TeeStream(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, events: list[SseEvent]) -> None:
        self._inner = inner
        self._events = events
        self._splitter = SseSplitter()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._events.extend(self._splitter.feed(chunk))
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class WireLog(httpx2.AsyncBaseTransport):
    """An ``httpx2`` transport that records what goes over the wire and changes nothing."""

    def __init__(self) -> None:
        self._inner = httpx2.AsyncHTTPTransport()
        self.exchanges: list[WireExchange] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content) if request.method == "POST" else None
        response = await self._inner.handle_async_request(request)
        content_type = response.headers.get("content-type", "")
        exchange = WireExchange(
            method=request.method,
            headers=dict(request.headers),
            body=body,
            status=response.status_code,
            content_type=content_type,
        )
        self.exchanges.append(exchange)
        if content_type.startswith("text/event-stream") and isinstance(
            response.stream, httpx2.AsyncByteStream
        ):
            response.stream = _TeeStream(response.stream, exchange.events)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()

    def posts(self, method: str) -> list[WireExchange]:
        """The POSTs of JSON-RPC ``method``, in order."""
        return [x for x in self.exchanges if x.body is not None and x.body.get("method") == method]

    def describe(self) -> str:
        return "\n".join(x.describe() for x in self.exchanges)


# --- connecting ----------------------------------------------------------------------------


@dataclass
class StreamsConnection:
    session: ClientSession
    session_id: str
    initialize_result: types.InitializeResult
    tap: MessageTap
    wire: WireLog
    creates: list[StreamCreateParams]
    ends: list[StreamEndParams]


@asynccontextmanager
async def streams_client(
    url: str,
    *,
    rejoin: tuple[str, types.InitializeResult] | None = None,
    message_handler: MessageHandlerFnT | None = None,
    terminate_on_close: bool = True,
) -> AsyncIterator[StreamsConnection]:
    """A client declaring ``capabilities.streams``: a new session (``initialize`` with
    ``streams: {}``, then ``initialized``), or with ``rejoin=(session_id, initialize_result)``
    a brand-new client on that session, as ``sdk_client.rejoin`` does it (no handshake, no
    standalone GET, no DELETE)."""
    wire = WireLog()
    creates: list[StreamCreateParams] = []
    ends: list[StreamEndParams] = []

    async def on_create(params: StreamCreateParams) -> None:
        creates.append(params)

    async def on_end(params: StreamEndParams) -> None:
        ends.append(params)

    bindings: list[NotificationBinding[Any]] = [
        NotificationBinding(method=CREATE, params_type=StreamCreateParams, handler=on_create),
        NotificationBinding(method=END, params_type=StreamEndParams, handler=on_end),
    ]
    headers: dict[str, str] = {}
    if rejoin is not None:
        headers = {SESSION_HEADER: rejoin[0], PROTOCOL_VERSION_HEADER: rejoin[1].protocol_version}
    session_ids: list[str] = []

    async def on_response(response: httpx2.Response) -> None:
        if (assigned := response.headers.get(SESSION_HEADER)) and not session_ids:
            session_ids.append(assigned)

    async with (
        httpx2.AsyncClient(
            transport=wire,
            timeout=HTTP_TIMEOUT,
            headers=headers,
            event_hooks={"response": [on_response]},
        ) as http,
        streamable_http_client(url, http_client=http, terminate_on_close=terminate_on_close) as (
            read_stream,
            write_stream,
        ),
    ):
        tap = MessageTap(read_stream)
        async with ClientSession(
            tap,
            write_stream,
            message_handler=message_handler,
            client_info=CLIENT_INFO,
            notification_bindings=bindings,
        ) as session:
            if rejoin is None:
                result = await session.send_request(
                    StreamsInitializeRequest(
                        params=StreamsInitializeRequestParams(
                            protocol_version="2025-11-25",
                            capabilities=StreamsClientCapabilities(streams={}),
                            client_info=CLIENT_INFO,
                        )
                    ),
                    types.InitializeResult,
                )
                session.adopt(result)
                await session.send_notification(types.InitializedNotification())
                assert session_ids, "the initialize response carried no Mcp-Session-Id"
                session_id = session_ids[0]
            else:
                session_id, result = rejoin
                session.adopt(result)
            yield StreamsConnection(
                session=session,
                session_id=session_id,
                initialize_result=result,
                tap=tap,
                wire=wire,
                creates=creates,
                ends=ends,
            )
