"""Connecting the official `mcp` SDK client (v2) to a Streamable HTTP URL, for the e2e tests.

Only the SDK's public API is used:

- ``streamable_http_client(url, http_client=..., terminate_on_close=...)`` is the transport;
  the ``httpx2.AsyncClient`` passed in carries default headers (``Mcp-Session-Id`` to rejoin
  a session) and response hooks (to see statuses, ``Last-Event-ID`` reconnections and the
  session id the server assigned).
- ``ClientSession.initialize()`` is the SDK's handshake; it always offers
  ``LATEST_HANDSHAKE_VERSION`` (2025-11-25). Older revisions are negotiated with the same
  public calls it makes: ``send_request(InitializeRequest)``, ``adopt(result)`` and
  ``send_notification(InitializedNotification)``.
- ``ClientSession.adopt(result)`` installs a negotiated state without any wire traffic, so
  a new client can continue an existing session without a second ``initialize``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx2
import mcp_types as types
from mcp.client.session import ClientSession, ElicitationFnT, MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import LATEST_HANDSHAKE_VERSION

SESSION_HEADER = "mcp-session-id"
PROTOCOL_VERSION_HEADER = "mcp-protocol-version"
LAST_EVENT_ID_HEADER = "last-event-id"
CLIENT_INFO = types.Implementation(name="mcp-resume-proxy-e2e", version="0")

# Generous: a server that answers at all answers well within these.
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=120.0)


@dataclass(frozen=True)
class HttpExchange:
    """One HTTP response the client received (headers only; bodies are streamed)."""

    method: str
    status: int
    last_event_id: str | None
    session_id: str | None


@dataclass
class HttpLog:
    """Every response seen by one ``httpx2.AsyncClient``, in order."""

    exchanges: list[HttpExchange] = field(default_factory=list)
    assigned_session_id: str | None = None

    async def on_response(self, response: httpx2.Response) -> None:
        request = response.request
        self.exchanges.append(
            HttpExchange(
                method=request.method,
                status=response.status_code,
                last_event_id=request.headers.get(LAST_EVENT_ID_HEADER),
                session_id=request.headers.get(SESSION_HEADER),
            )
        )
        assigned = response.headers.get(SESSION_HEADER)
        if assigned and self.assigned_session_id is None:
            self.assigned_session_id = assigned

    def resumptions(self) -> list[HttpExchange]:
        """The GETs that carried ``Last-Event-ID`` (reconnections and explicit resumes)."""
        return [x for x in self.exchanges if x.method == "GET" and x.last_event_id is not None]

    def describe(self) -> str:
        return "\n".join(
            f"{x.method} -> {x.status}"
            + (f" Last-Event-ID={x.last_event_id}" if x.last_event_id else "")
            for x in self.exchanges
        )


@dataclass
class Connection:
    """A ``ClientSession`` with what the test may want to know about its HTTP side."""

    session: ClientSession
    http_log: HttpLog
    initialize_result: types.InitializeResult

    @property
    def session_id(self) -> str:
        assert self.http_log.assigned_session_id is not None, "server assigned no Mcp-Session-Id"
        return self.http_log.assigned_session_id


def client_capabilities(with_elicitation: bool) -> types.ClientCapabilities:
    elicitation = (
        types.ElicitationCapability(form=types.FormElicitationCapability())
        if with_elicitation
        else None
    )
    return types.ClientCapabilities(elicitation=elicitation)


async def handshake(
    session: ClientSession, protocol_version: str, *, with_elicitation: bool
) -> types.InitializeResult:
    """The legacy ``initialize`` handshake, offering ``protocol_version``."""
    if protocol_version == LATEST_HANDSHAKE_VERSION:
        return await session.initialize()
    result = await session.send_request(
        types.InitializeRequest(
            params=types.InitializeRequestParams(
                protocol_version=protocol_version,
                capabilities=client_capabilities(with_elicitation),
                client_info=CLIENT_INFO,
            )
        ),
        types.InitializeResult,
    )
    session.adopt(result)
    await session.send_notification(types.InitializedNotification())
    return result


@asynccontextmanager
async def connect(
    url: str,
    *,
    protocol_version: str = LATEST_HANDSHAKE_VERSION,
    elicitation_callback: ElicitationFnT | None = None,
    message_handler: MessageHandlerFnT | None = None,
    terminate_on_close: bool = True,
) -> AsyncIterator[Connection]:
    """A new session: connect, ``initialize`` at ``protocol_version``, ``initialized``."""
    http_log = HttpLog()
    async with (
        httpx2.AsyncClient(
            timeout=HTTP_TIMEOUT, event_hooks={"response": [http_log.on_response]}
        ) as http,
        streamable_http_client(url, http_client=http, terminate_on_close=terminate_on_close) as (
            read_stream,
            write_stream,
        ),
        ClientSession(
            read_stream,
            write_stream,
            elicitation_callback=elicitation_callback,
            message_handler=message_handler,
            client_info=CLIENT_INFO,
        ) as session,
    ):
        result = await handshake(
            session, protocol_version, with_elicitation=elicitation_callback is not None
        )
        yield Connection(session=session, http_log=http_log, initialize_result=result)


@asynccontextmanager
async def rejoin(
    url: str,
    *,
    session_id: str,
    initialize_result: types.InitializeResult,
    message_handler: MessageHandlerFnT | None = None,
) -> AsyncIterator[Connection]:
    """A brand-new client on an existing session: no ``initialize``, no ``initialized``.

    The session id travels as a default header of the HTTP client (the transport only learns
    one from an ``initialize`` response), and ``adopt`` installs the negotiated version, which
    the transport then sends as ``MCP-Protocol-Version``. The transport does not know the
    session is its own, so it neither opens the standalone GET stream nor sends ``DELETE``.
    """
    http_log = HttpLog()
    headers = {
        SESSION_HEADER: session_id,
        PROTOCOL_VERSION_HEADER: initialize_result.protocol_version,
    }
    async with (
        httpx2.AsyncClient(
            timeout=HTTP_TIMEOUT,
            headers=headers,
            event_hooks={"response": [http_log.on_response]},
        ) as http,
        streamable_http_client(url, http_client=http) as (read_stream, write_stream),
        ClientSession(
            read_stream, write_stream, message_handler=message_handler, client_info=CLIENT_INFO
        ) as session,
    ):
        session.adopt(initialize_result)
        http_log.assigned_session_id = session_id
        yield Connection(session=session, http_log=http_log, initialize_result=initialize_result)


def text_of(result: types.CallToolResult) -> str:
    """The concatenated text content of a tool result."""
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))
