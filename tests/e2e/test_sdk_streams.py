"""The seed's stream protocol (``capabilities.streams``) driven by the official `mcp` SDK client.

A client declaring ``capabilities: {streams: {}}`` calls ``slow`` and is torn down after three
progress notifications (``terminate_on_close=False``: the session stays). A brand-new client
on the same ``Mcp-Session-Id`` polls the stream until it reports pending messages, then
resumes it from the last event id the first client saw: it must get the rest of the call
exactly once, in order, under the original event ids, the tool result under the ORIGINAL
``tools/call`` id, ``notifications/stream/end`` after it, and ``{}`` for ``stream/resume``.

How the SDK is extended (public API only) is in ``streams_client.py``. What the SDK cannot
do: its Streamable HTTP transport takes the first JSON-RPC response on a POST's SSE stream
for the answer to that POST. On ``stream/resume`` that is the tool result, so the SDK
relabels it with the resume's own id, resolves ``send_request(stream/resume)`` with it and
closes the stream: neither ``notifications/stream/end`` nor the resume's ``{}`` reach the
session. So the test reads the tool result's real id from the wire (the ``httpx2`` transport
it hands the SDK), and resumes a second time from the tool result's event id, which yields
``notifications/stream/end`` and then ``{}`` as that resume's own answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.session import IncomingMessage
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ClientMessageMetadata

from tests.support import eventually

from .servers import ServerFactory
from .streams_client import (
    CREATE,
    END,
    AnyResult,
    StreamInfo,
    StreamPollRequest,
    StreamPollResult,
    StreamRefParams,
    StreamResumeRequest,
    StreamsConnection,
    WireExchange,
    WireLog,
    streams_client,
)

STEPS = 12
DELAY_S = 0.3  # 3.6 s in all: the call is still running while the second client polls
LEAVE_AFTER = 3  # progress notifications the first client gets before it goes away
RESUME_INTERVAL = {"min": 0.1, "max": 120}
STREAMS_CONFIG = {"streams": {"resume_interval": RESUME_INTERVAL}}
# The SDK numbers requests from 1 in every ClientSession, so a second client on the session
# reuses the first one's ids. The first client spends this many on pings before the call,
# so that the tools/call id is one the second client never sends (checked at the end).
BURNED_IDS = 30

DEADLINE_S = 60.0  # generous: the whole exchange takes a few seconds
SETTLE_S = 10.0  # notification handlers run as tasks; give them time to drain
INVALID_PARAMS = -32602


@pytest.fixture(autouse=True)
def proxy_only(e2e_target: str) -> None:
    if e2e_target != "proxy":
        pytest.skip("the seed's stream protocol is served by the proxy, not the SDK's server")


def ref(stream: StreamInfo, last_event_id: str | None, token: str | None = None) -> StreamRefParams:
    return StreamRefParams(
        stream_id=stream.stream_id,
        resume_token=stream.resume_token if token is None else token,
        last_event_id=last_event_id,
    )


def position(event_id: str | None) -> tuple[str, int]:
    """``<epoch>.<stream>.<seq>`` (README, "Resumability") -> (``<epoch>.<stream>``, seq)."""
    assert event_id is not None, "an SSE event without an id"
    stream, _, seq = event_id.rpartition(".")
    return stream, int(seq)


def progress_values(messages: list[dict[str, Any]]) -> list[float]:
    return [
        m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"
    ]


def progress_message(token: Any, value: int) -> dict[str, Any]:
    params = {"progressToken": token, "progress": value, "total": STEPS}
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


def stream_end(stream: StreamInfo) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": END, "params": {"streamId": stream.stream_id}}


def response(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def last_post(wire: WireLog, method: str) -> WireExchange:
    posts = wire.posts(method)
    assert posts, f"no POST of {method} on the wire:\n{wire.describe()}"
    return posts[-1]


@dataclass
class EventIds:
    """An ``on_resumption_token_update`` callback: the SSE event ids the SDK reports."""

    ids: list[str] = field(default_factory=list)

    async def __call__(self, event_id: str) -> None:
        self.ids.append(event_id)


@dataclass
class ProgressHandler:
    """A ``message_handler`` keeping the ``notifications/progress`` the session surfaces."""

    values: list[float] = field(default_factory=list)

    async def __call__(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ProgressNotification):
            self.values.append(message.params.progress)


@dataclass
class LeftCall:
    """What the first client leaves the second one: the stream and its position in it."""

    session_id: str
    initialize_result: types.InitializeResult
    stream: StreamInfo
    call_id: Any
    progress_token: Any
    acknowledged_id: str  # the event id of the last message the first client received
    acknowledged_progress: list[float]


async def test_create_poll_resume_end(server_factory: ServerFactory) -> None:
    async with server_factory.start(STREAMS_CONFIG) as server:
        with anyio.fail_after(DEADLINE_S):
            left = await call_and_leave(server.url)
            second_progress = ProgressHandler()
            async with streams_client(
                server.url,
                rejoin=(left.session_id, left.initialize_result),
                message_handler=second_progress,
            ) as second:
                await poll_until_pending(second, left)
                result_event_id = await resume(second, left)
                await eventually(
                    lambda: len(second_progress.values) >= STEPS - LEAVE_AFTER,
                    timeout=SETTLE_S,
                    what=lambda: (
                        f"{STEPS - LEAVE_AFTER} progress callbacks; got {second_progress.values}"
                    ),
                )
                end_event_id = await resume_the_tail(second, left, result_event_id)
                await poll_completed(second, left, end_event_id)
                second_ids = [
                    x.sent["id"] for x in second.wire.exchanges if x.body and "id" in x.body
                ]

    union = left.acknowledged_progress + second_progress.values
    assert union == list(range(1, STEPS + 1)), f"duplicated, reordered or lost progress: {union}"
    assert left.call_id not in second_ids, (
        f"the second client reused the tools/call id {left.call_id}; raise BURNED_IDS"
    )


async def call_and_leave(url: str) -> LeftCall:
    """Step 1: ``slow`` with ``capabilities.streams``; gone after LEAVE_AFTER progress."""
    event_ids = EventIds()
    callback_progress: list[float] = []
    finished_early: list[types.CallToolResult] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        callback_progress.append(progress)

    async with streams_client(url, terminate_on_close=False) as first:
        for _ in range(BURNED_IDS):
            await first.session.send_ping()

        async def call() -> None:
            request = types.CallToolRequest(
                params=types.CallToolRequestParams(
                    name="slow", arguments={"steps": STEPS, "delay": DELAY_S}
                )
            )
            finished_early.append(
                await first.session.send_request(
                    request,
                    types.CallToolResult,
                    # Besides reporting event ids, this keeps the SDK from sending
                    # notifications/cancelled when the call is abandoned below.
                    metadata=ClientMessageMetadata(on_resumption_token_update=event_ids),
                    progress_callback=on_progress,
                )
            )

        def acknowledged_id() -> str | None:
            """The id of the event carrying progress LEAVE_AFTER, once the SDK reported it."""
            posts = first.wire.posts("tools/call")
            for event in posts[0].events if posts else []:
                if (event.message or {}).get("params", {}).get("progress") == LEAVE_AFTER:
                    return event.id if event.id in event_ids.ids else None
            return None

        def what() -> str:
            posts = first.wire.posts("tools/call")
            return f"progress {LEAVE_AFTER} and a create:\n{posts[-1].describe() if posts else ''}"

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            await eventually(
                lambda: (
                    acknowledged_id() is not None
                    and len(callback_progress) >= LEAVE_AFTER
                    and bool(first.creates)
                ),
                timeout=DEADLINE_S,
                what=what,
            )
            tg.cancel_scope.cancel()  # the first client goes away mid-call
    post = last_post(first.wire, "tools/call")
    assert not finished_early, "the call finished before the first client left"
    ack = acknowledged_id()
    assert ack is not None
    call_id = post.sent["id"]
    progress_token = post.sent["params"]["_meta"]["progressToken"]

    # The wire: the priming event, then notifications/stream/create, then the call's messages.
    assert post.events and post.events[0].message is None, post.describe()
    on_wire = post.messages()
    assert on_wire[0]["method"] == CREATE, post.describe()
    announced = on_wire[0]["params"]["stream"]
    assert announced["requestId"] == call_id
    assert announced["resumeInterval"] == RESUME_INTERVAL
    assert on_wire[1 : 1 + LEAVE_AFTER] == [
        progress_message(progress_token, p) for p in range(1, LEAVE_AFTER + 1)
    ], post.describe()
    # The SDK reported every event id, in wire order, and handed the messages over in order.
    assert event_ids.ids == [e.id for e in post.events][: len(event_ids.ids)], post.describe()
    handed_over = [
        m
        for m in first.tap.since(0)
        if m.get("method") == CREATE or m.get("params", {}).get("progressToken") == progress_token
    ]
    assert handed_over == on_wire[: len(handed_over)], post.describe()
    assert callback_progress[:LEAVE_AFTER] == list(range(1, LEAVE_AFTER + 1))
    # The announcement as the session surfaced it (NotificationBinding).
    assert len(first.creates) == 1, first.creates
    stream = first.creates[0].stream
    assert (stream.stream_id, stream.resume_token, stream.request_id) == (
        announced["streamId"],
        announced["resumeToken"],
        call_id,
    )
    return LeftCall(
        session_id=first.session_id,
        initialize_result=first.initialize_result,
        stream=stream,
        call_id=call_id,
        progress_token=progress_token,
        acknowledged_id=ack,
        # What the first client acknowledged: anything after `ack` it gets again.
        acknowledged_progress=[float(p) for p in range(1, LEAVE_AFTER + 1)],
    )


async def poll_until_pending(second: StreamsConnection, left: LeftCall) -> None:
    """Step 2: ``stream/poll`` from the acknowledged event until messages are pending."""
    polls: list[StreamPollResult] = []

    async def pending() -> bool:
        poll = await second.session.send_request(
            StreamPollRequest(params=ref(left.stream, left.acknowledged_id)), StreamPollResult
        )
        polls.append(poll)
        assert (poll.stream_id, poll.status, poll.has_request, poll.has_error) == (
            left.stream.stream_id,
            "live",
            False,
            False,
        ), polls
        return poll.pending_messages

    # Polled at the interval the server asks for.
    await eventually(
        pending,
        timeout=DEADLINE_S,
        interval=left.stream.resume_interval.min,
        what=lambda: f"pending messages; polls: {polls}",
    )
    for post in second.wire.posts("stream/poll"):
        # Answered on its own SSE response, which carries nothing but the answer.
        assert post.content_type.startswith("text/event-stream"), post.describe()
        assert [m.get("id") for m in post.messages()] == [post.sent["id"]], post.describe()


async def resume(second: StreamsConnection, left: LeftCall) -> str:
    """Step 3: ``stream/resume`` from the acknowledged event; returns the tool result's id."""
    event_ids = EventIds()
    tap_start = len(second.tap.messages)
    resumed = await second.session.send_request(
        StreamResumeRequest(params=ref(left.stream, left.acknowledged_id)),
        AnyResult,
        metadata=ClientMessageMetadata(on_resumption_token_update=event_ids),
    )
    post = last_post(second.wire, "stream/resume")
    tool_result = {"content": [{"type": "text", "text": f"done {STEPS}"}], "isError": False}
    unacknowledged = [
        progress_message(left.progress_token, p) for p in range(LEAVE_AFTER + 1, STEPS + 1)
    ]

    # The wire: the unacknowledged messages, the tool result under the ORIGINAL tools/call
    # id, notifications/stream/end, then {} for the resume. The SDK stops reading after the
    # first response, so the last two are in the wire log only when they came in the same
    # read; what was read must be a prefix of the whole, through the tool result at least.
    expected = [
        *unacknowledged,
        response(left.call_id, tool_result),
        stream_end(left.stream),
        response(post.sent["id"], {}),
    ]
    on_wire = post.messages()
    result_at = len(unacknowledged)
    assert len(on_wire) > result_at, post.describe()
    assert on_wire == expected[: len(on_wire)], post.describe()
    # The stream's messages keep their original event ids: the acknowledged event's stream,
    # numbered on from it with no gap.
    replayed = [e for e in post.events if e.message is not None][: result_at + 2]
    ack_stream, ack_seq = position(left.acknowledged_id)
    assert [position(e.id) for e in replayed] == [
        (ack_stream, ack_seq + 1 + n) for n in range(len(replayed))
    ], post.describe()
    result_event_id = replayed[result_at].id
    assert result_event_id is not None

    # The SDK: each replayed message once, in order, then the tool result relabelled with
    # the resume's id, which is also what send_request returned (see the module docstring).
    through_sdk = second.tap.since(tap_start)
    assert through_sdk == [*unacknowledged, response(post.sent["id"], tool_result)], post.describe()
    assert resumed.wire() == tool_result
    assert event_ids.ids[-1] == result_event_id, (event_ids.ids, post.describe())
    return result_event_id


async def resume_the_tail(second: StreamsConnection, left: LeftCall, result_event_id: str) -> str:
    """Step 3b: resume from the tool result: ``notifications/stream/end``, then ``{}``.

    Returns the event id of ``notifications/stream/end``."""
    tap_start = len(second.tap.messages)
    tail = await second.session.send_request(
        StreamResumeRequest(params=ref(left.stream, result_event_id)), AnyResult
    )
    post = last_post(second.wire, "stream/resume")
    expected = [stream_end(left.stream), response(post.sent["id"], {})]
    assert tail.wire() == {}
    assert post.messages() == expected, post.describe()
    assert second.tap.since(tap_start) == expected
    end_event = next(e for e in post.events if e.message is not None)
    stream_of, seq = position(result_event_id)
    assert position(end_event.id) == (stream_of, seq + 1), post.describe()
    await eventually(lambda: second.ends, timeout=SETTLE_S, what="notifications/stream/end")
    assert [e.stream_id for e in second.ends] == [left.stream.stream_id]
    assert end_event.id is not None
    return end_event.id


async def poll_completed(second: StreamsConnection, left: LeftCall, end_event_id: str) -> None:
    """Step 3c: with everything acknowledged the stream is completed and nothing pending."""
    done = await second.session.send_request(
        StreamPollRequest(params=ref(left.stream, end_event_id)), StreamPollResult
    )
    assert (done.status, done.pending_messages, done.has_request, done.has_error) == (
        "completed",
        False,
        False,
        False,
    ), done


async def test_poll_and_resume_with_a_wrong_token_are_refused(
    server_factory: ServerFactory,
) -> None:
    async with server_factory.start(STREAMS_CONFIG) as server:
        with anyio.fail_after(DEADLINE_S):
            async with streams_client(server.url) as conn:
                result = await conn.session.call_tool("echo", {"text": "hi"})
                assert not result.is_error
                await eventually(
                    lambda: conn.creates, timeout=SETTLE_S, what="notifications/stream/create"
                )
                stream = conn.creates[0].stream
                wrong = stream.resume_token[::-1]
                assert wrong != stream.resume_token

                with pytest.raises(MCPError) as refused_poll:
                    await conn.session.send_request(
                        StreamPollRequest(params=ref(stream, None, token=wrong)), StreamPollResult
                    )
                tap_start = len(conn.tap.messages)
                with pytest.raises(MCPError) as refused_resume:
                    await conn.session.send_request(
                        StreamResumeRequest(params=ref(stream, None, token=wrong)), AnyResult
                    )
                after_refused_resume = conn.tap.since(tap_start)
                unknown_ref = StreamRefParams(
                    stream_id="no-such-stream", resume_token=stream.resume_token
                )
                with pytest.raises(MCPError) as unknown:
                    await conn.session.send_request(
                        StreamPollRequest(params=unknown_ref), StreamPollResult
                    )
                # The right token still works. The call is over, and with no lastEventId
                # nothing of it counts as acknowledged.
                poll = await conn.session.send_request(
                    StreamPollRequest(params=ref(stream, None)), StreamPollResult
                )
                wire = conn.wire.describe()

    for refused in (refused_poll.value, refused_resume.value):
        assert (refused.code, refused.data) == (INVALID_PARAMS, {"reason": "invalid_token"}), (
            f"{refused.code} {refused.message} {refused.data}\n{wire}"
        )
    assert [m.get("error", {}).get("data") for m in after_refused_resume] == [
        {"reason": "invalid_token"}
    ], f"a refused resume delivered more than its error: {after_refused_resume}"
    assert (unknown.value.code, unknown.value.data) == (
        INVALID_PARAMS,
        {"reason": "unknown_stream"},
    ), wire
    assert (poll.status, poll.pending_messages, poll.has_error) == ("completed", True, False)
