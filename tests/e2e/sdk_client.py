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

On top of them, what resumption tests do: a client that leaves in the middle of a call
(:func:`call_and_leave`), a brand-new one that resumes the call with the SDK's resumption
token (:func:`resume_left_call`), and the check that progress arrived exactly once, in
order (:func:`assert_exactly_once_in_order`).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import httpx2
import mcp_types as types
from mcp.client.session import (
    ClientSession,
    ElicitationFnT,
    IncomingMessage,
    MessageHandlerFnT,
)
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import ClientMessageMetadata
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from tests.support import eventually

SESSION_HEADER = "mcp-session-id"
PROTOCOL_VERSION_HEADER = "mcp-protocol-version"
LAST_EVENT_ID_HEADER = "last-event-id"
CLIENT_INFO = types.Implementation(name="mcp-resume-proxy-e2e", version="0")

# Generous: a server that answers at all answers well within these.
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=120.0)
CALL_DEADLINE_S = 60.0  # generous: every call here takes a few seconds at most
CALLBACKS_SETTLE_S = 10.0  # progress callbacks run as tasks; give them time to drain


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


# --- leaving in the middle of a call, and resuming it ------------------------------------


def assert_exactly_once_in_order(values: list[float], expected_count: int) -> None:
    """``values`` strictly increase (no duplicate, no reordering) and none is missing.

    The fixture's progress values are 1, 2, 3, ...; the messages name the gaps that way.
    """
    out_of_order = [(a, b) for a, b in itertools.pairwise(values) if b <= a]
    assert not out_of_order, f"duplicated or reordered progress (a, then b): {out_of_order[:10]}"
    gaps = [(a, b) for a, b in itertools.pairwise(values) if b > a + 1]
    assert len(values) == expected_count, (
        f"{len(values)} progress notifications instead of {expected_count}; "
        f"first {values[:1]}, last {values[-1:]}, gaps (a, then b): {gaps[:10]}"
    )


async def progress_arrived(values: list[float], count: int) -> None:
    """Wait until ``count`` progress values are in: callbacks run as tasks, so they may
    still be draining when the call's result is."""
    await eventually(
        lambda: len(values) >= count,
        timeout=CALLBACKS_SETTLE_S,
        what=lambda: f"{count} progress callbacks; got {values}",
    )


def call_tool_request(name: str, arguments: dict[str, object]) -> types.CallToolRequest:
    return types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments))


@dataclass
class LeavingClient:
    """Records a call's progress and resumption tokens until it has seen ``leave_after``
    progress notifications, then freezes: what it saw, and the token to resume from."""

    leave_after: int
    seen: list[float] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    resume_from: str | None = None
    left: anyio.Event = field(default_factory=anyio.Event)

    async def on_resumption_token(self, token: str) -> None:
        if not self.left.is_set():
            self.tokens.append(token)

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        if self.left.is_set():
            return  # the client is leaving; anything later is for the next client
        self.seen.append(progress)
        if len(self.seen) == self.leave_after:
            # The transport calls on_resumption_token_update for an event right after handing
            # the message over, before the dispatcher runs this callback for it, so the last
            # token is this progress notification's event id. (No assert here: the SDK logs
            # and swallows exceptions raised by progress callbacks.)
            self.resume_from = self.tokens[-1] if self.tokens else None
            self.left.set()


@dataclass(frozen=True)
class LeftSession:
    """A session a client left in the middle of a call, for a new client to rejoin."""

    session_id: str
    initialize_result: types.InitializeResult
    call_finished: bool  # the call was answered before the client left (it should not be)


async def call_and_leave(
    url: str,
    request: types.CallToolRequest,
    leaving: LeavingClient,
    protocol_version: str = LATEST_HANDSHAKE_VERSION,
) -> LeftSession:
    """A new session sends ``request``; its connection drops once ``leaving`` has left.

    ``terminate_on_close=False``: leaving must not DELETE the session.
    """
    answered: list[types.CallToolResult] = []
    async with connect(url, protocol_version=protocol_version, terminate_on_close=False) as conn:

        async def call() -> None:
            metadata = ClientMessageMetadata(on_resumption_token_update=leaving.on_resumption_token)
            answered.append(
                await conn.session.send_request(
                    request,
                    types.CallToolResult,
                    metadata=metadata,
                    progress_callback=leaving.on_progress,
                )
            )

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await leaving.left.wait()
            tg.cancel_scope.cancel()  # the client goes away mid-call
    return LeftSession(conn.session_id, conn.initialize_result, bool(answered))


@dataclass
class ProgressNotifications:
    """A message handler that keeps ``notifications/progress`` (any progress token)."""

    values: list[float] = field(default_factory=list)
    tokens: set[types.ProgressToken] = field(default_factory=set)

    async def __call__(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ProgressNotification):
            self.values.append(message.params.progress)
            self.tokens.add(message.params.progress_token)


@dataclass(frozen=True)
class Resumed:
    """What a new client got by resuming a call another client left."""

    result: types.CallToolResult
    progress: ProgressNotifications
    http_log: HttpLog


async def resume_left_call(
    url: str,
    left: LeftSession,
    request: types.CallToolRequest,
    resume_from: str,
    remaining: int,
    on_resumption_token: Callable[[str], Awaitable[None]] | None = None,
) -> Resumed:
    """A brand-new client on the ``left`` session resumes ``request`` from the SSE event id
    ``resume_from`` (the SDK sends ``GET`` + ``Last-Event-ID``, not the request again), then
    waits for the ``remaining`` progress notifications."""
    progress = ProgressNotifications()
    async with rejoin(
        url,
        session_id=left.session_id,
        initialize_result=left.initialize_result,
        message_handler=progress,
    ) as conn:
        metadata = ClientMessageMetadata(
            resumption_token=resume_from, on_resumption_token_update=on_resumption_token
        )
        result = await conn.session.send_request(request, types.CallToolResult, metadata=metadata)
        await progress_arrived(progress.values, remaining)
    return Resumed(result, progress, conn.http_log)
