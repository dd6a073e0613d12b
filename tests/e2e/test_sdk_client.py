"""The official `mcp` Python SDK client (v2) against the server under test, over real HTTP.

Each test starts the proxy in front of ``tests/fixtures/legacy_server.py`` (see conftest.py;
``MCP_E2E_TARGET=sdk`` points the same tests at the SDK's own resumable server) and drives
it with the SDK's legacy ``initialize`` handshake at the protocol revisions the SDK offers.

Resumability is checked both ways the SDK resumes:

(a) by itself: the server closes a response stream early (``sse.max_stream_seconds``, SEP-1699
    polling) and the SDK transport reconnects with ``GET`` + ``Last-Event-ID``;
(b) on request: a client leaves in the middle of a call, and a brand-new client on the same
    ``Mcp-Session-Id`` passes ``ClientMessageMetadata(resumption_token=...)``, which the SDK
    turns into ``GET`` + ``Last-Event-ID`` instead of sending the request again.

"Exactly once, in order" is checked on progress notifications: their ``progress`` values
strictly increase, so a duplicate or a reordering breaks the sequence and a loss shortens it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext, ClientSession, IncomingMessage
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ClientMessageMetadata
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION

from tests.support import eventually

from .sdk_client import HttpExchange, HttpLog, connect, rejoin, text_of
from .servers import RunningServer, ServerFactory

# The revisions a 2025-era Streamable HTTP client can negotiate (2024-11-05 has no
# Streamable HTTP). The SDK's own `initialize()` offers the first one.
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26")
ELICITATION_VERSIONS = ("2025-11-25", "2025-06-18")  # elicitation arrived in 2025-06-18
TOOLS = {"echo", "slow", "burst", "ask", "crash"}

CALL_DEADLINE_S = 60.0  # generous: every call here takes a few seconds at most
CALLBACKS_SETTLE_S = 10.0  # progress callbacks run as tasks; give them time to drain

assert PROTOCOL_VERSIONS[0] == LATEST_HANDSHAKE_VERSION


@pytest.fixture(params=PROTOCOL_VERSIONS)
def protocol_version(request: pytest.FixtureRequest) -> str:
    version: str = request.param
    return version


@dataclass
class ProgressLog:
    """A progress callback that records every ``progress`` value it is given."""

    values: list[float] = field(default_factory=list)

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.values.append(progress)


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


def call_tool_request(name: str, arguments: dict[str, object]) -> types.CallToolRequest:
    return types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=arguments))


async def call_tool_seeing_event_ids(
    session: ClientSession, name: str, arguments: dict[str, object], progress: ProgressLog
) -> tuple[types.CallToolResult, list[str]]:
    """``call_tool``, plus the SSE event ids of the call's own stream (reconnections included).

    ``on_resumption_token_update`` alone does not change how the SDK sends the request (still
    a POST); it only reports each event id, which tells this call's stream apart from the
    standalone GET stream when counting ``Last-Event-ID`` reconnections.
    """
    event_ids: list[str] = []

    async def record(event_id: str) -> None:
        event_ids.append(event_id)

    result = await session.send_request(
        call_tool_request(name, arguments),
        types.CallToolResult,
        metadata=ClientMessageMetadata(on_resumption_token_update=record),
        progress_callback=progress,
    )
    return result, event_ids


def call_resumptions(http_log: HttpLog, event_ids: list[str]) -> list[HttpExchange]:
    """The ``GET`` + ``Last-Event-ID`` requests that resumed the call's stream."""
    ids = set(event_ids)
    return [x for x in http_log.resumptions() if x.last_event_id in ids]


async def test_client_class_legacy_mode(mcp_server: RunningServer) -> None:
    """The high-level ``Client`` with ``mode="legacy"``: initialize at 2025-11-25, no probe."""
    with anyio.fail_after(CALL_DEADLINE_S):
        async with Client(mcp_server.url, mode="legacy") as client:
            assert client.protocol_version == LATEST_HANDSHAKE_VERSION
            tools = await client.list_tools()
            assert {tool.name for tool in tools.tools} >= TOOLS
            result = await client.call_tool("echo", {"text": "hello via Client"})
            assert not result.is_error
            assert text_of(result) == "hello via Client"


async def test_client_class_auto_mode_falls_back_to_initialize(
    mcp_server: RunningServer, e2e_target: str
) -> None:
    """The ``Client`` default (``mode="auto"``) probes ``server/discover`` at 2026-07-28 first;
    a legacy server behind the proxy must make it fall back to ``initialize``."""
    if e2e_target == "sdk":
        pytest.skip("the SDK's own server speaks 2026-07-28, so the probe succeeds there")
    with anyio.fail_after(CALL_DEADLINE_S):
        async with Client(mcp_server.url) as client:
            assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
            result = await client.call_tool("echo", {"text": "after the probe"})
            assert text_of(result) == "after the probe"


async def test_initialize_list_tools_and_echo(
    mcp_server: RunningServer, protocol_version: str
) -> None:
    with anyio.fail_after(CALL_DEADLINE_S):
        async with connect(mcp_server.url, protocol_version=protocol_version) as conn:
            assert conn.initialize_result.protocol_version == protocol_version
            assert conn.http_log.assigned_session_id, "no Mcp-Session-Id on the initialize reply"
            tools = await conn.session.list_tools()
            assert {tool.name for tool in tools.tools} >= TOOLS
            result = await conn.session.call_tool("echo", {"text": "héllo ✓"})
            assert not result.is_error
            assert text_of(result) == "héllo ✓"


async def test_slow_reports_every_progress_in_order(
    mcp_server: RunningServer, protocol_version: str
) -> None:
    progress = ProgressLog()
    with anyio.fail_after(CALL_DEADLINE_S):
        async with connect(mcp_server.url, protocol_version=protocol_version) as conn:
            result = await conn.session.call_tool(
                "slow", {"steps": 5, "delay": 0.2}, progress_callback=progress
            )
            assert text_of(result) == "done 5"
            await eventually(
                lambda: len(progress.values) >= 5,
                timeout=CALLBACKS_SETTLE_S,
                what=lambda: f"5 progress callbacks; got {progress.values}",
            )
    assert_exactly_once_in_order(progress.values, 5)


async def test_burst_of_500_progress_notifications(
    mcp_server: RunningServer, protocol_version: str
) -> None:
    progress = ProgressLog()
    with anyio.fail_after(CALL_DEADLINE_S):
        async with connect(mcp_server.url, protocol_version=protocol_version) as conn:
            result = await conn.session.call_tool(
                "burst", {"n": 500, "size": 200}, progress_callback=progress
            )
            assert text_of(result) == "burst 500"
            await eventually(
                lambda: len(progress.values) >= 500,
                timeout=CALLBACKS_SETTLE_S,
                what=lambda: f"500 progress callbacks; got {progress.values}",
            )
    assert_exactly_once_in_order(progress.values, 500)


@pytest.mark.parametrize("version", ELICITATION_VERSIONS)
async def test_ask_is_answered_by_the_elicitation_callback(
    mcp_server: RunningServer, version: str
) -> None:
    question = "What is the answer?"
    answer = "forty-two"
    asked: list[types.ElicitRequestParams] = []

    async def answer_it(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"answer": answer})

    with anyio.fail_after(CALL_DEADLINE_S):
        async with connect(
            mcp_server.url, protocol_version=version, elicitation_callback=answer_it
        ) as conn:
            result = await conn.session.call_tool("ask", {"question": question})
    assert len(asked) == 1
    params = asked[0]
    assert isinstance(params, types.ElicitRequestFormParams)
    assert params.message == question
    assert "answer" in params.requested_schema.get("properties", {})
    assert not result.is_error
    assert answer in text_of(result)


async def test_crash_fails_the_call_and_ends_the_session(
    mcp_server: RunningServer, protocol_version: str
) -> None:
    with anyio.fail_after(CALL_DEADLINE_S):
        async with connect(mcp_server.url, protocol_version=protocol_version) as conn:
            with pytest.raises(MCPError) as crashed:
                await conn.session.call_tool("crash", {})
            before_next = len(conn.http_log.exchanges)
            with pytest.raises(MCPError) as gone:
                await conn.session.call_tool("echo", {"text": "anyone there?"})
            after_crash = conn.http_log.exchanges[before_next:]
    statuses = [(x.method, x.status) for x in after_crash]
    assert ("POST", 404) in statuses, (
        f"expected the next request to get 404 (session gone), got {statuses}; "
        f"crash error {crashed.value.code} {crashed.value.message!r}"
    )
    # What the SDK raises is the JSON-RPC error in the 404 body when there is one (the proxy
    # and the TypeScript SDK use -32001, the Python SDK -32600), else its own -32600
    # "Session terminated": the code is the server's choice, the 404 is what matters.
    assert isinstance(gone.value.code, int)


async def test_sdk_reconnects_by_itself_when_the_server_closes_the_stream(
    server_factory: ServerFactory,
    protocol_version: str,
    e2e_target: str,
    request: pytest.FixtureRequest,
) -> None:
    """(a) SEP-1699 polling: the proxy ends each response stream after 0.5 s (having sent
    ``retry:``); the SDK transport reconnects with ``GET`` + ``Last-Event-ID`` on its own."""
    if e2e_target == "sdk" and protocol_version == LATEST_HANDSHAKE_VERSION:
        request.applymarker(
            pytest.mark.xfail(
                reason="the SDK server loses a message stored while it replays (between "
                "replay_events_after and re-registering the stream), see DESIGN.md §3",
                strict=False,
            )
        )
    progress = ProgressLog()
    config = {"sse": {"max_stream_seconds": 0.5, "retry_ms": 200}}
    async with server_factory.start(config) as server:
        with anyio.fail_after(CALL_DEADLINE_S):
            async with connect(server.url, protocol_version=protocol_version) as conn:
                result, event_ids = await call_tool_seeing_event_ids(
                    conn.session, "slow", {"steps": 10, "delay": 0.2}, progress
                )
                await eventually(
                    lambda: len(progress.values) >= 10,
                    timeout=CALLBACKS_SETTLE_S,
                    what=lambda: f"10 progress callbacks; got {progress.values}",
                )
                http_log = conn.http_log
    assert text_of(result) == "done 10"
    assert_exactly_once_in_order(progress.values, 10)
    if protocol_version == LATEST_HANDSHAKE_VERSION:
        # Only 2025-11-25 clients get priming events and server-initiated closes; a 2 s call
        # under a 0.5 s limit must have been resumed at least once.
        assert call_resumptions(http_log, event_ids), (
            f"the call's stream was never resumed; event ids {event_ids}\n{http_log.describe()}"
        )


async def test_sdk_reconnects_many_times_during_a_fast_stream(
    server_factory: ServerFactory, e2e_target: str, request: pytest.FixtureRequest
) -> None:
    """(a), harder: 300 progress notifications 10 ms apart under a 0.2 s stream limit, so the
    SDK reconnects about fifteen times while the upstream keeps talking. Every replay then
    races live messages: the hand-over DESIGN.md §3 says implementations get wrong."""
    if e2e_target == "sdk":
        request.applymarker(
            pytest.mark.xfail(
                reason="the SDK server loses messages stored while it replays", strict=False
            )
        )
    steps = 300
    progress = ProgressLog()
    config = {"sse": {"max_stream_seconds": 0.2, "retry_ms": 20}}
    async with server_factory.start(config) as server:
        with anyio.fail_after(CALL_DEADLINE_S):
            async with connect(server.url) as conn:
                result, event_ids = await call_tool_seeing_event_ids(
                    conn.session, "slow", {"steps": steps, "delay": 0.01}, progress
                )
                await eventually(
                    lambda: len(progress.values) >= steps,
                    timeout=CALLBACKS_SETTLE_S,
                    what=lambda: f"{steps} progress callbacks; got {progress.values}",
                )
                http_log = conn.http_log
    assert text_of(result) == f"done {steps}"
    assert_exactly_once_in_order(progress.values, steps)
    resumed = call_resumptions(http_log, event_ids)
    assert len(resumed) >= 3, f"{len(resumed)} reconnections only:\n{http_log.describe()}"


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


@dataclass
class ProgressNotifications:
    """A message handler that keeps ``notifications/progress`` (any progress token)."""

    values: list[float] = field(default_factory=list)
    tokens: set[types.ProgressToken] = field(default_factory=set)

    async def __call__(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ProgressNotification):
            self.values.append(message.params.progress)
            self.tokens.add(message.params.progress_token)


async def test_new_client_resumes_a_call_with_the_last_token(
    mcp_server: RunningServer, protocol_version: str
) -> None:
    """(b) The first client calls ``slow`` and leaves after 3 progress notifications; a new
    client on the same ``Mcp-Session-Id`` resumes it with the last token it recorded and
    gets the rest and the result, with nothing the first client saw repeated."""
    steps = 10
    request = call_tool_request("slow", {"steps": steps, "delay": 0.2})
    first = LeavingClient(leave_after=3)
    finished_early: list[types.CallToolResult] = []

    with anyio.fail_after(CALL_DEADLINE_S):
        # terminate_on_close=False: leaving must not DELETE the session.
        async with connect(
            mcp_server.url, protocol_version=protocol_version, terminate_on_close=False
        ) as conn:
            session_id = conn.session_id
            initialize_result = conn.initialize_result

            async def call() -> None:
                finished_early.append(
                    await conn.session.send_request(
                        request,
                        types.CallToolResult,
                        metadata=ClientMessageMetadata(
                            on_resumption_token_update=first.on_resumption_token
                        ),
                        progress_callback=first.on_progress,
                    )
                )

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await first.left.wait()
                tg.cancel_scope.cancel()  # the first client goes away mid-call
    assert not finished_early, "the call finished before the first client left"
    assert first.resume_from is not None, "no SSE event id came with the first progress"
    assert len(first.seen) == first.leave_after

    second_progress = ProgressNotifications()
    second_tokens: list[str] = []

    async def on_second_token(token: str) -> None:
        second_tokens.append(token)

    remaining = steps - len(first.seen)
    with anyio.fail_after(CALL_DEADLINE_S):
        async with rejoin(
            mcp_server.url,
            session_id=session_id,
            initialize_result=initialize_result,
            message_handler=second_progress,
        ) as conn2:
            result = await conn2.session.send_request(
                request,
                types.CallToolResult,
                metadata=ClientMessageMetadata(
                    resumption_token=first.resume_from,
                    on_resumption_token_update=on_second_token,
                ),
            )
            await eventually(
                lambda: len(second_progress.values) >= remaining,
                timeout=CALLBACKS_SETTLE_S,
                what=lambda: f"{remaining} progress callbacks; got {second_progress.values}",
            )
            resumed_with = conn2.http_log.resumptions()

    assert text_of(result) == f"done {steps}"
    assert [x.last_event_id for x in resumed_with][:1] == [first.resume_from], (
        f"the resume was not a GET with Last-Event-ID={first.resume_from}: "
        f"{conn2.http_log.describe()}"
    )
    assert second_tokens, "the resumed stream carried no SSE event ids"
    assert len(second_progress.tokens) == 1, second_progress.tokens
    assert_exactly_once_in_order(first.seen + second_progress.values, steps)
